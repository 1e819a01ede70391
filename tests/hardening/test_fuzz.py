"""Hostile input, fuzzed: nothing may raise out of a source or the config loader.

Each property states what the code may do with any input (return a reading,
mark a reading absent, raise its own documented error) and Hypothesis looks
for an input that does anything else. The case counts are in `EXAMPLES`.
"""

from __future__ import annotations

import contextlib
import shutil
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.config import ConfigError, load_config, read_config_file
from exporter.daemon.engines.info import sglang_info
from exporter.daemon.sources import gpu_metrics
from exporter.daemon.sources.amdgpu_sysfs import AmdgpuSysfs
from exporter.thresholds import Thresholds
from tests.support.sysfs_tree import SYSFS_FIXTURE, card_device, hwmon_dir

EXAMPLES = 200
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def _valid_blob() -> bytes:
    return (card_device(SYSFS_FIXTURE, "card1") / "gpu_metrics").read_bytes()


@FUZZ
@given(st.binary(max_size=400))
def test_gpu_metrics_decoder_on_random_bytes(blob: bytes) -> None:
    # GpuMetricsError is the documented refusal: the source reports the readings absent.
    with contextlib.suppress(gpu_metrics.GpuMetricsError):
        gpu_metrics.decode(blob)


def test_gpu_metrics_decoder_on_every_truncation_of_a_valid_blob() -> None:
    blob = _valid_blob()
    for length in range(len(blob)):
        with pytest.raises(gpu_metrics.GpuMetricsError):
            gpu_metrics.decode(blob[:length])
    gpu_metrics.decode(blob)  # and the whole blob decodes


@pytest.fixture(scope="module")
def fuzz_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "sys"
    shutil.copytree(SYSFS_FIXTURE, root, symlinks=True)
    return root


# Files a card reading comes from, relative to the card's device directory
# ("hwmon/" is the card's hwmon directory).
TEXT_FILES = ("pp_dpm_sclk", "pp_dpm_mclk", "gpu_busy_percent", "mem_busy_percent",
              "mem_info_vram_used", "mem_info_vram_total", "current_link_speed",
              "current_link_width", "max_link_speed", "max_link_width",
              "hwmon/temp1_input", "hwmon/temp2_input", "hwmon/temp2_crit",
              "hwmon/power1_average", "hwmon/power1_cap", "hwmon/fan1_input",
              "hwmon/freq1_input")
hostile_text = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.lists(st.from_regex(r"\A(\d{1,3}|S): -?\d{0,9}(Mhz|MHz|mhz)? ?\*?\Z"),
             max_size=6).map("\n".join),
    st.sampled_from(["", "\n", "-1\n", "nan\n", "inf\n", "1e999\n", "99999999999999999999\n",
                     "0: 500Mhz\n1: 2500Mhz *\n2: 2500Mhz\n", "S: 5Mhz *\n0: 500Mhz\n"]),
)


@FUZZ
@given(files=st.dictionaries(st.sampled_from(TEXT_FILES), hostile_text, min_size=1, max_size=5),
       blob=st.one_of(st.none(), st.binary(max_size=200)))
def test_card_readers_on_random_text(fuzz_root: Path, files: dict[str, str],
                                     blob: bytes | None) -> None:
    device = card_device(fuzz_root, "card1")
    hwmon = hwmon_dir(fuzz_root, "card1")
    written = []
    for name, text in files.items():
        path = hwmon / name.removeprefix("hwmon/") if name.startswith("hwmon/") else device / name
        written.append((path, path.read_bytes() if path.exists() else None))
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
    if blob is not None:
        written.append((device / "gpu_metrics", (device / "gpu_metrics").read_bytes()))
        (device / "gpu_metrics").write_bytes(blob)
    try:
        # cards="all": garbled VRAM and gpu_metrics files may rightly read as an iGPU,
        # which the default ("discrete") leaves out; the property is that no input
        # raises or makes the card vanish.
        cards = AmdgpuSysfs(fuzz_root, cards="all").read_cards()
        assert {c.card for c in cards} >= {"card1"}
    finally:
        for path, old in written:
            if old is None:
                path.unlink()
            else:
                path.write_bytes(old)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=3),
    max_leaves=6,
)
SERVER_INFO_KEYS = ("version", "served_model_name", "model_path", "tp_size",
                    "enable_hierarchical_cache", "hicache_storage_backend",
                    "enable_mixed_chunk", "chunked_prefill_size", "schedule_policy",
                    "speculative_algorithm", "decode_log_interval")


@FUZZ
@given(st.dictionaries(st.sampled_from(SERVER_INFO_KEYS) | st.text(max_size=10), json_values,
                       max_size=9))
def test_server_info_reader_on_random_json(server: dict) -> None:
    info = sglang_info(server)
    labels = {name: getattr(info, name) for name in info.labels()}
    assert all(isinstance(v, str) for v in labels.values())
    assert info.context_length_tokens is None or (
        isinstance(info.context_length_tokens, int) and info.context_length_tokens > 0)


toml_scalars = (st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False)
                | st.text(max_size=30))
CONFIG_KEYS = {
    "web": ("listen_address", "scrape_deadline_seconds", "config_file", "access_log"),
    "gpu": ("enabled", "backend", "sysfs_root", "reading_max_age_seconds"),
    "host": ("enabled", "proc_root"),
    "log": ("level", "repeat_interval_seconds"),
    "thresholds": tuple(f.name for f in fields(Thresholds)),
}
ENGINE_KEYS = ("name", "url", "kind", "probe_interval_seconds", "probe_timeout_seconds",
               "probe_max_new_tokens", "stall_tracker", "stall_poll_interval_seconds",
               "stall_window_seconds")


def _table(keys: tuple[str, ...]) -> st.SearchStrategy[dict]:
    return st.dictionaries(st.sampled_from(keys) | st.text(max_size=8),
                           toml_scalars | st.lists(toml_scalars, max_size=3), max_size=5)


raw_configs = st.fixed_dictionaries(
    {}, optional={
        **{section: _table(keys) | toml_scalars for section, keys in CONFIG_KEYS.items()},
        "engine": st.lists(_table(ENGINE_KEYS) | toml_scalars, max_size=3) | toml_scalars,
    })


@FUZZ
@given(raw_configs)
def test_config_loader_on_random_tables(raw: dict) -> None:
    try:
        load_config(raw)
    except ConfigError as exc:
        assert str(exc).startswith("config key ")


@FUZZ
@given(st.text(max_size=300))
def test_config_file_reader_on_random_text(tmp_path: Path, text: str) -> None:
    path = tmp_path / "rig.toml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        raw = read_config_file(path)
    except ConfigError:
        return
    with contextlib.suppress(ConfigError):
        load_config(raw)
    assert isinstance(raw, dict) and tomllib.loads(text) == raw
