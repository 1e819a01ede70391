"""The HTTP client of rigctl and the doctor: JSON or text read from an exporter,
Prometheus or Grafana within one deadline, and the answers' shapes checked before
anything prints them."""
