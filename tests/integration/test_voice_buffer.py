"""The voice's receive buffer (transport/rtc/core/voice_buffer.py) over real WebRTC.

aiortc's audio receiver held every voice frame until four more had arrived (80 ms on
loopback); the SDK's downlink now holds it as long as the jitter it observes requires,
conceals a lost packet and puts a reordered one in place. The staging's audio sender
loses or reorders packets at will (:mod:`avatar_sdk.testing.staging.voice_disorder`).
"""

from __future__ import annotations

from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.staging.voice_disorder import disorder_voice
from avatar_sdk.transport.rtc.aiortc_patches.voice_buffer import VoiceReceiveBuffer

from ..conftest import until
from .conftest import FAST, connected_session, current_downlink

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0)
COUNTS = {
    "packets", "played", "concealed", "late", "underruns", "reordered",
    "duplicates", "overflow", "resyncs", "target_delay",
}  # fmt: skip


async def test_the_voice_arrives_through_the_adaptive_buffer(staging: StagingServer) -> None:
    session = await connected_session(staging, MEDIA, video=False)
    try:
        reply = await session.ask("hello", timeout=10)
        assert reply.text
        stats = session.stats()["voice_buffer"]
        assert set(stats) == COUNTS
        assert stats["packets"] > 0 and stats["played"] > 0
        assert stats["target_delay"] >= 0.02  # at least one frame
        buffer = current_downlink(session).voice_buffer
        assert isinstance(buffer, VoiceReceiveBuffer)
        assert buffer.rule.held <= 50  # bounded
    finally:
        await session.close()


async def test_lost_voice_packets_are_concealed_and_counted(staging: StagingServer) -> None:
    session = await connected_session(staging, MEDIA, video=False)
    try:
        (viewer,) = staging.media.viewers.values()
        disorder = disorder_voice(viewer.pc)
        counts = current_downlink(session).voice_buffer.counts
        before = counts.concealed
        disorder.lose(3)
        assert await until(lambda: len(disorder.lost) == 3, 3)
        assert await until(lambda: counts.concealed >= before + 3, 3)
        assert counts.late == 0  # never arrived, so never late
        frames = current_downlink(session).frames["audio"]
        assert await until(lambda: current_downlink(session).frames["audio"] > frames + 5, 3)
    finally:
        await session.close()


async def test_reordered_voice_packets_are_put_in_place_or_counted_late(
    staging: StagingServer,
) -> None:
    session = await connected_session(staging, MEDIA, video=False)
    try:
        (viewer,) = staging.media.viewers.values()
        disorder = disorder_voice(viewer.pc)
        counts = current_downlink(session).voice_buffer.counts
        before = counts.reordered + counts.late
        for _ in range(5):
            disorder.swap()
            assert await until(lambda: disorder.pending == 0, 3)
        assert len(disorder.swapped) == 5
        # Each swapped packet was either put in place or, if its turn had been concealed
        # already (a one-frame target on a calm loopback), dropped as late; after the first
        # late one the target has grown to take in the next.
        assert await until(lambda: counts.reordered + counts.late >= before + 5, 3)
        assert counts.reordered >= 1
        assert counts.target_delay > 0.02
    finally:
        await session.close()
