"""The one exception a wire parser may raise.

Parsers sit directly behind the socket, so anything they raise would otherwise crash
the event loop's dispatch; funnelling every failure into ``ProtocolError`` lets the
session log and drop a bad event without special cases.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["PREVIEW_LIMIT", "ProtocolError", "preview"]

#: Longest slice of a payload value allowed in an error message (payloads may carry secrets).
PREVIEW_LIMIT: Final = 80


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def preview(value: Any, limit: int = PREVIEW_LIMIT) -> str:
    """Short, safe description of a payload value for error details.

    Strings are truncated rather than echoed whole because a transcript or token may
    ride in the same field; other values are described by type only, so a large nested
    payload never ends up in a log line.
    """
    if isinstance(value, str):
        return repr(_cut(value, limit))
    if value is None or isinstance(value, bool | int | float):
        return _cut(repr(value), limit)
    return type(value).__name__


class ProtocolError(ValueError):
    """An inbound event that cannot be understood (wrong shape, missing required field)."""

    event: str
    detail: str

    def __init__(self, event: str, detail: str) -> None:
        # Event names come off the wire too, so both parts are bounded.
        self.event = event
        self.detail = _cut(detail, 4 * PREVIEW_LIMIT)
        # args mirror __init__ so the error survives pickling/copying (e.g. across processes).
        super().__init__(event, self.detail)

    def __str__(self) -> str:
        return f"{_cut(self.event, PREVIEW_LIMIT)}: {self.detail}"
