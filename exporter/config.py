"""The exporter's configuration: a TOML file, every key overridable by a flag.

`load_config` turns raw mappings into frozen dataclasses or raises ConfigError,
whose message names the key and the bad value. The CLI prints it and exits 2.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from exporter.process.log_limits import REPEAT_INTERVAL_SECONDS
from exporter.thresholds import Thresholds
from exporter.validation import BadValue, checked_number, read_toml

DEFAULT_LISTEN_ADDRESS = "127.0.0.1:9842"
ENGINE_KINDS = ("sglang", "vllm", "llamacpp")
GPU_BACKENDS = ("auto", "sysfs", "pyrsmi", "none")
GPU_CARD_SELECTIONS = ("discrete", "all")
LOG_LEVELS = ("debug", "info", "warning", "error")
# Where a tap address without a host listens: binding wider is explicit.
TAP_DEFAULT_HOST = "127.0.0.1"
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$")


class ConfigError(Exception):
    """A config value that cannot be used; str() is the message for the user.
    `value=HIDDEN` names the key and never shows its value (a secret)."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        shown = "" if value is HIDDEN else f" = {value!r}"
        super().__init__(f"config key {key}{shown}: {reason}")
        self.key = key


#: The value of a ConfigError that must not be shown: a bearer token, a header's value.
HIDDEN = object()
#: The `agent` label of a request that matches no [[engine.agent]] table.
OTHER_AGENT = "other"
#: An agent's matchers: exactly one per table (`api_key_file` is how `api_key` is read).
AGENT_MATCHERS = ("api_key", "header", "user", "address")
#: The longest OpenAI `user` field an agent is matched on (the tap's body scan keeps
#: no more of it).
AGENT_USER_MAX_CHARS = 256
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an RFC 9110 token


@dataclass(frozen=True)
class AgentConfig:
    """One `[[engine.agent]]`: the name a request gets when it matches (docs/tap.md#agents).
    Exactly one matcher is set; secrets are kept out of repr (a log line, a traceback)."""

    name: str
    #: The agent's bearer token (Authorization: Bearer, or x-api-key), compared in
    #: constant time, never logged, exported or echoed.
    api_key: str = field(default="", repr=False)
    #: A header the agent sends: its name (matched case-insensitively) and value.
    header_name: str = ""
    header_value: str = field(default="", repr=False)
    #: The request body's OpenAI `user` field.
    user: str = ""
    #: The client's address or network (the tap's peer, not X-Forwarded-For).
    address: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None

    @property
    def matcher(self) -> str:
        """Which key names this agent (for a line that must not show its value)."""
        if self.api_key:
            return "api_key"
        if self.header_name:
            return "header"
        return "user" if self.user else "address"


@dataclass(frozen=True)
class WebConfig:
    listen_address: str = DEFAULT_LISTEN_ADDRESS
    # Below deploy/prometheus.yml's 5 s scrape timeout, with room to render, so a
    # slow source costs its own readings and not the whole scrape.
    scrape_deadline_seconds: float = 4.0
    # TLS and basic auth, in the exporter-toolkit's format (exporter/daemon/web/security.py).
    config_file: str | None = None
    # One line per request is noise at a 15 s scrape; on when debugging.
    access_log: bool = False
    # Connections served at once, as Prometheus' own --web.max-connections (512); the
    # open-file limit may lower it (exporter/daemon/web/listener.py).
    max_connections: int = 512

    @property
    def host(self) -> str:
        return self.listen_address.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen_address.rpartition(":")[2])


@dataclass(frozen=True)
class EngineConfig:
    name: str
    url: str
    kind: str = "sglang"
    # Absent or 0: no probe. A probe costs the engine a short generation.
    probe_interval_seconds: float = 0.0
    probe_timeout_seconds: float = 60.0
    probe_max_new_tokens: int = 32
    probe_prompt: str = ""
    # The stall tracker reads the engine's counters 4 times a second.
    stall_tracker: bool = True
    stall_poll_interval_seconds: float = 0.25
    # rig_engine_decode_stall_max_seconds looks back this far: by default the
    # `[thresholds]` decode_stall_window_seconds the rules are written for. Only a
    # time-compressed test rig (exporter/sim) sets it, to match its compressed rules.
    stall_window_seconds: float = Thresholds.decode_stall_window_seconds
    # SGLang's PROMETHEUS_MULTIPROC_DIR: the tracker reads the counters from its files
    # (no engine work) instead of /metrics under a 2 % budget. "" : not set.
    metrics_dir: str = ""
    # The base name given to SGLang's --forward-pass-metrics-ipc-name (ipc://PATH; the
    # scheduler binds PATH.<dp_rank>): the stall tracker subscribes to its per-pass
    # feed. "": the name /server_info gives, if the feed is on. "off": never subscribe.
    forward_pass_metrics_ipc: str = ""
    # Empty: no stream tap. Else HOST:PORT for the tap, the proxy agents use instead
    # of `url`; a bare port or ":PORT" means TAP_DEFAULT_HOST.
    tap_listen_address: str = ""
    # The agents the tap names its requests after ([[engine.agent]]); none: every
    # request is agent="other".
    agents: tuple[AgentConfig, ...] = ()


@dataclass(frozen=True)
class GpuConfig:
    enabled: bool = True
    backend: str = "auto"
    sysfs_root: str = "/sys"
    # "discrete" skips the Ryzen's iGPU; "all"; or a tuple of PCI addresses.
    cards: str | tuple[str, ...] = "discrete"
    # 2x RX 7900 XTX (docs/facts/rig.md#hardware-and-software). Exported as
    # rig_gpu_expected_cards for RigGpuMissing; 0 disables the count.
    expected_cards: int = 2
    # A reading younger than this is served again instead of rereading the ~70 files
    # per card (gpu_metrics asks the SMU firmware each time): fifty scrapers cost the
    # driver one read a second, Prometheus at 15 s none extra. 0: read every scrape.
    reading_max_age_seconds: float = 1.0


@dataclass(frozen=True)
class HostConfig:
    enabled: bool = True
    proc_root: str = "/proc"


@dataclass(frozen=True)
class HealthConfig:
    # The health checks' windows are fed by every scrape; when none came for this
    # long, the exporter reads a snapshot itself (0: only scrapes and health requests).
    sample_interval_seconds: float = 15.0


@dataclass(frozen=True)
class Config:
    web: WebConfig = field(default_factory=WebConfig)
    engines: tuple[EngineConfig, ...] = ()
    gpu: GpuConfig = field(default_factory=GpuConfig)
    host: HostConfig = field(default_factory=HostConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    thresholds: Thresholds = field(default_factory=Thresholds)
    log_level: str = "info"
    # A failure that goes on is told again, with its count, once this often
    # (exporter/process/log_limits.py).
    log_repeat_interval_seconds: float = REPEAT_INTERVAL_SECONDS


# The dataclass of each single table of the TOML file: its field defaults are the keys'.
TABLE_CLASSES: dict[str, type] = {"web": WebConfig, "gpu": GpuConfig, "host": HostConfig,
                                  "health": HealthConfig}


def default_of(table: str, key: str) -> Any:
    """The built-in value of one key of the TOML file, e.g. ("web", "listen_address")."""
    if table == "log":
        return getattr(Config, f"log_{key}")
    return getattr(TABLE_CLASSES[table], key)


def read_config_file(path: str | Path) -> dict[str, Any]:
    try:
        return read_toml(path)
    except BadValue as exc:
        raise ConfigError("config.file", str(path), str(exc)) from exc


def load_config(raw: Mapping[str, Any]) -> Config:
    """Validate a mapping shaped like the TOML file (docs/configuration.md) into a Config."""
    _reject_unknown("", raw, {"web", "engine", "gpu", "host", "health", "thresholds", "log"})
    thresholds_raw = _table(raw, "thresholds")
    try:
        thresholds = Thresholds.from_mapping(thresholds_raw)
    except ValueError as exc:
        raise ConfigError("thresholds", thresholds_raw, str(exc)) from exc
    engines = raw.get("engine", [])
    if not isinstance(engines, list):
        raise ConfigError("engine", HIDDEN, "must be an array of tables ([[engine]])")
    parsed = tuple(_engine(i, e, thresholds.decode_stall_window_seconds)
                   for i, e in enumerate(engines))
    names = [e.name for e in parsed]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError("engine.name", name, "engine names must be unique")
    log_table = _table(raw, "log")
    _reject_unknown("log", log_table, {"level", "repeat_interval_seconds"})
    return Config(
        web=_web(_table(raw, "web")),
        engines=parsed,
        gpu=_gpu(_table(raw, "gpu")),
        host=_host(_table(raw, "host")),
        health=_health(_table(raw, "health")),
        thresholds=thresholds,
        log_level=_choice("log.level", log_table.get("level", Config.log_level), LOG_LEVELS),
        log_repeat_interval_seconds=_positive(
            "log.repeat_interval_seconds",
            log_table.get("repeat_interval_seconds", Config.log_repeat_interval_seconds)),
    )


def _web(t: Mapping[str, Any]) -> WebConfig:
    _reject_unknown("web", t, set(WebConfig.__dataclass_fields__))
    defaults = WebConfig()
    address = _str("web.listen_address", t.get("listen_address", defaults.listen_address))
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError("web.listen_address", address,
                          f"expected HOST:PORT, e.g. {DEFAULT_LISTEN_ADDRESS}")
    deadline = _positive("web.scrape_deadline_seconds",
                         t.get("scrape_deadline_seconds", defaults.scrape_deadline_seconds))
    config_file = t.get("config_file", defaults.config_file)
    return WebConfig(
        listen_address=address,
        scrape_deadline_seconds=deadline,
        config_file=None if config_file is None else _str("web.config_file", config_file),
        access_log=_bool("web.access_log", t.get("access_log", defaults.access_log)),
        max_connections=int(_positive("web.max_connections",
                                      t.get("max_connections", defaults.max_connections),
                                      integer=True)),
    )


def _engine(index: int, t: object, stall_window_seconds: float) -> EngineConfig:
    """One [[engine]] table; `stall_window_seconds` is the window it has unless it
    sets its own (the threshold, already validated)."""
    key = f"engine[{index}]"
    if not isinstance(t, Mapping):
        raise ConfigError(key, HIDDEN, "must be a table")
    # Unknown keys without their values: a misplaced agent's token may be one.
    _reject_unknown(key, t, (set(EngineConfig.__dataclass_fields__) - {"agents"}) | {"agent"},
                    hide=True)
    for required in ("name", "url"):
        if required not in t:
            raise ConfigError(f"{key}.{required}", None, "is required")
    name = _str(f"{key}.name", t["name"])
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ConfigError(f"{key}.name", name, "use letters, digits, '-', '_' or '.'")
    url = _str(f"{key}.url", t["url"]).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{key}.url", url, "expected an http(s) URL, e.g. http://127.0.0.1:30000")
    if parts.path.rstrip("/").endswith("/metrics") or parts.query or parts.fragment:
        # The exporter adds /metrics, /server_info and /generate itself.
        raise ConfigError(f"{key}.url", url,
                          "give the engine's base URL, without a path or query, "
                          "e.g. http://127.0.0.1:30000")
    defaults = EngineConfig(name=name, url=url)
    return EngineConfig(
        name=name,
        url=url,
        kind=_choice(f"{key}.kind", t.get("kind", defaults.kind), ENGINE_KINDS),
        probe_interval_seconds=_non_negative(
            f"{key}.probe_interval_seconds",
            t.get("probe_interval_seconds", defaults.probe_interval_seconds),
        ),
        probe_timeout_seconds=_positive(
            f"{key}.probe_timeout_seconds",
            t.get("probe_timeout_seconds", defaults.probe_timeout_seconds),
        ),
        probe_max_new_tokens=int(_positive(
            f"{key}.probe_max_new_tokens",
            t.get("probe_max_new_tokens", defaults.probe_max_new_tokens),
            integer=True,
        )),
        probe_prompt=_str(f"{key}.probe_prompt", t.get("probe_prompt", defaults.probe_prompt)),
        stall_tracker=_bool(f"{key}.stall_tracker", t.get("stall_tracker", defaults.stall_tracker)),
        stall_poll_interval_seconds=_positive(
            f"{key}.stall_poll_interval_seconds",
            t.get("stall_poll_interval_seconds", defaults.stall_poll_interval_seconds),
        ),
        stall_window_seconds=_positive(
            f"{key}.stall_window_seconds", t["stall_window_seconds"],
        ) if "stall_window_seconds" in t else stall_window_seconds,
        metrics_dir=_metrics_dir(f"{key}.metrics_dir", t.get("metrics_dir", defaults.metrics_dir)),
        forward_pass_metrics_ipc=_ipc_endpoint(
            f"{key}.forward_pass_metrics_ipc",
            t.get("forward_pass_metrics_ipc", defaults.forward_pass_metrics_ipc)),
        tap_listen_address=_tap_address(f"{key}.tap_listen_address",
                                        t.get("tap_listen_address", defaults.tap_listen_address)),
        agents=_agents(f"{key}.agent", t.get("agent", [])),
    )


def _agents(key: str, tables: object) -> tuple[AgentConfig, ...]:
    if not isinstance(tables, list):
        raise ConfigError(key, HIDDEN, "must be an array of tables ([[engine.agent]])")
    agents = tuple(_agent(f"{key}[{i}]", t) for i, t in enumerate(tables))
    names = [a.name for a in agents]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{key}.name", name, "agent names must be unique per engine")
    return agents


def _agent(key: str, t: object) -> AgentConfig:
    """One [[engine.agent]] table. A bad one is told by its key alone: a value
    may be a secret."""
    if not isinstance(t, Mapping):
        raise ConfigError(key, HIDDEN, "must be a table")
    _reject_unknown(key, t, {"name", "api_key_file", *AGENT_MATCHERS}, hide=True)
    if "name" not in t:
        raise ConfigError(f"{key}.name", None, "is required")
    name = _str(f"{key}.name", t["name"])
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ConfigError(f"{key}.name", name, "use letters, digits, '-', '_' or '.'")
    if name == OTHER_AGENT:
        raise ConfigError(f"{key}.name", name,
                          f"{OTHER_AGENT!r} is the label of the requests no agent matches")
    given = [m for m in (*AGENT_MATCHERS, "api_key_file") if m in t]
    if len(given) != 1:
        raise ConfigError(key, HIDDEN, "give exactly one of api_key (or api_key_file), "
                          f"header, user, address; got {', '.join(given) or 'none'}")
    matcher = given[0]
    value = t[matcher]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}.{matcher}", HIDDEN, "must be a non-empty string")
    if matcher == "api_key_file":
        return AgentConfig(name, api_key=_secret_file(f"{key}.api_key_file", value))
    if matcher == "api_key":
        return AgentConfig(name, api_key=_token(f"{key}.api_key", value))
    if matcher == "header":
        header, sep, header_value = value.partition(":")
        header, header_value = header.strip(), header_value.strip()
        if not sep or not _HEADER_NAME.match(header) or not header_value:
            raise ConfigError(f"{key}.header", HIDDEN, 'expected "Name: value", e.g. '
                              '"X-Agent: creative"')
        if header.lower() in ("authorization", "x-api-key"):
            raise ConfigError(f"{key}.header", HIDDEN,
                              "a bearer token is matched with api_key or api_key_file")
        return AgentConfig(name, header_name=header, header_value=header_value)
    if matcher == "user":
        if len(value) > AGENT_USER_MAX_CHARS or '"' in value or "\\" in value:
            raise ConfigError(f"{key}.user", value, f"at most {AGENT_USER_MAX_CHARS} "
                              "characters, without quotes or backslashes")
        return AgentConfig(name, user=value)
    try:
        network = ipaddress.ip_network(value.strip(), strict=False)
    except ValueError:
        raise ConfigError(f"{key}.address", value,
                          "expected an IP address or network, e.g. 172.20.0.0/16") from None
    return AgentConfig(name, address=network)


def _token(key: str, value: str) -> str:
    token = value.strip()
    if any(c.isspace() for c in token) or not token.isascii() or not token.isprintable():
        raise ConfigError(key, HIDDEN, "a bearer token is one word of printable ASCII")
    return token


def _secret_file(key: str, path: str) -> str:
    """The token in a file (its first line); the path may be shown, never the content."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(4096)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(key, path, f"cannot read it: {reason or exc}") from None
    lines = text.strip().splitlines()
    if not lines:
        raise ConfigError(key, path, "the file is empty")
    return _token(key, lines[0])


def _metrics_dir(key: str, value: object) -> str:
    """A directory that exists now; the engine may not have written its files yet."""
    path = _str(key, value)
    if path and not os.path.isdir(path):
        raise ConfigError(key, path, "is not a directory (SGLang's PROMETHEUS_MULTIPROC_DIR)")
    return path


def _ipc_endpoint(key: str, value: object) -> str:
    """An ipc:// base name (SGLang appends `.<dp_rank>`, which only a path can take),
    or "off"."""
    endpoint = _str(key, value)
    if endpoint and endpoint != "off" and (not endpoint.startswith("ipc://")
                                          or len(endpoint) == len("ipc://")):
        raise ConfigError(key, endpoint, "expected ipc://PATH, the name given to SGLang's "
                                         "--forward-pass-metrics-ipc-name, or off")
    return endpoint


def _tap_address(key: str, value: object) -> str:
    """HOST:PORT for the stream tap; no host means loopback, never every interface."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    address = _str(key, value)
    if not address:
        return ""
    host, sep, port = address.rpartition(":")
    if not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigError(key, value, f"expected HOST:PORT, e.g. {TAP_DEFAULT_HOST}:30001")
    return f"{host if sep and host else TAP_DEFAULT_HOST}:{port}"


def _gpu(t: Mapping[str, Any]) -> GpuConfig:
    _reject_unknown("gpu", t, set(GpuConfig.__dataclass_fields__))
    defaults = GpuConfig()
    expected = t.get("expected_cards", defaults.expected_cards)
    if isinstance(expected, str) and expected.isdigit():  # from --gpu.expected-cards
        expected = int(expected)
    return GpuConfig(
        enabled=_bool("gpu.enabled", t.get("enabled", defaults.enabled)),
        backend=_choice("gpu.backend", t.get("backend", defaults.backend), GPU_BACKENDS),
        sysfs_root=_str("gpu.sysfs_root", t.get("sysfs_root", defaults.sysfs_root)),
        cards=_gpu_cards(t.get("cards", defaults.cards)),
        expected_cards=int(_non_negative("gpu.expected_cards", expected, integer=True)),
        reading_max_age_seconds=_non_negative(
            "gpu.reading_max_age_seconds",
            t.get("reading_max_age_seconds", defaults.reading_max_age_seconds)),
    )


def _gpu_cards(value: object) -> str | tuple[str, ...]:
    """`discrete`, `all`, or PCI addresses: a TOML list, or comma-separated (the flag)."""
    if isinstance(value, str) and value in GPU_CARD_SELECTIONS:
        return value
    addresses = value.split(",") if isinstance(value, str) else value
    if not isinstance(addresses, list | tuple) or not addresses:
        raise ConfigError("gpu.cards", value,
                          "use discrete, all, or a list of PCI addresses like 0000:03:00.0")
    normalised = tuple(str(a).strip().lower() for a in addresses)
    for address in normalised:
        if not _PCI_ADDRESS.match(address):
            raise ConfigError("gpu.cards", value,
                              f"{address!r} is not a PCI address like 0000:03:00.0")
    return normalised


def _host(t: Mapping[str, Any]) -> HostConfig:
    _reject_unknown("host", t, set(HostConfig.__dataclass_fields__))
    defaults = HostConfig()
    return HostConfig(
        enabled=_bool("host.enabled", t.get("enabled", defaults.enabled)),
        proc_root=_str("host.proc_root", t.get("proc_root", defaults.proc_root)),
    )


def _health(t: Mapping[str, Any]) -> HealthConfig:
    _reject_unknown("health", t, set(HealthConfig.__dataclass_fields__))
    return HealthConfig(sample_interval_seconds=_non_negative(
        "health.sample_interval_seconds",
        t.get("sample_interval_seconds", HealthConfig.sample_interval_seconds)))


def _table(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "must be a table")
    return value


def _reject_unknown(prefix: str, table: Mapping[str, Any], known: set[str],
                    hide: bool = False) -> None:
    for key in table:
        if key not in known:
            where = f"{prefix}.{key}" if prefix else key
            raise ConfigError(where, HIDDEN if hide else table[key],
                              f"unknown key (known: {', '.join(sorted(known))})")


def _str(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, value, "must be a string")
    return value


def _bool(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, value, "must be true or false")
    return value


def _choice(key: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(key, value, f"must be one of {', '.join(choices)}")
    return str(value)


def _number(key: str, value: object, integer: bool, positive: bool) -> float:
    try:
        return float(checked_number(value, whole=integer, positive=positive))
    except BadValue as exc:
        raise ConfigError(key, value, str(exc)) from exc


def _positive(key: str, value: object, integer: bool = False) -> float:
    return _number(key, value, integer, positive=True)


def _non_negative(key: str, value: object, integer: bool = False) -> float:
    return _number(key, value, integer, positive=False)
