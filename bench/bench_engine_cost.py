"""What the stall tracker costs the engine, and itself, in each way of reading.

    .venv/bin/python bench/bench_engine_cost.py [--seconds 30]

1. Four writer processes (tokenizer, scheduler TP0 and TP1, detokenizer) write the
   0.5.23 capture's family set (tests/fixtures/engine/sglang-0.5.23-metrics-multiproc-b.txt)
   into one PROMETHEUS_MULTIPROC_DIR with prometheus_client in multiprocess mode.
2. A server process renders /metrics as SGLang does: `generate_latest` over a
   `MultiProcessCollector`, synchronously in its event loop, and counts the seconds
   it spends rendering.
3. The exporter's engine source runs against it for `--seconds` in each mode: the
   tracker alone, then with a Prometheus scrape every 5 s (`--scrape-seconds`); without and with
   `metrics_dir`.

It prints the engine's render seconds per wall second caused by the exporter, and
the tracker's own CPU share beside prometheus_client's parser reading the same body
at the same rate. Figures on a shared 2-core box are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIXTURE = ROOT / "tests" / "fixtures" / "engine" / "sglang-0.5.23-metrics-multiproc-b.txt"
# deploy/prometheus.yml's interval for the rig's job (it was 15 s; docs/alerts.md says
# why it is 5 s).
SCRAPE_SECONDS = 5.0


def _role_of(labels: dict[str, str]) -> str:
    if labels.get("tp_rank") == "1":
        return "tp1"
    if labels.get("tp_rank") == "0":
        return "tp0"
    if "pid" in labels:
        return "detokenizer"
    return "tokenizer"


def _child(metric, names: list[str], labels: dict[str, str]):  # noqa: ANN001, ANN202
    return metric.labels(**{k: labels.get(k, "") for k in names}) if names else metric


def _write(directory: str, role: str) -> None:
    """One writer process: its share of the capture's samples, through prometheus_client."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    from prometheus_client import Counter, Gauge, Histogram
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(FIXTURE.read_text()):
        mine = [s for s in family.samples if _role_of(s.labels) == role]
        if not mine:
            continue
        names = sorted({k for s in mine for k in s.labels if k not in ("le", "pid")})
        if family.type == "counter":
            metric = Counter(family.name, family.documentation, names, registry=None)
            for s in mine:
                if s.name.endswith("_total"):
                    _child(metric, names, s.labels).inc(s.value)
        elif family.type == "gauge":
            mode = "all" if role == "detokenizer" else "mostrecent"
            metric = Gauge(family.name, family.documentation, names, registry=None,
                           multiprocess_mode=mode)
            for s in mine:
                _child(metric, names, s.labels).set(s.value)
        elif family.type == "histogram":
            bounds = sorted({float(s.labels["le"]) for s in mine if s.name.endswith("_bucket")})
            metric = Histogram(family.name, family.documentation, names, registry=None,
                               buckets=bounds)
            by_child: dict[tuple, dict[float, float]] = {}
            sums: dict[tuple, float] = {}
            for s in mine:
                key = tuple(s.labels.get(k, "") for k in names)
                if s.name.endswith("_bucket"):
                    by_child.setdefault(key, {})[float(s.labels["le"])] = s.value
                elif s.name.endswith("_sum"):
                    sums[key] = s.value
            for key, cumulative in by_child.items():
                child = metric.labels(*key) if names else metric
                previous = 0.0
                for i, bound in enumerate(sorted(cumulative)):
                    child._buckets[i].inc(cumulative[bound] - previous)  # as SGLang does
                    previous = cumulative[bound]
                child._sum.inc(sums.get(key, 0.0))


def _serve(directory: str, port: int, ready) -> None:  # noqa: ANN001 - an Event
    """The engine's HTTP process: renders the SGLang way and counts its render time."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    from aiohttp import web
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)
    spent = {"seconds": 0.0, "renders": 0}

    async def metrics(request: web.Request) -> web.Response:
        started = time.perf_counter()
        body = generate_latest(registry)  # synchronously, in the event loop
        spent["seconds"] += time.perf_counter() - started
        spent["renders"] += 1
        return web.Response(body=body, content_type="text/plain")

    async def info(request: web.Request) -> web.Response:
        return web.json_response({"version": "0.5.23", "tp_size": 2,
                                  "served_model_name": "Qwen3.8-27B-W4A16"})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(spent)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/server_info", info)
    app.router.add_get("/render-stats", stats)
    ready.set()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def _stats(url: str) -> dict:
    import aiohttp
    async with aiohttp.ClientSession() as session, session.get(url + "/render-stats") as r:
        return json.loads(await r.text())


async def _run_mode(url: str, metrics_dir: str, seconds: float, scrape: bool,
                    scrape_seconds: float) -> dict:
    from exporter.config import EngineConfig
    from exporter.daemon.engines.source import EngineSource

    source = EngineSource(EngineConfig(name="main", url=url, metrics_dir=metrics_dir))
    before = await _stats(url)
    cpu0, wall0 = time.process_time(), time.monotonic()
    await source.start()
    try:
        next_scrape = wall0 + 1.0
        while time.monotonic() - wall0 < seconds:
            if scrape and time.monotonic() >= next_scrape:
                await source.read()
                next_scrape += scrape_seconds
            await asyncio.sleep(0.1)
        resolution = source.stall.resolution_seconds() if source.stall else None
    finally:
        await source.close()
    wall = time.monotonic() - wall0
    cpu = time.process_time() - cpu0
    after = await _stats(url)
    return {"render_share": (after["seconds"] - before["seconds"]) / wall,
            "renders": after["renders"] - before["renders"],
            "cpu_share": cpu / wall, "resolution": resolution, "wall": wall}


def _parser_share(url: str, polls_per_second: float = 4.0) -> float:
    """prometheus_client's parser on one body, as a CPU share at the tracker's rate."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families
    body = urllib.request.urlopen(url + "/metrics").read().decode()
    rounds = 20
    started = time.process_time()
    for _ in range(rounds):
        for _family in text_string_to_metric_families(body):
            pass
    return (time.process_time() - started) / rounds * polls_per_second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--scrape-seconds", type=float, default=SCRAPE_SECONDS,
                        help=f"a scrape every so often (default {SCRAPE_SECONDS:g})")
    args = parser.parse_args()
    from exporter.process.launch import free_port

    directory = tempfile.mkdtemp(prefix="sglang-prom-")
    context = multiprocessing.get_context("spawn")
    for role in ("tokenizer", "tp0", "tp1", "detokenizer"):
        writer = context.Process(target=_write, args=(directory, role))
        writer.start()
        writer.join()
    port = free_port()
    ready = context.Event()
    server = context.Process(target=_serve, args=(directory, port, ready), daemon=True)
    server.start()
    ready.wait(30)
    url = f"http://127.0.0.1:{port}"
    time.sleep(1.0)
    try:
        files = sorted(os.listdir(directory))
        print(f"engine: {len(files)} multiprocess files from 4 writers; /metrics rendered "
              f"by generate_latest over MultiProcessCollector")
        parser_share = _parser_share(url)
        print(f"prometheus_client's parser on this body at 4 Hz: {parser_share:.2%} CPU")
        print(f"{'mode':44s} {'engine render s/s':>17s} {'renders':>8s} "
              f"{'resolution':>10s} {'exporter CPU':>12s} {'vs parser':>9s}")
        for label, metrics_dir, scrape in (
            ("/metrics under the budget, tracker alone", "", False),
            (f"/metrics under the budget, + scrape / {args.scrape_seconds:g} s", "", True),
            ("metrics_dir (mmap files), tracker alone", directory, False),
            (f"metrics_dir (mmap files), + scrape / {args.scrape_seconds:g} s", directory, True),
        ):
            result = asyncio.run(_run_mode(url, metrics_dir, args.seconds, scrape,
                                                args.scrape_seconds))
            print(f"{label:44s} {result['render_share']:>16.3%} {result['renders']:>8d} "
                  f"{result['resolution'] or 0:>9.2f}s {result['cpu_share']:>11.2%} "
                  f"{result['cpu_share'] / parser_share:>8.3f}x")
        print("/v1/loads?include=core: not read by the tracker yet (no figures)")
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    main()
