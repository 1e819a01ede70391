"""exporter/schema.py: the names it gives agree with what the exporter writes."""

from __future__ import annotations

from exporter.config import EngineConfig
from exporter.daemon.engines.probe import ProbeSource
from exporter.daemon.engines.source import EngineSource
from exporter.daemon.sources.amdgpu_sysfs import _TEMP_SENSORS
from exporter.daemon.sources.gpu_metrics import THROTTLE_REASONS
from exporter.schema import (
    ENGINE_SOURCE_UP,
    ENGINE_SOURCES,
    HOT_SENSORS,
    HOTSPOT_REASON,
    OTHER_SOURCES_UP,
    THERMAL_DOWNCLOCK_MATCHER,
    THERMAL_DOWNCLOCK_REASONS,
    engine_source,
    probe_source,
)


def test_thermal_reasons_are_reasons_the_exporter_exports() -> None:
    assert set(THERMAL_DOWNCLOCK_REASONS) < set(THROTTLE_REASONS)
    assert HOTSPOT_REASON in THROTTLE_REASONS
    assert HOTSPOT_REASON not in THERMAL_DOWNCLOCK_REASONS
    assert THERMAL_DOWNCLOCK_MATCHER == 'reason=~"thermal_edge|thermal_memory|thermal_vr"'


def test_hot_sensors_are_sensors_a_card_has() -> None:
    # hwmon's temp*_label values as the exporter names them (`sensor`).
    assert set(HOT_SENSORS) <= set(_TEMP_SENSORS.values())


def test_source_names_are_the_sources_own() -> None:
    engine = EngineSource(EngineConfig(name="main", url="http://127.0.0.1:30000"))
    assert engine.name == engine_source("main") == "engine/main"
    assert ProbeSource(engine).name == probe_source("main") == "probe/main"
    assert ENGINE_SOURCES == 'source=~"engine/.+"'
    assert ENGINE_SOURCE_UP == ('label_replace(rig_source_up{source=~"engine/.+"}, "engine",'
                                ' "$1", "source", "engine/(.+)")')
    assert OTHER_SOURCES_UP.startswith('label_replace(rig_source_up{source!~"engine/.+"}')
