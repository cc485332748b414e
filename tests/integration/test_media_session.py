"""Full audio+video sessions: real aiortc peers on both ends over loopback."""

from __future__ import annotations

import asyncio
import gc

import aiohttp
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection

from avatar_sdk import AvatarError, AvatarSession, ErrorCode
from avatar_sdk.clock import SYSTEM_CLOCK
from avatar_sdk.media import AudioLevelMeter, FailingSource, ToneSource
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.rtc.stv import FanoutTrack, StvDownlink

from .conftest import FAST, sdk_tasks, until

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0)


def _session(staging: StagingServer, **kwargs: object) -> AvatarSession:
    kwargs.setdefault("audio", ToneSource())
    kwargs.setdefault("config", MEDIA)
    return AvatarSession(staging.url, staging.token, allow_insecure_transport=True, **kwargs)  # type: ignore[arg-type]


def open_peers() -> list[RTCPeerConnection]:
    gc.collect()
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, RTCPeerConnection) and o.connectionState != "closed"
    ]


async def _energy_over(
    staging: StagingServer, sid: str, frames: int, timeout: float = 5.0
) -> tuple[int, float]:
    """Frames received while the next ``frames`` uplink frames arrive (at most ``timeout``
    seconds), and the loudest frame level seen over the second half of them. The window is
    counted in frames, not seconds: a busy machine measures the same stretch of audio."""
    before = staging.media.asr_stats(sid).frames
    levels: list[float] = []

    def sample() -> bool:
        stats = staging.media.asr_stats(sid)
        if stats.frames - before > frames // 2:
            levels.append(stats.last_rms or 0.0)
        return stats.frames - before >= frames

    await until(sample, timeout)
    levels.append(staging.media.asr_stats(sid).last_rms or 0.0)
    return staging.media.asr_stats(sid).frames - before, max(levels)


async def test_av_session_connects_through_the_media_steps_and_decodes_frames(
    staging: StagingServer,
) -> None:
    session = _session(staging)
    states: list[str] = []
    session.on("state_changed", lambda e: states.append(e.data["state"]))
    # Asked before connect(), which returns once the greeting has begun (its thread id).
    started = session.expect("agent_speech_started", timeout=10)
    try:
        await session.connect()
        assert states[-4:] == [
            "connecting_asr",
            "connecting_video",
            "connecting_approving",
            "connected",
        ]
        lanes = session.media
        assert lanes is not None and lanes.stv is not None
        assert not lanes.gate_capped  # approved after a decoded frame, not on the cap
        first_video = lanes.stv.first_frame_at["video"]
        await started  # the server got the approval
        approve = staging.received_events("approvedPermissions")[0].at
        assert approve >= first_video + 0.3  # the 0.3 s settle after the first frame
        assert session.avatar_video is not None and session.avatar_audio is not None
        frame = await asyncio.wait_for(session.avatar_video.recv(), 3)
        assert (frame.width, frame.height) > (0, 0)
        assert await asyncio.wait_for(session.avatar_audio.recv(), 3) is not None
    finally:
        await session.close()


async def test_uplink_audio_arrives_and_mute_stops_it_without_renegotiation(
    staging: StagingServer,
) -> None:
    session = _session(staging)
    try:
        await session.connect()
        sid = staging.live_sids[0]
        frames, level = await _energy_over(staging, sid, 30)
        assert frames > 10 and level > 0.05
        session.mic_enabled = False
        assert await until(lambda: staging.received_events("muteUser"), 3)
        assert await until(lambda: staging.media.asr_stats(sid).last_rms == 0.0, 3)
        frames, level = await _energy_over(staging, sid, 30)
        assert frames > 10 and level == 0.0  # packets keep flowing, audio is silent
        session.mic_enabled = True
        assert await until(lambda: staging.received_events("unmuteUser"), 3)
        assert await until(lambda: staging.media.asr_stats(sid).last_rms > 0.05, 3)
        frames, level = await _energy_over(staging, sid, 30)
        assert level > 0.05
        stats = staging.media.asr_stats(sid)
        assert stats.offers == 1  # no renegotiation for mute
        names = [r.event for r in staging.received]
        assert names.count("muteUser") == 1 and names.count("unmuteUser") == 1
    finally:
        await session.close()


async def test_avatar_voice_is_heard_while_it_speaks(staging: StagingServer) -> None:
    session = _session(staging)
    try:
        await session.connect()
        assert session.avatar_audio is not None
        async with AudioLevelMeter(session.avatar_audio, threshold=0.02) as meter:
            await meter.wait_for_speech(5)  # the greeting's tone reaches us
    finally:
        await session.close()


async def test_audio_phone_mode_connects_asr_only() -> None:
    async with StagingServer(audio_only=True) as staging:
        session = _session(staging)
        try:
            await session.connect()
            assert session.media is not None and session.media.audio_only
            assert session.avatar_video is None
            assert staging.media.whep_posts == 0
            await session.speak("hello")
            await session.wait_for("agent_turn_ended", timeout=3)
        finally:
            await session.close()


async def test_video_false_still_converses(staging: StagingServer) -> None:
    session = _session(staging, video=False)
    try:
        await session.connect()
        assert session.avatar_video is None and session.avatar_audio is not None
        await session.speak("audio only please")
        await session.wait_for("agent_turn_ended", timeout=3)
    finally:
        await session.close()


async def test_close_deletes_the_whep_resource_once_and_leaves_no_peer_task_or_socket(
    staging: StagingServer,
) -> None:
    session = _session(staging)
    await session.connect()
    assert len(open_peers()) >= 2
    await session.close()
    await session.close()
    assert await until(lambda: staging.live_sids == [], 2)
    assert staging.media.whep_posts == 1 and staging.media.whep_deletes == 1
    assert sdk_tasks() == []
    await staging.stop()
    assert open_peers() == []


async def test_whep_404_fails_connect_with_session_gone(staging: StagingServer) -> None:
    staging.faults.whep_404(times=1)
    session = _session(staging)
    with pytest.raises(AvatarError) as info:
        await session.connect()
    assert info.value.code is ErrorCode.SESSION_GONE
    assert session.state == "failed"
    assert await until(lambda: staging.live_sids == [], 2)  # the attempt's socket was closed
    assert sdk_tasks() == []


async def test_unanswered_asr_offer_is_asr_failed(staging: StagingServer) -> None:
    staging.faults.withhold("asr-webrtc-answer")
    session = _session(staging, config=MEDIA.with_(asr_timeout=0.5))
    with pytest.raises(AvatarError) as info:
        await session.connect()
    assert info.value.code is ErrorCode.ASR_FAILED


async def test_private_whep_host_is_refused_without_the_flag() -> None:
    async with aiohttp.ClientSession() as http:
        downlink = StvDownlink(
            http=http,
            configuration=RTCConfiguration(),
            allow_private=False,
            video=True,
            outputs={"video": FanoutTrack("video")},
            clock=SYSTEM_CLOCK,
        )
        try:
            with pytest.raises(AvatarError) as info:
                await downlink.subscribe("https://10.0.0.5/rtc/v1/whep/?stream=x", 1.0)
            assert info.value.code is ErrorCode.INSECURE_TRANSPORT
        finally:
            await downlink.close()


async def test_a_failing_microphone_is_reported_and_text_turns_still_work(
    staging: StagingServer,
) -> None:
    session = _session(staging, audio=FailingSource(PermissionError("denied"), after_frames=5))
    errors: list[str] = []
    session.on("error", lambda e: errors.append(e.data["code"]))
    try:
        await session.connect()
        assert await until(lambda: errors, 3)
        assert errors == ["permission_denied"]
        assert session.state == "connected"
        answered = session.expect("agent_turn_ended", timeout=3)
        await session.speak("typing instead")
        await answered
        assert errors == ["permission_denied"]  # reported once
        await session.switch_audio(ToneSource())
        sid = staging.live_sids[0]
        assert await until(lambda: staging.media.asr_stats(sid).last_rms > 0.05, 3)
        _, level = await _energy_over(staging, sid, 25)
        assert level > 0.05
    finally:
        await session.close()


async def test_cold_reconnect_rebuilds_both_peers_and_keeps_mute_and_source(
    staging: StagingServer,
) -> None:
    session = _session(staging)
    try:
        await session.connect()
        session.mic_enabled = False
        video = session.avatar_video
        assert video is not None
        await staging.faults.drop_socket(recovery=False)
        ev = await session.wait_for("reconnected", timeout=10)
        assert ev.data["tier"] == "cold"
        sid = staging.live_sids[0]
        frames, level = await _energy_over(staging, sid, 30)
        assert frames > 10 and level == 0.0  # the new uplink flows, still muted
        assert [r.event for r in staging.received if r.sid == sid].count("muteUser") == 1
        session.mic_enabled = True
        assert await until(lambda: staging.received_events("unmuteUser", sid=sid), 3)
        assert await until(lambda: staging.media.asr_stats(sid).last_rms > 0.05, 3)
        _, level = await _energy_over(staging, sid, 25)
        assert level > 0.05
        # The application's track object is the same and is fed by the new subscription.
        assert session.avatar_video is video
        assert await asyncio.wait_for(video.recv(), 3) is not None
        assert staging.media.whep_posts == 2 and staging.media.whep_deletes == 1
    finally:
        await session.close()


async def test_connection_quality_is_opt_in(staging: StagingServer) -> None:
    session = _session(staging, config=MEDIA.with_(quality_interval=0.2))
    quiet = _session(staging)
    samples: list[dict[str, object]] = []
    session.on("connection_quality", lambda e: samples.append(e.data))
    unexpected: list[object] = []
    quiet.on("connection_quality", unexpected.append)
    try:
        await session.connect()
        await quiet.connect()

        def measured() -> bool:
            stv = [s for s in samples if s["channel"] == "stv" and s["bitrate"] is not None]
            return len(stv) >= 2 and any(s["channel"] == "asr" for s in samples)

        # Several rounds of samples (a bitrate needs two): the quiet session had as long.
        assert await until(measured, 5)
        channels = {s["channel"] for s in samples}
        assert channels == {"asr", "stv"}
        stv = [s for s in samples if s["channel"] == "stv" and s["bitrate"] is not None]
        assert stv and all(float(s["bitrate"]) > 0 for s in stv)  # type: ignore[arg-type]
        assert all(0.0 <= float(s["packet_loss"]) <= 1.0 for s in samples)  # type: ignore[arg-type]
        assert unexpected == []
        quality_tasks = [t for t in asyncio.all_tasks() if t.get_name() == "avatar-sdk:quality"]
        assert len(quality_tasks) == 1  # only the session that asked for it pays for it
    finally:
        await session.close()
        await quiet.close()
