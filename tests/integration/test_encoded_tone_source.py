"""``EncodedToneSource``: a tone encoded once per process, sent as packets by any sender.

The cycle is the one helper the staging avatar's voice uses too; the source paces it with
the other encoded sources' pacer and stamps each packet's ``pts``, which a stock aiortc
sender (the load benchmark's bare client) turns into the RTP timestamp. Through a real
session the staging server's ASR peer decodes it at the tone's level.
"""

from __future__ import annotations

import asyncio
import fractions
import itertools
import math
import time

import pytest
from aiortc import RTCPeerConnection
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.media import EncodedSilenceSource, EncodedToneSource
from avatar_sdk.media.levels import frame_rms
from avatar_sdk.media.opus import OPUS_SILENCE, encoded_tone
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.synthetic import OpusToneTrack

from .test_opus_file_source import FILE_LEVEL, _heard, _session, take

RATE = 48_000


async def test_the_tone_is_one_shared_cycle_paced_and_stamped() -> None:
    source = EncodedToneSource()
    voice = OpusToneTrack()  # the staging avatar's voice: the same cached cycle
    try:
        assert source._cycle is voice._cycle is encoded_tone(440.0, 0.3)
        assert len(source._cycle) == 50  # one second of 20 ms packets
        started = time.monotonic()
        packets = await take(source, 52)  # past the end of the cycle
        elapsed = time.monotonic() - started
        # No-pacing guard, one-sided: 51 intervals of 20 ms cannot pass in less real time
        # than 50 (the schedule starts on the 20 ms grid instant at or before the first
        # packet; a busy machine only makes it longer); an unpaced cycle is copied out in ~0 s. The
        # schedule itself is pinned on a FakeClock (tests/unit/test_source_pacing.py).
        assert elapsed >= 0.9 * 50 * 0.02
    finally:
        source.stop()
        voice.stop()
    assert [p.pts for p in packets] == [960 * i for i in range(52)]
    assert all(p.duration == 960 and p.time_base == fractions.Fraction(1, RATE) for p in packets)
    assert [bytes(p) for p in packets] == [*source._cycle, *source._cycle[:2]]
    assert source.packets == 52
    with pytest.raises(MediaStreamError):
        await source.recv()  # stopped


async def test_every_encoded_source_stamps_consecutive_pts() -> None:
    silence = EncodedSilenceSource()
    try:
        packets = await take(silence, 3)
    finally:
        silence.stop()
    assert [p.pts for p in packets] == [0, 960, 1920]
    assert {bytes(p) for p in packets} == {OPUS_SILENCE}


@pytest.mark.parametrize(
    ("frequency", "amplitude"),
    [(0.0, 0.3), (24_000.0, 0.3), (math.nan, 0.3), (440.0, -0.1), (440.0, 1.5)],
)
def test_tone_refusals(frequency: float, amplitude: float) -> None:
    with pytest.raises(AvatarError) as info:
        EncodedToneSource(frequency, amplitude)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


async def test_a_stock_aiortc_sender_sends_the_packets_on_their_own_timestamps() -> None:
    """No SDK: aiortc packs the packets as they are, with RTP timestamps from their pts."""
    source = EncodedToneSource()
    sender, receiver = RTCPeerConnection(), RTCPeerConnection()
    arrived: asyncio.Queue[MediaStreamTrack] = asyncio.Queue()
    receiver.on("track", arrived.put_nowait)
    try:
        sender.addTransceiver(source, direction="sendonly")
        await sender.setLocalDescription(await sender.createOffer())
        await receiver.setRemoteDescription(sender.localDescription)
        await receiver.setLocalDescription(await receiver.createAnswer())
        await sender.setRemoteDescription(receiver.localDescription)
        track = await asyncio.wait_for(arrived.get(), 5)
        frames = [await asyncio.wait_for(track.recv(), 5) for _ in range(30)]
    finally:
        await sender.close()
        await receiver.close()
        source.stop()
    steps = {b.pts - a.pts for a, b in itertools.pairwise(frames[10:])}
    assert steps == {960}  # one packet per 20 ms of RTP clock
    levels = [frame_rms(f) for f in frames[10:]]
    tone = 0.3 / math.sqrt(2)
    assert all(abs(level - tone) < 0.03 for level in levels), levels


async def test_the_tone_through_a_session_is_heard_and_mutes_to_silence(
    staging: StagingServer,
) -> None:
    tone = EncodedToneSource()
    session = _session(staging, tone)
    try:
        await session.connect()
        sid = staging.live_sids[0]
        await _heard(staging, sid, FILE_LEVEL)  # 440 Hz at 0.3: RMS about 0.21
        session.mic_enabled = False
        await _heard(staging, sid, None)
        session.mic_enabled = True
        await _heard(staging, sid, FILE_LEVEL)
        assert staging.media.asr_stats(sid).offers == 1
        assert session.state == "connected"
    finally:
        await session.close()
        tone.stop()
