"""rigctl health's agents section: printed from /api/health's `agents`, and a malformed
one is a bad answer (one line, exit 3), never a traceback."""

from __future__ import annotations

import io

import pytest

from exporter.rigctl.client.health import health_report
from exporter.rigctl.client.http import BadAnswer
from exporter.rigctl.commands.health import print_agents

AGENT = {"engine": "main", "agent": "analyst", "streams": 1,
         "in_flight": [{"age_seconds": 700.0, "waiting": False, "tokens": 5000,
                        "open_gap_seconds": 47.2, "bounded": False}],
         "longest_request_seconds": 700.0, "longest_first_token_wait_seconds": 0.0,
         "last_prompt_tokens": 182004, "context_ratio": 0.9257, "max_gap_seconds": 47.2,
         "starved_seconds": {"creative": 47.2, "none": 1.5}, "requests": 12,
         "unbounded_requests": 3}
IDLE = {**AGENT, "agent": "other", "streams": 0, "in_flight": [], "requests": 0,
        "starved_seconds": {}}
REPORT = {"status": "ok", "time": 1.7e9, "watched_seconds": 60.0, "checks": []}


def test_one_line_per_agent_that_sent_anything():
    out = io.StringIO()
    print_agents([AGENT, IDLE], out)
    lines = out.getvalue().strip().splitlines()
    assert lines[0] == "agents (stream tap)" and len(lines) == 3
    assert lines[2].split()[:2] == ["analyst", "main"]
    assert lines[2].endswith("creative 47.2 s, none 1.5 s")  # most blamed first


def test_a_report_without_agents_is_still_a_report():
    assert health_report("u", dict(REPORT)) == REPORT


@pytest.mark.parametrize("agents", [
    {}, [1], [{**AGENT, "streams": "1"}], [{**AGENT, "starved_seconds": {"b": "x"}}],
    [{**AGENT, "in_flight": [{}]}], [{k: v for k, v in AGENT.items() if k != "engine"}],
])
def test_a_malformed_section_is_a_bad_answer(agents):
    with pytest.raises(BadAnswer):
        health_report("u", {**REPORT, "agents": agents})
