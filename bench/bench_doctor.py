"""What one `rigctl doctor` run costs the engine and the host.

1. An SGLang 0.5.23 metrics playback (tests/support/sglang_release.py): real
   prometheus_client files written as four running pids, /metrics rendered from
   them with `generate_latest` over a `MultiProcessCollector` in the server's
   event loop, as SGLang does; it counts its renders.
2. A real exporter process reading it, the fixture's two cards and this
   machine's /proc, with no health sampler: every engine read is a request's.
3. `rigctl doctor --config.file` as a process, with and without metrics_dir (the
   stall tracker off in the second, so that only the doctor's reads render).

It prints the engine's renders and render seconds during each run, and the
doctor's wall time, CPU time and peak RSS.

    .venv/bin/python bench/bench_doctor.py
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loopback import ROOT

sys.path.insert(0, str(ROOT))  # tests.support, the release playback

from exporter.process.launch import free_port, start_exporter  # noqa: E402
from tests.support.rig_config import write_rig_config  # noqa: E402
from tests.support.sglang_release import ReleasePlayback, ReleaseServer  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "sys"


# rigctl doctor, then its own CPU seconds and peak RSS (KiB) on stderr's last line.
MEASURED_DOCTOR = """
import resource, sys
from exporter.rigctl import main
code = main(sys.argv[1:])
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime, usage.ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


async def doctor_run(server: ReleaseServer, exporter: str, rig_toml: Path) -> dict[str, float]:
    renders, seconds = server.renders, server.render_seconds
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", MEASURED_DOCTOR, "doctor", "--exporter", exporter,
        "--config.file", str(rig_toml), "--json", cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await process.communicate()
    cpu, rss = err.decode().split()[-2:]
    return {"renders": server.renders - renders,
            "render_ms": (server.render_seconds - seconds) * 1000,
            "wall_s": time.monotonic() - started,
            "cpu_s": float(cpu), "max_rss_mib": int(rss) / 1024}


async def main() -> None:
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(4)]
    roles = dict(zip(("tokenizer", "tp0", "tp1", "detokenizer"), (p.pid for p in sleepers),
                     strict=True))
    playback = ReleasePlayback("0.5.23", pids=roles)
    playback.start_requests(streaming=2)
    server = ReleaseServer(playback)
    await server.start()

    async def engine_runs() -> None:
        while True:
            playback.sync()
            await asyncio.sleep(0.05)

    running = asyncio.create_task(engine_runs())
    work = Path(tempfile.mkdtemp(prefix="bench-doctor-"))
    modes = {"metrics_dir (tracker reads the files)": f'metrics_dir = "{playback.directory}"',
             "no metrics_dir, stall tracker off": "stall_tracker = false"}
    try:
        for mode, engine in modes.items():
            port = free_port()
            rig_toml = write_rig_config(work / "rig.toml", port, server.url, engine,
                                        sysfs_root=FIXTURE, proc_root=Path("/proc"))
            exporter = start_exporter(["--config.file", str(rig_toml)], work,
                                      address=f"127.0.0.1:{port}", wait=False)
            try:
                await asyncio.to_thread(exporter.wait_ready)
                figures = await doctor_run(server, exporter.url, rig_toml)
            finally:
                await asyncio.to_thread(exporter.stop)
            print(f"{mode:40s} " + "  ".join(f"{k} {v:.2f}" if isinstance(v, float) else
                                              f"{k} {v}" for k, v in figures.items()))
    finally:
        running.cancel()
        await server.stop()
        playback.close()
        for sleeper in sleepers:
            sleeper.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                sleeper.wait(5)


if __name__ == "__main__":
    asyncio.run(main())
