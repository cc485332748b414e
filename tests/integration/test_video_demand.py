"""The avatar's video is decoded only while somebody watches it
(transport/rtc/aiortc_patches/video_demand.py).

Over real WebRTC against the staging server: nobody reading ``avatar_video`` means only the
playable gate's first frame is decoded; a consumer attaching mid-session gets fresh frames
within a keyframe interval (a PLI asks for one at once); liveness still finds a dead
downlink within its bound with nobody watching, because it is fed by the frames aiortc
assembles from RTP, decoded or not.
"""

from __future__ import annotations

import time
from typing import Any

from avatar_sdk import AvatarSession
from avatar_sdk.media import FrameIterator
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.synthetic import read_frame_counter

from .conftest import (
    FAST,
    connected_session,
    current_downlink,
    dead_downlink_found_in_its_bound,
    healthy_for_three_stall_windows,
    until,
)

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0)

#: The staging server's natural keyframe interval: aiortc's libx264 encoder with its
#: default keyint of 250 frames at the pattern's 20 fps (measured: IDR frames 12.5 s apart
#: when nobody asks for one). Without a PLI an attaching consumer could wait this long.
STAGING_KEYFRAME_INTERVAL = 12.5

#: Wall-clock bound of "a consumer attaching gets frames": the PLI round trip and one frame
#: (about 0.2 s measured), with room for a loaded machine; far under the interval above.
ATTACH_BOUND = 3.0


async def _connected(staging: StagingServer, **kwargs: Any) -> AvatarSession:
    return await connected_session(staging, kwargs.pop("config", MEDIA), **kwargs)


async def test_unwatched_video_is_not_decoded_and_a_consumer_gets_frames_at_once(
    staging: StagingServer,
) -> None:
    session = await _connected(staging)
    try:
        stv = current_downlink(session)
        gate = stv.video_gate
        assert gate is not None
        # Nobody reads the video: a second of it is assembled, none of it decoded past the
        # playable gate's first frame (a frame or two in flight when it was decoded).
        assert await until(lambda: gate.skipped >= 20, 5)
        decoded = stv.frames["video"]
        assert 1 <= decoded <= 3
        assert gate.assembled >= gate.skipped + gate.forwarded - 1

        # A consumer attaches: a PLI goes out, the next keyframe is decoded, fresh frames.
        video = session.avatar_video
        assert video is not None
        sent_before = staging.media.frames_sent
        started = time.monotonic()
        async with FrameIterator(video) as frames:
            first = await anext(frames)
            waited = time.monotonic() - started
            counters = [read_frame_counter(first)]
            for _ in range(10):
                counters.append(read_frame_counter(await anext(frames)))
        assert waited < ATTACH_BOUND < STAGING_KEYFRAME_INTERVAL, waited
        assert gate.plis >= 1 and gate.resumes == 1
        # Fresh: not the gate's first frame left in the buffer, but what the server sends now.
        assert counters[0] is not None and counters[0] >= sent_before - 2, counters
        assert all(c is not None for c in counters)
        assert counters == sorted(counters)

        # The consumer left: after its buffer's worth of unread frames, decoding pauses.
        paused_at = stv.frames["video"]
        assert await until(lambda: not gate.decoding, 5)
        skipped = gate.skipped
        assert await until(lambda: gate.skipped >= skipped + 20, 5)
        assert stv.frames["video"] <= paused_at + video._frames.maxlen + 3  # type: ignore[operator]
    finally:
        await session.close()


async def test_a_session_tap_or_a_waiting_reader_keeps_the_video_decoded(
    staging: StagingServer,
) -> None:
    session = await _connected(staging)
    try:
        stv = current_downlink(session)
        video = session.avatar_video
        assert video is not None and stv.video_gate is not None
        seen: list[object] = []
        video.on_frame = seen.append  # an SDK tap watches every frame
        assert await until(lambda: len(seen) >= 10, ATTACH_BOUND + 2)
        assert stv.video_gate.decoding
    finally:
        await session.close()


async def test_liveness_with_nobody_watching_finds_a_dead_downlink_in_its_bound(
    staging: StagingServer,
) -> None:
    stall = 1.0
    session = await _connected(staging, config=MEDIA.with_(media_stall_timeout=stall))
    try:
        lanes = session.media
        assert lanes is not None
        stv = current_downlink(session)
        gate = stv.video_gate
        assert gate is not None
        # Healthy for three stall windows with nobody watching: no verdict of death, and the
        # video lane's liveness is fresh although its frames are not decoded.
        await healthy_for_three_stall_windows(lanes, stall)
        assert stv.frames["video"] <= 3
        assert stv.last_assembled_at is not None
        assert session._clock.monotonic() - stv.last_assembled_at < stall
        # The downlink dies: found within its bound.
        await dead_downlink_found_in_its_bound(session, staging, stall)
    finally:
        staging.faults.clear()
        await session.close()
