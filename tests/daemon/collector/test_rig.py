"""The exporter's own families, and a source that fails: its series vanish, rig_source_up says 0."""

from __future__ import annotations

from exporter import __version__
from exporter.daemon.sources.gpu import GpuReading
from tests.daemon.collector.registry import answered, collected, failed, sample_names
from tests.support.rig_readings import card, engine, host


def test_source_up_and_duration_for_every_source() -> None:
    registry = collected(answered("gpu", GpuReading("sysfs", [card()]), 0.004),
                         answered("host", host(), 0.002),
                         failed("engine/main", "connection refused", 0.5))
    get = registry.get_sample_value
    assert get("rig_source_up", {"source": "gpu"}) == 1.0
    assert get("rig_source_up", {"source": "host"}) == 1.0
    assert get("rig_source_up", {"source": "engine/main"}) == 0.0
    assert get("rig_source_scrape_duration_seconds", {"source": "gpu"}) == 0.004
    assert get("rig_source_scrape_duration_seconds", {"source": "engine/main"}) == 0.5
    assert get("rig_build_info", {"version": __version__}) == 1.0


def test_source_up_keeps_the_source_name_and_no_engine_labels() -> None:
    # `engine/main` names a source; the alert rules take the engine's name out of it.
    registry = collected(answered("engine/main", engine()))
    up = next(f for f in registry.collect() if f.name == "rig_source_up")
    assert [s.labels for s in up.samples] == [{"source": "engine/main"}]


def test_a_failed_source_gives_absent_series_not_zeros() -> None:
    registry = collected(failed("gpu", "no amdgpu card under /sys/class/drm"),
                         answered("host", host()),
                         failed("engine/main", "HTTP 500"))
    names = sample_names(registry)
    assert not {n for n in names if n.startswith(("rig_gpu_", "rig_engine_"))}, names
    assert registry.get_sample_value("rig_engine_running_requests",
                                     {"engine": "main", "kind": "sglang"}) is None
    assert registry.get_sample_value("rig_host_memory_total_bytes") is not None


def test_a_source_not_configured_has_no_series_at_all() -> None:
    registry = collected(answered("host", host()))
    names = sample_names(registry)
    assert not {n for n in names if n.startswith(("rig_gpu_", "rig_engine_", "rig_probe_",
                                                  "rig_stream_"))}, names
    assert registry.get_sample_value("rig_source_up", {"source": "gpu"}) is None
