"""What the engine says about itself, for choosing the stall tracker's signals.

The tracker chooses by feature (docs/stall-tracker.md#signals-by-feature): which
families the engine writes, which routes answer and which flags `/server_info`
reports. A version string only breaks ties and names known bugs, because the rig's
source-tree build does not name its release (docs/facts/sglang.md#versions-and-server-info):
from 0.5.7 `version.py` falls back to `0.0.0.dev0` without a generated `_version.py`,
and a setuptools-scm build between releases says `X.Y.Z.devN+g<hash>`.

Each feature sets a floor, the oldest release it could come from (read in the
wheels, docs/facts/sglang.md#families-by-release):

- `cuda_graph_passes_total`, `realtime_tokens_total`: 0.5.7;
- `http_requests_active`, the `/v1/loads` route: 0.5.8;
- `full_token_usage` (written on every scheduler log): 0.5.10;
- `0.0.0.dev0`: 0.5.7, the first `version.py` with that fallback;
- `X.Y.Z.devN`: the release before X.Y.Z, which that tree has in its history.

Only a plain release (`0.5.9`, `0.5.10.post1`) also sets a ceiling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

Release = tuple[int, int, int]

#: The oldest release each family comes from (unprefixed family names as the
#: TYPE line spells them).
FAMILY_FLOORS: dict[str, Release] = {
    "cuda_graph_passes_total": (0, 5, 7),
    "realtime_tokens_total": (0, 5, 7),
    "http_requests_active": (0, 5, 8),
    "full_token_usage": (0, 5, 10),
}
LOADS_ROUTE_FLOOR: Release = (0, 5, 8)
#: A source tree without `_version.py`: `version.py` falls back to 0.0.0.dev0 from 0.5.7.
UNBUILT_TREE_FLOOR: Release = (0, 5, 7)

_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(.*)", re.DOTALL)
_RELEASE_SUFFIX = re.compile(r"(\.?post\d+)?(\+[\w.]*)?")
_PRE_RELEASE_SUFFIX = re.compile(r"\.?(dev|rc|a|b)\d*(\+[\w.]*)?")


@dataclass(frozen=True)
class VersionClue:
    """What a version string says: a release it is (exact) or comes after (floor)."""

    exact: Release | None
    floor: Release | None
    note: str


def read_version(text: str) -> VersionClue:
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        return VersionClue(None, None, f"version {text!r} names no release")
    release: Release = (int(match[1]), int(match[2]), int(match[3]))
    rest = match[4]
    if release == (0, 0, 0):
        return VersionClue(None, UNBUILT_TREE_FLOOR,
                           f"version {text!r}: a source tree without _version.py (0.5.7 on)")
    if _RELEASE_SUFFIX.fullmatch(rest):
        return VersionClue(release, release, f"release {text}")
    if _PRE_RELEASE_SUFFIX.fullmatch(rest):
        before = _release_before(release)
        after = "" if before is None else f" after {'.'.join(map(str, before))}"
        return VersionClue(None, before, f"version {text!r}: a development build{after}")
    return VersionClue(None, None, f"version {text!r} names no release")


def _release_before(release: Release) -> Release | None:
    major, minor, patch = release
    if patch:
        return (major, minor, patch - 1)
    # X.Y.0.devN comes after every X.(Y-1).* release.
    return (major, minor - 1, 10**6) if minor else None


@dataclass(frozen=True)
class ServerFlags:
    """The `/server_info` flags that change what the signals can see."""

    mixed_chunk: bool = False
    #: The speculative algorithm (EAGLE, NEXTN, ...), "" when off: steps of several tokens.
    speculative: str = ""
    #: The scheduler logs its gauges every this many decode batches (SGLang's default 40).
    decode_log_interval: int | None = None


@dataclass(frozen=True)
class Evidence:
    version: str
    flags: ServerFlags = ServerFlags()
    #: Families seen in the engine's metrics since the exporter started.
    families: frozenset[str] = frozenset()
    #: Whether GET /v1/loads answered at start; None: not asked.
    loads_route: bool | None = None
    #: Why the HTTP in-flight count was found not to cover the streams, if it was.
    http_shortfall: str = ""
    clue: VersionClue = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "clue", read_version(self.version))

    def floor(self) -> Release | None:
        """The oldest release whose features this engine has shown."""
        floors = [FAMILY_FLOORS[f] for f in self.families if f in FAMILY_FLOORS]
        if self.clue.floor is not None:
            floors.append(self.clue.floor)
        if self.loads_route:
            floors.append(LOADS_ROUTE_FLOOR)
        return max(floors, default=None)

    def has(self, family: str) -> bool:
        """The family was seen, or the engine is at least the release that brought it."""
        floor = self.floor()
        return family in self.families or (floor is not None and floor >= FAMILY_FLOORS[family])

    def summary(self) -> str:
        """One line for the log: what the choice rests on."""
        seen = ", ".join(sorted(self.families)) or "none yet"
        loads = {None: "not asked", True: "answers", False: "does not answer"}[self.loads_route]
        flags = self.flags
        parts = [self.clue.note, f"families: {seen}", f"/v1/loads {loads}",
                 f"mixed chunk {'on' if flags.mixed_chunk else 'off'}",
                 f"speculative {flags.speculative or 'off'}"]
        if flags.decode_log_interval is not None:
            parts.append(f"decode_log_interval {flags.decode_log_interval}")
        return "; ".join(parts)
