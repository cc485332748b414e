"""A client that restarts ICE on its uplink (issue 17, item 13): the staging backend answers
the restart offer in place and audio keeps reaching its ASR answerer, as after a fresh peer.

The client is the SDK's own uplink peer. aiortc cannot restart ICE by itself, so the test
does what a browser's ``restartIce()`` does with :class:`~avatar_sdk.testing.staging.media.IcePath`
(RECOVERY-NOTES: a new aioice connection under the same DTLS session), installed on every
SDK uplink from its birth, before DTLS starts, as an ICE agent owns its path.
"""

from __future__ import annotations

from typing import Any

import pytest
from aioice import Connection
from aiortc import RTCSessionDescription, sdp
from aiortc.rtcicetransport import candidate_to_aioice

from avatar_sdk import AvatarSession, ErrorCode
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.staging.media import IcePath
from avatar_sdk.testing.staging.rtc_util import blackhole, strip_candidates
from avatar_sdk.transport.rtc.asr import AsrUplink
from avatar_sdk.transport.rtc.media import MediaLanes
from avatar_sdk.wire import In, Out, build_asr_offer
from avatar_sdk.wire.inbound import AsrAnswer

from .conftest import FAST, until

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0, media_recovery_timeout=5.0)


@pytest.fixture
def uplink_paths(monkeypatch: pytest.MonkeyPatch) -> list[IcePath]:
    """Every SDK uplink peer gets an :class:`IcePath` from birth (DTLS then only ever reads
    and writes through it), like an ICE agent that can restart."""
    paths: list[IcePath] = []
    build = MediaLanes._new_uplink

    def new_uplink(self: MediaLanes) -> AsrUplink:
        uplink = build(self)
        ice = uplink.pc.getTransceivers()[0].sender.transport.transport
        paths.append(IcePath(ice, blocked=lambda: False, grace=10.0))
        return uplink

    monkeypatch.setattr(MediaLanes, "_new_uplink", new_uplink)
    return paths


async def restart_uplink_ice(session: AvatarSession, path: IcePath, *, trickle: bool) -> None:
    """A browser's ICE restart on the SDK's uplink peer: new credentials and candidates in
    an ``is_reconnect`` re-offer on the live socket (``trickle``: the offer carries none,
    each candidate follows as ``asr-webrtc-ice-candidate``, no end-of-candidates, as the
    reference client sends them), then the same DTLS session moved to the new path."""
    lanes, link = session.media, session._slot.current
    assert lanes is not None and lanes.asr is not None and link is not None
    pc = lanes.asr.pc
    new = Connection(ice_controlling=path.active.ice_controlling)
    await new.gather_candidates()
    path.ice.iceGatherer._connection = new  # the re-offer carries the new ufrag/pwd
    await pc.setLocalDescription(await pc.createOffer())
    offer = str(pc.localDescription.sdp)
    answer_fut = lanes._expect_event(In.ASR_WEBRTC_ANSWER)
    await link.emit(
        Out.ASR_WEBRTC_OFFER,
        build_asr_offer(strip_candidates(offer) if trickle else offer, is_reconnect=True),
    )
    if trickle:
        for candidate in new.local_candidates:
            line = {"candidate": "candidate:" + candidate.to_sdp(), "sdpMid": "0"}
            line |= {"sdpMLineIndex": 0, "usernameFragment": new.local_username}
            await link.emit(Out.ASR_WEBRTC_ICE_CANDIDATE, {"candidate": line})
    answer = await lanes._await_expected(answer_fut, 5.0, "answer", ErrorCode.ASR_FAILED)
    assert isinstance(answer, AsrAnswer)
    media = sdp.SessionDescription.parse(answer.sdp).media[0]
    assert media.ice is not None
    new.remote_username = media.ice.usernameFragment
    new.remote_password = media.ice.password
    for candidate in media.ice_candidates:
        await new.add_remote_candidate(candidate_to_aioice(candidate))
    await new.add_remote_candidate(None)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer.sdp, type="answer"))
    await new.connect()
    await path.switch_to(new).close()


@pytest.mark.parametrize(
    ("dead", "trickle"),
    [("healthy", False), ("client", True), ("server", True), ("server_gave_up", True)],
)
async def test_audio_reaches_the_answerer_after_a_client_ice_restart(
    staging: StagingServer, uplink_paths: list[IcePath], dead: str, trickle: bool
) -> None:
    """``dead``: which path died before the restart: none, the client's side, the server's
    (``ice_failure(mode="blackhole")``), or the server's after its consent checks gave up
    (its aioice connection closed, the peer ``failed``)."""
    session = AvatarSession(
        staging.url, staging.token, audio=ToneSource(), video=False,
        allow_insecure_transport=True, config=MEDIA,
    )  # fmt: skip
    recoveries: list[dict[str, Any]] = []
    session.on("media_recovering", lambda e: recoveries.append(dict(e.data)))
    await session.connect()
    try:
        sid = staging.live_sids[0]
        [path] = uplink_paths
        assert await until(lambda: staging.media.asr_stats(sid).frames >= 60, 5)
        peer = staging.media.asr_peer(sid)
        assert peer is not None and peer._path is not None
        server_pc, server_path = peer.pc, peer._path
        if dead == "client":
            blackhole(path.active)
        elif dead == "server":
            assert await staging.faults.ice_failure("asr", mode="blackhole") == 1
        elif dead == "server_gave_up":
            blackhole(path.active)
            await server_path.active.close()  # what aioice does after 6 missed consents
            assert await until(lambda: staging.media.asr_stats(sid).ice_state == "failed", 3)
        await restart_uplink_ice(session, path, trickle=trickle)
        before = staging.media.asr_stats(sid).frames
        assert await until(lambda: staging.media.asr_stats(sid).frames >= before + 50, 5)
        stats = staging.media.asr_stats(sid)
        # On the restarted path of the same server peer, not on a fresh one of the SDK's.
        assert peer.pc is server_pc and peer.last_method == "ice_restart"
        assert stats.ice_restarts == 1 and stats.peers_created == 1
        assert stats.peer_state == "connected" and recoveries == []
    finally:
        await session.close()
