"""The /api/health document: one set of structs (exporter/daemon/health/document.py)
that the exporter writes from, rigctl decodes with and health.schema.json is written
from."""

from __future__ import annotations

import jsonschema
import pytest

from exporter.daemon.health.document import SCHEMA_FILE, schema, schema_text
from exporter.rigctl.client.health import health_report
from exporter.rigctl.client.http import BadAnswer

CHECK = {"name": "kv_pool", "status": "warn", "value": 0.97, "threshold": 0.95,
         "unit": "ratio", "reason": "main: KV pool 97% full", "labels": {"engine": "main"},
         "alert": "RigKVPoolSaturated", "signal": "usage", "state": "pending"}
REPORT = {"status": "warn", "time": 1.7e9, "watched_seconds": 60.0, "checks": [CHECK],
          "agents": []}


def test_the_committed_schema_is_the_structs() -> None:
    assert SCHEMA_FILE.read_text() == schema_text(), (
        "run: .venv/bin/python -m exporter.daemon.health.document")


def test_the_schema_is_a_2020_12_schema_that_holds_a_report() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.Draft202012Validator(schema()).validate(REPORT)


def test_the_schema_refuses_what_the_decoder_refuses() -> None:
    validator = jsonschema.Draft202012Validator(schema())
    for bad in ({**REPORT, "status": "fine"}, {**REPORT, "time": -1},
                {**REPORT, "checks": [{**CHECK, "unit": "furlongs"}]},
                {**REPORT, "checks": [{**CHECK, "extra": 1}]}):
        assert not validator.is_valid(bad)
        if "extra" not in bad["checks"][0]:  # a reader takes a newer exporter's keys
            with pytest.raises(BadAnswer):
                health_report("u", bad)


def test_rigctl_decodes_what_the_schema_holds() -> None:
    assert health_report("u", REPORT) == REPORT


@pytest.mark.parametrize(("body", "words"), [
    ([], "u: the report is an array, not an object"),
    ({**REPORT, "checks": [{k: v for k, v in CHECK.items() if k != "unit"}]},
     "u: checks[0] has no 'unit'"),
    ({**REPORT, "checks": [{**CHECK, "labels": {"engine": 1}}]},
     "u: checks[0].labels[...] is an int, not a str"),
])
def test_a_bad_part_is_named_on_one_line(body: object, words: str) -> None:
    with pytest.raises(BadAnswer) as caught:
        health_report("u", body)
    assert str(caught.value) == words
