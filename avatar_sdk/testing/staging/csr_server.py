"""Server side of Socket.IO connection-state recovery for python-socketio's ``AsyncServer``.

Mirrors the Node ``socket.io`` 4.x behaviour (``connectionStateRecovery``) that the
production backend runs, so the SDK's recovery is exercised against a real server over a
real socket:

* the CONNECT reply carries ``{"sid", "pid"}``;
* every EVENT emitted to one client without an ack gets a trailing offset argument and is
  kept in a bounded per-session buffer;
* when the transport drops for a recoverable reason, the session (sid, buffer) is kept for
  the recovery window; a CONNECT carrying its ``pid`` and an ``offset`` within the window
  restores the same sid, replays every later event in order, then answers CONNECT with the
  same pid. Anything else (unknown pid, expired window, refused) is a fresh session.

Only namespace ``/`` is recoverable, which is all the avatar protocol uses.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import socketio
from socketio import packet as sio_packet

from ...logs import sdk_logger, warnings_only
from .silence import SilencedConnection

log = sdk_logger(__name__)

NS = "/"
_RECOVERABLE = frozenset(
    {"transport close", "transport error", "ping timeout", "server disconnect"}
)


@dataclass
class CsrSession:
    """What the server keeps per client session for recovery."""

    pid: str
    sid: str
    eio_sid: str | None
    buffer: deque[tuple[int, str, list[Any]]] = field(default_factory=lambda: deque(maxlen=10_000))
    connected: bool = True
    refuse_recovery: bool = False
    expiry: asyncio.TimerHandle | None = None
    disconnected_at: float | None = None
    recoveries: int = 0


class _RecoveringManager(socketio.AsyncManager):  # type: ignore[misc]
    """Lets a recovered connection keep its previous sid."""

    forced_sid: str | None = None

    async def pre_connect(self, eio_sid: str, namespace: str) -> Any:
        sid, self.forced_sid = self.forced_sid, None
        if sid is None:
            return await super().pre_connect(eio_sid, namespace)
        self.basic_enter_room(sid, namespace, None, eio_sid=eio_sid)
        self.basic_enter_room(sid, namespace, sid, eio_sid=eio_sid)
        self.pending_connect.setdefault(namespace, []).append(sid)
        return sid


class RecoveringAsyncServer(socketio.AsyncServer):  # type: ignore[misc]
    """``socketio.AsyncServer`` with connection-state recovery on namespace ``/``.

    ``recovered_handler(sid, replayed)`` runs after a session is restored;
    ``expired_handler(sid)`` runs when a dropped session's window runs out.
    """

    def __init__(self, *, recovery_window: float = 20.0, **kwargs: Any) -> None:
        kwargs.setdefault("client_manager", _RecoveringManager())
        kwargs.setdefault("async_mode", "aiohttp")
        # Not python-socketio's default (False): that configures the global loggers.
        kwargs.setdefault("logger", warnings_only("socketio.server"))
        kwargs.setdefault("engineio_logger", warnings_only("engineio.server"))
        super().__init__(**kwargs)
        self.recovery_window = recovery_window
        self.recovery_enabled = True
        self.sessions_by_pid: dict[str, CsrSession] = {}
        self.sessions_by_sid: dict[str, CsrSession] = {}
        self._offsets = itertools.count(1)
        self.recovered_handler: Callable[[str, int], Any] | None = None
        self.expired_handler: Callable[[str], Any] | None = None
        self.recoveries = 0
        self.refused_recoveries = 0
        self._silenced: list[SilencedConnection] = []
        self._silence_timers: set[asyncio.Task[None]] = set()

    # -- connect ----------------------------------------------------------------------------
    async def _handle_connect(self, eio_sid: str, namespace: str | None, data: Any) -> None:
        ns = namespace or NS
        if ns != NS:
            await super()._handle_connect(eio_sid, namespace, data)
            return
        session = self._recoverable_session(data)
        if session is not None:
            await self._restore(eio_sid, session, str(data["offset"]))
            return
        if isinstance(data, dict) and "pid" in data:
            self.refused_recoveries += 1
            data = {k: v for k, v in data.items() if k not in ("pid", "offset")}
        sid = await self.manager.pre_connect(eio_sid, ns)
        if sid is None:
            await self._send_packet(
                eio_sid,
                self.packet_class(sio_packet.CONNECT_ERROR, data="Unable to connect", namespace=ns),
            )
            return
        try:
            ok = await self._trigger_event("connect", ns, sid, self.environ[eio_sid], data or None)
            reason: Any = {"message": "Connection rejected by server"}
        except socketio.exceptions.ConnectionRefusedError as exc:
            ok, reason = False, exc.error_args
        except ConnectionRefusedError:
            ok, reason = False, {"message": "Connection refused by server"}
        if ok is False:
            await self._send_packet(
                eio_sid, self.packet_class(sio_packet.CONNECT_ERROR, data=reason, namespace=ns)
            )
            await self.manager.disconnect(sid, ns, ignore_queue=True)
            return
        pid = self.eio.generate_id()
        session = CsrSession(pid=pid, sid=sid, eio_sid=eio_sid)
        self.sessions_by_pid[pid] = session
        self.sessions_by_sid[sid] = session
        await self._send_packet(
            eio_sid, self.packet_class(sio_packet.CONNECT, {"sid": sid, "pid": pid}, namespace=ns)
        )
        await self.manager.connect(sid, ns)
        await self._trigger_event("connected", ns, sid)

    def _recoverable_session(self, data: Any) -> CsrSession | None:
        if not (self.recovery_enabled and isinstance(data, dict)):
            return None
        pid, offset = data.get("pid"), data.get("offset")
        if not isinstance(pid, str) or not isinstance(offset, str):
            return None
        session = self.sessions_by_pid.get(pid)
        if session is None or session.connected or session.refuse_recovery:
            return None
        return session

    async def _restore(self, eio_sid: str, session: CsrSession, offset: str) -> None:
        if session.expiry is not None:
            session.expiry.cancel()
            session.expiry = None
        try:
            last = int(offset)
        except ValueError:
            last = 0
        missed = [item for item in session.buffer if item[0] > last]
        self.manager.forced_sid = session.sid
        sid = await self.manager.pre_connect(eio_sid, NS)
        session.eio_sid = eio_sid
        session.connected = True
        session.disconnected_at = None
        session.recoveries += 1
        self.recoveries += 1
        # Missed events first, then the CONNECT reply: exactly what Node socket.io writes.
        for off, event, args in missed:
            await self._send_packet(
                eio_sid,
                self.packet_class(sio_packet.EVENT, namespace=NS, data=[event, *args, str(off)]),
            )
        await self._send_packet(
            eio_sid,
            self.packet_class(sio_packet.CONNECT, {"sid": sid, "pid": session.pid}, namespace=NS),
        )
        await self.manager.connect(sid, NS)
        if self.recovered_handler is not None:
            result = self.recovered_handler(sid, len(missed))
            if asyncio.iscoroutine(result):
                await result

    # -- emit -------------------------------------------------------------------------------
    async def emit_recoverable(self, sid: str, event: str, *args: Any) -> bool:
        """Emit with an offset to one client; buffered while its transport is down.

        Returns False when the session is gone (nothing will ever deliver it).
        """
        session = self.sessions_by_sid.get(sid)
        if session is None:
            return False
        offset = next(self._offsets)
        session.buffer.append((offset, event, list(args)))
        if session.connected and session.eio_sid is not None:
            await self._send_packet(
                session.eio_sid,
                self.packet_class(sio_packet.EVENT, namespace=NS, data=[event, *args, str(offset)]),
            )
        return True

    async def send_raw_args(self, sid: str, event: str, *args: Any) -> None:
        """Emit without an offset (a malformed or volatile event, not kept for recovery)."""
        await self.emit(event, args if len(args) != 1 else args[0], to=sid)

    # -- disconnect -------------------------------------------------------------------------
    async def disconnect(
        self, sid: str, namespace: str | None = None, ignore_queue: bool = False
    ) -> None:
        """A server-initiated Socket.IO disconnect: never recoverable."""
        if (namespace or NS) == NS:
            self._forget(sid)
        await super().disconnect(sid, namespace=namespace, ignore_queue=ignore_queue)

    async def _handle_disconnect(
        self, eio_sid: str, namespace: str | None, reason: Any = None
    ) -> None:
        ns = namespace or NS
        sid = self.manager.sid_from_eio_sid(eio_sid, ns)
        session = self.sessions_by_sid.get(sid) if sid is not None else None
        if session is not None and session.eio_sid == eio_sid:
            if (
                reason in _RECOVERABLE
                and self.recovery_enabled
                and not session.refuse_recovery
                and self.recovery_window > 0
            ):
                session.connected = False
                session.eio_sid = None
                session.disconnected_at = time.monotonic()
                loop = asyncio.get_running_loop()
                session.expiry = loop.call_later(self.recovery_window, self._expire, session.pid)
            else:
                self._forget(session.sid)
        await super()._handle_disconnect(eio_sid, namespace, reason)

    def is_pending_recovery(self, sid: str) -> bool:
        """True while a dropped session can still be restored."""
        session = self.sessions_by_sid.get(sid)
        return session is not None and not session.connected

    def refuse_recovery(self, sid: str) -> None:
        """Make the next drop of ``sid`` unrecoverable (the pid will not be honoured)."""
        session = self.sessions_by_sid.get(sid)
        if session is not None:
            session.refuse_recovery = True

    def _expire(self, pid: str) -> None:
        session = self.sessions_by_pid.get(pid)
        if session is None or session.connected:
            return
        self._forget(session.sid)
        if self.expired_handler is not None:
            result = self.expired_handler(session.sid)
            if asyncio.iscoroutine(result):
                task = asyncio.ensure_future(result)
                task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    def _forget(self, sid: str) -> None:
        session = self.sessions_by_sid.pop(sid, None)
        if session is None:
            return
        self.sessions_by_pid.pop(session.pid, None)
        if session.expiry is not None:
            session.expiry.cancel()

    async def drop_transport(self, sid: str, *, recoverable: bool = True) -> bool:
        """Kill the client's transport abruptly (no Socket.IO or Engine.IO goodbye)."""
        session = self.sessions_by_sid.get(sid)
        eio_sid = session.eio_sid if session is not None else self.manager.eio_sid_from_sid(sid, NS)
        if eio_sid is None:
            return False
        if session is not None and not recoverable:
            session.refuse_recovery = True
        socket = self.eio.sockets.get(eio_sid)
        if socket is None:
            return False
        await socket.close(wait=False, abort=True, reason="transport close")
        await socket.queue.put(None)  # wakes the websocket writer, which closes the websocket
        return True

    def blackhole(self, sid: str, server_timeout: float | None = None) -> bool:
        """Make the client's connection silently dead, like a peer that vanished (a dead NAT
        mapping, a lost Wi-Fi link): nothing is read, nothing is written (no ping, no close
        frame), and the TCP connection stays open with no FIN, until :meth:`release_blackholes`.

        ``server_timeout``: after that many seconds the server treats the socket as gone with
        a recoverable reason (its session is kept for recovery, as after a transport close),
        still without a byte to the client. ``None``: only Engine.IO's own heartbeat (ping
        interval + timeout) ever notices.
        """
        session = self.sessions_by_sid.get(sid)
        eio_sid = session.eio_sid if session is not None else self.manager.eio_sid_from_sid(sid, NS)
        socket = self.eio.sockets.get(eio_sid) if eio_sid is not None else None
        if eio_sid is None or socket is None or socket.closed or socket.closing:
            return False
        request = (self.environ.get(eio_sid) or {}).get("aiohttp.request")
        silenced = SilencedConnection.silence(getattr(request, "transport", None))
        if silenced is None:
            return False
        self._silenced.append(silenced)
        if server_timeout is not None:
            task = asyncio.ensure_future(self._time_out(eio_sid, max(0.0, server_timeout)))
            self._silence_timers.add(task)
            task.add_done_callback(self._silence_timers.discard)
        return True

    async def _time_out(self, eio_sid: str, after: float) -> None:
        """The server's own liveness check gives up on a silent socket (ping timeout)."""
        await asyncio.sleep(after)
        socket = self.eio.sockets.get(eio_sid)
        if socket is None or socket.closed or socket.closing:
            return
        # What engineio does when a client stops answering pings, minus the CLOSE packet
        # (which the dead path would swallow anyway): a recoverable disconnect.
        await socket.close(wait=False, abort=True, reason=self.eio.reason.PING_TIMEOUT)
        await socket.queue.put(None)  # let the websocket writer finish

    def release_blackholes(self) -> int:
        """Close every silenced connection for real (fault cleared, or server stopping)."""
        for task in list(self._silence_timers):
            task.cancel()
        self._silence_timers.clear()
        released, self._silenced = self._silenced, []
        for silenced in released:
            silenced.release()
        return len(released)

    def close_all_sessions(self) -> None:
        """Cancel every pending recovery timer (server shutdown)."""
        for session in list(self.sessions_by_sid.values()):
            self._forget(session.sid)
