"""tap_listen_address: loopback unless the owner names a wider address; its flag."""

from __future__ import annotations

import pytest

from exporter.config import ConfigError, load_config
from exporter.daemon.cli import build_parser, config_from_args


def tap_address(value: object) -> str:
    raw = {"engine": [{"name": "main", "url": "http://127.0.0.1:30000",
                       "tap_listen_address": value}]}
    return load_config(raw).engines[0].tap_listen_address


def test_absent_means_no_tap():
    raw = {"engine": [{"name": "main", "url": "http://127.0.0.1:30000"}]}
    assert load_config(raw).engines[0].tap_listen_address == ""


@pytest.mark.parametrize(("given", "meant"), [
    ("127.0.0.1:30001", "127.0.0.1:30001"),
    ("30001", "127.0.0.1:30001"),
    (30001, "127.0.0.1:30001"),
    (":30001", "127.0.0.1:30001"),  # not every interface: that must be written out
    ("0.0.0.0:30001", "0.0.0.0:30001"),
    ("[::1]:30001", "[::1]:30001"),
])
def test_addresses(given, meant):
    assert tap_address(given) == meant


@pytest.mark.parametrize("bad", ["127.0.0.1", "host:port", "127.0.0.1:0", "1:70000", True])
def test_bad_addresses_name_the_key(bad):
    with pytest.raises(ConfigError, match=r"engine\[0\].tap_listen_address"):
        tap_address(bad)


def test_flag_sets_the_named_engine():
    args = build_parser().parse_args(["--engine", "main=http://127.0.0.1:30000",
                                      "--engine", "side=http://127.0.0.1:30100",
                                      "--tap.listen-address", "side=30101"])
    engines = config_from_args(args).engines
    assert [e.tap_listen_address for e in engines] == ["", "127.0.0.1:30101"]


def test_engine_flag_key_works_too():
    args = build_parser().parse_args(
        ["--engine", "main=http://127.0.0.1:30000,tap_listen_address=127.0.0.1:30001"])
    assert config_from_args(args).engines[0].tap_listen_address == "127.0.0.1:30001"


def test_flag_for_an_unknown_engine_is_an_error():
    args = build_parser().parse_args(["--engine", "main=http://127.0.0.1:30000",
                                      "--tap.listen-address", "nope=30001"])
    with pytest.raises(ConfigError, match="no engine named 'nope'"):
        config_from_args(args)
