"""The names the exporter's series share with what reads them: label sets, the
engine sources' selector and the label values a rule's condition picks.

The collector writes these labels, and the health checks, the rules (alerts/) and
the dashboards (dashboards/) read them: each is written here once. Stdlib only, as
exporter/thresholds.py: the rule and dashboard generators import it too. The
series themselves are listed in docs/metrics.md.
"""

from __future__ import annotations

#: The labels Prometheus gives every series it scrapes from one exporter.
TARGET_LABELS = ("job", "instance")
#: deploy/targets/rigs.yml's target label naming the rig: the dashboards group by it,
#: so that two rigs (or two exporters of one) stay apart.
RIG_LABEL = "rig"

#: The labels of every per-engine family (engine, probe, stream tap): `engine` is the
#: instance's name from the config, `kind` the software (sglang, vllm, llamacpp).
ENGINE_LABEL = "engine"
KIND_LABEL = "kind"
ENGINE_LABELS = (ENGINE_LABEL, KIND_LABEL)
#: The label of every per-card family: the DRM card (card1).
CARD_LABEL = "card"


def label_list(*labels: str) -> str:
    """Labels as PromQL lists them in `by (...)` and `on (...)`."""
    return ", ".join(labels)


#: One engine's series, as a rule matches them (`on (...)`): its target and its labels.
ENGINE_SERIES = label_list(*TARGET_LABELS, *ENGINE_LABELS)
#: One engine named on its target, without its kind: what an engine source's
#: rig_source_up carries once ENGINE_SOURCE_UP has given it the `engine` label.
ENGINE_ON_TARGET = label_list(*TARGET_LABELS, ENGINE_LABEL)
#: One card's series, as a rule matches them; one sensor of a card.
CARD_SERIES = label_list(*TARGET_LABELS, CARD_LABEL)
CARD_SENSOR_SERIES = label_list(CARD_SERIES, "sensor")

#: The `source` of an engine's /metrics in rig_source_up and /api/health: `engine/<name>`;
#: of its stream probe: `probe/<name>`.
ENGINE_SOURCE_PREFIX = "engine/"
PROBE_SOURCE_PREFIX = "probe/"


def engine_source(name: str) -> str:
    """The source name of the engine configured as `name`."""
    return ENGINE_SOURCE_PREFIX + name


def probe_source(name: str) -> str:
    """The source name of the stream probe of the engine configured as `name`."""
    return PROBE_SOURCE_PREFIX + name


#: The matchers of the engine sources' rig_source_up, and of every other source's.
ENGINE_SOURCES = f'source=~"{ENGINE_SOURCE_PREFIX}.+"'
OTHER_SOURCES = f'source!~"{ENGINE_SOURCE_PREFIX}.+"'
#: rig_source_up for the engine sources, with the engine's `engine` label so that it
#: joins (and inhibits) the engine's own alerts.
ENGINE_SOURCE_UP = (f'label_replace(rig_source_up{{{ENGINE_SOURCES}}}, "{ENGINE_LABEL}",'
                    f' "$1", "source", "{ENGINE_SOURCE_PREFIX}(.+)")')


def engine_read_ago(offset: str) -> str:
    """ENGINE_SOURCE_UP as it read `offset` ago: absent where no exporter read the
    engine then (the start of a history, an outage)."""
    return ENGINE_SOURCE_UP.replace("}", "} offset " + offset, 1)


#: rig_source_up for the other sources, a probe's with its engine's `engine` label so
#: that RigEngineDown can inhibit it.
OTHER_SOURCES_UP = (f'label_replace(rig_source_up{{{OTHER_SOURCES}}}, "{ENGINE_LABEL}",'
                    f' "$1", "source", "{PROBE_SOURCE_PREFIX}(.+)")')

#: The `reason` of rig_gpu_throttle_active that RigGpuThermalDownclock counts. The
#: TEMP_HOTSPOT bit (thermal_junction) is set even at idle on Navi 31
#: (docs/facts/amdgpu.md#navi-31-hotspot-bit), so it is left out.
HOTSPOT_REASON = "thermal_junction"
THERMAL_DOWNCLOCK_REASONS = ("thermal_edge", "thermal_memory", "thermal_vr")
#: The same reasons as a PromQL matcher.
THERMAL_DOWNCLOCK_MATCHER = f'reason=~"{"|".join(THERMAL_DOWNCLOCK_REASONS)}"'

#: The temperature sensors RigGpuHot watches against their critical limit, and the
#: matchers of those and of the others.
HOT_SENSORS = ("junction", "memory")
HOT_SENSORS_MATCHER = f'sensor=~"{"|".join(HOT_SENSORS)}"'
OTHER_SENSORS_MATCHER = f'sensor!~"{"|".join(HOT_SENSORS)}"'
