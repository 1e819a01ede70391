"""The simulated engine's generation endpoints: SGLang's native /generate and the
OpenAI-style /v1/completions, streamed (SSE) or not.

Two sources of tokens:
- scheduled (the default): the request enters the SimEngine's scheduler model, and
  each frame is written when the scheduler emits that token, so a prefill that
  starves decode, or a `pause_decode`, shows in the stream as in /metrics. A client
  that goes away aborts the request in the scheduler.
- scripted (`SimEngine.stream` is a StreamScript): frames follow the script's
  timings, for tests that need exact gaps or a hang.

Frames (docs/facts/sglang.md#streaming-frames): `data: {json}` then `data: [DONE]`. In
scheduled mode /generate frames carry only the new text and `output_ids` (as a server
started with `--incremental-streaming-output`; cumulative text would make a
5,000-token stream hundreds of MB), with the cumulative `completion_tokens` in
`meta_info` as SGLang sends it. Prompts given as `text` count one token per 4
characters (the simulator has no tokenizer).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from exporter.sim.engine.scheduler import OUTPUT_TEXT, Batch, Phase, Request, Scheduler
from exporter.sim.engine.state import SimEngine, StreamScript

#: SGLang's SamplingParams default max_new_tokens; OpenAI's default max_tokens.
GENERATE_DEFAULT_MAX_NEW_TOKENS = 128
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
SCRIPTED_PROMPT_TOKENS = 16
#: The pump's longest sleep (real seconds): it keeps an elastic ScaledClock fresh.
PUMP_POLL_SECONDS = 0.02
#: How often a waiting handler checks that its client is still there (real seconds).
DISCONNECT_CHECK_SECONDS = 0.1


class BadRequest(ValueError):
    """The request body is not one the engine would accept."""


@dataclass(frozen=True)
class Ask:
    """One generation request, whichever API it came through."""

    prompt_tokens: int
    #: None: no limit (the chat API without max_tokens): up to the context length.
    max_new_tokens: int | None
    stream: bool
    #: The prompt's text, by which the engine finds its cached prefix.
    key: str | None = None
    stream_interval: int | None = None  # the native API's sampling_params.stream_interval


@dataclass(frozen=True)
class Progress:
    """A frame's worth of news: tokens so far, and whether the request ended."""

    tokens: int
    finished: bool
    aborted: bool = False
    cached_tokens: int = 0  # of the prompt, found in the cache


def prompt_length(input_ids: object, text: object) -> int:
    if input_ids is not None:
        if (isinstance(input_ids, list) and input_ids
                and isinstance(input_ids[0], list)):
            input_ids = input_ids[0]  # a batch: the simulator serves its first prompt
        if (not isinstance(input_ids, list) or not input_ids
                or not all(isinstance(i, int) and not isinstance(i, bool) for i in input_ids)):
            raise BadRequest("input_ids must be a non-empty list of token ids")
        return len(input_ids)
    if isinstance(text, list) and text:
        text = text[0]
    if not isinstance(text, str) or not text:
        raise BadRequest("give a prompt: input_ids (token ids) or text")
    return max(1, math.ceil(len(text) / 4))


def prompt_text(text: object) -> str | None:
    if isinstance(text, list) and text:
        text = text[0]
    return text if isinstance(text, str) else None


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{name} must be a positive integer, not {value!r}")
    return value


def parse_generate(body: object) -> Ask:
    if isinstance(body, NotJson):
        raise BadRequest(body.reason)
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise BadRequest("sampling_params must be an object")
    wanted = _positive_int(params.get("max_new_tokens", GENERATE_DEFAULT_MAX_NEW_TOKENS),
                           "max_new_tokens")
    interval = params.get("stream_interval")
    ids = body.get("input_ids")
    return Ask(prompt_length(ids, body.get("text")), wanted, bool(body.get("stream", False)),
               None if ids is not None else prompt_text(body.get("text")),
               None if interval is None else _positive_int(interval, "stream_interval"))


def parse_completions(body: object) -> Ask:
    if isinstance(body, NotJson):
        raise BadRequest(body.reason)
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    prompt = body.get("prompt")
    ids = prompt if isinstance(prompt, list) and prompt and not isinstance(prompt[0], str) \
        else None
    wanted = _positive_int(body.get("max_tokens", COMPLETIONS_DEFAULT_MAX_TOKENS),
                           "max_tokens")
    return Ask(prompt_length(ids, None if ids is not None else prompt), wanted,
               bool(body.get("stream", False)), None if ids is not None else prompt_text(prompt))


def parse_chat(body: object) -> Ask:
    """/v1/chat/completions: the messages' contents in order are the prompt (no chat
    template); no max_completion_tokens or max_tokens is no limit (SGLang's
    ChatCompletionRequest passes None on, and the scheduler allows up to the context)."""
    if isinstance(body, NotJson):
        raise BadRequest(body.reason)
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
        raise BadRequest("messages must be a non-empty list of {role, content} objects")
    text = "".join(m["content"] for m in messages)
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    wanted = None if limit is None else _positive_int(limit, "max_completion_tokens")
    return Ask(prompt_length(None, text or " "), wanted, bool(body.get("stream", False)),
               text)


class StreamHub:
    """Routes the scheduler's tokens to the HTTP handlers waiting for them, and runs
    the pump that moves the scheduler forward in step with the clock."""

    def __init__(self, state: SimEngine) -> None:
        self.state = state
        self._queues: dict[str, asyncio.Queue[Progress]] = {}
        self._wake: asyncio.Event | None = None
        state.add_listener(self)

    # Scheduler listener: called while the engine advances, in time order.

    def on_token(self, request: Request, time: float) -> None:
        queue = self._queues.get(request.rid)
        if queue is not None and request.output_due:
            queue.put_nowait(Progress(request.generated,
                                      request.generated >= request.max_new_tokens,
                                      cached_tokens=request.cached_tokens))

    def on_finish(self, request: Request, time: float) -> None:
        queue = self._queues.get(request.rid)
        if queue is not None and request.phase == Phase.ABORTED:
            queue.put_nowait(Progress(request.generated, True, aborted=True,
                                      cached_tokens=request.cached_tokens))

    def on_batch(self, batch: Batch, scheduler: Scheduler) -> None:
        pass

    async def pump(self) -> None:
        """Advance the engine whenever its next batch is due, in real time."""
        self._wake = asyncio.Event()
        while True:
            self.state.advance()
            due = self.state.scheduler.next_event_time()
            delay = PUMP_POLL_SECONDS  # idle, or a clock that is not real time: poll
            if due is not None:
                delay = min(delay, max(0.0005, (due - self.state.clock())
                                       / self.state.time_scale))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def scheduled(self, http: web.Request, ask: Ask) -> AsyncIterator[Progress]:
        request = self.state.submit(ask.prompt_tokens, ask.max_new_tokens, stream=ask.stream,
                                    key=ask.key, stream_interval=ask.stream_interval)
        queue: asyncio.Queue[Progress] = asyncio.Queue()
        self._queues[request.rid] = queue
        if self._wake is not None:
            self._wake.set()
        try:
            while True:
                try:
                    progress = await asyncio.wait_for(queue.get(), DISCONNECT_CHECK_SECONDS)
                except TimeoutError:
                    if http.transport is None or http.transport.is_closing():
                        return  # the client went away: `finally` aborts the request
                    continue
                yield progress
                if progress.finished:
                    return
        finally:
            del self._queues[request.rid]
            if not request.done:
                self.state.abort(request.rid)


async def scripted(script: StreamScript, wanted: int) -> AsyncIterator[Progress]:
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
        yield Progress(tokens, tokens >= wanted)


async def progress_of(hub: StreamHub, http: web.Request, ask: Ask) -> AsyncIterator[Progress]:
    script = hub.state.stream
    if script is None:
        async with contextlib.aclosing(hub.scheduled(http, ask)) as scheduled:
            async for progress in scheduled:
                yield progress
        return
    wanted = ask.max_new_tokens or hub.state.context_len - SCRIPTED_PROMPT_TOKENS - 1
    async for progress in scripted(script, wanted):
        yield progress
    hub.state.finish_request(SCRIPTED_PROMPT_TOKENS, wanted, ask.stream)


def _meta(rid: str, ask: Ask, progress: Progress, started: float) -> dict:
    tokens, finished = progress.tokens, progress.finished
    meta: dict[str, object] = {
        "id": rid, "prompt_tokens": ask.prompt_tokens, "completion_tokens": tokens,
        "cached_tokens": progress.cached_tokens,
        "finish_reason": {"type": "length", "length": tokens} if finished else None,
    }
    if finished:
        meta["e2e_latency"] = time.monotonic() - started
    return meta


async def _all_tokens(hub: StreamHub, http: web.Request, ask: Ask) -> Progress | None:
    """Wait for a non-streamed answer; None if the engine dropped the request."""
    last = Progress(0, True)
    async with contextlib.aclosing(progress_of(hub, http, ask)) as events:
        async for progress in events:
            if progress.aborted:
                return None
            last = progress
    return last


def _dropped() -> web.Response:
    return web.json_response({"error": {"message": "the request was aborted",
                                        "type": "InternalServerError", "code": 503}},
                             status=503)


def _refuse(exc: BadRequest) -> web.Response:
    return web.json_response({"error": {"message": str(exc), "type": "BadRequestError",
                                        "code": 400}}, status=400)


async def _sse(http: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
    await response.prepare(http)
    return response


async def _send(response: web.StreamResponse, payload: object) -> None:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    await response.write(f"data: {text}\n\n".encode())


def _check_capacity(state: SimEngine, ask: Ask) -> None:
    if ask.prompt_tokens >= state.max_total_num_tokens:
        raise BadRequest(f"The input ({ask.prompt_tokens} tokens) is longer than the KV "
                         f"pool ({state.max_total_num_tokens} tokens).")


class NotJson:
    """A body that did not parse; `parse_*` refuse it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


async def read_json(http: web.Request) -> object:
    """The parsed body, read once (a 64K-token prompt takes tens of ms to parse, time
    in which no frame leaves)."""
    try:
        return json.loads(await http.read())
    except ValueError as exc:
        return NotJson(f"the body is not JSON: {exc}")


async def generate(hub: StreamHub, http: web.Request, body: object) -> web.StreamResponse:
    """POST /generate: SGLang's native API."""
    try:
        ask = parse_generate(body)
        _check_capacity(hub.state, ask)
    except BadRequest as exc:
        return _refuse(exc)
    assert isinstance(body, dict)
    rid = str(body.get("rid") or f"sim-{id(http):x}")
    started = time.monotonic()
    incremental = hub.state.stream is None
    if not ask.stream:
        done = await _all_tokens(hub, http, ask)
        if done is None:
            return _dropped()
        tokens = done.tokens
        return web.json_response({"text": OUTPUT_TEXT * tokens,
                                  "output_ids": list(range(tokens)),
                                  "meta_info": _meta(rid, ask, done, started)})
    response = await _sse(http)
    sent = 0
    async with contextlib.aclosing(progress_of(hub, http, ask)) as events:
        try:
            async for progress in events:
                if progress.aborted:
                    return response  # the engine dropped it (a restart): no [DONE]
                new = progress.tokens - sent if incremental else progress.tokens
                await _send(response, {
                    "text": OUTPUT_TEXT * new,
                    "output_ids": list(range(sent if incremental else 0, progress.tokens)),
                    "meta_info": _meta(rid, ask, progress, started)})
                sent = progress.tokens
            await _send(response, "[DONE]")
        except ConnectionResetError:
            pass  # the client went away; closing `events` aborts the request
    return response


async def completions(hub: StreamHub, http: web.Request, body: object
                      ) -> web.StreamResponse:
    """POST /v1/completions: the OpenAI API (SGLang serves it too)."""
    return await _openai(hub, http, body, chat=False)


async def chat_completions(hub: StreamHub, http: web.Request, body: object
                           ) -> web.StreamResponse:
    """POST /v1/chat/completions: what agents use; chunks carry `delta.content`."""
    return await _openai(hub, http, body, chat=True)


def _choice(text: str, finished: bool, chat: bool, first: bool = False) -> dict[str, object]:
    reason = "length" if finished else None
    if not chat:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
    delta = {"role": "assistant", "content": text} if first else {"content": text}
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}


async def _openai(hub: StreamHub, http: web.Request, body: object, chat: bool
                  ) -> web.StreamResponse:
    try:
        ask = parse_chat(body) if chat else parse_completions(body)
        _check_capacity(hub.state, ask)
    except BadRequest as exc:
        return _refuse(exc)
    assert isinstance(body, dict)
    kind = "chat.completion" if chat else "text_completion"
    head = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{id(http):x}", "object": kind,
            "created": int(time.time()), "model": str(body.get("model") or hub.state.model)}
    report = hub.state.enable_cache_report
    if not ask.stream:
        done = await _all_tokens(hub, http, ask)
        if done is None:
            return _dropped()
        text = OUTPUT_TEXT * done.tokens
        choice = (dict(_choice("", True, False), text=text) if not chat else
                  {"index": 0, "message": {"role": "assistant", "content": text},
                   "logprobs": None, "finish_reason": "length"})
        return web.json_response({**head, "choices": [choice],
                                  "usage": _usage(ask, done, report)})
    response = await _sse(http)
    head["object"] = f"{kind}.chunk" if chat else kind
    last = Progress(0, False)
    options = body.get("stream_options")
    options = options if isinstance(options, dict) else {}
    async with contextlib.aclosing(progress_of(hub, http, ask)) as events:
        try:
            async for progress in events:
                if progress.aborted:
                    return response
                # SGLang's serving_completions.py: usage on every chunk with
                # continuous_usage_stats, else null.
                usage = (_usage(ask, progress, report)
                         if options.get("continuous_usage_stats") else None)
                await _send(response, {**head, "choices": [_choice(
                    OUTPUT_TEXT * (progress.tokens - last.tokens), progress.finished, chat,
                    first=last.tokens == 0)], "usage": usage})
                last = progress
            if options.get("include_usage"):
                await _send(response, {**head, "choices": [],
                                       "usage": _usage(ask, last, report)})
            await _send(response, "[DONE]")
        except ConnectionResetError:
            pass
    return response


def _usage(ask: Ask, progress: Progress, cache_report: bool) -> dict[str, object]:
    """OpenAI usage; prompt_tokens_details only with --enable-cache-report
    (SGLang's UsageProcessor)."""
    tokens = progress.tokens
    usage: dict[str, object] = {"prompt_tokens": ask.prompt_tokens,
                                "completion_tokens": tokens,
                                "total_tokens": ask.prompt_tokens + tokens}
    if cache_report:
        usage["prompt_tokens_details"] = {"cached_tokens": progress.cached_tokens}
    return usage
