"""Tests of the health checks (/api/health) and their history."""
