"""A websocket upgrade answered by something other than a Socket.IO server is told with its
HTTP status and the path the socket tried (issue 33, item 2), and classified by the one HTTP
status table."""

from __future__ import annotations

import aiohttp
import pytest
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from avatar_sdk.errors import ErrorCode
from avatar_sdk.transport.net.upgrade import upgrade_refused

_URL = URL("ws://127.0.0.1:8777/socket.io/?partnerId=&stickyId=abc&EIO=4&transport=websocket&t=1")


def _refusal(status: int) -> BaseException:
    info = aiohttp.RequestInfo(_URL, "GET", CIMultiDictProxy(CIMultiDict()), _URL)
    handshake = aiohttp.WSServerHandshakeError(
        info, (), status=status, message="Invalid response status"
    )
    try:
        try:
            raise handshake
        except aiohttp.WSServerHandshakeError:
            raise ConnectionError("Connection error") from None  # engineio's wrapping
    except ConnectionError as wrapped:
        wrapped.__context__ = handshake
        return wrapped


@pytest.mark.parametrize(
    ("status", "code", "said"),
    [
        (404, ErrorCode.BAD_REQUEST, "answered 404 Not Found: not a Socket.IO server"),
        (200, ErrorCode.BAD_REQUEST, "answered 200 OK: not a Socket.IO server"),
        (401, ErrorCode.AUTH_FAILED, "answered 401 Unauthorized"),
        (502, ErrorCode.SERVER_ERROR, "answered 502 Bad Gateway"),
    ],
)
def test_the_status_and_the_path_are_named(status: int, code: ErrorCode, said: str) -> None:
    error = upgrade_refused(_refusal(status), "Socket.IO")
    assert error is not None and error.code is code
    assert error.detail is not None
    assert "GET /socket.io/?EIO=4&transport=websocket " in error.detail
    assert said in error.detail
    assert "stickyId" not in error.detail  # the path and protocol, not every query field


def test_other_errors_are_not_refusals() -> None:
    assert upgrade_refused(ConnectionResetError(), "Socket.IO") is None
