"""A video packet that never arrives (transport/rtc/aiortc_patches/video_repair.py) over real
WebRTC.

The staging server's video sender drops one RTP packet and the retransmissions the
client's NACKs ask for (``faults.lose_video_packets``). aiortc's receiver hands on no
later frame until 512 more packets have arrived behind the hole, so the video froze for
seconds with the voice flowing, until the video rule re-subscribed (the network lab's
``loss 5% 6s`` flake). Now a missing packet is asked for again, and a hole that outlives
:data:`~avatar_sdk.transport.rtc.aiortc_patches.video_repair.HOLE_WAIT` is skipped to the next
keyframe.
"""

from __future__ import annotations

import itertools
import time

import pytest

from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.rtc.aiortc_patches.video_repair import HOLE_WAIT

from ..conftest import until
from .conftest import FAST, connected_session, current_downlink

#: The video rule's first step (a keyframe request at 3 s of frozen video) stays out of the
#: way: a repair that works never needs it.
MEDIA = FAST.with_(
    overall_connect_timeout=10.0,
    asr_timeout=5.0,
    media_recovery_timeout=5.0,
    video_stall_timeout=3.0,
    video_keyframe_wait=2.0,
)
#: The documented bound of a skipped hole: HOLE_WAIT, then a PLI answered by a keyframe one
#: frame later, with room for a loaded machine; far below the video rule's 3 s.
SKIP_BOUND = HOLE_WAIT + 1.5


def _longest_gap(stamps: list[float], since: float) -> float:
    after = [s for s in stamps if s >= since]
    before = [s for s in stamps if s < since]
    marks = before[-1:] + after
    return max((b - a for a, b in itertools.pairwise(marks)), default=0.0)


async def _watched(staging: StagingServer) -> tuple[AvatarSession, list[float]]:
    session = await connected_session(staging, MEDIA)
    video = session.avatar_video
    assert video is not None
    stamps: list[float] = []
    video.on_frame = lambda _frame: stamps.append(time.monotonic())  # a watcher
    assert await until(lambda: len(stamps) >= 10, 5)
    return session, stamps


@pytest.mark.parametrize("count", [1, 3])
async def test_a_packet_lost_for_good_costs_a_keyframe_not_a_resubscribe(
    staging: StagingServer, count: int
) -> None:
    session, stamps = await _watched(staging)
    try:
        (viewer,) = staging.media.viewers.values()
        plis_before = viewer.keyframe_requests
        assert staging.faults.lose_video_packets(count, resends_lost=None) == 1
        lost_at = time.monotonic()
        loss = viewer.packet_loss
        assert loss is not None
        assert await until(lambda: len(loss.lost) == count, 3)
        # Video flows again, well past the hole, on the same subscription.
        assert await until(lambda: bool(stamps) and stamps[-1] > lost_at + SKIP_BOUND + 1, 10)
        gap = _longest_gap(stamps, lost_at)
        print(f"VIDEO_REPAIR lost_for_good count={count} longest_gap={gap:.3f}s")
        assert gap < SKIP_BOUND, gap
        assert loss.resends_dropped >= 1  # the client asked; the sender never resent
        repair = current_downlink(session).video_repair
        assert repair is not None
        assert repair.holes_skipped >= 1
        assert viewer.keyframe_requests > plis_before  # the skip asked for a keyframe
        lanes = session.media
        assert lanes is not None and lanes.video_keyframe_requests == 0  # no stall rule
        assert staging.media.whep_posts == 1  # no re-subscribe
        assert session.state == "connected"
    finally:
        await session.close()


async def test_a_packet_whose_first_resend_is_lost_is_asked_for_again(
    staging: StagingServer,
) -> None:
    """aiortc asks once, when the gap appears; after a loss burst nothing new appears, so
    nothing asked again. The retry fills the hole: no skip, no keyframe."""
    session, stamps = await _watched(staging)
    try:
        (viewer,) = staging.media.viewers.values()
        assert staging.faults.lose_video_packets(1, resends_lost=1) == 1
        lost_at = time.monotonic()
        loss = viewer.packet_loss
        assert loss is not None
        assert await until(lambda: loss.resends_sent >= 1, 3)
        assert loss.resends_dropped == 1
        assert await until(lambda: bool(stamps) and stamps[-1] > lost_at + HOLE_WAIT + 1, 10)
        repair = current_downlink(session).video_repair
        assert repair is not None
        assert repair.nack_retries >= 1
        assert repair.holes_skipped == 0
        gap = _longest_gap(stamps, lost_at)
        print(f"VIDEO_REPAIR first_resend_lost longest_gap={gap:.3f}s")
        assert gap < HOLE_WAIT + 0.5, gap
        assert staging.media.whep_posts == 1
    finally:
        await session.close()
