"""URL messages that say what to write instead, and one rule for ``ws://``.

``AvatarSession("localhost:8080", ...)`` was refused with "url must be
http(s)://host[:port] (got scheme 'localhost')": true for the parser, useless to the user,
who meant ``http://localhost:8080``. And ``ws://`` was accepted though the message named
http(s) only. The rule now: the conversation backend (a Socket.IO server) may be written
http(s):// or ws(s)://, and the messages say so; the genie and control URLs are HTTP APIs
and take http(s):// only. A URL is never echoed whole (it may carry a credential): a
suggestion is built from its host and port.
"""

from __future__ import annotations

import pytest

from avatar_sdk import AvatarError, AvatarSession, ErrorCode
from avatar_sdk.urls import check_url


@pytest.mark.parametrize(
    ("given", "suggested"),
    [
        ("localhost:8080", "http://localhost:8080"),
        ("127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("backend.example.com", "https://backend.example.com"),
        ("backend.example.com:8443/socket", "https://backend.example.com:8443"),
        ("//backend.example.com", "https://backend.example.com"),
    ],
)
def test_a_url_without_a_scheme_gets_a_suggestion(given: str, suggested: str) -> None:
    with pytest.raises(AvatarError) as refused:
        check_url(given, allow_insecure=True, what="url", kind="socket")
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    message = str(refused.value)
    assert f"did you mean {suggested}?" in message
    assert "got scheme" not in message


def test_the_session_says_it_too() -> None:
    with pytest.raises(AvatarError, match=r"did you mean http://localhost:8080\?"):
        AvatarSession("localhost:8080", "secret-token", media=False)


def test_a_credential_in_a_bad_url_is_never_echoed() -> None:
    with pytest.raises(AvatarError) as refused:
        check_url("user:hunter2@localhost:8080?token=s3cret", allow_insecure=True, what="url")
    message = str(refused.value)
    assert "hunter2" not in message and "s3cret" not in message
    assert "did you mean http://localhost:8080?" in message


def test_the_backend_takes_ws_and_says_so() -> None:
    for url in ("ws://127.0.0.1:1", "http://127.0.0.1:1"):
        assert check_url(url, allow_insecure=True, what="url", kind="socket") == url
    assert check_url("wss://h.example/", allow_insecure=False, what="url", kind="socket") == (
        "wss://h.example"
    )
    with pytest.raises(AvatarError, match=r"http\(s\):// or ws\(s\)://") as refused:
        check_url("ftp://h.example", allow_insecure=True, what="url", kind="socket")
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(AvatarError) as insecure:
        check_url("ws://h.example", allow_insecure=False, what="url", kind="socket")
    assert insecure.value.code is ErrorCode.INSECURE_TRANSPORT
    assert "allow_insecure_transport=True" in str(insecure.value)


@pytest.mark.parametrize("given", ["ws://h.example", "wss://h.example", "ftp://h.example"])
def test_an_http_api_takes_http_only(given: str) -> None:
    with pytest.raises(AvatarError) as refused:
        check_url(given, allow_insecure=True, what="genie_url")
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    message = str(refused.value)
    assert "genie_url must be http(s)://host[:port]" in message
    assert "ws(s)" not in message
    if given.startswith("ws"):
        secure = "https" if given.startswith("wss") else "http"
        assert f"did you mean {secure}://h.example?" in message


def test_a_session_refuses_a_websocket_genie_url() -> None:
    with pytest.raises(AvatarError) as refused:
        AvatarSession("https://h.example", "secret-token", genie_url="wss://h.example")
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
