"""ControlChannel: the Socket.IO control plane, one instance per server session attempt.

It reports facts (an inbound event, a frame it refused, a disconnect with its reason, a
recovered reconnect) and never decides what happens next: python-socketio's own reconnection
is off, and reconnects happen only when the session machine calls :meth:`reconnect`.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp
import socketio

from ...besteffort import best_effort
from ...config import MAX_MESSAGE_SIZE
from ...errors import AvatarError, ErrorCode
from ...logs import sdk_logger
from ...observe import Observer, observers_of
from ...redact import register_secret
from ...wire.disconnect import is_recoverable
from ..net.tls import connector, tls_error, unreachable_error
from ..net.upgrade import upgrade_refused
from .csr import RecoveringAsyncClient
from .frame_guard import ProtocolErrorSink, guarded_websocket

log = sdk_logger(__name__)

EventSink = Callable[[str, list[Any]], None]
DisconnectSink = Callable[["ControlChannel", str], None]


class WireCounters(Protocol):
    """Where a channel counts the events it received and sent (a session's stats)."""

    events_in: int
    events_out: int


@dataclass(slots=True)
class _ChannelCounters:
    """A channel's own counters, when no session passes its stats."""

    events_in: int = 0
    events_out: int = 0


@dataclass(frozen=True, slots=True)
class ConnectOutcome:
    """Result of opening or reopening the socket."""

    sid: str
    recovered: bool
    replayed: int
    duration: float


class ControlChannel:
    """One Socket.IO client connection (and its in-place recoveries) to the backend."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        sticky_id: str,
        partner_id: str | None,
        on_event: EventSink,
        on_disconnect: DisconnectSink,
        on_protocol_error: ProtocolErrorSink,
        max_message_size: int = MAX_MESSAGE_SIZE,
        level: str = "published",
        debug_mode: bool = True,
        counters: WireCounters | None = None,
        ssl_context: ssl.SSLContext | None = None,
        now: Callable[[], float],
        observer: Observer | None = None,
        link: int = 0,
    ) -> None:
        """``on_protocol_error(event, detail, name_only)``: a frame the socket refused (see
        :data:`~avatar_sdk.transport.socketio.csr.ProtocolErrorSink`). ``max_message_size``: bytes;
        a bigger message is refused by the websocket and ends the transport. ``now``: the
        session clock's monotonic reader (its socket watchdog compares ``last_activity``
        with it). ``observer``: told every event in and out, every open, refusal and close
        (``avatar_sdk.observe``), as link number ``link``."""
        register_secret(token)
        #: The session's clock: ``last_activity`` is on the same time line as its watchdog.
        self._now = now
        #: How the websocket verifies TLS (None: the system CAs).
        self._ssl = ssl_context
        self._base_url = url.rstrip("/")
        self.__token = token
        self._query = {
            "partnerId": partner_id or "",
            "billed_client": "",
            "stickyId": sticky_id,
            "level": level,
            "debugMode": "true" if debug_mode else "false",
        }
        self._on_event = on_event
        self._on_disconnect = on_disconnect
        self._on_protocol_error = on_protocol_error
        self._max_message_size = max_message_size
        self._http: aiohttp.ClientSession | None = None
        self._client: RecoveringAsyncClient | None = None
        self._emit_lock = asyncio.Lock()
        self._closed = False
        self.connect_count = 0
        #: ``events_in`` / ``events_out`` on the wire; a session passes one object to all of
        #: its channels so its totals span reconnects without being counted twice.
        self.counters: WireCounters = counters if counters is not None else _ChannelCounters()
        self.last_activity = self._now()
        self._observer = observers_of(observer)
        self._link = link

    def __repr__(self) -> str:
        return f"<ControlChannel {self._base_url} sid={self.sid!r} connected={self.connected}>"

    # -- properties -------------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._client is not None and bool(self._client.connected)

    @property
    def sid(self) -> str | None:
        if self._client is None or not self._client.connected:
            return None
        sid = self._client.get_sid("/")
        return sid if isinstance(sid, str) else None

    @property
    def can_recover(self) -> bool:
        """True when a reconnect may restore the server session (a pid and offset are held)."""
        return (
            self._client is not None
            and self._client.pid is not None
            and self._client.offset is not None
        )

    def _url(self) -> str:
        parts = urlsplit(self._base_url)
        return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(self._query), ""))

    def _auth(self) -> dict[str, Any]:
        return {"token": self.__token}

    # -- lifecycle --------------------------------------------------------------------------
    async def open(self, timeout: float) -> ConnectOutcome:
        """Open the socket (first connect). Raises ``AvatarError`` on failure."""
        if self._closed:
            raise AvatarError(ErrorCode.CLOSED, "control channel closed")
        if self._http is None:
            self._http = aiohttp.ClientSession(
                connector=connector(self._ssl),
                ws_response_class=guarded_websocket(self._frame_refused),
            )
        client = RecoveringAsyncClient(
            http_session=self._http,
            on_protocol_error=self._handle_protocol_error,
            max_message_size=self._max_message_size,
            now=self._now,
        )
        client.on("connect", self._handle_connect)
        client.on("*", self._handle_event)
        client.on("disconnect", self._handle_disconnect)
        self._client = client
        return await self._connect(timeout)

    async def reconnect(self, timeout: float) -> ConnectOutcome:
        """Reconnect on the same client, offering connection-state recovery."""
        if self._client is None or self._closed:
            raise AvatarError(ErrorCode.CLOSED, "control channel closed")
        if self._client.connected:
            with best_effort("abort before reconnect", log):
                await self._client.abort()
        return await self._connect(timeout)

    async def _connect(self, timeout: float) -> ConnectOutcome:
        assert self._client is not None
        client = self._client
        started = self._now()
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        try:
            async with asyncio.timeout(timeout):
                await client.connect(
                    self._url(),
                    auth=self._auth,
                    transports=["websocket"],
                    socketio_path="socket.io",
                    wait_timeout=max(timeout, 0.05),
                )
        except TimeoutError:
            await self._drop_quietly()
            timed_out = AvatarError(ErrorCode.CONNECT_TIMEOUT, "socket open timed out")
            raise self._failed(timed_out) from None
        except socketio.exceptions.ConnectionError as exc:
            await self._drop_quietly()
            if client.refusal is not None:
                refused = AvatarError(ErrorCode.AUTH_FAILED, _safe_reason(client.refusal))
                raise self._failed(refused) from None
            # engineio wraps the aiohttp error it met: the cause hangs on __context__.
            raise self._failed(self._classify(exc)) from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            await self._drop_quietly()
            raise self._failed(self._classify(exc)) from None
        if task is not None and task.cancelling() > cancels:
            # Cancelled as the CONNECT reply arrived: python-socketio waits for it with
            # asyncio.wait_for, which on Python 3.11 returns the reply and swallows the
            # cancellation (CPython gh-86296). The cancellation is restored: a caller that
            # went on would use the socket after close() (a socket tier's probe and
            # re-assertion, a cold attempt's join). The socket is left as a cancel landing
            # a moment earlier leaves it, to the channel's close (graceful: a server
            # session released at once, not kept for recovery as an abort would).
            raise asyncio.CancelledError
        self.connect_count += 1
        self.last_activity = self._now()
        return ConnectOutcome(
            sid=self.sid or "",
            recovered=bool(client.recovered),
            replayed=client.replayed,
            duration=self._now() - started,
        )

    def _handle_connect(self) -> None:
        """The server's CONNECT reply, handled before any event the server sent after it:
        the observers hear of the open here, not when ``connect()`` returns. Since Python
        3.12 (``asyncio.wait_for`` no longer wraps the awaitable in a task, gh-96764)
        engine.io handles the messages of one read without a yield, so an event written
        with the CONNECT reply (``onServerConnected``) used to be told first: a cassette
        said ``in`` before ``open`` and its replay never sent that event (issue 33)."""
        client = self._client
        if client is None:
            return
        sid = client.get_sid("/")
        recovered = bool(client.recovered)
        self._observer.socket_opened(self._link, sid if isinstance(sid, str) else "", recovered)

    def _failed(self, error: AvatarError) -> AvatarError:
        self._observer.socket_failed(self._link, str(error.code))
        return error

    def _classify(self, exc: BaseException) -> AvatarError:
        """Why the socket did not open: TLS, an unreachable host, an HTTP answer that is not
        a websocket upgrade (some other server), or a lost connection."""
        return (
            tls_error(exc, "Socket.IO")
            or unreachable_error(exc, "Socket.IO")
            or upgrade_refused(exc, "Socket.IO")
            or AvatarError(ErrorCode.TRANSPORT_CLOSED, type(exc).__name__)
        )

    async def _drop_quietly(self) -> None:
        if self._client is not None:
            with best_effort("abort after a failed connect", log):
                await self._client.abort()

    async def emit(self, event: str, payload: Any) -> None:
        """Send one event. Raises ``AvatarError(TRANSPORT_CLOSED)`` when not connected."""
        client = self._client
        if client is None or not client.connected:
            raise AvatarError(ErrorCode.TRANSPORT_CLOSED, f"cannot send {event}: not connected")
        async with self._emit_lock:
            if self._observer:  # before the write: it precedes its answer
                self._observer.event_out(self._link, event, payload)
            try:
                await client.emit(event, payload)
            except (socketio.exceptions.SocketIOError, OSError) as exc:
                raise AvatarError(ErrorCode.TRANSPORT_CLOSED, f"send {event} failed") from exc
        self.counters.events_out += 1

    def local_address(self) -> str | None:
        """The local IP address the websocket is bound to (None: not known, e.g. HTTP
        long-polling, or no connection)."""
        client = self._client
        eio = getattr(client, "eio", None)
        ws = getattr(eio, "ws", None)
        if ws is None:
            return None
        try:
            sockname = ws.get_extra_info("sockname")
        except Exception as exc:  # a closed transport: not known
            log.debug("no websocket address (%s)", type(exc).__name__)
            return None
        if isinstance(sockname, tuple) and sockname and isinstance(sockname[0], str):
            return sockname[0]
        return None

    async def drop(self, reason: str = "ping timeout") -> None:
        """Kill a transport judged dead (a probe went unanswered); reported with ``reason``."""
        if self._client is not None:
            with best_effort("abort of a dead transport", log):
                await self._client.abort(reason)

    async def close(self, timeout: float) -> None:
        """Disconnect gracefully (bounded) and release everything this channel owns."""
        if self._closed:
            return
        self._closed = True
        client = self._client
        if client is not None and client.connected:
            self._observer.socket_closed(self._link, "io client disconnect")
        if client is not None:
            try:
                async with asyncio.timeout(timeout + 0.1):
                    await client.close_gracefully(timeout)
            except (TimeoutError, Exception):
                await self._drop_quietly()
        if self._http is not None:
            with best_effort("http session close", log):
                await self._http.close()
            self._http = None

    # -- inbound ----------------------------------------------------------------------------
    async def _handle_event(self, event: str, *args: Any) -> None:
        self.counters.events_in += 1
        self.last_activity = self._now()
        if self._observer:
            self._observer.event_in(self._link, event, list(args))
        self._on_event(event, list(args))

    def _frame_refused(self, event: str, detail: str) -> None:
        """A text frame Engine.IO could not decode (skipped by the websocket)."""
        self._handle_protocol_error(event, detail, False)

    def _handle_protocol_error(self, event: str, detail: str, name_only: bool) -> None:
        if self._closed:
            return
        self.last_activity = self._now()
        self._on_protocol_error(event, detail, name_only)

    async def _handle_disconnect(self, *_: Any) -> None:
        client = self._client
        reason = (client.disconnect_reason if client is not None else None) or "transport close"
        if self._closed:
            return
        self._observer.socket_closed(self._link, reason)
        self._on_disconnect(self, reason)


def _safe_reason(data: Any) -> str:
    """A short, token-free description of a CONNECT refusal."""
    if isinstance(data, dict):
        data = data.get("message", "refused")
    return str(data)[:120]


__all__ = ["ConnectOutcome", "ControlChannel", "is_recoverable"]
