"""An ICE restart that comes after the staging's ASR peer gave up (issue 34, item 1).

A browser (or the reference client in Node) calls its uplink ``failed`` only after about
30 s without an answer to its checks, about when the server's own consent checks give up
on the same path: the restart offer (``asr-webrtc-offer {is_reconnect: true}``, same DTLS
certificate, new ICE credentials) then reaches a server peer that is already ``failed``.
The SDK restarts within seconds, before that; this client waits like a browser.

The client is a raw aiortc peer on a raw Socket.IO client (no SDK session), restarting its
ICE the way a browser's ``restartIce()`` does: a new ICE agent under the same DTLS session
(:class:`~avatar_sdk.testing.staging.rtc_util.IcePath`, as in test_staging_ice_restart).
aioice's consent checks run every 0.2 s here instead of 5 s, so "gave up" takes about a
second and a half instead of 30 s (the same code path, on both sides)."""

from __future__ import annotations

import asyncio
from typing import Any

import aioice.ice
import pytest
import socketio
from aioice import Connection
from aiortc import RTCPeerConnection, RTCSessionDescription, sdp
from aiortc.mediastreams import AudioStreamTrack
from aiortc.rtcicetransport import candidate_to_aioice

from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.staging.rtc_util import IcePath

from ..conftest import until


class BrowserLikeUplink:
    """The ASR half of a web client: socket, offer, trickle-free answer, late ICE restart."""

    def __init__(self, staging: StagingServer) -> None:
        self.staging = staging
        self.sio = socketio.AsyncClient(reconnection=False)
        self.answers: asyncio.Queue[str] = asyncio.Queue()
        self.ready = asyncio.Event()
        self.pc = RTCPeerConnection()
        self.pc.addTrack(AudioStreamTrack())  # 20 ms frames of silence: counted all the same
        ice = self.pc.getTransceivers()[0].sender.transport.transport
        self.path = IcePath(ice, blocked=lambda: False, grace=120.0)

        @self.sio.on("asr-webrtc-ready")
        async def ready(*args: Any) -> None:
            self.ready.set()

        @self.sio.on("asr-webrtc-answer")
        async def answer(data: Any, *rest: Any) -> None:
            await self.answers.put(data["answer"]["sdp"])

    async def connect(self) -> None:
        await self.sio.connect(
            self.staging.url, auth={"token": self.staging.token}, transports=["websocket"]
        )
        await self.sio.emit("asr-webrtc-init", {"sessionId": self.sio.sid})
        await asyncio.wait_for(self.ready.wait(), 5)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        answer = await self._offer(is_reconnect=False)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))

    async def _offer(self, *, is_reconnect: bool) -> str:
        offer = {"type": "offer", "sdp": str(self.pc.localDescription.sdp)}
        await self.sio.emit("asr-webrtc-offer", {"offer": offer, "is_reconnect": is_reconnect})
        return await asyncio.wait_for(self.answers.get(), 10)

    async def restart_ice(self) -> None:
        """``restartIce()``: new ICE credentials, same pc and DTLS session."""
        new = Connection(ice_controlling=self.path.active.ice_controlling)
        await new.gather_candidates()
        self.path.ice.iceGatherer._connection = new  # the re-offer carries the new ufrag/pwd
        await self.pc.setLocalDescription(await self.pc.createOffer())
        answer = await self._offer(is_reconnect=True)
        media = sdp.SessionDescription.parse(answer).media[0]
        assert media.ice is not None
        new.remote_username = media.ice.usernameFragment
        new.remote_password = media.ice.password
        for candidate in media.ice_candidates:
            await new.add_remote_candidate(candidate_to_aioice(candidate))
        await new.add_remote_candidate(None)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        await asyncio.wait_for(new.connect(), 10)
        await self.path.switch_to(new).close()

    async def close(self) -> None:
        await self.pc.close()
        await self.sio.disconnect()


@pytest.fixture
def quick_consent(monkeypatch: pytest.MonkeyPatch) -> None:
    """aioice's consent checks every 0.2 s (6 missed: gave up after about 1.2 s)."""
    monkeypatch.setattr(aioice.ice, "CONSENT_INTERVAL", 0.2)


@pytest.mark.parametrize("after_grace", [False, True], ids=["just_failed", "long_failed"])
async def test_a_restart_after_the_server_peer_gave_up_carries_audio(
    staging: StagingServer, quick_consent: None, after_grace: bool
) -> None:
    """``after_grace``: the restart comes 11 s after the server's peer went ``failed``
    (the staging used to keep a dead path's DTLS session for 10 s only, then answered the
    restart with a fresh peer the client's DTLS session never met: no audio)."""
    client = BrowserLikeUplink(staging)
    try:
        await client.connect()
        [sid] = staging.live_sids
        assert await until(lambda: staging.media.asr_stats(sid).frames >= 50, 10), (
            staging.media.asr_stats(sid),
            client.pc.connectionState,
        )
        assert await staging.faults.ice_failure("asr", mode="blackhole") == 1
        assert await until(lambda: staging.media.asr_stats(sid).peer_state == "failed", 10)
        if after_grace:
            await asyncio.sleep(11.0)
        before = staging.media.asr_stats(sid).frames
        await client.restart_ice()
        assert await until(lambda: staging.media.asr_stats(sid).frames >= before + 50, 10), (
            staging.media.asr_stats(sid)
        )
        stats = staging.media.asr_stats(sid)
        # In place: the same server peer (its DTLS session kept), its ICE restarted.
        assert stats.peer_state == "connected" and stats.peers_created == 1
        assert stats.ice_restarts == 1
    finally:
        await client.close()
