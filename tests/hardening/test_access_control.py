"""--web.config.file: TLS and basic auth in the exporter-toolkit format, on a real process."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
import trustme

from exporter.config import ConfigError
from exporter.daemon.web.security import load_web_security
from exporter.process.launch import start_exporter
from tests.support.sysfs_tree import SYSFS_FIXTURE

USER, PASSWORD = "prometheus", "correct horse battery staple"


def _hash(password: str) -> str:
    # Cost 4 keeps the test fast; the format is the same as htpasswd -B's.
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def _web_config(tmp_path: Path, ca: trustme.CA | None, users: bool) -> Path:
    lines = []
    if ca is not None:
        cert = ca.issue_cert("127.0.0.1", "localhost")
        cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
        cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
        lines += ["tls_server_config:", "  cert_file: cert.pem", "  key_file: key.pem"]
    if users:
        lines += ["basic_auth_users:", f"  {USER}: '{_hash(PASSWORD)}'"]
    path = tmp_path / "web.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _get(url: str, context: ssl.SSLContext | None = None,
         credentials: tuple[str, str] | None = None) -> int:
    request = urllib.request.Request(url)
    if credentials:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_basic_auth_over_tls(tmp_path: Path, ca: trustme.CA) -> None:
    config = _web_config(tmp_path, ca, users=True)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    with start_exporter(["--web.config.file", str(config),
                         "--sysfs.root", str(SYSFS_FIXTURE), "--no-collector.host"],
                        tmp_path, scheme="https", context=client) as exporter:
        metrics = exporter.url + "/metrics"
        assert _get(metrics, client) == 401
        assert _get(metrics, client, (USER, "wrong")) == 401
        assert _get(metrics, client, ("nobody", PASSWORD)) == 401
        assert _get(metrics, client, (USER, PASSWORD)) == 200
        assert _get(metrics, client, (USER, PASSWORD)) == 200  # the remembered success
        # Plain HTTP to the TLS port gets no exposition.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(metrics.replace("https://", "http://"), timeout=5)
        # A client that does not trust the CA refuses the certificate.
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(metrics, timeout=5, context=ssl.create_default_context())
        assert "listening on https://127.0.0.1:" in exporter.log()


def test_without_a_web_config_it_serves_plain_http_without_auth(tmp_path: Path) -> None:
    with start_exporter(["--sysfs.root", str(SYSFS_FIXTURE), "--no-collector.host"],
                        tmp_path) as exporter:
        assert _get(exporter.url + "/metrics") == 200


@pytest.mark.parametrize(("text", "key"), [
    ("tls_server_config: {cert_file: nope.pem, key_file: nope.pem}\n",
     "tls_server_config.cert_file"),
    ("tls_server_config: {key_file: k.pem}\n", "tls_server_config.cert_file"),
    ("basic_auth_users: {alice: plaintext}\n", "basic_auth_users.alice"),
    ("basic_auth_users: [alice]\n", "basic_auth_users"),
    ("http_server_config: {http2: true}\n", "http_server_config"),
    ("tls_server_config: {cert_file: c, key_file: k, min_version: TLS10}\n",
     "tls_server_config.min_version"),
    ("{{{ not yaml\n", "web.config_file"),
    ("- a list\n", "web.config_file"),
])
def test_bad_web_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_web_security(path)
    assert caught.value.key == key
    assert "plaintext" not in str(caught.value)  # a password-ish value is never echoed


def test_missing_web_config_file_exits_2_with_one_line(tmp_path: Path) -> None:
    with start_exporter(["--web.config.file", str(tmp_path / "absent.yml")], tmp_path,
                        wait=False) as exporter:
        assert exporter.popen.wait(timeout=20) == 2
        assert "web.config_file" in exporter.log()
        assert "Traceback" not in exporter.log()


def _rigctl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exporter.rigctl", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_rigctl_health_uses_the_same_credentials_and_ca(tmp_path: Path, ca: trustme.CA) -> None:
    config = _web_config(tmp_path, ca, users=True)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    with start_exporter(["--web.config.file", str(config),
                         "--sysfs.root", str(SYSFS_FIXTURE), "--no-collector.host"],
                        tmp_path, scheme="https", context=client) as exporter:
        base = ("health", "--exporter", exporter.url, "--json")
        untrusted = _rigctl(*base)
        assert untrusted.returncode == 3 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
        anonymous = _rigctl(*base, "--ca-file", str(ca_file))
        assert anonymous.returncode == 3 and "HTTP 401" in anonymous.stderr
        wrong = _rigctl(*base, "--ca-file", str(ca_file), "--user", USER,
                        env={"RIGCTL_PASSWORD": "wrong"})
        assert wrong.returncode == 3 and "HTTP 401" in wrong.stderr
        allowed = _rigctl(*base, "--ca-file", str(ca_file), "--user", USER,
                          "--password-file", str(password_file))
        assert allowed.returncode in (0, 1, 2), allowed.stderr
        assert json.loads(allowed.stdout)["checks"]
