"""`rigctl bench`: the owner's scheduler experiments against a live engine.

- `starvation`: agent A decodes; B sends a fresh long prompt; how long does A wait?
- `sweep`: inter-token latency, TTFT and throughput against concurrency.
- `report`: saved results side by side, one row per label.

Both experiments time streams from the client's side with the same stream-timing
code as the probe and the tap (`exporter.streams`), so the three agree on what a
gap is.
"""
