"""Validation of the backend URLs a session is given."""

from __future__ import annotations

from urllib.parse import urlsplit

from .errors import AvatarError, ErrorCode

_SECURE = {"https", "wss"}
_INSECURE = {"http", "ws"}


def check_url(url: object, *, allow_insecure: bool, what: str) -> str:
    """The URL without a trailing slash, or ``AvatarError``.

    Plain http/ws is refused unless ``allow_insecure`` is set: a token sent in clear text is a
    token given away, and a production deployment never needs it.
    """
    if not isinstance(url, str) or not url.strip():
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{what} must be a non-empty URL string")
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # raises ValueError on a malformed port
    except ValueError:
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{what} is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in _SECURE | _INSECURE or not parts.hostname:
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT,
            f"{what} must be http(s)://host[:port] (got scheme {scheme!r})",
        )
    if scheme in _INSECURE and not allow_insecure:
        raise AvatarError(
            ErrorCode.INSECURE_TRANSPORT,
            f"{what} uses {scheme}://; pass allow_insecure_transport=True",
        )
    del port
    return url.strip().rstrip("/")
