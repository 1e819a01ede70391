"""StreamAsk: whether a generation request asks for a stream, read from its body's bytes
however they are cut."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.daemon.tap.asks import StreamAsk


def asks(path: str, body: bytes, cuts: list[int] = ()) -> bool:
    ask = StreamAsk.of("POST", path)
    assert ask is not None
    edges = [0, *sorted(min(c, len(body)) for c in cuts), len(body)]
    for start, end in zip(edges, edges[1:], strict=False):
        ask.feed(body[start:end])
    return ask.streaming


def test_the_flag_decides_and_the_route_gives_the_default():
    chat = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
    assert asks("/v1/chat/completions", chat)
    assert not asks("/v1/chat/completions", json.dumps({"messages": []}).encode())
    assert asks("/api/chat", json.dumps({"messages": []}).encode())  # Ollama streams by default
    assert not asks("/api/chat", json.dumps({"stream": False}).encode())
    assert asks("/vertex_generate", json.dumps({"instances": [{"text": "a"}],
                                                "parameters": {"stream": True}}).encode())
    assert StreamAsk.of("GET", "/v1/models") is None


def test_text_that_says_stream_is_not_the_flag():
    body = json.dumps({"messages": [{"role": "user", "content": '"stream": true'}],
                       "stream": False}).encode()
    assert not asks("/v1/chat/completions", body)


@settings(deadline=None)  # a loaded box may pause any example
@given(st.lists(st.integers(0, 2000), max_size=8), st.booleans(),
       st.sampled_from([(",", ":"), (", ", ": ")]))
def test_any_cut_reads_the_same_flag(cuts, flag, separators):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 900}],
                       "stream": flag, "max_tokens": 9}, separators=separators).encode()
    assert asks("/v1/chat/completions", body, cuts) is flag


def test_llamacpp_native_limit_and_stream_flag():
    ask = StreamAsk.of("POST", "/completion")
    assert ask is not None and not ask.streaming  # native routes stream only when asked
    ask.feed(b'{"prompt": "x", "n_predict": 64, "stream": true}')
    assert ask.streaming and ask.bounded
    unbounded = StreamAsk.of("POST", "/completion")
    assert unbounded is not None
    unbounded.feed(b'{"prompt": "x", "n_predict": -1, "stream": true}')
    assert not unbounded.bounded
