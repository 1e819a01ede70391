"""A real rig-exporter on a real engine of the tier, set up as a new user would (a
config file, a tap naming two agents by their API keys), and what its tests read of
it: the exposition's samples, rigctl run against it, the doctor while agents stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
from prometheus_client.parser import text_string_to_metric_families

from exporter.process.launch import ExporterProcess, free_port, start_exporter
from tests.support.checkout import REPO
from tests.support.real_engines import MODEL, RealEngine
from tests.support.rig_config import write_rig_config

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass(frozen=True)
class Rig:
    engine: RealEngine
    exporter: ExporterProcess
    tap: str  # host:port
    config: Path


@contextlib.contextmanager
def tap_rig(engine: RealEngine, workdir: Path, kind: str, keys: tuple[str, str],
            engine_keys: str = "") -> Iterator[Rig]:
    """rig-exporter on `engine` of `kind`, with a tap naming agents alpha and beta by
    their API keys `keys`; `engine_keys` holds more `[[engine]]` keys (TOML lines)."""
    tap = f"127.0.0.1:{free_port()}"
    port = free_port()
    alpha, beta = keys
    config = write_rig_config(workdir / "rig.toml", port, engine.url, engine=f"""
kind = "{kind}"
{engine_keys}
tap_listen_address = "{tap}"
[[engine.agent]]
name = "alpha"
api_key = "{alpha}"
[[engine.agent]]
name = "beta"
api_key = "{beta}"
""")
    with start_exporter(["--config.file", str(config)], workdir,
                        address=f"127.0.0.1:{port}") as exporter:
        yield Rig(engine, exporter, tap, config)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def samples(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(found: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`; fails if there is none."""
    values = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= ls]
    assert values, (name, labels)
    return sum(values)


def agent(found: Samples, family: str, name: str) -> float:
    return total(found, f"rig_agent_{family}", agent=name)


def grown(before: Samples, after: Samples, family: str, name: str) -> float:
    """How much an agent's counter grew; before its first reading the series is absent
    (nothing known yet), which counts as 0 here."""
    was = [v for (n, ls), v in before.items()
           if n == f"rig_agent_{family}" and ("agent", name) in ls]
    return agent(after, family, name) - sum(was)


def openai_client(rig: Rig, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{rig.tap}/v1", api_key=key, max_retries=0,
                         timeout=120)


def rigctl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter.rigctl", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def doctor_while_agents_stream(rig: Rig, key: str, streams: int
                               ) -> tuple[subprocess.CompletedProcess[str],
                                          dict[tuple[str, str], tuple[str, str]]]:
    """`rigctl doctor --probe --json` over 5 s while agent `key` streams `streams`
    answers of 300 tokens one after another through the tap: how it ended, and each
    check's (status, detail) by (name, subject)."""
    async def agents_stream() -> None:
        client = openai.AsyncOpenAI(base_url=f"http://{rig.tap}/v1", api_key=key,
                                    max_retries=0)
        for _ in range(streams):
            stream = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "go"}], max_tokens=300,
                stream=True, extra_body={"ignore_eos": True})
            async for _ in stream:
                pass
        await client.close()

    async def scenario() -> subprocess.CompletedProcess[str]:
        traffic = asyncio.create_task(agents_stream())
        ended = await asyncio.to_thread(
            rigctl, "doctor", "--exporter", rig.exporter.url, "--config.file",
            str(rig.config), "--watch-seconds", "5", "--probe", "--json")
        await traffic
        return ended

    ended = asyncio.run(scenario())
    report = json.loads(ended.stdout)
    statuses = {(c["name"], c["subject"]): (c["status"], c["detail"]) for c in report["checks"]}
    print("\n" + "\n".join(f"{k}: {v}" for k, v in statuses.items()))
    return ended, statuses
