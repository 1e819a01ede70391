"""A simulated SGLang server: /metrics, /server_info, /get_server_info, /health,
/generate, /v1/completions, /v1/chat/completions, /v1/loads, /v1/models, /tokenize, and a
control endpoint under /sim/.

/metrics is rendered from a SimEngine in SGLang 0.5.23's multiprocess format, on a
template that is the genuine capture `sglang-0.5.23-metrics-multiproc-b.txt` (TP=2)
plus the two L3 storage families of the single-process capture, both from
tests/fixtures/engine/. Families the state drives are re-rendered from it with
the template's names, labels and rank layout; the rest are served as captured. Labels
stay sorted and values use prometheus_client's formatting, as a real server's do.
With dp_size > 1 every scheduler-side series repeats once per `dp_rank`.

/generate and /v1/completions are served by the engine's scheduler model
(exporter/sim/engine/scheduler.py; see exporter/sim/engine/generation.py), so each token frame is
written when the scheduler emits it. /v1/loads answers the `core` fields (0.5.8+).
The /sim/ control endpoint (loopback only) is documented in exporter/sim/engine/control.py.

    python -m exporter.sim.engine.server --port 30000 --policy n=1 --time-scale 10
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import gzip
import re
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web
from prometheus_client.utils import floatToGoString

from exporter.sim.engine import control, generation
from exporter.sim.engine.scheduler import Policy
from exporter.sim.engine.serving import Serving
from exporter.sim.engine.state import GET_LOADS_BUCKETS, Fault, Histogram, SimEngine

TEMPLATE = Path(__file__).parent / "templates" / "sglang-0.5.23-multiproc.txt"
_LABEL = re.compile(r'(\w+)="([^"]*)"')
HUGE_BODY_BYTES = 50 * 1024 * 1024

Labels = dict[str, str]
# A driven family's renderer: the state and the template's samples -> samples to serve.
Renderer = Callable[[SimEngine, list[tuple[str, Labels]]], list[tuple[str, Labels, float]]]


@dataclass
class Block:
    name: str
    header: list[str]
    samples: list[tuple[str, Labels, str]]  # (sample name, labels, value text)
    # What a family the state does not drive serves, by dp_size: the same every time,
    # so rendered once (fifteen simulated engines answer several renders a second).
    _served: dict[int, list[str]] = field(default_factory=dict, repr=False)

    def as_captured(self, dp_size: int) -> list[str]:
        if dp_size not in self._served:
            self._served[dp_size] = self.header + [
                f"{name}{_labels(copy)} {value}" for name, labels, value in self.samples
                for copy in _dp_copies(labels, dp_size)]
        return self._served[dp_size]


def load_template(path: Path = TEMPLATE) -> list[Block]:
    return with_storage_prefetch(_read_template(path))


def _read_template(path: Path) -> list[Block]:
    blocks: list[Block] = []
    for line in path.read_text().splitlines():
        if line.startswith("# HELP "):
            blocks.append(Block(line.split()[2], [line], []))
        elif line.startswith("# TYPE "):
            blocks[-1].header.append(line)
        elif line and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            name, _, label_text = head.partition("{")
            blocks[-1].samples.append((name, dict(_LABEL.findall(label_text)), value))
    return blocks


def _each(value_of: Callable[[SimEngine, Labels], float | None]) -> Renderer:
    """One sample per template sample (the template's ranks), valued from the state."""
    def render(state: SimEngine, template: list[tuple[str, Labels]]):
        values = ((name, labels, value_of(state, labels)) for name, labels in template)
        return [(n, labels, v) for n, labels, v in values if v is not None]
    return render


def _keyed(label: str, values_of: Callable[[SimEngine], dict[str, float]]) -> Renderer:
    """One sample per key of a state dict (is_streaming, cache_source), on the template's labels."""
    def render(state: SimEngine, template: list[tuple[str, Labels]]):
        name, base = template[0]
        return [(name, {**base, label: key}, value)
                for key, value in sorted(values_of(state).items())]
    return render


def _keyed_per_rank(label: str, values_of: Callable[[SimEngine], dict[str, float]]) -> Renderer:
    """One sample per template sample (rank) and key of a state dict."""
    def render(state: SimEngine, template: list[tuple[str, Labels]]):
        values = sorted(values_of(state).items())
        return [(name, {**labels, label: key}, value)
                for name, labels in template for key, value in values]
    return render


def _decode_or_prefill(state: SimEngine, labels: Labels) -> float | None:
    if labels.get("mode", "").startswith("decode"):
        return state.decode_batches()
    return state.prefill_passes()


def _histogram(label: str | None,
               values_of: Callable[[SimEngine], dict[str, Histogram]]) -> Renderer:
    """_sum, cumulative buckets and _count per child (one per key of `label`), laid
    out on the template's first child: its labels and its `le` bounds."""
    def render(state: SimEngine, template: list[tuple[str, Labels]]):
        first = {k: v for k, v in template[0][1].items() if k != "le"}
        pattern = [(n, labels) for n, labels in template
                   if {k: v for k, v in labels.items() if k != "le"} == first]
        served = []
        for key, histogram in sorted(values_of(state).items()):
            for name, labels in pattern:
                child = {**labels, label: key} if label else dict(labels)
                if name.endswith("_sum"):
                    served.append((name, child, histogram.sum))
                elif name.endswith("_count"):
                    served.append((name, child, histogram.count))
                else:
                    served.append((name, child, histogram.cumulative(float(labels["le"]))))
        return served
    return render


def _storage(value_of: Callable[[SimEngine], float | None]) -> Renderer:
    return _each(lambda s, labels: value_of(s) if s.hicache_storage else None)


DRIVEN: dict[str, Renderer] = {
    "sglang:num_running_reqs": _each(lambda s, _: s.num_running_reqs()),
    "sglang:num_queue_reqs": _each(lambda s, _: s.num_queue_reqs()),
    "sglang:token_usage": _each(lambda s, _: s.kv_usage()),
    # The KV pool alone (0.5.10 on), which the exporter prefers to token_usage (issue
    # #7); the simulated engine has no separate Mamba pool, so the two agree.
    "sglang:full_token_usage": _each(lambda s, _: s.kv_usage()),
    "sglang:max_total_num_tokens": _each(lambda s, _: s.max_total_num_tokens),
    "sglang:cuda_graph_passes_total": _each(_decode_or_prefill),
    "sglang:realtime_tokens_total": _each(lambda s, labels: s.realtime_tokens(labels["mode"])),
    "sglang:prompt_tokens_total": _keyed("is_streaming", lambda s: s.prompt_tokens),
    "sglang:generation_tokens_total": _keyed("is_streaming", lambda s: s.generation_tokens),
    "sglang:num_requests_total": _keyed("is_streaming", lambda s: s.finished_requests),
    "sglang:num_aborted_requests_total": _each(lambda s, _: s.aborted_requests),
    "sglang:cached_tokens_total": _keyed("cache_source", lambda s: s.cached_tokens),
    "sglang:time_to_first_token_seconds": _histogram("is_streaming", lambda s: s.ttft),
    "sglang:inter_token_latency_seconds": _histogram(
        None, lambda s: {"": s.itl} if s.itl is not None else {}),
    "sglang:get_loads_duration_seconds": _histogram(
        None, lambda s: {"": s.get_loads} if s.get_loads is not None else {}),
    "sglang:hicache_host_used_tokens": _each(lambda s, _: s.hicache_host_used_tokens),
    "sglang:hicache_host_total_tokens": _each(lambda s, _: s.hicache_host_total_tokens),
    "sglang:evicted_tokens_total": _each(lambda s, _: s.evicted()),
    "sglang:load_back_tokens_total": _each(lambda s, _: s.loaded_back_tokens),
    "sglang:hicache_backup_tokens_total": _each(lambda s, _: s.backed_up_tokens),
    "sglang:num_retracted_requests_total": _each(lambda s, _: s.retracted()),
    "sglang:spec_accept_length": _each(lambda s, _: s.spec_accept_length),
    "sglang:spec_accept_rate": _each(lambda s, _: s.spec_accept_rate),
    "sglang:prefetched_tokens_total": _storage(lambda s: s.storage_prefetched_tokens),
    "sglang:backuped_tokens_total": _storage(lambda s: s.storage_written_tokens),
    # 0.5.23's scheduler time (exporter/sim/engine/scheduler_time.py), every rank's own.
    "sglang:scheduler_process_cpu_seconds_total": _each(
        lambda s, _: s.scheduler_time.shown.get("cpu")),
    "sglang:scheduler_idle_seconds_total": _each(lambda s, _: s.scheduler_time.shown.get("idle")),
    "sglang:scheduler_stage_seconds_total": _each(
        lambda s, labels: s.scheduler_time.stage(labels["category"])),
    # The newer HiCache families: there with HiCache on, driven by its traffic.
    "sglang:hicache_dropped_tokens_total": _each(
        lambda s, labels: s.dropped_tokens.get(labels["reason"], 0.0)
        if s.hicache_host_total_tokens is not None else None),
    "sglang:load_back_bytes_total": _each(lambda s, _: s.hicache_bytes(s.loaded_back_tokens)),
    "sglang:hicache_backup_bytes_total": _each(lambda s, _: s.hicache_bytes(s.backed_up_tokens)),
    "sglang:load_back_duration_seconds": _histogram(
        None, lambda s: {"": s.load_back_seconds} if s.load_back_seconds else {}),
    "sglang:hicache_backup_duration_seconds": _histogram(
        None, lambda s: {"": s.backup_seconds} if s.backup_seconds else {}),
    "sglang:storage_prefetch_hit_tokens_total": _storage(lambda s: s.storage_prefetch_hits()),
    "sglang:storage_prefetch_unfulfilled_tokens_total": _keyed_per_rank(
        "reason", lambda s: s.prefetch_unfulfilled()),
}

#: 0.5.23 storage families the template's captures lack (srt/observability/
#: metrics_collector.py, the storage collector): served on the labels of the captured
#: `prefetched_tokens_total`, one per TP rank.
STORAGE_PREFETCH_FAMILIES = (
    ("sglang:storage_prefetch_hit_tokens_total",
     "Storage-hit tokens an L3 query returned, before any transfer."),
    ("sglang:storage_prefetch_unfulfilled_tokens_total",
     "Storage-hit tokens that did not become a usable prefetch, by reason."),
)


def with_storage_prefetch(blocks: list[Block]) -> list[Block]:
    """The template's blocks and the storage prefetch families after
    prefetched_tokens_total, on its samples' labels."""
    out: list[Block] = []
    for block in blocks:
        out.append(block)
        if block.name != "sglang:prefetched_tokens_total":
            continue
        for name, help_text in STORAGE_PREFETCH_FAMILIES:
            out.append(Block(name, [f"# HELP {name} {help_text}", f"# TYPE {name} counter"],
                             [(name, labels, "0.0") for _, labels, _ in block.samples]))
    return out


def render_metrics(state: SimEngine, blocks: list[Block]) -> str:
    state.advance()  # one instant for the whole body
    lines: list[str] = []
    for block in blocks:
        renderer = DRIVEN.get(block.name)
        if renderer is None:
            lines.extend(block.as_captured(state.dp_size))
            continue
        served = renderer(state, [(n, labels) for n, labels, _ in block.samples])
        samples = [(n, labels, floatToGoString(v)) for n, labels, v in served]
        if not samples:
            continue  # not created yet: no HELP/TYPE either, as in multiprocess mode
        lines.extend(block.header)
        for name, labels, value in samples:
            for copy in _dp_copies(labels, state.dp_size):
                lines.append(f"{name}{_labels(copy)} {value}")
    return "\n".join(lines) + "\n"


def _dp_copies(labels: Labels, dp_size: int) -> Iterator[Labels]:
    if dp_size <= 1 or "tp_rank" not in labels:
        yield labels
        return
    for rank in range(dp_size):
        yield {**labels, "dp_rank": str(rank)}


def _labels(labels: Labels) -> str:
    return _label_text(tuple(labels.items()))


@functools.lru_cache(maxsize=4096)  # a body repeats the same few hundred label sets
def _label_text(items: tuple[tuple[str, str], ...]) -> str:
    if not items:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(items)) + "}"


class SimServer(Serving):
    """SGLang's routes around a SimEngine (serving.py: the app, start and stop)."""

    def __init__(self, state: SimEngine | None = None) -> None:
        super().__init__(state or SimEngine())
        self.blocks = load_template()
        self.app.router.add_get("/metrics", self.metrics)
        self.app.router.add_get("/server_info", self.server_info)
        self.app.router.add_get("/get_server_info", self.get_server_info)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/v1/loads", self.loads)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_post("/generate", self.generate)
        self.app.router.add_post("/tokenize", self.tokenize)
        self.app.router.add_post("/v1/tokenize", self.tokenize)
        self.app.router.add_post("/v1/completions", self.completions)
        self.app.router.add_post("/v1/chat/completions", self.chat_completions)
        #: The JSON bodies /generate received, for tests to check what a client sent.
        self.generate_requests: list[dict] = []
        #: How many /metrics answers were gzipped because the client asked for it.
        self.gzipped_metrics = 0

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        fault = self.state.fault
        if fault == Fault.REFUSE:
            assert request.transport is not None
            request.transport.close()
            raise web.HTTPServiceUnavailable()
        if fault == Fault.HTTP_500:
            return web.Response(status=500, text="Internal Server Error")
        if fault == Fault.HANG:
            await asyncio.Event().wait()
        if fault == Fault.GARBAGE:
            return web.Response(text="<html><body>502 Bad Gateway</body></html>\n")
        if fault == Fault.NON_UTF8:
            return web.Response(body=b"# TYPE sglang:num_running_reqs gauge\n\xff\xfe\x00bad\n")
        if fault == Fault.HUGE:
            return await self._huge(request)
        body = render_metrics(self.state, self.blocks).encode()
        if fault == Fault.MALFORMED:
            body = _break_lines(body)
        if fault == Fault.CUT_MID_LINE:
            return web.Response(body=body[: int(len(body) * self.state.cut_at_fraction)])
        if fault == Fault.TRUNCATED:
            return await self._truncated(request, body)
        if fault == Fault.SLOW_BODY:
            return await self._slow(request, body)
        # prometheus_client's ASGI app (SGLang's /metrics) gzips for any client that
        # accepts it, which costs the engine's HTTP process CPU on every poll.
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            self.gzipped_metrics += 1
            return web.Response(body=gzip.compress(body), content_type="text/plain",
                                charset="utf-8", headers={"Content-Encoding": "gzip"})
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def server_info(self, request: web.Request) -> web.Response:
        if self.state.legacy_info_only:
            raise web.HTTPNotFound()
        return web.json_response(self.state.server_info())

    async def get_server_info(self, request: web.Request) -> web.Response:
        return web.json_response(self.state.server_info())

    async def models(self, request: web.Request) -> web.Response:
        """The OpenAI model list, as SGLang's ModelCard (0.5.23 http_server.py)."""
        model = self.state.model
        return web.json_response({"object": "list", "data": [{
            "id": model, "object": "model", "created": int(time.time()),
            "owned_by": "sglang", "root": model, "parent": None,
            "max_model_len": self.state.context_len}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def tokenize(self, request: web.Request) -> web.Response:
        """POST /tokenize {"prompt": text}: `{"tokens", "count", "max_model_len"}`, as
        SGLang's TokenizeResponse (0.5.23 srt/entrypoints/openai/protocol.py). The
        simulator has no tokenizer: each word is one id, from a stable hash of it,
        within the vocabulary."""
        body = await generation.read_json(request)
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, str):
            return web.json_response({"object": "error", "message": "Invalid prompt type: "
                                      "expected str", "code": 400}, status=400)
        vocab = self.state.vocab_size
        tokens = [zlib.crc32(word.encode()) % vocab for word in prompt.split()]
        return web.json_response({"tokens": tokens, "count": len(tokens),
                                  "max_model_len": self.state.context_len})

    async def loads(self, request: web.Request) -> web.Response:
        """GET /v1/loads (0.5.8+): the `core` fields per DP rank (0.5.23
        entrypoints/v1_loads.py); the other sections are not simulated."""
        if _release(self.state.version) < (0, 5, 8):
            raise web.HTTPNotFound()
        started = time.perf_counter()
        include = {part.strip() for part in request.query.get("include", "all").split(",")}
        unknown = include - {"core", "memory", "spec", "lora", "disagg", "queues", "all"}
        try:
            if unknown:
                return web.json_response(
                    {"detail": f"Invalid include sections: {sorted(unknown)}"}, status=400)
            return web.json_response({
                "timestamp": datetime.now(UTC).isoformat(), "version": self.state.version,
                "accelerator": None, "num_accelerators": self.state.tp_size,
                "loads": self.state.loads()})
        finally:  # refused or served, as SGLang's `finally` observes it
            if self.state.get_loads is None:
                self.state.get_loads = Histogram(GET_LOADS_BUCKETS)
            self.state.get_loads.observe(time.perf_counter() - started)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """SGLang's native API; SSE frames `data: {json}`, then `data: [DONE]`
        (docs/facts/sglang.md#streaming-frames)."""
        body = await generation.read_json(request)
        if isinstance(body, dict):
            self.generate_requests.append(body)
        return await generation.generate(self.hub, request, body)

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        # Chunked, with no Content-Length to refuse it by: the client must count.
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        chunk = b"# padding " + b"x" * (1024 * 1024 - 11) + b"\n"
        for _ in range(HUGE_BODY_BYTES // len(chunk)):
            await response.write(chunk)
        return response

    async def _truncated(self, request: web.Request, body: bytes) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body[: len(body) // 2])
        assert request.transport is not None
        request.transport.close()
        return response

    async def _slow(self, request: web.Request, body: bytes) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_length = len(body)
        await response.prepare(request)
        pieces = 30
        step = len(body) // pieces + 1
        for i in range(pieces):
            await response.write(body[i * step:(i + 1) * step])
            await asyncio.sleep(self.state.slow_body_seconds / pieces)
        return response


def _break_lines(body: bytes) -> bytes:
    """Spoil the value of the first running-requests line and a label of the first
    decode-batch line: text a parser must skip without losing the rest."""
    text = body.decode()
    text = re.sub(r"(sglang:num_running_reqs\{[^\n]*\}) \S+", r"\1 not-a-number", text, count=1)
    text = text.replace('sglang:cuda_graph_passes_total{engine_type="unified"',
                        'sglang:cuda_graph_passes_total{engine_type=unified"', 1)
    return text.encode()


def _release(version: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", version)[:3]
    return tuple(int(p) for p in parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog=control.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--dp-size", type=int, default=1)
    parser.add_argument("--running", type=int, default=2,
                        help="synthetic running requests (decode at 30 batches/s)")
    parser.add_argument("--queued", type=int, default=0, help="synthetic queued requests")
    parser.add_argument("--policy", default="default", type=_policy,
                        help="scheduler policy: default, mixed-chunk, n=<N> (max "
                             "consecutive prefill batches) or interval=<k> (default: "
                             "%(default)s)")
    parser.add_argument("--chunked-prefill-size", type=int, default=None,
                        help="tokens per prefill chunk (default: 4096)")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="simulated seconds per real second (default: 1)")
    parser.add_argument("--version", default="0.5.23",
                        help="the SGLang release to report (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.time_scale <= 0:
        parser.error("--time-scale must be positive")
    policy = args.policy
    if args.chunked_prefill_size is not None:
        if args.chunked_prefill_size < 1:
            parser.error("--chunked-prefill-size must be at least 1")
        policy = dataclasses.replace(policy, chunked_prefill_size=args.chunked_prefill_size)
    state = SimEngine(dp_size=args.dp_size, queued=args.queued, token_usage=0.5,
                      hicache_host_used_tokens=100000, hicache_host_total_tokens=319193,
                      policy=policy, time_scale=args.time_scale, version=args.version)
    state.running = args.running
    print(f"simulated SGLang {args.version} on http://{args.host}:{args.port} "
          f"(policy {policy.name}, time x{args.time_scale:g}, started "
          f"{time.strftime('%H:%M:%S')})", flush=True)
    web.run_app(SimServer(state).app, host=args.host, port=args.port, print=None)


def _policy(text: str) -> Policy:
    try:
        return Policy.named(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


if __name__ == "__main__":
    main()
