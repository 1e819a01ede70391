"""Config: the TOML file, flags over it, and errors that name the key and value."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import (
    DEFAULT_LISTEN_ADDRESS,
    Config,
    ConfigError,
    EngineConfig,
    WebConfig,
    load_config,
)
from exporter.daemon.cli import FLAGS, build_parser, config_from_args, main


def config_for(argv: list[str]):
    return config_from_args(build_parser().parse_args(argv))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rig.toml"
    path.write_text(text)
    return path


class TestDefaults:
    def test_listens_on_localhost_only(self) -> None:
        config = load_config({})
        assert config.web.listen_address == DEFAULT_LISTEN_ADDRESS
        assert config.web.host == "127.0.0.1"

    def test_an_empty_file_is_the_dataclass_defaults(self) -> None:
        assert load_config({}) == Config()
        raw = {"engine": [{"name": "main", "url": "http://127.0.0.1:30000"}]}
        assert load_config(raw).engines == (
            EngineConfig(name="main", url="http://127.0.0.1:30000"),)

    def test_help_shows_the_dataclass_defaults(self) -> None:
        helps = {f.flag: f.help_text() for f in FLAGS}
        assert helps["--web.scrape-deadline"] == (
            f"seconds each source may take per scrape "
            f"(default {WebConfig().scrape_deadline_seconds:g})")
        assert f"(default {DEFAULT_LISTEN_ADDRESS}; use" in helps["--web.listen-address"]
        assert helps["--log.level"] == "debug | info | warning | error (default info)"
        assert "default" not in helps["--web.config.file"]  # unset unless given

    def test_no_engines_and_auto_gpu_backend(self) -> None:
        config = load_config({})
        assert config.engines == ()
        assert (config.gpu.backend, config.gpu.sysfs_root, config.host.proc_root) == (
            "auto", "/sys", "/proc")


class TestFileAndFlags:
    def test_file_values_are_read(self, tmp_path: Path) -> None:
        path = write(tmp_path, """
[web]
listen_address = "0.0.0.0:9900"

[[engine]]
name = "main"
kind = "sglang"
url = "http://127.0.0.1:30000/"
probe_interval_seconds = 60

[[engine]]
name = "side"
kind = "vllm"
url = "http://127.0.0.1:8000"

[gpu]
backend = "sysfs"
sysfs_root = "/tmp/sys"
""")
        config = config_for(["--config.file", str(path)])
        assert config.web.port == 9900
        main_engine, side = config.engines
        assert (main_engine.name, main_engine.url, main_engine.probe_interval_seconds) == (
            "main", "http://127.0.0.1:30000", 60.0)
        assert (side.kind, side.probe_interval_seconds) == ("vllm", 0.0)
        assert config.gpu.sysfs_root == "/tmp/sys"

    def test_flags_override_the_file(self, tmp_path: Path) -> None:
        path = write(tmp_path, '[gpu]\nsysfs_root = "/from/file"\n[host]\nenabled = true\n')
        config = config_for([
            "--config.file", str(path), "--sysfs.root", "/from/flag", "--no-collector.host",
            "--web.listen-address", "127.0.0.1:1234", "--web.scrape-deadline", "2.5",
        ])
        assert config.gpu.sysfs_root == "/from/flag"
        assert config.host.enabled is False
        assert (config.web.port, config.web.scrape_deadline_seconds) == (1234, 2.5)

    def test_engine_flag_replaces_the_file_list(self, tmp_path: Path) -> None:
        path = write(tmp_path, '[[engine]]\nname = "old"\nurl = "http://127.0.0.1:1"\n')
        config = config_for([
            "--config.file", str(path),
            "--engine", "main=http://127.0.0.1:30000,kind=vllm,probe_interval_seconds=30",
        ])
        (engine,) = config.engines
        assert (engine.name, engine.kind, engine.probe_interval_seconds) == ("main", "vllm", 30)

    def test_the_stall_window_defaults_to_a_minute_and_takes_a_flag(self) -> None:
        (engine,) = config_for(["--engine", "main=http://127.0.0.1:30000"]).engines
        assert engine.stall_window_seconds == 60.0
        (engine,) = config_for(
            ["--engine", "main=http://127.0.0.1:30000,stall_window_seconds=6"]).engines
        assert engine.stall_window_seconds == 6

    def test_the_stall_window_follows_the_threshold_unless_the_engine_sets_one(
            self, tmp_path: Path) -> None:
        path = write(tmp_path, "[thresholds]\ndecode_stall_window_seconds = 120\n")
        (engine,) = config_for(["--config.file", str(path),
                                "--engine", "main=http://127.0.0.1:30000"]).engines
        assert engine.stall_window_seconds == 120
        (engine,) = config_for(["--config.file", str(path), "--engine",
                                "main=http://127.0.0.1:30000,stall_window_seconds=12"]).engines
        assert engine.stall_window_seconds == 12


class TestErrors:
    @pytest.mark.parametrize(
        ("raw", "key", "value"),
        [
            ({"web": {"listen_address": "localhost"}}, "web.listen_address", "localhost"),
            ({"gpu": {"backend": "nvml"}}, "gpu.backend", "nvml"),
            ({"gpu": {"enabled": "yes"}}, "gpu.enabled", "yes"),
            ({"engine": [{"name": "a", "url": "ftp://x"}]}, "engine[0].url", "ftp://x"),
            ({"engine": [{"name": "a"}]}, "engine[0].url", None),
            ({"engine": [{"name": "a", "url": "http://h:1", "kind": "tgi"}]},
             "engine[0].kind", "tgi"),
            ({"engine": [{"name": "a", "url": "http://h:1", "probe_interval_seconds": -5}]},
             "engine[0].probe_interval_seconds", -5),
            ({"engine": [{"name": "a", "url": "http://h:1", "stall_window_seconds": 0}]},
             "engine[0].stall_window_seconds", 0),
            ({"engine": [{"name": "a", "url": "http://h:1"}, {"name": "a", "url": "http://h:2"}]},
             "engine.name", "a"),
            ({"web": {"listen_adress": "x"}}, "web.listen_adress", "x"),
        ],
    )
    def test_message_names_key_and_value(self, raw: dict, key: str, value: object) -> None:
        with pytest.raises(ConfigError) as caught:
            load_config(raw)
        assert caught.value.key == key
        assert f"config key {key} = {value!r}" in str(caught.value)

    def test_bad_threshold_is_a_config_error(self) -> None:
        with pytest.raises(ConfigError, match="thresholds"):
            load_config({"thresholds": {"no_such_threshold": 1}})


class TestCommandLine:
    def test_bad_value_exits_2_with_one_line(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["--gpu.backend", "cuda"]) == 2
        err = capsys.readouterr().err
        assert err.strip() == (
            "rig-exporter: config key gpu.backend = 'cuda': "
            "must be one of auto, sysfs, pyrsmi, none")

    def test_invalid_toml_exits_2(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        path = write(tmp_path, "[web\nlisten_address = 1")
        assert main(["--config.file", str(path)]) == 2
        assert "not valid TOML" in capsys.readouterr().err

    def test_missing_file_exits_2(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["--config.file", str(tmp_path / "absent.toml")]) == 2
        assert "No such file" in capsys.readouterr().err

    def test_malformed_engine_flag_exits_2(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["--engine", "http://127.0.0.1:30000"]) == 2
        assert "NAME=URL" in capsys.readouterr().err


class TestGpuCards:
    def test_defaults_read_discrete_cards_and_expect_two(self) -> None:
        gpu = load_config({}).gpu
        assert (gpu.cards, gpu.expected_cards) == ("discrete", 2)

    @pytest.mark.parametrize(("value", "cards"), [
        ("all", "all"),
        (["0000:03:00.0", "0000:0A:00.0"], ("0000:03:00.0", "0000:0a:00.0")),
        ("0000:03:00.0,0000:0a:00.0", ("0000:03:00.0", "0000:0a:00.0")),
    ])
    def test_all_or_pci_addresses(self, value: object, cards: object) -> None:
        assert load_config({"gpu": {"cards": value}}).gpu.cards == cards

    @pytest.mark.parametrize("value", ["nvidia", ["03:00.0"], [], 2, "0000:03:00.0,card2"])
    def test_anything_else_names_the_key(self, value: object) -> None:
        with pytest.raises(ConfigError, match=r"gpu\.cards"):
            load_config({"gpu": {"cards": value}})

    @pytest.mark.parametrize("value", [-1, 1.5, "two", True])
    def test_expected_cards_is_a_whole_number(self, value: object) -> None:
        with pytest.raises(ConfigError, match=r"gpu\.expected_cards"):
            load_config({"gpu": {"expected_cards": value}})

    def test_flags(self) -> None:
        config = config_for(["--gpu.cards", "0000:0a:00.0", "--gpu.expected-cards", "1"])
        assert (config.gpu.cards, config.gpu.expected_cards) == (("0000:0a:00.0",), 1)


class TestKeptReadingsAndRepeats:
    def test_defaults(self) -> None:
        config = load_config({})
        assert config.gpu.reading_max_age_seconds == 1.0
        assert config.log_repeat_interval_seconds == 3600.0

    def test_zero_rereads_every_snapshot(self) -> None:
        assert load_config({"gpu": {"reading_max_age_seconds": 0}}).gpu.reading_max_age_seconds == 0

    @pytest.mark.parametrize(("table", "key", "value"), [
        ("gpu", "reading_max_age_seconds", -1), ("gpu", "reading_max_age_seconds", "1s"),
        ("log", "repeat_interval_seconds", 0), ("log", "repeat_interval_seconds", True),
    ])
    def test_bad_values_name_the_key(self, table: str, key: str, value: object) -> None:
        with pytest.raises(ConfigError, match=rf"{table}\.{key}"):
            load_config({table: {key: value}})
