"""DataLines: payloads come out whole however the bytes are cut, in bounded memory."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.streams import DataLines

BODY = (b'data: {"a": 1}\n\n'
        b": a comment line\n"
        b"event: ping\r\n"
        b'data: {"b": "x\\ny"}\r\n\r\n'
        b"data:[DONE]\n\n")
PAYLOADS = [b'{"a": 1}', b'{"b": "x\\ny"}', b"[DONE]"]


def test_whole_body_in_one_chunk():
    assert DataLines().feed(BODY) == PAYLOADS


@given(st.lists(st.integers(min_value=0, max_value=len(BODY)), max_size=12))
def test_any_cut_gives_the_same_payloads(cuts):
    lines = DataLines()
    edges = [0, *sorted(cuts), len(BODY)]
    got = [p for a, b in zip(edges, edges[1:], strict=False) for p in lines.feed(BODY[a:b])]
    assert got == PAYLOADS


def test_a_payload_is_taken_when_its_line_ends_not_its_event():
    lines = DataLines()
    assert lines.feed(b'data: {"a": 1}') == []
    assert lines.feed(b"\n") == [b'{"a": 1}']
    assert lines.feed(b"\n") == []


def test_an_over_long_line_is_dropped_and_the_next_one_read():
    lines = DataLines(max_line_bytes=64)
    assert lines.feed(b"data: " + b"x" * 40) == []
    assert lines.feed(b"x" * 40) == []  # over the bound: let go, not held
    assert len(lines._partial) == 0
    assert lines.feed(b"x" * 1000 + b'\ndata: {"ok": 1}\n') == [b'{"ok": 1}']
    assert lines.dropped_lines == 1


def test_the_rest_of_a_dropped_line_is_dropped_even_if_it_looks_like_a_line():
    lines = DataLines(max_line_bytes=64)
    assert lines.feed(b"data: " + b"x" * 60) == []  # over the bound: dropped
    assert lines.feed(b'data: {"inside": 1}\ndata: {"ok": 1}\n') == [b'{"ok": 1}']
    assert lines.dropped_lines == 1
