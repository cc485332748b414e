"""Client side of Socket.IO connection-state recovery (CSR) for python-socketio.

python-socketio has no CSR client. The protocol (Socket.IO v5) is small:

* the server's CONNECT reply carries a private session id ``pid`` when CSR is on;
* every server EVENT sent without an ack id carries its *offset* as one extra trailing
  string argument;
* a reconnecting client adds ``{"pid", "offset"}`` (the last offset it processed) to its
  CONNECT auth; the server then writes the missed EVENTs **before** its CONNECT reply, and
  the reply carries the same ``pid``. Nothing on the wire says "recovered": compare pids.

The extension points, and why each is needed:

* ``connect(auth=callable)`` (public): python-socketio evaluates a callable auth on every
  attempt, which is where pid/offset are added.
* ``_handle_connect``: read ``pid``, decide ``recovered``, then flush the events the server
  replayed before its CONNECT reply (stock python-socketio would dispatch them to a
  namespace that is not connected yet).
* ``_handle_event``: strip and record the trailing offset (python-socketio handlers are
  arity-strict, so the extra argument would break them).
* ``_handle_disconnect`` / ``_handle_eio_disconnect``: report the disconnect reason in the
  Socket.IO vocabulary (``transport close``, ``io server disconnect``...) that decides
  whether the session is recoverable.

These are private methods: python-socketio is pinned to 5.18.x, and an interop test against
the real Node ``socket.io`` server guards the behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import engineio
import socketio
from socketio import packet as sio_packet

from ..besteffort import best_effort

log = logging.getLogger(__name__)

#: How long an abort lets a live peer answer the websocket close before dropping the TCP
#: connection (a dead peer never answers). Usually not spent at all: once its reader was
#: cancelled, aiohttp drops the connection right after sending the close frame.
_CLOSE_ANSWER_GRACE = 0.05
#: Bound on engine.io's own teardown steps (its loops stopping, its disconnect handler).
_LOOP_EXIT_TIMEOUT = 1.0

#: Disconnect reasons, in the Socket.IO (JavaScript) vocabulary the protocol uses.
TRANSPORT_CLOSE = "transport close"
TRANSPORT_ERROR = "transport error"
PING_TIMEOUT = "ping timeout"
FORCED_CLOSE = "forced close"
IO_SERVER_DISCONNECT = "io server disconnect"
IO_CLIENT_DISCONNECT = "io client disconnect"

#: Reasons after which the server keeps the session for recovery.
RECOVERABLE_REASONS = frozenset({TRANSPORT_CLOSE, TRANSPORT_ERROR, PING_TIMEOUT, FORCED_CLOSE})

AuthProvider = Callable[[], dict[str, Any] | Awaitable[dict[str, Any]]]


def is_recoverable(reason: str) -> bool:
    """Whether a disconnect reason leaves a session the server can restore."""
    return reason in RECOVERABLE_REASONS


class RecoveringAsyncClient(socketio.AsyncClient):  # type: ignore[misc]
    """``socketio.AsyncClient`` that speaks connection-state recovery on namespace ``/``.

    Public state: ``pid`` (None until a CSR server answers), ``offset`` (last offset
    processed), ``recovered`` (the last CONNECT restored the previous session) and
    ``disconnect_reason`` (why the last connection ended, Socket.IO vocabulary).
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("reconnection", False)  # the session machine decides, not the library
        kwargs.setdefault("handle_sigint", False)
        super().__init__(**kwargs)
        self.pid: str | None = None
        self.offset: str | None = None
        self.recovered = False
        self.disconnect_reason: str | None = None
        self.refusal: Any = None
        self.replayed = 0
        self._sent_pid: str | None = None
        self._user_auth: Any = None
        self._pre_connect: list[tuple[Any, list[Any], str | None]] = []
        self._closing = False
        self.last_receive = 0.0
        #: Bumped by every connect(): what an abort captured belongs to an older generation.
        self._generation = 0

    # -- outgoing ---------------------------------------------------------------------------
    async def _csr_auth(self) -> dict[str, Any]:
        base = await self._get_real_value(self._user_auth) or {}
        self._sent_pid = None
        if self.pid is not None and self.offset is not None:
            self._sent_pid = self.pid
            # Same precedence as the JS client: the caller's keys win.
            return {"pid": self.pid, "offset": self.offset, **base}
        return dict(base)

    async def connect(self, url: str, *args: Any, auth: Any = None, **kwargs: Any) -> None:
        """Connect (or reconnect, offering recovery when a pid and offset are known)."""
        if auth != self._csr_auth:  # bound methods compare equal, not identical
            self._user_auth = auth
        # After a server disconnect engineio finishes closing a moment after the handler ran.
        for _ in range(50):
            if self.eio.state == "disconnected":
                break
            await asyncio.sleep(0.01)
        self._generation += 1
        self._closing = False
        self.disconnect_reason = None
        self.refusal = None
        self.recovered = False
        self._pre_connect = []
        await super().connect(url, *args, auth=self._csr_auth, **kwargs)

    def forget(self) -> None:
        """Drop pid/offset: the next connect is a fresh session (after an intentional end)."""
        self.pid = None
        self.offset = None

    async def close_gracefully(self, timeout: float) -> None:
        """Disconnect so that the server sees a client disconnect, within ``timeout``.

        Stock ``disconnect()`` closes the websocket before its DISCONNECT packet is flushed,
        so a CSR server keeps a recoverable session for every intentional disconnect.
        Flushing the write queue first fixes that; the session is forgotten locally too.
        """
        self._closing = True
        self.forget()
        try:
            if self.connected:
                for ns in list(self.namespaces):
                    await self._send_packet(self.packet_class(sio_packet.DISCONNECT, namespace=ns))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.eio.queue.join(), timeout / 2)
            await asyncio.wait_for(self.eio.disconnect(), timeout / 2)
        except (TimeoutError, OSError, RuntimeError) as exc:
            log.debug("graceful disconnect incomplete: %s; aborting transport", type(exc).__name__)
            await self.abort()
        await self._close_http()

    async def _close_http(self, http: aiohttp.ClientSession | None = None) -> None:
        """Close engineio's private aiohttp session (``http``: the one captured by the caller).

        engineio keeps its aiohttp session across reconnects; close it when we are done.
        A session the caller passed in (external) is the caller's to close, and must stay
        in place: engineio would otherwise create (and leak) a private one on reconnect.
        """
        if self.eio.external_http:
            return
        http = self.eio.http if http is None else http
        if http is not None and not http.closed:
            with best_effort("engine.io http session close", log):
                await http.close()
        if self.eio.http is http:
            self.eio.http = None

    async def abort(self, reason: str | None = None) -> None:
        """Drop the current transport at once, without waiting on the peer.

        With a ``reason`` (a socket judged dead by a probe) the drop is reported with it,
        like any other transport failure; without one it counts as our own disconnect.

        Everything here acts on the connection that is current when ``abort`` is called,
        and on nothing later. The disconnect is reported only once that connection's read
        and write loops are gone and its websocket is closed, because the ``disconnect``
        handler is what lets the session reconnect on this same client: a reconnect must
        never find a half-torn connection, and nothing of this one may run after it.
        (Issue 8, defect 3: closing the websocket first made its read loop report the
        disconnect at once; the session recovered in place while this method still waited
        for a close answer the dead peer never sent, then "disconnected" the new connection,
        which ended the session with ``io client disconnect``.)
        """
        if reason is not None:
            self.disconnect_reason = reason
        else:
            self._closing = True
        eio = self.eio
        generation = self._generation
        ws = eio.ws
        http = eio.http

        def still_ours() -> bool:
            # No connect() has begun since: eio's state is still this connection's.
            return self._generation == generation and eio.ws is ws

        # 1. Stop the read and write loops before anything can wake them: a read loop woken by
        #    a closing websocket would report the disconnect (and reset eio) on its own.
        current = asyncio.current_task()
        loops = [
            task
            for task in (eio.read_loop_task, eio.write_loop_task)
            if task is not None and not task.done() and task is not current
        ]
        for task in loops:
            task.cancel()
        if loops:
            _, stuck = await asyncio.wait(loops, timeout=_LOOP_EXIT_TIMEOUT)
            if stuck:
                log.warning("engine.io loops did not stop within %.1fs", _LOOP_EXIT_TIMEOUT)
        # 2. Close the websocket without waiting for the peer's close frame: a dead peer never
        #    sends one, and aiohttp drops the TCP connection when the wait is cut short.
        if ws is not None and not ws.closed:
            try:
                await asyncio.wait_for(ws.close(), _CLOSE_ANSWER_GRACE)
            except TimeoutError:
                log.debug("no close answer within %.2fs: connection dropped", _CLOSE_ANSWER_GRACE)
            except (aiohttp.ClientError, OSError, RuntimeError) as exc:
                log.debug("websocket close failed: %s", type(exc).__name__)
        # 3. Report the disconnect (with the reason set above) and reset engineio. Its
        #    disconnect() finds the websocket closed and the loops gone, so it neither sends
        #    nor waits; only now may the session reconnect on this client.
        if still_ours() and eio.state == "connected":
            with best_effort("engine.io disconnect", log):
                await asyncio.wait_for(eio.disconnect(abort=True), _LOOP_EXIT_TIMEOUT)
        if still_ours() and eio.state != "disconnected":
            with best_effort("engine.io reset", log):
                await eio._reset()
        if still_ours() or eio.http is not http:  # else a later connection is using it
            await self._close_http(http)

    # -- incoming ---------------------------------------------------------------------------
    async def _handle_eio_message(self, data: Any) -> None:
        self.last_receive = time.monotonic()
        await super()._handle_eio_message(data)

    async def _handle_connect(self, namespace: str | None, data: Any) -> None:
        ns = namespace or "/"
        if ns == "/":
            pid = data.get("pid") if isinstance(data, dict) else None
            pid = pid if isinstance(pid, str) and pid else None
            self.recovered = pid is not None and pid == self._sent_pid
            if not self.recovered:
                self.offset = None
                self._pre_connect = []
            self.pid = pid
        if ns != "/" or ns in self.namespaces:
            await super()._handle_connect(namespace, data)
            return
        # Register the namespace, deliver what the server replayed before its CONNECT reply,
        # and only then run the ``connect`` handler: missed events must precede new ones
        # even when that handler awaits (the JS client orders them the same way).
        self.namespaces[ns] = (
            (data or {}).get("sid", self.sid) if isinstance(data, dict) else self.sid
        )
        while self._pre_connect:
            buffered, self._pre_connect = self._pre_connect, []
            self.replayed += len(buffered)
            for ack_id, args, offset in buffered:
                await self._deliver(ns, ack_id, args, offset)
        await self._trigger_event("connect", namespace=ns)
        self._connect_event.set()

    async def _handle_event(self, namespace: str | None, id: Any, data: list[Any]) -> None:
        ns = namespace or "/"
        offset: str | None = None
        # The server appends the offset to EVENTs that have no ack id and are not volatile.
        if (
            ns == "/"
            and (self.pid is not None or ns not in self.namespaces)
            and id is None
            and len(data) >= 2
            and isinstance(data[-1], str)
        ):
            offset, data = data[-1], data[:-1]
        if ns not in self.namespaces:
            # Replayed packets are written by the server *before* its CONNECT reply.
            if len(self._pre_connect) < 100_000:
                self._pre_connect.append((id, data, offset))
            return
        await self._deliver(ns, id, data, offset)

    async def _deliver(self, ns: str, ack_id: Any, data: list[Any], offset: str | None) -> None:
        # Record before dispatch: handlers run in their own tasks and may finish out of
        # order, and a stale offset would make the server replay events already handled.
        if offset is not None:
            self.offset = offset
        await super()._handle_event(ns, ack_id, data)

    async def _handle_error(self, namespace: str | None, data: Any) -> None:
        # A CONNECT_ERROR packet: the server (its auth middleware) refused this client.
        # Engine.IO-level failures also reach ``connect_error`` handlers, so record it here.
        if (namespace or "/") == "/":
            self.refusal = data if data is not None else "refused"
        await super()._handle_error(namespace, data)

    async def _handle_disconnect(self, namespace: str | None) -> None:
        # A Socket.IO DISCONNECT packet from the server: it ended this session on purpose.
        if (namespace or "/") == "/":
            self.disconnect_reason = IO_SERVER_DISCONNECT
            self.forget()
        await super()._handle_disconnect(namespace)

    async def _handle_eio_disconnect(self, reason: str) -> None:
        self._pre_connect = []
        if self.disconnect_reason is None:
            self.disconnect_reason = self._translate(reason)
        await super()._handle_eio_disconnect(reason)

    def _translate(self, eio_reason: str) -> str:
        if self._closing or eio_reason == engineio.Client.reason.CLIENT_DISCONNECT:
            return IO_CLIENT_DISCONNECT
        if eio_reason == engineio.Client.reason.SERVER_DISCONNECT:
            # An Engine.IO CLOSE packet: the JS client calls this "transport close".
            return TRANSPORT_CLOSE
        # engineio reports a silent server (no ping) as a transport error too; both are
        # recoverable, so the distinction would only change the label.
        return TRANSPORT_ERROR
