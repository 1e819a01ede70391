"""One streamed response, fed chunk by chunk as it arrives: frames in, timing out."""

from __future__ import annotations

from exporter.streams.frames import Frame, parse_frame
from exporter.streams.sse import DEFAULT_MAX_LINE_BYTES, DataLines
from exporter.streams.timer import GapTimer


class StreamMeter:
    def __init__(self, sent_at: float, keep_gaps: bool = True,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.lines = DataLines(max_line_bytes)
        self.timer = GapTimer(sent_at, keep_gaps)
        self.done = False  # `data: [DONE]` seen
        self.error: str | None = None  # the first error frame's message
        self.cached_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.unrecognised = 0
        self.first_unrecognised = b""  # its head, for a reason to log

    def feed(self, chunk: bytes, now: float) -> list[float]:
        """Read the bytes that arrived at `now`; returns the gaps they ended."""
        gaps: list[float] = []
        for payload in self.lines.feed(chunk):
            gap = self.frame(parse_frame(payload), now, payload)
            if gap is not None:
                gaps.append(gap)
        return gaps

    def frame(self, frame: Frame, now: float, payload: bytes = b"") -> float | None:
        if not frame.recognised:
            if not self.unrecognised:
                self.first_unrecognised = payload[:80]
            self.unrecognised += 1
            return None
        if frame.done:
            self.done = True
        if frame.error is not None and self.error is None:
            self.error = frame.error
        if frame.cached_tokens is not None:
            self.cached_tokens = frame.cached_tokens
        if frame.prompt_tokens is not None:
            self.prompt_tokens = frame.prompt_tokens
        timer = self.timer
        counted = frame.completion_tokens
        carries = frame.content if frame.content is not None else (
            counted is not None and counted > (timer.tokens or 0))
        if counted is not None:  # the engine's own count, the only one taken
            timer.count(counted)
        return timer.content(now) if carries else None
