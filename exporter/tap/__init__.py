"""The stream tap (DESIGN §3.1): an opt-in reverse proxy in front of one engine that
times every frame of every real streamed response. `proxy` moves the bytes, `state`
folds each stream's timing into bounded aggregates, `source` runs it as `tap/<name>`.
"""

from exporter.tap.state import TapReading

__all__ = ["TapReading"]
