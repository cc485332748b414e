"""Interop: ``RecoveringAsyncClient`` against the real Node ``socket.io`` 4.8 server.

The server (``node/server.js``) runs with ``connectionStateRecovery`` on, an auth middleware
and test-control events; see its header for the protocol. These tests pin down the dialect
our client relies on: the ``pid`` in the CONNECT reply, the trailing offset on stored events
(and its absence on ack-requesting and volatile events), the replay before the CONNECT reply,
and the disconnect reasons on both sides.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import sys
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
import pytest_asyncio
import socketio
from socketio import packet as sio_packet

from avatar_sdk.transport.socketio.csr import RecoveringAsyncClient
from avatar_sdk.wire.disconnect import (
    IO_CLIENT_DISCONNECT,
    IO_SERVER_DISCONNECT,
    PING_TIMEOUT,
    is_recoverable,
)

if TYPE_CHECKING:  # the fixtures' types; tests/ is not a package
    from conftest import NodeServer, StartServer

pytestmark = pytest.mark.interop

WAIT = 5.0


class WireTapClient(RecoveringAsyncClient):
    """Also keeps every decoded Socket.IO packet as received, before any offset handling."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wire: list[sio_packet.Packet] = []
        self.disconnected = asyncio.Event()

    async def _handle_eio_message(self, data: Any) -> None:
        if isinstance(data, str):
            self.wire.append(sio_packet.Packet(encoded_packet=data))
        await super()._handle_eio_message(data)

    def wire_event(self, name: str) -> sio_packet.Packet:
        found = [
            p
            for p in self.wire
            if p.packet_type == sio_packet.EVENT and isinstance(p.data, list) and p.data[0] == name
        ]
        assert len(found) == 1, f"expected one {name!r} EVENT on the wire, got {found}"
        return found[0]


class Recorder:
    """Collects (event, args) in arrival order; handlers take exactly the payload args."""

    def __init__(self) -> None:
        self.events: list[tuple[str, tuple[Any, ...]]] = []
        self._changed = asyncio.Event()

    def add(self, name: str, args: tuple[Any, ...]) -> None:
        self.events.append((name, args))
        self._changed.set()

    def handler(self, name: str) -> Callable[..., None]:
        def record(*args: Any) -> None:
            self.add(name, args)

        return record

    def args(self, name: str) -> list[tuple[Any, ...]]:
        return [args for event, args in self.events if event == name]

    def names(self) -> list[str]:
        return [event for event, _ in self.events]

    async def wait_for(self, name: str, count: int = 1, timeout: float = WAIT) -> None:
        try:
            async with asyncio.timeout(timeout):
                while len(self.args(name)) < count:
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(
                f"{count} x {name!r} not received within {timeout} s; got {self.events}"
            ) from None


class Harness:
    """Creates clients wired to a Recorder; closes them all gracefully at teardown."""

    def __init__(self) -> None:
        self.clients: list[RecoveringAsyncClient] = []

    def client(self, recorder: Recorder, *events: str) -> WireTapClient:
        client = WireTapClient()
        self.clients.append(client)

        def on_disconnect(reason: str) -> None:
            recorder.add("disconnect", (reason,))
            client.disconnected.set()

        client.on("disconnect", on_disconnect)
        client.on("connect_error", recorder.handler("connect_error"))
        client.on("onServerConnected", recorder.handler("onServerConnected"))
        for event in events:
            client.on(event, recorder.handler(event))
        return client

    async def close(self) -> None:
        for client in self.clients:
            await client.close_gracefully(2.0)


@pytest_asyncio.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness()
    try:
        yield h
    finally:
        await h.close()


async def connect(client: RecoveringAsyncClient, server: NodeServer, **auth: Any) -> None:
    await client.connect(
        server.url,
        auth=auth if auth else {"token": server.token},
        transports=["websocket"],
        wait_timeout=WAIT,
    )


async def stats(client: RecoveringAsyncClient) -> dict[str, Any]:
    result = await client.call("stats", timeout=WAIT)
    assert isinstance(result, dict)
    return result


async def wait_disconnected(client: WireTapClient) -> None:
    """Wait for the client's ``disconnect`` handler, then for Engine.IO to finish closing.

    After a server DISCONNECT packet the handler runs while Engine.IO is still closing its
    websocket (state ``disconnecting`` for a few ms); ``connect()`` in that window raises
    ``ValueError('Client is not in a disconnected state')``.
    """
    await asyncio.wait_for(client.disconnected.wait(), WAIT)
    async with asyncio.timeout(WAIT):
        while client.eio.state != "disconnected":  # noqa: ASYNC110 (engineio has no event)
            await asyncio.sleep(0.005)


async def drop_transport(client: WireTapClient, server: NodeServer, gap: int) -> str:
    """Kill the transport server-side (``gap`` events are sent meanwhile); return the sid."""
    sid = client.get_sid()
    assert sid is not None
    client.disconnected.clear()
    await client.emit("kill", {"gap": gap})
    await wait_disconnected(client)
    # The session is persisted server-side once the server has noticed the drop.
    assert await server.disconnect_reason(sid) == "forced close"
    return sid


# -- tests --------------------------------------------------------------------------------------


async def test_connect_with_token_gets_pid_and_offset(
    node_server: NodeServer, harness: Harness
) -> None:
    rec = Recorder()
    client = harness.client(rec)
    await connect(client, node_server)

    assert client.connected
    assert isinstance(client.pid, str) and client.pid  # the server has CSR on
    assert client.recovered is False
    await rec.wait_for("onServerConnected")
    assert rec.args("onServerConnected") == [({},)]  # the offset is not passed to the handler
    assert isinstance(client.offset, str) and client.offset
    sid = client.get_sid()
    assert await stats(client) == {"recovered": False, "id": sid}
    await node_server.wait_line(f"CONNECTION {sid} false")


@pytest.mark.parametrize("auth", [{"token": "wrong-token"}, {}], ids=["wrong", "missing"])
async def test_bad_token_is_rejected(
    node_server: NodeServer, harness: Harness, auth: dict[str, Any]
) -> None:
    rec = Recorder()
    client = harness.client(rec)
    with pytest.raises(socketio.exceptions.ConnectionError):
        await client.connect(
            node_server.url, auth=auth, transports=["websocket"], wait_timeout=WAIT
        )
    assert rec.args("connect_error") == [({"message": "invalid token"},)]
    assert client.refusal == {"message": "invalid token"}  # what ControlChannel reports
    assert not client.connected
    assert client.pid is None


async def test_recovery_replays_missed_events_exactly_once(
    node_server: NodeServer, harness: Harness
) -> None:
    rec = Recorder()
    client = harness.client(rec, "gap")
    burst: list[tuple[int, str]] = []

    def on_b(i: int, label: str) -> None:  # strict arity: no trailing offset may reach it
        burst.append((i, label))

    client.on("b", on_b)
    await connect(client, node_server)
    pid = client.pid
    await client.emit("burst", 3)
    assert await stats(client) == {"recovered": False, "id": client.get_sid()}
    assert burst == [(0, "item-0"), (1, "item-1"), (2, "item-2")]

    sid = await drop_transport(client, node_server, gap=5)
    assert client.disconnect_reason is not None
    assert is_recoverable(client.disconnect_reason), client.disconnect_reason
    assert client.pid == pid  # kept for the recovery attempt
    assert not rec.args("gap")

    del rec.events[:]
    await connect(client, node_server)
    assert client.recovered is True
    assert client.get_sid() == sid
    assert client.pid == pid
    assert await stats(client) == {"recovered": True, "id": sid}
    await node_server.wait_line(f"CONNECTION {sid} true")
    # Replayed before the CONNECT reply, delivered in order and before anything newer.
    assert rec.events == [("gap", (i,)) for i in range(5)] + [("onServerConnected", ({},))]
    assert client.replayed == 5
    assert len(burst) == 3  # nothing delivered before the drop is delivered again

    # A second drop: only the new gap events come back, the old ones are not repeated.
    await drop_transport(client, node_server, gap=2)
    del rec.events[:]
    await connect(client, node_server)
    assert client.recovered is True
    assert client.get_sid() == sid
    assert await stats(client) == {"recovered": True, "id": sid}
    assert rec.args("gap") == [(0,), (1,)]
    assert client.replayed == 7
    assert len(burst) == 3


async def test_ack_and_volatile_events_keep_their_args(
    node_server: NodeServer, harness: Harness
) -> None:
    rec = Recorder()
    client = harness.client(rec, "vol", "plain", "with_ack_reply", "gap")

    def on_with_ack(*args: Any) -> str:
        rec.add("with_ack", args)
        return "ack-reply"

    client.on("with_ack", on_with_ack)
    await connect(client, node_server)
    await rec.wait_for("onServerConnected")
    spec = {"volatile": ["v-string", {"n": 7}], "ack": ["a-string", "a-tail"], "plain": ["p"]}
    await client.emit("probe_special", spec)
    await rec.wait_for("with_ack_reply")

    # On the wire: the ack-requesting and the volatile event carry no offset, the plain one does.
    with_ack = client.wire_event("with_ack")
    assert with_ack.id is not None
    assert with_ack.data == ["with_ack", "a-string", "a-tail"]
    vol = client.wire_event("vol")
    assert vol.id is None
    assert vol.data == ["vol", "v-string", {"n": 7}]
    plain = client.wire_event("plain")
    assert len(plain.data) == 3 and isinstance(plain.data[-1], str)

    # Delivered with their args intact; only the plain event lost its (trailing) offset.
    assert rec.args("with_ack") == [("a-string", "a-tail")]
    assert rec.args("vol") == [("v-string", {"n": 7})]
    assert rec.args("plain") == [("p",)]
    assert rec.args("with_ack_reply") == [(["ack-reply"],)]
    assert await node_server.wait_line("ACKED with_ack") == 'ACKED with_ack ["ack-reply"]'
    reply = client.wire_event("with_ack_reply")
    assert client.offset == reply.data[-1]  # the last offset-bearing event

    # Offsets were tracked correctly across them: recovery still works and replays only the gap.
    sid = await drop_transport(client, node_server, gap=1)
    del rec.events[:]
    await connect(client, node_server)
    assert client.recovered is True
    assert client.get_sid() == sid
    assert await stats(client) == {"recovered": True, "id": sid}
    assert rec.events == [("gap", (0,)), ("onServerConnected", ({},))]


async def test_server_disconnect_refuses_recovery(
    node_server: NodeServer, harness: Harness
) -> None:
    rec = Recorder()
    client = harness.client(rec)
    await connect(client, node_server)
    await rec.wait_for("onServerConnected")
    old_sid, old_pid = client.get_sid(), client.pid
    assert old_sid is not None

    await client.emit("server_disconnect")
    await wait_disconnected(client)
    assert client.disconnect_reason == IO_SERVER_DISCONNECT
    assert not is_recoverable(client.disconnect_reason)
    assert client.pid is None and client.offset is None  # the session is forgotten
    assert await node_server.disconnect_reason(old_sid) == "server namespace disconnect"

    await connect(client, node_server)
    assert client.recovered is False
    new_sid = client.get_sid()
    assert new_sid is not None and new_sid != old_sid
    assert client.pid is not None and client.pid != old_pid
    assert await stats(client) == {"recovered": False, "id": new_sid}


async def test_expired_window_refuses_recovery(
    start_node_server: StartServer, harness: Harness
) -> None:
    server = await start_node_server(window_ms=300)
    rec = Recorder()
    client = harness.client(rec, "gap")
    await connect(client, server)
    await rec.wait_for("onServerConnected")
    old_pid = client.pid

    old_sid = await drop_transport(client, server, gap=2)
    assert client.pid == old_pid and client.offset is not None  # recovery will be offered
    await asyncio.sleep(0.8)  # longer than the 300 ms window

    del rec.events[:]
    await connect(client, server)
    assert client.recovered is False
    new_sid = client.get_sid()
    assert new_sid != old_sid
    assert client.pid is not None and client.pid != old_pid
    assert await stats(client) == {"recovered": False, "id": new_sid}
    assert client.replayed == 0
    assert rec.args("gap") == []
    assert rec.names() == ["onServerConnected"]


async def test_close_gracefully_is_a_client_namespace_disconnect(
    node_server: NodeServer, harness: Harness
) -> None:
    rec = Recorder()
    client = harness.client(rec)
    await connect(client, node_server)
    await rec.wait_for("onServerConnected")
    sid = client.get_sid()
    assert sid is not None

    await client.close_gracefully(2.0)
    assert not client.connected
    assert client.disconnect_reason == IO_CLIENT_DISCONNECT
    assert client.pid is None and client.offset is None
    reason = await node_server.disconnect_reason(sid)
    assert reason == "client namespace disconnect"  # not "transport close": nothing to recover


async def test_abort_reports_its_reason_once_and_leaves_a_clean_client(
    node_server: NodeServer, harness: Harness
) -> None:
    """``abort(reason)`` (a socket judged dead) reports the drop once, with that reason,
    before it returns and with Engine.IO already reset: the session reconnects from that
    report, so nothing of the aborted transport may be left to act on the next connection."""
    rec = Recorder()
    client = harness.client(rec)
    await connect(client, node_server)
    await rec.wait_for("onServerConnected")
    sid, pid = client.get_sid(), client.pid
    assert sid is not None

    await client.abort(PING_TIMEOUT)
    assert len(rec.args("disconnect")) == 1
    assert client.disconnect_reason == PING_TIMEOUT  # what ControlChannel reports
    assert client.eio.state == "disconnected" and not client.connected
    assert client.pid == pid and client.offset is not None  # recovery will be offered
    assert is_recoverable(await node_server.disconnect_reason(sid))

    await connect(client, node_server)
    assert client.recovered is True
    assert client.get_sid() == sid
    assert await stats(client) == {"recovered": True, "id": sid}
    assert len(rec.args("disconnect")) == 1  # reported once, never again


# -- regressions: ordering guarantees under async handlers -----------------------------------


async def test_slow_async_handler_does_not_regress_offset(
    node_server: NodeServer, harness: Harness
) -> None:
    """The handler of the first event finishes last: the offset must still be the last one
    received, so the recovery replays nothing.

    Nothing-replayed is shown by a positive event, not by a pause: each ``b`` is recorded
    as it arrives (before its handler awaits), and after the recovery the server sends a
    marker on the same socket. Socket.IO keeps order and each message's handler starts in
    arrival order, so once the marker is seen every ``b`` the server sent before it, a
    replayed one included, has been seen too."""
    rec = Recorder()
    client = harness.client(rec, "vol")

    async def on_b(i: int, label: str) -> None:
        rec.add("b_arrived", (i, label))
        await asyncio.sleep(0.3 if i == 0 else 0.0)  # the slow handler: it finishes last
        rec.add("b", (i, label))

    client.on("b", on_b)
    await connect(client, node_server)
    await client.emit("burst", 3)
    await rec.wait_for("b", 3)
    assert rec.args("b")[-1] == (0, "item-0")  # the first event's handler did end last

    await drop_transport(client, node_server, gap=0)
    await connect(client, node_server)
    assert client.recovered is True
    assert client.replayed == 0  # what came before the CONNECT reply, counted by then
    # The marker is volatile (no offset: it moves nothing) and ends in a dict, not a string
    # an offset could be mistaken for.
    await client.emit("volatile", {"marker": 1})
    await rec.wait_for("vol")
    assert rec.args("vol") == [({"marker": 1},)]
    assert rec.args("b_arrived") == [(0, "item-0"), (1, "item-1"), (2, "item-2")]  # once each


async def test_replayed_events_precede_new_ones_with_async_connect_handler(
    node_server: NodeServer, harness: Harness
) -> None:
    rec = Recorder()
    client = harness.client(rec, "gap")

    async def on_connect() -> None:
        await asyncio.sleep(0.1)

    client.on("connect", on_connect)
    await connect(client, node_server)
    await rec.wait_for("onServerConnected")

    await drop_transport(client, node_server, gap=3)
    del rec.events[:]
    await connect(client, node_server)
    assert client.recovered is True
    await stats(client)
    await rec.wait_for("onServerConnected")
    assert rec.events == [("gap", (i,)) for i in range(3)] + [("onServerConnected", ({},))]


# -- engine.io's private aiohttp sessions ------------------------------------------------------


def open_http_sessions() -> list[aiohttp.ClientSession]:
    """aiohttp sessions alive and not closed (a leak is one nobody will close)."""
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, aiohttp.ClientSession) and not o.closed]


def sessions_made_by(eio: object, monkeypatch: pytest.MonkeyPatch) -> list[aiohttp.ClientSession]:
    """The aiohttp sessions engine.io client ``eio`` creates from now on. Only its own: in
    the parallel suite, another test's lingering task in this worker may create one while
    this test runs (a process-wide count then blamed this client, under load only)."""
    made: list[aiohttp.ClientSession] = []
    inner = aiohttp.ClientSession.__init__  # the http_close fixture's, when it patched it

    def init(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        inner(self, *args, **kwargs)
        if sys._getframe(1).f_locals.get("self") is eio:  # created in eio's own method
            made.append(self)

    monkeypatch.setattr(aiohttp.ClientSession, "__init__", init)
    return made


@pytest.fixture(params=["aiohttp", "overlapping"])
def http_close(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How aiohttp sessions close: as installed, or ``overlapping``: as they do on Python
    3.13, where the close of the replaced websocket's session (its connection ends in
    ``EofStream``) is still running when the reconnect creates the next session. The
    session reads ``closed`` once its close has begun (here a loop turn after ``close()``,
    aiohttp's own at once); this stand-in's ``close()`` returns once a new session exists
    (at most 1 s), the overlap that 3.13 shows by chance every time."""
    if request.param == "overlapping":
        real_init, real_close = aiohttp.ClientSession.__init__, aiohttp.ClientSession.close
        created = [asyncio.Event()]

        def init(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
            real_init(self, *args, **kwargs)
            created[0].set()

        async def close(self: aiohttp.ClientSession) -> None:
            created[0] = asyncio.Event()
            closing = asyncio.ensure_future(real_close(self))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(created[0].wait(), 1.0)
            await closing

        monkeypatch.setattr(aiohttp.ClientSession, "__init__", init)
        monkeypatch.setattr(aiohttp.ClientSession, "close", close)
    return str(request.param)


@pytest.mark.parametrize("ending", ["close_gracefully", "abort", "server_disconnect"])
async def test_no_http_session_outlives_a_client_that_recovered(
    node_server: NodeServer, http_close: str, ending: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``http_session``, engine.io makes an aiohttp session per connection. After
    recoveries (the server kills the transport, the client reconnects at once, as the
    socket tier does) and however the client ends, none of those sessions is left open."""
    rec = Recorder()
    client = Harness().client(rec, "gap")
    made = sessions_made_by(client.eio, monkeypatch)
    await connect(client, node_server)
    for _ in range(3):
        await drop_transport(client, node_server, gap=1)
        await connect(client, node_server)
        assert client.recovered is True
    if ending == "close_gracefully":
        await client.close_gracefully(2.0)
    elif ending == "abort":
        await client.abort()
    else:
        client.disconnected.clear()
        await client.emit("server_disconnect")
        await wait_disconnected(client)
        await client.close_gracefully(2.0)  # what a caller does after the end
    assert made, "the check watched no session of this client"
    leaked = [s for s in made if not s.closed]
    assert leaked == [], f"{len(leaked)} aiohttp session(s) left open ({http_close} close)"


async def test_no_http_session_outlives_a_refused_connect(node_server: NodeServer) -> None:
    """A connect that fails (nothing listens; then the server refuses the token) leaves no
    session open: a caller that gives up after a failed connect has nothing to close."""
    before = {id(s) for s in open_http_sessions()}
    client = Harness().client(Recorder())
    with socket.socket() as probe:  # a port that was free a moment ago: refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(socketio.exceptions.ConnectionError):
        await client.connect(f"http://127.0.0.1:{port}", transports=["websocket"])
    with pytest.raises(socketio.exceptions.ConnectionError):
        await connect(client, node_server, token="wrong-token")
    leaked = [s for s in open_http_sessions() if id(s) not in before]
    assert leaked == [], f"{len(leaked)} aiohttp session(s) left open"


@pytest.mark.parametrize("http_close", ["aiohttp", "overlapping"], indirect=True)
async def test_no_http_session_outlives_a_close_in_the_turn_after_a_server_disconnect(
    node_server: NodeServer, http_close: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32, item 3: the server's DISCONNECT is handled in a task of python-socketio's
    (engine.io's ``disconnect()`` there sets ``state`` to ``disconnected``, then its reset
    begins closing the session, in one step). A caller that sees ``disconnected`` in the
    very next loop turn and closes the client at once must find that session closed: with
    a close that only reads ``closed`` once it has run (the ``overlapping`` stand-in),
    ``close_gracefully`` returned before the reset's close had begun. ``wait_disconnected``
    polls every 5 ms, so it hit that turn by chance only (under load); this waits turn by
    turn, so it hits it every time."""
    rec = Recorder()
    client = Harness().client(rec)
    made = sessions_made_by(client.eio, monkeypatch)
    await connect(client, node_server)
    await client.emit("server_disconnect")
    async with asyncio.timeout(WAIT):
        while client.eio.state != "disconnected":  # noqa: ASYNC110 (engineio has no event)
            await asyncio.sleep(0)  # one loop turn: the first turn that can see it
    await client.close_gracefully(2.0)
    assert made, "the check watched no session of this client"
    leaked = [s for s in made if not s.closed]
    assert leaked == [], f"{len(leaked)} aiohttp session(s) left open ({http_close} close)"
