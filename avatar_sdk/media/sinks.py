"""Sinks for the avatar's received tracks (``session.avatar_audio`` / ``avatar_video``).

A received aiortc track must be read continuously or its frames pile up; bots rarely
keep pace with 50 audio frames and 30 video frames a second. :class:`FrameIterator`
reads on its own task into a small buffer that drops the *oldest* frames, so a slow
consumer always sees recent media and memory stays bounded. :class:`AudioLevelMeter`
turns audio frames into RMS levels (is the avatar speaking? :mod:`.levels`), and
:func:`record_avatar` writes the tracks to a file (:mod:`.recorder`).

A track delivers each frame once: give each sink its own track, or fan one out with
``aiortc.contrib.media.MediaRelay``. Sinks never stop the tracks they read (the session
owns them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from types import TracebackType
from typing import Self

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av.frame import Frame

from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from .levels import frame_rms
from .recorder import Recorder, record_avatar

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
# Recorder and record_avatar live in .recorder (their own timeline and close rules); they
# are imported above and stay importable from here.
