"""The voice's receive buffer (transport/rtc/core/voice_buffer.py) over real WebRTC.

aiortc's audio receiver held every voice frame until four more had arrived (80 ms on
loopback); the SDK's downlink now holds it as long as the jitter it observes requires,
conceals a lost packet and puts a reordered one in place. The staging's audio sender
loses, reorders and delays packets (``staging.faults.voice_loss``, ``voice_reorder``,
``voice_jitter``: :mod:`avatar_sdk.testing.staging.voice_faults`). Bounds, never speed.
"""

from __future__ import annotations

from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.staging.voice_faults import VoiceFaults
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


def _faults(staging: StagingServer) -> VoiceFaults:
    (viewer,) = staging.media.viewers.values()
    assert viewer.voice_faults is not None
    return viewer.voice_faults


async def test_lost_voice_packets_are_concealed_and_counted(staging: StagingServer) -> None:
    session = await connected_session(staging, MEDIA, video=False)
    try:
        counts = current_downlink(session).voice_buffer.counts
        before = counts.concealed
        (sid,) = staging.conversations
        assert staging.faults.voice_loss(count=3, sid="another-session") == 0
        assert staging.faults.voice_loss(count=3, sid=sid) == 1
        disorder = _faults(staging)
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
        counts = current_downlink(session).voice_buffer.counts
        before = counts.reordered + counts.late
        assert staging.faults.voice_reorder(count=0) == 1
        disorder = _faults(staging)
        for _ in range(5):
            assert staging.faults.voice_reorder(count=1) == 1
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


async def _voice_flows(session: AvatarSession, seconds: float) -> None:
    """The downlink hands on voice frames for ``seconds`` (about 50 a second)."""
    downlink = current_downlink(session)
    frames = downlink.frames["audio"]
    assert await until(lambda: downlink.frames["audio"] >= frames + int(seconds * 40), 3 * seconds)


async def test_random_voice_loss_is_concealed_and_the_voice_keeps_flowing(
    staging: StagingServer,
) -> None:
    session = await connected_session(staging, MEDIA, video=False)
    try:
        counts = current_downlink(session).voice_buffer.counts
        concealed = counts.concealed
        assert staging.faults.voice_loss(0.1, seed=7) == 1
        faults = _faults(staging)
        await _voice_flows(session, 2.0)
        staging.faults.clear()  # no more losses: the last lost packet has later ones
        await _voice_flows(session, 0.2)
        lost = len(faults.lost)
        assert 0.03 * faults.packets <= lost <= 0.2 * faults.packets  # 10 % drawn
        # Each lost packet is concealed once, at its own time; none of them is late.
        assert lost <= counts.concealed - concealed <= lost + 2
        assert counts.late == 0
    finally:
        await session.close()


async def test_voice_jitter_raises_the_target_delay_and_little_is_concealed(
    staging: StagingServer,
) -> None:
    session = await connected_session(staging, MEDIA, video=False)
    try:
        counts = current_downlink(session).voice_buffer.counts
        before = counts.packets, counts.concealed, counts.late
        assert staging.faults.voice_jitter(0.05, seed=3) == 1
        await _voice_flows(session, 3.0)
        faults = _faults(staging)
        assert faults.delays and max(faults.delays) <= 0.05
        assert counts.target_delay >= 0.03  # grown from one frame towards the jitter
        packets = counts.packets - before[0]
        disorder = counts.concealed - before[1] + counts.late - before[2]
        assert disorder <= 0.1 * packets  # the buffer waits for most of them
        assert counts.reordered > 0  # delays differing by more than a frame reorder
    finally:
        await session.close()
