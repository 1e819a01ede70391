"""The multiprocess-file reader against files prometheus_client itself writes: they
appear, grow (past the first 64 KiB mapping), vanish and are replaced."""

from __future__ import annotations

import asyncio
import os

import pytest

from exporter.config import ConfigError, load_config
from exporter.daemon.engines.stall.readers import MultiprocReader, TrackerBlind
from tests.daemon.engines.stall.release_timeline import SimClock
from tests.support.sglang_release import ReleasePlayback

#: The playback writes under made-up pids.
PLAYBACK_PIDS_RUN = lambda pid: True  # noqa: E731


def read(reader: MultiprocReader):
    return asyncio.run(reader.read()).counters


def blind_cause(reader: MultiprocReader) -> str:
    with pytest.raises(TrackerBlind) as raised:
        read(reader)
    return raised.value.cause


def test_files_appear_grow_vanish_and_are_replaced(tmp_path):
    clock = SimClock()
    directory = str(tmp_path)
    reader = MultiprocReader(directory, 0.25, alive=PLAYBACK_PIDS_RUN)
    assert blind_cause(reader) == "no_files"  # nothing written yet: not an idle engine
    playback = ReleasePlayback("0.5.23", clock=clock, directory=directory)
    playback.start_requests(streaming=2)
    clock.advance(1.5)
    playback.sync()
    first = read(reader)
    # 30 batches a second (less one on float credit), both streams get each token; the
    # running gauge counts them from the first decode log (every 40 batches).
    assert 44.0 <= first.decode_passes <= 45.0 and first.running == 2.0
    assert first.streamed_tokens == 2 * first.decode_passes
    # Grow the tokenizer's file past its first 64 KiB with many labelled children.
    with playback._processes.acting_as("tokenizer"):
        for i in range(1500):
            playback._m("num_requests_total").labels(model_name=f"m{i:04d}").inc()
    clock.advance(1.0)
    playback.sync()
    grown = read(reader)
    assert grown.decode_passes >= first.decode_passes + 29 and grown.finished == 1500.0
    # An engine restart: the old files go, new ones start from zero.
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))
    assert blind_cause(reader) == "no_files"
    restarted = ReleasePlayback("0.5.23", clock=clock, directory=directory)
    restarted._processes._pids = {k: v + 1000 for k, v in restarted._processes._pids.items()}
    restarted.start_requests(streaming=1)
    clock.advance(0.5)
    restarted.sync()
    assert 14.0 <= read(reader).decode_passes <= 15.0
    reader.close()


def test_files_in_the_newest_tmp_subdirectory(tmp_path):
    (tmp_path / "tmpold").mkdir()
    newest = tmp_path / "tmpnew"
    newest.mkdir()
    clock = SimClock()
    playback = ReleasePlayback("0.5.10", clock=clock, directory=str(newest))
    playback.start_requests(streaming=2)
    reader = MultiprocReader(str(tmp_path), 0.25, alive=PLAYBACK_PIDS_RUN)
    assert read(reader).http_active == 2.0
    reader.close()


def test_metrics_dir_config(tmp_path):
    config = load_config({"engine": [{"name": "main", "url": "http://127.0.0.1:30000",
                                      "metrics_dir": str(tmp_path)}]})
    assert config.engines[0].metrics_dir == str(tmp_path)
    with pytest.raises(ConfigError, match="metrics_dir"):
        load_config({"engine": [{"name": "main", "url": "http://127.0.0.1:30000",
                                 "metrics_dir": str(tmp_path / "absent")}]})


def test_a_dead_engines_live_gauges_are_left_out(tmp_path):
    """An engine killed mid-stream into a reused directory leaves its livesum
    http_requests_active at 2; the new engine, idle, must read as idle. Its counters and
    mostrecent gauges stay in (prometheus_client keeps them too)."""
    clock = SimClock()
    directory = str(tmp_path)
    killed = ReleasePlayback("0.5.23", clock=clock, directory=directory)
    killed._processes._pids = {k: v + 5000 for k, v in killed._processes._pids.items()}
    killed.start_requests(streaming=2)
    clock.advance(1.5)
    killed.sync()
    dead = {str(pid) for pid in killed._processes._pids.values()}
    assert read(MultiprocReader(directory, 0.25, alive=lambda pid: True)).http_active == 2.0
    restarted = ReleasePlayback("0.5.23", clock=clock, directory=directory)
    restarted._processes._pids = {k: v + 7000 for k, v in restarted._processes._pids.items()}
    restarted.start_requests(streaming=1)
    clock.advance(0.5)
    restarted.sync()
    reader = MultiprocReader(directory, 0.25, alive=lambda pid: pid not in dead)
    counters = read(reader)
    assert counters.http_active == 1.0  # the live engine's stream alone
    assert counters.decode_passes is not None and counters.decode_passes > 44.0  # both add
    reader.close()
