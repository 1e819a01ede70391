"""Split a streamed body into its SSE `data:` payloads, chunk by chunk, in bounded memory.

SGLang's native `/generate` and the OpenAI-compatible streams of SGLang and vLLM
write one `data: <json>` line per event, then a blank line, and end with
`data: [DONE]` (sglang http_server.py `stream_results`, serving_chat.py; vllm
chat_completion/serving.py). A payload is therefore taken at the end of its line,
not of its event: the time a line completes is the time its tokens arrived.

A line longer than `max_line_bytes` is dropped (and counted) instead of held:
SGLang's native frames repeat the cumulative text, so a 70K-token answer makes
lines of hundreds of KB, but no frame is ever megabytes.
"""

from __future__ import annotations

DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024


class DataLines:
    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self.dropped_lines = 0
        self._partial = bytearray()
        self._skipping = False  # inside an over-long line, until its newline

    def feed(self, chunk: bytes) -> list[bytes]:
        """The payloads of the `data:` lines this chunk completes (without `data:`)."""
        lines = chunk.split(b"\n")  # one C call: usually one frame's line and a blank one
        rest = lines.pop()  # after the last newline: the start of a line still open
        if lines:
            if self._skipping:
                self._skipping = False
                lines[0] = b""
            elif self._partial:
                self._partial += lines[0]
                lines[0] = bytes(self._partial)
                self._partial.clear()
        self._hold(rest)
        return [line[5:].strip() for line in lines if line.startswith(b"data:")]

    def _hold(self, rest: bytes) -> None:
        if self._skipping or not rest:
            return
        if len(self._partial) + len(rest) > self.max_line_bytes:
            self._partial.clear()
            self._skipping = True
            self.dropped_lines += 1
        else:
            self._partial += rest
