"""docs/configuration.md's key tables are the config's fields (rigdev/config_doc.py)."""

from __future__ import annotations

from rigdev.config_doc import DOC, rendered, table


def test_the_key_tables_are_not_stale() -> None:
    text = DOC.read_text()
    assert rendered(text) == text, "run: .venv/bin/python -m rigdev.config_doc"


def test_every_table_of_the_file_has_its_block() -> None:
    text = DOC.read_text()
    for tables in ("web", "engine", "agent", "gpu host health log"):
        assert f"<!-- keys: {tables} -->\n" in text


def test_a_key_shows_its_default_its_flag_and_its_words() -> None:
    rows = table(["web"]).splitlines()
    assert rows[0] == "| key | default | flag | meaning |"
    assert rows[3].startswith("| `scrape_deadline_seconds` | `4` | `--web.scrape-deadline` | ")
    assert "| `name` | required | letters" in table(["engine"])


def test_a_stale_table_is_rewritten() -> None:
    text = DOC.read_text()
    row = "| `scrape_deadline_seconds` | `4` |"
    stale = text.replace(row, row.replace("4", "5"))
    assert stale != text and rendered(stale) == text
