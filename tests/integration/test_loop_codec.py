"""``AvatarSession(audio_codec="loop")``: audio encoded and decoded on the event loop.

The uplink encodes PCM with the mono voice encoder from the first frame (aiortc's encoder
thread gets nothing); the downlink decodes the avatar's voice on the loop through
:mod:`avatar_sdk.transport.rtc.aiortc_patches.loop_decode`, which reaches into aiortc 1.16's
receiver: the
guard tests here fail if those internals move. "loop" is the default (issue 23).
"""

from __future__ import annotations

import asyncio
import queue
import threading

import pytest
from aiortc import RTCPeerConnection

from avatar_sdk import AvatarSession
from avatar_sdk.errors import AvatarError, ErrorCode
from avatar_sdk.media import AudioLevelMeter, FrameIterator, ToneSource
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.rtc.aiortc_patches.loop_decode import LoopDecoder, decode_audio_on_loop
from avatar_sdk.transport.rtc.stv import StvDownlink

from .conftest import FAST, until

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0)


def _decodes_in_a_thread(stv: StvDownlink, kind: str) -> bool:
    """Whether the ``kind`` receiver of ``stv`` has a live decoder thread (the staging
    server's peers run in this process too, so threads are not counted by name)."""
    (receiver,) = [t.receiver for t in stv.pc.getTransceivers() if t.kind == kind]
    thread: threading.Thread | None = receiver._RTCRtpReceiver__decoder_thread  # type: ignore[attr-defined]
    return thread is not None and thread.is_alive()


async def _speak_and_measure(staging: StagingServer, session: AvatarSession) -> float:
    """The avatar's voice level as the session decodes it, once the avatar talks."""
    assert session.avatar_audio is not None
    staging.conversations[staging.live_sids[0]].speaking = True
    async with AudioLevelMeter(session.avatar_audio, threshold=0.05) as meter:
        await meter.wait_for_speech(5)
        levels = []
        async for level in meter:  # past the onset: the steady level
            levels.append(level)
            if len(levels) == 10:
                return sorted(levels)[5]
    raise AssertionError("the avatar's audio ended")


@pytest.mark.parametrize("codec", ["loop", "thread"])
async def test_audio_codec_both_ways(staging: StagingServer, codec: str) -> None:
    tone = ToneSource(440.0, 0.3)
    session = AvatarSession(
        staging.url, staging.token, allow_insecure_transport=True, audio=tone,
        config=MEDIA, audio_codec=codec,  # type: ignore[arg-type]
    )  # fmt: skip
    try:
        await session.connect()
        sid = staging.live_sids[0]
        lanes = session.media
        assert lanes is not None and lanes.asr is not None and lanes.stv is not None
        # Uplink: the staging peer decodes the tone at its level.
        assert await until(lambda: staging.media.asr_stats(sid).last_rms > 0.1, 5)
        peer_track = lanes.asr._peer_track
        server = staging.media.asr_peer(sid)
        assert server is not None and server.pc is not None
        (heard,) = [t.receiver for t in server.pc.getTransceivers() if t.kind == "audio"]
        on_loop = heard._RTCRtpReceiver__decoder_queue  # type: ignore[attr-defined]
        assert isinstance(on_loop, LoopDecoder) and on_loop.frames_decoded > 5  # staging too
        # Downlink: the avatar's tone (0.3 amplitude: RMS ~0.21) at its level.
        level = await _speak_and_measure(staging, session)
        assert 0.1 < level < 0.3
        frames = lanes.stv.frames["video"]
        assert session.avatar_video is not None
        async with FrameIterator(session.avatar_video) as video:  # watched: decoded
            await asyncio.wait_for(anext(video), 5)
        assert lanes.stv.frames["video"] > frames
        assert _decodes_in_a_thread(lanes.stv, "video")  # video keeps aiortc's thread either way
        if codec == "loop":
            assert peer_track.pcm_to_aiortc == 0  # every frame encoded on the loop
            decoder = lanes.stv.audio_decoder
            assert decoder is not None and decoder.frames_decoded > 5
            assert decoder.decode_errors == 0
            assert not _decodes_in_a_thread(lanes.stv, "audio")
        else:
            assert peer_track.pcm_to_aiortc > 5  # the default path: aiortc encodes
            assert lanes.stv.audio_decoder is None
            assert _decodes_in_a_thread(lanes.stv, "audio")
    finally:
        await session.close()
        tone.stop()


async def test_loop_decoder_ends_the_track_when_the_peer_closes(staging: StagingServer) -> None:
    session = AvatarSession(
        staging.url, staging.token, allow_insecure_transport=True, config=MEDIA,
        video=False, audio_codec="loop",
    )  # fmt: skip
    try:
        await session.connect()
        assert session.media is not None and session.media.stv is not None
        stv = session.media.stv
        decoder = stv.audio_decoder
        assert decoder is not None
        await stv.close()  # the receiver stops: its track must end, as with the thread
        assert decoder.ended
    finally:
        await session.close()


def test_audio_codec_is_validated() -> None:
    with pytest.raises(AvatarError) as info:
        AvatarSession("http://127.0.0.1:1", "t", allow_insecure_transport=True,
                      audio_codec="gpu")  # type: ignore[arg-type]  # fmt: skip
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert "audio_codec" in str(info.value)


async def test_aiortc_receiver_internals_are_the_ones_loop_decode_expects() -> None:
    """Fails when aiortc changes the private names :mod:`loop_decode` relies on."""
    pc = RTCPeerConnection()
    try:
        receiver = pc.addTransceiver("audio", direction="recvonly").receiver
        assert isinstance(receiver._RTCRtpReceiver__decoder_queue, queue.Queue)  # type: ignore[attr-defined]
        assert receiver._RTCRtpReceiver__decoder_thread is None  # type: ignore[attr-defined]
        decoder = decode_audio_on_loop(receiver)
        assert isinstance(decoder, LoopDecoder)
        assert receiver._RTCRtpReceiver__decoder_queue is decoder  # type: ignore[attr-defined]
        with pytest.raises(RuntimeError, match="internals changed"):
            decode_audio_on_loop(receiver)  # its queue is no longer aiortc's
    finally:
        await pc.close()
    await asyncio.sleep(0)


async def test_the_default_codes_audio_on_the_loop(staging: StagingServer) -> None:
    """Issue 23: without ``audio_codec`` the voice is decoded on the loop, whatever the
    uplink's source (here none: silence), while somebody listens (test_voice_demand.py)."""
    session = AvatarSession(
        staging.url, staging.token, allow_insecure_transport=True, config=MEDIA, video=False
    )
    try:
        await session.connect()
        lanes = session.media
        assert lanes is not None and lanes.stv is not None
        decoder = lanes.stv.audio_decoder
        assert decoder is not None
        audio = session.avatar_audio
        assert audio is not None
        async with FrameIterator(audio) as frames:
            await anext(frames)
            assert await until(lambda: decoder.frames_decoded > 5, 5)
        assert not _decodes_in_a_thread(lanes.stv, "audio")
    finally:
        await session.close()
