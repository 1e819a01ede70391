"""The exporter's configuration: a TOML file, every key overridable by a flag.

Each key is declared once, below, as a field of a msgspec struct: its type and
bounds, its default, and its words (`Doc`). msgspec checks a raw mapping against
them; the flags (exporter/daemon/cli.py) and the key tables of
docs/configuration.md (exporter/config_doc.py) are derived from the same fields.
`load_config` returns frozen structs or raises ConfigError, whose message names
the key and the bad value (never a secret's). The CLI prints it and exits 2.
"""

from __future__ import annotations

import copy
import ipaddress
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta, Struct
from msgspec.structs import replace

from exporter.process.log_limits import REPEAT_INTERVAL_SECONDS
from exporter.thresholds import Thresholds
from exporter.validation import DECLARED_ORDER, BadValue, converted, read_toml
from exporter.validation import choices as validation_choices

DEFAULT_LISTEN_ADDRESS = "127.0.0.1:9842"
EngineKind = Literal["sglang", "vllm", "llamacpp"]
GpuBackend = Literal["auto", "sysfs", "pyrsmi", "none"]
LogLevel = Literal["debug", "info", "warning", "error"]
ENGINE_KINDS: tuple[str, ...] = get_args(EngineKind)
GPU_BACKENDS: tuple[str, ...] = get_args(GpuBackend)
LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)
GPU_CARD_SELECTIONS = ("discrete", "all")
# Where a tap address without a host listens: binding wider is explicit.
TAP_DEFAULT_HOST = "127.0.0.1"
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$")


def Doc(meaning: str, **extra: Any) -> Meta:  # noqa: N802 (reads as a type's annotation)
    """A key's words: `meaning` for docs/configuration.md; in `extra`, `help` for
    --help where it differs ("{default}" marks where the default goes), `flag` for a
    flag name other than `--table.key` (None: no flag), `default` for the docs'
    default column, `refused` for the reason of any bad value."""
    return Meta(description=meaning, extra=extra)


# msgspec takes no infinite bound: the largest float refuses inf (and NaN fails any bound).
_FINITE = sys.float_info.max
Positive = Meta(gt=0, le=_FINITE)
NonNegative = Meta(ge=0, le=_FINITE)
_NAME = Meta(pattern=r"^[\w.-]+$", extra={"refused": "use letters, digits, '-', '_' or '.'"})


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


class Table(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One table of the TOML file: an unknown key is refused by name."""


@dataclass(frozen=True)
class AgentConfig:
    """One `[[engine.agent]]` as the tap matches it (docs/tap.md#agents), read from
    an AgentTable. Exactly one matcher is set; secrets are kept out of repr (a log
    line, a traceback)."""

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


class AgentTable(Table):
    """`[[engine.agent]]` as written: `name` and exactly one matcher."""

    name: Annotated[str, _NAME, Doc(
        "required: letters, digits, `-`, `_`, `.`; unique within the engine; not `other`. "
        "The `agent` label")]
    api_key: Annotated[str | None, Doc(
        "the agent's bearer token: `Authorization: Bearer TOKEN` or `x-api-key: TOKEN` (the "
        "Anthropic client's). Compared in constant time; never logged, exported or echoed "
        "in an error")] = None
    api_key_file: Annotated[str | None, Doc(
        "the same, read from the first line of a file (read again at each reload); keeps "
        "the token out of the config file")] = None
    header: Annotated[str | None, Doc(
        '`"Name: value"`: a header the agent sends (the name case-insensitive, the value '
        "exact)")] = None
    user: Annotated[str | None, Doc(
        f"the request body's OpenAI `user` field, at most {AGENT_USER_MAX_CHARS} "
        "characters")] = None
    address: Annotated[str | None, Doc(
        "the client's address or network, `172.20.0.0/16` or `10.0.0.5`: the peer the tap "
        "sees, not `X-Forwarded-For`")] = None


class WebConfig(Table):
    listen_address: Annotated[str, Doc(
        "`HOST:PORT` to serve on",
        help="HOST:PORT to serve on (default {default}; use 0.0.0.0:PORT to open it)",
    )] = DEFAULT_LISTEN_ADDRESS
    # Below deploy/prometheus.yml's 5 s scrape timeout, with room to render, so a
    # slow source costs its own readings and not the whole scrape.
    scrape_deadline_seconds: Annotated[float, Positive, Doc(
        "how long each source may take per scrape; a slower source costs its own "
        "readings, not the scrape", help="seconds each source may take per scrape")] = 4.0
    # TLS and basic auth, in the exporter-toolkit's format (exporter/daemon/web/security.py).
    config_file: Annotated[str | None, Doc(
        "TLS and basic auth, see [access control](#access-control)", flag="--web.config.file",
        help="exporter-toolkit web config (YAML): TLS and basic auth; see "
             "docs/configuration.md")] = None
    # One line per request is noise at a 15 s scrape; on when debugging.
    access_log: Annotated[bool, Doc("one log line per HTTP request")] = False
    # As Prometheus' own --web.max-connections (512); the open-file limit may lower it
    # (exporter/daemon/web/listener.py).
    max_connections: Annotated[int, Meta(gt=0), Doc(
        "connections served at once, as Prometheus' own `--web.max-connections`; the "
        "open-file limit may lower it, see [connections](#connections)",
        help="connections served at once; the open-file limit may lower it")] = 512

    @property
    def host(self) -> str:
        return self.listen_address.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen_address.rpartition(":")[2])

    def checked(self) -> WebConfig:
        _host, sep, port = self.listen_address.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError("web.listen_address", self.listen_address,
                              f"expected HOST:PORT, e.g. {DEFAULT_LISTEN_ADDRESS}")
        return self


class EngineConfig(Table):
    name: Annotated[str, _NAME, Doc(
        "letters, digits, `-`, `_`, `.`; unique; the `engine` label and the "
        "`engine/<name>` source")]
    url: Annotated[str, Doc(
        "the engine's base URL (`http://127.0.0.1:30000`). One that ends in `/metrics`, or "
        "has a query, is refused: the exporter adds the paths")]
    kind: Annotated[EngineKind, Doc(
        "`sglang`, `vllm` or `llamacpp` (llama.cpp's `llama-server`, started with "
        "`--metrics`, and `--slots` for the per-slot series and the stall tracker): which "
        "[mapping table](metrics.md#engine-metrics) applies; the `kind` label")] = "sglang"
    # Absent or 0: no probe. A probe costs the engine a short generation.
    probe_interval_seconds: Annotated[float, NonNegative, Doc(
        "seconds between [stream probes](metrics.md#stream-probe); 0: no probe")] = 0.0
    probe_timeout_seconds: Annotated[float, Positive, Doc("the probe's hard deadline")] = 60.0
    probe_max_new_tokens: Annotated[int, Meta(gt=0), Doc("the probe's length")] = 32
    probe_prompt: Annotated[str, Doc("the probe's prompt", default="built in")] = ""
    # The stall tracker reads the engine's counters 4 times a second.
    stall_tracker: Annotated[bool, Doc(
        "run the [decode stall tracker](stall-tracker.md) (SGLang; llama.cpp "
        "[from `/slots`](stall-tracker.md#llamacpp))")] = True
    stall_poll_interval_seconds: Annotated[float, Positive, Doc(
        "the tracker's fastest poll")] = 0.25
    # Unset: the `[thresholds]` decode_stall_window_seconds the rules are written for
    # (load_config puts it in). Only a time-compressed test rig (exporter/sim) sets it.
    stall_window_seconds: Annotated[float, Positive, Doc(
        "how far back this engine's longest-gap gauges (the stall tracker's and the tap's) "
        "look; only a time-compressed rig (the simulator) sets it, to match its compressed "
        "rules", default="`[thresholds] decode_stall_window_seconds` "
        f"({Thresholds.decode_stall_window_seconds})",
    )] = Thresholds.decode_stall_window_seconds
    # SGLang's PROMETHEUS_MULTIPROC_DIR: the tracker reads the counters from its files
    # (no engine work) instead of /metrics under a 2 % budget.
    metrics_dir: Annotated[str, Doc(
        "SGLang's `PROMETHEUS_MULTIPROC_DIR`, an existing directory: the tracker then reads "
        "its files instead of `/metrics` ([where the counters come "
        "from](stall-tracker.md#where-the-counters-come-from))")] = ""
    tap_listen_address: Annotated[str, Doc(
        "`HOST:PORT` of the [stream tap](tap.md) for this engine; a bare port (`30001`, "
        f"`:30001`) means {TAP_DEFAULT_HOST}")] = ""
    # AgentConfigs, read from the [[engine.agent]] tables (AgentTable) by load_config;
    # `Any` as msgspec cannot type an address's IPv4Network | IPv6Network.
    agents: Annotated[tuple[Any, ...], Doc(
        "`[[engine.agent]]` tables: the [agents](tap.md#agents) the tap names its requests "
        "after")] = msgspec.field(default=(), name="agent")

    def checked(self, key: str) -> EngineConfig:
        url = self.url.rstrip("/")
        split = urlsplit(url)
        if split.scheme not in ("http", "https") or not split.netloc:
            raise ConfigError(f"{key}.url", url,
                              "expected an http(s) URL, e.g. http://127.0.0.1:30000")
        if split.path.rstrip("/").endswith("/metrics") or split.query or split.fragment:
            # The exporter adds /metrics, /server_info and /generate itself.
            raise ConfigError(f"{key}.url", url, "give the engine's base URL, without a path "
                              "or query, e.g. http://127.0.0.1:30000")
        if self.metrics_dir and not os.path.isdir(self.metrics_dir):
            raise ConfigError(f"{key}.metrics_dir", self.metrics_dir,
                              "is not a directory (SGLang's PROMETHEUS_MULTIPROC_DIR)")
        return replace(self, url=url, tap_listen_address=_tap_address(
            f"{key}.tap_listen_address", self.tap_listen_address))


class GpuConfig(Table):
    enabled: Annotated[bool, Doc("read the GPU source", flag="--collector.gpu",
                                 help="read the gpu source")] = True
    backend: Annotated[GpuBackend, Doc(
        "`sysfs`, `pyrsmi`, `auto` (pyrsmi where ROCm loads, over sysfs) or `none`; see "
        "[GPU readings](gpu.md#backends)")] = "auto"
    sysfs_root: Annotated[str, Doc("a tree that mirrors `/sys` (tests point it at a fixture)",
                                   flag="--sysfs.root", help="root of the sysfs tree to read")
                          ] = "/sys"
    # "discrete" skips the Ryzen's iGPU; "all"; or PCI addresses.
    cards: Annotated[str | tuple[str, ...], Doc(
        "`discrete` (every amdgpu card but an APU's iGPU), `all`, or a list of PCI "
        "addresses; see [which cards](gpu.md#which-cards)",
        help=f"cards to read: {' | '.join(GPU_CARD_SELECTIONS)} | PCI addresses, "
             "comma-separated",
        refused="use discrete, all, or a list of PCI addresses like 0000:03:00.0")
    ] = "discrete"
    # 2x RX 7900 XTX (docs/facts/rig.md#hardware-and-software). Exported as
    # rig_gpu_expected_cards for RigGpuMissing.
    expected_cards: Annotated[int, Meta(ge=0), Doc(
        "the cards the rig should have, exported as `rig_gpu_expected_cards`; 0: no count",
        help="cards the rig should have; fewer pages RigGpuMissing; 0 disables")] = 2
    # gpu_metrics asks the SMU firmware at each read: fifty scrapers cost the driver one
    # read a second, Prometheus at 15 s none extra.
    reading_max_age_seconds: Annotated[float, NonNegative, Doc(
        "a GPU reading younger than this is served again instead of rereading the card "
        "files; 0: every snapshot rereads them. See [how often the card files are "
        "read](gpu.md#how-often-the-card-files-are-read)",
        help="seconds a GPU reading is served again before the card files are reread; "
             "0: every snapshot")] = 1.0

    def checked(self) -> GpuConfig:
        """`discrete`, `all`, or PCI addresses: a TOML list, or comma-separated (the flag)."""
        value = self.cards
        if isinstance(value, str) and value in GPU_CARD_SELECTIONS:
            return self
        addresses = value.split(",") if isinstance(value, str) else value
        refused = "use discrete, all, or a list of PCI addresses like 0000:03:00.0"
        if not addresses:
            raise ConfigError("gpu.cards", list(value), refused)
        normalised = tuple(a.strip().lower() for a in addresses)
        for address in normalised:
            if not _PCI_ADDRESS.match(address):
                raise ConfigError("gpu.cards", value,
                                  f"{address!r} is not a PCI address like 0000:03:00.0")
        return replace(self, cards=normalised)


class HostConfig(Table):
    enabled: Annotated[bool, Doc("read the host source", flag="--collector.host",
                                 help="read the host source")] = True
    proc_root: Annotated[str, Doc("a tree that mirrors `/proc`", flag="--proc.root",
                                  help="root of the procfs tree to read")] = "/proc"


class HealthConfig(Table):
    sample_interval_seconds: Annotated[float, NonNegative, Doc(
        "when no scrape came for this long, the exporter reads a snapshot itself to keep "
        "the health checks' windows filling; 0: scrapes and health requests only",
        help="seconds without a scrape after which the exporter reads a snapshot for the "
             "health checks' windows itself; 0: never")] = 15.0


class LogConfig(Table):
    level: Annotated[LogLevel, Doc("the least severe level that is logged")] = "info"
    # A failure that goes on is told again, with its count, once this often
    # (exporter/process/log_limits.py).
    repeat_interval_seconds: Annotated[float, Positive, Doc(
        "a failure that goes on (a source down, a card file unreadable) is told again this "
        "often with its count, and a traceback at most this often per exception type; see "
        "[logs](design.md#logs). Read at start",
        help="seconds after which a failure that goes on is told again, with its count",
    )] = REPEAT_INTERVAL_SECONDS


class Config(Table):
    web: WebConfig = WebConfig()
    engines: tuple[EngineConfig, ...] = msgspec.field(default=(), name="engine")
    gpu: GpuConfig = GpuConfig()
    host: HostConfig = HostConfig()
    health: HealthConfig = HealthConfig()
    # Read by Thresholds.from_mapping (exporter/thresholds.py), which the rule and
    # dashboard generators share.
    thresholds: Thresholds = msgspec.field(default_factory=Thresholds)
    log: LogConfig = LogConfig()

    @property
    def log_level(self) -> str:
        return self.log.level

    @property
    def log_repeat_interval_seconds(self) -> float:
        return self.log.repeat_interval_seconds


#: The struct of each single table of the TOML file: its field defaults are the keys'.
TABLE_CLASSES: dict[str, type[Table]] = {
    "web": WebConfig, "engine": EngineConfig, "gpu": GpuConfig, "host": HostConfig,
    "health": HealthConfig, "log": LogConfig}


def default_of(table: str, key: str) -> Any:
    """The built-in value of one key of the TOML file, e.g. ("web", "listen_address")."""
    (found,) = (f for f in msgspec.structs.fields(TABLE_CLASSES[table]) if f.name == key)
    return found.default


def read_config_file(path: str | Path) -> dict[str, Any]:
    try:
        return read_toml(path)
    except BadValue as exc:
        raise ConfigError("config.file", str(path), str(exc)) from exc


def load_config(raw: Mapping[str, Any]) -> Config:
    """Validate a mapping shaped like the TOML file (docs/configuration.md) into a Config."""
    raw = copy.deepcopy(dict(raw))
    thresholds_raw = raw.pop("thresholds", {})
    if not isinstance(thresholds_raw, Mapping):
        raise ConfigError("thresholds", thresholds_raw, "must be a table")
    try:
        thresholds = Thresholds.from_mapping(thresholds_raw)
    except ValueError as exc:
        raise ConfigError("thresholds", thresholds_raw, str(exc)) from exc
    engines = raw.get("engine", [])
    agent_tables = [e.pop("agent", []) if isinstance(e, dict) else []
                    for e in (engines if isinstance(engines, list) else [])]
    for table in engines if isinstance(engines, list) else []:
        tap = table.get("tap_listen_address") if isinstance(table, dict) else None
        if isinstance(tap, int) and not isinstance(tap, bool):  # a bare port
            table["tap_listen_address"] = str(tap)
    config = _converted(raw, Config, "")
    checked = []
    for i, engine in enumerate(config.engines):
        key = f"engine[{i}]"
        engine = replace(engine.checked(key), agents=_agents(f"{key}.agent", agent_tables[i]))
        if "stall_window_seconds" not in engines[i]:
            engine = replace(engine, stall_window_seconds=float(
                thresholds.decode_stall_window_seconds))
        checked.append(engine)
    names = [e.name for e in checked]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError("engine.name", name, "engine names must be unique")
    return replace(config, web=config.web.checked(), gpu=config.gpu.checked(),
                   engines=tuple(checked), thresholds=thresholds)


def _agents(key: str, tables: object) -> tuple[AgentConfig, ...]:
    if not isinstance(tables, list):
        raise ConfigError(key, HIDDEN, "must be an array of tables ([[engine.agent]])")
    agents = tuple(_agent(f"{key}[{i}]", _converted(t, AgentTable, f"{key}[{i}]"))
                   for i, t in enumerate(tables))
    names = [a.name for a in agents]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{key}.name", name, "agent names must be unique per engine")
    return agents


def _agent(key: str, t: AgentTable) -> AgentConfig:
    """One [[engine.agent]] table. A bad one is told by its key alone: a value
    may be a secret."""
    name = t.name
    if name == OTHER_AGENT:
        raise ConfigError(f"{key}.name", name,
                          f"{OTHER_AGENT!r} is the label of the requests no agent matches")
    given = [m for m in (*AGENT_MATCHERS, "api_key_file") if getattr(t, m) is not None]
    if len(given) != 1:
        raise ConfigError(key, HIDDEN, "give exactly one of api_key (or api_key_file), "
                          f"header, user, address; got {', '.join(given) or 'none'}")
    matcher = given[0]
    value = getattr(t, matcher)
    if not value.strip():
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


def _tap_address(key: str, address: str) -> str:
    """HOST:PORT for the stream tap; no host means loopback, never every interface."""
    if not address:
        return ""
    host, sep, port = address.rpartition(":")
    if not port.isdigit() or not 0 < int(port) <= 65535:
        shown: object = int(address) if address.isdigit() else address
        raise ConfigError(key, shown, f"expected HOST:PORT, e.g. {TAP_DEFAULT_HOST}:30001")
    return f"{host if sep and host else TAP_DEFAULT_HOST}:{port}"


@dataclass(frozen=True)
class Words:
    """What a key's field says of it, for a flag and for docs/configuration.md."""

    meaning: str  # Markdown
    help: str  # plain, for --help
    extra: dict[str, Any]
    type: type  # a flag's: bool, int, float or str
    choices: tuple[str, ...] = ()


def field_words(field: msgspec.inspect.Field) -> Words:
    info, extra, meaning = field.type, {}, ""
    while isinstance(info, msgspec.inspect.Metadata):
        extra.update(info.extra or {})
        meaning = (info.extra_json_schema or {}).get("description", meaning)
        info = info.type
    choices: tuple[str, ...] = ()
    if isinstance(info, msgspec.inspect.LiteralType):
        choices = validation_choices(info)
    plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", meaning).replace("`", "")
    kinds = {msgspec.inspect.BoolType: bool, msgspec.inspect.IntType: int,
             msgspec.inspect.FloatType: float}
    return Words(meaning, extra.get("help") or " | ".join(choices) or plain, extra,
                 kinds.get(type(info), str), choices)


# The choices of a bad value in their declared order (exporter/validation.py).
DECLARED_ORDER.update({frozenset(c): c for c in (ENGINE_KINDS, GPU_BACKENDS, LOG_LEVELS)})


def _converted(raw: object, kind: type[Struct], prefix: str) -> Any:
    """`raw` as a `kind`, or the ConfigError of its first bad key, its value hidden
    where it may be a secret: an [[engine]] table's unknown key (a misplaced token),
    an [[engine.agent]]'s matcher."""
    try:
        return converted(raw, kind)
    except BadValue as exc:
        path = exc.path
        key = (prefix + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path)
               ).lstrip(".") or "config"
        in_engine = prefix.startswith("engine") or path[:1] == ("engine",)
        hidden = (in_engine and (exc.unknown or len(path) <= 2)) or (
            "agent" in prefix and path[-1:] != ("name",))
        reason = str(exc)
        if reason == "must be an array of tables":
            reason += " ([[engine]])"
        raise ConfigError(key, HIDDEN if hidden else exc.value, reason) from None
