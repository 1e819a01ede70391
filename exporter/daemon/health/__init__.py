"""The rig's health verdict: one check per concern, judged like the alert rules.

`/api/health` serves it and `rigctl health` prints it. Each check mirrors one
rule of `alerts/rules/*.py` (it names the alert), with the same thresholds
(`exporter/thresholds.py` and the config's `[thresholds]`). It reads the
snapshot a scrape reads, so a health request costs the engines and the driver
no more than a scrape; the windows of rates and counts come from the
exporter's own bounded history of those snapshots (`history.py`).
"""
