"""Stream timing, written once for the probe, the tap and the bench
(docs/design.md#four-views-of-a-token-gap).

A streamed response is split into SSE `data:` payloads (`sse`), each payload is
read for what it carries (`frames`), and the frames that carry new tokens are
timed (`timer`). `StreamMeter` joins the three for one response; `histogram`
holds the fixed buckets every gap and TTFT is counted in.
"""

from exporter.streams.frames import Frame, parse_frame
from exporter.streams.histogram import GAP_BUCKETS, Histogram
from exporter.streams.meter import StreamMeter
from exporter.streams.sse import DataLines
from exporter.streams.timer import GapTimer, StreamTiming, TokensFrom

__all__ = ["GAP_BUCKETS", "DataLines", "Frame", "GapTimer", "Histogram", "StreamMeter",
           "StreamTiming", "TokensFrom", "parse_frame"]
