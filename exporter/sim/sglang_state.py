"""The simulated SGLang engine's state: what scenarios set and the server renders.

Time comes from an injectable clock, so a test can drive a 47 s decode pause in
simulated time. Decode batches advance at `decode_batches_per_second` while
requests run and decode is not paused. Scheduler-side values are per DP group (each
DP group reports them, as each scheduler does); tokenizer-side counters are totals.
Counters left at None, and missing keys of the keyed counters, are families or
children SGLang has not created yet, so they are absent from /metrics (reference
§2.2).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum


class Fault(StrEnum):
    """How /metrics misbehaves."""

    NONE = "none"
    REFUSE = "refuse"  # close the connection without an answer: off the network
    HTTP_500 = "http_500"
    HANG = "hang"  # never answer
    SLOW_BODY = "slow_body"  # trickle the body over `slow_body_seconds`
    TRUNCATED = "truncated"  # promise a Content-Length, send half, close
    CUT_MID_LINE = "cut_mid_line"  # a complete response whose text stops mid-line
    GARBAGE = "garbage"  # UTF-8 text that is not an exposition
    NON_UTF8 = "non_utf8"
    HUGE = "huge"  # a 50 MB body
    MALFORMED = "malformed"  # broken lines inside families the exporter reads


@dataclass
class StreamScript:
    """How a streaming /generate answers: frame timing, tokens per frame, a hang."""

    first_token_seconds: float = 0.05
    #: Gap before each frame after the first; frames past the list use `default_gap_seconds`.
    gaps_seconds: list[float] = field(default_factory=list)
    default_gap_seconds: float = 0.02
    tokens_per_frame: int = 1
    #: Stop sending (without closing) after this many frames; None: finish normally.
    hang_after_frames: int | None = None


@dataclass
class SimEngine:
    clock: Callable[[], float] = time.monotonic
    version: str = "0.5.23"
    model: str = "Qwen3.8-27B-W4A16"
    tp_size: int = 2
    dp_size: int = 1
    #: Older servers have only /get_server_info.
    legacy_info_only: bool = False
    hicache_storage: str | None = None  # e.g. "file": L3 families appear

    queued: int = 0
    token_usage: float = 0.0
    max_total_num_tokens: int = 219005
    prefill_batches: int = 0
    prompt_tokens: dict[str, float] = field(default_factory=dict)  # by is_streaming
    generation_tokens: dict[str, float] = field(default_factory=dict)  # by is_streaming
    cached_tokens: dict[str, float] = field(default_factory=dict)  # by cache_source
    hicache_host_used_tokens: float | None = None
    hicache_host_total_tokens: float | None = None
    evicted_tokens: float | None = None
    loaded_back_tokens: float | None = None
    backed_up_tokens: float | None = None
    storage_prefetched_tokens: float | None = None
    storage_written_tokens: float | None = None
    retracted_requests: float | None = None

    fault: Fault = Fault.NONE
    slow_body_seconds: float = 30.0
    cut_at_fraction: float = 0.6  # where CUT_MID_LINE stops the body
    stream: StreamScript = field(default_factory=StreamScript)

    def __post_init__(self) -> None:
        self._running = 0
        self._decode_rate = 30.0
        self._decode_batches = 0.0
        self._advanced_to = self.clock()
        self._paused_until = float("-inf")

    # Decode progress integrates over time, so changes go through methods that
    # first bring it up to now.

    @property
    def running(self) -> int:
        return self._running

    @running.setter
    def running(self, value: int) -> None:
        self._advance()
        self._running = value

    @property
    def decode_batches_per_second(self) -> float:
        return self._decode_rate

    @decode_batches_per_second.setter
    def decode_batches_per_second(self, value: float) -> None:
        self._advance()
        self._decode_rate = value

    def pause_decode(self, seconds: float) -> None:
        """No decode batch for `seconds` from now (a long prefill holding the GPU)."""
        self._advance()
        self._paused_until = self.clock() + seconds

    def decode_batches(self) -> int | None:
        """The decode-batch counter; None until the first decode batch (family absent)."""
        self._advance()
        return int(self._decode_batches) if self._decode_batches >= 1 else None

    def restart(self) -> None:
        """The engine restarts: every counter is gone until touched again."""
        self._advance()
        self._decode_batches = 0.0
        self._paused_until = float("-inf")
        self.prefill_batches = 0
        for keyed in (self.prompt_tokens, self.generation_tokens, self.cached_tokens):
            keyed.clear()
        for name in ("evicted_tokens", "loaded_back_tokens", "backed_up_tokens",
                     "storage_prefetched_tokens", "storage_written_tokens",
                     "retracted_requests"):
            setattr(self, name, None)

    def finish_request(self, prompt_tokens: int, generated_tokens: int,
                       streaming: bool = True) -> None:
        key = "true" if streaming else "false"
        self.prompt_tokens[key] = self.prompt_tokens.get(key, 0) + prompt_tokens
        self.generation_tokens[key] = self.generation_tokens.get(key, 0) + generated_tokens

    def server_info(self) -> dict[str, object]:
        """The fields of SGLang's /server_info the exporter reads (reference §7.2)."""
        return {
            "model_path": f"/models/{self.model}",
            "served_model_name": self.model,
            "tp_size": self.tp_size,
            "dp_size": self.dp_size,
            "enable_hierarchical_cache": self.hicache_host_total_tokens is not None,
            "hicache_storage_backend": self.hicache_storage,
            "enable_mixed_chunk": False,
            "chunked_prefill_size": 8192,
            "schedule_policy": "fcfs",
            "decode_log_interval": 40,
            "internal_states": [{}] * self.dp_size,
            "version": self.version,
        }

    def _advance(self) -> None:
        now = self.clock()
        start, self._advanced_to = self._advanced_to, now
        if now <= start or self._running <= 0:
            return
        active = now - max(start, min(now, self._paused_until))
        self._decode_batches += self._decode_rate * max(0.0, active)
