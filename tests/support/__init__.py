"""Test-only support code shared by several test folders."""
