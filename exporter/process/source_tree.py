"""Whether these modules run from a checkout of the repository (its source tree, as
an editable install uses) or from an installed copy, where the generators must not
write their output into site-packages."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def in_checkout() -> bool:
    """True in the repository's tree; an installed wheel has no pyproject.toml beside
    its packages."""
    return (ROOT / "pyproject.toml").is_file()
