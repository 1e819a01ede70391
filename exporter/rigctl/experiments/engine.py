"""The engine under test: what it is, what it holds, and the prompts it can take.

Its facts are read from whatever the engine serves (docs/rigctl.md#engine-facts):
- SGLang: `/server_info` (or `/get_server_info`), every server flag: the context
  length, the KV pool (`max_total_num_tokens`) and the scheduler flags.
- llama.cpp's `llama-server`: `/props` (`default_generation_settings.n_ctx`, one
  slot's context; `total_slots`; `build_info`, its only version), and `/v1/models`
  for the vocabulary (`meta.n_vocab`; tools/server/server-context.cpp
  `get_res_model_info`).
- vLLM: `/v1/models` (`max_model_len`), `/version`, and `/metrics`'
  `vllm:cache_config_info` (`kv_cache_size_tokens`, `enable_prefix_caching`).
- Any other OpenAI-compatible server: `max_model_len` of `/v1/models` where it says.

Flags the engine does not show (`--context-length`, `--vocab-size`) are given on the
command line; given, they win over what was read.

The random prompts' token ids must lie inside the vocabulary: vLLM refuses an id past
it with HTTP 400, and SGLang 0.5.23 checks none and its scheduler dies of it
(docs/rigctl.md#the-prompts-token-ids). Where the engine does not say its vocabulary
(SGLang and vLLM do not), its own tokenizer says which ids exist: `POST /tokenize` of
a text, whose highest id proves every id below it (a vocabulary's ids are 0 to n-1).
Where neither answers, the bench stops before it sends anything and names the flag.
"""

from __future__ import annotations

import asyncio
import json
import random
import string
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from exporter.daemon.engines.exposition import parse
from exporter.daemon.engines.fetch import get_text
from exporter.daemon.engines.generation import api_for
from exporter.daemon.engines.info import SGLANG_INFO_PATHS, llamacpp_info, sglang_info
from exporter.daemon.snapshot import SourceError

ENGINE_KINDS = ("sglang", "vllm", "llamacpp", "openai")
# SGLang's server_info keys that decide how prefill and decode interleave.
SCHEDULER_FLAGS = ("chunked_prefill_size", "enable_mixed_chunk",
                   "max_consecutive_prefill_batches", "prefill_decode_interval",
                   "schedule_policy", "max_running_requests", "enable_hierarchical_cache",
                   "speculative_algorithm")
# vllm:cache_config_info's labels worth a line in the report (vllm/v1/metrics/loggers.py).
VLLM_CACHE_FLAGS = ("enable_prefix_caching", "block_size")
VLLM_CACHE_INFO = "vllm:cache_config_info"
# Random prompts draw ids from here up: past the special and single-byte tokens of a
# byte-level BPE (256 bytes and a few specials), below every real model's vocabulary.
LOWEST_TOKEN_ID = 1000
#: The most ids the prompts draw from: plenty for prompts no cache has seen.
TOKEN_ID_CAP = 30000
#: Fewer distinct ids than this from the tokenizer is too narrow a range to trust.
FEWEST_PROBE_IDS = 64
TOKENIZE_PATH = "/tokenize"
FACTS_TIMEOUT_SECONDS = 10.0


class EngineRefused(Exception):
    """The experiment cannot run against this engine; str() is the one line to print."""


@dataclass(frozen=True)
class EngineFacts:
    kind: str
    version: str = ""
    #: The most one request may hold (prompt and answer), where known.
    context_length_tokens: int | None = None
    #: The KV pool every request shares (SGLang's max_total_num_tokens, vLLM's
    #: kv_cache_size_tokens), where known.
    kv_pool_tokens: int | None = None
    #: llama.cpp's parallel slots.
    slots: int | None = None
    vocab_size: int | None = None
    #: Where the vocabulary is not known: one past the highest id the engine's own
    #: tokenizer gave (every id below it exists).
    tokenized_id_limit: int | None = None
    #: The fact the engine's vocabulary was read from.
    vocab_from: str = ""
    flags: dict[str, Any] = field(default_factory=dict)
    #: Where each fact came from, for the report: "/props", "--context-length", ...
    sources: tuple[str, ...] = ()

    def api(self) -> str:
        """The API the experiments speak to it."""
        return api_for(self.kind)

    def token_id_limit(self) -> int:
        """The prompts' ids lie below this; EngineRefused where nothing says the
        vocabulary, before anything is sent."""
        known = self.vocab_size or self.tokenized_id_limit
        if known is None:
            raise EngineRefused(
                f"the {self.kind} engine says neither its vocabulary nor its tokenizer's ids "
                f"(no {TOKENIZE_PATH}), and a token id outside the vocabulary is refused or, "
                "on SGLang, kills the scheduler: give --vocab-size")
        return min(known, TOKEN_ID_CAP)

    def token_ids_from(self) -> str:
        """Which fact gave token_id_limit: the source that read the vocabulary or the
        tokenizer ("--vocab-size", "/v1/models", "/tokenize"), "" where none did."""
        if self.vocab_size is not None:
            return "--vocab-size" if "--vocab-size" in self.sources else self.vocab_from
        return TOKENIZE_PATH if self.tokenized_id_limit is not None else ""


@dataclass(frozen=True)
class Overrides:
    """What the command line says of the engine; None where it says nothing."""

    kind: str | None = None
    context_length_tokens: int | None = None
    vocab_size: int | None = None


async def engine_facts(session: aiohttp.ClientSession, url: str,
                       overrides: Overrides = Overrides(),
                       token_range: bool = True) -> EngineFacts:
    """The engine's facts; EngineRefused when it answers none of the ways above.
    Without `token_range` the tokenizer is not asked (no prompt of random ids follows)."""
    readers = {"sglang": _sglang, "llamacpp": _llamacpp, "vllm": _vllm, "openai": _openai}
    kinds = (overrides.kind,) if overrides.kind else ("sglang", "llamacpp", "vllm", "openai")
    errors = []
    facts = None
    for kind in kinds:
        try:
            facts = await readers[kind](session, url)
            break
        except (SourceError, aiohttp.ClientError, TimeoutError) as exc:
            if _unreachable(exc):  # nothing answers there: asking again says nothing new
                raise EngineRefused(f"engine {url} not reachable: {exc}") from exc
            errors.append(f"{kind}: {exc}")
    if facts is None and overrides.kind == "openai":
        # Told it is a bare OpenAI-compatible server (a proxy may serve nothing but
        # the generation routes): its facts are the flags alone.
        facts = EngineFacts(kind="openai")
    if facts is None:
        raise EngineRefused(f"engine {url} serves none of the known facts' endpoints: "
                            f"{'; '.join(errors)}; give --kind openai and --context-length")
    if overrides.context_length_tokens is not None:
        facts = replace(facts, context_length_tokens=overrides.context_length_tokens,
                        sources=(*facts.sources, "--context-length"))
    if overrides.vocab_size is not None:
        facts = replace(facts, vocab_size=overrides.vocab_size,
                        sources=(*facts.sources, "--vocab-size"))
    elif facts.vocab_size is None and token_range:
        limit = await tokenizer_id_limit(session, url, facts.kind)
        if limit is not None:
            facts = replace(facts, tokenized_id_limit=limit,
                            sources=(*facts.sources, TOKENIZE_PATH))
    return facts


def probe_text(words: int = 1500) -> str:
    """A text for the engine's tokenizer: made-up words of every length over the whole
    alphabet, digits and punctuation, so that a BPE's merges give ids across its
    vocabulary, as English alone would not in a small one. The same every time."""
    rng = random.Random(1)
    alphabet = string.ascii_letters + string.digits
    return " ".join("".join(rng.choices(alphabet, k=rng.randint(1, 9)))
                    + rng.choice(("", "", ".", ",", "!", "?", ";"))
                    for _ in range(words))


async def tokenizer_id_limit(session: aiohttp.ClientSession, url: str,
                              kind: str) -> int | None:
    """One past the highest id the engine's tokenizer gives for probe_text(); None
    where it has no tokenizer endpoint or gives too few ids. llama.cpp's /tokenize
    takes `content`; SGLang's and vLLM's take `prompt` (0.5.23
    srt/entrypoints/openai/protocol.py TokenizeRequest; vLLM's TokenizeCompletionRequest)."""
    text = probe_text()
    body = ({"content": text} if kind == "llamacpp"
            else {"prompt": text, "add_special_tokens": False})
    try:
        async with _deadline(), session.post(url + TOKENIZE_PATH, json=body) as response:
            if response.status != 200:
                return None
            answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(tokens, list):
        return None
    ids = {t for t in tokens if isinstance(t, int) and not isinstance(t, bool) and t >= 0}
    if len(ids) < FEWEST_PROBE_IDS:
        return None
    return max(ids) + 1


def _unreachable(exc: BaseException) -> bool:
    cause = exc.__cause__ if isinstance(exc, SourceError) else exc
    return isinstance(cause, aiohttp.ClientConnectionError | TimeoutError)


async def _json(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with _deadline():
        text = await get_text(session, url)
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SourceError(f"GET {url}: not JSON") from exc
    if not isinstance(value, dict):
        raise SourceError(f"GET {url}: not a JSON object")
    return value


def _deadline() -> asyncio.Timeout:
    return asyncio.timeout(FACTS_TIMEOUT_SECONDS)


async def _sglang(session: aiohttp.ClientSession, url: str) -> EngineFacts:
    errors = []
    for path in SGLANG_INFO_PATHS:
        try:
            info = await _json(session, url + path)
        except SourceError as exc:
            errors.append(str(exc))
            continue
        tokens = info.get("max_total_num_tokens")
        if tokens is None:  # newer SGLang nests the schedulers' values
            for scheduler in info.get("internal_states") or []:
                if isinstance(scheduler, dict) and "max_total_num_tokens" in scheduler:
                    tokens = scheduler["max_total_num_tokens"]
                    break
        return EngineFacts(
            kind="sglang", version=str(info.get("version", "")),
            context_length_tokens=sglang_info(info).context_length_tokens,
            kv_pool_tokens=_count(tokens),
            flags={key: info[key] for key in SCHEDULER_FLAGS if key in info},
            sources=(path,))
    raise SourceError("; ".join(errors))


async def _llamacpp(session: aiohttp.ClientSession, url: str) -> EngineFacts:
    props = await _json(session, url + "/props")
    if not isinstance(props.get("default_generation_settings"), dict):
        raise SourceError(f"GET {url}/props: no default_generation_settings")
    info = llamacpp_info(props)  # the version and a slot's context, as the exporter reads them
    sources = ["/props"]
    vocab = None
    try:
        models = await _json(session, url + "/v1/models")
        first = _first_model(models)
        meta = first.get("meta") if first else None
        vocab = _count(meta.get("n_vocab")) if isinstance(meta, dict) else None
        sources.append("/v1/models")
    except SourceError:
        pass  # the vocabulary stays unknown: --vocab-size, or the default id range
    return EngineFacts(
        kind="llamacpp", version=info.version,
        context_length_tokens=info.context_length_tokens,
        slots=_count(props.get("total_slots")), vocab_size=vocab,
        vocab_from="/v1/models" if vocab is not None else "",
        sources=tuple(sources))


async def _vllm(session: aiohttp.ClientSession, url: str) -> EngineFacts:
    async with _deadline():
        metrics = await get_text(session, url + "/metrics")
    family = parse(metrics, (VLLM_CACHE_INFO,)).families.get(VLLM_CACHE_INFO)
    if family is None or not family.samples:
        raise SourceError(f"GET {url}/metrics: no {VLLM_CACHE_INFO}")
    cache = family.samples[0].labels
    models = await _json(session, url + "/v1/models")
    try:
        version = str((await _json(session, url + "/version")).get("version", ""))
    except SourceError:
        version = ""
    first = _first_model(models)
    return EngineFacts(
        kind="vllm", version=version,
        context_length_tokens=_count(first.get("max_model_len")) if first else None,
        kv_pool_tokens=_count(_number(cache.get("kv_cache_size_tokens"))),
        flags={key: cache[key] for key in VLLM_CACHE_FLAGS if key in cache},
        sources=("/v1/models", "/metrics"))


async def _openai(session: aiohttp.ClientSession, url: str) -> EngineFacts:
    models = await _json(session, url + "/v1/models")
    first = _first_model(models)
    return EngineFacts(
        kind="openai",
        context_length_tokens=_count(first.get("max_model_len")) if first else None,
        sources=("/v1/models",))


def _first_model(models: dict[str, Any]) -> dict[str, Any] | None:
    data = models.get("data")
    first = data[0] if isinstance(data, list) and data else None
    return first if isinstance(first, dict) else None


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value > 0 else None


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def check_context(facts: EngineFacts, tokens: int, what: str) -> None:
    """Refuse a request the engine cannot hold, before sending anything."""
    if facts.context_length_tokens is not None and tokens > facts.context_length_tokens:
        raise EngineRefused(f"{what} of {tokens} tokens exceeds the engine's context length "
                            f"({facts.context_length_tokens}); lower --context-tokens")
    check_pool(facts, tokens, what)


def check_pool(facts: EngineFacts, tokens: int, what: str) -> None:
    """Refuse requests that together exceed the KV pool they share."""
    if facts.kv_pool_tokens is not None and tokens > facts.kv_pool_tokens:
        raise EngineRefused(f"{what} of {tokens} tokens exceeds the engine's KV pool "
                            f"({_pool_name(facts.kind)} {facts.kv_pool_tokens})")


def _pool_name(kind: str) -> str:
    return "max_total_num_tokens" if kind == "sglang" else "kv_cache_size_tokens"


def random_prompt(tokens: int, rng: random.Random, limit: int) -> list[int]:
    """Random token ids below `limit` (EngineFacts.token_id_limit): no prefix is shared
    with anything cached, so no cache hit."""
    lowest = min(LOWEST_TOKEN_ID, limit // 4)
    return [rng.randrange(lowest, limit) for _ in range(tokens)]
