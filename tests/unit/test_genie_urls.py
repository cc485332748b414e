"""Where the genie host is found when the caller gives none (``avatar_sdk.transport.net.genie``):
a known conversation host, or the backend's own join answer, never a third host."""

from __future__ import annotations

import pytest

from avatar_sdk.transport.net.genie import advertised_genie_url, known_genie_url

US = "https://conversation.avatar.us.kaltura.ai"


def test_the_reference_clients_pairing_is_known() -> None:
    assert known_genie_url(US) == "https://genie.nvp1.ovp.kaltura.com"
    assert known_genie_url("https://conversation.example.com") is None
    assert known_genie_url("http://127.0.0.1:8765") is None


@pytest.mark.parametrize(
    ("url", "advertised", "found"),
    [
        ("http://127.0.0.1:8765", "/genie", "http://127.0.0.1:8765/genie"),
        ("http://127.0.0.1:8765/", "/genie/", "http://127.0.0.1:8765/genie"),
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765/genie", "http://127.0.0.1:8765/genie"),
        ("https://cm.example", "https://cm.example/api/genie", "https://cm.example/api/genie"),
        (US, "https://genie.nvp1.ovp.kaltura.com", "https://genie.nvp1.ovp.kaltura.com"),
        # another host, port or scheme: the token would go where nobody named it
        ("http://127.0.0.1:8765", "http://127.0.0.1:9999/genie", None),
        ("https://cm.example", "https://evil.example/genie", None),
        ("https://cm.example", "//evil.example/genie", None),
        ("https://cm.example", "http://cm.example/genie", None),
        (US, "https://genie.frp2.ovp.kaltura.com", None),
        # absent or not a string
        ("https://cm.example", None, None),
        ("https://cm.example", 42, None),
        ("https://cm.example", "   ", None),
        ("https://cm.example", "/" + "x" * 5000, None),
        ("https://cm.example", "http://[::1", None),
    ],
)
def test_an_advertised_genie_url_is_taken_only_from_the_backend_itself(
    url: str, advertised: object, found: str | None
) -> None:
    assert advertised_genie_url(url, {"genieUrl": advertised}) == found


def test_no_configuration_no_genie() -> None:
    assert advertised_genie_url("https://cm.example", None) is None
    assert advertised_genie_url("https://cm.example", {}) is None
    assert advertised_genie_url("https://cm.example", ["genieUrl"]) is None
