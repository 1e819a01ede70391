"""Prometheus recording and alerting rules for the rig, generated from exporter.thresholds,
and Alertmanager's routing for them."""

from pathlib import Path

# Package data: the routing, and beside it the templates it names (templates/*.tmpl).
ALERTMANAGER_CONFIG = Path(__file__).with_name("alertmanager.yml")
