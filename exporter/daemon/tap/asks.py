"""What a request through the tap asks for: a generation, whether as a stream, whether
bounded, and on whose behalf (its OpenAI `user`).

Only generation requests count as streams (docs/tap.md#what-it-measures). Most answer
a stream with SSE and are told by their response; a request that fails before its
response (the engine refused it, was down, or the client left first) is told by its
own body: `"stream": true`, or an Ollama route that streams unless told not to.

The body is read as it passes, without decoding the JSON: in JSON an unescaped quote
never occurs inside a string, so `"stream":`, `"user":` or `"max_tokens":` can only
be keys. Each is looked for until found, with the last bytes of each piece kept for
a key cut between two; nothing else is held. A request is bounded when it names a
limit with a number (`max_tokens`, `max_completion_tokens`, SGLang's `max_new_tokens`
in `sampling_params`, llama.cpp's `n_predict`); a `null` is no limit. A key of the
same name nested elsewhere (a tool's JSON schema has an object there, not a number
or a string) is not taken.
"""

from __future__ import annotations

import re

from exporter.config import AGENT_USER_MAX_CHARS
from exporter.daemon.engines.routes import STREAMING_BY_DEFAULT, is_generation

_FLAG = re.compile(rb'"stream"\s*:\s*(true|false)')
# llama.cpp's native routes take `n_predict` (-1, no limit, is not a number here).
_LIMIT = re.compile(
    rb'"(?:max_tokens|max_completion_tokens|max_new_tokens|n_predict)"\s*:\s*[0-9]')
_USER = re.compile(rb'"user"\s*:\s*"([^"\\]{0,%d})"' % AGENT_USER_MAX_CHARS)
# Enough for the longest key and value looked for, and whitespace around them.
_CARRY_BYTES = AGENT_USER_MAX_CHARS + 64


class StreamAsk:
    """What one generation request asks, read from its body."""

    def __init__(self, path: str, wants_user: bool = False) -> None:
        self.streaming = path in STREAMING_BY_DEFAULT
        self.decided = False  # the stream flag was found
        self.bounded = False  # a limit on the tokens to generate was found
        self.user: str | None = None
        self._wants_user = wants_user
        self._carry = b""

    @classmethod
    def of(cls, method: str, path: str, wants_user: bool = False) -> StreamAsk | None:
        """None for a request that is no generation; `wants_user`: read its `user` too."""
        return cls(path, wants_user) if is_generation(method, path) else None

    def feed(self, chunk: bytes) -> None:
        if self.decided and self.bounded and not self._wants_user:
            return
        # The seam first (a key cut between the last piece and this one), then the piece.
        seam = self._carry + chunk[:_CARRY_BYTES]
        if not self.decided:
            found = _FLAG.search(seam) or _FLAG.search(chunk)
            if found is not None:
                self.streaming, self.decided = found.group(1) == b"true", True
        if not self.bounded:
            self.bounded = _LIMIT.search(seam) is not None or _LIMIT.search(chunk) is not None
        if self._wants_user:
            user = _USER.search(seam) or _USER.search(chunk)
            if user is not None:
                self.user, self._wants_user = user.group(1).decode("utf-8", "replace"), False
        self._carry = (self._carry + chunk[-_CARRY_BYTES:])[-_CARRY_BYTES:]
