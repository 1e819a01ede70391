"""The rig checks itself (`rigctl doctor`): does the rig hold what the exporter assumes?

Beside the health checks, which judge the rig against the alert thresholds, the
doctor judges the exporter's assumptions, one module per concern: `engine.py`
(version and stall plan, decode progress, metrics_dir, traffic around the tap),
`gpu.py` (cards, gpu_metrics, dpm tables, the energy unit, critical limits),
`host.py` (PSI, swap), `prometheus.py` and `grafana.py`.

Where each reads: what the exporter exports, from its /metrics, watched over a few
seconds (`watch.py`), so a check sees what the alerts see and costs the engine no
more than a scrape does; what it does not export (a card's gpu_metrics revision,
why a pp_dpm table did not parse, which pids wrote metrics_dir), from the files on
the rig host, through the exporter's own reader classes and its config
(`--config.file`). No reader is copied, and the exporter needs no new endpoint.
"""
