"""parse_frame on the shapes SGLang 0.5.23 and vLLM 0.33.0 write (checked in their wheels)."""

from __future__ import annotations

import json

from exporter.streams import Frame, parse_frame


def native(tokens: int, text_len: int = 10, cached: int = 0) -> bytes:
    # The layout of tokenizer_manager's out_dict: text, output_ids, then meta_info.
    return json.dumps({
        "text": "é\"meta_info\": {}" + "t" * text_len,
        "output_ids": list(range(tokens)),
        "meta_info": {"id": "abc", "finish_reason": None, "prompt_tokens": 12,
                      "completion_tokens": tokens, "cached_tokens": cached},
    }).encode()


def test_done():
    assert parse_frame(b"[DONE]").done


def test_native_small_and_large_agree():
    small = parse_frame(native(3, cached=7))
    assert small == Frame(completion_tokens=3, cached_tokens=7)
    big = native(5000, text_len=100_000, cached=9)  # past the fast-path size
    assert parse_frame(big) == Frame(completion_tokens=5000, cached_tokens=9)


def test_native_compact_json_as_orjson_writes_it():
    payload = json.dumps(json.loads(native(4, text_len=9000)), separators=(",", ":")).encode()
    assert parse_frame(payload).completion_tokens == 4


def test_openai_chat_role_chunk_carries_no_content():
    chunk = {"id": "x", "object": "chat.completion.chunk",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                          "finish_reason": None}]}
    assert parse_frame(json.dumps(chunk).encode()) == Frame(content=False)


def test_openai_chat_content_reasoning_and_tool_calls_carry_content():
    for delta in ({"content": "Hi"}, {"reasoning_content": "hm"}, {"reasoning": "hm"},
                  {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}):
        chunk = {"choices": [{"index": 0, "delta": delta}]}
        assert parse_frame(json.dumps(chunk).encode()).content is True, delta


def test_openai_completions_text():
    chunk = {"object": "text_completion", "choices": [{"index": 0, "text": " the"}]}
    assert parse_frame(json.dumps(chunk).encode()).content is True


def test_openai_usage_chunk_with_cached_tokens():
    chunk = {"choices": [], "usage": {"prompt_tokens": 900, "completion_tokens": 41,
                                      "total_tokens": 941,
                                      "prompt_tokens_details": {"cached_tokens": 768}}}
    assert parse_frame(json.dumps(chunk).encode()) == Frame(
        content=False, completion_tokens=41, cached_tokens=768)


def test_openai_usage_without_details():
    chunk = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4,
                                      "prompt_tokens_details": None}}
    assert parse_frame(json.dumps(chunk).encode()).cached_tokens is None


def test_error_frames_of_both_engines():
    sglang = {"error": {"message": "bad  request\nthing", "type": "invalid_request_error",
                        "code": 400}}
    assert parse_frame(json.dumps(sglang).encode()).error == "bad request thing"
    assert parse_frame(b'{"error": "boom"}').error == "boom"


def test_anything_else_is_unrecognised():
    for payload in (b"not json", b"[1, 2]", b'{"x": 1}', b"\xff\xfe"):
        assert parse_frame(payload).recognised is False, payload
