"""`rigctl doctor --config.file rig.toml` without --exporter asks the exporter that
config describes: a real exporter process on a port other than the default, then the
same behind TLS and basic auth (its web config), which the doctor reaches with the
exporter's own certificate and user and the password from $RIGCTL_PASSWORD."""

from __future__ import annotations

import argparse
import json
import ssl
import subprocess
import sys
from pathlib import Path

import bcrypt
import pytest
import trustme

from exporter.config import DEFAULT_LISTEN_ADDRESS, ConfigError, load_config
from exporter.process.launch import free_port, start_exporter
from exporter.rigctl.commands.common import DEFAULT_EXPORTER, exporter_from_config
from tests.support.checkout import ENV, REPO
from tests.support.rig_config import write_rig_config

pytestmark = pytest.mark.long_running(30)

USER, PASSWORD = "prometheus", "correct horse battery staple"


def _doctor(config: Path, password: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in ENV.items() if k != "RIGCTL_PASSWORD"}
    if password is not None:
        env["RIGCTL_PASSWORD"] = password
    return subprocess.run([sys.executable, "-m", "exporter.rigctl", "doctor", "--json",
                           "--watch-seconds", "5", "--config.file", str(config)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def _rig_config(tmp_path: Path, port: int, web_config: Path | None = None) -> Path:
    config = write_rig_config(tmp_path / "rig.toml", port, f"http://127.0.0.1:{free_port()}")
    if web_config is not None:
        text = config.read_text()
        config.write_text(text.replace("[web]\n", f'[web]\nconfig_file = "{web_config}"\n'))
    return config


def test_the_doctor_asks_the_exporter_at_the_configs_listen_address(tmp_path: Path) -> None:
    port = free_port()
    assert f":{port}" not in DEFAULT_LISTEN_ADDRESS
    config = _rig_config(tmp_path, port)
    with start_exporter(["--config.file", str(config)], tmp_path,
                        address=f"127.0.0.1:{port}"):
        done = _doctor(config)
    assert done.returncode != 3, done.stderr
    assert json.loads(done.stdout)["exporter"] == f"http://127.0.0.1:{port}"


def test_the_doctor_reaches_the_configs_exporter_over_tls_with_its_user(
        tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))  # the leaf alone
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
                   f"basic_auth_users:\n  {USER}: '{hashed}'\n")
    port = free_port()
    config = _rig_config(tmp_path, port, web)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    with start_exporter(["--config.file", str(config)], tmp_path, scheme="https",
                        context=client, address=f"127.0.0.1:{port}"):
        done = _doctor(config, PASSWORD)
        wrong = _doctor(config, "not the password")
    assert done.returncode != 3, done.stderr
    assert json.loads(done.stdout)["exporter"] == f"https://127.0.0.1:{port}"
    assert wrong.returncode == 3
    assert wrong.stderr.startswith("rigctl doctor: cannot reach the exporter: "), wrong.stderr
    assert "401" in wrong.stderr
    assert len(wrong.stderr.splitlines()) == 1
    assert "not the password" not in wrong.stderr + wrong.stdout


def _args(**given: object) -> argparse.Namespace:
    flags = {"exporter": None, "user": None, "password_file": None, "ca_file": None}
    return argparse.Namespace(**{**flags, **given})


@pytest.mark.parametrize(("listen", "url"), [
    ("0.0.0.0:9900", "http://127.0.0.1:9900"),
    (":9900", "http://127.0.0.1:9900"),
    ("[::]:9900", "http://[::1]:9900"),
    ("[::1]:9900", "http://[::1]:9900"),
    ("192.0.2.7:9900", "http://192.0.2.7:9900"),
])
def test_an_address_that_listens_everywhere_is_asked_on_loopback(listen: str, url: str) -> None:
    config = load_config({"web": {"listen_address": listen}})
    assert exporter_from_config(_args(), config)[0] == url


def test_exporter_wins_over_the_config_and_no_config_is_the_default() -> None:
    config = load_config({"web": {"listen_address": "127.0.0.1:9900",
                                  "config_file": "/nonexistent/web.yml"}})
    assert exporter_from_config(_args(exporter="http://rig:9842"), config)[0] == \
        "http://rig:9842"
    assert exporter_from_config(_args(), None)[0] == DEFAULT_EXPORTER


def test_a_web_config_that_cannot_be_read_is_named() -> None:
    config = load_config({"web": {"config_file": "/nonexistent/web.yml"}})
    with pytest.raises(ConfigError, match=r"^config key web.config_file = '/nonexistent/"):
        exporter_from_config(_args(), config)
