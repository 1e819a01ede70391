"""Who a request is: the [[engine.agent]] tables, their matching, the body's scan for
`user` and a limit, and the blame of a stall (exporter/daemon/tap/agents.py, asks.py, tally.py)."""

from __future__ import annotations

import json

import pytest
from multidict import CIMultiDict

from exporter.config import AgentConfig, ConfigError, load_config
from exporter.daemon.tap.agents import AgentBook
from exporter.daemon.tap.asks import StreamAsk
from exporter.daemon.tap.tally import NOBODY, Mark, blamed

TOKEN = "sk-secret-5f2e9b7c"


def agents(*tables: dict) -> tuple[AgentConfig, ...]:
    raw = {"engine": [{"name": "main", "url": "http://127.0.0.1:30000", "agent": list(tables)}]}
    return load_config(raw).engines[0].agents


BOOK = AgentBook(agents({"name": "analyst", "api_key": TOKEN},
                        {"name": "creative", "header": "X-Agent: creative"},
                        {"name": "monitor", "user": "hermes-nas"},
                        {"name": "wsl", "address": "172.20.0.0/16"},
                        {"name": "nas", "address": "10.0.0.5"}))


@pytest.mark.parametrize(("headers", "peer", "user", "name"), [
    ({"Authorization": f"Bearer {TOKEN}"}, "127.0.0.1", None, "analyst"),
    ({"Authorization": f"bearer {TOKEN}"}, "127.0.0.1", None, "analyst"),
    ({"x-api-key": TOKEN}, "127.0.0.1", None, "analyst"),  # the Anthropic client
    ({"Authorization": f"Bearer {TOKEN}x"}, "127.0.0.1", None, "other"),
    ({"Authorization": TOKEN}, "127.0.0.1", None, "other"),  # no scheme: no bearer token
    ({"x-agent": "creative"}, "127.0.0.1", None, "creative"),  # names are case-insensitive
    ({"X-Agent": "Creative"}, "127.0.0.1", None, "other"),  # values are not
    ({}, "127.0.0.1", "hermes-nas", "monitor"),
    ({}, "127.0.0.1", "hermes", "other"),
    ({}, "172.20.3.4", None, "wsl"),
    ({}, "::ffff:172.20.3.4", None, "wsl"),  # a dual-stack listener's IPv4 client
    ({}, "10.0.0.5", None, "nas"),
    ({}, "10.0.0.6", None, "other"),
    ({}, None, None, "other"),
    # The first match names it: the token's table comes before the address's.
    ({"Authorization": f"Bearer {TOKEN}"}, "172.20.3.4", "hermes-nas", "analyst"),
])
def test_first_match_names_the_request(headers, peer, user, name):
    assert BOOK.name(CIMultiDict(headers), peer, user) == name


def test_the_label_values_are_the_names_and_other():
    assert BOOK.names == ("analyst", "creative", "monitor", "wsl", "nas", "other")
    assert BOOK.wants_user and not AgentBook(agents({"name": "a", "api_key": "k"})).wants_user


def test_a_token_is_kept_out_of_repr():
    assert TOKEN not in repr(agents({"name": "analyst", "api_key": TOKEN}))


@pytest.mark.parametrize(("table", "key"), [
    ({"name": "a", "api_key": TOKEN, "user": "u"}, "engine[0].agent[0]"),
    ({"name": "a"}, "engine[0].agent[0]"),
    ({"name": "a", "api_key": f"{TOKEN} {TOKEN}"}, "engine[0].agent[0].api_key"),
    ({"name": "a", "header": f"X-Key {TOKEN}"}, "engine[0].agent[0].header"),
    ({"name": "a", "header": f"Authorization: Bearer {TOKEN}"}, "engine[0].agent[0].header"),
    ({"name": "a", "secret": TOKEN}, "engine[0].agent[0].secret"),
    ({"name": "a", "api_key_file": "/nonexistent/key"}, "engine[0].agent[0].api_key_file"),
    ({"name": "other", "user": "u"}, "engine[0].agent[0].name"),
    ({"name": "a", "address": "172.20.0.0/33"}, "engine[0].agent[0].address"),
])
def test_a_bad_table_names_its_key_and_hides_the_token(table, key):
    with pytest.raises(ConfigError) as error:
        agents(table)
    assert error.value.key == key
    assert TOKEN not in str(error.value)


def test_names_are_unique_per_engine():
    with pytest.raises(ConfigError, match="unique"):
        agents({"name": "a", "user": "x"}, {"name": "a", "user": "y"})


def test_a_key_file_is_read_to_its_first_line(tmp_path):
    path = tmp_path / "analyst.key"
    path.write_text(f"{TOKEN}\n")
    (agent,) = agents({"name": "a", "api_key_file": str(path)})
    assert agent.api_key == TOKEN
    path.write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        agents({"name": "a", "api_key_file": str(path)})


def body(**fields) -> bytes:
    return json.dumps({"model": "qwen", "messages": [{"role": "user", "content": "x" * 5000}],
                       **fields}).encode()


def scanned(data: bytes, piece: int) -> StreamAsk:
    ask = StreamAsk("/v1/chat/completions", wants_user=True)
    for at in range(0, len(data), piece):
        ask.feed(data[at:at + piece])
    return ask


@pytest.mark.parametrize("piece", [7, 100, 1 << 20])  # keys cut anywhere between pieces
def test_the_body_says_user_limit_and_stream(piece):
    ask = scanned(body(stream=True, max_tokens=512, user="hermes-nas"), piece)
    assert (ask.streaming, ask.bounded, ask.user) == (True, True, "hermes-nas")
    ask = scanned(body(stream=True, max_completion_tokens=9), piece)
    assert (ask.bounded, ask.user) == (True, None)
    native = json.dumps({"text": "hi", "stream": True,
                         "sampling_params": {"max_new_tokens": 64}}).encode()
    assert scanned(native, piece).bounded


def test_a_null_limit_or_a_schema_property_is_no_limit():
    assert not scanned(body(stream=True, max_tokens=None), 1 << 20).bounded
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"max_tokens": {"type": "integer"},
                                         "user": {"type": "string"}}}}}]
    ask = scanned(body(stream=True, tools=tools), 1 << 20)
    assert (ask.bounded, ask.user) == (False, None)


def test_a_role_named_user_is_no_user_field():
    assert scanned(body(stream=True), 1 << 20).user is None


def test_blame_is_the_overlap_of_the_gap_with_each_wait():
    names = ("a", "b", "other")
    start = Mark(100.0, {}, frozenset())  # nobody waits from t=100
    b_waits = start.then(102.0, frozenset({"b"}), names)
    both = b_waits.then(104.0, frozenset({"b", "other"}), names)
    done = both.then(107.0, frozenset(), names)
    # A gap of a's from 101 to 108: 1 s of nobody, b 102-107, other 104-107, nobody 107-108.
    assert blamed(start, 101.0, done, 108.0, names) == {
        "a": 0.0, "b": 5.0, "other": 3.0, NOBODY: 2.0}


@pytest.mark.parametrize("table", [{"agents": [{"name": "a", "api_key": TOKEN}]},
                                   {"api_key": TOKEN}])
def test_a_token_in_a_misplaced_key_is_not_shown(table):
    raw = {"engine": [{"name": "main", "url": "http://127.0.0.1:30000", **table}]}
    with pytest.raises(ConfigError, match="unknown key") as error:
        load_config(raw)
    assert TOKEN not in str(error.value)
