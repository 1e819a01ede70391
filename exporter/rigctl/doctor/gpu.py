"""GPU checks: the cards read against `[gpu] expected_cards`, each card's gpu_metrics
revision and dpm tables, its energy counter against its power reading, and its
critical temperature limits.

The count, the energy and the limits come from the exporter's /metrics. The
gpu_metrics revision and the dpm tables come from the card's own files, read
with the exporter's reader (`AmdgpuSysfs`) on the rig host (--config.file): it
keeps the reason each file could not be used.

The energy check settles the counter's unit. gpu_metrics v1.4 and later document
`energy_accumulator` in 2^-16 J; the 7900 XTX's v1.3 struct states no unit
(exporter/daemon/sources/energy_counter.py). Over the watch (5 s or more) the counter's
joules per second must match the power reading within 25 %.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.daemon.snapshot import SourceError
from exporter.daemon.sources.amdgpu_sysfs import AmdgpuSysfs, CardReading
from exporter.rigctl.doctor.context import NEEDS_CONFIG, Context
from exporter.rigctl.doctor.report import Check, fail, ok, skip, warn

#: How far the counter's rate may stray from the power reading.
ENERGY_TOLERANCE = 0.25
#: The sensors RigGpuHot judges against their critical limits.
HOT_SENSORS = ("junction", "memory")
DPM_FILES = {"sclk": "pp_dpm_sclk", "mclk": "pp_dpm_mclk"}


@dataclass
class CardFiles:
    """What the exporter's reader made of each card's files, read once now."""

    readings: dict[str, CardReading] = field(default_factory=dict)
    problems: dict[tuple[str, str], str] = field(default_factory=dict)
    error: str = ""


def gpu_checks(c: Context) -> list[Check]:
    last = c.watch.last
    if not last.has("rig_source_up", source="gpu"):
        return [skip("gpu_cards", "rig", "the exporter reads no GPU ([gpu] enabled = false "
                     "or backend = none)")]
    files = _read_files(c)
    out = [_cards(c)]
    for card in sorted({s.labels["card"] for s in last.all("rig_gpu_present") if s.value}):
        out += [_gpu_metrics(card, files), _dpm_tables(card, files), _energy(c, card, files),
                _limits(c, card)]
    return out


def _read_files(c: Context) -> CardFiles | None:
    if c.config is None or not c.config.gpu.enabled:
        return None
    sysfs = AmdgpuSysfs(c.config.gpu.sysfs_root, c.config.gpu.cards)
    try:
        readings = sysfs.read_cards()
    except SourceError as exc:
        return CardFiles(error=str(exc))
    return CardFiles({r.card: r for r in readings if r.present}, sysfs.problems)


def _cards(c: Context) -> Check:
    last = c.watch.last
    if last.total("rig_source_up", source="gpu") == 0:
        return fail("gpu_cards", "rig", "the exporter's GPU source did not answer "
                    "(rig_source_up{source=\"gpu\"} 0)", "read the exporter's log for why")
    present = [s.labels for s in last.all("rig_gpu_present") if s.value]
    gone = [s.labels["card"] for s in last.all("rig_gpu_present") if not s.value]
    names = ", ".join(f"{p['card']} ({p.get('pci_bus', '?')})" for p in present) or "none"
    expected = int(last.total("rig_gpu_expected_cards") or 0)
    configured = c.config.gpu.expected_cards if c.config is not None else None
    if configured is not None and configured != expected:
        return warn("gpu_cards", "rig", f"the config says [gpu] expected_cards = {configured}, "
                    f"the exporter counts against {expected}: it runs another config",
                    "restart the exporter with this config file")
    read = f"{len(present)} of {expected} cards read ({names})"
    if not expected:
        return ok("gpu_cards", "rig", f"{len(present)} cards read ({names}); not counted: "
                  "[gpu] expected_cards = 0")
    if len(present) < expected:
        return fail("gpu_cards", "rig", read + (f"; vanished: {', '.join(gone)}" if gone else
                                                 "; the others were never seen"),
                    "find the missing card: `lspci -d 1002:` and `dmesg | grep amdgpu`")
    if len(present) > expected:
        return warn("gpu_cards", "rig", f"{len(present)} cards read ({names}), more than "
                    f"[gpu] expected_cards = {expected}",
                    f"set [gpu] expected_cards = {len(present)}, or [gpu] cards to the PCI "
                    "addresses to read")
    return ok("gpu_cards", "rig", read + " ([gpu] expected_cards)")


def _gpu_metrics(card: str, files: CardFiles | None) -> Check:
    if files is None:
        return skip("gpu_metrics", card, f"{card}: gpu_metrics not read", NEEDS_CONFIG)
    reading = files.readings.get(card)
    if reading is None:
        return warn("gpu_metrics", card, f"{card}: exported, but not under the config's "
                    f"sysfs_root{': ' + files.error if files.error else ''}",
                    "give the config file the exporter runs with")
    revision = reading.gpu_metrics_revision
    problem = files.problems.get((card, "gpu_metrics"))
    blob = f"/sys/class/drm/{card}/device/gpu_metrics"
    if revision is None:
        return warn("gpu_metrics", card, f"{card}: gpu_metrics unreadable ({problem}): no "
                    "throttle reasons and no energy counter",
                    f"check that {blob} exists and is readable by the exporter's user")
    name = f"v{revision[0]}.{revision[1]}"
    if problem is not None:
        return warn("gpu_metrics", card, f"{card}: gpu_metrics {name}: {problem}: no throttle "
                    "reasons and no energy counter",
                    f"send `xxd {blob}` and `uname -r` so that the layout can be added")
    throttle = "read" if reading.throttle_reasons is not None else "not filled"
    energy = ("filled" if reading.energy_joules is not None
              else "0, which this firmware does not fill")
    return ok("gpu_metrics", card, f"{card}: gpu_metrics {name} decoded: throttle status "
              f"{throttle}, energy accumulator {energy}")


def _dpm_tables(card: str, files: CardFiles | None) -> Check:
    if files is None:
        return skip("gpu_dpm_tables", card, f"{card}: pp_dpm_* tables not read", NEEDS_CONFIG)
    reading = files.readings.get(card)
    if reading is None:
        return warn("gpu_dpm_tables", card, f"{card}: not under the config's sysfs_root",
                    "give the config file the exporter runs with")
    problems = [f"{name}: {files.problems[(card, name)]}" for name in DPM_FILES.values()
                if (card, name) in files.problems]
    missing = [name for clock, name in DPM_FILES.items() if clock not in reading.clock_max_hertz]
    if problems or missing:
        return fail("gpu_dpm_tables", card, f"{card}: " + "; ".join(
            problems or [f"{name}: no table" for name in missing])
            + ": no top clock, so RigGpuThermalDownclock cannot judge this card",
            f"send `cat /sys/class/drm/{card}/device/pp_dpm_sclk` and `uname -r` so that "
            "the format can be read")
    tables = []
    for clock, name in DPM_FILES.items():
        now = reading.clocks_hertz.get(clock)
        tables.append(f"{name} top {reading.clock_max_hertz[clock] / 1e6:.0f} MHz"
                      + (f" (now {now / 1e6:.0f} MHz)" if now is not None else ""))
    return ok("gpu_dpm_tables", card, f"{card}: " + ", ".join(tables))


def _energy(c: Context, card: str, files: CardFiles | None) -> Check:
    w = c.watch
    joules = w.delta("rig_gpu_energy_joules_total", card=card)
    if joules is None:
        return skip("gpu_energy", card, f"{card}: no energy counter (gpu_metrics "
                    "energy_accumulator is 0 or unreadable), so none to check")
    powers = [v for s in w.scrapes if (v := s.total("rig_gpu_power_watts", card=card))
              is not None]
    if not powers or w.seconds <= 0:
        return skip("gpu_energy", card, f"{card}: no power reading to compare the energy "
                    "counter with")
    power = sum(powers) / len(powers)
    rate = joules / w.seconds
    reading = files.readings.get(card) if files is not None else None
    revision = reading.gpu_metrics_revision if reading is not None else None
    on = f" on gpu_metrics v{revision[0]}.{revision[1]}" if revision else ""
    seen = (f"{card}: the energy counter rose {joules:.0f} J in {w.seconds:.1f} s, "
            f"{rate:.0f} W, against a power reading of {power:.0f} W")
    ratio = rate / power if power > 0 else float("inf")
    if abs(ratio - 1) <= ENERGY_TOLERANCE:
        return ok("gpu_energy", card, f"{seen} (x{ratio:.2f}): the 2^-16 J unit holds{on}")
    if power <= 0 or (max(powers) - min(powers)) / power > ENERGY_TOLERANCE:
        return skip("gpu_energy", card, f"{seen}, but the power moved between "
                    f"{min(powers):.0f} and {max(powers):.0f} W while watched",
                    "rerun while the card's load is steady")
    return warn("gpu_energy", card, f"{seen} (x{ratio:.2f}): the counter's unit is not "
                f"2^-16 J{on}, so rig_gpu_energy_joules_total is off by that factor",
                f"report the factor with `cat /sys/class/drm/{card}/device/vbios_version`; "
                "until then read energy from rig_gpu_power_watts")


def _limits(c: Context, card: str) -> Check:
    last = c.watch.last
    kinds = {s.labels.get("kind") for s in last.all("rig_gpu_info", card=card)}
    if kinds == {"integrated"}:
        return skip("gpu_temperature_limits", card, f"{card}: an integrated GPU reports "
                    "its edge temperature only")
    limits = {s.labels.get("sensor"): s.value for s in
              last.all("rig_gpu_temperature_limit_celsius", card=card, limit="critical")}
    missing = [sensor for sensor in HOT_SENSORS if sensor not in limits]
    if missing:
        return warn("gpu_temperature_limits", card, f"{card}: no critical limit for "
                    f"{' or '.join(missing)} (hwmon temp*_crit), so RigGpuHot cannot judge "
                    f"{'it' if len(missing) == 1 else 'them'}",
                    f"check /sys/class/drm/{card}/device/hwmon/hwmon*/temp*_crit: amdgpu "
                    "shows junction and memory limits on discrete cards")
    return ok("gpu_temperature_limits", card, f"{card}: critical limits " + ", ".join(
        f"{sensor} {limits[sensor]:.0f} °C" for sensor in HOT_SENSORS) + " (hwmon temp*_crit)")
