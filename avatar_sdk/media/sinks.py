"""Sinks for the avatar's received tracks (``session.avatar_audio`` / ``avatar_video``).

A received aiortc track must be read continuously or its frames pile up; bots rarely
keep pace with 50 audio frames and 30 video frames a second. :class:`FrameIterator`
reads on its own task into a small buffer that drops the *oldest* frames, so a slow
consumer always sees recent media and memory stays bounded. :class:`AudioLevelMeter`
turns audio frames into RMS levels (is the avatar speaking?), and :func:`record_avatar`
writes the tracks to a file.

A track delivers each frame once: give each sink its own track, or fan one out with
``aiortc.contrib.media.MediaRelay``. Sinks never stop the tracks they read (the session
owns them).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections import deque
from types import TracebackType
from typing import Any, Final, Self

import av
import numpy as np
from aiortc.contrib.media import MediaRecorder
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av.frame import Frame
from av.packet import Packet

from ..besteffort import best_effort
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from .devices import describe

__all__ = [
    "AudioLevelMeter",
    "FrameIterator",
    "Recorder",
    "frame_rms",
    "record_avatar",
]

log = sdk_logger(__name__)


class FrameIterator:
    """Async iterator over the decoded frames of a received track, never unbounded.

    A reader task (started by the first ``__anext__``) pulls frames into a buffer of
    ``max_queue``; when it is full the oldest frame is dropped and ``dropped`` counts it.
    Iteration ends when the track ends (``MediaStreamError``, e.g. the peer closed) or
    after :meth:`aclose`; any other error from the track is raised once the buffered
    frames are consumed. Use ``async with`` (or ``aclose()``) so the reader task is
    cancelled and awaited.
    """

    def __init__(self, track: MediaStreamTrack, *, max_queue: int = 8) -> None:
        if max_queue < 1:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "max_queue must be at least 1")
        self.track = track
        self._frames: deque[Frame] = deque(maxlen=max_queue)
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._ended = False
        self._closed = False
        self.received = 0
        self.dropped = 0

    @property
    def closed(self) -> bool:
        """True once the track ended or ``aclose()`` was called."""
        return self._closed or self._ended

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Frame:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(
                self._read(), name="avatar_sdk.media.FrameIterator"
            )
        while not self._frames:
            if self._closed:
                raise StopAsyncIteration
            if self._ended:
                error, self._error = self._error, None
                if error is not None:
                    raise error
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._frames.popleft()

    async def _read(self) -> None:
        try:
            while True:
                frame = await self.track.recv()
                if not isinstance(frame, Frame):
                    continue  # encoded packets (decode=False players) are not frames
                if len(self._frames) == self._frames.maxlen:
                    self.dropped += 1
                self._frames.append(frame)
                self.received += 1
                self._wakeup.set()
        except MediaStreamError:
            pass
        except Exception as exc:
            self._error = exc
        finally:
            self._ended = True
            self._wakeup.set()

    async def aclose(self) -> None:
        """Stop reading (the track itself is left running); idempotent."""
        self._closed = True
        self._frames.clear()
        self._wakeup.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


# --------------------------------------------------------------------------- levels

#: sample format → (array typecode, full-scale value)
_FORMATS: Final[dict[str, tuple[str, float]]] = {
    "s16": ("h", 32768.0),
    "s16p": ("h", 32768.0),
    "s32": ("i", 2147483648.0),
    "s32p": ("i", 2147483648.0),
    "flt": ("f", 1.0),
    "fltp": ("f", 1.0),
    "dbl": ("d", 1.0),
    "dblp": ("d", 1.0),
}


def frame_rms(frame: av.AudioFrame) -> float:
    """Root-mean-square level of an audio frame over all channels, 1.0 = full scale.

    Vectorised (numpy over the planes' buffers, no copy of the samples): a few
    microseconds per 20 ms frame, where a Python loop over the samples cost ~50-100.
    """
    if frame.format.name not in _FORMATS:
        converter = av.AudioResampler(
            format="s16", layout=frame.layout, rate=frame.sample_rate or None
        )
        converted = converter.resample(frame)
        if not converted:
            return 0.0
        samples = sum(f.samples for f in converted)
        energy = sum(frame_rms(f) ** 2 * f.samples for f in converted)
        return math.sqrt(energy / samples) if samples else 0.0
    typecode, full_scale = _FORMATS[frame.format.name]
    total, count = _energy(frame, np.dtype(typecode))
    if not count:
        return 0.0
    return math.sqrt(total / count) / full_scale


def _energy(frame: av.AudioFrame, dtype: np.dtype[Any]) -> tuple[float, int]:
    """Sum of squared samples over every plane of ``frame``, and how many samples."""
    per_plane = frame.samples * (1 if frame.format.is_planar else len(frame.layout.channels))
    total = 0.0
    count = 0
    for plane in frame.planes:
        view = memoryview(plane)
        values = np.frombuffer(
            view, dtype=dtype, count=min(per_plane, view.nbytes // dtype.itemsize)
        )
        wide = values.astype(np.float64)  # int16 squares summed in float64 are exact
        total += float(np.dot(wide, wide))
        count += values.size
    return total, count


class AudioLevelMeter:
    """RMS level per received audio frame, for bots that react to the avatar speaking.

    ``async for level in meter`` yields one float per frame (1.0 = full scale); ``level``
    is the latest, ``peak`` the highest so far, ``speaking`` whether ``level`` reaches
    ``threshold``. Reads through a :class:`FrameIterator` (bounded, drops the oldest).
    """

    def __init__(
        self, track: MediaStreamTrack, *, threshold: float = 0.01, max_queue: int = 8
    ) -> None:
        if track.kind != "audio":
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"not an audio track: {track.kind}")
        self.threshold = threshold
        self._frames = FrameIterator(track, max_queue=max_queue)
        self.level = 0.0
        self.peak = 0.0
        self.frames = 0

    @property
    def speaking(self) -> bool:
        """True when the latest frame's level reaches ``threshold``."""
        return self.frames > 0 and self.level >= self.threshold

    @property
    def dropped(self) -> int:
        """Frames skipped because the consumer lagged."""
        return self._frames.dropped

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> float:
        while True:
            frame = await self._frames.__anext__()
            if isinstance(frame, av.AudioFrame):
                break
        self.level = frame_rms(frame)
        self.peak = max(self.peak, self.level)
        self.frames += 1
        return self.level

    async def wait_for_speech(self, timeout: float | None = None) -> float:
        """Consume frames until one reaches ``threshold``; its level.

        Raises ``TimeoutError`` after ``timeout`` seconds, ``StopAsyncIteration`` if
        the track ends first.
        """
        async with asyncio.timeout(timeout):
            while True:
                level = await self.__anext__()
                if level >= self.threshold:
                    return level

    async def aclose(self) -> None:
        """Stop reading the track; idempotent."""
        await self._frames.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


# --------------------------------------------------------------------------- recording


class _FirstFrameGate(MediaStreamTrack):
    """Passes a track's frames through and opens ``opened`` once the first has gone."""

    def __init__(self, inner: MediaStreamTrack) -> None:
        super().__init__()
        self.kind = inner.kind
        self.inner = inner
        self.opened = asyncio.Event()

    async def recv(self) -> Frame | Packet[Any]:
        frame = await self.inner.recv()
        self.opened.set()
        return frame


class _Gated(MediaStreamTrack):
    """A track whose frames flow only once ``gate`` is open (earlier ones stay queued in the
    inner track, which keeps its own bound)."""

    def __init__(self, inner: MediaStreamTrack, gate: asyncio.Event) -> None:
        super().__init__()
        self.kind = inner.kind
        self.inner = inner
        self.gate = gate

    async def recv(self) -> Frame | Packet[Any]:
        await self.gate.wait()
        return await self.inner.recv()


class Recorder:
    """Records received tracks to a file with aiortc's ``MediaRecorder``.

    The container follows the extension (``.wav``: PCM audio; ``.mp4``: AAC/H.264;
    ``.webm``/``.ogg``: Opus/VP8); ``format``/``options`` go to FFmpeg unchanged. The
    file is created by :meth:`start` and finalized by :meth:`stop`, which also awaits the
    reader tasks ``MediaRecorder`` only cancels. Use as ``async with`` for both.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        audio_track: MediaStreamTrack | None = None,
        video_track: MediaStreamTrack | None = None,
        format: str | None = None,
        options: dict[str, str] | None = None,
    ) -> None:
        if audio_track is None and video_track is None:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "nothing to record: both tracks are None")
        self.path = os.fspath(path)
        self.audio_track = audio_track
        self.video_track = video_track
        self._format = format
        self._options = options
        self._recorder: MediaRecorder | None = None
        self._tasks: set[asyncio.Task[object]] = set()
        self._state = "new"

    @property
    def recording(self) -> bool:
        """True between ``start()`` and ``stop()``."""
        return self._state == "recording"

    async def start(self) -> None:
        """Create the file and start reading the tracks."""
        if self._state != "new":
            raise AvatarError(ErrorCode.INVALID_STATE, f"recorder already {self._state}")
        self._check_target()
        recorder: MediaRecorder | None = None
        audio, video = self.audio_track, self.video_track
        if audio is not None and video is not None:
            # MediaRecorder sizes the video stream from its first frame, but the container
            # opens every codec at the first packet it muxes: audio first would open the
            # video codec unsized ("Cannot change width after codec is open") and lose the
            # video. So audio waits for the first video frame.
            gate = _FirstFrameGate(video)
            audio, video = _Gated(audio, gate.opened), gate
        try:
            recorder = MediaRecorder(self.path, format=self._format, options=self._options)
            for track in (audio, video):
                if track is not None:
                    recorder.addTrack(track)
        except Exception as exc:
            if recorder is not None:
                with best_effort("closing a half-built MediaRecorder", log):
                    await recorder.stop()  # closes the container
            self._state = "failed"
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, f"cannot record to {self.path}: {describe(exc)}"
            ) from exc
        before = asyncio.all_tasks()
        await recorder.start()  # creates its reader tasks synchronously, no await inside
        self._tasks = asyncio.all_tasks() - before
        self._recorder = recorder
        self._state = "recording"

    def _check_target(self) -> None:
        # FFmpeg opens the file at the first write, inside MediaRecorder's task, where a
        # failure would only be logged: refuse an unwritable local path up front instead.
        if "://" in self.path or "%" in self.path:
            return  # a URL or an image-sequence pattern: FFmpeg's business
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            self._state = "failed"
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"no such directory: {parent}")
        if not os.access(parent, os.W_OK) or os.path.isdir(self.path):
            self._state = "failed"
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"cannot write {self.path}")

    async def stop(self) -> None:
        """Flush and close the file; idempotent. A recording that never started is a no-op."""
        if self._state != "recording":
            self._state = "stopped"
            return
        self._state = "stopped"
        recorder, self._recorder = self._recorder, None
        tasks, self._tasks = self._tasks, set()
        try:
            if recorder is not None:
                await recorder.stop()
        finally:
            for task in tasks:
                task.cancel()
            for result in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(result, Exception):
                    log.warning("recording to %s failed: %s", self.path, describe(result))

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def record_avatar(
    audio_track: MediaStreamTrack | None,
    video_track: MediaStreamTrack | None,
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    options: dict[str, str] | None = None,
) -> Recorder:
    """A :class:`Recorder` for the avatar's tracks (either may be None); call ``start()``."""
    return Recorder(
        path, audio_track=audio_track, video_track=video_track, format=format, options=options
    )
