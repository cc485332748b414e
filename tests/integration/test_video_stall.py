"""The downlink's video rule (transport/liveness/video_stall.py) over real WebRTC.

The staging server stops the avatar's video on the current WHEP subscription while its
voice goes on (``faults.freeze_video``): the old liveness rule, fed by any frame, saw a
live downlink and the picture stayed frozen. The video rule asks for a keyframe after
``video_stall_timeout``, and re-subscribes after a further ``video_keyframe_wait``; a new
subscription brings the video back.
"""

from __future__ import annotations

import time

from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer

from .conftest import FAST, connected_session, current_downlink, spy_on_media_watchdog, until

STALL = 1.0
KEYFRAME_WAIT = 1.0
MEDIA = FAST.with_(
    overall_connect_timeout=10.0,
    asr_timeout=5.0,
    media_recovery_timeout=5.0,
    video_stall_timeout=STALL,
    video_keyframe_wait=KEYFRAME_WAIT,
)
#: One WHEP re-subscribe to its first video frame on loopback (about 0.5 s measured), with
#: room for a loaded machine, plus the watchdog's tick.
RESUBSCRIBE = 3.0
#: The documented bound: the freeze is noticed, a keyframe asked for, then a re-subscribe.
BOUND = STALL + KEYFRAME_WAIT + RESUBSCRIBE


async def _connected(staging: StagingServer) -> AvatarSession:
    return await connected_session(staging, MEDIA)


async def test_frozen_video_with_live_voice_is_recovered_within_the_bound(
    staging: StagingServer,
) -> None:
    session = await _connected(staging)
    try:
        video = session.avatar_video
        assert video is not None
        stamps: list[float] = []
        video.on_frame = lambda _frame: stamps.append(time.monotonic())  # a watcher
        assert await until(lambda: len(stamps) >= 10, 5)
        old = current_downlink(session)
        audio_before = old.frames["audio"]

        (viewer,) = staging.media.viewers.values()
        plis_before = viewer.keyframe_requests
        recovered = session.wait_for("media_recovered", timeout=BOUND + 5)
        assert staging.faults.freeze_video() == 1
        frozen_at = time.monotonic()
        recovering = await session.wait_for("media_recovering", timeout=BOUND)
        assert recovering.data["channel"] == "stv", recovering.data
        assert "no video" in recovering.data["reason"], recovering.data
        # The voice went on all along: the old rule had nothing to say.
        assert old.frames["audio"] > audio_before + 20
        lanes = session.media
        assert lanes is not None and lanes.video_keyframe_requests == 1
        # The PLI reached the sender and did not bring this freeze's video back: the
        # re-subscribe below does.
        assert viewer.keyframe_requests > plis_before
        # Fresh video on a new subscription, within the documented bound.
        assert await until(lambda: bool(stamps) and stamps[-1] > frozen_at + STALL, BOUND)
        back = stamps[-1] - frozen_at
        assert back < BOUND, back
        assert current_downlink(session) is not old
        assert (await recovered).data["channel"] == "stv"
        assert session.state == "connected"
        assert staging.media.whep_posts == 2
    finally:
        await session.close()


async def test_frozen_unwatched_video_is_recovered_too(staging: StagingServer) -> None:
    """Nobody watches: frames are assembled, not decoded (video_demand); the rule is fed
    by assembly, so a freeze is still found and the new subscription assembles frames."""
    session = await _connected(staging)
    try:
        old = current_downlink(session)
        gate = old.video_gate
        assert gate is not None
        assert await until(lambda: gate.skipped >= 10, 5)
        recovered = session.wait_for("media_recovered", timeout=BOUND + 5)
        assert staging.faults.freeze_video() == 1
        recovering = await session.wait_for("media_recovering", timeout=BOUND)
        assert recovering.data["channel"] == "stv", recovering.data
        assert (await recovered).data["channel"] == "stv"
        new = current_downlink(session)
        assert new is not old and new.video_gate is not None
        fresh = new.video_gate
        assert await until(lambda: fresh.assembled >= 10, 5)
    finally:
        await session.close()


async def test_a_keyframe_request_alone_brings_back_video_the_sender_resumes(
    staging: StagingServer,
) -> None:
    """A sender that resumes on a PLI (a decoder stuck on a lost reference picture does at
    the next keyframe): the first step is enough, no re-subscribe."""
    session = await _connected(staging)
    try:
        video = session.avatar_video
        assert video is not None
        stamps: list[float] = []
        video.on_frame = lambda _frame: stamps.append(time.monotonic())
        assert await until(lambda: len(stamps) >= 10, 5)
        old = current_downlink(session)
        rule = old.video_rule
        assert rule is not None
        (viewer,) = staging.media.viewers.values()
        assert staging.faults.freeze_video(thaw_on_keyframe_request=True) == 1
        frozen_at = time.monotonic()
        assert await until(lambda: stamps[-1] > frozen_at + STALL, STALL + KEYFRAME_WAIT)
        assert viewer.keyframe_requests >= 1 and rule.keyframes == 1
        # The rule saw the video flow again and reset: no re-subscribe for this stall.
        assert await until(lambda: rule.keyframe_at is None, 2)
        assert not rule.resubscribe_asked
        assert current_downlink(session) is old and staging.media.whep_posts == 1
        assert session.stats()["reconnects"]["media"] == 0
    finally:
        await session.close()


async def test_an_audio_only_session_has_no_video_rule_at_work(staging: StagingServer) -> None:
    """``video=False``: the downlink carries no video, and the voice alone keeps it alive."""
    session = AvatarSession(
        staging.url, staging.token, allow_insecure_transport=True, config=MEDIA, video=False
    )
    await session.connect()
    try:
        stv = current_downlink(session)
        assert stv.video_receiver is None
        rule = stv.video_rule
        assert rule is not None
        lanes = session.media
        assert lanes is not None
        verdicts = spy_on_media_watchdog(lanes)
        frames = stv.frames["audio"]
        # The watchdog judged this downlink well past both steps of the rule: voice frames,
        # never a keyframe request.
        past = STALL + KEYFRAME_WAIT + 0.5
        assert await until(lambda: any(v.watched_for > past for v in verdicts), past + 5)
        assert stv.frames["audio"] > frames and stv.frames["video"] == 0
        assert lanes.video_keyframe_requests == 0
        assert rule.keyframes == 0 and staging.media.whep_posts == 1
    finally:
        await session.close()
