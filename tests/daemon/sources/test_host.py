"""The host source against this machine's /proc and against a written proc tree."""

from __future__ import annotations

import asyncio
import logging
import tempfile
import threading
from pathlib import Path

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.daemon.snapshot import SourceError
from exporter.daemon.sources import host
from exporter.daemon.sources.host import HostSource, cpu_temperatures
from exporter.sim.rig.procfs_writer import GIB, PAGE, HostSpec, write_cpu_hwmon, write_proc

# Memory moves between two reads on a busy machine; this is generous but far
# below any real discrepancy (a unit error would be off by 1024x).
TOLERANCE_BYTES = 256 * 1024 * 1024
# A real kernel's /proc, every line of it (tests/fixtures/proc/README.md).
REAL_PROC = Path(__file__).parents[2] / "fixtures" / "proc"


def meminfo_bytes(key: str, proc: Path = Path("/proc")) -> int:
    """proc(5): `Key:   value kB`, read here by hand as the oracle."""
    for line in (proc / "meminfo").read_text().splitlines():
        name, value = line.split(":", 1)
        if name == key:
            return int(value.split()[0]) * 1024
    raise KeyError(key)


def vmstat(key: str, proc: Path = Path("/proc")) -> int:
    for line in (proc / "vmstat").read_text().splitlines():
        name, value = line.split()
        if name == key:
            return int(value)
    raise KeyError(key)


class TestAgainstThisMachine:
    def test_memory_and_swap_agree_with_proc(self) -> None:
        reading = HostSource().read_now()
        assert reading.memory_total_bytes == meminfo_bytes("MemTotal")
        assert reading.memory_available_bytes == pytest.approx(
            meminfo_bytes("MemAvailable"), abs=TOLERANCE_BYTES)
        assert reading.swap_total_bytes == meminfo_bytes("SwapTotal")
        swap_used = meminfo_bytes("SwapTotal") - meminfo_bytes("SwapFree")
        assert reading.swap_used_bytes == pytest.approx(swap_used, abs=TOLERANCE_BYTES)
        assert reading.swap_in_bytes_total == pytest.approx(vmstat("pswpin") * PAGE, abs=GIB)
        assert reading.swap_out_bytes_total == pytest.approx(vmstat("pswpout") * PAGE, abs=GIB)

    def test_memory_pressure_agrees_with_proc_where_the_kernel_has_psi(self) -> None:
        psi = Path("/proc/pressure/memory")
        reading = HostSource().read_now()
        if not psi.exists():
            assert reading.pressure_stall_seconds_total == {}
            return
        totals = {
            line.split()[0]: int(line.rsplit("total=", 1)[1]) / 1e6
            for line in psi.read_text().splitlines()
        }
        assert set(reading.pressure_stall_seconds_total) == {"some", "full"}
        for kind, seconds in totals.items():
            # The counters only grow: the exporter's read came after ours.
            assert reading.pressure_stall_seconds_total[kind] >= seconds
            assert reading.pressure_stall_seconds_total[kind] - seconds < 5

    def test_cpu_temperature_matches_psutil(self) -> None:
        chips = psutil.sensors_temperatures()
        temperatures = cpu_temperatures()
        for chip in ("k10temp", "zenpower", "coretemp", "cpu_thermal"):
            if chips.get(chip) and Path("/sys/class/hwmon").is_dir():
                assert sorted(temperatures) == sorted(
                    e.label or f"{chip}{i}" for i, e in enumerate(chips[chip]))
                assert all(0 < t < 150 for t in temperatures.values())
                break
        else:
            assert temperatures == {}


class TestRealKernelTree:
    def test_reads_what_a_real_kernel_wrote(self) -> None:
        reading = HostSource(str(REAL_PROC)).read_now()
        assert reading.memory_total_bytes == meminfo_bytes("MemTotal", REAL_PROC)
        assert reading.memory_available_bytes == meminfo_bytes("MemAvailable", REAL_PROC)
        assert reading.swap_total_bytes == meminfo_bytes("SwapTotal", REAL_PROC)
        assert reading.swap_used_bytes == (meminfo_bytes("SwapTotal", REAL_PROC)
                                           - meminfo_bytes("SwapFree", REAL_PROC))
        assert reading.swap_in_bytes_total == vmstat("pswpin", REAL_PROC) * PAGE
        assert reading.swap_out_bytes_total == vmstat("pswpout", REAL_PROC) * PAGE
        assert reading.pressure_stall_seconds_total == {"some": 0.0, "full": 0.0}


KIB_COUNTS = st.integers(0, 2**36)  # meminfo counts KiB; up to 64 TiB


@st.composite
def host_specs(draw: st.DrawFn) -> HostSpec:
    total, swap = draw(st.integers(1, 2**36)) * 1024, draw(KIB_COUNTS) * 1024
    return HostSpec(
        memory_total_bytes=total,
        memory_available_bytes=draw(st.integers(1, total // 1024)) * 1024,
        swap_total_bytes=swap, swap_used_bytes=draw(st.integers(0, swap // 1024)) * 1024,
        swap_in_pages=draw(st.integers(0, 2**48)), swap_out_pages=draw(st.integers(0, 2**48)),
        pressure_some_us=draw(st.none() | st.integers(0, 2**60)),
        pressure_full_us=draw(st.integers(0, 2**60)))


class TestWhatTheSimulatorWrote:
    """The simulated rig's /proc (procfs_writer) reads back as written, in bytes."""

    @settings(max_examples=200, deadline=None)
    @given(host_specs())
    def test_every_reading_is_what_was_written(self, spec: HostSpec) -> None:
        with tempfile.TemporaryDirectory() as root:
            write_proc(Path(root), spec)
            reading = HostSource(root).read_now()
        assert reading.memory_total_bytes == spec.memory_total_bytes
        assert reading.memory_available_bytes == spec.memory_available_bytes
        assert reading.swap_total_bytes == spec.swap_total_bytes
        assert reading.swap_used_bytes == spec.swap_used_bytes
        assert reading.swap_in_bytes_total == spec.swap_in_pages * PAGE
        assert reading.swap_out_bytes_total == spec.swap_out_pages * PAGE
        if spec.pressure_some_us is None:
            assert reading.pressure_stall_seconds_total == {}
        else:
            assert reading.pressure_stall_seconds_total == {
                "some": spec.pressure_some_us / 1e6, "full": spec.pressure_full_us / 1e6}


class TestPsutilUnderARoot:
    """psutil reads /proc where psutil.PROCFS_PATH points, one global for the process."""

    def test_two_roots_read_side_by_side_each_read_their_own(self, tmp_path: Path) -> None:
        small, large = HostSpec(memory_total_bytes=8 * GIB), HostSpec(memory_total_bytes=64 * GIB)
        write_proc(tmp_path / "small", small)
        write_proc(tmp_path / "large", large)
        seen: dict[str, set[float]] = {"small": set(), "large": set()}

        def read(name: str) -> None:
            source = HostSource(str(tmp_path / name))
            for _ in range(300):
                seen[name].add(source.read_now().memory_total_bytes)

        threads = [threading.Thread(target=read, args=(name,)) for name in seen]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert seen == {"small": {8 * GIB}, "large": {64 * GIB}}
        assert psutil.PROCFS_PATH == "/proc"

    def test_the_root_is_put_back_after_a_failed_read(self, tmp_path: Path) -> None:
        with pytest.raises(SourceError):
            HostSource(str(tmp_path)).read_now()
        assert psutil.PROCFS_PATH == "/proc"

    def test_swap_bytes_count_the_kernels_page_size(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # psutil counts 4 KiB a page; an arm64 kernel with 64 KiB pages counts 64 KiB.
        monkeypatch.setattr(host, "PAGE_BYTES", 64 * 1024)
        write_proc(tmp_path, HostSpec(swap_in_pages=10, swap_out_pages=3))
        reading = HostSource(str(tmp_path)).read_now()
        assert reading.swap_in_bytes_total == 10 * 64 * 1024
        assert reading.swap_out_bytes_total == 3 * 64 * 1024

    def test_available_memory_psutil_cannot_tell_is_a_source_error(self, tmp_path: Path) -> None:
        # No MemAvailable (before Linux 3.14): psutil estimates it from zoneinfo's low
        # watermarks, and says 0 when the estimate is below 0. Not an invented 0 here.
        (tmp_path / "meminfo").write_text(
            "MemTotal: 1000 kB\nMemFree: 0 kB\nActive(file): 0 kB\nInactive(file): 0 kB\n"
            "SReclaimable: 0 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
        (tmp_path / "vmstat").write_text("pswpin 0\npswpout 0\n")
        (tmp_path / "zoneinfo").write_text("Node 0, zone Normal\n        low      1000\n")
        with pytest.raises(SourceError, match="no available memory"):
            HostSource(str(tmp_path)).read_now()


class TestWrittenProcTree:
    def test_values_in_bytes_and_seconds(self, tmp_path: Path) -> None:
        spec = HostSpec(swap_in_pages=10, swap_out_pages=2500, pressure_some_us=4_500_000,
                        pressure_full_us=1_200_000)
        write_proc(tmp_path, spec)
        reading = asyncio.run(HostSource(str(tmp_path)).read())
        assert reading.memory_total_bytes == 64 * GIB
        assert reading.memory_available_bytes == 19 * GIB
        assert reading.swap_used_bytes == spec.swap_used_bytes
        assert reading.swap_in_bytes_total == 10 * PAGE
        assert reading.swap_out_bytes_total == 2500 * PAGE
        assert reading.pressure_stall_seconds_total == {"some": 4.5, "full": 1.2}

    def test_kernel_without_psi_has_no_pressure_readings(self, tmp_path: Path) -> None:
        write_proc(tmp_path, HostSpec(pressure_some_us=None))
        assert HostSource(str(tmp_path)).read_now().pressure_stall_seconds_total == {}

    def test_garbage_pressure_lines_are_skipped(self, tmp_path: Path) -> None:
        write_proc(tmp_path, HostSpec())
        (tmp_path / "pressure" / "memory").write_text(
            "some avg10=0.00 total=oops\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7000000\n")
        stalls = HostSource(str(tmp_path)).read_now().pressure_stall_seconds_total
        assert stalls == {"full": 7.0}

    def test_missing_meminfo_is_a_source_error(self, tmp_path: Path) -> None:
        with pytest.raises(SourceError, match="meminfo|No such file"):
            HostSource(str(tmp_path / "nothing")).read_now()


class TestCpuHwmon:
    def test_k10temp_read_under_the_sysfs_root(self, tmp_path: Path) -> None:
        write_proc(tmp_path / "proc", HostSpec())
        write_cpu_hwmon(tmp_path / "sys", 71.5)
        reading = HostSource(str(tmp_path / "proc"), str(tmp_path / "sys")).read_now()
        assert reading.cpu_temperatures_celsius == {"Tctl": 71.5}

    def test_other_chips_are_not_the_cpu(self, tmp_path: Path) -> None:
        write_cpu_hwmon(tmp_path, 71.5, hwmon="hwmon0")
        (tmp_path / "class" / "hwmon" / "hwmon0" / "name").write_text("amdgpu\n")
        assert cpu_temperatures(tmp_path) == {}

    def test_unreadable_sensor_is_absent(self, tmp_path: Path) -> None:
        write_cpu_hwmon(tmp_path, 71.5)
        (tmp_path / "class" / "hwmon" / "hwmon2" / "temp1_input").write_text("EIO\n")
        assert cpu_temperatures(tmp_path) == {}


class TestOneBadLine:
    """A bad PSI line or missing swap counts cost their own series; RAM and swap stay.
    meminfo, read by psutil, is read whole or not at all."""

    def test_a_bad_byte_in_pressure_drops_that_line_only(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        write_proc(tmp_path, HostSpec())
        (tmp_path / "pressure" / "memory").write_bytes(
            b"some avg10=0.00 avg60=0.00 avg300=0.00 total=12\xff34\n"
            b"full avg10=0.00 avg60=0.00 avg300=0.00 total=7000000\n")
        with caplog.at_level(logging.WARNING):
            reading = HostSource(str(tmp_path)).read_now()
        assert reading.memory_total_bytes == 64 * GIB
        assert reading.swap_total_bytes == HostSpec().swap_total_bytes
        assert reading.pressure_stall_seconds_total == {"full": 7.0}
        assert 'kind="some"} is absent' in caplog.text

    def test_a_meminfo_line_psutil_cannot_parse_fails_the_read(self, tmp_path: Path) -> None:
        # The kernel writes meminfo whole and in one format (fs/proc/meminfo.c): a line
        # without a number is a broken tree, told as the source's error.
        write_proc(tmp_path, HostSpec())
        meminfo = tmp_path / "meminfo"
        meminfo.write_bytes(meminfo.read_bytes() + b"Hugepagesize:\n")
        with pytest.raises(SourceError, match="meminfo"):
            HostSource(str(tmp_path)).read_now()

    def test_no_swap_lines_in_vmstat_leave_the_swap_counters_absent(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        write_proc(tmp_path, HostSpec(swap_in_pages=5))
        (tmp_path / "vmstat").write_text("nr_free_pages 1000\n")
        with caplog.at_level(logging.WARNING):
            reading = HostSource(str(tmp_path)).read_now()
        assert reading.swap_in_bytes_total is None and reading.swap_out_bytes_total is None
        assert reading.swap_total_bytes == HostSpec().swap_total_bytes
        assert "no pswpin and pswpout" in caplog.text

    def test_no_vmstat_leaves_the_swap_counters_absent_and_ram_read(self, tmp_path: Path) -> None:
        write_proc(tmp_path, HostSpec())
        (tmp_path / "vmstat").unlink()
        reading = HostSource(str(tmp_path)).read_now()
        assert reading.swap_in_bytes_total is None and reading.swap_out_bytes_total is None
        assert reading.memory_total_bytes == 64 * GIB

    def test_a_vmstat_that_never_ends_is_a_source_error(self, tmp_path: Path) -> None:
        write_proc(tmp_path, HostSpec())
        (tmp_path / "vmstat").unlink()
        (tmp_path / "vmstat").symlink_to("/dev/zero")
        with pytest.raises(SourceError, match="vmstat: not a regular file"):
            HostSource(str(tmp_path)).read_now()

    def test_a_meminfo_that_never_ends_is_a_source_error(self, tmp_path: Path) -> None:
        write_proc(tmp_path, HostSpec())
        (tmp_path / "meminfo").unlink()
        (tmp_path / "meminfo").symlink_to("/dev/zero")
        with pytest.raises(SourceError, match="meminfo: not a regular file"):
            HostSource(str(tmp_path)).read_now()
