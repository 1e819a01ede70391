"""The Basic header as the auth middleware reads it (aiohttp.BasicAuth.decode):
every malformed form is no credentials, never an exception, and a password keeps
its colons and its UTF-8."""

from __future__ import annotations

import base64

import pytest

from exporter.daemon.web.auth import _credentials


def _basic(raw: bytes) -> str:
    return "Basic " + base64.b64encode(raw).decode()


@pytest.mark.parametrize("header", [
    "", "Basic", "Basic ", "Bearer dTpw", "Basic !!!", "Basic  dTpw", "Basic ü",
    _basic(b"no colon"), _basic(b"\xff:latin-1 bytes"),
])
def test_a_malformed_header_is_no_credentials(header: str) -> None:
    assert _credentials(header) is None


@pytest.mark.parametrize(("header", "expected"), [
    ("Basic dTpw", ("u", "p")),
    ("basic dTpw", ("u", "p")),  # the scheme is case-insensitive (RFC 7617 section 2)
    (_basic(b"prometheus:a:b:c"), ("prometheus", "a:b:c")),
    (_basic("r\u00e9gis:\u00fc".encode()), ("r\u00e9gis", "\u00fc")),
    (_basic(b":"), ("", "")),
])
def test_a_basic_header_gives_user_and_password(header: str,
                                                expected: tuple[str, str]) -> None:
    assert _credentials(header) == expected
