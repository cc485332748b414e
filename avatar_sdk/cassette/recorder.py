"""CassetteRecorder: writes what a session says and hears to a cassette file.

It is an :class:`~avatar_sdk.observe.Observer`: the session adds it to its observers,
which its channels tell every event in and out, every socket open and close, every HTTP
exchange and media state change. Each record is built (and scrubbed) on the event loop in
the order things happened, and written by the journal's writer thread, line by line and
flushed: a process that dies leaves a readable prefix (see :func:`.format.load`). The
recorder is the file's one owner; :meth:`aclose` writes the ``end`` record and closes it.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import weakref
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from .._version import __version__
from ..clock import SYSTEM_CLOCK, Clock
from ..config import SessionConfig
from ..events.line_writer import LineWriter
from ..logs import sdk_logger
from ..observe import HttpExchange, Observer
from ..redact import scrub
from ..wire.names import Out
from .format import FORMAT_VERSION, HEADER_KIND, ContentRedactor, config_to_dict

log = sdk_logger(__name__)

#: Records waiting for the disk beyond this are dropped (counted in the ``end`` record).
MAX_PENDING: Final = 50_000
CLOSE_TIMEOUT: Final = 5.0
#: Inbound payload fields that carry the user's own words (the server's echo of a turn).
USER_TEXT_FIELDS: Final = ("userTranscription", "transcript", "userInput", "finalSegment")
#: What stands for content left out (a tool result's values).
REDACTED_CONTENT: Final = "<redacted>"
TOOL_RESPONSE_SUFFIX: Final = "/assistant/tool_response"
#: Outbound events whose ``text`` is the user's.
USER_TEXT_EVENTS: Final = frozenset({Out.TEXT_ENTERED, Out.DEBUG_TEXT_ENTERED})


class CassetteRecorder(Observer):
    """Records one session to ``path`` (created or truncated at once: a bad path fails
    here, in the constructor, with ``OSError``)."""

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock = SYSTEM_CLOCK,
        url: str = "",
        config: SessionConfig | None = None,
        media: bool = True,
        video: bool = True,
        thread_id: str | None = None,
        record_content: bool = False,
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self._start = clock.monotonic()
        self.record_content = record_content
        self._redactor = ContentRedactor()
        self._closed = False
        self.records = 0
        self.dropped = 0
        self._writer = LineWriter(self.path.open("w", encoding="utf-8"), "avatar-sdk-cassette")
        self._finalizer = weakref.finalize(self, self._writer.stop, 1.0)
        header = {
            "kind": HEADER_KIND,
            "version": FORMAT_VERSION,
            "sdk": __version__,
            "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            "record_content": record_content,
            "session": {
                "host": urlsplit(url).netloc if url else "",
                "media": media,
                "video": video,
                "thread_id": thread_id,
                "config": config_to_dict(config or SessionConfig()),
            },
        }
        self._writer.put([json.dumps(scrub(header), default=str) + "\n"])

    # -- records ------------------------------------------------------------------------------
    def _put(self, kind: str, data: dict[str, Any]) -> None:
        if self._closed or self._writer.failed:
            return
        if self._writer.pending() >= MAX_PENDING:
            self.dropped += 1
            return
        if not self.record_content:
            data = self._redactor.apply(data)
        entry = {"t": round(self._clock.monotonic() - self._start, 4), "kind": kind, **data}
        try:
            line = json.dumps(scrub(entry), default=repr)
        except (TypeError, ValueError) as exc:  # a payload JSON cannot carry: say so
            line = json.dumps({"t": entry["t"], "kind": kind, "unencodable": type(exc).__name__})
        self.records += 1
        self._writer.put([line + "\n"])

    def _user_text(self, text: Any) -> None:
        if not self.record_content and isinstance(text, str):
            self._redactor.register(text)

    def socket_opened(self, link: int, sid: str, recovered: bool) -> None:
        self._put("open", {"link": link, "sid": sid, "recovered": recovered})

    def socket_failed(self, link: int, code: str) -> None:
        self._put("refused", {"link": link, "code": code})

    def socket_closed(self, link: int, reason: str) -> None:
        self._put("drop", {"link": link, "reason": reason})

    def event_in(self, link: int, name: str, args: list[Any]) -> None:
        if not self.record_content:
            for arg in args:
                if isinstance(arg, dict):
                    for key in USER_TEXT_FIELDS:
                        self._user_text(arg.get(key))
        self._put("in", {"link": link, "name": name, "args": args})

    def event_out(self, link: int, name: str, payload: Any) -> None:
        if name in USER_TEXT_EVENTS and isinstance(payload, dict):
            self._user_text(payload.get("text"))
        self._put("out", {"link": link, "name": name, "payload": payload})

    def http_exchange(self, exchange: HttpExchange) -> None:
        request = exchange.request_body
        if not self.record_content and exchange.url.endswith(TOOL_RESPONSE_SUFFIX):
            request = _redact_tool_body(request)
        self._put(
            "http",
            {
                "service": exchange.service,
                "method": exchange.method,
                "url": exchange.url,
                "status": exchange.status,
                "request": request,
                "response": exchange.response_body,
                "outcome": exchange.outcome,
            },
        )

    def media_state(self, lane: str, state: str) -> None:
        self._put("media", {"lane": lane, "state": state})

    def media_sample(self, counts: dict[str, int]) -> None:
        self._put("media_sample", {"counts": dict(counts)})

    def session_call(self, name: str, args: dict[str, Any]) -> None:
        if name == "speak":
            self._user_text(args.get("text"))
        if name == "respond_to_tool" and not self.record_content:
            args = {**args, "result": _redact_values(args.get("result"))}
        self._put("call", {"name": name, "args": args})

    # -- close ----------------------------------------------------------------------------------
    def _end(self) -> None:
        if self._closed:
            return
        entry = {
            "t": round(self._clock.monotonic() - self._start, 4),
            "kind": "end",
            "records": self.records,
            "dropped": self.dropped,
        }
        self._closed = True
        if not self._writer.failed:
            self._writer.put([json.dumps(entry) + "\n"])

    async def aclose(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Write the ``end`` record and close the file (off the loop; bounded)."""
        self._end()
        if await asyncio.to_thread(self._writer.stop, timeout):
            self._finalizer.detach()
        else:
            log.warning("cassette: the disk did not take the last records within %.3gs", timeout)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """:meth:`aclose` for synchronous callers (blocks them)."""
        self._end()
        if self._writer.stop(timeout):
            self._finalizer.detach()


def _redact_values(value: Any) -> Any:
    """A tool result without its content: the same keys, each value ``<redacted>``."""
    if isinstance(value, dict):
        return dict.fromkeys(value, REDACTED_CONTENT)
    return {}


def _redact_tool_body(body: str | None) -> str | None:
    """A genie ``tool_response`` body with its ``response`` redacted (see above)."""
    if body is None:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return REDACTED_CONTENT
    if isinstance(data, dict) and "response" in data:
        data["response"] = _redact_values(data["response"])
    return json.dumps(data)


__all__ = ["CassetteRecorder"]
