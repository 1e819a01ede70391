"""Real SGLang (0.5.23 for the CPU, docs/testing.md#sglang-on-the-cpu) under a real
rig-exporter: the collector on its live /metrics, the stall tracker on its
multiprocess files and on /metrics against A's client-side gap with three scheduler
flag sets, the tap on /generate, /v1/completions and /v1/chat/completions, rigctl's
bench, health, doctor and probe, and the simulated SGLang held to it.

SGLang starts once per flag set (module-scoped, about 30 s each on one core). The
default flags' engine is a restart: a first SGLang is killed mid-stream into the same
PROMETHEUS_MULTIPROC_DIR, whose dead pids' files stay beside the second's, as on a
rig that reuses the directory.

B's fresh prompt is 12,288 tokens: three of SGLang's 4,096-token chunks, 6-10 s of
prefill on this CPU's torch_native attention (each chunk slower than the last), long
enough for the tracker's poll spacing over /metrics, short enough for the tier.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.daemon.engines.mapping import SGLANG, Rule
from exporter.daemon.engines.source import EngineSource
from exporter.daemon.engines.stall.readers import BODY_REUSE_SECONDS, MultiprocReader
from tests.support.real_engines import (
    CONTEXT_TOKENS,
    MODEL,
    RealEngine,
    Solo,
    Timeline,
    agent_session,
    agent_stream,
    sglang_server,
    solo_exporter,
    token_ids,
)
from tests.support.real_rig import (
    Rig,
    Samples,
    doctor_while_agents_stream,
    get,
    grown,
    openai_client,
    rigctl,
    samples,
    tap_rig,
    total,
)
from tests.support.sim_starvation import a_gaps_in_the_scheduler

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(900)]

ALPHA = "sk-sglang-alpha-51e0b7c2"
BETA = "sk-sglang-beta-9d3a6f14"
DEFAULT: tuple[str, ...] = ()
MIXED = ("--enable-mixed-chunk",)
INTERVAL = ("--prefill-decode-interval", "1")
FLAG_SETS = {"default": DEFAULT, "mixed-chunk": MIXED, "interval=1": INTERVAL}
CHUNK_TOKENS = 4096  # SGLang's chunked_prefill_size on the CPU
B_PROMPT_TOKENS = 3 * CHUNK_TOKENS
A_PROMPT_TOKENS = 16
#: More than A decodes through B's prefill (about 90 tok/s), within the context.
A_TOKENS = 8000
#: A gap of A's longer than this is a stop, not decode's cadence (7-11 ms a token, and
#: a loaded box's hiccups of up to 0.2 s); the shortest chunk's stop is 0.7 s.
STOP_SECONDS = 0.3
#: The client's gap and the tracker's bounds are read at different places: the frame
#: leaves SGLang's tokenizer process after the scheduler's counters moved, and crosses
#: the tap.
EDGE_SECONDS = 0.3


def flag_sets(*names: str) -> list:
    return [pytest.param(FLAG_SETS[name], id=name) for name in names]


#: The tests of the default flags' engine (the restarted one): one engine for them all.
on_the_default_engine = pytest.mark.parametrize("sglang", flag_sets("default"), indirect=True)


@pytest.fixture(scope="module")
def sglang(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealEngine]:
    flags = tuple(request.param)
    workdir = tmp_path_factory.mktemp("sglang")
    metrics_dir = workdir / "prometheus-multiproc"
    if flags == DEFAULT:
        _leave_a_dead_engines_files(workdir, metrics_dir)
    with sglang_server(flags, workdir, metrics_dir) as engine:
        yield engine


def _leave_a_dead_engines_files(workdir: Path, metrics_dir: Path) -> None:
    """Start SGLang into `metrics_dir`, kill its whole process tree while a stream
    decodes: its files stay, with a request running and one HTTP stream in flight."""
    with sglang_server(DEFAULT, workdir, metrics_dir) as first:
        body = json.dumps({"input_ids": token_ids(16, random.Random(3)),
                           "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True},
                           "stream": True}).encode()
        request = urllib.request.Request(first.url + "/generate", body,
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as stream:
            for _ in range(50):  # decoding for a while: the gauges have said so
                stream.readline()
            time.sleep(1.0)
            first.process.signal_group(signal.SIGKILL)
        first.process.popen.wait(30)


@pytest.fixture(scope="module")
def rig(sglang: RealEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """rig-exporter on the engine as a new user sets it up: kind sglang, metrics_dir,
    a tap naming two agents by their API keys."""
    with tap_rig(sglang, tmp_path_factory.mktemp("rig"), "sglang", (ALPHA, BETA),
                 f'metrics_dir = "{sglang.metrics_dir}"') as rig:
        yield rig


def _upstream_value(engine: Samples, rule: Rule) -> dict[str, float] | None:
    """What the rule's family should read from SGLang's own samples, per value of the
    rule's label (a cache tier, a stage; "" where it has none): the first source SGLang
    exposes, its samples that match
    the rule's labels added up (max for a ratio). Written here from the table's
    declared meaning, not from the collector's code. None: SGLang has no source."""
    for source in rule.sources:
        names = {f"sglang:{source.name}"}
        if rule.type == "histogram":
            names = {f"sglang:{source.name}_count"}
        found = [(dict(ls), v) for (n, ls), v in engine.items() if n in names
                 and all(re.fullmatch(rx, dict(ls).get(k, "")) for k, rx in source.where.items())]
        if not found:
            continue
        by_tier: dict[str, list[float]] = {}
        for labels, value in found:
            tier = source.fixed_tier or ""
            if source.tier_label and not source.tiers:  # the upstream value, as it is
                tier = labels.get(source.tier_label, "")
            elif source.tier_label:
                tier = next((t for rx, t in source.tiers
                             if re.fullmatch(rx, labels.get(source.tier_label, ""))), "?")
            by_tier.setdefault(tier, []).append(value)
        pick = max if rule.combine == "max" else sum
        return {tier: pick(values) for tier, values in by_tier.items()}
    return None


@on_the_default_engine
def test_the_collector_reads_every_mapped_family_as_sglang_counts(rig: Rig) -> None:
    client = openai.OpenAI(base_url=f"{rig.engine.url}/v1", api_key="none", max_retries=0)
    client.completions.create(model=MODEL, prompt="warm the counters " * 40, max_tokens=8,
                              stream=False)
    client.completions.create(model=MODEL, prompt="warm the counters " * 40, max_tokens=8,
                              stream=True)  # a prefix-cache hit, streamed
    # A scrape serves a body younger than BODY_REUSE_SECONDS; past it, both read after
    # the last request ended, from an idle engine.
    time.sleep(BODY_REUSE_SECONDS + 1.0)
    engine = samples(get(rig.engine.url + "/metrics"))
    ours = samples(get(rig.exporter.url + "/metrics"))

    assert total(ours, "rig_source_up", source="engine/main") == 1
    info = next(dict(ls) for (n, ls) in ours if n == "rig_engine_info")
    assert (info["kind"], info["version"], info["model"]) == ("sglang", "0.5.23", MODEL)
    assert total(ours, "rig_engine_context_length_tokens", engine="main") == CONTEXT_TOKENS
    compared = []
    for rule in SGLANG.rules:
        family = f"rig_engine_{rule.family}" + ("_count" if rule.type == "histogram" else "")
        expected = _upstream_value(engine, rule)
        read = {dict(ls).get(rule.label, ""): v for (n, ls), v in ours.items()
                if n == family and ("engine", "main") in ls}
        if expected is None or rule.reading_if_positive and not any(expected.values()):
            assert not read, f"{family}: SGLang has no reading, yet it reads {read}"
            continue
        assert read == expected, family
        compared.append(rule.family)
    print(f"\ncompared with SGLang's own: {', '.join(compared)}")
    # What the CPU server has of the table: everything but HiCache, L3 and
    # speculative decoding, which do not run on the CPU.
    assert {"running_requests", "queued_requests", "kv_usage_ratio", "kv_capacity_tokens",
            "prompt_tokens_total", "generation_tokens_total", "cache_hit_tokens_total",
            "decode_batches_total", "time_to_first_token_seconds",
            "inter_token_latency_seconds"} <= set(compared)
    assert total(ours, "rig_engine_cache_hit_tokens_total", engine="main", tier="L1") > 0


@on_the_default_engine
def test_a_restart_into_the_same_metrics_dir_reads_nothing_stale(rig: Rig) -> None:
    """The killed engine left its files with a request running and a stream in flight;
    the live engine is idle. The tracker's files must say so, and no stall."""
    metrics_dir = rig.engine.metrics_dir
    assert metrics_dir is not None
    pids = {name[:-3].rpartition("_")[2] for name in os.listdir(metrics_dir)
            if name.endswith(".db")}
    live = {str(pid) for pid in _process_tree(rig.engine.process.popen.pid)}
    dead = pids - live
    assert dead and pids & live, f"{metrics_dir}: pids {pids}, live {live}"
    time.sleep(3.0)  # a dozen idle polls
    # What the files say with every pid's added in, as SGLang's own /metrics does,
    # and as the tracker reads them.
    everyone = asyncio.run(MultiprocReader(str(metrics_dir), 0.25,
                                           alive=lambda pid: True).read()).counters
    tracker = asyncio.run(MultiprocReader(str(metrics_dir), 0.25).read()).counters
    print(f"\ndead pids {sorted(dead)}, live {sorted(pids & live)}; every file: "
          f"{everyone}; the tracker's: {tracker}")
    assert everyone.http_active == 1  # the killed engine's stream, never ended
    assert tracker.http_active == 0 and tracker.running == 0
    ours = samples(get(rig.exporter.url + "/metrics"))
    assert total(ours, "rig_engine_decode_stall_tracker_up", engine="main") == 1
    assert total(ours, "rig_engine_decode_stall_seconds", engine="main") == 0
    assert total(ours, "rig_engine_decode_stalled_seconds_total", engine="main") == 0
    assert total(ours, "rig_engine_running_requests", engine="main") == 0
    plan = next(dict(ls) for (n, ls), _ in ours.items()
                if n == "rig_engine_decode_stall_plan_info")
    assert plan["plan"] == "http_in_flight", plan


def _process_tree(root: int) -> set[int]:
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = Path(f"/proc/{parent}/task/{parent}/children")
        try:
            found = {int(pid) for pid in children.read_text().split()}
        except OSError:
            continue
        frontier.extend(found - tree)
        tree |= found
    return tree


def _native_stream(rig: Rig, key: str, tokens: int) -> dict:
    """/generate streamed through the tap; the last frame's meta_info."""
    body = json.dumps({"text": "the rig keeps its agents fed", "stream": True,
                       "sampling_params": {"max_new_tokens": tokens,
                                           "ignore_eos": True}}).encode()
    request = urllib.request.Request(f"http://{rig.tap}/generate", body, {
        "Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    last = None
    with urllib.request.urlopen(request, timeout=120) as stream:
        for line in stream:
            if line.startswith(b"data: {"):
                last = json.loads(line[6:])
    assert last is not None
    return last["meta_info"]


@on_the_default_engine
def test_the_tap_counts_the_three_apis_as_their_usage_says(rig: Rig) -> None:
    before = samples(get(rig.exporter.url + "/metrics"))
    alpha = openai_client(rig, ALPHA)
    chunks = list(alpha.completions.create(
        model=MODEL, prompt="one", max_tokens=50, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        extra_body={"ignore_eos": True}))
    # A running usage on every frame, then the closing `choices: []` usage frame.
    assert all(c.usage is not None for c in chunks)
    closing = chunks[-1]
    assert closing.choices == [] and closing.usage is not None
    completion = closing.usage
    running = [c.usage.completion_tokens for c in chunks if c.choices]
    assert running == sorted(running) and running[-1] == completion.completion_tokens == 50
    chat = None
    for chunk in alpha.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "two"}], max_tokens=40,
            stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True}):
        chat = chunk.usage or chat
    assert chat is not None and chat.completion_tokens == 40
    native = _native_stream(rig, BETA, 30)
    assert native["completion_tokens"] == 30
    after = _once_the_tap_has_counted(rig, before, 3)

    def grew(family: str, name: str) -> float:
        return grown(before, after, family, name)

    assert grew("generated_tokens_total", "alpha") == 50 + 40
    assert grew("prompt_tokens_total", "alpha") == (completion.prompt_tokens
                                                    + chat.prompt_tokens)
    assert grew("generated_tokens_total", "beta") == 30
    assert grew("prompt_tokens_total", "beta") == native["prompt_tokens"]
    assert grew("requests_total", "alpha") == 2 and grew("requests_total", "beta") == 1
    outcomes = {dict(ls)["outcome"]: v - before.get((n, ls), 0.0)
                for (n, ls), v in after.items() if n == "rig_stream_requests_total"}
    assert outcomes.get("ok") == 3, outcomes


def _once_the_tap_has_counted(rig: Rig, before: Samples, streams: int) -> Samples:
    """The exporter's samples once the tap has finished `streams` more streams: it
    counts a stream as it ends, in its own process, which a busy box may run late."""
    def finished(found: Samples) -> float:  # whatever their outcome
        return sum(v for (n, ls), v in found.items() if n == "rig_stream_requests_total")

    deadline = time.monotonic() + 30.0
    while True:
        after = samples(get(rig.exporter.url + "/metrics"))
        if finished(after) - finished(before) >= streams or time.monotonic() > deadline:
            return after
        time.sleep(0.2)


@on_the_default_engine
def test_rigctl_health_reads_the_sglang_rig(rig: Rig) -> None:
    ended = rigctl("health", "--exporter", rig.exporter.url, "--json")
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert json.loads(ended.stdout)["status"] == "ok", ended.stdout


@on_the_default_engine
def test_rigctl_probe_times_an_sglang_stream(rig: Rig) -> None:
    ended = rigctl("probe", "--engine", rig.engine.url, "--kind", "sglang",
                   "--max-new-tokens", "24")
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert f"probe {rig.engine.url}: ok" in ended.stdout
    tokens = next(line for line in ended.stdout.splitlines() if "tokens  " in line)
    assert tokens.split()[-1] == "24", ended.stdout


@on_the_default_engine
def test_rigctl_doctor_judges_the_sglang_rig_while_agents_stream(rig: Rig) -> None:
    ended, statuses = doctor_while_agents_stream(rig, ALPHA, streams=4)
    assert statuses[("engines", "rig")][0] == "ok", ended.stdout
    assert statuses[("engine_version", "main")][0] == "ok", ended.stdout
    assert "0.5.23" in statuses[("engine_version", "main")][1]
    assert statuses[("decode_progress", "main")][0] == "ok", ended.stdout
    assert not [k for k, (status, _) in statuses.items() if status == "fail"], ended.stdout


@on_the_default_engine
def test_the_simulated_sglang_serves_the_real_ones_families(rig: Rig) -> None:
    """Every family the real 0.5.23 serves (after traffic: most are made at first use)
    is in the simulator's /metrics, of the same type and with the same label names."""
    real = _families(get(rig.engine.url + "/metrics"))
    sim = _families(asyncio.run(_simulated_metrics_after_traffic()))
    print(f"\nreal {len(real)} families, simulated {len(sim)}; the simulator's alone "
          f"(HiCache, L3 and other features the CPU server lacks): "
          f"{', '.join(sorted(set(sim) - set(real)))}")
    assert not set(real) - set(sim), sorted(set(real) - set(sim))
    differ = {name: (real[name], sim[name]) for name in real if real[name] != sim[name]}
    assert not differ, differ


def _families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    found = {}
    for family in text_string_to_metric_families(text):
        labels: set[str] = set()
        for sample in family.samples:
            labels |= set(sample.labels) - {"le", "quantile"}
        found[family.name] = (family.type, frozenset(labels))
    return found


async def _simulated_metrics_after_traffic() -> str:
    from aiohttp.test_utils import TestClient, TestServer

    from exporter.sim.engine.server import SimServer
    from exporter.sim.engine.state import SimEngine

    server = SimServer(SimEngine(tp_size=1, model=MODEL))
    async with TestClient(TestServer(server.app)) as client:
        # What the real one served before: requests streamed and not, a prefix-cache
        # hit, and the exporter's GET /v1/loads.
        for stream in (False, True):
            # The simulator matches cached prefixes of text prompts only.
            response = await client.post("/generate", json={
                "text": "warm the counters " * 80, "stream": stream,
                "sampling_params": {"max_new_tokens": 8}})
            await response.read()
        await (await client.get("/v1/loads", params={"include": "core"})).read()
        return await (await client.get("/metrics")).text()


def completion(prompt: list[int], tokens: int) -> dict:
    return {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "ignore_eos": True}


@pytest.mark.parametrize("sglang", flag_sets("default", "mixed-chunk", "interval=1"),
                         indirect=True)
def test_the_trackers_bounds_hold_as_gap_on_files_and_over_metrics(
        sglang: RealEngine, request: pytest.FixtureRequest) -> None:
    """A decodes, B's fresh 12,288-token prompt arrives: one exporter reads SGLang's
    multiprocess files, another its /metrics, both at once; each one's longest stall
    must hold A's longest gap between frames. The shapes of A's stops are held to the
    simulator's scheduler model with the same flags."""
    flags_name = request.node.callspec.id
    rng = random.Random(31)
    short, fresh = token_ids(A_PROMPT_TOKENS, rng), token_ids(B_PROMPT_TOKENS, rng)
    timeline = Timeline()

    async def scenario():
        async with solo_exporter(sglang, "sglang", sglang.metrics_dir) as files, \
                solo_exporter(sglang, "sglang") as scraped, agent_session() as session:
            async with timeline.watching():
                b_done = asyncio.Event()
                timeline.mark("A sent")
                a = asyncio.create_task(agent_stream(
                    session, files.url + "/v1/completions", "a", completion(short, A_TOKENS),
                    timeline, until=b_done))
                await asyncio.sleep(3.0)  # A decodes, the trackers see it move
                decoding = await files.scrape(), await scraped.scrape()
                timeline.mark("B sent")
                b = await agent_stream(session, files.url + "/v1/completions", "b",
                                       completion(fresh, 4), timeline)
                timeline.mark("B done")
                await asyncio.sleep(1.5)  # A decodes on, then hangs up
                b_done.set()
                await a
                timeline.mark("A done")
                await asyncio.sleep(3.0)  # the trackers see the stall over
                after = await files.scrape(), await scraped.scrape()
                plans = [_plan(solo) for solo in (files, scraped)]
            print("\nfiles: " + timeline.describe("a", files.stalls()))
            print("/metrics: " + timeline.describe("a", scraped.stalls()))
        return decoding, b, after, plans

    decoding, b, after, plans = asyncio.run(scenario())
    arrivals = timeline.arrivals["a"]
    b_sent, b_first = timeline.events["B sent"], timeline.arrivals["b"][0]
    # A's stops while B waited for its first token (after it, a loaded box's hiccups).
    stops = [later - earlier for earlier, later in zip(arrivals, arrivals[1:], strict=False)
             if later - earlier > STOP_SECONDS and later > b_sent and earlier < b_first]
    paused_from, paused_to = timeline.longest_pause("a")
    longest = paused_to - paused_from
    ttft = b.timer.timing().ttft_seconds
    print(f"\n{flags_name}: A's stops over {STOP_SECONDS} s: "
          f"{', '.join(f'{s:.2f}' for s in stops)}; B's TTFT {ttft:.2f} s; plans {plans}")
    for name, (before, ended) in zip(("files", "/metrics"), zip(*(decoding, after),
                                                                  strict=True), strict=True):
        low, high = (ended["rig_engine_decode_stall_max_seconds"],
                     ended["rig_engine_decode_stall_max_upper_seconds"])
        print(f"{flags_name} on {name}: A's longest gap {longest:.3f} s, the bracket "
              f"[{low:.3f}, {high:.3f}] s ({high - low:.2f} s wide), poll interval while "
              f"A decoded alone {before['rig_engine_decode_stall_resolution_seconds']:.2f} s")
        assert before["rig_engine_decode_stall_tracker_up"] == 1
        assert before["rig_engine_decode_stall_seconds"] == 0
        assert low - EDGE_SECONDS <= longest <= high + EDGE_SECONDS, name
    assert plans == ["http_in_flight", "http_in_flight"]
    assert not timeline.stood_still_within(paused_from, paused_to), \
        "the test's own event loop stood still across A's longest pause (the timeline above)"

    # The shape, real and simulated: without mixed chunk or an interval A stops once,
    # for the whole prefill; with either, once per chunk, each shorter than the whole.
    simulated = a_gaps_in_the_scheduler(flags_name, B_PROMPT_TOKENS, CHUNK_TOKENS,
                                        STOP_SECONDS)
    print(f"simulated stops: {', '.join(f'{s:.2f}' for s in simulated)}")
    if flags_name == "default":
        assert len(stops) == len(simulated) == 1
        assert stops[0] > 0.8 * ttft
    else:
        chunks = B_PROMPT_TOKENS // CHUNK_TOKENS
        assert chunks - 1 <= len(stops) <= chunks + 2, stops
        assert chunks - 1 <= len(simulated) <= chunks + 1, simulated
        assert max(stops) < 0.8 * ttft


def _plan(solo: Solo) -> str:
    """The stall plan in force, from the tracker itself."""
    (engine,) = (s for s in solo.exporter.sources if isinstance(s, EngineSource))
    assert engine.stall is not None and engine.stall.planner.plan is not None
    return engine.stall.planner.plan.name


def bench(engine: RealEngine, label: str, out: Path) -> dict:
    """One starvation run through the command line, with no --vocab-size: the bench
    finds the ids SGLang accepts by its /tokenize (SGLang dies of one outside)."""
    done = rigctl("bench", "starvation", "--engine", engine.url, "--context-tokens",
                  str(B_PROMPT_TOKENS), "--a-context-tokens", "256", "--a-max-tokens",
                  str(A_TOKENS), "--delay", "3", "--label", label, "--json", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


BENCH_RESULTS: dict[str, dict] = {}


@pytest.mark.parametrize("sglang", flag_sets("default", "mixed-chunk"), indirect=True)
def test_rigctl_bench_starvation_follows_the_mixed_chunk_flag(
        sglang: RealEngine, request: pytest.FixtureRequest,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    label = request.node.callspec.id
    out = tmp_path_factory.getbasetemp() / "sglang-bench.jsonl"
    result = BENCH_RESULTS[label] = bench(sglang, label, out)
    print(f"\n{label}: A's longest gap {result['a_max_gap_seconds']:.2f} s, B's TTFT "
          f"{result['b_ttft_seconds']:.2f} s, ids below {result['token_id_limit']} from "
          f"{result['token_ids_from']}")
    assert result["engine_kind"] == "sglang" and result["api"] == "sglang"
    assert result["engine_version"] == "0.5.23"
    assert result["context_length_tokens"] == CONTEXT_TOKENS
    assert result["engine_flags"]["enable_mixed_chunk"] is (label == "mixed-chunk")
    assert result["engine_flags"]["chunked_prefill_size"] == CHUNK_TOKENS
    assert result["token_ids_from"] == "/tokenize"
    assert 1000 < result["token_id_limit"] <= 4096  # the tiny model's vocabulary
    assert result["tokens_from"] == "continuous_usage"
    assert sglang.process.popen.poll() is None  # SGLang lives on
    if label == "default":
        assert result["a_max_gap_seconds"] > 0.8 * result["b_ttft_seconds"], result
        return
    assert result["a_max_gap_seconds"] < 0.8 * result["b_ttft_seconds"], result
    # pytest runs the parameters in order: the default flags' run is in the file.
    assert "default" in BENCH_RESULTS, "run with the default flag set too"
    ended = rigctl("bench", "report", str(out), "--compare", "default", "mixed-chunk")
    assert ended.returncode == 0, ended.stderr
    print("\n" + ended.stdout)
    rows = {line.split("  ")[0]: line for line in ended.stdout.splitlines()}
    assert "A max gap s" in rows and "B TTFT s" in rows
