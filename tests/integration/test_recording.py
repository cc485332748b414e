"""Recordings that open: ``Recorder`` and ``avatar-sdk talk --record`` on every way a
recording ends.

A received track's timestamps are the sender's (RTP clock): two video frames can come
closer together than the file's frame rate (a late frame and the next one, the staging's
pacing after a stall), and a re-subscribed downlink starts a new clock (the timestamps jump
back). Each of those once made the muxer refuse a packet, and the recorder then never
closed the container: the file was left as a 48-byte header that no player opens
(``InvalidDataError``), while ``talk`` still printed "recorded". These tests feed exactly
those timelines, through local tracks and over real sockets, and open every file with
``av``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from avatar_sdk import AvatarSession
from avatar_sdk.media import ToneSource, record_avatar
from avatar_sdk.testing import StagingServer

from .conftest import FAST, until
from .test_cli import ROOT, talk_args, user_turn_arrived

VIDEO_CLOCK = 90_000
AUDIO_RATE = 48_000
AUDIO_FRAME = 960


def decoded(path: Path) -> dict[str, int]:
    """Frames per stream kind in ``path``: the file must open and decode to the end."""
    with av.open(str(path)) as container:
        counts = dict.fromkeys(sorted(s.type for s in container.streams), 0)
        for frame in container.decode(*container.streams):
            counts["video" if isinstance(frame, av.VideoFrame) else "audio"] += 1
    return counts


class Timeline(MediaStreamTrack):
    """A local track that delivers one frame per given pts (sender clock units), then ends;
    ``delivered`` is set once the last one has been taken."""

    def __init__(self, kind: str, pts: Sequence[int]) -> None:
        super().__init__()
        self.kind = kind
        self._pts = list(pts)
        self.delivered = asyncio.Event()

    async def recv(self) -> av.AudioFrame | av.VideoFrame:
        await asyncio.sleep(0)  # a frame per loop turn: the other track's frames interleave
        if not self._pts:
            self.delivered.set()
            raise MediaStreamError
        pts = self._pts.pop(0)
        frame: av.AudioFrame | av.VideoFrame
        if self.kind == "video":
            frame = av.VideoFrame.from_ndarray(np.zeros((240, 320, 3), np.uint8), format="rgb24")
            frame.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        else:
            samples = np.zeros((1, AUDIO_FRAME), np.int16)
            frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
            frame.sample_rate = AUDIO_RATE
            frame.time_base = fractions.Fraction(1, AUDIO_RATE)
        frame.pts = pts
        return frame


#: 20 fps video as the staging's PatternTrack paces it after a late frame: frame 3 comes
#: 10 ms after frame 2 (both round to one 1/30 s slot).
LATE_FRAME = [0, 4500, 9000, 9900, 13500, 18000, 22500, 27000]
#: A re-subscribed downlink: a new RTP clock, behind the old one.
CLOCK_RESET = [900_000 + i * 4500 for i in range(5)] + [i * 4500 for i in range(5)]
AUDIO = [i * AUDIO_FRAME for i in range(40)]
STEADY = [i * 4500 for i in range(8)]
#: Audio that overlaps itself (a repeated frame), then a reset.
AUDIO_OVERLAP = [0, 960, 960, 1920, 960, 2880] + [i * AUDIO_FRAME for i in range(10)]


@pytest.mark.parametrize(
    ("video_pts", "audio_pts"),
    [(LATE_FRAME, AUDIO), (CLOCK_RESET, AUDIO), (LATE_FRAME, AUDIO_OVERLAP)],
    ids=["late-video-frame", "video-clock-reset", "audio-overlap"],
)
async def test_a_recording_of_jittery_timestamps_opens_with_every_frame(
    tmp_path: Path, video_pts: list[int], audio_pts: list[int]
) -> None:
    video, audio = Timeline("video", video_pts), Timeline("audio", audio_pts)
    path = tmp_path / "avatar.mp4"
    recorder = record_avatar(audio, video, path)
    await recorder.start()
    await asyncio.wait_for(asyncio.gather(video.delivered.wait(), audio.delivered.wait()), 10)
    await recorder.stop()
    counts = decoded(path)
    assert counts["video"] == len(video_pts), counts
    assert counts["audio"] > 0, counts
    assert recorder.failure is None


@pytest.mark.parametrize("suffix", [".webm", ".mkv"])
async def test_other_containers_keep_frames_a_millisecond_apart(
    tmp_path: Path, suffix: str
) -> None:
    """WebM and Matroska count in milliseconds: frames 1/90000 s apart stay distinct."""
    video = Timeline("video", [0, 4500, 4501, 4502, 9000])
    audio = Timeline("audio", AUDIO[:20])
    path = tmp_path / f"avatar{suffix}"
    async with record_avatar(audio, video, path) as recorder:
        await asyncio.wait_for(asyncio.gather(video.delivered.wait(), audio.delivered.wait()), 10)
    with av.open(str(path)) as container:
        pts = [frame.pts for frame in container.decode(video=0)]
    assert len(pts) == 5 and pts == sorted(set(pts)), pts
    assert recorder.failure is None and recorder.frames == {"audio": 20, "video": 5}


async def test_a_recording_is_closed_when_the_encoder_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A frame the encoder cannot take (here: a video frame on the audio track) ends that
    track's recording; the file still closes, opens and holds what was written, and the
    failure is kept (``failure``) and logged with its type."""

    class Wrong(Timeline):
        async def recv(self) -> Any:
            if len(self._pts) == 2:
                return av.VideoFrame(16, 16, "yuv420p")
            return await super().recv()

    video, audio = Timeline("video", STEADY), Wrong("audio", AUDIO[:6])
    path = tmp_path / "avatar.mp4"
    caplog.set_level(logging.WARNING, logger="avatar_sdk")
    async with record_avatar(audio, video, path) as recorder:
        await asyncio.wait_for(video.delivered.wait(), 10)
    counts = decoded(path)
    assert counts["video"] == len(STEADY) and counts["audio"] > 0, counts
    assert recorder.failure is not None and "audio" in recorder.failure
    assert any("audio" in r.getMessage() and "Error" in r.getMessage() for r in caplog.records)


async def test_a_stop_cut_short_still_leaves_a_file_that_opens(tmp_path: Path) -> None:
    """``talk`` bounds ``stop()`` by ``close_timeout``: cancelled while it waits for the
    reader tasks, it still closes the file (closing is synchronous, in a ``finally``)."""
    video = Timeline("video", [i * 4500 for i in range(10_000)])
    audio = Timeline("audio", [i * AUDIO_FRAME for i in range(10_000)])
    path = tmp_path / "avatar.mp4"
    recorder = record_avatar(audio, video, path)
    await recorder.start()
    assert await until(lambda: recorder.frames["audio"] >= 5, 10)
    stopping = asyncio.ensure_future(recorder.stop())
    await asyncio.sleep(0)  # stop() has cancelled the readers and now waits for them
    stopping.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stopping
    assert stopping.cancelled()
    counts = decoded(path)
    assert counts["video"] >= 1 and counts["audio"] >= 5, counts
    readers = [t for t in asyncio.all_tasks() if "avatar_sdk.media.Recorder" in t.get_name()]
    if readers:  # cancelled by stop(): they end at their next step
        await asyncio.wait(readers, timeout=5)
    assert all(t.done() for t in readers)


# --------------------------------------------------------------------------- real sockets
async def test_a_recording_across_a_downlink_stall_opens(
    staging: StagingServer, tmp_path: Path
) -> None:
    """Over real sockets: the staging's video comes back from a stall with two frames at
    once (its pacing catches up), which is the timeline that broke the file."""
    session = AvatarSession(
        staging.url, staging.token, allow_insecure_transport=True, audio=ToneSource(),
        config=FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0),
    )  # fmt: skip
    path = tmp_path / "avatar.mp4"
    try:
        await session.connect()
        assert session.media is not None and session.media.stv is not None
        stv = session.media.stv
        recorder = record_avatar(session.avatar_audio, session.avatar_video, path)
        await recorder.start()
        for _ in range(3):
            mark = stv.frames["video"]
            assert await until(lambda m=mark: stv.frames["video"] >= m + 5, 10)
            await staging.faults.media_stall("stv", seconds=0.3)
            assert await until(lambda m=mark: stv.frames["video"] >= m + 15, 10)
        await recorder.stop()
    finally:
        await session.close()
    counts = decoded(path)
    assert counts["video"] > 10 and counts["audio"] > 10, counts
    assert recorder.failure is None


# --------------------------------------------------------------------------- talk --record
async def talk_process(staging: StagingServer, *args: str) -> asyncio.subprocess.Process:
    """``avatar-sdk talk`` as a process of its own (signals, the interpreter's exit)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk._cli", *talk_args(staging, *args),
        cwd=ROOT, env={**os.environ, "AVATAR_TOKEN": staging.token},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def finished(proc: asyncio.subprocess.Process) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``proc`` (killed if it outlives 30 s)."""
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, stdout.decode(), stderr.decode()


async def recording_under_way(staging: StagingServer, path: Path) -> None:
    """The process connected, its recording has written, and the avatar's video has been
    flowing for a while."""
    assert await until(lambda: bool(staging.live_sids), 30)
    assert await until(path.exists, 30)
    assert await until(lambda: staging.media.frames_sent >= 30, 30)


@pytest.mark.parametrize("ending", ["normal", "ctrl_c", "end_conversation", "server_disconnect"])
async def test_talk_record_leaves_a_file_that_opens_however_the_run_ends(
    staging: StagingServer, tmp_path: Path, ending: str
) -> None:
    """Each way a ``talk --record`` run ends, with a downlink stall during the recording
    (the timeline that used to break the file): the file opens with both kinds of frames."""
    path = tmp_path / "avatar.mp4"
    turns = ["--say", "hi"]
    # The first turn is under way while the media stalls and when the run is ended.
    staging.brain.stall(2 if ending == "normal" else 10)
    if ending != "normal":
        turns += ["--say", "never sent"]
    proc = await talk_process(staging, "--record", str(path), *turns)
    await recording_under_way(staging, path)
    assert await until(user_turn_arrived(staging), 10)
    mark = staging.media.frames_sent
    await staging.faults.media_stall("stv", seconds=0.3)
    assert await until(lambda: staging.media.frames_sent >= mark + 10, 10)
    if ending == "ctrl_c":
        proc.send_signal(signal.SIGINT)
    elif ending != "normal":
        await getattr(staging.faults, ending)()
    code, stdout, stderr = await finished(proc)
    expected = {"normal": 0, "ctrl_c": 130, "end_conversation": 6, "server_disconnect": 6}
    assert code == expected[ending], stdout + stderr
    assert "Traceback" not in stderr
    assert "recording failed" not in stdout + stderr
    counts = decoded(path)
    assert counts.get("video", 0) >= 1 and counts.get("audio", 0) >= 1, counts
