"""The tap's bounded aggregates: a window of the longest gaps, the waiting marks that
blame a stall on whoever was being prefilled, and one agent's tally.

Who starved whom (docs/tap.md#who-starved-whom): the tap keeps, per `by` (an agent,
or `none` for nobody), the seconds during which `by` had a request waiting for its
first token, as a running integral. It changes slope only when a request starts or
stops waiting, and each change is a `Mark`. A stream remembers the mark current at
its last token; when its gap ends, the difference of the two integrals over the gap
is what each `by` is blamed for. That is two lookups per agent per gap, nothing per
frame, and no history: a stream holds one mark, the tap the current one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from exporter.streams import Histogram

#: `by` when no request waited for its first token during a stall.
NOBODY = "none"
OUTCOMES = ("ok", "error", "client_closed", "untimed")


@dataclass
class GapWindow:
    """The longest gap that ended in each second, over the last `seconds`."""

    seconds: float
    #: (whole second, longest gap that ended in it), oldest first, a window's worth at most.
    recent: deque[tuple[int, float]] = field(default_factory=deque)

    def note(self, now: float, gap: float) -> None:
        second = int(now)
        if self.recent and self.recent[-1][0] == second:
            if gap > self.recent[-1][1]:
                self.recent[-1] = (second, gap)
        else:
            self.recent.append((second, gap))
            self.forget(now)

    def longest(self, now: float) -> float:
        self.forget(now)
        return max((gap for _, gap in self.recent), default=0.0)

    def forget(self, now: float) -> None:
        oldest = int(now) - self.seconds
        while self.recent and self.recent[0][0] <= oldest:
            self.recent.popleft()


@dataclass(frozen=True, eq=False)
class Mark:
    """Who waits for a first token from `at` on, and per `by` the seconds up to `at`
    during which it had a request waiting (NOBODY: none did)."""

    at: float
    totals: dict[str, float]
    waiting: frozenset[str]

    def total(self, by: str, now: float) -> float:
        grows = not self.waiting if by == NOBODY else by in self.waiting
        return self.totals.get(by, 0.0) + (now - self.at if grows else 0.0)

    def then(self, now: float, waiting: frozenset[str], names: tuple[str, ...]) -> Mark:
        """The next mark: the integrals of `names` (and of whoever waits) carried to
        `now`, a new set waiting from then."""
        keep = {*names, *self.waiting, NOBODY}
        return Mark(now, {by: self.total(by, now) for by in keep}, waiting)


def blamed(since: Mark, start: float, until: Mark, end: float,
           names: tuple[str, ...]) -> dict[str, float]:
    """Per `by` of `names` (and NOBODY), the seconds of [start, end] it had a request
    waiting; `since` was the mark current at `start`, `until` is the one at `end`."""
    return {by: until.total(by, end) - since.total(by, start) for by in (*names, NOBODY)}


@dataclass
class AgentTally:
    """One agent's counts: fixed-size, plus its requests in flight."""

    name: str
    window_seconds: float
    requests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    ttft: Histogram = field(default_factory=Histogram)
    prompt_tokens: int = 0
    #: None until one of its streams reported a cached count: never an invented zero.
    cached_prompt_tokens: int | None = None
    generated_tokens: int = 0
    last_prompt_tokens: int | None = None
    unbounded_requests: int = 0
    #: By `by`: the seconds of the stalls that ended (open ones are added at a reading).
    starved: dict[str, float] = field(default_factory=dict)
    gaps: GapWindow = field(init=False)

    def __post_init__(self) -> None:
        self.gaps = GapWindow(self.window_seconds)

    def starve(self, seconds: dict[str, float]) -> None:
        for by, value in seconds.items():
            if value > 0:
                self.starved[by] = self.starved.get(by, 0.0) + value


@dataclass(frozen=True)
class FlightView:
    """One of an agent's requests in flight, for the landing page and /api/health."""

    age_seconds: float
    #: Still waiting for its first token (being prefilled, or queued).
    waiting: bool
    #: Generated so far, at least (the stream's count, else its frames).
    tokens: int
    #: Since its last token; None before the first.
    open_gap_seconds: float | None
    bounded: bool


@dataclass(frozen=True)
class AgentReading:
    """One agent at one scrape (plain data; the collector makes families of it)."""

    name: str
    requests: dict[str, int]
    streams_active: int
    prompt_tokens: int
    cached_prompt_tokens: int | None
    generated_tokens: int
    last_prompt_tokens: int | None
    ttft_buckets: tuple[tuple[str, float], ...]
    ttft_sum: float
    max_gap_seconds: float
    longest_request_seconds: float
    longest_first_token_wait_seconds: float
    unbounded_requests: int
    response_tokens_max: int
    unbounded_response_tokens_max: int
    #: By `by` (every agent name, `other` and NOBODY): seconds starved, open stalls included.
    starved_seconds: dict[str, float]
    #: Oldest first.
    in_flight: tuple[FlightView, ...] = ()
