"""A control socket that dies silently, like a vanished peer (issue 8, defect 3).

The staging fault is checked first at the wire (no byte, no close answer, no FIN reaches the
client; the server notices only when told to), then the session against it: the probe finds
the dead socket, and recovery is in place when the server had already timed the socket out,
cold when it had not. Either way the session stays up and answers afterwards.
"""

from __future__ import annotations

import asyncio
import gc

import aiohttp
import pytest

from avatar_sdk import AvatarSession
from avatar_sdk.events.bus import Event
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.socketio.csr import RecoveringAsyncClient

from .conftest import FAST, SessionFactory, sdk_tasks, until

pytestmark = pytest.mark.staging_leftovers(
    "a silenced socket: the server never hears the client go, by design of the fault"
)

PROBING = FAST.with_(socket_probe_interval=0.5, socket_probe_timeout=0.3)


RawClient = tuple[RecoveringAsyncClient, aiohttp.ClientSession]


async def _raw_client(staging: StagingServer) -> RawClient:
    http = aiohttp.ClientSession()
    client = RecoveringAsyncClient(http_session=http)
    await client.connect(
        staging.url, auth={"token": staging.token}, transports=["websocket"], wait_timeout=2
    )
    return client, http


async def _abandon(client: RecoveringAsyncClient, http: aiohttp.ClientSession) -> None:
    await client.abort("ping timeout")
    await http.close()


async def test_silent_socket_answers_nothing_not_even_a_close(staging: StagingServer) -> None:
    client, http = await _raw_client(staging)
    try:
        sid = staging.live_sids[0]
        assert staging.faults.silent_socket() == 1
        ws = client.eio.ws
        assert ws is not None
        # A live peer answers a WebSocket close at once; a vanished one never does.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ws.close(), 1.0)
        # Nor does the server see the client going away: it reads nothing, FIN included.
        conv = staging.conversations[sid]
        assert staging.disconnects == []
        assert not staging.sio.is_pending_recovery(sid)
        assert not conv.ended
    finally:
        await _abandon(client, http)


async def test_silent_socket_server_timeout_keeps_the_session_for_recovery(
    staging: StagingServer,
) -> None:
    client, http = await _raw_client(staging)
    try:
        sid = staging.live_sids[0]
        reader = client.eio.read_loop_task
        reader.cancel()  # read the websocket ourselves
        await asyncio.wait([reader])
        ws = client.eio.ws
        assert ws is not None
        assert staging.faults.silent_socket(server_timeout=0.3) == 1
        assert await until(lambda: staging.disconnects, 2)
        assert staging.disconnects == [(sid, "ping timeout")]
        assert staging.sio.is_pending_recovery(sid)
        # Timed out server-side, and still not a byte (no close frame, no FIN) to the client.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ws.receive(), 0.5)
    finally:
        await _abandon(client, http)


async def test_abort_of_a_silent_socket_spares_the_connection_its_disconnect_started(
    staging: StagingServer,
) -> None:
    """What a session does, at the transport level: the probe aborts the dead socket, and the
    disconnect handler reconnects at once. Nothing of the abort may reach the new connection
    (it used to wait for a close answer, then disconnect whatever connection was current)."""
    client, http = await _raw_client(staging)
    try:
        sid = staging.live_sids[0]
        assert staging.faults.silent_socket(server_timeout=0.0) == 1
        assert await until(lambda: staging.sio.is_pending_recovery(sid), 1)
        reasons: list[str | None] = []
        reconnects: list[asyncio.Task[None]] = []

        def on_disconnect(*_: object) -> None:
            reasons.append(client.disconnect_reason)
            if len(reconnects) == 1:
                return  # teardown's own abort: nothing to reconnect
            reconnects.append(
                asyncio.ensure_future(
                    client.connect(
                        staging.url,
                        auth={"token": staging.token},
                        transports=["websocket"],
                        wait_timeout=2,
                    )
                )
            )

        client.on("disconnect", on_disconnect)
        await client.abort("ping timeout")
        assert len(reconnects) == 1
        await asyncio.wait_for(reconnects[0], 3)
        await asyncio.sleep(0)  # nothing of the abort is pending: it has returned
        assert client.connected and client.recovered
        assert client.get_sid() == sid
        assert reasons == ["ping timeout"]
        assert staging.sio.recoveries == 1
    finally:
        await _abandon(client, http)


async def _answers_after_recovery(
    staging: StagingServer, session: AvatarSession, seen: list[Event]
) -> None:
    """The session is still usable once the dead transport's teardown is over: a turn spoken
    now is answered, and nothing ended the session."""
    # The watchdog that judged the socket dead probes again only after its drop of that
    # socket has returned: once that probe arrives, nothing of the old transport is pending.
    probes = len(staging.received_events("checkAvailability"))
    await until(
        lambda: (
            len(staging.received_events("checkAvailability")) > probes
            or session.state in ("ended", "failed")
        ),
        3,
    )
    assert [e.data for e in seen if e.name == "ended"] == []
    assert session.state == "connected"
    assert len(staging.received_events("checkAvailability")) > probes
    await session.speak("are you still there?")
    await session.wait_for("agent_turn_ended", timeout=5)
    assert session.state == "connected"
    assert [e.data for e in seen if e.name == "ended"] == []


async def test_silent_socket_timed_out_by_the_server_recovers_in_place_and_stays_up(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(config=PROBING)
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    sid = staging.live_sids[0]
    seen: list[Event] = []
    session.on("*", seen.append)

    assert staging.faults.silent_socket(server_timeout=0.2) == 1
    lost = await session.wait_for("reconnecting", timeout=5)
    assert lost.data["reason"] == "ping timeout"
    ev = await session.wait_for("reconnected", timeout=5)
    assert ev.data["tier"] == "socket"
    assert ev.data["recovered"] is True
    await _answers_after_recovery(staging, session, seen)
    assert staging.live_sids == [sid]  # the same server session, restored
    assert staging.sio.recoveries == 1
    assert len(staging.received_events("join")) == 1  # no re-join
    assert [e.data["reason"] for e in seen if e.name == "reconnecting"] == ["ping timeout"]


async def test_silent_socket_never_timed_out_by_the_server_goes_cold_and_stays_up(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(config=PROBING)
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    thread = session.thread_id
    seen: list[Event] = []
    session.on("*", seen.append)

    assert staging.faults.silent_socket() == 1
    ev = await session.wait_for("reconnected", timeout=10)
    assert ev.data["tier"] == "cold"
    assert ev.data["recovered"] is False
    assert staging.sio.refused_recoveries >= 1  # the in-place offer came too early
    assert staging.sio.recoveries == 0
    await _answers_after_recovery(staging, session, seen)
    assert session.thread_id == thread


async def test_stopping_the_server_while_a_socket_is_silent_leaks_nothing() -> None:
    staging = StagingServer()
    await staging.start()
    quiet = FAST.with_(socket_probe_interval=60.0)  # the client does not notice
    session = AvatarSession(
        staging.url, staging.token, media=False, allow_insecure_transport=True, config=quiet
    )
    stopped = False
    try:
        await session.connect()
        eio_sid = staging.sio.manager.eio_sid_from_sid(staging.live_sids[0], "/")
        transport = staging.sio.environ[eio_sid]["aiohttp.request"].transport
        assert staging.faults.silent_socket(server_timeout=30.0) == 1
        await staging.stop()
        stopped = True
        assert transport.is_closing()  # the held-back connection was closed for real
        assert staging.sio.release_blackholes() == 0
    finally:
        await session.close()
        if not stopped:
            await staging.stop()
    gc.collect()  # a leaked socket would raise ResourceWarning (an error in this suite)
    assert sdk_tasks() == []  # at once: close() returned with nothing left running
