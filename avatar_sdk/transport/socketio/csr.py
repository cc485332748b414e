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
* ``_handle_eio_message``: decode and check every frame before dispatching it, so a frame
  the decoder refuses (or one of the wrong shape) becomes a reported protocol error instead
  of an exception in a task nobody awaits (python-socketio decodes inside a fire-and-forget
  task per message: ``Integer is too large``, bad JSON, deep nesting, unknown packet types).
* ``_handle_error``: a CONNECT_ERROR for the namespace that is already connected drops the
  transport with reason ``io server refused`` (stock python-socketio silently marks the
  client disconnected and leaves the Engine.IO connection open, reporting nothing).

Below Socket.IO, :class:`~avatar_sdk.transport.socketio.frame_guard.GuardedWebSocket` (an aiohttp
websocket response class) skips text frames Engine.IO cannot decode (reporting them) and
remembers a message refused for its size; the frame checks live in :mod:`.frame_guard`.

These are private methods: python-socketio is pinned to 5.18.x, and an interop test against
the real Node ``socket.io`` server guards the behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import engineio
import socketio
from socketio import packet as sio_packet

from ...besteffort import best_effort
from ...clock import SYSTEM_CLOCK
from ...logs import ENGINEIO_LOGGER, SOCKETIO_LOGGER, library_log, sdk_logger
from ...wire.disconnect import (
    IO_CLIENT_DISCONNECT,
    IO_SERVER_DISCONNECT,
    IO_SERVER_REFUSED,
    MESSAGE_TOO_BIG,
    TRANSPORT_CLOSE,
    TRANSPORT_ERROR,
)
from .frame_guard import (
    UNKNOWN_EVENT,
    ProtocolErrorSink,
    log_sink,
    malformed,
    packet_name,
    quote,
    sniff_event,
)

log = sdk_logger(__name__)

#: How long an abort lets a live peer answer the websocket close before dropping the TCP
#: connection (a dead peer never answers). Usually not spent at all: once its reader was
#: cancelled, aiohttp drops the connection right after sending the close frame.
_CLOSE_ANSWER_GRACE = 0.05
#: Bound on engine.io's own teardown steps (its loops stopping, its disconnect handler).
_LOOP_EXIT_TIMEOUT = 1.0

#: python-socketio's catch-all handler name (``client.on("*", ...)``): an event of that name
#: would be handed to the catch-all handler as if it were its own, without the name.
CATCH_ALL = "*"

AuthProvider = Callable[[], dict[str, Any] | Awaitable[dict[str, Any]]]


class _EngineIOClient(engineio.AsyncClient):  # type: ignore[misc]
    """engine.io's client whose reset closes the aiohttp session of the connection being
    reset, and leaves alone the one a reconnect has made meanwhile; and which can wait for
    the closes its resets have begun (:meth:`sessions_closed`).

    Without ``http_session``, engine.io makes an aiohttp session per connection, and its
    ``_reset`` awaits ``self.http.close()`` and *then* sets ``self.http = None``. A session
    reads ``closed`` as soon as its close begins, so a reconnect started during that await
    (the socket tier reconnects at once; on Python 3.13 the close of the replaced websocket's
    connection, which ends in ``EofStream``, is still running then) makes a new session,
    which the finishing reset then drops from ``self.http``: nobody closes it, and it is
    reported as ``ResourceWarning: Unclosed client session``. Here the reset lets go of
    ``self.http`` before its first await and closes the session it took.

    That close runs in whichever task reset the connection, often one nobody awaits (the
    read loop, or python-socketio's task for the server's DISCONNECT, whose ``disconnect()``
    reads ``disconnected`` before its reset's close has begun): the client's end waits for
    it through :meth:`sessions_closed`.
    """

    #: engine.io's (untyped): the aiohttp session of the current connection.
    http: aiohttp.ClientSession | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: One future per session a reset let go of and has not finished closing.
        self._closing: set[asyncio.Future[None]] = set()

    async def _reset(self) -> None:
        http = None
        if not self.external_http:
            http, self.http = self.http, None  # before any await: see the class docstring
        if http is None or http.closed:
            await super()._reset()  # with no session left to it, closes none
            return
        closed = asyncio.get_running_loop().create_future()
        self._closing.add(closed)  # before any await too: the end waits for it
        try:
            await super()._reset()
            with best_effort("engine.io http session close", log):
                await http.close()
        finally:
            self._closing.discard(closed)
            closed.set_result(None)

    async def sessions_closed(self) -> None:
        """Return once every session close a reset has begun has ended (a close whose task
        was cancelled counts as ended)."""
        while self._closing:
            await asyncio.wait(set(self._closing))


class RecoveringAsyncClient(socketio.AsyncClient):  # type: ignore[misc]
    """``socketio.AsyncClient`` that speaks connection-state recovery on namespace ``/``.

    Public state: ``pid`` (None until a CSR server answers), ``offset`` (last offset
    processed), ``recovered`` (the last CONNECT restored the previous session) and
    ``disconnect_reason`` (why the last connection ended, Socket.IO vocabulary).
    """

    #: python-socketio's BINARY_EVENT/BINARY_ACK waiting for its attachments.
    _binary_packet: Any

    def __init__(
        self,
        *,
        on_protocol_error: ProtocolErrorSink | None = None,
        max_message_size: int | None = None,
        now: Callable[[], float] = SYSTEM_CLOCK.monotonic,
        **kwargs: Any,
    ) -> None:
        """``on_protocol_error``: where refused frames are reported (default: logged).
        ``max_message_size``: bytes; bigger websocket messages are refused (aiohttp's
        ``max_msg_size``, passed through engineio's ``websocket_extra_options``).
        ``now``: what stamps ``last_receive`` (a session passes its clock's reader)."""
        kwargs.setdefault("reconnection", False)  # the session machine decides, not the library
        # python-socketio's default (False) installs a handler and a level on the global
        # logger; a logger object of the SDK's leaves the user's logging config alone, and
        # turns the warnings of a close the SDK is making (or already knows the reason of)
        # into DEBUG lines: see avatar_sdk.logs.
        kwargs.setdefault("logger", library_log(SOCKETIO_LOGGER, self._ending_is_known))
        kwargs.setdefault("engineio_logger", library_log(ENGINEIO_LOGGER, self._ending_is_known))
        kwargs.setdefault("handle_sigint", False)
        if max_message_size is not None:
            options = dict(kwargs.get("websocket_extra_options") or {})
            options["max_msg_size"] = max_message_size
            kwargs["websocket_extra_options"] = options
        super().__init__(**kwargs)
        self.on_protocol_error: ProtocolErrorSink = on_protocol_error or log_sink
        self.max_message_size = max_message_size
        self.pid: str | None = None
        self.offset: str | None = None
        self.recovered = False
        self.disconnect_reason: str | None = None
        self.refusal: Any = None
        self.replayed = 0
        self._sent_pid: str | None = None
        self._user_auth: Any = None
        #: What the server replayed before its CONNECT reply, in order (events to deliver,
        #: refused frames to report), run once the namespace is connected.
        self._pre_connect: list[Callable[[], Awaitable[None]]] = []
        self._closing = False
        self._now = now
        self.last_receive = 0.0
        #: Bumped by every connect(): what an abort captured belongs to an older generation.
        self._generation = 0

    def _engineio_client_class(self) -> type[engineio.AsyncClient]:
        return _EngineIOClient

    def _ending_is_known(self) -> bool:
        """True while the connection is ending in a way the SDK knows and reports itself: it
        is closing or aborting it, or it has the reason already (the server's DISCONNECT).
        engine.io's "Server sent close packet data None, aborting" after our own DISCONNECT
        is the answer to it, not news: its warnings are then logged at DEBUG."""
        # getattr: engine.io may log while this object is still being built
        return bool(getattr(self, "_closing", False) or getattr(self, "disconnect_reason", None))

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
        A connect cut short (its caller cancelled while, or just as, the CONNECT reply came)
        has a server session too, though ``connected`` is not set yet: whenever the
        transport is up, the DISCONNECT is sent (a server that never made the session
        ignores it). It returns once engine.io's aiohttp sessions are closed, the one an
        earlier reset is still closing in a task nobody awaits included.
        """
        self._closing = True
        self.forget()
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            if self.connected or self.eio.state == "connected":
                for ns in list(self.namespaces) or ["/"]:
                    await self._send_packet(self.packet_class(sio_packet.DISCONNECT, namespace=ns))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout / 2):
                        await self.eio.queue.join()
            async with asyncio.timeout(timeout / 2):
                await self.eio.disconnect()
        except (TimeoutError, OSError, RuntimeError) as exc:
            log.debug("graceful disconnect incomplete: %s; aborting transport", type(exc).__name__)
            await self.abort()
        await self._close_http()
        # A reset in a task nobody awaits may still be closing an earlier connection's
        # session (the server's DISCONNECT, say): the client has ended once it is closed.
        try:
            async with asyncio.timeout_at(deadline):
                await self.eio.sessions_closed()
        except TimeoutError:
            log.info("an engine.io HTTP session was still closing when the close budget ran out")

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
                async with asyncio.timeout(_CLOSE_ANSWER_GRACE):
                    await ws.close()
            except TimeoutError:
                log.debug("no close answer within %.2fs: connection dropped", _CLOSE_ANSWER_GRACE)
            except (aiohttp.ClientError, OSError, RuntimeError) as exc:
                log.debug("websocket close failed: %s", type(exc).__name__)
        # 3. Report the disconnect (with the reason set above) and reset engineio. Its
        #    disconnect() finds the websocket closed and the loops gone, so it neither sends
        #    nor waits; only now may the session reconnect on this client.
        if still_ours() and eio.state == "connected":
            with best_effort("engine.io disconnect", log):
                async with asyncio.timeout(_LOOP_EXIT_TIMEOUT):
                    await eio.disconnect(abort=True)
        if still_ours() and eio.state != "disconnected":
            with best_effort("engine.io reset", log):
                await eio._reset()
        if still_ours() or eio.http is not http:  # else a later connection is using it
            await self._close_http(http)

    # -- incoming ---------------------------------------------------------------------------
    def _refuse(self, event: str, detail: str, name_only: bool = False) -> None:
        with best_effort("report of a refused frame", log):
            self.on_protocol_error(event, detail, name_only)

    async def _handle_eio_message(self, data: Any) -> None:
        # Replaces python-socketio's: decode and check first, then dispatch (same routing).
        # Nothing may escape: this runs in a task nobody awaits.
        self.last_receive = self._now()
        pending = self._binary_packet
        if pending is not None:
            if isinstance(data, bytes | bytearray):
                await self._attach(pending, bytes(data))
                return
            # Attachments come as binary frames: a text frame now means the header lied.
            self._binary_packet = None
            self._refuse(packet_name(pending), "binary packet whose attachments never came")
        if not isinstance(data, str):
            self._refuse(UNKNOWN_EVENT, f"not a Socket.IO packet ({type(data).__name__})")
            return
        try:
            pkt = self.packet_class(encoded_packet=data)
        except Exception as exc:  # ValueError (JSON, >100-digit ints, ids), RecursionError
            await self._undecodable(data, exc)
            return
        problem = malformed(pkt)
        if problem is not None:
            self._refuse(*problem)
            return
        if pkt.packet_type in (sio_packet.BINARY_EVENT, sio_packet.BINARY_ACK):
            self._binary_packet = pkt
            return
        await self._dispatch(pkt)

    async def _attach(self, pending: Any, data: bytes) -> None:
        try:
            complete = pending.add_attachment(data)
        except Exception as exc:  # too many, or a placeholder pointing nowhere
            self._binary_packet = None
            self._refuse(packet_name(pending), f"bad binary attachment ({quote(exc)})")
            return
        if complete:
            self._binary_packet = None
            await self._dispatch(pending)

    async def _undecodable(self, text: str, exc: BaseException) -> None:
        name, offset = sniff_event(text)
        detail = f"undecodable frame ({quote(exc)})"
        if name is None:
            self._refuse(UNKNOWN_EVENT, detail)
            return

        async def refuse() -> None:
            # Like a delivered event: its offset is processed, so a replay skips it.
            if offset is not None and self.pid is not None:
                self.offset = offset
            self._refuse(name, detail, name_only=True)

        if "/" not in self.namespaces:
            self._pre_connect.append(refuse)  # replayed before the CONNECT reply: keep order
        else:
            await refuse()

    async def _dispatch(self, pkt: Any) -> None:
        kind, ns = pkt.packet_type, pkt.namespace
        try:
            if kind == sio_packet.CONNECT:
                await self._handle_connect(ns, pkt.data)
            elif kind == sio_packet.DISCONNECT:
                await self._handle_disconnect(ns)
            elif kind in (sio_packet.EVENT, sio_packet.BINARY_EVENT):
                await self._handle_event(ns, pkt.id, pkt.data)
            elif kind in (sio_packet.ACK, sio_packet.BINARY_ACK):
                await self._handle_ack(ns, pkt.id, pkt.data)
            elif kind == sio_packet.CONNECT_ERROR:
                await self._handle_error(ns, pkt.data)
        except Exception as exc:
            # A bug of ours or of a handler: report it, never an unretrieved task exception.
            log.error("handling a %s packet failed", packet_name(pkt), exc_info=exc)
            self._refuse(packet_name(pkt), f"internal: {type(exc).__name__}")

    async def _handle_connect(self, namespace: str | None, data: Any) -> None:
        ns = namespace or "/"
        if ns == "/" and ns in self.namespaces:
            # A second CONNECT must not replace the pid (and drop the offset) mid-session.
            self._refuse(UNKNOWN_EVENT, "CONNECT for a namespace already connected")
            return
        if ns == "/":
            pid = data.get("pid") if isinstance(data, dict) else None
            pid = pid if isinstance(pid, str) and pid else None
            self.recovered = pid is not None and pid == self._sent_pid
            if not self.recovered:
                self.offset = None
                self._pre_connect = []
            self.pid = pid
        if ns != "/":
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
            for step in buffered:
                await step()
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
                self._pre_connect.append(lambda: self._deliver(ns, id, data, offset))
            return
        await self._deliver(ns, id, data, offset)

    async def _deliver(self, ns: str, ack_id: Any, data: list[Any], offset: str | None) -> None:
        # Record before dispatch: handlers run in their own tasks and may finish out of
        # order, and a stale offset would make the server replay events already handled.
        if offset is not None:
            self.offset = offset
        if data[0] in self.reserved_events or data[0] == CATCH_ALL:
            # python-socketio would run its own handler for that name (``disconnect``:
            # a transport loss that never happened; ``*``: the catch-all handler called
            # without the event name, so a TypeError, or its first argument dispatched as
            # the name): a server cannot send these as events.
            self._refuse(data[0], "reserved Socket.IO event name sent as an ordinary event")
            return
        await super()._handle_event(ns, ack_id, data)

    async def _handle_error(self, namespace: str | None, data: Any) -> None:
        # A CONNECT_ERROR packet: the server (its auth middleware) refused this client.
        # Engine.IO-level failures also reach ``connect_error`` handlers, so record it here.
        ns = namespace or "/"
        if ns == "/" and self.connected and ns in self.namespaces:
            # Mid-session. Stock python-socketio would mark the client disconnected without
            # a ``disconnect`` event and leave the transport open: a dead session that says
            # it is live. Drop the transport instead; its disconnect carries the reason.
            log.warning("the server refused the connected namespace: dropping the transport")
            await self.abort(IO_SERVER_REFUSED)
            return
        if ns == "/":
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
        size = getattr(self.eio.ws, "oversized", None)
        if size is None and getattr(self.eio.ws, "close_code", None) == 1009:
            size = 0  # a websocket without the guard: the close code says it all
        if size is not None and self.disconnect_reason is None and not self._closing:
            # The message was never read, so neither its name nor its offset is known, and a
            # connection-state recovery would get that same message replayed first: forget
            # the session so that the next connect is a fresh one (the session goes cold).
            self.forget()
            self.disconnect_reason = MESSAGE_TOO_BIG
            limit = f" ({self.max_message_size})" if self.max_message_size else ""
            shown = f"message of {size} bytes" if size else "message"
            self._refuse(UNKNOWN_EVENT, f"{shown} over max_message_size{limit}")
        if self.disconnect_reason is None:
            self.disconnect_reason = self._translate(reason)
        if not self.connected and "/" not in self.namespaces and self._connect_event is not None:
            # A connect() waiting for its CONNECT reply on a transport that is gone (a replay
            # that killed it, say) fails now instead of after its whole wait_timeout.
            self.failed_namespaces.append("/")
            self._connect_event.set()
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
