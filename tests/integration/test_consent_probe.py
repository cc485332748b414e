"""The uplink's ICE consent probe on real aiortc/aioice peers over loopback: it guards the
private aioice 0.13 surface the probe uses (``RTCIceTransport._connection``,
``Connection._nominated``, ``build_request``, ``StunProtocol.request``) and shows that the
verdict follows the far end answering, or not."""

from __future__ import annotations

import asyncio
from typing import Any

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from avatar_sdk.clock import SYSTEM_CLOCK
from avatar_sdk.media import ToneSource
from avatar_sdk.testing.staging.rtc_util import blackhole, ice_transports
from avatar_sdk.transport.rtc.asr import AsrUplink, UplinkTrack
from avatar_sdk.transport.rtc.consent import _ice_connection

from .conftest import until

STALL = 1.0


async def _pair() -> tuple[AsrUplink, RTCPeerConnection]:
    uplink = AsrUplink(
        configuration=RTCConfiguration(iceServers=[]),
        track=UplinkTrack(ToneSource()),
        clock=SYSTEM_CLOCK,
        consent_deadline=STALL,
    )
    far = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    offer = await uplink.create_offer()
    await far.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
    await far.setLocalDescription(await far.createAnswer())
    await uplink.accept_answer(far.localDescription.sdp)
    await uplink.wait_connected(10.0)
    return uplink, far


def _probe_tasks() -> list[asyncio.Task[Any]]:
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done() and t.get_coro().cr_code.co_filename.endswith("consent.py")  # type: ignore[union-attr]
    ]


async def test_the_probe_is_answered_on_a_live_path_and_not_on_a_dead_one() -> None:
    uplink, far = await _pair()
    try:
        assert _ice_connection(uplink.pc)._nominated  # the private surface is there
        consent = uplink.consent
        assert consent.started_at == uplink.connected_at
        assert await until(lambda: consent.answers >= 4, 5.0)
        assert not consent.is_overdue()
        assert consent.sent >= consent.answers
        # The far end's path goes silent (no close): the answers stop, the verdict comes.
        for ice in ice_transports(far):
            blackhole(ice._connection)
        assert await until(consent.is_overdue, 3 * STALL)
        assert uplink.pc.connectionState == "connected"  # aiortc has not noticed (~30 s)
    finally:
        await uplink.close()
        await far.close()
    assert _probe_tasks() == []  # close() ended the loop and every open request


async def test_a_peer_closed_under_the_probe_stops_it() -> None:
    uplink, far = await _pair()
    try:
        assert await until(lambda: uplink.consent.answers >= 1, 5.0)
        assert _probe_tasks()
        await uplink.pc.close()  # aiortc closing the peer itself (e.g. consent expiry)
        assert await until(lambda: _probe_tasks() == [], 2.0)
    finally:
        await uplink.close()
        await far.close()
