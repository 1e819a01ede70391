"""docs/configuration.md's key tables, written from the config's fields (exporter/config.py).

Each table stands between `<!-- keys: TABLES -->` and `<!-- end keys -->`; this
rewrites what is between. `python -m rigdev.config_doc` updates the file,
`--check` exits 1 when it is stale (tests/test_config_doc.py does the same).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import msgspec

from exporter.config import TABLE_CLASSES, AgentTable, field_words
from exporter.daemon.cli import FLAGS

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
_BLOCK = re.compile(r"(<!-- keys: (?P<tables>[a-z ]+) -->\n).*?(<!-- end keys -->)", re.DOTALL)


def shown_default(field: msgspec.inspect.Field) -> str:
    words = field_words(field)
    if "default" in words.extra:
        return words.extra["default"]
    if field.required:
        return "required"
    value = field.default
    if value in (None, "", ()):
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def table(names: list[str]) -> str:
    """The Markdown table of the keys of `names` (dotted when there are several)."""
    flags = {(f.section, f.key): f.flag for f in FLAGS}
    agent, flagged = names == ["agent"], any(section in names for section, _ in flags)
    rows = ["| key | meaning |", "|---|---|"] if agent else [
        "| key | default | flag | meaning |", "|---|---|---|---|"] if flagged else [
        "| key | default | meaning |", "|---|---|---|"]
    for name in names:
        struct = AgentTable if agent else TABLE_CLASSES[name]
        for field in msgspec.inspect.type_info(struct).fields:
            key = field.encode_name if len(names) == 1 else f"{name}.{field.encode_name}"
            meaning = field_words(field).meaning
            if agent:
                rows.append(f"| `{key}` | {meaning} |")
                continue
            flag = flags.get((name, field.name))
            flag_cell = (f"`{flag}` | " if flag else " | ") if flagged else ""
            rows.append(f"| `{key}` | {shown_default(field)} | {flag_cell}{meaning} |")
    return "\n".join(rows) + "\n"


def rendered(text: str) -> str:
    return _BLOCK.sub(lambda m: m[1] + table(m["tables"].split()) + m[3], text)


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    if argv == ["--check"]:
        stale = rendered(text) != text
        if stale:
            print(f"{DOC} is stale: run .venv/bin/python -m rigdev.config_doc", file=sys.stderr)
        return int(stale)
    DOC.write_text(rendered(text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
