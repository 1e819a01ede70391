"""Host checks: memory pressure (PSI) and swap visible to the exporter, the inputs of
RigHostMemoryPressure and RigHostSwapping."""

from __future__ import annotations

from exporter.rigctl.doctor.context import Context
from exporter.rigctl.doctor.report import Check, ok, skip, warn

GIB = 2**30


def host_checks(c: Context) -> list[Check]:
    last = c.watch.last
    if not last.has("rig_source_up", source="host"):
        return [skip("host_psi", "rig", "the exporter reads no host ([host] enabled = false)")]
    return [_psi(c), _swap(c)]


def _psi(c: Context) -> Check:
    kinds = {s.labels.get("kind") for s in
             c.watch.last.all("rig_host_memory_pressure_stall_seconds_total")}
    if "full" in kinds:
        return ok("host_psi", "rig", "memory pressure read (PSI some and full, "
                  "/proc/pressure/memory)")
    return warn("host_psi", "rig", "no memory pressure (PSI): RigHostMemoryPressure judges "
                "the RAM available alone, and misses tasks stalled on memory",
                "boot with psi=1 (a kernel built with CONFIG_PSI_DEFAULT_DISABLED)")


def _swap(c: Context) -> Check:
    w = c.watch
    moved = [w.delta(f"rig_host_swap_{way}_bytes_total") for way in ("in", "out")]
    total = w.last.total("rig_host_swap_total_bytes")
    if None in moved or total is None:
        return warn("host_swap", "rig", "no swap counters (/proc/meminfo SwapTotal, "
                    "/proc/vmstat pswpin and pswpout): RigHostSwapping cannot fire",
                    "give the exporter a /proc it can read ([host] proc_root)")
    if total == 0:
        return ok("host_swap", "rig", "no swap configured: memory overruns end in the OOM "
                  "killer, not in swapping, and RigHostSwapping never fires")
    used = w.last.total("rig_host_swap_used_bytes") or 0.0
    rate = sum(m or 0.0 for m in moved) / max(w.seconds, 1e-9)
    return ok("host_swap", "rig", f"swap {total / GIB:.1f} GiB, {used / GIB:.1f} GiB used, "
              f"{rate / 1024:.0f} KiB/s in and out while watched")
