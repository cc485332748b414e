"""Figure ``av_sync``: the avatar's voice against its video, as handed to the app and in a file.

On loopback, against the staging backend, whose video frames carry their media time
(``read_media_time``: ms since the viewer's :class:`~avatar_sdk.testing.synthetic.MediaEpoch`)
and whose voice notes the media time of each tone onset (``OpusToneTrack.onsets``): the
video drawn at ``t`` and the voice onset at ``t`` are one instant at the sender. The voice
is switched from silence to the tone :data:`TRIALS` times (:data:`QUIET` of silence before
each). For each onset, the offset is

    (voice onset's time - its media time) - median over the video frames of the second
    around it of (frame's time - its media time)

in three clocks: when a reader of ``session.avatar_audio`` / ``session.avatar_video`` got
the frames (``handed``), the frames' presentation times (``pts * time_base``), and the
file of ``record_avatar`` (an MP4: AAC and H.264). Positive: the voice comes after the
video (the mouth ahead of the sound). The issue's bound: within +-40 ms.

The voice onset is the first sample above :data:`THRESHOLD`; an Opus decoder coming out of
silence ramps the tone up over two or three frames, so that sample is later than the tone's
first packet by a fixed, known delay: :func:`onset_delay` decodes the same packets (the
staging's one-second cycle, from the onset's place in it) with aiortc's decoder and the
measure takes it off.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import numpy as np
from aiortc.codecs.opus import OpusDecoder
from aiortc.jitterbuffer import JitterFrame

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.media import record_avatar
from avatar_sdk.media.opus import OPUS_SILENCE, encoded_tone
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.synthetic import read_media_time

from .stats import FigureResult, Row, Summary, Target

TITLE = "A/V sync: the avatar's voice onset against its video of the same instant"

TRIALS = 15
#: Silence before each onset, and tone after it (s).
QUIET = 0.5
TONE = 0.3
#: A sample above this (s16) is voice: the staging tone peaks near 9,800.
THRESHOLD = 2000
#: Video frames this close (s of media time) to an onset give the video's offset there.
AROUND = 1.0
#: The issue's bound on the offset.
BOUND = Target("<=", 40.0, "ms")
#: The cases: a calm loopback, and each voice packet delayed by a random 0-60 ms.
JITTER = (0.0, 0.06)

#: (time on some clock, media time) pairs.
Marks = list[tuple[float, float]]

RATE = 48_000
FRAME = 960


def first_loud(frame: Any) -> int | None:
    """The index (samples of one channel) of ``frame``'s first sample above :data:`THRESHOLD`."""
    samples = frame.to_ndarray()
    if samples.dtype.kind == "f":
        samples = samples * 32768
    channels = len(frame.layout.channels)
    if frame.format.is_planar:
        mono = np.abs(samples).max(axis=0)
    else:  # packed: one row, channels interleaved
        mono = np.abs(samples.reshape(-1, channels)).max(axis=1)
    loud = np.flatnonzero(mono > THRESHOLD)
    return int(loud[0]) if len(loud) else None


def onset_delay(media: float) -> float:
    """How long (s) after a tone onset at ``media`` (the staging's media time) its decoded
    voice first goes above :data:`THRESHOLD`, out of silence, with aiortc's decoder."""
    cycle = encoded_tone(440.0, 0.3)
    first = round(media * RATE) // FRAME
    packets = [OPUS_SILENCE] * 10 + [cycle[(first + i) % len(cycle)] for i in range(10)]
    decoder = OpusDecoder()
    for index, packet in enumerate(packets):
        for frame in decoder.decode(JitterFrame(packet, index * FRAME)):
            loud = first_loud(frame)
            if loud is not None and index >= 10:
                return ((index - 10) * FRAME + loud) / RATE
    raise RuntimeError("the tone never decoded above the threshold")


def offsets(onsets: Marks, video: Marks) -> list[float]:
    """Voice-after-video offsets (s) of each heard onset (its time, its media time) against
    the video frames (time, media time) within :data:`AROUND` of it."""
    found: list[float] = []
    for at, media in onsets:
        near = [t - m for t, m in video if abs(m - media) <= AROUND]
        if near:
            found.append((at - media) - statistics.median(near))
    return found


class _Voice:
    """Switches the staging's voice on and off; the media time of each onset."""

    def __init__(self, track: Any) -> None:
        self.track = track
        self.on = False
        track.active = lambda: self.on

    async def trials(self, count: int, heard: Callable[[], None] | None = None) -> list[float]:
        """Switch the tone on ``count`` times; the onsets' media times (s), in order."""
        media: list[float] = []
        for _ in range(count):
            self.on = False
            await asyncio.sleep(QUIET)
            before = len(self.track.onsets)
            self.on = True
            await asyncio.sleep(TONE)
            if len(self.track.onsets) > before:
                media.append(self.track.onsets[-1])
        self.on = False
        await asyncio.sleep(QUIET)
        return media


class _Reader:
    """Reads both of the session's avatar tracks: what the app is handed, and when."""

    def __init__(self, session: AvatarSession) -> None:
        self.audio = session.avatar_audio
        self.video = session.avatar_video
        #: Video frames: (handed, presented, media time).
        self.frames: list[tuple[float, float, float]] = []
        #: Voice onsets: (handed, presented time of the first loud sample), in order.
        self.onsets: list[tuple[float, float]] = []
        self._loud = True
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._read_audio()),
                       asyncio.ensure_future(self._read_video())]  # fmt: skip

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _read_audio(self) -> None:
        assert self.audio is not None
        while True:
            frame = await self.audio.recv()
            handed = time.monotonic()
            index = first_loud(frame)
            if index is not None and not self._loud:
                at = float(frame.pts * frame.time_base) + index / RATE
                self.onsets.append((handed, at))
            self._loud = index is not None

    async def _read_video(self) -> None:
        assert self.video is not None
        while True:
            frame = await self.video.recv()
            handed = time.monotonic()
            media = read_media_time(frame)
            if media is not None:
                self.frames.append((handed, float(frame.pts * frame.time_base), media))


def _file_marks(path: Path) -> tuple[list[float], Marks]:
    """A recording's voice onsets (s into the file) and its video frames (time, media)."""
    onsets: list[float] = []
    video: Marks = []
    with av.open(str(path)) as container:
        for frame in container.decode(*container.streams):
            if isinstance(frame, av.VideoFrame):
                media = read_media_time(frame)
                if media is not None and frame.time is not None:
                    video.append((frame.time, media))
    with av.open(str(path)) as container:
        loud_before = True
        for frame in container.decode(audio=0):
            index = first_loud(frame)
            if index is not None and not loud_before:
                onsets.append((frame.time or 0.0) + index / frame.sample_rate)
            loud_before = index is not None
    return onsets, video


class _VoiceJitter:
    """Delays each of a viewer's voice RTP packets by a random 0..``spread`` s on its way
    out (the video and RTCP untouched), as a jittery network would: the voice buffer grows
    its delay, and the video must be held to keep up with it. aiortc's sender sends with
    ``await transport._send_rtp(bytes)``; an instance attribute of that name is called first
    (as :mod:`avatar_sdk.testing.staging.voice_disorder` does)."""

    def __init__(self, pc: Any, spread: float, seed: int = 30) -> None:
        sender = next(t.sender for t in pc.getTransceivers() if t.kind == "audio")
        transport = sender.transport
        self._ssrc = int(sender._ssrc).to_bytes(4, "big")
        self._send = transport._send_rtp
        self._spread = spread
        self._random = random.Random(seed)
        self._pending: set[asyncio.Task[None]] = set()
        transport._send_rtp = self._filtered

    async def _filtered(self, data: bytes) -> None:
        if len(data) < 12 or data[8:12] != self._ssrc or 192 <= data[1] <= 223:
            await self._send(data)  # not a voice RTP packet (the video, RTCP)
            return
        task = asyncio.ensure_future(self._later(data, self._random.uniform(0, self._spread)))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _later(self, data: bytes, delay: float) -> None:
        await asyncio.sleep(delay)
        with contextlib.suppress(ConnectionError):
            await self._send(data)


async def _measure(trials: int, jitter: float = 0.0) -> dict[str, Any]:
    config = SessionConfig()
    async with StagingServer() as staging:
        session = AvatarSession(staging.url, staging.token, allow_insecure_transport=True,
                                config=config)  # fmt: skip
        async with session:
            (viewer,) = [v for v in staging.media.viewers.values() if v.is_open]
            if jitter:
                _VoiceJitter(viewer.pc, jitter)
            voice = _Voice(viewer.audio)
            # The app: a reader of each track.
            reader = _Reader(session)
            reader.start()
            await asyncio.sleep(2.0)  # past the first sender reports of both tracks
            media = await voice.trials(trials)
            await reader.stop()
            heard = reader.onsets[-len(media) :]
            # The handed frame is the one whose start is the loud sample's frame start.
            handed_onsets = [
                (h, m + onset_delay(m) // (FRAME / RATE) * (FRAME / RATE))
                for (h, _), m in zip(heard, media, strict=False)
            ]
            presented_onsets = [
                (p, m + onset_delay(m)) for (_, p), m in zip(heard, media, strict=False)
            ]
            handed = offsets(handed_onsets, [(h, m) for h, _, m in reader.frames])
            presented = offsets(presented_onsets, [(p, m) for _, p, m in reader.frames])
            # A recording of the same session.
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "avatar.mp4"
                recorder = record_avatar(session.avatar_audio, session.avatar_video, path)
                await recorder.start()
                recorded_media = await voice.trials(trials)
                await recorder.stop()
                file_onsets, file_video = _file_marks(path)
            stv = session.media.stv if session.media is not None else None
            presenter = stv.presenter if stv is not None else None
            held = (presenter.held, presenter.longest_hold) if presenter is not None else (0, 0.0)
            buffer = session.stats().get("voice_buffer", {})
    pairs = zip(file_onsets[-len(recorded_media) :], recorded_media, strict=False)
    recorded = offsets([(at, m + onset_delay(m)) for at, m in pairs], file_video)
    return {
        "jitter": jitter,
        "handed": handed,
        "presented": presented,
        "recorded": recorded,
        "onsets": {"app": len(reader.onsets), "file": len(file_onsets), "sent": len(media)},
        "video_held": held[0],
        "longest_hold": held[1],
        "voice_target_delay": buffer.get("target_delay"),
        "voice_concealed": buffer.get("concealed", 0),
        "voice_late": buffer.get("late", 0),
        "recorder_synchronized": recorder.synchronized,
    }


LABELS = {
    "handed": "handed to the app",
    "presented": "presentation times",
    "recorded": "in a record_avatar MP4",
}


def render(runs: list[dict[str, Any]], trials: int) -> FigureResult:
    result = FigureResult("av_sync", TITLE)
    for measured in runs:
        jitter = measured["jitter"]
        where = "loopback" if not jitter else f"voice jitter 0-{jitter * 1000:.0f} ms"
        for key, label in LABELS.items():
            values = measured[key]
            if not values:
                result.notes.append(f"{where}, {label}: no onset paired ({measured['onsets']})")
                continue
            size = Summary.of([abs(v) for v in values]).scaled(1000.0)
            result.rows.append(Row.of(f"|voice - video| {label}, {where}", size, "ms", BOUND))
            signed = Summary.of(values).scaled(1000.0)
            result.notes.append(
                f"{where}, {label}: signed offset (voice after video) median "
                f"{signed.median:+.1f} ms, min {signed.minimum:+.1f}, max {signed.maximum:+.1f}."
            )
        delay = measured["voice_target_delay"]
        result.notes.append(
            f"{where}: video frames held to meet their voice {measured['video_held']} "
            f"(longest {measured['longest_hold'] * 1000:.1f} ms); the voice buffer's target "
            f"delay at the end {'-' if delay is None else f'{delay * 1000:.0f}'} ms, voice "
            f"packets concealed {measured['voice_concealed']:.0f}, dropped late "
            f"{measured['voice_late']:.0f} (an onset's first packet concealed is heard a frame "
            "or two later: the outliers under jitter)."
        )
    result.notes.append(f"{trials} onsets per clock and case.")
    result.data = {
        "trials": trials,
        "runs": [
            {**m, **{f"{key}_ms": [v * 1000 for v in m[key]] for key in LABELS}} for m in runs
        ],
    }
    return result


def run(trials: int = TRIALS) -> FigureResult:
    """Run the av_sync figure (calm loopback, then jittery voice) in its own event loop."""
    runs = [asyncio.run(_measure(trials, jitter)) for jitter in JITTER]
    return render(runs, trials)
