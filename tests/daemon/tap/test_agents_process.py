"""A real rig-exporter (exporter/process/launch.py) with a tap and three agents matched three
ways, the official openai client among the callers, and a stranger: each agent's
families, the /api/health agents section, a reload that renames an agent, and no
bearer token in /metrics, /api/health, the landing page, the log or an error line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.process.launch import free_port, start_exporter
from tests.daemon.tap.standin import Script, StandIn

TOKEN = "sk-analyst-3b9e0c41d2f84a7a"
FILE_TOKEN = "sk-filed-90d1c3e5aa7b4f26"
STRANGER = "sk-stranger-5e6f7a8b9c0d1e2f"
SCRIPT = Script(shape="chat", first_token_seconds=0.01, gaps_seconds=(0.005,) * 3)


def config_text(engine_url: str, tap: str, key_file: Path, creative: str) -> str:
    return f"""
[[engine]]
name = "main"
url = "{engine_url}"
stall_tracker = false
tap_listen_address = "{tap}"

[[engine.agent]]
name = "analyst"
api_key = "{TOKEN}"
[[engine.agent]]
name = "{creative}"
header = "X-Agent: creative"
[[engine.agent]]
name = "monitor"
user = "hermes-nas"
[[engine.agent]]
name = "filed"
api_key_file = "{key_file}"
"""


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def agent_samples(text: str) -> dict[tuple[str, str, str], float]:
    return {(s.name, s.labels["agent"], s.labels.get("outcome") or s.labels.get("by", "")):
            s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith("rig_agent_")}


async def traffic(tap: str, http: aiohttp.ClientSession) -> None:
    body = {"model": "qwen", "stream": True, "max_tokens": 16,
            "stream_options": {"include_usage": True}}
    for key, kwargs in ((TOKEN, {}), (TOKEN, {}), (STRANGER, {"user": "hermes-nas"}),
                        (STRANGER, {}), (FILE_TOKEN, {})):
        client = openai.AsyncOpenAI(base_url=f"http://{tap}/v1", api_key=key, max_retries=0)
        stream = await client.chat.completions.create(
            model="qwen", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True}, **kwargs)
        async for _ in stream:
            pass
        await client.close()
    async with http.post(f"http://{tap}/v1/chat/completions", headers={"X-Agent": "creative"},
                         json={**body, "messages": [{"role": "user", "content": "c"}]}) as r:
        assert r.status == 200
        await r.read()


async def scenario(tmp_path: Path) -> dict[str, object]:
    standin = StandIn(SCRIPT)
    engine_url = await standin.start()
    tap = f"127.0.0.1:{free_port()}"
    key_file = tmp_path / "filed.key"
    key_file.write_text(FILE_TOKEN + "\n")
    os.chmod(key_file, 0o600)
    config = tmp_path / "rig.toml"
    config.write_text(config_text(engine_url, tap, key_file, "creative"))
    exporter = await asyncio.to_thread(
        start_exporter, ["--config.file", str(config), "--no-collector.gpu",
                         "--no-collector.host", "--log.level", "debug"], tmp_path)
    seen: dict[str, object] = {}
    try:
        async with aiohttp.ClientSession() as http:
            await traffic(tap, http)
            seen["metrics"] = await asyncio.to_thread(get, exporter.url + "/metrics")
            seen["health"] = await asyncio.to_thread(get, exporter.url + "/api/health")
            seen["page"] = await asyncio.to_thread(get, exporter.url + "/")
            # A reload renames the header's agent: the token's agent keeps its counts.
            config.write_text(config_text(engine_url, tap, key_file, "artist"))
            os.kill(exporter.popen.pid, signal.SIGHUP)
            deadline = time.monotonic() + 10
            while "SIGHUP: config reloaded" not in exporter.log():
                assert time.monotonic() < deadline, exporter.log()
                await asyncio.sleep(0.05)
            await traffic(tap, http)
            seen["reloaded"] = await asyncio.to_thread(get, exporter.url + "/metrics")
    finally:
        await asyncio.to_thread(exporter.stop)
        await standin.stop()
    seen["log"] = exporter.log()
    return seen


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return asyncio.run(scenario(tmp_path_factory.mktemp("agents")))


def test_each_agent_counted_under_its_name(seen):
    families = agent_samples(seen["metrics"])
    ok = {agent: families[("rig_agent_requests_total", agent, "ok")]
          for agent in ("analyst", "creative", "monitor", "filed", "other")}
    assert ok == {"analyst": 2, "creative": 1, "monitor": 1, "filed": 1, "other": 1}
    # The stand-in reports 7 prompt tokens, 3 of them cached, 4 generated, per stream.
    assert families[("rig_agent_prompt_tokens_total", "analyst", "")] == 14
    assert families[("rig_agent_cached_prompt_tokens_total", "analyst", "")] == 6
    assert families[("rig_agent_generated_tokens_total", "monitor", "")] == 4
    assert families[("rig_agent_last_prompt_tokens", "other", "")] == 7
    # Only the header's request set max_tokens.
    assert families[("rig_agent_unbounded_requests_total", "analyst", "")] == 2
    assert families[("rig_agent_unbounded_requests_total", "creative", "")] == 0
    assert {a for (_, a, _) in families} == {"analyst", "creative", "monitor", "filed", "other"}


def test_health_has_every_agent(seen):
    report = json.loads(seen["health"])
    agents = {(a["engine"], a["agent"]): a for a in report["agents"]}
    assert set(agents) == {("main", n) for n in ("analyst", "creative", "monitor", "filed",
                                                 "other")}
    assert agents[("main", "analyst")]["requests"] == 2
    assert agents[("main", "analyst")]["last_prompt_tokens"] == 7
    assert "<h2>Agents</h2>" in seen["page"]


def test_a_reload_renames_and_keeps_counts(seen):
    families = agent_samples(seen["reloaded"])
    assert families[("rig_agent_requests_total", "analyst", "ok")] == 4
    assert families[("rig_agent_requests_total", "artist", "ok")] == 1
    assert not any(agent == "creative" for (_, agent, _) in families)


def test_no_token_anywhere(seen):
    for where in ("metrics", "health", "page", "reloaded", "log"):
        text = seen[where]
        for token in (TOKEN, FILE_TOKEN, STRANGER):
            assert token not in text, where
            assert token[-12:] not in text, where


@pytest.mark.parametrize("table", [
    f'api_key = "{TOKEN} extra"',                           # not one word
    f'api_key = "{TOKEN}"\nheader = "X-Agent: {TOKEN}"',    # two matchers
    f'header = "X-Agent {TOKEN}"',                          # no colon
    f'api_keys = "{TOKEN}"',                                # an unknown key
])
def test_a_bad_table_is_one_line_without_the_token(tmp_path, table):
    config = tmp_path / "bad.toml"
    config.write_text(f'[[engine]]\nname = "main"\nurl = "http://127.0.0.1:1"\n'
                      f'[[engine.agent]]\nname = "analyst"\n{table}\n')
    result = subprocess.run([sys.executable, "-P", "-m", "exporter", "--config.file",
                             str(config)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "engine[0].agent[0]" in lines[0], result.stderr
    assert TOKEN not in result.stderr and TOKEN[-12:] not in result.stderr


def test_a_token_on_the_command_line_is_refused_unechoed():
    result = subprocess.run([sys.executable, "-P", "-m", "exporter", "--engine",
                             "main=http://127.0.0.1:1", "--engine.agent",
                             f"main=analyst,api_key={TOKEN}"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 2
    assert "api_key_file" in result.stderr and TOKEN not in result.stderr
