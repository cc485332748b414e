"""The staging's video and voice of one instant carry a known relation: a viewer's tracks
share a MediaEpoch, keep to its grid, and the video draws the media time the voice notes its
onsets in (testing/synthetic.py), on a FakeClock."""

from __future__ import annotations

import asyncio
from typing import Any

from avatar_sdk.clock import FakeClock
from avatar_sdk.testing.synthetic import (
    AUDIO_RATE,
    MediaEpoch,
    OpusToneTrack,
    PatternTrack,
    read_frame_counter,
    read_media_time,
)


async def _next(track: Any, clock: FakeClock, step: float = 0.001) -> Any:
    """The track's next frame, time moved on ``clock`` in small steps until it comes."""
    frame = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0)
    while not frame.done():
        await clock.advance(step)
    return await frame


async def test_the_video_drawn_at_t_and_the_voice_onset_at_t_are_one_instant() -> None:
    clock = FakeClock(start=1000.0)
    epoch = MediaEpoch()
    speaking = False
    voice = OpusToneTrack(active=lambda: speaking, epoch=epoch, clock=clock)
    video = PatternTrack(epoch=epoch, clock=clock)
    try:
        first = await _next(voice, clock)  # the voice starts the epoch: 1000.0
        assert epoch.start == 1000.0 and first.pts == 0
        await clock.advance(0.013)
        # The video starts 13 ms later, on the epoch's grid: its first frame is the slot
        # that has just passed (media time 0, as a late wake-up's), the next one 50 ms on.
        frame = await _next(video, clock)
        assert read_media_time(frame) == 0.0 and frame.pts == 0
        assert read_frame_counter(frame) == 0
        frame = await _next(video, clock)
        assert abs(clock.monotonic() - 1000.05) < 0.002
        assert read_media_time(frame) == 0.05 and frame.pts == 4500
        # A voice onset: noted at the media time of its first tone slot.
        speaking = True
        packets = [await _next(voice, clock) for _ in range(3)]
        assert voice.onsets[-1] == packets[0].pts / AUDIO_RATE
        # Each packet was sent at its own instant: media time = clock - epoch.
        assert abs(packets[-1].pts / AUDIO_RATE - (clock.monotonic() - 1000.0)) < 0.002
    finally:
        voice.stop()
        video.stop()


async def test_after_a_late_wake_up_the_voice_skips_to_its_instant_not_ahead() -> None:
    clock = FakeClock(start=500.0)
    voice = OpusToneTrack(epoch=MediaEpoch(), clock=clock)
    try:
        await _next(voice, clock)
        await clock.advance(0.045)  # a loaded machine: the sender calls 45 ms late
        late = await _next(voice, clock)
        # The slot whose instant has just passed (40 ms), never one ahead of real time.
        assert late.pts == 2 * 960
        following = await _next(voice, clock)
        assert following.pts == 3 * 960
        assert abs(clock.monotonic() - 500.0 - 0.06) < 0.002  # sent at its instant
    finally:
        voice.stop()
