"""parse_frame on the shapes SGLang 0.5.23 and vLLM 0.33.0 write (checked in their wheels)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

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
    assert small == Frame(completion_tokens=3, cached_tokens=7, prompt_tokens=12)
    big = native(5000, text_len=100_000, cached=9)  # past the fast-path size
    assert parse_frame(big) == Frame(completion_tokens=5000, cached_tokens=9, prompt_tokens=12)


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
        content=False, completion_tokens=41, cached_tokens=768, prompt_tokens=900)


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


# ---- the byte-level readings keep to the whole decode (frames.py `_is_text_chunk`)

def sglang_chunk(delta: dict, usage: object = None, **choice: object) -> bytes:
    """A chat chunk as SGLang 0.5.23 writes it: pydantic model_dump_json, compact, with
    `"usage":null` and the delta's None fields (protocol.py ChatCompletionStreamResponse)."""
    return json.dumps({
        "id": "3f2a", "object": "chat.completion.chunk", "created": 1764547200, "model": "m",
        "choices": [{"index": 0, "delta": {"role": None, "content": None,
                                           "reasoning_content": None, **delta},
                     "logprobs": None, "finish_reason": None, "matched_stop": None, **choice}],
        "usage": usage}, separators=(",", ":")).encode()


def test_the_common_chunks_are_read_from_their_bytes():
    from exporter.streams.frames import _is_text_chunk

    for payload in (sglang_chunk({"content": "Hi"}),
                    sglang_chunk({"reasoning_content": "hm"}),
                    json.dumps({"choices": [{"index": 0, "delta": {"content": " w"}}],
                                "usage": None}).encode(),  # with json.dumps's spaces
                    json.dumps({"object": "text_completion",
                                "choices": [{"index": 0, "text": " the"}]}).encode()):
        assert _is_text_chunk(payload), payload
        assert parse_frame(payload) == Frame(content=True)


NASTY_TEXT = ['say "content": "x"', '"usage": {"completion_tokens": 9}', "error", "usage",
              "meta_info", "a\\", '"text":"t"', '{"tool_calls": [1]}', "", "é\n\"", "]"]


def test_byte_level_reading_agrees_with_the_whole_decode_on_hard_cases():
    from exporter.streams.frames import decode_frame

    usage = {"prompt_tokens": 9, "completion_tokens": 5,
             "prompt_tokens_details": {"cached_tokens": 4}}
    payloads = [
        sglang_chunk({"content": ""}),  # the role chunk: no text
        sglang_chunk({"role": "assistant", "content": ""}),
        sglang_chunk({"content": "x"}, usage=usage),  # continuous usage: counts to read
        sglang_chunk({"content": "error"}),
        sglang_chunk({"tool_calls": []}),
        sglang_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}),
        sglang_chunk({"content": ""}, logprobs={"content": [
            {"token": "a", "logprob": -1.0, "bytes": [97], "top_logprobs": []}]}),
        json.dumps({"choices": [{"index": 0, "delta": {"content": ""}}],
                    "id": 'say "content": "x"'}).encode(),
        json.dumps({"choices": [{"index": 0, "delta": {}}, {"index": 1, "delta": {
            "content": "b"}}]}).encode(),
        json.dumps({"choices": [{"index": 0, "text": ""}], "usage": None}).encode(),
        json.dumps({"choices": [], "usage": usage}).encode(),
        json.dumps({"choices": None, "delta": {"content": "x"}}).encode(),
        json.dumps({"delta": {"content": "x"}}).encode(),
        json.dumps({"choices": [{"delta": {"content": "x"}}], "usage": None,
                    "sglext": {"usage": {"completion_tokens": 3}}}).encode(),
        json.dumps({"choices": [{"delta": {"content": "x"}, "usage": None}],
                    "usage": {"completion_tokens": 3}}).encode(),
        json.dumps({"error": {"message": "boom"}, "choices": [{"delta": {"content": "x"}}]}
                   ).encode(),
        json.dumps({"text": "error", "meta_info": {"completion_tokens": 2,
                                                   "cached_tokens": 1}}).encode(),
        *(sglang_chunk({"content": "", "reasoning_content": None}, id=text).replace(
            b'"id":', b'"note":') for text in NASTY_TEXT),
        *(sglang_chunk({"content": text}) for text in NASTY_TEXT),
    ]
    for payload in payloads:
        assert parse_frame(payload) == decode_frame(payload), payload


delta_values = st.one_of(st.none(), st.sampled_from(NASTY_TEXT), st.text(max_size=6),
                         st.lists(st.just({"index": 0}), max_size=2))
deltas = st.dictionaries(st.sampled_from(["role", "content", "reasoning_content", "reasoning",
                                          "tool_calls"]), delta_values, max_size=4)
choices = st.one_of(st.fixed_dictionaries({"index": st.just(0), "delta": deltas}),
                    st.fixed_dictionaries({"index": st.just(0), "text": delta_values}))
chunks = st.fixed_dictionaries(
    {"choices": st.lists(choices, max_size=3)},
    optional={"usage": st.one_of(st.none(), st.fixed_dictionaries(
                  {"completion_tokens": st.integers(0, 9)})),
              "id": st.sampled_from(NASTY_TEXT),
              "error": st.sampled_from(["boom", {"message": "x"}])})



# ---- the typed events of /v1/messages and /v1/responses (sglang 0.5.23
# anthropic/serving.py, serving_responses.py)

def test_anthropic_events():
    def event(body: dict) -> Frame:
        return parse_frame(json.dumps(body, separators=(",", ":")).encode())

    text = {"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Hi"}}
    assert event(text) == Frame(content=True)
    for kind in ("thinking_delta", "input_json_delta"):
        assert event({**text, "delta": {"type": kind, "thinking": "x"}}).content is True
    assert event({**text, "delta": {"type": "signature_delta", "signature": "s"}}) == Frame(
        content=False)
    assert event({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                  "usage": {"output_tokens": 41}}) == Frame(content=False, completion_tokens=41)
    assert event({"type": "message_stop"}) == Frame(done=True, content=False)
    assert event({"type": "ping"}) == Frame(content=False)
    assert event({"type": "error", "error": {"type": "overloaded_error",
                                             "message": "busy"}}).error == "busy"


def test_responses_events():
    def event(body: dict) -> Frame:
        return parse_frame(json.dumps(body).encode())

    delta = {"type": "response.output_text.delta", "sequence_number": 7, "item_id": "m",
             "output_index": 0, "content_index": 0, "delta": "Hi", "logprobs": []}
    assert event(delta) == Frame(content=True)
    assert event({**delta, "delta": ""}) == Frame(content=False)
    for kind in ("response.reasoning_text.delta", "response.function_call_arguments.delta"):
        assert event({**delta, "type": kind}).content is True
    usage = {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 4},
             "output_tokens": 12, "total_tokens": 21}
    assert event({"type": "response.completed", "response": {"usage": usage}}) == Frame(
        done=True, content=False, completion_tokens=12, cached_tokens=4, prompt_tokens=9)
    assert event({"type": "response.created", "response": {"usage": None}}) == Frame(
        content=False)
    assert event({"type": "response.failed", "response": {"error": {
        "code": "server_error", "message": "boom"}}}).error == "boom"


EVENT_TYPES = ["content_block_delta", "message_delta", "response.output_text.delta",
               "response.reasoning_text.delta", "response.completed", "response.output_item.added",
               "text_delta", "signature_delta"]
event_deltas = st.one_of(
    st.sampled_from(NASTY_TEXT),
    st.fixed_dictionaries({"type": st.sampled_from(["text_delta", "thinking_delta",
                                                    "input_json_delta", "signature_delta"])},
                          optional={"text": st.sampled_from(NASTY_TEXT)}))
events = st.fixed_dictionaries(
    {"type": st.sampled_from(EVENT_TYPES)},
    optional={"delta": event_deltas, "index": st.just(0), "item_id": st.sampled_from(NASTY_TEXT),
              "usage": st.fixed_dictionaries({"output_tokens": st.integers(0, 9)}),
              "logprobs": st.just([]), "error": st.just({"message": "x"})})


@settings(deadline=None)  # a loaded box may pause any example
@given(st.one_of(chunks, events), st.sampled_from([(",", ":"), (", ", ": ")]))
def test_byte_level_reading_agrees_with_the_whole_decode_on_any_chunk_or_event(body,
                                                                             separators):
    from exporter.streams.frames import decode_frame

    payload = json.dumps(body, separators=separators).encode()
    assert parse_frame(payload) == decode_frame(payload)


def test_the_event_deltas_are_read_from_their_bytes():
    from exporter.streams.frames import _is_event_delta

    for body in ({"type": "content_block_delta", "index": 0,
                  "delta": {"type": "text_delta", "text": "Hi"}},
                 {"content_index": 0, "delta": " w", "item_id": "msg_1", "logprobs": [],
                  "output_index": 0, "sequence_number": 5,
                  "type": "response.output_text.delta"}):  # the openai types' key order
        payload = json.dumps(body, separators=(",", ":")).encode()
        assert _is_event_delta(payload), payload


def test_anthropic_cache_reads_known_only_at_the_end_are_read_there():
    # vLLM 0.32 builds message_start from its first chunk, before the usage details:
    # the cache reads come on message_delta, input_tokens then the uncached part.
    start = {"type": "message_start", "message": {"id": "m", "type": "message", "usage": {
        "input_tokens": 1093, "output_tokens": 0}}}
    delta = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {
        "input_tokens": 69, "cache_read_input_tokens": 1024, "output_tokens": 4}}
    assert parse_frame(json.dumps(start).encode()) == Frame(
        content=False, cached_tokens=None, prompt_tokens=1093)
    assert parse_frame(json.dumps(delta).encode()) == Frame(
        content=False, completion_tokens=4, cached_tokens=1024, prompt_tokens=1093)


def test_anthropic_prompt_is_its_input_and_cache_reads():
    # SGLang's input_tokens leave out the cached prompt (anthropic/serving.py
    # _anthropic_input_tokens): the prompt the engine counted is both.
    start = {"type": "message_start", "message": {"id": "m", "type": "message", "usage": {
        "input_tokens": 5, "cache_read_input_tokens": 4, "output_tokens": 0}}}
    assert parse_frame(json.dumps(start).encode()) == Frame(
        content=False, cached_tokens=4, prompt_tokens=9)
