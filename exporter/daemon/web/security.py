"""TLS and basic auth from a `--web.config.file`, in the Prometheus exporter-toolkit format.

    tls_server_config:
      cert_file: /etc/rig-exporter/cert.pem
      key_file: /etc/rig-exporter/key.pem
      client_ca_file: /etc/rig-exporter/ca.pem          # optional
      client_auth_type: RequireAndVerifyClientCert      # optional; needs client_ca_file
      min_version: TLS12                                # TLS12 (default) or TLS13
    basic_auth_users:
      prometheus: $2b$12$...                            # bcrypt hashes (htpasswd -B)

The same file that node_exporter reads works here, for the keys above; any other
key is refused by name rather than silently ignored. TLS is the stdlib `ssl`
module and the hashes are checked by `bcrypt` (exporter/daemon/web/auth.py): no crypto is
written here.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.config import ConfigError

TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version"}
CLIENT_AUTH_TYPES = ("NoClientCert", "RequireAndVerifyClientCert")
TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class WebSecurity:
    tls: ssl.SSLContext | None = None
    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict)


def load_web_security(path: str | Path | None) -> WebSecurity:
    """Parse and check the web config file; ConfigError names the bad key."""
    if path is None:
        return WebSecurity()
    raw = read_web_config(path)
    return WebSecurity(
        tls=_tls(raw.get("tls_server_config"), Path(path).parent),
        basic_auth_users=_users(raw.get("basic_auth_users")),
    )


def read_web_config(path: str | Path) -> dict[str, Any]:
    """The file's YAML mapping, its top-level keys checked (rigctl reads it too, to
    reach the exporter it configures)."""
    where = "web.config_file"
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ConfigError(where, str(path), exc.strerror or str(exc)) from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(where, str(path), f"not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(where, str(path), "must be a YAML mapping")
    for key in raw:
        if key not in ("tls_server_config", "basic_auth_users"):
            raise ConfigError(key, raw[key], "unsupported web config key "
                              "(supported: tls_server_config, basic_auth_users)")
    return raw


def _tls(t: Any, base: Path) -> ssl.SSLContext | None:
    if t is None:
        return None
    if not isinstance(t, dict):
        raise ConfigError("tls_server_config", t, "must be a mapping")
    for key in t:
        if key not in TLS_KEYS:
            raise ConfigError(f"tls_server_config.{key}", t[key],
                              f"unsupported (supported: {', '.join(sorted(TLS_KEYS))})")
    for key in ("cert_file", "key_file"):
        if not isinstance(t.get(key), str):
            raise ConfigError(f"tls_server_config.{key}", t.get(key), "is required (a path)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    version = t.get("min_version", "TLS12")
    if version not in TLS_VERSIONS:
        raise ConfigError("tls_server_config.min_version", version,
                          f"must be one of {', '.join(TLS_VERSIONS)}")
    context.minimum_version = TLS_VERSIONS[version]
    try:
        context.load_cert_chain(base / t["cert_file"], base / t["key_file"])
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("tls_server_config.cert_file", t["cert_file"],
                          f"cannot load the certificate and key: {exc}") from exc
    auth_type = t.get("client_auth_type", "NoClientCert")
    if auth_type not in CLIENT_AUTH_TYPES:
        raise ConfigError("tls_server_config.client_auth_type", auth_type,
                          f"must be one of {', '.join(CLIENT_AUTH_TYPES)}")
    if auth_type == "RequireAndVerifyClientCert":
        ca = t.get("client_ca_file")
        if not isinstance(ca, str):
            raise ConfigError("tls_server_config.client_ca_file", ca,
                              "is required with RequireAndVerifyClientCert")
        try:
            context.load_verify_locations(base / ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError("tls_server_config.client_ca_file", ca, str(exc)) from exc
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _users(t: Any) -> dict[str, bytes]:
    if t is None:
        return {}
    if not isinstance(t, dict):
        raise ConfigError("basic_auth_users", t, "must be a mapping of user: bcrypt hash")
    users = {}
    for user, hashed in t.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ConfigError(f"basic_auth_users.{user}", "<hidden>",
                              "must be a bcrypt hash, e.g. from `htpasswd -nBC 12 USER`")
        users[str(user)] = hashed.encode()
    return users
