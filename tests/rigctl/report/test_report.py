"""`rigctl report` against a real Prometheus holding two hours of two rigs' history that
no rule evaluated (night.py): every field of schema 1 against what was put in."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import jsonschema
import pytest
import yaml

from exporter.rigctl import main
from exporter.rigctl.commands.report import DEFAULT_EVAL_SECONDS
from exporter.rigctl.report import model
from exporter.rigctl.report.evaluate import MAX_BUCKETS, Grid
from exporter.rigctl.report.model import rfc3339
from exporter.rigctl.report.rules import alert_rules, parse_duration
from tests.rigctl.report import night as n
from tests.support.loopback_server import serving

SCHEMA = json.loads((Path(model.__file__).with_name("report.schema.json")).read_text())
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[n.History]:
    with n.night(tmp_path_factory.mktemp("night")) as h:
        yield h


def report(history: n.History, *args: str, start: float | None = None,
           end: float | None = None) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["report", "--prometheus", history.url,
                 "--start", str(history.start if start is None else start),
                 "--end", str(history.end if end is None else end), *args], out)
    return code, out.getvalue()


def as_json(history: n.History, *args: str, **when: float) -> dict:
    code, out = report(history, "--json", *args, **when)
    assert code == 0, out
    body = json.loads(out)
    jsonschema.validate(body, SCHEMA)
    return body


def at(seconds: float, history: n.History) -> str:
    return rfc3339(history.start + seconds)


def first_sample(after: float, holds) -> float:
    s = (int(after) // n.SCRAPE) * n.SCRAPE
    while not holds(s):
        s += n.SCRAPE
    return s


def test_the_night_field_by_field(history: n.History) -> None:
    body = as_json(history, "--rig", "night")
    assert body["schema"] == 1
    assert (body["start"], body["end"]) == (at(0, history), at(n.HOURS * 3600, history))
    assert body["step_seconds"] == 10.0  # 1,440 evaluation steps of 5 s in 720 buckets
    assert body["verdict"] == "crit"
    target = {"job": "rig", "instance": "night:9842", "rig": "night"}
    engine = {**target, "engine": "main", "kind": "sglang"}

    # The stall: RigDecodeStarvation holds while the tracker's longest stall, the
    # midpoint of its bounds, is 10 s or more: from the first scrape past 9.75 s into
    # it until the 60 s window has let it go.
    def longest(s: float) -> float:
        into = s - n.STALL_AT
        return min(into, n.STALL_SECONDS) if 0 <= into < n.STALL_SECONDS + n.STALL_WINDOW else 0
    # Each alert fires its rule's hold after its condition first holds (the holds read
    # from the generated rules, as the report reads them).
    holds = {(r.alert, r.severity): r.for_seconds for r in alert_rules([], DEFAULT_EVAL_SECONDS)}
    held = first_sample(n.STALL_AT, lambda s: longest(s) + n.RESOLUTION / 2 >= 10)
    fires = held + holds[("RigDecodeStarvation", "critical")]
    clears = first_sample(held, lambda s: longest(s) == 0)
    downclock_fires = n.DOWNCLOCK_AT + holds[("RigGpuThermalDownclock", "warning")]
    hot_fires = n.DOWNCLOCK_AT + holds[("RigGpuHot", "warning")]
    downclock_clears = n.DOWNCLOCK_AT + n.DOWNCLOCK_SECONDS
    card1 = {**target, "card": "card1"}
    expected = [
        {"alert": "RigDecodeStarvation", "severity": "critical", "labels": engine,
         "start": at(fires, history), "end": at(clears, history), "seconds": clears - fires,
         "stall_seconds": n.STALL_SECONDS + n.RESOLUTION / 2, "agent": "coder", "by": "analyst"},
        # The junction 2 °C under its limit is also RigGpuHot's (10 °C, 2 min).
        {"alert": "RigGpuHot", "severity": "warning", "labels": {**card1, "sensor": "junction"},
         "start": at(hot_fires, history), "end": at(downclock_clears, history),
         "seconds": downclock_clears - hot_fires},
        # The 10 min critical rule never held: 9 min.
        {"alert": "RigGpuThermalDownclock", "severity": "warning",
         "labels": {**card1, "clock": "sclk"},
         "start": at(downclock_fires, history), "end": at(downclock_clears, history),
         "seconds": downclock_clears - downclock_fires},
        # Only ALERTS knows it (no CPU temperature in the TSDB): the union keeps it.
        {"alert": "RigCpuHot", "severity": "warning", "labels": {**target, "sensor": "Tctl"},
         "start": at(n.CPU_HOT_AT, history), "end": at(n.CPU_HOT_AT + n.CPU_HOT_SECONDS, history),
         "seconds": n.CPU_HOT_SECONDS},
    ]
    got = [{k: v for k, v in i.items() if k != "summary"} for i in body["incidents"]]
    assert got == sorted(expected, key=lambda i: (i["start"], i["alert"]))
    assert all(i["summary"] for i in body["incidents"])

    span = n.HOURS * 3600
    agents = {a["agent"]: a for a in body["agents"]}
    for name, every, prompt, cached, out, unbounded in (n.CORE, n.ANALYST):
        count = n.requests((name, every), span)
        assert agents[name] == {
            "engine": "main", "agent": name, "requests": count,
            "prompt_tokens": count * prompt, "cached_prompt_tokens": count * cached,
            "generated_tokens": count * out, "unbounded_requests": count if unbounded else 0,
            "max_token_gap_seconds": n.STALL_SECONDS if name == "coder" else 0.0,
            "max_context_tokens": prompt,
            "starved_seconds": n.STARVED_SECONDS if name == "coder" else 0,
            "starved_by": {"analyst": n.STARVED_SECONDS} if name == "coder" else {}}

    assert body["gpus"] == [
        {"card": "card0", "max_junction_celsius": n.COOL_JUNCTION, "downclocked_seconds": 0.0,
         "power_capped_seconds": 0.0},
        {"card": "card1", "max_junction_celsius": n.HOT_JUNCTION,
         "downclocked_seconds": n.DOWNCLOCK_SECONDS, "power_capped_seconds": 0.0}]

    coder, analyst = (n.requests(a, span) for a in (n.CORE, n.ANALYST))
    hits = coder * n.CORE[3]
    assert body["engines"] == [{
        "engine": "main", "kind": "sglang", "max_decode_stall_seconds": n.STALL_SECONDS,
        "prompt_tokens": coder * n.CORE[2] + analyst * n.ANALYST[2],
        "generated_tokens": coder * n.CORE[4] + analyst * n.ANALYST[4],
        "cache_hit_tokens": {"L1": round(hits * 0.8), "L2": round(hits * 0.2), "L3": 0}}]

    assert body["blind"] == [{"source": "exporter", "start": at(n.OUTAGE_AT, history),
                              "end": at(n.OUTAGE_AT + n.OUTAGE_SECONDS, history)}]


def test_the_text_puts_the_incidents_first(history: n.History) -> None:
    code, out = report(history, "--rig", "night")
    assert code == 0
    lines = out.splitlines()
    assert "CRIT, 4 incident(s)" in lines[0] and "step 10 s" in lines[0]
    assert lines[2] == "incidents"
    assert "RigDecodeStarvation" in lines[3] and "agent coder starved by analyst" in lines[3]
    assert "blind" in out and "10 min" in out


def test_a_healthy_hour_is_ok_with_no_incident(history: n.History) -> None:
    body = as_json(history, "--rig", "quiet", start=history.end - 3600)
    assert body["verdict"] == "ok"
    assert body["incidents"] == [] and body["blind"] == []
    assert [a["starved_seconds"] for a in body["agents"]] == [0, 0]
    code, out = report(history, "--rig", "quiet", "--check", start=history.end - 3600)
    assert code == 0, out
    assert len(out.splitlines()) < 24  # one screen


def test_check_exits_with_the_verdict(history: n.History) -> None:
    assert report(history, "--rig", "night", "--check")[0] == 2
    # Around the downclock alone: warnings only.
    warn = report(history, "--rig", "night", "--check", start=history.start + 38 * 60,
                  end=history.start + 55 * 60)
    assert warn[0] == 1, warn[1]


def test_no_data_is_unknown_never_ok(history: n.History) -> None:
    body = as_json(history, "--rig", "elsewhere")
    assert body["verdict"] == "unknown"
    assert body["incidents"] == body["agents"] == body["gpus"] == body["blind"] == []
    code, out = report(history, "--rig", "elsewhere", "--check")
    assert code == 3 and "no data from the exporter" in out


def test_the_range_inside_the_outage_is_unknown(history: n.History) -> None:
    body = as_json(history, "--rig", "night", start=history.start + n.OUTAGE_AT + 60,
                   end=history.start + n.OUTAGE_AT + n.OUTAGE_SECONDS - 60)
    assert body["verdict"] == "unknown"


def test_the_cost_does_not_grow_with_the_range(history: n.History) -> None:
    def queries(end: float) -> int:
        out = report(history, "--rig", "night", end=end)[1]
        return int(out.split(" queries)")[0].rsplit(", ", 1)[1])
    # Half an hour around the stall costs what the two hours cost: one query a rule, and
    # a fixed few for ALERTS, the blind spans, the stall's details and the tables.
    rules = len(alert_rules([], DEFAULT_EVAL_SECONDS))
    assert queries(history.start + 1800) == queries(history.end) <= rules + 25
    for days in (1 / 24, 1 / 3, 7, 31):
        grid = Grid.of(0, days * 86400, DEFAULT_EVAL_SECONDS)
        assert grid.count <= MAX_BUCKETS
        assert grid.step % DEFAULT_EVAL_SECONDS == 0 and grid.step * grid.count >= days * 86400


# ------------------------------------------------------------------ bad input
def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_an_unreachable_prometheus(capsys: pytest.CaptureFixture[str]) -> None:
    from exporter.process.launch import free_port
    assert main(["report", "--prometheus", f"http://127.0.0.1:{free_port()}", "--since", "1h"],
                io.StringIO()) == 3
    assert "cannot query Prometheus" in one_line(capsys)


@pytest.mark.parametrize("body", [
    b"not json",
    b'{"status": "success", "data": {"resultType": "vector", "result": []}}',
    b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {},'
    b' "values": [["x"]]}]}}',
    b'{"status": "error", "error": "bad_data"}',
])
def test_a_malformed_answer(body: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with serving(HTTPServer(("127.0.0.1", 0), Handler)) as url:
        code = main(["report", "--prometheus", url, "--since", "1h", "--check"], io.StringIO())
    assert code == 3
    assert "rigctl report: " in one_line(capsys)


@pytest.mark.parametrize(("args", "says"), [
    (["--since", "1h", "--end", "4102444800"], "in the future"),
    (["--since", "400d"], "longer than 31 days"),
    (["--start", "2026-12-07T06:00:00Z", "--end", "2026-12-07T05:00:00Z"], "not before its end"),
    (["--start", "yesterday"], "RFC 3339"),
    (["--since", "8 hours"], "duration"),
])
def test_a_bad_range(args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["report", "--prometheus", "http://127.0.0.1:9", *args], io.StringIO())
    except SystemExit as exc:  # argparse's, for a flag it cannot parse
        code = exc.code
    assert code == 3
    assert says in one_line(capsys)


# ------------------------------------------------------------------ one source each
def test_the_default_step_is_the_deploys_evaluation_interval() -> None:
    config = yaml.safe_load((ROOT / "deploy/prometheus.yml").read_text())
    assert parse_duration(config["global"]["evaluation_interval"]) == DEFAULT_EVAL_SECONDS


@pytest.mark.parametrize(("definition", "cls"), [
    ("agent", model.Agent), ("gpu", model.Gpu), ("engine", model.Engine)])
def test_the_schema_names_the_models_fields(definition: str, cls: type) -> None:
    fields = [f.name for f in dataclasses.fields(cls)]
    assert SCHEMA["$defs"][definition]["required"] == fields
    assert list(SCHEMA["$defs"][definition]["properties"]) == fields


def test_a_range_off_the_evaluation_grid_reads_the_same(history: n.History) -> None:
    # Subquery points fall on multiples of the step: the range ends on the one before.
    on_grid = as_json(history, "--rig", "night")
    off_grid = as_json(history, "--rig", "night", end=history.end + 2.5)
    assert off_grid == on_grid
