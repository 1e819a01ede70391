"""The README and docs/: every relative link leads somewhere, the README stays a front
page, and no tracked file cites a document that a clone of the repository lacks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
# [text](target) or [text](target "title"); images too (![alt](target)).
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:

# Citations of material a user who clones the repository does not have. Each is named
# by its own pattern, written so that this file does not itself read as such a citation
# to a plain text search of the repository.
UNOPENABLE_CITATIONS = {pattern.pattern: pattern for pattern in (
    re.compile(r"\.\./sha[r]ed"),
    re.compile(r"rig[-]facts"),
    re.compile(r"anchors\.md"),
    re.compile(r"amd-gpu\.md"),
    re.compile(r"sglang-metrics\.md"),
    re.compile(r"sglang-releases\.md"),
    re.compile(r"DESIGN[ ]§"),
    re.compile(r"(?<![\w-])reference/[\w.-]"),
    re.compile(r"\breference[ ]§"),
    re.compile(r"\bissue[ ]#\d+", re.IGNORECASE),
)}
NOT_SCANNED = ("tests/fixtures/", "tests/test_docs.py")
# A citation of a docs page in code or text: docs/stall-tracker.md#stopping.
_DOCS_CITATION = re.compile(r"(?<![\w./-])(docs/[\w./-]+\.md)(?:#([\w-]+))?")


def repository_files() -> set[str]:
    """Tracked files, and new ones not ignored: what a commit of this tree would hold."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout
    return {name for name in listed.split("\0") if name and (REPO / name).is_file()}


def documents() -> list[Path]:
    """The README, the manual, and the other pages a user reads in the repository."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
            REPO / "alerts" / "RUNBOOK.md", REPO / "dashboards" / "README.md"]


def outside_fences(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: link markup and punctuation dropped, lower
    case, spaces to hyphens (letters, digits, `_` and `-` stay)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's slug, with GitHub's -1, -2 ... for repeated headings."""
    seen: dict[str, int] = {}
    for line in outside_fences(path.read_text(encoding="utf-8")):
        if (match := _HEADING.match(line)) is not None:
            slug = github_slug(match.group(1))
            seen[slug] = seen.get(slug, -1) + 1
            if seen[slug]:
                seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def relative_links(path: Path) -> list[str]:
    return [target for line in outside_fences(path.read_text(encoding="utf-8"))
            for target in _LINK.findall(_INLINE_CODE.sub("", line))
            if not _EXTERNAL.match(target)]


def broken_link(source: Path, target: str, files: set[str]) -> str | None:
    """Why `target`, linked from `source`, leads nowhere; None when it resolves."""
    path_part, _, fragment = target.partition("#")
    resolved = (source.parent / path_part).resolve() if path_part else source
    try:
        relative = resolved.relative_to(REPO).as_posix()
    except ValueError:
        return f"{target}: outside the repository"
    if relative not in files:
        return f"{target}: no file {relative} in the repository"
    if fragment and fragment not in anchors(resolved):
        return f"{target}: {relative} has no heading #{fragment}"
    return None


def test_github_slug() -> None:
    assert github_slug("gpu_metrics v1.3") == "gpu_metrics-v13"
    assert github_slug("The stall tracker's cost to the engine") == (
        "the-stall-trackers-cost-to-the-engine")
    assert github_slug("`rigctl health`") == "rigctl-health"
    assert github_slug("grafana/dashboard-linter") == "grafanadashboard-linter"
    assert github_slug("See [the tap](tap.md) first") == "see-the-tap-first"


@pytest.mark.parametrize("document", documents(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(document: Path) -> None:
    files = repository_files()
    problems = [problem for target in relative_links(document)
                if (problem := broken_link(document, target, files)) is not None]
    assert problems == []


def test_docs_exist_and_are_linked_from_the_readme() -> None:
    pages = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md"))
    assert pages, "docs/ holds no page"
    linked = {(REPO / target.partition("#")[0]).resolve().relative_to(REPO).as_posix()
              for target in relative_links(REPO / "README.md") if target.partition("#")[0]}
    assert [page for page in pages if page not in linked] == []


def test_readme_is_a_front_page() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_no_file_cites_what_a_clone_lacks() -> None:
    found = []
    for name in sorted(repository_files()):
        if name.startswith(NOT_SCANNED):
            continue
        text = (REPO / name).read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{name}:{number}: {what}: {line.strip()[:100]}"
                      for what, pattern in UNOPENABLE_CITATIONS.items() if pattern.search(line)]
    assert found == []


def test_every_citation_of_a_docs_page_resolves() -> None:
    files = repository_files()
    problems = []
    for name in sorted(files):
        if name.startswith(NOT_SCANNED) or name.endswith(".md") and name.startswith("docs/"):
            continue
        text = (REPO / name).read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for page, fragment in _DOCS_CITATION.findall(line):
                target = page + (f"#{fragment}" if fragment else "")
                if (problem := broken_link(REPO / "citation", target, files)) is not None:
                    problems.append(f"{name}:{number}: {problem}")
    assert problems == []
