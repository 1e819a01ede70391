"""What one `data:` payload carries: tokens, the end of the stream, an error, usage.

Five shapes reach the rig (checked in the sglang 0.5.10 and 0.5.23 and vllm 0.33.0 wheels):
- SGLang native `/generate` (and `/vertex_generate`): `{"text", "output_ids", "meta_info":
  {"completion_tokens" (cumulative), "cached_tokens", "prompt_tokens", ...}}`
  (tokenizer_manager.py). A frame carries tokens when `completion_tokens` grew.
- OpenAI chunks (`/v1/chat/completions`, `/v1/completions`, `/invocations`):
  `choices[].delta.content` (chat; also `reasoning_content` in SGLang, `reasoning` in
  vLLM, `tool_calls`) or `choices[].text` (completions). `usage` with the cumulative
  `completion_tokens` comes on the final chunk (`stream_options.include_usage`) or on
  every chunk (`continuous_usage_stats`), with `prompt_tokens_details.cached_tokens`
  (SGLang with `--enable-cache-report`, vLLM with `--enable-prompt-tokens-details`).
- Anthropic Messages (`/v1/messages`, anthropic/serving.py): `event:` + `data:` events
  whose data names its own `type`. `content_block_delta` with a `text_delta`,
  `thinking_delta` or `input_json_delta` carries tokens (a `signature_delta` does not);
  `message_delta.usage.output_tokens` is the count, `message_stop` the end.
- OpenAI Responses (`/v1/responses`, serving_responses.py): typed events too; a
  `response.*.delta` with text carries tokens (`response.output_text.delta`, and the
  reasoning and tool-argument deltas), `response.completed` or `response.incomplete`
  ends it with `response.usage.output_tokens`, `response.failed` with `response.error`.
- Errors inside a stream: `{"error": {"message": ...}}` (SGLang, vLLM, Anthropic's
  `error` event), then `[DONE]` where the API has one.

Only what the stream says is a count: a frame's number of tokens is never guessed (with
speculative decoding one frame carries several).

The tap meets every frame of every stream, so the common ones are told from their
bytes, without decoding the JSON: an OpenAI chunk with text and nothing else the
meter reads (`_is_text_chunk`), an Anthropic or Responses delta with text
(`_is_event_delta`), and the meta_info of a native frame (`_tail_meta_info`).
Everything else is decoded whole.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

DONE = b"[DONE]"
# Native frames repeat the whole text so far; past this size only meta_info is decoded.
_FAST_PATH_BYTES = 4096
# A key, not text: inside a JSON string every quote is escaped (`\"`).
_KEY_END = re.compile(rb"\s*:\s*")
_DELTA_FIELDS = ("content", "reasoning_content", "reasoning", "tool_calls")
# Anthropic deltas that carry generated tokens; a signature_delta closes a thinking block.
_ANTHROPIC_TOKEN_DELTAS = frozenset({"text_delta", "thinking_delta", "input_json_delta"})
# The Responses events that end a stream with its usage (ResponsesLifecycleEvent).
_RESPONSES_ENDS = frozenset({"response.completed", "response.incomplete"})
_decoder = json.JSONDecoder()

# In JSON an unescaped quote never occurs inside a string, so these match keys, never
# text: a `_DELTA_FIELDS` key with a non-empty string or list, a completions `text`
# with a non-empty string. The only string "content" of a chat chunk is
# delta.content (logprobs.content is a list: sglang protocol.py ChoiceLogprobs).
_DELTA_TEXT = re.compile(rb'"(?:content|reasoning_content|reasoning)"\s*:\s*"[^"]'
                         rb'|"tool_calls"\s*:\s*\[\s*[^\]\s]')
_CHOICE_TEXT = re.compile(rb'"text"\s*:\s*"[^"]')
_CHOICES = re.compile(rb'"choices"\s*:\s*\[')
# What the meter would read in a frame beyond its text; but SGLang writes `"usage":null`
# on every chunk (pydantic model_dump_json, protocol.py ChatCompletionStreamResponse).
_MORE = re.compile(rb'"(?:usage|error|meta_info)"')
_USAGE_NULL = re.compile(rb'"usage"\s*:\s*null\s*[,}]')
# The typed events' deltas: the event's type, then what says it carries text (an
# Anthropic token delta's own type, a Responses delta's non-empty string). Any key
# beyond them sends the event to the whole decode.
_EVENT_DELTA = re.compile(rb'"type"\s*:\s*"(content_block_delta|response\.[a-z_.]+\.delta)"')
_ANTHROPIC_TEXT = re.compile(rb'"type"\s*:\s*"(?:text|thinking|input_json)_delta"')
_RESPONSES_TEXT = re.compile(rb'"delta"\s*:\s*"[^"]')
_EVENT_MORE = re.compile(rb'"(?:usage|error|meta_info|choices|response)"')


@dataclass(frozen=True)
class Frame:
    done: bool = False
    error: str | None = None
    #: Cumulative generated tokens, where the frame says (native meta_info, usage).
    completion_tokens: int | None = None
    #: True/False where the frame's shape says whether it carries text (OpenAI);
    #: None where only a growing `completion_tokens` tells (native).
    content: bool | None = None
    cached_tokens: int | None = None
    #: The prompt, as the engine counted it (cached tokens included), where it says.
    prompt_tokens: int | None = None
    recognised: bool = True


_DONE_FRAME = Frame(done=True)
_UNRECOGNISED = Frame(recognised=False)
_TEXT_CHUNK = Frame(content=True)
_NO_CONTENT = Frame(content=False)
# The event types of the Messages API stream (anthropic/protocol.py); `error` is read
# as an error frame before.
_ANTHROPIC_EVENTS = frozenset({"message_start", "content_block_start", "content_block_delta",
                               "content_block_stop", "message_delta", "message_stop", "ping"})


def parse_frame(payload: bytes) -> Frame:
    """Read one payload; anything that is not one of the shapes above is `recognised=False`."""
    if payload == DONE:
        return _DONE_FRAME
    if _is_text_chunk(payload) or _is_event_delta(payload):
        return _TEXT_CHUNK
    # A small frame may be an error frame; a large one is a native frame whose text
    # may say "error" (an error frame is one short line).
    if len(payload) > _FAST_PATH_BYTES or b'"error"' not in payload:
        meta = _tail_meta_info(payload)
        if meta is not None:
            return _native(meta)
    return decode_frame(payload)


def decode_frame(payload: bytes) -> Frame:
    """The payload decoded whole: the reading that the byte-level paths keep to."""
    if payload == DONE:
        return _DONE_FRAME
    try:
        body = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return _UNRECOGNISED
    if not isinstance(body, dict):
        return _UNRECOGNISED
    if "error" in body:
        return Frame(error=_error_message(body["error"]))
    meta = body.get("meta_info")
    if isinstance(meta, dict):
        return _native(meta)
    if isinstance(body.get("choices"), list):
        return _openai(body)
    kind = body.get("type")
    if isinstance(kind, str):
        if kind.startswith("response."):
            return _responses(kind, body)
        if kind in _ANTHROPIC_EVENTS:
            return _anthropic(kind, body)
    return _UNRECOGNISED


def _is_text_chunk(payload: bytes) -> bool:
    """An OpenAI chunk that carries text and no usage, error or meta_info: what the
    full decode would read as `Frame(content=True)`. Any doubt answers False, and the
    frame is decoded whole. (A malformed frame that looks like a text chunk is timed
    as one: the engines write valid JSON.)"""
    if payload[:1] != b"{" or payload[-1:] != b"}":
        return False
    more = _MORE.search(payload)
    if more is not None and (_USAGE_NULL.match(payload, more.start()) is None
                             or _MORE.search(payload, more.end()) is not None):
        return False
    if _CHOICES.search(payload) is None:
        return False
    text = _DELTA_TEXT if b'"delta"' in payload else _CHOICE_TEXT
    return text.search(payload) is not None


def _is_event_delta(payload: bytes) -> bool:
    """An Anthropic `content_block_delta` or a Responses `response.*.delta` that carries
    text and nothing else: what the full decode reads as `Frame(content=True)`."""
    if payload[:1] != b"{" or payload[-1:] != b"}" or _EVENT_MORE.search(payload):
        return False
    kind = _EVENT_DELTA.search(payload)
    if kind is None:
        return False
    text = _ANTHROPIC_TEXT if kind.group(1) == b"content_block_delta" else _RESPONSES_TEXT
    return text.search(payload) is not None


def _tail_meta_info(payload: bytes) -> dict | None:
    """meta_info alone, when it is the frame's last key (it is: tokenizer_manager's out_dict)."""
    at = payload.rfind(b'"meta_info"')
    if at <= 0 or payload[at - 1] == 0x5C:  # a backslash: inside a string after all
        return None
    match = _KEY_END.match(payload, at + len(b'"meta_info"'))
    if match is None:
        return None
    try:
        meta, _ = _decoder.raw_decode(payload[match.end():].decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return meta if isinstance(meta, dict) else None


def _native(meta: dict) -> Frame:
    return Frame(completion_tokens=_count(meta.get("completion_tokens")),
                 cached_tokens=_count(meta.get("cached_tokens")),
                 prompt_tokens=_count(meta.get("prompt_tokens")))


def _openai(body: dict) -> Frame:
    content = any(_has_text(choice) for choice in body["choices"])
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return Frame(content=content)
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    return Frame(content=content, completion_tokens=_count(usage.get("completion_tokens")),
                 cached_tokens=cached, prompt_tokens=_count(usage.get("prompt_tokens")))


def _anthropic(kind: str, body: dict) -> Frame:
    if kind == "content_block_delta":
        delta = body.get("delta")
        return Frame(content=isinstance(delta, dict)
                     and delta.get("type") in _ANTHROPIC_TOKEN_DELTAS)
    if kind == "message_delta":
        # SGLang gives the prompt and its cache reads on message_start; vLLM only here,
        # at the end (its message_start is built from the first chunk, before the usage
        # details: vllm 0.32 entrypoints/anthropic/serving.py). The later reading wins.
        usage = body.get("usage")
        if isinstance(usage, dict):
            cached, prompt = _anthropic_prompt(usage)
            return Frame(content=False, completion_tokens=_count(usage.get("output_tokens")),
                         cached_tokens=cached, prompt_tokens=prompt)
    elif kind == "message_start":
        message = body.get("message")
        usage = message.get("usage") if isinstance(message, dict) else None
        if isinstance(usage, dict):
            cached, prompt = _anthropic_prompt(usage)
            return Frame(content=False, cached_tokens=cached, prompt_tokens=prompt)
    elif kind == "message_stop":
        return Frame(done=True, content=False)
    return _NO_CONTENT


def _anthropic_prompt(usage: dict) -> tuple[int | None, int | None]:
    """(cache reads, the whole prompt) of an Anthropic usage. Its input_tokens leave out
    the cache reads (SGLang's anthropic/serving.py: prompt_tokens - cached_tokens; vLLM's
    _build_anthropic_usage the same)."""
    cached = _count(usage.get("cache_read_input_tokens"))
    uncached = _count(usage.get("input_tokens"))
    return cached, None if uncached is None else uncached + (cached or 0)


def _responses(kind: str, body: dict) -> Frame:
    if kind.endswith(".delta"):
        delta = body.get("delta")
        return Frame(content=isinstance(delta, str) and delta != "")
    response = body.get("response")
    if not isinstance(response, dict):
        return _NO_CONTENT
    if kind == "response.failed":
        return Frame(done=True, content=False,
                     error=_error_message(response.get("error") or "response.failed"))
    if kind not in _RESPONSES_ENDS:
        return _NO_CONTENT
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return Frame(done=True, content=False)
    details = usage.get("input_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    return Frame(done=True, content=False, completion_tokens=_count(usage.get("output_tokens")),
                 cached_tokens=cached, prompt_tokens=_count(usage.get("input_tokens")))


def _has_text(choice: object) -> bool:
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return any(delta.get(f) for f in _DELTA_FIELDS)
    return bool(choice.get("text"))


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _error_message(error: object) -> str:
    if isinstance(error, dict):
        error = error.get("message", error)
    return " ".join(str(error).split())[:200] or "error frame"
