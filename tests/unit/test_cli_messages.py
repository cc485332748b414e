"""The command line's one-line errors (``_cli/messages.py``): its flags, never the library's
keyword arguments."""

from __future__ import annotations

import pytest

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk._cli.messages import error_line
from avatar_sdk.urls import check_url


@pytest.mark.parametrize(
    ("what", "subject"),
    [
        ("url", "URL uses http://"),
        ("SessionSpec.url", "URL uses http://"),
        ("genie_url", "--genie-url uses http://"),
    ],
)
def test_an_insecure_url_names_the_flag(what: str, subject: str) -> None:
    scheme = "http"  # (ws:// is no genie URL at all: refused as invalid_argument)
    with pytest.raises(AvatarError) as caught:
        check_url(f"{scheme}://127.0.0.1:9", allow_insecure=False, what=what)
    line = error_line(caught.value)
    assert line.startswith("[insecure_transport] refused: ") and subject in line
    assert "pass --insecure" in line and "allow_insecure_transport" not in line


def test_any_other_insecure_refusal_names_the_flag_too() -> None:
    for detail in ("private media hosts need allow_insecure_transport=True", None):
        line = error_line(AvatarError(ErrorCode.INSECURE_TRANSPORT, detail))
        assert "--insecure" in line and "allow_insecure_transport" not in line, line


def test_attempts_and_hints() -> None:
    line = error_line(AvatarError(ErrorCode.UNREACHABLE, "refused"), attempts=3)
    assert line.startswith("[unreachable] ") and "after 3 attempts; check the URL" in line
    auth = error_line(AvatarError(ErrorCode.AUTH_FAILED, "invalid token"))
    assert auth.endswith("check the token (AVATAR_TOKEN or --token-file)")
    plain = error_line(AvatarError(ErrorCode.TIER_EXCEEDED))
    assert plain == str(AvatarError(ErrorCode.TIER_EXCEEDED))
    assert "--genie-url" in error_line(AvatarError(ErrorCode.INVALID_ARGUMENT, "genie_url is bad"))
