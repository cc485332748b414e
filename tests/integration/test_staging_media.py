"""The staging backend's media side (ASR uplink over the socket, WHEP downlink) with real
aiortc peers over loopback.

The client here is deliberately minimal (raw Socket.IO + bare aiortc), not the SDK: these
tests pin down the server the SDK's own media tests run against.
"""

from __future__ import annotations

import array
import asyncio
import fractions
import math
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import av
import pytest
import pytest_asyncio
from aioice import Connection
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription, sdp
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.rtcicetransport import candidate_to_aioice

from avatar_sdk.media.levels import frame_rms
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.leaks import media_tasks
from avatar_sdk.testing.staging.media import IcePath
from avatar_sdk.testing.synthetic import read_frame_counter
from avatar_sdk.transport.socketio.csr import RecoveringAsyncClient
from avatar_sdk.wire import build_join

from .conftest import until

pytestmark = pytest.mark.staging_leftovers(
    "a raw protocol client, not the SDK: it never DELETEs its WHEP resources"
)

RATE = 48_000
SAMPLES = 960


class SineTrack(MediaStreamTrack):
    """440 Hz at half scale, 20 ms frames, paced on the wall clock."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._pts = 0
        self._start: float | None = None

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        due = self._start + self._pts / RATE
        if due > now:
            await asyncio.sleep(due - now)
        samples = array.array(
            "h",
            (
                int(16000 * math.sin(2 * math.pi * 440 * (self._pts + i) / RATE))
                for i in range(SAMPLES)
            ),
        )
        frame = av.AudioFrame(format="s16", layout="mono", samples=SAMPLES)
        frame.planes[0].update(samples.tobytes())
        frame.sample_rate = RATE
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, RATE)
        self._pts += SAMPLES
        return frame


def new_pc() -> RTCPeerConnection:
    return RTCPeerConnection(RTCConfiguration(iceServers=[]))


@dataclass
class Client:
    """A joined raw Socket.IO client plus the peers a test opened (closed at teardown)."""

    sio: RecoveringAsyncClient
    sid: str
    stv: dict[str, Any]
    inbox: dict[str, asyncio.Queue[Any]]
    pcs: list[RTCPeerConnection] = field(default_factory=list)

    async def next(self, event: str, timeout: float = 5.0) -> Any:
        return await asyncio.wait_for(self.inbox[event].get(), timeout)

    def pc(self) -> RTCPeerConnection:
        pc = new_pc()
        self.pcs.append(pc)
        return pc

    async def asr_connect(self, *, is_reconnect: bool = False) -> RTCPeerConnection:
        """init → ready → offer → answer with a sine-sending peer."""
        await self.sio.emit("asr-webrtc-init", {"sessionId": self.sid})
        assert await self.next("asr-webrtc-ready") == {}
        pc = self.pc()
        pc.addTransceiver(SineTrack(), direction="sendonly")
        await self.asr_offer(pc, is_reconnect=is_reconnect)
        return pc

    async def asr_offer(self, pc: RTCPeerConnection, *, is_reconnect: bool) -> None:
        await pc.setLocalDescription(await pc.createOffer())
        offer = {"type": "offer", "sdp": pc.localDescription.sdp}
        await self.sio.emit("asr-webrtc-offer", {"offer": offer, "is_reconnect": is_reconnect})
        answer = (await self.next("asr-webrtc-answer"))["answer"]
        assert answer["type"] == "answer"
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type="answer"))

    async def whep(
        self, *, url: str | None = None, content_type: str = "application/sdp"
    ) -> tuple[int, str | None, str, RTCPeerConnection, dict[str, MediaStreamTrack]]:
        """POST a recv-only video+audio offer; returns status, Location, body, pc, tracks."""
        pc = self.pc()
        pc.addTransceiver("video", direction="recvonly")
        pc.addTransceiver("audio", direction="recvonly")
        tracks: dict[str, MediaStreamTrack] = {}
        pc.on("track", lambda track: tracks.__setitem__(track.kind, track))
        await pc.setLocalDescription(await pc.createOffer())
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                url or self.stv["webrtc_url"],
                data=pc.localDescription.sdp.encode(),
                headers={"Content-Type": content_type},
            ) as response,
        ):
            body = await response.text()
            status, location = response.status, response.headers.get("Location")
            if status == 201:
                assert response.content_type == "application/sdp"
                await pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))
        return status, location, body, pc, tracks

    async def close(self) -> None:
        for pc in self.pcs:
            await pc.close()
        await self.sio.close_gracefully(1.0)


async def join(staging: StagingServer, room: str = "room-media") -> Client:
    sio = RecoveringAsyncClient()
    inbox: dict[str, asyncio.Queue[Any]] = defaultdict(asyncio.Queue)

    async def _any(event: str, *args: Any) -> None:
        inbox[event].put_nowait(args[0] if args else None)

    sio.on("*", _any)

    await sio.connect(staging.url, auth={"token": staging.token}, transports=["websocket"])
    await sio.emit("join", build_join(room_id=room, token=staging.token))
    await asyncio.wait_for(inbox["joinComplete"].get(), 5)
    await sio.emit("stvNewSession", {"room_id": room})
    stv = await asyncio.wait_for(inbox["stvNewSession"].get(), 5)
    return Client(sio, sio.get_sid(), stv, inbox)


@pytest_asyncio.fixture
async def client(staging: StagingServer) -> AsyncIterator[Client]:
    joined = await join(staging)
    yield joined
    await joined.close()


async def frames(track: MediaStreamTrack, count: int, timeout: float = 5.0) -> list[Any]:
    return [await asyncio.wait_for(track.recv(), timeout) for _ in range(count)]


async def drain(track: MediaStreamTrack, quiet: float) -> int:
    """Read until ``track`` stays silent for ``quiet`` seconds; how many frames were read."""
    for read in range(200):
        try:
            await asyncio.wait_for(track.recv(), quiet)
        except TimeoutError:
            return read
    raise AssertionError("frames never stopped")


async def rtp_sent(pc: RTCPeerConnection) -> int:
    """RTP packets the client peer's senders have sent so far."""
    sent = 0
    for sender in pc.getSenders():
        report = await sender.getStats()
        sent += sum(s.packetsSent for s in report.values() if s.type == "outbound-rtp")
    return sent


async def sent_more(pc: RTCPeerConnection, mark: int, packets: int) -> bool:
    return await rtp_sent(pc) >= mark + packets


def leftover_media_tasks() -> list[asyncio.Task[Any]]:
    """Tasks of peer connections on either end (aiortc, aioice, the staging's media)."""
    return media_tasks()


# -- ASR uplink ------------------------------------------------------------------------------
async def test_asr_uplink_audio_reaches_the_server(staging: StagingServer, client: Client) -> None:
    pc = await client.asr_connect()
    assert await until(lambda: pc.connectionState == "connected", 5)
    assert await until(lambda: staging.media.asr_stats(client.sid).frames >= 25, 5)
    stats = staging.media.asr_stats(client.sid)
    assert stats.energy > 0.05  # a half-scale sine, through Opus
    assert stats.peer_state == "connected"
    assert stats.first_frame_at is not None and stats.last_frame_at is not None
    assert stats.last_frame_at >= stats.first_frame_at
    assert stats.peers_created == 1 and stats.answers == 1
    peer = staging.media.asr_peer(client.sid)
    assert peer is not None and peer.last_method == "fresh"
    answer_sdp = peer.pc.localDescription.sdp
    assert "a=recvonly" in answer_sdp and "opus" in answer_sdp.lower()
    assert staging.emitted["asr-webrtc-answer"] == 1
    # The server sends RTCP receiver reports: the client's sender sees them as remote stats.
    sender = pc.getSenders()[0]

    async def has_remote_inbound() -> bool:
        report = await sender.getStats()
        return any(s.type == "remote-inbound-rtp" for s in report.values())

    assert await until(has_remote_inbound, 5, step=0.2), "no RTCP receiver report"


async def test_asr_trickled_candidates_junk_is_ignored(
    staging: StagingServer, client: Client
) -> None:
    pc = await client.asr_connect()
    line = next(x[2:] for x in pc.localDescription.sdp.splitlines() if x.startswith("a=candidate:"))
    emit = client.sio.emit
    await emit("asr-webrtc-ice-candidate", {"candidate": {"candidate": line, "sdpMid": "0"}})
    junk = [
        {"candidate": {"candidate": "candidate:garbage", "sdpMid": "0", "sdpMLineIndex": 0}},
        {"candidate": {"candidate": 42}},
        {"candidate": "not a candidate at all"},
        {"nothing": True},
        "a string payload",
    ]
    for payload in junk:
        await emit("asr-webrtc-ice-candidate", payload)
    assert await until(lambda: staging.media.asr_stats(client.sid).candidates_rejected >= 3, 3)
    stats = staging.media.asr_stats(client.sid)
    assert stats.candidates_added == 1
    assert await until(lambda: staging.media.asr_stats(client.sid).frames >= 10, 5)


async def test_asr_reconnect_offers_renegotiate_restart_or_replace(
    staging: StagingServer, client: Client
) -> None:
    pc = await client.asr_connect()
    assert await until(lambda: staging.media.asr_stats(client.sid).frames >= 5, 5)
    peer = staging.media.asr_peer(client.sid)
    assert peer is not None
    server_pc = peer.pc
    # Same client peer, same ICE credentials: renegotiated on the same server peer.
    await client.asr_offer(pc, is_reconnect=True)
    assert peer.last_method == "renegotiate" and peer.pc is server_pc
    before = staging.media.asr_stats(client.sid).frames
    assert await until(lambda: staging.media.asr_stats(client.sid).frames >= before + 10, 5)
    # ICE fails (server side closes): the client's aiortc peer closes; a fresh client peer
    # offering with is_reconnect replaces the server peer.
    assert await staging.faults.ice_failure("asr") == 1
    assert await until(lambda: pc.connectionState == "closed", 3)
    assert staging.media.asr_stats(client.sid).peer_state == "closed"
    fresh = client.pc()
    fresh.addTransceiver(SineTrack(), direction="sendonly")
    await client.asr_offer(fresh, is_reconnect=True)
    assert peer.last_method == "fresh" and peer.pc is not server_pc
    before = staging.media.asr_stats(client.sid).frames
    assert await until(lambda: staging.media.asr_stats(client.sid).frames >= before + 10, 5)
    stats = staging.media.asr_stats(client.sid)
    assert stats.peers_created == 2 and stats.renegotiations == 1
    assert staging.media.open_peer_count() == 1


async def test_asr_ice_restart_moves_the_same_server_peer_to_a_new_path(
    staging: StagingServer, client: Client
) -> None:
    """Blackholed path, then a client-side ICE restart (new ufrag, same DTLS session): the
    server swaps its aioice connection under the same peer, and audio flows again."""
    await client.sio.emit("asr-webrtc-init", {"sessionId": client.sid})
    await client.next("asr-webrtc-ready")
    pc = client.pc()
    pc.addTransceiver(SineTrack(), direction="sendonly")
    await client.asr_offer(pc, is_reconnect=False)
    # Before DTLS starts, so the client's DTLS can later move to the new path as well.
    ice = pc.getTransceivers()[0].sender.transport.transport
    path = IcePath(ice, blocked=lambda: False, grace=10.0)
    assert await until(lambda: staging.media.asr_stats(client.sid).frames >= 10, 5)
    peer = staging.media.asr_peer(client.sid)
    assert peer is not None
    server_pc = peer.pc
    assert await staging.faults.ice_failure("asr", mode="blackhole") == 1
    # Counted in packets the client sent into the void, not in seconds: once 15 went (what
    # was already on its way has been decoded), 20 more must not add a single frame.
    mark = await rtp_sent(pc)
    assert await until(lambda: sent_more(pc, mark, 15), 5)
    frozen = staging.media.asr_stats(client.sid).frames
    mark = await rtp_sent(pc)
    assert await until(lambda: sent_more(pc, mark, 20), 5)
    assert staging.media.asr_stats(client.sid).frames == frozen
    new = Connection(ice_controlling=path.active.ice_controlling)
    await new.gather_candidates()
    ice.iceGatherer._connection = new  # the re-offer carries the new ufrag/pwd/candidates
    await pc.setLocalDescription(await pc.createOffer())
    offer = {"type": "offer", "sdp": pc.localDescription.sdp}
    await client.sio.emit("asr-webrtc-offer", {"offer": offer, "is_reconnect": True})
    answer = (await client.next("asr-webrtc-answer"))["answer"]["sdp"]
    media = sdp.SessionDescription.parse(answer).media[0]
    assert media.ice is not None
    new.remote_username = media.ice.usernameFragment
    new.remote_password = media.ice.password
    for candidate in media.ice_candidates:
        await new.add_remote_candidate(candidate_to_aioice(candidate))
    await new.add_remote_candidate(None)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    await asyncio.wait_for(new.connect(), 5)
    await path.switch_to(new).close()
    assert await until(lambda: staging.media.asr_stats(client.sid).frames >= frozen + 10, 5)
    stats = staging.media.asr_stats(client.sid)
    assert peer.pc is server_pc and peer.last_method == "ice_restart"
    assert stats.ice_restarts == 1 and stats.peers_created == 1
    assert stats.peer_state == "connected"
    await client.close()  # the conversation ends: the restarted peer and its tasks go too
    assert await until(lambda: staging.media.open_peer_count() == 0, 3)
    assert staging.media.asr_stats(client.sid).frames >= frozen + 10  # kept after the end
    assert await until(lambda: leftover_media_tasks() == [], 2), leftover_media_tasks()


async def test_asr_stall_drops_rtp_and_rtcp_while_connected(
    staging: StagingServer, client: Client
) -> None:
    pc = await client.asr_connect()
    assert await until(lambda: staging.media.asr_stats(client.sid).frames >= 5, 5)
    await staging.faults.media_stall("asr")
    # Counted in packets the server dropped, not in seconds: once 15 were (what arrived
    # before the stall has been decoded), 30 more must not add a single frame.
    assert await until(lambda: staging.media.asr_stats(client.sid).srtp_dropped >= 15, 5)
    stalled_at = staging.media.asr_stats(client.sid).frames
    dropped = staging.media.asr_stats(client.sid).srtp_dropped
    assert await until(lambda: staging.media.asr_stats(client.sid).srtp_dropped >= dropped + 30, 5)
    stats = staging.media.asr_stats(client.sid)
    assert stats.frames == stalled_at and stats.srtp_dropped > 0
    assert pc.connectionState == "connected" and stats.peer_state == "connected"
    staging.faults.clear()
    assert await until(lambda: staging.media.asr_stats(client.sid).frames > stalled_at + 5, 5)


@pytest.mark.parametrize("fault", ["stuck_no_answer", "withhold"])
async def test_asr_answer_never_comes(staging: StagingServer, client: Client, fault: str) -> None:
    if fault == "withhold":
        staging.faults.withhold("asr-webrtc-answer")
    else:
        staging.faults.stuck_ice("asr", mode="no_answer")
    await client.sio.emit("asr-webrtc-init", {"sessionId": client.sid})
    await client.next("asr-webrtc-ready")
    pc = client.pc()
    pc.addTransceiver(SineTrack(), direction="sendonly")
    await pc.setLocalDescription(await pc.createOffer())
    offer = {"type": "offer", "sdp": pc.localDescription.sdp}
    await client.sio.emit("asr-webrtc-offer", {"offer": offer, "is_reconnect": False})
    with pytest.raises(TimeoutError):
        await client.next("asr-webrtc-answer", timeout=0.5)
    assert staging.media.asr_stats(client.sid).offers == 1


async def test_asr_junk_offer_answers_an_error(staging: StagingServer, client: Client) -> None:
    await client.sio.emit("asr-webrtc-offer", {"offer": {"type": "offer", "sdp": "v=0\r\nx"}})
    await client.sio.emit("asr-webrtc-offer", {"offer": "nope"})
    assert "error" in await client.next("asr-webrtc-error")
    assert "error" in await client.next("asr-webrtc-error")
    assert staging.media.open_peer_count() == 0
    await client.asr_connect()  # still serving
    assert await until(lambda: staging.media.asr_stats(client.sid).frames >= 5, 5)


# -- STV downlink (WHEP) -----------------------------------------------------------------------
async def test_whep_subscribe_receives_h264_pattern_and_voice(
    staging: StagingServer, client: Client
) -> None:
    stream = client.stv["session_id"]
    assert client.stv["webrtc_url"] == (f"{staging.url}/rtc/v1/whep/?app=app&stream={stream}")
    status, location, body, pc, tracks = await client.whep()
    assert status == 201
    assert location is not None and location.startswith("/rtc/v1/whep/resource/")
    assert "a=sendonly" in body and "H264/90000" in body
    video = await frames(tracks["video"], 5)
    assert (video[0].width, video[0].height) == (320, 240)
    counters = [read_frame_counter(f) for f in video]
    numbers = [c for c in counters if c is not None]
    assert len(numbers) == len(counters) and numbers == sorted(numbers)
    assert staging.media.live_viewers(stream) == 1
    assert staging.media.viewers_of(stream)[0].video_codec == "video/H264"
    # Silence while the avatar is quiet, the tone while it speaks.
    quiet = await frames(tracks["audio"], 5)
    assert max(frame_rms(f) for f in quiet) < 0.001
    staging.conversations[client.sid].speaking = True
    loud = 0.0
    for _ in range(100):
        frame = await asyncio.wait_for(tracks["audio"].recv(), 2)
        assert isinstance(frame, av.AudioFrame)
        loud = max(loud, frame_rms(frame))
        if loud > 0.05:
            break
    assert loud > 0.05
    assert staging.media.frames_sent >= 5
    # DELETE ends the viewer once; the resource is then unknown.
    resource = staging.url + location
    async with aiohttp.ClientSession() as http:
        async with http.delete(resource) as first:
            assert first.status == 200
        async with http.delete(resource) as second:
            assert second.status == 404
    assert await until(lambda: pc.connectionState == "closed", 3)
    assert staging.media.whep_posts == 1 and staging.media.whep_deletes == 2
    assert staging.media.whep_statuses == [201]
    assert staging.media.open_peer_count() == 0


async def test_whep_refusals(staging: StagingServer, client: Client) -> None:
    url = client.stv["webrtc_url"]
    assert (await client.whep(content_type="text/plain"))[0] == 415
    unknown = url.replace(client.stv["session_id"], "stv-nope")
    status, _, body, *_ = await client.whep(url=unknown)
    assert (status, body) == (404, "NO_ACTIVE_SESSION")
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=b"v=0\r\njunk", headers={"Content-Type": "application/sdp"}) as bad,
    ):
        assert bad.status == 400
    staging.faults.whep_404(times=1)
    status, _, body, *_ = await client.whep()
    assert (status, body) == (404, "NO_ACTIVE_SESSION")
    status, _, _, pc, _ = await client.whep()
    assert status == 201
    assert await until(lambda: pc.connectionState == "connected", 5)
    assert (await client.whep())[0] == 409
    assert staging.media.whep_statuses == [415, 404, 400, 404, 201, 409]
    assert staging.media.live_viewers() == 1


async def test_audio_only_mode_has_no_stv_session() -> None:
    async with StagingServer(audio_only=True) as staging:
        joined = await join(staging)
        try:
            assert joined.stv == {"status": "audio/phone mode - no STV session"}
            url = f"{staging.url}/rtc/v1/whep/?app=app&stream=stv-{joined.sid[:8]}"
            assert (await joined.whep(url=url))[0] == 404
            await joined.asr_connect()  # only the ASR uplink connects
            assert await until(lambda: staging.media.asr_stats(joined.sid).frames >= 5, 5)
        finally:
            await joined.close()


async def test_stv_media_stall_stops_frames_while_ice_stays_up(
    staging: StagingServer, client: Client
) -> None:
    status, _, _, pc, tracks = await client.whep()
    assert status == 201
    await frames(tracks["video"], 3)
    await staging.faults.media_stall("stv", seconds=None)
    await drain(tracks["video"], quiet=0.5)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(tracks["video"].recv(), 1.0)
    assert pc.connectionState == "connected"
    assert pc.iceConnectionState == "completed"  # aiortc's name for connected
    staging.faults.clear()
    resumed = await frames(tracks["video"], 3, timeout=3)
    assert read_frame_counter(resumed[-1]) is not None


async def test_stv_media_stall_with_a_duration_ends_by_itself(
    staging: StagingServer, client: Client
) -> None:
    _, _, _, _, tracks = await client.whep()
    await frames(tracks["video"], 2)
    started = time.monotonic()
    await staging.faults.media_stall("stv", seconds=0.8)
    await drain(tracks["video"], quiet=0.3)
    await frames(tracks["video"], 2, timeout=3)
    assert time.monotonic() - started >= 0.7


async def test_stv_ice_failure_takes_the_client_peer_down(
    staging: StagingServer, client: Client
) -> None:
    status, _, _, pc, tracks = await client.whep()
    assert status == 201
    await frames(tracks["video"], 3)
    assert await staging.faults.ice_failure("stv") == 1
    assert await until(lambda: pc.connectionState in ("failed", "closed"), 3)
    assert staging.media.live_viewers() == 0
    # The stream is still there: a re-subscribe is answered.
    status, *_ = await client.whep()
    assert status == 201


async def test_stv_stuck_ice_no_candidates_and_no_answer(
    staging: StagingServer, client: Client
) -> None:
    staging.faults.stuck_ice("stv", mode="no_candidates")
    status, _, body, pc, _ = await client.whep()
    assert status == 201
    assert "a=candidate" not in body and "a=end-of-candidates" not in body
    # A control: an uplink peer started after this one connects and carries audio; by then
    # the stuck downlink would have connected too, had it a path. It has not.
    await client.asr_connect()
    assert await until(lambda: staging.media.asr_stats(client.sid).frames >= 10, 5)
    assert pc.iceConnectionState == "checking"
    await pc.close()
    staging.faults.clear()
    staging.faults.stuck_ice("stv", mode="no_answer")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(client.whep(), 0.5)  # the client gives up
    assert await until(lambda: staging.media.whep_statuses[-1:] == [504], 2)
    staging.faults.clear()
    assert (await client.whep())[0] == 201


async def test_conversation_end_and_stop_close_every_peer() -> None:
    staging = await StagingServer().start()
    try:
        first, second = await join(staging, "room-a"), await join(staging, "room-b")
        await first.asr_connect()
        status, *_ = await first.whep()
        assert status == 201
        await second.asr_connect()
        _, _, _, pc, tracks = await second.whep()
        await frames(tracks["video"], 2)
        assert staging.media.open_peer_count() == 4
        await first.close()  # a client disconnect: its conversation's peers close
        assert await until(lambda: staging.media.open_peer_count() == 2, 3)
    finally:
        await staging.stop()
    assert staging.media.open_peer_count() == 0
    assert await until(lambda: pc.connectionState == "closed", 3)
    await second.close()
    assert await until(lambda: leftover_media_tasks() == [], 2), leftover_media_tasks()
