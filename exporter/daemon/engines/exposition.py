"""A fast parse path for Prometheus text exposition that reads only the wanted families.

prometheus_client's parser walks every character of every line in Python and takes
about 200 ms for the 1,121-line 0.5.23 capture on the loaded 2-core test machine
(docs/performance.md#the-exposition-parser); the stall tracker
reads a 1,000–3,000-line exposition 4 times a second. This parser splits the body
into lines in C, skips every line outside a wanted family after a one-character
test, and parses the few wanted samples with one regular expression each. When only
a few families are wanted (the tracker's), it first finds each family's header with
str.find and scans just those blocks.

For the families it returns it agrees with `prometheus_client.parser.
text_string_to_metric_families` (tests/daemon/engines/test_exposition_property.py): it
follows the same grouping rules (a family starts at `# HELP` or `# TYPE`, takes the
sample names its type allows and ends at the first sample it does not) and the same
counter munging. Two deliberate differences, both about text the engines never send:
a malformed line inside a wanted family is skipped and counted (prometheus_client
raises and loses the whole body), and timestamps are not kept.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field

# Sample names each type allows after the family name (prometheus_client/parser.py).
_ALLOWED_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
# A quoted label value, as an unrolled loop (no per-character alternation: ~5x faster).
_VALUE = r'"[^"\\]*(?:\\.[^"\\]*)*"'
# name, optional {labels} (a label value may hold '}' or spaces inside its quotes),
# then the value and an optional timestamp.
_SAMPLE = re.compile(
    rf"({_NAME})[ \t]*(?:\{{([^\"}}]*(?:{_VALUE}[^\"}}]*)*)\}})?[ \t]*(\S+)(?:[ \t]+(\S+))?[ \t]*"
)
_PAIR_SHAPE = rf"[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*{_VALUE}[ \t]*"
# The whole label text: name="value" pairs separated by commas, a trailing comma allowed.
_PAIRS_ONLY = re.compile(rf"(?:{_PAIR_SHAPE},)*(?:{_PAIR_SHAPE})?[ \t]*")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\]*(?:\\.[^"\\]*)*)"')
_ESCAPE = re.compile(r'\\[\\n"]')
_UNESCAPE = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Family:
    """One family as prometheus_client would build it (counters lose `_total`)."""

    name: str
    type: str
    samples: list[Sample] = field(default_factory=list)


@dataclass
class Exposition:
    """The wanted families found in one body, keyed by the name on their HELP/TYPE line."""

    families: dict[str, Family]
    # How many `# TYPE` lines the body had: 0 means it was not an exposition at all.
    type_lines: int
    # Lines inside wanted families that did not parse, as (family, line) pairs.
    malformed: list[tuple[str, str]]


class ParseError(ValueError):
    """One sample line that does not parse."""


# Up to this many wanted names, each family is found with str.find (in C) and only its
# own lines are scanned: the stall tracker's 4 names in a 3,000-line body.
_FIND_LIMIT = 8


def parse(text: str, wanted: Collection[str]) -> Exposition:
    """Parse the families named in `wanted` (their HELP/TYPE names, e.g. `sglang:x_total`)."""
    if len(wanted) > _FIND_LIMIT:
        return _scan(text, wanted)
    blocks, covered = [], 0
    for start, end in sorted(filter(None, (_family_block(text, name) for name in wanted))):
        if start >= covered:  # an indented next header can hide inside the block before
            blocks.append(text[start:end])
            covered = end
    found = _scan("\n".join(blocks), wanted)
    type_lines = text.startswith("# TYPE ") + text.count("\n# TYPE ")
    return Exposition(found.families, type_lines, found.malformed)


def _family_block(text: str, name: str) -> tuple[int, int] | None:
    """Where the family's first HELP/TYPE line starts, and where the next family's begins."""
    start = min(_header_at(text, "HELP", name), _header_at(text, "TYPE", name))
    if start > len(text):
        return None
    end = start
    while (end := text.find("\n# ", end + 1)) >= 0:
        line_end = text.find("\n", end + 1)
        words = text[end + 1:line_end if line_end >= 0 else None].split(None, 3)
        if len(words) >= 3 and words[1] in ("HELP", "TYPE") and words[2] != name:
            return start, end
    return start, len(text)


def _header_at(text: str, kind: str, name: str) -> int:
    """The offset of the first `# KIND name` line, or len(text) + 1 if there is none."""
    header = f"# {kind} {name}"
    at = -1
    while (at := text.find(header, at + 1)) >= 0:
        after = at + len(header)
        line_start = text.rfind("\n", 0, at) + 1
        if (after == len(text) or text[after] in " \t\n") and not text[line_start:at].strip():
            return line_start
    return len(text) + 1


def _scan(text: str, wanted: Collection[str]) -> Exposition:
    """Walk every line: a family starts at `# HELP`/`# TYPE` and ends at a foreign sample."""
    families: dict[str, Family] = {}
    malformed: list[tuple[str, str]] = []
    type_lines = 0
    name = ""  # the family a following sample line may belong to
    current: Family | None = None  # set only while inside a wanted family
    allowed: tuple[str, ...] = ()
    for line in text.split("\n"):
        if not line:
            continue
        if line[0] in "# \t":
            line = line.strip()
            if not line:
                continue
        if line[0] != "#":
            if current is None:
                continue  # not a wanted family: the line is never looked at
            try:
                sample = parse_sample(line.strip())
            except ParseError:
                malformed.append((name, line))
                continue
            if sample.name in allowed:
                current.samples.append(sample)
            else:
                # prometheus_client ends the family here and makes the line an
                # untyped singleton, which carries no type and is of no use to us.
                _finish(families, name, current)
                name, current = "", None
            continue
        parts = line.split(None, 3)
        if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
            continue
        candidate = parts[2]
        if candidate != name:
            if current is not None:
                _finish(families, name, current)
            name = candidate
            current = Family(name, "untyped") if candidate in wanted else None
            allowed = (name,)
        if parts[1] == "TYPE" and len(parts) == 4:
            type_lines += 1
            typ = parts[3].strip()
            allowed = tuple(name + s for s in _ALLOWED_SUFFIXES.get(typ, ("",)))
            if current is not None:
                current.type = typ
    if current is not None:
        _finish(families, name, current)
    return Exposition(families, type_lines, malformed)


def _finish(families: dict[str, Family], name: str, family: Family) -> None:
    # Counter munging as prometheus_client's build_metric does it.
    if family.type == "counter":
        if family.name.endswith("_total"):
            family.name = family.name[:-6]
        else:
            family.samples = [Sample(s.name + "_total", s.labels, s.value)
                              for s in family.samples]
    families.setdefault(name, family)


def parse_sample(line: str) -> Sample:
    match = _SAMPLE.fullmatch(line)
    if match is None:
        raise ParseError(f"not a sample line: {line[:120]!r}")
    sample_name, label_text, value_text, timestamp = match.groups()
    labels = parse_labels(label_text) if label_text else {}
    if timestamp is not None:
        _number(timestamp)
    return Sample(sample_name, labels, _number(value_text))


def parse_labels(text: str) -> dict[str, str]:
    # One C-level pass checks the whole text is name="value" pairs, another takes them.
    if _PAIRS_ONLY.fullmatch(text) is None:
        raise ParseError(f"bad labels: {text[:120]!r}")
    pairs = _LABEL.findall(text)
    labels = {name: _ESCAPE.sub(_unescape, value) if "\\" in value else value
              for name, value in pairs}
    if len(labels) != len(pairs):
        raise ParseError(f"duplicate label in {text[:120]!r}")
    return labels


def _unescape(match: re.Match[str]) -> str:
    return _UNESCAPE[match.group(0)]


def _number(text: str) -> float:
    # float() also takes "1_000", which the exposition format (and prometheus_client) do not.
    if "_" in text:
        raise ParseError(f"bad value {text!r}")
    try:
        return float(text)
    except ValueError:
        raise ParseError(f"bad value {text!r}") from None
