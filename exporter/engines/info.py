"""The engine's identity and scheduling flags, for rig_engine_info.

SGLang answers `/server_info` (0.5.23 deprecates the older `/get_server_info`) with
every server flag plus `version` (docs/facts/sglang.md#versions-and-server-info). vLLM has no such
endpoint; `/version` and `/v1/models` give its version and model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from exporter.engines.fetch import get_text
from exporter.snapshot import SourceError

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


async def fetch_info(session: aiohttp.ClientSession, base_url: str, kind: str) -> EngineInfo:
    if kind == "vllm":
        version = await _json(session, base_url + "/version")
        models = await _json(session, base_url + "/v1/models")
        data = models.get("data") or [{}]
        return EngineInfo(version=str(version.get("version", "")),
                          model=str(data[0].get("id", "")))
    errors = []
    for path in SGLANG_INFO_PATHS:
        try:
            return sglang_info(await _json(session, base_url + path))
        except SourceError as exc:
            errors.append(str(exc))
    raise SourceError("; ".join(errors))


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
