"""No UDP socket outlives its peer, however the peer is closed while ICE gathers.

aioice binds one UDP socket per host address while gathering and registers them on its
connection only once all are bound. A peer closed in the middle of that (``close()`` during
``setLocalDescription``, or the caller cancelled there) used to leave the sockets already
bound open: the ``ResourceWarning: unclosed <socket ... proto=17>`` that surfaced in
whichever later test the garbage collector happened to run in.

The gate below pauses gathering between two binds, so each race is hit every time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, cast

import aioice.ice
import pytest
from aiortc import RTCPeerConnection

from avatar_sdk import AvatarSession
from avatar_sdk.clock import SYSTEM_CLOCK
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.staging.asr_peer import AsrPeer
from avatar_sdk.testing.staging.media import StagingMedia
from avatar_sdk.transport.rtc.asr import AsrUplink, UplinkTrack
from avatar_sdk.transport.rtc.ice import (
    close_peer,
    ice_connections,
    rtc_configuration,
    set_local_description,
)
from avatar_sdk.transport.rtc.stv import StvDownlink

from .conftest import FAST, HANG_GUARD, until


class BindGate:
    """Records every UDP endpoint the loop creates; the ``pause_at``-th bind waits for
    :attr:`release` (after :attr:`reached` is set); :attr:`both_bound` is set once
    ``pause_at`` endpoints exist."""

    def __init__(self, pause_at: int) -> None:
        self.pause_at = pause_at
        self.calls = 0
        self.transports: list[asyncio.DatagramTransport] = []
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.both_bound = asyncio.Event()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        loop = asyncio.get_running_loop()
        original = loop.create_datagram_endpoint

        async def endpoint(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == self.pause_at:
                self.reached.set()
                await self.release.wait()
            transport, protocol = await original(*args, **kwargs)
            self.transports.append(transport)
            if len(self.transports) == self.pause_at:
                self.both_bound.set()
            return transport, protocol

        monkeypatch.setattr(loop, "create_datagram_endpoint", endpoint)

    def open(self) -> list[asyncio.DatagramTransport]:
        return [t for t in self.transports if not t.is_closing()]


@pytest.fixture
def two_host_addresses(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every aioice connection gathers two host candidates (two loopback binds), whatever
    this machine's interfaces are."""
    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda **_: ["127.0.0.1"] * 2)
    yield


def closed(pc: RTCPeerConnection) -> asyncio.Event:
    """Set once ``pc`` reports ``closed`` (its close() ran, ICE connections included)."""
    event = asyncio.Event()

    def changed() -> None:
        if pc.connectionState == "closed":
            event.set()

    pc.on("connectionstatechange", changed)
    return event


async def wait(event: asyncio.Event, timeout: float = 3.0) -> None:
    await asyncio.wait_for(event.wait(), timeout)


def _uplink() -> AsrUplink:
    return AsrUplink(
        configuration=rtc_configuration(None), track=UplinkTrack(None), clock=SYSTEM_CLOCK
    )


@pytest.mark.usefixtures("two_host_addresses")
async def test_an_uplink_closed_while_gathering_leaves_no_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = BindGate(pause_at=2)
    gate.install(monkeypatch)
    uplink = _uplink()
    offering = asyncio.ensure_future(uplink.create_offer())
    await asyncio.wait_for(gate.reached.wait(), 3)
    is_closed = closed(uplink.pc)
    closing = asyncio.ensure_future(uplink.close())
    await wait(is_closed)
    gate.release.set()
    await asyncio.wait_for(closing, 3)
    await asyncio.wait_for(asyncio.gather(offering, return_exceptions=True), 3)
    await wait(gate.both_bound)  # the gathering went on to its end
    assert gate.open() == []


@pytest.mark.usefixtures("two_host_addresses")
async def test_an_offer_cancelled_mid_gathering_then_closed_leaves_no_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = BindGate(pause_at=2)
    gate.install(monkeypatch)
    uplink = _uplink()
    offering = asyncio.ensure_future(uplink.create_offer())
    await asyncio.wait_for(gate.reached.wait(), 3)
    offering.cancel()  # connect() cancelled by close(): one socket bound, one to go
    await asyncio.gather(offering, return_exceptions=True)
    is_closed = closed(uplink.pc)
    closing = asyncio.ensure_future(uplink.close())
    await wait(is_closed)
    gate.release.set()
    await asyncio.wait_for(closing, 3)
    assert gate.transports
    assert gate.open() == []


@pytest.mark.usefixtures("two_host_addresses")
async def test_a_downlink_cancelled_while_subscribing_leaves_no_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = BindGate(pause_at=2)
    gate.install(monkeypatch)
    link = StvDownlink(
        http=cast(Any, None),  # never reached: the POST comes after gathering
        configuration=rtc_configuration(None),
        allow_private=True,
        video=True,
        outputs={},
        clock=SYSTEM_CLOCK,
    )
    subscribing = asyncio.ensure_future(link.subscribe("http://127.0.0.1:9/whep", 5))
    await asyncio.wait_for(gate.reached.wait(), 3)
    subscribing.cancel()
    await asyncio.gather(subscribing, return_exceptions=True)
    is_closed = closed(link.pc)
    closing = asyncio.ensure_future(link.close(1.0))
    await wait(is_closed)
    gate.release.set()
    await asyncio.wait_for(closing, 3)
    assert gate.transports
    assert gate.open() == []


@pytest.mark.usefixtures("two_host_addresses")
async def test_a_staging_asr_peer_closed_while_answering_leaves_no_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = _uplink()
    offer = await client.create_offer()  # the client's own sockets: bound before the gate
    gate = BindGate(pause_at=2)
    gate.install(monkeypatch)
    peer = AsrPeer(StagingMedia(cast(Any, None)), "sid-1")
    answering = asyncio.ensure_future(peer.answer(offer, is_reconnect=False))
    await asyncio.wait_for(gate.reached.wait(), 3)
    server_pc = peer.pc
    is_closed = closed(server_pc)
    closing = asyncio.ensure_future(peer.close())  # the conversation ended meanwhile
    await wait(is_closed)
    gate.release.set()
    await asyncio.wait_for(closing, 3)
    await asyncio.wait_for(asyncio.gather(answering, return_exceptions=True), 3)
    await wait(gate.both_bound)
    await client.close()
    assert gate.open() == []


async def test_close_peer_stays_bounded_and_closes_the_sockets_when_close_hangs() -> None:
    pc = RTCPeerConnection(rtc_configuration(None))
    pc.addTransceiver("audio", direction="sendonly")
    await set_local_description(pc, await pc.createOffer())
    sockets = [p.transport for c in ice_connections(pc) for p in c._protocols]
    assert sockets

    async def hang() -> None:
        await asyncio.Event().wait()

    pc.close = hang  # a close that never finishes (a stuck DTLS or RTP teardown)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(HANG_GUARD):  # pc.close() never ends: only the bound can
        await close_peer(pc, 0.3)
    assert loop.time() - started < HANG_GUARD  # a hang guard, not a speed claim
    assert all(t.is_closing() for t in sockets)


@pytest.mark.usefixtures("two_host_addresses")
async def test_close_peer_closes_every_socket_when_the_ice_close_is_cut_short() -> None:
    """aioice closes its sockets one at a time, each waiting for the loop to report it
    closed; a close cut short by the deadline (a loaded loop) left the later ones open
    (one way to get the unclosed ``<socket ... proto=17>`` a fresh-clone run reported)."""
    pc = RTCPeerConnection(rtc_configuration(None))
    pc.addTransceiver("audio", direction="sendonly")
    await set_local_description(pc, await pc.createOffer())
    protocols = [p for c in ice_connections(pc) for p in c._protocols]
    assert len(protocols) >= 2
    sockets = [p.transport for p in protocols]

    async def hang() -> None:
        await asyncio.Event().wait()

    pc.close = hang  # so close_peer closes the ICE connections itself, against its deadline
    protocols[0].close = hang  # the first socket's close never reports back
    async with asyncio.timeout(HANG_GUARD):
        await close_peer(pc, 0.3)
    assert [t.is_closing() for t in sockets[1:]] == [True] * (len(sockets) - 1)


@pytest.mark.usefixtures("two_host_addresses")
async def test_a_session_closed_while_its_offer_gathers_leaves_no_socket(
    staging: StagingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = BindGate(pause_at=2)  # the client's ASR offer: the first gathering of the session
    gate.install(monkeypatch)
    session = AvatarSession(
        staging.url,
        staging.token,
        video=False,
        allow_insecure_transport=True,
        config=FAST.with_(overall_connect_timeout=10.0),
    )
    connecting = asyncio.ensure_future(session.connect())
    await asyncio.wait_for(gate.reached.wait(), 5)
    lanes = session.media
    assert lanes is not None and lanes.asr is not None
    pc = lanes.asr.pc
    is_closed = closed(pc)
    closing = asyncio.ensure_future(session.close())
    await wait(is_closed)
    gate.release.set()
    await asyncio.wait_for(closing, 5)
    await asyncio.gather(connecting, return_exceptions=True)
    assert gate.transports
    assert gate.open() == []


async def test_a_peer_closed_as_its_ice_checks_complete_leaves_no_consent_task() -> None:
    """aioice's ``close()`` finds no consent task while ``connect()`` waits to resume from
    the check list's verdict; ``connect()`` then starts one on the closed connection, which
    loops every ~5 s for ever (nothing left to check, so it never expires). Seen in the
    chaos soak: a staging peer's ``Connection.query_consent`` task alive after the session
    and the server were gone. The close is scheduled here right as the checks complete,
    before ``connect()`` resumes: that interleaving every time."""
    offerer, answerer = RTCPeerConnection(), RTCPeerConnection()
    closing: list[asyncio.Task[None]] = []
    try:
        offerer.addTransceiver("audio", direction="sendonly")
        await set_local_description(offerer, await offerer.createOffer())
        await answerer.setRemoteDescription(offerer.localDescription)
        await set_local_description(answerer, await answerer.createAnswer())
        (connection,) = ice_connections(answerer)
        verdicts = connection._check_list_state
        put = verdicts.put_nowait

        def close_first(verdict: int) -> None:
            if verdict == aioice.ice.ICE_COMPLETED and not closing:
                closing.append(asyncio.ensure_future(close_peer(answerer, 2.0)))
            put(verdict)

        verdicts.put_nowait = close_first
        await offerer.setRemoteDescription(answerer.localDescription)
        assert await until(lambda: bool(closing) and closing[0].done(), 5.0)
        assert answerer.connectionState == "closed"
        consent = connection._query_consent_task
        assert consent is None or consent.done(), f"consent checks left running: {consent!r}"
    finally:
        await close_peer(offerer, 2.0)
        await close_peer(answerer, 2.0)
