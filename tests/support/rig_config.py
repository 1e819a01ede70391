"""A `rig-exporter` config file for one engine named main, as the doctor's tests
and its benchmark write it: no health sampler, so every engine read is a request's."""

from __future__ import annotations

from pathlib import Path


def write_rig_config(path: Path, port: int, engine_url: str, engine: str = "",
                     sysfs_root: Path | None = None, proc_root: Path | None = None) -> Path:
    """`engine` holds extra `[[engine]]` keys (TOML lines); without `sysfs_root` the
    GPU source is off, without `proc_root` the host source."""
    gpu = (f'backend = "sysfs"\nsysfs_root = "{sysfs_root}"' if sysfs_root is not None
           else "enabled = false")
    host = f'proc_root = "{proc_root}"' if proc_root is not None else "enabled = false"
    path.write_text(f"""
[web]
listen_address = "127.0.0.1:{port}"
[health]
sample_interval_seconds = 0
[[engine]]
name = "main"
url = "{engine_url}"
{engine}
[gpu]
{gpu}
[host]
{host}
""")
    return path
