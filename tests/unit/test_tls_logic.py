"""TLS classification and the client context (no network): what counts as ``tls_failed``,
however deep a library wraps it, and what stays a retryable connection loss."""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.errors import info
from avatar_sdk.testing.tls import TestCA
from avatar_sdk.transport.net.tls import client_context, tls_error, tls_failure

KEY = ConnectionKey("media.example", 443, True, True, None, None, None)


def _wrapped(inner: BaseException) -> BaseException:
    """What socketio raises: ``ConnectionError`` re-raised ``from None`` in the ``except``
    of engineio's, itself raised in the ``except`` of aiohttp's."""
    try:
        try:
            try:
                raise inner
            except BaseException:
                raise RuntimeError("engineio: Connection error") from None
        except RuntimeError:
            raise ConnectionError("socketio: Connection error") from None
    except ConnectionError as exc:
        return exc


def _verify_error(message: str) -> ssl.SSLCertVerificationError:
    err = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] {message}")
    err.verify_message = message
    return err


def test_a_certificate_error_is_found_behind_the_library_wrappers() -> None:
    cert = aiohttp.ClientConnectorCertificateError(KEY, _verify_error("self-signed certificate"))
    assert tls_failure(_wrapped(cert)) == "to media.example:443: self-signed certificate"
    error = tls_error(_wrapped(cert), "Socket.IO")
    assert error is not None and error.code is ErrorCode.TLS_FAILED
    assert "Socket.IO to media.example:443: self-signed certificate" in str(error)


def test_a_protocol_refusal_is_a_tls_failure() -> None:
    wrong = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    wrong.reason = "WRONG_VERSION_NUMBER"
    found = tls_failure(aiohttp.ClientSSLError(KEY, wrong))
    assert found == "to media.example:443: TLS handshake failed: wrong version number"


@pytest.mark.parametrize(
    "exc",
    [
        aiohttp.ClientSSLError(KEY, ssl.SSLEOFError(8, "EOF occurred in violation of protocol")),
        ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed"),
        ConnectionResetError(104, "reset"),
        aiohttp.ServerDisconnectedError(),
    ],
)
def test_a_connection_cut_mid_handshake_stays_a_connection_loss(exc: BaseException) -> None:
    """A flaky network must keep its retries: only verification and refusals are fatal."""
    assert tls_failure(_wrapped(exc)) is None


def test_tls_failed_is_fatal_and_says_what_to_do() -> None:
    entry = info(ErrorCode.TLS_FAILED)
    assert not entry.retryable and entry.category == "network"
    assert "ssl=" in entry.message and "ca_file=" in entry.message


def test_a_ca_file_is_trusted_besides_the_system_roots(tmp_path: Path) -> None:
    ca = TestCA()
    try:
        ctx = client_context(None, ca.ca_file, allow_insecure=False)
        assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
        subjects = [c["subject"] for c in ctx.get_ca_certs()]
        assert ((("commonName", "avatar-sdk test CA"),),) in subjects
    finally:
        ca.cleanup()
    assert client_context(None, None, allow_insecure=False) is None
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text("nothing here")
    with pytest.raises(AvatarError) as raised:
        client_context(None, bad, allow_insecure=False)
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert "not-a-ca.pem" in str(raised.value)
