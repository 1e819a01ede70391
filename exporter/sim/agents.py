"""The simulated rig's agents: long-lived clients that stream their turns through the
stream tap (docs/tap.md#agents), each known to it a different way.

    analyst   its bearer token (`Authorization: Bearer ...`), /v1/chat/completions
    creative  a header it sends (`X-Agent: creative`), SGLang's native /generate
    monitor   the body's OpenAI `user` field (`hermes-nas`), /v1/completions
    wsl       its address (it connects from 127.0.0.2), /v1/chat/completions

An agent keeps its session as text and sends all of it each turn, as agents do, so the
simulated engine finds the part still cached (its prefix cache) and prefills the
rest; its answer joins the session. `start_session` opens a session (a compaction
opens a new one, smaller), `send` streams one turn in a task and returns at once, so a
scenario step never waits for an answer. The tokens' timing is the scheduler
model's: a prefill that starves decode shows as a gap in another agent's stream.

    agents = Agents(tap_url, directory)        # writes analyst's key file
    agents["analyst"].start_session(123_000)   # its context, in tokens
    agents["analyst"].send(max_tokens=None)    # unbounded: up to the context length
    agents.exporter_args("main")               # --engine.agent flags for the exporter
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import secrets
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from exporter.sim.engine.scheduler import CHARS_PER_TOKEN, OUTPUT_TEXT

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
GENERATE = "/generate"
#: llama.cpp's native route, which takes GENERATE's place on a llama.cpp rig.
NATIVE = "/completion"
#: The turns an agent keeps for inspection, newest last.
KEEP_TURNS = 64


@dataclass(frozen=True)
class AgentSpec:
    """One agent and the one way the tap knows it (the others are None)."""

    name: str
    route: str
    api_key: bool = False  # a bearer token, made at start and kept in a 0600 file
    header: tuple[str, str] | None = None
    user: str | None = None
    address: str | None = None  # the local address it connects from

    def matcher(self, key_file: Path | None) -> str:
        """The --engine.agent matcher that names it."""
        if self.api_key:
            assert key_file is not None
            return f"api_key_file={key_file}"
        if self.header is not None:
            return f"header={self.header[0]}: {self.header[1]}"
        if self.user is not None:
            return f"user={self.user}"
        assert self.address is not None
        return f"address={self.address}/32"


ROSTER = (
    AgentSpec("analyst", CHAT, api_key=True),
    AgentSpec("creative", GENERATE, header=("X-Agent", "creative")),
    AgentSpec("monitor", COMPLETIONS, user="hermes-nas"),
    AgentSpec("wsl", CHAT, address="127.0.0.2"),
)


def roster_for(engine_kind: str) -> tuple[AgentSpec, ...]:
    """The roster on an engine of this kind: llama.cpp has no /generate, so the agent
    that speaks the native API speaks llama.cpp's."""
    if engine_kind != "llamacpp":
        return ROSTER
    return tuple(dataclasses.replace(spec, route=NATIVE) if spec.route == GENERATE else spec
                 for spec in ROSTER)


@dataclass
class Turn:
    """One request of an agent, as its client saw it (time.monotonic())."""

    prompt_tokens: int
    max_tokens: int | None
    sent_at: float
    first_token_at: float | None = None
    finished_at: float | None = None
    tokens: int = 0
    cached_tokens: int | None = None  # as the stream reported it
    longest_gap: float = 0.0
    last_frame_at: float | None = None
    outcome: str = "in flight"  # then: done, error, cancelled


@dataclass
class SimAgent:
    spec: AgentSpec
    url: str  # the tap's
    api_key: str | None = field(default=None, repr=False)  # never in a repr or a log
    session: int = 0
    context: str = ""
    turns: deque[Turn] = field(default_factory=lambda: deque(maxlen=KEEP_TURNS))
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _http: aiohttp.ClientSession | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def context_tokens(self) -> int:
        return math.ceil(len(self.context) / CHARS_PER_TOKEN)

    @property
    def in_flight(self) -> int:
        return sum(not task.done() for task in self._tasks)

    def start_session(self, tokens: int) -> str:
        """A new session of `tokens` tokens (the first, or the one a compaction leaves):
        it shares no prefix with the agent's earlier ones, nor with another agent's."""
        self.session += 1
        self.context = text_of(f"[{self.name} session {self.session}]", tokens)
        return self.context

    def add(self, tokens: int) -> None:
        """New input joins the session: a tool's output, the user's next message."""
        self.context += text_of(f"[{self.name} input]", tokens)

    def send(self, max_tokens: int | None) -> asyncio.Task[None]:
        """Stream one turn of the whole session; `max_tokens` None sends no limit."""
        task = asyncio.create_task(self._turn(self.context, max_tokens),
                                   name=f"agent {self.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def work(self, turns: int, tokens: int, max_tokens: int | None) -> asyncio.Task[None]:
        """`turns` turns back to back, each adding `tokens` of input: the next is sent
        when the last answer is in (the agent's own loop), so each finds the last
        one's prompt and answer in the cache."""
        async def loop() -> None:
            for _ in range(turns):
                self.add(tokens)
                await self._turn(self.context, max_tokens)

        task = asyncio.create_task(loop(), name=f"agent {self.name} at work")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def hang_up(self) -> None:
        """Hang up every turn in flight (the engine aborts them)."""
        for task in self._tasks:
            task.cancel()

    async def cancel(self) -> None:
        tasks = list(self._tasks)
        self.hang_up()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        await self.cancel()
        if self._http is not None:
            await self._http.close()
            self._http = None

    def body(self, prompt: str, max_tokens: int | None) -> dict[str, object]:
        spec = self.spec
        # The identity and the flags first: the tap reads a body's head.
        body: dict[str, object] = {"stream": True}
        if spec.user is not None:
            body["user"] = spec.user
        if spec.route == GENERATE:
            params = {} if max_tokens is None else {"max_new_tokens": max_tokens}
            return {**body, "sampling_params": params, "text": prompt}
        if spec.route == NATIVE:
            return {**body, "n_predict": -1 if max_tokens is None else max_tokens,
                    "prompt": prompt}
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if max_tokens is not None:
            body["max_tokens" if spec.route == COMPLETIONS else "max_completion_tokens"] = (
                max_tokens)
        if spec.route == COMPLETIONS:
            return {**body, "prompt": prompt}
        return {**body, "messages": [{"role": "user", "content": prompt}]}

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key is not None:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if self.spec.header is not None:
            headers[self.spec.header[0]] = self.spec.header[1]
        return headers

    def _session_for_http(self) -> aiohttp.ClientSession:
        if self._http is None:
            local = None if self.spec.address is None else (self.spec.address, 0)
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(local_addr=local),
                timeout=aiohttp.ClientTimeout(total=None))
        return self._http

    async def _turn(self, prompt: str, max_tokens: int | None) -> None:
        turn = Turn(math.ceil(len(prompt) / CHARS_PER_TOKEN), max_tokens, time.monotonic())
        self.turns.append(turn)
        answer = 0
        try:
            async with self._session_for_http().post(
                    self.url + self.spec.route, headers=self.headers(),
                    data=json.dumps(self.body(prompt, max_tokens))) as response:
                if response.status != 200:
                    turn.outcome = "error"
                    return
                async for event in _events(response):
                    answer = self._frame(turn, event, answer)
            turn.outcome = "done"
        except asyncio.CancelledError:
            turn.outcome = "cancelled"
            raise
        except (aiohttp.ClientError, OSError):
            turn.outcome = "error"
        finally:
            turn.finished_at = time.monotonic()
            if turn.outcome == "done" and self.context.startswith(prompt):
                # The answer joins the session, as the engine cached it.
                self.context = prompt + answer_text(answer) + self.context[len(prompt):]

    def _frame(self, turn: Turn, event: dict, answer: int) -> int:
        """Fold one frame into the turn; the answer's tokens so far."""
        now = time.monotonic()
        tokens, cached = _counts(self.spec.route, event)
        if tokens is None or tokens <= turn.tokens:
            return answer
        if turn.first_token_at is None:
            turn.first_token_at = now
        elif turn.last_frame_at is not None:
            turn.longest_gap = max(turn.longest_gap, now - turn.last_frame_at)
        turn.last_frame_at = now
        turn.tokens = tokens
        if cached is not None:
            turn.cached_tokens = cached
        return tokens


def _counts(route: str, event: dict) -> tuple[int | None, int | None]:
    """(generated tokens so far, cached prompt tokens) from one frame."""
    if route == GENERATE:
        meta = event.get("meta_info") or {}
        return meta.get("completion_tokens"), meta.get("cached_tokens")
    if route == NATIVE:  # llama.cpp: the prompt's cached part only in the last frame
        timings = event.get("timings") or {}
        return event.get("tokens_predicted"), timings.get("cache_n")
    usage = event.get("usage") or {}
    if not event.get("choices"):
        return None, None  # the closing usage chunk: nothing new
    details = usage.get("prompt_tokens_details") or {}
    return usage.get("completion_tokens"), details.get("cached_tokens")


async def _events(response: aiohttp.ClientResponse):
    """The JSON payload of each SSE `data:` line, up to `[DONE]`."""
    async for line in response.content:
        if not line.startswith(b"data: "):
            continue
        payload = line[6:].strip()
        if payload == b"[DONE]":
            return
        with contextlib.suppress(ValueError):
            yield json.loads(payload)


def text_of(tag: str, tokens: int) -> str:
    """`tokens` tokens of text that start with `tag` (the engine counts 4 characters
    a token)."""
    length = tokens * CHARS_PER_TOKEN
    return (tag + "." * length)[:length]


def answer_text(tokens: int) -> str:
    """What the simulated engine writes for an answer of `tokens` tokens."""
    return OUTPUT_TEXT * tokens


class Agents:
    """The roster, talking to the tap at `url`; `directory` keeps the key files."""

    def __init__(self, url: str, directory: Path, roster: tuple[AgentSpec, ...] = ROSTER
                 ) -> None:
        self.directory = directory
        self._agents: dict[str, SimAgent] = {}
        self._key_files: dict[str, Path] = {}
        for spec in roster:
            key = None
            if spec.api_key:
                key = f"sk-sim-{secrets.token_urlsafe(18)}"
                path = directory / f"{spec.name}.key"
                directory.mkdir(parents=True, exist_ok=True)
                path.touch(mode=0o600)
                path.write_text(key + "\n")
                self._key_files[spec.name] = path
            self._agents[spec.name] = SimAgent(spec, url, api_key=key)

    def __getitem__(self, name: str) -> SimAgent:
        return self._agents[name]

    def __iter__(self) -> Iterator[SimAgent]:
        return iter(self._agents.values())

    def exporter_args(self, engine: str) -> list[str]:
        args = []
        for agent in self:
            matcher = agent.spec.matcher(self._key_files.get(agent.name))
            args += ["--engine.agent", f"{engine}={agent.name},{matcher}"]
        return args

    def hang_up(self) -> None:
        for agent in self:
            agent.hang_up()

    async def close(self) -> None:
        await asyncio.gather(*(agent.close() for agent in self))
