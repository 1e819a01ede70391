"""rig telemetry: a Prometheus exporter for a home LLM inference rig."""

__version__ = "0.1.0"
