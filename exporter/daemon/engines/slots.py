"""llama.cpp's `/slots`: each slot's context and the request it holds.

`GET /slots` (on with `--slots`) answers from the server's task queue with one
object per slot (tools/server/server-context.cpp `server_slot::to_json`): `id`,
`n_ctx`, `is_processing`, and, once the slot has had a task, `n_prompt_tokens`,
`n_prompt_tokens_processed`, `n_prompt_tokens_cache` and
`next_token[0].n_decoded`. It is served between batches, so it answers within a
batch's time even during a long prefill, and `n_decoded` is live
(docs/facts/llamacpp.md#slots). An idle slot keeps its last task's numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from exporter.daemon.snapshot import SourceError


@dataclass(frozen=True)
class Slot:
    id: int
    #: The most tokens, prompt and answer, a request in this slot may have.
    context_tokens: int
    processing: bool
    #: Of the slot's current task (or its last, while idle); 0 before its first.
    prompt_tokens: int = 0
    decoded_tokens: int = 0
    #: The task's id (`id_task`); None before the slot's first task.
    task: int | None = None

    @property
    def request_tokens(self) -> int:
        """Tokens of the request being processed (prompt and generated); 0 while idle."""
        return self.prompt_tokens + self.decoded_tokens if self.processing else 0


def parse_slots(text: str) -> list[Slot]:
    """Raises SourceError for a body that is not a list of slots."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"/slots: not JSON ({exc})") from exc
    if not isinstance(body, list):
        # `{"error": ...}` when the server was started without --slots.
        message = body.get("error", {}) if isinstance(body, dict) else {}
        detail = message.get("message") if isinstance(message, dict) else None
        raise SourceError(f"/slots: {detail or 'expected a list of slots'}")
    slots = []
    for item in body:
        if not isinstance(item, dict) or not _is_int(item.get("id")) \
                or not _is_int(item.get("n_ctx")):
            raise SourceError(f"/slots: a slot without id or n_ctx: {str(item)[:80]!r}")
        next_token = item.get("next_token")
        first = next_token[0] if isinstance(next_token, list) and next_token else {}
        decoded = first.get("n_decoded") if isinstance(first, dict) else None
        prompt, task = item.get("n_prompt_tokens"), item.get("id_task")
        slots.append(Slot(item["id"], item["n_ctx"], item.get("is_processing") is True,
                          prompt if _is_int(prompt) else 0,
                          decoded if _is_int(decoded) else 0,
                          task if _is_int(task) else None))
    return slots


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
