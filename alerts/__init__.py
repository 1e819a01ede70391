"""Prometheus recording and alerting rules for the rig, generated from exporter.thresholds."""
