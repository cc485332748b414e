"""A websocket upgrade the server refused, told as what it is (issue 33, item 2).

A URL that points at some other HTTP server (a static file server, a web app, a proxy with no
route) answers the Socket.IO handshake ``GET /socket.io/?EIO=4&transport=websocket`` with a
plain HTTP status instead of ``101 Switching Protocols``. engine.io reports that as a bare
``ConnectionError``; the aiohttp error under it holds the status and the URL. Pure: reads an
exception chain, classified by the one HTTP status table
(:func:`~avatar_sdk.errors.code_for_status`).
"""

from __future__ import annotations

from http import HTTPStatus

import aiohttp

from ...errors import NOT_SOCKETIO, AvatarError, ErrorCode, Surface, code_for_status

#: The query fields that say which protocol the upgrade asked for (the rest is the SDK's own).
_PROTOCOL_FIELDS = ("EIO", "transport")


def _phrase(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def upgrade_refused(exc: BaseException, what: str) -> AvatarError | None:
    """The error of a refused websocket upgrade in ``exc``'s chain (None: not one): the
    method, the path and protocol fields tried, the status answered, and what it means."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, aiohttp.WSServerHandshakeError):
            return _refusal(current, what)
        current = current.__cause__ or current.__context__
    return None


def _refusal(error: aiohttp.WSServerHandshakeError, what: str) -> AvatarError:
    url = error.request_info.url
    fields = "&".join(f"{k}={url.query[k]}" for k in _PROTOCOL_FIELDS if k in url.query)
    tried = f"{error.request_info.method} {url.path}" + (f"?{fields}" if fields else "")
    status = error.status
    code = code_for_status(status, Surface.SOCKET)
    if code is ErrorCode.BAD_REQUEST:
        meaning = f": {NOT_SOCKETIO}"
    elif code is ErrorCode.SERVER_ERROR:
        meaning = ": the server (or a proxy before it) failed"
    else:
        meaning = ""
    return AvatarError(code, f"{what}: {tried} answered {_phrase(status)}{meaning}")
