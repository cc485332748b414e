"""Validation of the backend URLs a session is given.

Two kinds: the conversation backend is a Socket.IO server, which python-socketio reaches
from ``http(s)://`` or ``ws(s)://`` alike (``kind="socket"``); the genie and control URLs
are plain HTTP APIs (``kind="http"``, the default), where ``ws://`` would only fail later.
A refused URL is never echoed whole (it may carry a credential in its user info or query):
the suggestion a message makes is built from its host and port alone.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final, Literal
from urllib.parse import SplitResult, urlsplit

from .errors import AvatarError, ErrorCode

__all__ = ["UrlKind", "check_url"]

UrlKind = Literal["socket", "http"]

#: What a host name or IP literal may look like, for a suggestion only (not validation).
_HOST_RE: Final = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?|[0-9a-f:.]+")
_SECURE: Final = {"https", "wss"}
_INSECURE: Final = {"http", "ws"}
_SCHEMES: Final[dict[UrlKind, frozenset[str]]] = {
    "socket": frozenset({"https", "http", "wss", "ws"}),
    "http": frozenset({"https", "http"}),
}
_SHAPE: Final[dict[UrlKind, str]] = {
    "socket": "http(s):// or ws(s)://host[:port]",
    "http": "http(s)://host[:port]",
}


def check_url(url: object, *, allow_insecure: bool, what: str, kind: UrlKind = "http") -> str:
    """The URL without a trailing slash, or ``AvatarError``.

    ``kind="socket"`` (the conversation backend) takes http, https, ws and wss;
    ``kind="http"`` (genie, control) http and https. A URL without a scheme
    (``localhost:8080``) is refused with what to write instead (``did you mean
    http://localhost:8080?``: http for a loopback host, https otherwise).

    Plain http/ws is refused unless ``allow_insecure`` is set: a token sent in clear text is
    a token given away, and a production deployment never needs it.
    """
    if not isinstance(url, str) or not url.strip():
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{what} must be a non-empty URL string")
    text = url.strip()
    shape = _SHAPE[kind]
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError on a malformed port
    except ValueError:
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"{what} is not a valid URL (write {shape})"
        ) from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES[kind] or not parts.hostname:
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, _refusal(text, parts, what, kind))
    if scheme in _INSECURE and not allow_insecure:
        raise AvatarError(
            ErrorCode.INSECURE_TRANSPORT,
            f"{what} uses {scheme}://; pass allow_insecure_transport=True",
        )
    del port
    return text.rstrip("/")


def _refusal(text: str, parts: SplitResult, what: str, kind: UrlKind) -> str:
    shape = _SHAPE[kind]
    scheme = parts.scheme.lower()
    if scheme in _SCHEMES["socket"] and parts.hostname:
        # A WebSocket URL where an HTTP API is expected: the same host over http(s).
        secure = "https" if scheme in _SECURE else "http"
        hint = _suggest(parts, secure, parts.port)
        return f"{what} must be {shape}: it is an HTTP API, not a WebSocket{hint}"
    if scheme and parts.netloc:  # "ftp://host": a host, and the wrong scheme for it
        return f"{what} must be {shape} (got scheme {scheme!r})"
    if scheme in _SCHEMES["socket"]:  # "https://" or "https:/path": no host
        return f"{what} must be {shape} (it has no host)"
    # No scheme at all: "localhost:8080" parses as scheme 'localhost', "example.com" as a
    # path. Read it again as the host it almost certainly is.
    guess = urlsplit(text if text.startswith("//") else "//" + text)
    try:
        port = guess.port
    except ValueError:
        port = None
        guess = guess._replace(netloc="")  # no sound host:port to suggest
    if not guess.hostname or not _HOST_RE.fullmatch(guess.hostname):
        return f"{what} must be {shape} (it has no scheme)"
    hint = _suggest(guess, "http" if _loopback(guess.hostname) else "https", port)
    return f"{what} must be {shape}, with a scheme{hint}"


def _suggest(parts: SplitResult, scheme: str, port: int | None) -> str:
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    shown = f":{port}" if port is not None else ""
    return f"; did you mean {scheme}://{host}{shown}?"


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
