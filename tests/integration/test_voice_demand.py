"""The avatar's voice is decoded on the loop only while somebody listens (loop_decode.py).

Over real WebRTC against the staging server, audio-only sessions with the default
``audio_codec="loop"``: nobody reading ``avatar_audio`` and no reply awaited means the voice
is counted as it arrives but not decoded past its first frame; a reader attaching
mid-session gets decoded frames at once (every Opus packet decodes alone: no keyframe to
wait for); a reply awaited by ``speak()`` turns decoding on for its onset; and liveness
still finds a dead downlink within its bound with nobody listening.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from avatar_sdk import AvatarSession
from avatar_sdk.media import FrameIterator, ToneSource
from avatar_sdk.testing import StagingServer

from .conftest import (
    FAST,
    connected_session,
    current_downlink,
    dead_downlink_found_in_its_bound,
    healthy_for_three_stall_windows,
    until,
)

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0)

#: Wall-clock bound of "a reader attaching gets voice frames": the next 20 ms packet, with
#: room for a loaded machine.
ATTACH_BOUND = 2.0


async def _connected(staging: StagingServer, **kwargs: Any) -> AvatarSession:
    config = kwargs.pop("config", MEDIA)
    return await connected_session(staging, config, audio=ToneSource(), video=False, **kwargs)


async def test_unheard_voice_is_counted_not_decoded_and_a_reader_gets_it_at_once(
    staging: StagingServer,
) -> None:
    session = await _connected(staging)
    try:
        stv = current_downlink(session)
        decoder = stv.audio_decoder
        assert decoder is not None
        # Nobody listens: a second of voice arrives, counted for liveness, not decoded.
        assert await until(lambda: decoder.frames_skipped >= 50, 5)
        decoded = decoder.frames_decoded
        assert 1 <= decoded <= 3, decoded  # the first frame (and one or two in flight)
        assert stv.frames["audio"] >= decoder.frames_skipped + decoded - 1

        audio = session.avatar_audio
        assert audio is not None
        started = time.monotonic()
        async with FrameIterator(audio) as frames:
            first = await anext(frames)
            waited = time.monotonic() - started
            got = [first] + [await anext(frames) for _ in range(9)]
        assert waited < ATTACH_BOUND, waited
        assert all(f.sample_rate == 48_000 and f.samples == 960 for f in got)
        # Fresh frames, not the first one left in the buffer since connect: consecutive pts.
        pts = [f.pts for f in got]
        assert all(b - a == 960 for a, b in itertools.pairwise(pts)), pts
        assert decoder.frames_decoded >= decoded + 10

        # The reader left: after its buffer's worth of unread frames, decoding stops again.
        skipped = decoder.frames_skipped
        assert await until(lambda: decoder.frames_skipped >= skipped + 50, 5)
    finally:
        await session.close()


async def test_a_reply_awaited_turns_decoding_on_for_its_onset(staging: StagingServer) -> None:
    session = await _connected(staging, config=MEDIA.with_(wait_for_greeting=True))
    try:
        decoder = current_downlink(session).audio_decoder
        assert decoder is not None
        assert await until(lambda: decoder.frames_skipped >= 10, 5)
        before = decoder.frames_decoded
        reply = await session.ask("hello", timeout=15)
        # The first audible frame of the answer is found on decoded frames: decoding ran.
        assert reply.audio_latency is not None
        assert decoder.frames_decoded > before
    finally:
        await session.close()


async def test_liveness_with_nobody_listening_finds_a_dead_downlink_in_its_bound(
    staging: StagingServer,
) -> None:
    stall = 1.0
    session = await _connected(staging, config=MEDIA.with_(media_stall_timeout=stall))
    try:
        lanes = session.media
        assert lanes is not None
        stv = current_downlink(session)
        decoder = stv.audio_decoder
        assert decoder is not None
        # Healthy for three stall windows with nobody listening: no verdict of death.
        await healthy_for_three_stall_windows(lanes, stall)
        assert decoder.frames_skipped > 0 and decoder.frames_decoded <= 3
        await dead_downlink_found_in_its_bound(session, staging, stall)
    finally:
        staging.faults.clear()
        await session.close()
