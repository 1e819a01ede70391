"""A simulated SGLang server: /metrics, /server_info, /get_server_info, /health, /generate.

/metrics is rendered from a SimEngine in SGLang 0.5.23's multiprocess format, on a
template that is the genuine capture `sglang-0.5.23-metrics-multiproc-b.txt` (TP=2)
plus the two L3 storage families of the single-process capture, both from
/work/shared/fixtures/sglang. Families the state drives are re-rendered from it with
the template's names, labels and rank layout; the rest are served as captured. Labels
stay sorted and values use prometheus_client's formatting, as a real server's do.
With dp_size > 1 every scheduler-side series repeats once per `dp_rank`.

    python -m exporter.sim.sglang_server --port 30000 [--dp-size 4] [--running 2]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client.utils import floatToGoString

from exporter.sim.sglang_state import Fault, SimEngine

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


def load_template(path: Path = TEMPLATE) -> list[Block]:
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


def _decode_or_prefill(state: SimEngine, labels: Labels) -> float | None:
    if labels.get("mode", "").startswith("decode"):
        return state.decode_batches()
    return state.prefill_batches or None


def _storage(value_of: Callable[[SimEngine], float | None]) -> Renderer:
    return _each(lambda s, labels: value_of(s) if s.hicache_storage else None)


DRIVEN: dict[str, Renderer] = {
    "sglang:num_running_reqs": _each(lambda s, _: s.running),
    "sglang:num_queue_reqs": _each(lambda s, _: s.queued),
    "sglang:token_usage": _each(lambda s, _: s.token_usage),
    "sglang:max_total_num_tokens": _each(lambda s, _: s.max_total_num_tokens),
    "sglang:cuda_graph_passes_total": _each(_decode_or_prefill),
    "sglang:prompt_tokens_total": _keyed("is_streaming", lambda s: s.prompt_tokens),
    "sglang:generation_tokens_total": _keyed("is_streaming", lambda s: s.generation_tokens),
    "sglang:cached_tokens_total": _keyed("cache_source", lambda s: s.cached_tokens),
    "sglang:hicache_host_used_tokens": _each(lambda s, _: s.hicache_host_used_tokens),
    "sglang:hicache_host_total_tokens": _each(lambda s, _: s.hicache_host_total_tokens),
    "sglang:evicted_tokens_total": _each(lambda s, _: s.evicted_tokens),
    "sglang:load_back_tokens_total": _each(lambda s, _: s.loaded_back_tokens),
    "sglang:hicache_backup_tokens_total": _each(lambda s, _: s.backed_up_tokens),
    "sglang:num_retracted_requests_total": _each(lambda s, _: s.retracted_requests),
    "sglang:prefetched_tokens_total": _storage(lambda s: s.storage_prefetched_tokens),
    "sglang:backuped_tokens_total": _storage(lambda s: s.storage_written_tokens),
}


def render_metrics(state: SimEngine, blocks: list[Block]) -> str:
    lines: list[str] = []
    for block in blocks:
        renderer = DRIVEN.get(block.name)
        if renderer is None:
            samples = [(n, labels, value) for n, labels, value in block.samples]
        else:
            served = renderer(state, [(n, labels) for n, labels, _ in block.samples])
            samples = [(n, labels, floatToGoString(v)) for n, labels, v in served]
        if renderer is not None and not samples:
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
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


class SimServer:
    """The aiohttp app around a SimEngine; `start()` binds 127.0.0.1 on a free port."""

    def __init__(self, state: SimEngine | None = None) -> None:
        self.state = state or SimEngine()
        self.blocks = load_template()
        self.app = web.Application()
        self.app.router.add_get("/metrics", self.metrics)
        self.app.router.add_get("/server_info", self.server_info)
        self.app.router.add_get("/get_server_info", self.get_server_info)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_post("/generate", self.generate)
        self._runner: web.AppRunner | None = None
        self.url = ""
        #: The JSON bodies /generate received, for tests to check what a client sent.
        self.generate_requests: list[dict] = []
        #: How many /metrics answers were gzipped because the client asked for it.
        self.gzipped_metrics = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self.app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0]
        self.url = f"http://{bound[0]}:{bound[1]}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

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

    async def health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """SSE frames `data: {json}` with cumulative text and completion_tokens, then
        `data: [DONE]` (reference/sglang-metrics.md §7.3)."""
        body = await request.json()
        self.generate_requests.append(body)
        wanted = int(body.get("sampling_params", {}).get("max_new_tokens", 16))
        script = self.state.stream
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        tokens, frame = 0, 0
        await asyncio.sleep(script.first_token_seconds)
        while tokens < wanted:
            if script.hang_after_frames is not None and frame >= script.hang_after_frames:
                await asyncio.Event().wait()
            if frame > 0:
                gaps = script.gaps_seconds
                await asyncio.sleep(gaps[frame - 1] if frame - 1 < len(gaps)
                                    else script.default_gap_seconds)
            tokens = min(wanted, tokens + script.tokens_per_frame)
            frame += 1
            done = tokens >= wanted
            payload = {"text": " tok" * tokens, "output_ids": list(range(tokens)),
                       "meta_info": {"id": "sim", "prompt_tokens": 16,
                                     "completion_tokens": tokens, "cached_tokens": 0,
                                     "finish_reason": {"type": "length", "length": wanted}
                                     if done else None}}
            await response.write(f"data: {json.dumps(payload)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        self.state.finish_request(16, tokens)
        return response

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--dp-size", type=int, default=1)
    parser.add_argument("--running", type=int, default=2)
    parser.add_argument("--queued", type=int, default=0)
    args = parser.parse_args(argv)
    state = SimEngine(dp_size=args.dp_size, queued=args.queued, token_usage=0.5,
                      hicache_host_used_tokens=100000, hicache_host_total_tokens=319193)
    state.running = args.running
    web.run_app(SimServer(state).app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
