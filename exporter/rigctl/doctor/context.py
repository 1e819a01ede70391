"""What every doctor check is given: the watch of the exporter, and the rig's config."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.config import Config, EngineConfig
from exporter.daemon.engines.probe import ProbeResult
from exporter.rigctl.doctor.watch import Watch

#: The fix of every check that reads the rig's own files.
NEEDS_CONFIG = "run it on the rig host with --config.file (the exporter's rig.toml)"


@dataclass(frozen=True)
class Context:
    exporter: str
    watch: Watch
    #: The exporter's config (--config.file), or None: the checks of files then skip.
    config: Config | None = None
    config_path: str | None = None
    timeout: float = 10.0
    #: The doctor's own probe of each engine (--probe), by engine name.
    probes: dict[str, ProbeResult] = field(default_factory=dict)

    def engine(self, name: str) -> EngineConfig | None:
        if self.config is None:
            return None
        return next((e for e in self.config.engines if e.name == name), None)
