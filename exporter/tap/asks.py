"""What a request through the tap asks for: a generation, and whether as a stream.

Only generation requests count as streams (docs/tap.md#what-it-measures). Most answer
a stream with SSE and are told by their response; a request that fails before its
response (the engine refused it, was down, or the client left first) is told by its
own body: `"stream": true`, or an Ollama route that streams unless told not to. The
flag is looked for in the body's bytes as they pass (an unescaped `"stream"` can only be
a key, never text inside a string), with the last bytes of each piece kept for a key
cut between two; nothing else is held.
"""

from __future__ import annotations

import re

from exporter.engines.routes import STREAMING_BY_DEFAULT, is_generation

_FLAG = re.compile(rb'"stream"\s*:\s*(true|false)')
# Enough for `"stream" : false` and a little whitespace around it.
_CARRY_BYTES = 32


class StreamAsk:
    """Whether one generation request asks for a stream, read from its body."""

    def __init__(self, path: str) -> None:
        self.streaming = path in STREAMING_BY_DEFAULT
        self.decided = False  # the flag was found
        self._carry = b""

    @classmethod
    def of(cls, method: str, path: str) -> StreamAsk | None:
        """None for a request that is no generation."""
        return cls(path) if is_generation(method, path) else None

    def feed(self, chunk: bytes) -> None:
        if self.decided:
            return
        # The seam first (a flag cut between the last piece and this one), then the piece.
        found = _FLAG.search(self._carry + chunk[:_CARRY_BYTES]) or _FLAG.search(chunk)
        if found is not None:
            self.streaming, self.decided = found.group(1) == b"true", True
        else:
            self._carry = (self._carry + chunk[-_CARRY_BYTES:])[-_CARRY_BYTES:]
