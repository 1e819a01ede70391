"""The engine's identity and scheduling flags, for rig_engine_info.

SGLang answers `/server_info` (0.5.23 deprecates the older `/get_server_info`) with
every server flag plus `version` (docs/facts/sglang.md#versions-and-server-info). vLLM has no such
endpoint; `/version` and `/v1/models` give its version and model. llama.cpp answers
`/props` (`llamacpp_info`).

The context length (rig_engine_context_length_tokens, not a label of rig_engine_info):
no `/server_info` of SGLang 0.5.10 or 0.5.23 has a `context_len` field. It has
`context_length`, the `--context-length` flag (null when not given), and
`max_req_input_len`, which is also bounded by the KV pool. The model's own, SGLang's
`model_config.context_len`, is `max_model_len` of `/v1/models` (http_server.py
`available_models`), as in vLLM: asked only where the flag was not given.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from exporter.daemon.engines.fetch import get_text
from exporter.daemon.snapshot import SourceError

SGLANG_INFO_PATHS = ("/server_info", "/get_server_info")


@dataclass(frozen=True)
class EngineInfo:
    version: str = ""
    model: str = ""
    tp_size: str = ""
    hicache: str = ""
    hicache_storage: str = ""
    mixed_chunk: str = ""
    chunked_prefill_size: str = ""
    schedule_policy: str = ""
    #: The speculative algorithm (EAGLE, NEXTN, ...), "" when off.
    speculative: str = ""
    decode_log_interval: str = ""
    #: Not a label: rig_engine_context_length_tokens. None where the engine does not say.
    context_length_tokens: int | None = None
    #: Not a label: the forward-pass feed's base name (`forward_pass_metrics_ipc_name`)
    #: while `enable_forward_pass_metrics` is on; "" when on without a name (the
    #: scheduler then binds a temporary file /server_info does not give); None: off.
    forward_pass_feed: str | None = None
    #: Not a label: `dp_size`, the feed's ranks. None where the engine does not say.
    dp_size: int | None = None

    @classmethod
    def labels(cls) -> tuple[str, ...]:
        """The fields that are rig_engine_info's labels."""
        return tuple(n for n in cls.__dataclass_fields__ if n not in _NOT_LABELS)


_NOT_LABELS = frozenset({"context_length_tokens", "forward_pass_feed", "dp_size"})


async def fetch_info(session: aiohttp.ClientSession, base_url: str, kind: str) -> EngineInfo:
    if kind == "llamacpp":
        return llamacpp_info(await _json(session, base_url + "/props"))
    if kind == "vllm":
        version = await _json(session, base_url + "/version")
        models = await _json(session, base_url + "/v1/models")
        data = models.get("data") or [{}]
        return EngineInfo(version=str(version.get("version", "")),
                          model=str(data[0].get("id", "")),
                          context_length_tokens=_model_len(models))
    errors = []
    for path in SGLANG_INFO_PATHS:
        try:
            info = sglang_info(await _json(session, base_url + path))
        except SourceError as exc:
            errors.append(str(exc))
            continue
        if info.context_length_tokens is None:
            try:
                models = await _json(session, base_url + "/v1/models")
            except SourceError:
                return info  # the info stands; the length stays unknown (absent)
            info = dataclasses.replace(info, context_length_tokens=_model_len(models))
        return info
    raise SourceError("; ".join(errors))


def _model_len(models: dict[str, Any]) -> int | None:
    """`max_model_len` of the first model of /v1/models (the served model comes first)."""
    data = models.get("data")
    first = data[0] if isinstance(data, list) and data else None
    return _tokens(first.get("max_model_len")) if isinstance(first, dict) else None


def _tokens(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def sglang_info(server: dict[str, Any]) -> EngineInfo:
    """Pick the rig_engine_info labels out of SGLang's server_info JSON."""
    storage = server.get("hicache_storage_backend")
    return EngineInfo(
        version=str(server.get("version", "")),
        model=str(server.get("served_model_name") or server.get("model_path") or ""),
        tp_size=_text(server.get("tp_size")),
        hicache=_text(server.get("enable_hierarchical_cache")),
        hicache_storage="" if storage is None else str(storage),
        mixed_chunk=_text(server.get("enable_mixed_chunk")),
        chunked_prefill_size=_text(server.get("chunked_prefill_size")),
        schedule_policy=_text(server.get("schedule_policy")),
        speculative=_text(server.get("speculative_algorithm")),
        decode_log_interval=_text(server.get("decode_log_interval")),
        context_length_tokens=_tokens(server.get("context_length")),
        forward_pass_feed=(str(server.get("forward_pass_metrics_ipc_name") or "")
                           if server.get("enable_forward_pass_metrics") is True else None),
        dp_size=_tokens(server.get("dp_size")),
    )


def llamacpp_info(props: dict[str, Any]) -> EngineInfo:
    """llama.cpp's `/props` (docs/facts/llamacpp.md#props): `build_info` is the only
    version it gives (`b<build>-<commit>`), `default_generation_settings.n_ctx` a
    slot's context, the most one request may have."""
    settings = props.get("default_generation_settings")
    settings = settings if isinstance(settings, dict) else {}
    params = settings.get("params")
    speculative = params.get("speculative.types") if isinstance(params, dict) else None
    return EngineInfo(
        version=_text(props.get("build_info")),
        model=_text(props.get("model_alias") or props.get("model_path")),
        speculative="" if speculative in (None, "none") else _text(speculative),
        context_length_tokens=_tokens(settings.get("n_ctx")),
    )


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


async def _json(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    text = await get_text(session, url)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"GET {url}: not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise SourceError(f"GET {url}: expected a JSON object, got {type(value).__name__}")
    return value
