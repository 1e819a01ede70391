"""The /sim/ control endpoint and the server's command line."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from unittest import mock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from exporter.sim.engine.control import loopback_only
from exporter.sim.engine.state import Fault, SimEngine
from tests.daemon.engines.helpers import running_sim


def call(state: SimEngine, *steps: tuple[str, str, object]) -> list[tuple[int, dict]]:
    """Run (method, path, json body) calls against a simulated server; answers in order."""
    async def scenario():
        answers = []
        async with running_sim(state) as server, aiohttp.ClientSession() as session:
            for method, path, body in steps:
                kwargs = {} if body is None else {"data": body if isinstance(body, str)
                                                  else None, "json": None if isinstance(
                                                      body, str) else body}
                async with session.request(method, server.url + path, **kwargs) as r:
                    answers.append((r.status, await r.json()))
        return answers
    return asyncio.run(scenario())


def test_set_synthetic_load_and_faults():
    state = SimEngine()
    (status, answer), = call(state, ("POST", "/sim/set", {
        "running": 3, "queued": 2, "fault": "http_500", "evicted_tokens": None,
        "hicache_host_used_tokens": 4000}))
    assert status == 200
    assert (state.running, state.queued, state.fault) == (3, 2, Fault.HTTP_500)
    assert state.hicache_host_used_tokens == 4000
    assert answer["synthetic"]["running"] == 3


@pytest.mark.parametrize("body, reason", [
    ({"running": 1, "nonsense": 2}, "cannot set 'nonsense'"),
    ({"running": 1, "queued": -1}, "queued must be a number >= 0"),
    ({"running": 1.5}, "whole number"),
    ({"running": 1, "fault": "boom"}, "fault is one of"),
    ({"wedged": "yes"}, "true or false"),
    ("not json", "not JSON"),
])
def test_bad_set_changes_nothing(body, reason):
    state = SimEngine()
    (status, answer), = call(state, ("POST", "/sim/set", body))
    assert status == 400 and reason in answer["error"]
    assert (state.running, state.queued, state.fault) == (0, 0, Fault.NONE)


def test_requests_policy_pause_abort_restart():
    state = SimEngine(time_scale=50.0)
    answers = call(
        state,
        ("POST", "/sim/policy", {"policy": "n=4", "chunked_prefill_size": 8192}),
        ("POST", "/sim/requests", {"prompt_tokens": 1000, "max_new_tokens": 10**6,
                                   "count": 2, "cached": {"device": 500}}),
        ("POST", "/sim/pause-decode", {"seconds": 30}),
        ("GET", "/sim/state", None),
        ("POST", "/sim/abort", {"rid": "sim-1"}),
        ("POST", "/sim/abort", {"rid": "sim-1"}),
        ("POST", "/sim/requests", {"prompt_tokens": 10, "cached": {"device": 10}}),
        ("POST", "/sim/policy", {"policy": "fast"}),
        ("POST", "/sim/policy", {"enable_mixed_chunk": 1}),
        ("POST", "/sim/restart", None),
    )
    policy, submitted, paused, described, aborted, again, bad_cache, bad_name, bad_field, \
        restarted = answers
    assert policy == (200, {"policy": {
        "name": "n=4", "chunked_prefill_size": 8192, "max_consecutive_prefill_batches": 4,
        "enable_mixed_chunk": False, "prefill_decode_interval": 0,
        "max_running_requests": 4}})
    assert state.scheduler.policy.chunked_prefill_size == 8192
    assert submitted == (200, {"rids": ["sim-1", "sim-2"]})
    assert paused[0] == 200
    assert {r["rid"] for r in described[1]["requests"]} == {"sim-1", "sim-2"}
    assert described[1]["policy"]["name"] == "n=4"
    assert aborted == (200, {"aborted": ["sim-1"]})
    assert again[0] == 400
    assert bad_cache[0] == 400 and "uncached" in bad_cache[1]["error"]
    assert bad_name[0] == 400 and "unknown policy" in bad_name[1]["error"]
    assert bad_field[0] == 400
    assert restarted[0] == 200 and restarted[1]["requests"] == []
    assert state.policy.name == "n=4"  # the bad calls changed nothing


def test_wedge_stops_scheduled_tokens():
    state = SimEngine(time_scale=50.0)
    request = state.submit(100, 10**6)
    call(state, ("POST", "/sim/set", {"wedged": True}))
    tokens = request.generated
    call(state, ("GET", "/sim/state", None))
    assert state.wedged and request.generated == tokens


def test_control_answers_loopback_only():
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def status_from(peer: str, path: str) -> int:
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda name, default=None: (
            (peer, 5000) if name == "peername" else default)
        request = make_mocked_request("POST", path, transport=transport)
        return (await loopback_only(request, handler)).status

    assert asyncio.run(status_from("192.168.1.20", "/sim/restart")) == 403
    assert asyncio.run(status_from("127.0.0.1", "/sim/restart")) == 200
    assert asyncio.run(status_from("::1", "/sim/restart")) == 200
    assert asyncio.run(status_from("192.168.1.20", "/metrics")) == 200


def test_help_documents_the_control_endpoint_and_flags():
    result = subprocess.run([sys.executable, "-m", "exporter.sim.engine.server", "--help"],
                            capture_output=True, text=True, timeout=60, check=True)
    for text in ("--policy", "--time-scale", "--chunked-prefill-size", "--version",
                 "/sim/pause-decode", "/sim/requests", "loopback"):
        assert text in result.stdout
    bad = subprocess.run([sys.executable, "-m", "exporter.sim.engine.server", "--policy",
                          "n=x"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown policy" in bad.stderr
