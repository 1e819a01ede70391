"""A simulated llama.cpp `llama-server` in front of the simulator's scheduler model.

The same SimEngine (its scheduler, prefix cache and clock) serves what a
`llama-server --metrics --slots -np N` serves, in its shapes
(docs/facts/llamacpp.md; the captures in tests/fixtures/llamacpp/):

- `/metrics`: the `llamacpp:` families with their quirks: the token counters move
  when a request finishes, `n_decode_total` counts every batch (prefill chunks too),
  `n_tokens_max` is typed counter but is a maximum, and the two `*_tokens_seconds`
  gauges are averages since the previous /metrics request (each request resets
  them); a `Process-Start-Time-Unix` header that is not Unix time.
- `/slots`: one object per slot; the scheduler's active requests take the slots in
  arrival order, and the rest are deferred. `n_decoded` is live.
- `/props`, `/health` (`{"status": "ok"}`).
- `/completion` and `/completions` (native frames, no `[DONE]`, `timings` on the
  last), `/v1/completions`, `/v1/chat/completions` and `/chat/completions` (the
  simulator's OpenAI streams, with the cache report on as llama.cpp always has it).

The scheduler is the simulated SGLang's (continuous batching with chunked prefill):
a llama-server schedules alike at the grain the exporter sees, one batch of at most
`-b` tokens at a time, decode waiting while a prompt's batch runs.

    python -m exporter.sim.engine.llamacpp --port 8080 --slots 4
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from dataclasses import dataclass, field

from aiohttp import web

from exporter.sim.engine import generation
from exporter.sim.engine.scheduler import OUTPUT_TEXT, Phase, Request
from exporter.sim.engine.serving import Serving
from exporter.sim.engine.state import SimEngine

BUILD_INFO = "b1-sim"
DEFAULT_SLOTS = 4


@dataclass
class SlotBook:
    """Which request holds which slot; an idle slot remembers its last task."""

    slots: int
    holders: dict[int, Request] = field(default_factory=dict)
    tasks: dict[str, int] = field(default_factory=dict)  # rid -> id_task

    def place(self, active: list[Request]) -> list[Request]:
        """Seat the active requests (oldest first); returns those left deferred."""
        busy = {slot for slot, r in self.holders.items() if not r.done}
        seated = {r.rid for slot, r in self.holders.items() if slot in busy}
        deferred = []
        for request in sorted(active, key=lambda r: r.arrival):
            if request.rid in seated:
                continue
            free = next((s for s in range(self.slots) if s not in busy), None)
            if free is None:
                deferred.append(request)
                continue
            self.holders[free] = request
            self.tasks.setdefault(request.rid, len(self.tasks))
            busy.add(free)
        return deferred


class LlamacppSimServer(Serving):
    """llama-server's routes around a SimEngine (serving.py: the app, start and stop)."""

    def __init__(self, state: SimEngine | None = None, slots: int = DEFAULT_SLOTS) -> None:
        super().__init__(state or SimEngine(model="tiny.gguf", tp_size=1, context_len=32768,
                                            max_total_num_tokens=32768))
        # llama.cpp reports the cached part of every prompt (usage and timings).
        self.state.enable_cache_report = True
        # A request decodes only in a slot: as many run as there are slots.
        self.state.set_policy(dataclasses.replace(self.state.policy,
                                                  max_running_requests=slots))
        self.book = SlotBook(slots)
        self.started_us = int(time.monotonic() * 1e6)  # like ggml_time_us(): not Unix time
        self._gauges_since = (time.monotonic(), 0.0, 0.0)  # (at, prompt, predicted)
        self._longest = 0
        app = self.app
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/slots", self.slots)
        app.router.add_get("/props", self.props)
        app.router.add_get("/health", self.health)
        for path in ("/completion", "/completions"):
            app.router.add_post(path, self.native)
        app.router.add_post("/v1/completions", self.completions)
        for path in ("/v1/chat/completions", "/chat/completions"):
            app.router.add_post(path, self.chat_completions)
        #: How many /slots requests were answered.
        self.slots_served = 0

    # -- what the server reports --------------------------------------------------

    def _active(self) -> tuple[list[Request], list[Request]]:
        """(seated, deferred) after bringing the scheduler up to now."""
        self.state.advance()
        active = [r for r in self.state.scheduler.active if r.phase != Phase.ADMITTING]
        deferred = self.book.place(active)
        seated = [r for r in active if r not in deferred]
        for request in seated:
            self._longest = max(self._longest, request.prefilled + request.generated)
        return seated, deferred

    def render_metrics(self) -> str:
        state = self.state
        seated, deferred = self._active()
        prompt = sum(state.prompt_tokens.values())
        cached = sum(state.cached_tokens.values())
        predicted = sum(state.generation_tokens.values())
        now = time.monotonic()
        since, prompt_before, predicted_before = self._gauges_since
        elapsed = max(now - since, 1e-9)
        self._gauges_since = (now, prompt, predicted)  # every /metrics resets them
        batches = (state.decode_batches() or 0) + (state.prefill_passes() or 0)
        counters = [
            ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached "
             "tokens", prompt - cached),
            ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache",
             cached),
            # The simulator's times to first token and between tokens stand for the
            # time spent on prompts and on generating.
            ("prompt_seconds_total", "Total time spent processing prompts",
             sum(h.sum for h in state.ttft.values())),
            ("tokens_predicted_total", "Number of generation tokens processed", predicted),
            ("tokens_predicted_seconds_total", "Total time spent generating tokens",
             state.itl.sum if state.itl is not None else 0.0),
            ("n_decode_total", "Total number of llama_decode() calls, excluding speculative "
             "decoding and multimodal decoding", batches),
            ("n_tokens_max", "Largest observed sequence length (prompt + generation)",
             self._longest),
            ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens "
             "generated", 0),
            ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens "
             "accepted by the target model", 0),
            ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding "
             "verification steps", 0),
        ]
        gauges = [
            ("prompt_tokens_seconds", "Average prompt throughput in tokens/s",
             (prompt - prompt_before) / elapsed),
            ("predicted_tokens_seconds", "Average generation throughput in tokens/s",
             (predicted - predicted_before) / elapsed),
            ("requests_processing", "Number of requests processing", len(seated)),
            ("requests_deferred", "Number of requests deferred", len(deferred)),
        ]
        lines = []
        for kind, items in (("counter", counters), ("gauge", gauges)):
            for name, doc, value in items:
                lines += [f"# HELP llamacpp:{name} {doc}", f"# TYPE llamacpp:{name} {kind}",
                          f"llamacpp:{name} {value:g}"]
        return "\n".join(lines) + "\n"

    def render_slots(self) -> list[dict[str, object]]:
        self._active()
        context = self.state.context_len
        answer: list[dict[str, object]] = []
        for slot in range(self.book.slots):
            item: dict[str, object] = {"id": slot, "n_ctx": context, "speculative": False}
            holder = self.book.holders.get(slot)
            item["is_processing"] = holder is not None and not holder.done
            if holder is not None:
                item.update({
                    "id_task": self.book.tasks[holder.rid],
                    "n_prompt_tokens": holder.prompt_tokens,
                    "n_prompt_tokens_processed": max(0, holder.prefilled
                                                     - holder.cached_tokens),
                    "n_prompt_tokens_cache": holder.cached_tokens,
                    "next_token": [{"has_next_token": not holder.done,
                                    "n_remain": holder.max_new_tokens - holder.generated,
                                    "n_decoded": holder.generated}]})
            answer.append(item)
        return answer

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.render_metrics(), content_type="text/plain",
                            headers={"Process-Start-Time-Unix": str(self.started_us)})

    async def slots(self, request: web.Request) -> web.Response:
        self.slots_served += 1
        return web.json_response(self.render_slots())

    async def props(self, request: web.Request) -> web.Response:
        state = self.state
        return web.json_response({
            "default_generation_settings": {"params": {"speculative.types": "none"},
                                            "n_ctx": state.context_len},
            "total_slots": self.book.slots, "model_alias": state.model,
            "model_path": f"models/{state.model}", "endpoint_slots": True,
            "endpoint_metrics": True, "build_info": BUILD_INFO, "is_sleeping": False})

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    # -- generation ---------------------------------------------------------------

    async def native(self, http: web.Request) -> web.StreamResponse:
        """llama.cpp's /completion: `prompt`, `n_predict` (-1: no limit), `stream`."""
        body = await generation.read_json(http)
        try:
            ask = parse_native(body)
        except generation.BadRequest as exc:
            return web.json_response({"error": {"code": 400, "message": str(exc),
                                                "type": "invalid_request_error"}},
                                     status=400)
        last = generation.Progress(0, False)
        response: web.StreamResponse | None = None
        async with contextlib.aclosing(generation.progress_of(self.hub, http, ask)) as events:
            try:
                async for progress in events:
                    if progress.aborted:
                        return response or web.json_response(
                            {"error": {"code": 503, "message": "aborted"}}, status=503)
                    if ask.stream and not progress.finished:
                        if response is None:
                            response = await generation._sse(http)
                        await generation._send(response, {
                            "index": 0, "content": OUTPUT_TEXT * (progress.tokens - last.tokens),
                            "tokens": list(range(last.tokens, progress.tokens)), "stop": False,
                            "id_slot": -1, "tokens_predicted": progress.tokens,
                            "tokens_evaluated": ask.prompt_tokens})
                    last = progress
            except ConnectionResetError:
                return response or web.Response(status=499)
        final = self._final(ask, last)
        if not ask.stream:
            return web.json_response(final)
        if response is None:
            response = await generation._sse(http)
        with contextlib.suppress(ConnectionResetError):
            await generation._send(response, final)  # no [DONE] on the native routes
        return response

    def _final(self, ask: generation.Ask, last: generation.Progress) -> dict[str, object]:
        cached = last.cached_tokens
        return {"index": 0, "content": OUTPUT_TEXT * last.tokens if not ask.stream else "",
                # The simulator does not say which slot served it (the exporter
                # does not read it).
                "tokens": [], "id_slot": -1, "stop": True,
                "model": self.state.model, "tokens_predicted": last.tokens,
                "tokens_evaluated": ask.prompt_tokens, "stop_type": "limit",
                # The slot's whole cache after the request, as llama.cpp says it.
                "tokens_cached": ask.prompt_tokens + max(0, last.tokens - 1),
                "timings": {"cache_n": cached, "prompt_n": ask.prompt_tokens - cached,
                            "predicted_n": last.tokens}}


def parse_native(body: object) -> generation.Ask:
    if isinstance(body, generation.NotJson):
        raise generation.BadRequest(body.reason)
    if not isinstance(body, dict):
        raise generation.BadRequest("the body must be a JSON object")
    prompt = body.get("prompt")
    ids = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], int) \
        else None
    limit = body.get("n_predict", -1)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < -1 or limit == 0:
        raise generation.BadRequest(f"n_predict must be -1 or positive, not {limit!r}")
    return generation.Ask(generation.prompt_length(ids, None if ids else prompt),
                          None if limit == -1 else limit, bool(body.get("stream", False)),
                          None if ids else generation.prompt_text(prompt))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--slots", type=int, default=DEFAULT_SLOTS, help="like -np")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="simulated seconds per real second (default: 1)")
    args = parser.parse_args(argv)
    state = SimEngine(model="tiny.gguf", tp_size=1, context_len=32768,
                      max_total_num_tokens=32768, time_scale=args.time_scale)
    print(f"simulated llama.cpp on http://{args.host}:{args.port} ({args.slots} slots)",
          flush=True)
    web.run_app(LlamacppSimServer(state, args.slots).app, host=args.host, port=args.port,
                print=None)


if __name__ == "__main__":
    main()
