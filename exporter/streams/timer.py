"""Time the token-bearing frames of one stream: TTFT, each gap, the longest, the rate.

TTFT runs from the request sent to the first frame with a token. A gap runs between
two such frames; frames with no new token (an OpenAI role chunk, a usage chunk) end
no gap, because the client got no text. A gap still open counts only after the first
token: before it the client is waiting for its TTFT, not stalled mid-answer.

Frames and tokens are counted apart: a frame may carry several tokens (speculative
decoding accepts up to MTP+1 a step), and only the engine's own count, where the
stream reports one, says how many (`tokens`; None until it does).

Where the count comes from (`tokens_from`) decides what a rate can be in: streams
that count every token-bearing frame (`continuous_usage`: SGLang's native
meta_info, vLLM's `continuous_usage_stats`) give tokens per second over any
window; streams that count only once, at the end (`final_usage`: llama.cpp, which
ignores `continuous_usage_stats`, Anthropic's `message_delta`, Responses'
`response.completed`) give a total; streams that never count (`frames`: a proxy
that drops usage) give frames. Frames are not tokens: 2,000 vLLM tokens came in
1,993-2,000 frames, 12,000 llama.cpp tokens in about 11,900, because partial
UTF-8 is held back (docs/rigctl.md#where-the-token-counts-come-from).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TokensFrom = Literal["continuous_usage", "final_usage", "frames"]


@dataclass(frozen=True)
class StreamTiming:
    ttft_seconds: float | None
    gaps_seconds: tuple[float, ...]  # empty unless the timer keeps them
    gap_count: int
    max_gap_seconds: float | None
    #: Frames that carried tokens.
    frames: int
    #: Tokens generated, as the stream reported them; None if it never did.
    tokens: int | None
    #: Decode only: the tokens after the first frame over the time they took (None
    #: where the stream does not count its tokens frame by frame).
    decode_tokens_per_second: float | None
    tokens_from: TokensFrom = "frames"


@dataclass
class GapTimer:
    sent_at: float
    #: The probe and the bench keep every gap; the tap only counts them (bounded memory).
    keep_gaps: bool = True
    frames: int = 0
    tokens: int | None = None
    first_at: float | None = None
    last_at: float | None = None
    first_tokens: int | None = None
    last_tokens: int | None = None
    #: Token-bearing frames that came before the stream had counted anything.
    uncounted_frames: int = 0
    gap_count: int = 0
    max_gap: float | None = None
    gaps: list[float] = field(default_factory=list)

    def count(self, tokens: int) -> None:
        """The stream reported its cumulative token count."""
        if self.tokens is None or tokens > self.tokens:
            self.tokens = tokens

    def content(self, now: float) -> float | None:
        """A frame with tokens arrived (counted first, where it carries a count).
        Returns the gap it ended, None for the first frame."""
        self.frames += 1
        if self.tokens is None:
            self.uncounted_frames += 1
        self.last_tokens = self.tokens
        if self.last_at is None:
            self.first_at = self.last_at = now
            self.first_tokens = self.tokens
            return None
        gap = now - self.last_at
        self.last_at = now
        self.gap_count += 1
        if self.max_gap is None or gap > self.max_gap:
            self.max_gap = gap
        if self.keep_gaps:
            self.gaps.append(gap)
        return gap

    @property
    def tokens_from(self) -> TokensFrom:
        """Whether the count came with every token-bearing frame, only at the end, or never."""
        if self.tokens is None:
            return "frames"
        return "continuous_usage" if self.uncounted_frames == 0 else "final_usage"

    def open_gap(self, now: float) -> float | None:
        """How long the client has waited since its last token; None before the first."""
        return None if self.last_at is None else max(0.0, now - self.last_at)

    def timing(self, open_until: float | None = None) -> StreamTiming:
        """The stream so far; with `open_until`, the gap still open then counts in the max."""
        longest = self.max_gap
        open_gap = None if open_until is None else self.open_gap(open_until)
        if open_gap is not None and (longest is None or open_gap > longest):
            longest = open_gap
        rate = None
        if (self.first_at is not None and self.last_at is not None
                and self.last_at > self.first_at and self.first_tokens is not None
                and self.last_tokens is not None):
            rate = (self.last_tokens - self.first_tokens) / (self.last_at - self.first_at)
        return StreamTiming(
            ttft_seconds=None if self.first_at is None else self.first_at - self.sent_at,
            gaps_seconds=tuple(self.gaps),
            gap_count=self.gap_count,
            max_gap_seconds=longest,
            frames=self.frames,
            tokens=self.tokens,
            decode_tokens_per_second=rate,
            tokens_from=self.tokens_from,
        )
