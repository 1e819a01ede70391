"""Tests of the alert rules, Alertmanager routing and thresholds."""
