"""The converse wire of :class:`~avatar_sdk.chat.session.ChatSession` (PROTOCOL.md §5.6): request
bodies, HTTP status classification and NDJSON framing. Pure: no I/O.

NDJSON lines: each line is one JSON object, either the brain delta itself (what the genie
sends and the staging server emits) or an envelope ``{"delta": "<json string>", "speechId"?}``
as the socket's ``agent_raw_text`` carries it. ``data:`` framing (SSE) is tolerated.

Line framing is :class:`LineSplitter` over aiohttp's ``iter_any()`` chunks, hand-written on
purpose: aiohttp's own line reader (``StreamReader.readline``/``readuntil``) cannot keep its
behaviour. Without a per-call bound (aiohttp before 2026 has none; we support ``>=3.9``) it
fails every line over the read buffer's high-water mark (128 KiB by default, far below
:data:`MAX_LINE_BYTES`), ending the turn. With one (``max_size``/``max_line_length``) it
raises ``LineTooLong`` having consumed an unreported part of the line, sometimes its newline
too, so reading cannot resume exactly at the next line: the following good line is lost, or
the long line's tail comes back as a line of its own (and a tail that happens to be JSON
becomes a segment). The splitter drops an over-long line whole while holding at most
``MAX_LINE_BYTES``, counts it (one ``protocol_error`` per turn) and resumes after its newline.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final

from ..errors import AvatarError, ErrorCode, Surface, code_for_status
from ..wire import BrainSegment, parse_delta
from ..wire.errors import ProtocolError, preview

#: Longest NDJSON line accepted. Delta content is clamped to 8000 characters anyway, so only a
#: broken or hostile server sends more; such a line is dropped, not buffered without end.
MAX_LINE_BYTES: Final = 1 << 20
#: Segments that prove nothing about the brain: a ``keepalive`` ping can repeat forever while
#: a backend call hangs, and must not hide that silence from ``brain_stalled``.
KEEPALIVE: Final = "keepalive"
_RESERVED_VAR_PREFIX: Final = "sys__"


# -- pure helpers ------------------------------------------------------------------------------
class LineSplitter:
    """Bytes in, complete lines out; a line longer than ``max_line`` bytes is dropped whole
    (``dropped`` counts them) instead of growing the buffer."""

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._skipping = False
        self.dropped = 0

    def feed(self, data: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while (nl := data.find(b"\n", start)) >= 0:
            piece = data[start:nl]
            if self._skipping:
                self._skipping = False
            elif len(self._buf) + len(piece) > self.max_line:
                self.dropped += 1
            else:
                self._buf += piece
                lines.append(bytes(self._buf))
            self._buf.clear()
            start = nl + 1
        rest = data[start:]
        if not self._skipping and rest:
            if len(self._buf) + len(rest) > self.max_line:
                self._buf.clear()
                self._skipping = True
                self.dropped += 1
            else:
                self._buf += rest
        return lines

    def flush(self) -> bytes | None:
        """The unterminated last line, if any (end of stream)."""
        tail = None if self._skipping or not self._buf else bytes(self._buf)
        self._buf.clear()
        self._skipping = False
        return tail


def parse_converse_line(line: bytes | str) -> BrainSegment | None:
    """One NDJSON line as a brain segment; None for a blank line or SSE framing.

    Raises :class:`~avatar_sdk.wire.ProtocolError` for a line that is not a JSON object.
    """
    text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
    text = text.strip()
    if not text or text.startswith(":"):
        return None
    if text.startswith("data:"):
        text = text[5:].strip()
        if not text or text == "[DONE]":
            return None
    elif text.startswith(("event:", "id:", "retry:")):
        return None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        raise ProtocolError("converse", f"line is not JSON: {preview(text)}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("converse", f"line is not an object: {preview(obj)}")
    speech_id = obj.get("speechId") if isinstance(obj.get("speechId"), str) else None
    delta = obj.get("delta")
    if "type" not in obj and isinstance(delta, str):
        return parse_delta(delta, speech_id)
    if "type" not in obj and isinstance(delta, dict):
        obj = delta
    return parse_delta(json.dumps(obj), speech_id)


def check_request_vars(request_vars: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A validated copy of ``request_vars``: string keys, scalar values (str, int, float,
    bool, None), none reserved (``sys__*``, ``secrets``). Raises ``AvatarError``."""
    if request_vars is None:
        return None
    if not isinstance(request_vars, Mapping):
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, "request_vars must be a mapping")
    checked: dict[str, Any] = {}
    for key, value in request_vars.items():
        if not isinstance(key, str) or not key:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "request_vars keys must be strings")
        if key.startswith(_RESERVED_VAR_PREFIX) or key.lower() == "secrets":
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"request_vars key {key!r} is reserved")
        scalar = value is None or isinstance(value, str | bool | int)
        if isinstance(value, float):
            scalar = math.isfinite(value)
        if not scalar:
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, f"request_vars[{key!r}] must be a finite scalar"
            )
        checked[key] = value
    return checked


def build_converse_body(
    text: str, *, thread_id: str | None, request_vars: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The JSON body of one converse turn."""
    body: dict[str, Any] = {"userMessage": text, "sse": False}
    if thread_id:
        body["threadId"] = thread_id
    if request_vars:
        body["request_vars"] = dict(request_vars)
    return body


def http_error(status: int) -> AvatarError:
    """The classified error of a non-2xx converse answer (the shared status table:
    :func:`avatar_sdk.errors.code_for_status`)."""
    return AvatarError(code_for_status(status, Surface.CONVERSE), f"converse HTTP {status}")


def limit(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{what} must be an int >= 1 or None")
    return value


# -- results -----------------------------------------------------------------------------------
