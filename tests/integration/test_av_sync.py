"""The avatar's voice and video on one presentation timeline (issue 30 item 5).

Each frame handed to the app carries its presentation time (``pts * time_base``), on one
timeline for both tracks, mapped from the RTP timestamps by the staging's RTCP sender
reports; a recording places both tracks by it, so its streams start aligned. What is
asserted here is behaviour: that the times exist, only grow, follow the sender's clock, and
that a file's streams start together. How far apart the voice and the video are, handed to
the app and in a file, is measured by ``python -m benchmarks --only av_sync``.
"""

from __future__ import annotations

import asyncio
import fractions
import itertools
import time
from pathlib import Path
from typing import Any

import av

from avatar_sdk import AvatarSession
from avatar_sdk.media import ToneSource, record_avatar
from avatar_sdk.media.recorder import shared_timeline
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.synthetic import read_media_time
from avatar_sdk.transport.rtc.core.av_sync import PresentationTimeline

from .conftest import FAST, current_downlink, until
from .test_recording import AUDIO_FRAME, Timeline, decoded

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0)


async def _session(staging: StagingServer) -> AvatarSession:
    session = AvatarSession(
        staging.url, staging.token, allow_insecure_transport=True, audio=ToneSource(),
        config=MEDIA,
    )  # fmt: skip
    await session.connect()
    return session


async def test_two_tracks_on_one_timeline_are_recorded_by_it(tmp_path: Path) -> None:
    """Local tracks sharing a timeline: the voice before the first video frame is left out,
    and the rest is placed by its presentation time, whenever it was read."""
    shared = PresentationTimeline()
    video = Timeline("video", [45_000 + i * 4500 for i in range(8)])  # from 0.5 s
    audio = Timeline("audio", [i * AUDIO_FRAME for i in range(60)])  # from 0 s, 1.2 s of it
    video.timeline = audio.timeline = shared  # type: ignore[attr-defined]
    assert shared_timeline(audio, video) and not shared_timeline(audio, None)
    path = tmp_path / "avatar.mp4"
    async with record_avatar(audio, video, path) as recorder:
        await asyncio.wait_for(asyncio.gather(video.delivered.wait(), audio.delivered.wait()), 10)
    assert recorder.synchronized and recorder.failure is None
    assert recorder.skipped == 25  # 0.5 s of voice before the first video frame
    assert recorder.frames == {"audio": 35, "video": 8}
    with av.open(str(path)) as container:
        (audio_stream,) = container.streams.audio
        first_audio = next(container.decode(audio_stream)).time
    with av.open(str(path)) as container:
        first_video = next(container.decode(video=0)).time
    assert first_audio is not None and first_video is not None
    assert abs(first_audio - first_video) < 0.03, (first_audio, first_video)


async def test_tracks_of_their_own_keep_their_arrival_placement(tmp_path: Path) -> None:
    """Tracks without a shared timeline are recorded as before: nothing left out."""
    video = Timeline("video", [45_000 + i * 4500 for i in range(8)])
    audio = Timeline("audio", [i * AUDIO_FRAME for i in range(60)])
    async with record_avatar(audio, video, tmp_path / "avatar.mp4") as recorder:
        await asyncio.wait_for(asyncio.gather(video.delivered.wait(), audio.delivered.wait()), 10)
    assert not recorder.synchronized and recorder.skipped == 0
    assert recorder.frames == {"audio": 60, "video": 8}


async def test_the_avatar_s_frames_carry_presentation_times_on_one_timeline(
    staging: StagingServer,
) -> None:
    session = await _session(staging)
    try:
        audio, video = session.avatar_audio, session.avatar_video
        assert audio is not None and video is not None
        assert audio.timeline is not None and audio.timeline is video.timeline
        stv = current_downlink(session)
        got: dict[str, list[tuple[Any, bool]]] = {"audio": [], "video": []}

        async def read(track: Any, kind: str) -> None:
            while True:
                frame = await track.recv()
                got[kind].append((frame, stv.presenter.clocks[kind].known))

        readers = [asyncio.ensure_future(read(audio, "audio")),
                   asyncio.ensure_future(read(video, "video"))]  # fmt: skip
        try:
            # The staging's senders report on both tracks (aiortc: every 0.5-1.5 s).
            assert await until(
                lambda: (
                    sum(known for _, known in got["video"]) >= 20
                    and sum(known for _, known in got["audio"]) >= 40
                ),
                15,
            )
        finally:
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
        assert stv.presenter.reports("audio") >= 1 and stv.presenter.reports("video") >= 1
        for kind, base in (("audio", 48_000), ("video", 90_000)):
            frames = [frame for frame, _ in got[kind]]
            assert all(f.pts is not None for f in frames)
            assert all(f.time_base == fractions.Fraction(1, base) for f in frames)
            times = [f.pts for f in frames]
            assert all(b > a for a, b in itertools.pairwise(times)), kind
        # With its reports, the video's presentation time follows the sender's clock (the
        # media time it drew), not when each frame happened to arrive: a constant apart.
        apart = [
            float(f.pts * f.time_base) - media
            for f, known in got["video"]
            if known and (media := read_media_time(f)) is not None
        ]
        assert len(apart) >= 20
        assert max(apart) - min(apart) < 0.05, (min(apart), max(apart))
    finally:
        await session.close()


async def test_a_recording_of_the_avatar_starts_aligned(
    staging: StagingServer, tmp_path: Path
) -> None:
    session = await _session(staging)
    path = tmp_path / "avatar.mp4"
    try:
        stv = current_downlink(session)
        assert await until(
            lambda: stv.presenter.reports("audio") >= 1 and stv.presenter.reports("video") >= 1,
            10,
        )
        recorder = record_avatar(session.avatar_audio, session.avatar_video, path)
        await recorder.start()
        started = time.monotonic()
        assert await until(lambda: recorder.frames.get("video", 0) >= 20, 10), started
        await recorder.stop()
    finally:
        await session.close()
    assert recorder.synchronized and recorder.failure is None
    assert decoded(path)["audio"] > 10
    with av.open(str(path)) as container:
        first_audio = next(container.decode(audio=0)).time
    with av.open(str(path)) as container:
        first_video = next(container.decode(video=0)).time
    assert first_audio is not None and first_video is not None
    # Both streams start at the first video frame (within an AAC frame, 21 ms).
    assert abs(first_audio - first_video) < 0.03, (first_audio, first_video)


async def test_the_timeline_goes_on_across_a_re_subscribe(staging: StagingServer) -> None:
    """The session's tracks outlive a subscription: after a WHEP re-subscribe (a new peer, new
    RTP clocks, new reports) each track's presentation times still only grow, on the same
    timeline."""
    session = await _session(staging)
    try:
        audio, video = session.avatar_audio, session.avatar_video
        assert audio is not None and video is not None
        times: dict[str, list[float]] = {"audio": [], "video": []}

        async def read(track: Any, kind: str) -> None:
            while True:
                frame = await track.recv()
                times[kind].append(float(frame.pts * frame.time_base))

        readers = [asyncio.ensure_future(read(audio, "audio")),
                   asyncio.ensure_future(read(video, "video"))]  # fmt: skip
        try:
            assert await until(lambda: len(times["video"]) >= 10, 10)
            first = current_downlink(session)
            await staging.faults.ice_failure("stv")
            await session.wait_for("media_recovered", timeout=8)
            second = current_downlink(session)
            assert second is not first
            marks = {kind: len(got) for kind, got in times.items()}
            assert await until(
                lambda: (
                    all(len(times[k]) >= marks[k] + 20 for k in times)
                    and second.presenter.clocks["video"].known
                ),
                10,
            )
        finally:
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
        for kind, got in times.items():
            assert all(b > a for a, b in itertools.pairwise(got)), kind
    finally:
        await session.close()


def test_talk_records_the_avatar_s_voice_on_the_video_s_timeline() -> None:
    """``talk --record`` wraps the voice (to know when it fell silent): the wrapper keeps
    its timeline, so the recording is placed by it (synchronized)."""
    from avatar_sdk._cli import talk  # noqa: PLC0415 - the CLI's module, as talk runs it
    from avatar_sdk.transport.rtc.stv import FanoutTrack  # noqa: PLC0415

    timeline = PresentationTimeline()
    audio, video = FanoutTrack("audio", timeline=timeline), FanoutTrack("video", timeline=timeline)
    assert shared_timeline(talk._Heard(audio), video)
    assert not shared_timeline(talk._Heard(FanoutTrack("audio")), video)
