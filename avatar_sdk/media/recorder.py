"""Recording the avatar's received tracks to a file that always opens.

Written for the SDK rather than taken from aiortc's ``MediaRecorder``, which lost whole
recordings: it handed the encoder each frame's timestamp as the sender stamped it, in a
1/30 s time base. Two video frames closer than that (a late frame and the next, as any
paced sender produces after a hiccup) or a timeline that jumps back (a re-subscribed
downlink starts a new RTP clock) made the MP4 muxer refuse a packet ("non monotonically
increasing dts"); the track's task died with it, the flush in ``stop()`` raised again, and
the container was never closed: a 48-byte header no player opens (``InvalidDataError``).

So here each track has a :class:`_Timeline` that places every frame strictly after the
previous one of its kind (and re-anchors on a jumping clock), an encoder or muxer error
ends only that track's recording (kept in :attr:`Recorder.failure`, logged with its type),
and :meth:`Recorder.stop` closes the container whatever happened before, even when it is
itself cancelled (``talk`` bounds it by ``close_timeout``): closing is synchronous, so the
file is complete the moment ``stop()`` returns or is interrupted.

The avatar's two tracks (a session's ``avatar_audio`` and ``avatar_video``) share a
presentation timeline (their frames' ``pts``, :mod:`avatar_sdk.transport.rtc.presentation`):
recorded together, each frame is placed at its presentation time less the first recorded
frame's, whenever it was read, so the voice and the video of one instant are at one time in
the file; voice from before the first video frame is left out, so the streams start aligned.
"""

from __future__ import annotations

import asyncio
import fractions
import os
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Self, cast

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av.audio.stream import AudioStream
from av.container import OutputContainer
from av.video.stream import VideoStream

from ..besteffort import best_effort
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from .devices import describe

__all__ = ["Recorder", "record_avatar", "shared_timeline"]

log = sdk_logger(__name__)

#: The video encoder's time base: the RTP video clock, so a received frame's timestamp
#: keeps its precision (a 1/30 s base folds frames 10 ms apart into one slot).
VIDEO_TIME_BASE: Final = fractions.Fraction(1, 90_000)
#: The smallest step between two video frames in the file: 1 ms, so they stay distinct in a
#: container that counts in milliseconds (WebM, Matroska) as well as in MP4's finer base.
VIDEO_MIN_STEP: Final = 90
#: A track's clock this far (seconds) from the arrival clock has jumped (a new RTP clock
#: after a re-subscribe, a wrapped timestamp): the track is re-anchored on arrival.
RESYNC: Final = 1.0


def shared_timeline(audio: MediaStreamTrack | None, video: MediaStreamTrack | None) -> bool:
    """Whether ``audio`` and ``video`` stamp their frames on one presentation timeline (a
    session's avatar tracks: their ``timeline`` is the same object)."""
    timeline = getattr(audio, "timeline", None)
    return timeline is not None and getattr(video, "timeline", None) is timeline


def _open(
    path: str, format: str | None, options: dict[str, str] | None
) -> OutputContainer:  # a seam for tests
    return av.open(path, mode="w", format=format, options=options)


@dataclass
class _Timeline:
    """Where a track's frames go in the file, in ``time_base`` units, strictly increasing.

    The first frame lands at its arrival (seconds since the recording's first frame, so
    the tracks start aligned); later ones keep the sender's spacing. A frame that would
    not come after the previous one's end is placed right there; a clock more than
    :data:`RESYNC` away from arrival is re-anchored on arrival.
    """

    time_base: fractions.Fraction
    min_step: int
    _offset: int | None = None
    _next: int = 0

    def place(self, pts: int | None, source_base: fractions.Fraction | None, arrival: float,
              length: int = 0) -> int:  # fmt: skip
        """The file pts of a frame stamped ``pts`` (in ``source_base``) that arrived
        ``arrival`` seconds into the recording and lasts ``length`` units (audio samples;
        0 for video, which then advances by ``min_step``)."""
        now = round(arrival / self.time_base)
        if pts is None or source_base is None:
            candidate = now
        else:
            stamped = round(pts * source_base / self.time_base)
            if self._offset is None or abs(stamped + self._offset - now) > RESYNC / self.time_base:
                self._offset = max(now, self._next) - stamped
            candidate = stamped + self._offset
        placed = max(candidate, self._next)
        self._next = placed + max(length, self.min_step)
        return placed


@dataclass
class _Lane:
    """One track's stream in the container."""

    track: MediaStreamTrack
    stream: AudioStream | VideoStream
    timeline: _Timeline | None = None
    frames: int = 0
    failed: bool = False
    started: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set for audio next to video: wait for the first video frame (see Recorder.start).
    after: asyncio.Event | None = None

    @property
    def kind(self) -> str:
        return "video" if isinstance(self.stream, VideoStream) else "audio"


def _presented(frame: Any) -> float | None:
    """A frame's presentation time (s), from its ``pts`` and ``time_base``."""
    pts, base = getattr(frame, "pts", None), getattr(frame, "time_base", None)
    return None if pts is None or base is None else float(pts * base)


def _lasts(frame: Any) -> float:
    """How long an audio frame lasts (s); 0 for anything else."""
    if isinstance(frame, av.AudioFrame) and frame.sample_rate:
        return frame.samples / frame.sample_rate
    return 0.0


def _add_stream(container: OutputContainer, kind: str) -> AudioStream | VideoStream:
    """A stream for ``kind`` with the codec the container's format calls for."""
    name = container.format.name
    if kind == "audio":
        if name in ("wav", "alsa", "pulse"):
            codec = "pcm_s16le"
        elif name == "mp3":
            codec = "mp3"
        elif name in ("ogg", "opus", "webm"):
            codec = "libopus"
        else:
            codec = "aac"
        return cast(AudioStream, container.add_stream(codec))
    if name == "image2":
        video = container.add_stream("png", rate=30)
        video.pix_fmt = "rgb24"
    else:
        video = container.add_stream("libvpx" if name == "webm" else "libx264", rate=30)
        video.pix_fmt = "yuv420p"
        video.codec_context.time_base = VIDEO_TIME_BASE
    return video


class Recorder:
    """Records received tracks to a file (FFmpeg through PyAV).

    The container follows the extension (``.wav``: PCM audio; ``.mp4``: AAC/H.264;
    ``.webm``/``.ogg``: Opus/VP8); ``format``/``options`` go to FFmpeg unchanged. The
    file is created by :meth:`start` and finalized by :meth:`stop`, which also awaits the
    reader tasks. Use as ``async with`` for both. After ``stop()``, :attr:`frames` says how
    many frames of each kind were written and :attr:`failure` why a track stopped early
    (None: nothing went wrong); the file opens either way.
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
        self._container: OutputContainer | None = None
        self._lanes: list[_Lane] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._origin: float | None = None
        #: Both tracks on one presentation timeline: frames are placed by it (see above).
        self.synchronized = shared_timeline(audio_track, video_track)
        self._presented_origin: float | None = None
        #: Voice frames left out because they came before the first video frame.
        self.skipped = 0
        self._state = "new"
        #: Why a track's recording ended early ("audio: ValueError: ..."), or None.
        self.failure: str | None = None

    @property
    def recording(self) -> bool:
        """True between ``start()`` and ``stop()``."""
        return self._state == "recording"

    @property
    def frames(self) -> dict[str, int]:
        """Frames written so far, per kind of track recorded."""
        return {lane.kind: lane.frames for lane in self._lanes}

    async def start(self) -> None:
        """Create the file and start reading the tracks."""
        if self._state != "new":
            raise AvatarError(ErrorCode.INVALID_STATE, f"recorder already {self._state}")
        self._check_target()
        container: OutputContainer | None = None
        try:
            container = _open(self.path, self._format, self._options)
            for kind, track in (("audio", self.audio_track), ("video", self.video_track)):
                if track is not None:
                    self._lanes.append(_Lane(track, _add_stream(container, kind)))
        except Exception as exc:
            if container is not None:
                with best_effort("closing a half-built recording", log):
                    container.close()
            self._lanes = []
            self._state = "failed"
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, f"cannot record to {self.path}: {describe(exc)}"
            ) from exc
        if len(self._lanes) == 2:
            # The container writes its header at the first packet, with every codec open;
            # the video codec is sized from the first video frame, so audio that came first
            # would open it unsized ("Cannot change width after codec is open").
            audio, video = self._lanes
            audio.after = video.started
        self._container = container
        self._state = "recording"
        loop = asyncio.get_running_loop()
        for lane in self._lanes:
            task = loop.create_task(
                self._record(lane), name=f"avatar_sdk.media.Recorder:{lane.kind}"
            )
            self._tasks.add(task)

    def _check_target(self) -> None:
        # FFmpeg opens the file at the first write, inside a reader task, where a failure
        # would only be logged: refuse an unwritable local path up front instead.
        if "://" in self.path or "%" in self.path:
            return  # a URL or an image-sequence pattern: FFmpeg's business
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            self._state = "failed"
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"no such directory: {parent}")
        if not os.access(parent, os.W_OK) or os.path.isdir(self.path):
            self._state = "failed"
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"cannot write {self.path}")

    async def _record(self, lane: _Lane) -> None:
        """Read ``lane``'s track until it ends or the recording stops; a frame the encoder
        or muxer refuses ends this track's recording only (the others go on)."""
        if lane.after is not None:
            await lane.after.wait()
        loop = asyncio.get_running_loop()
        while True:
            try:
                frame = await lane.track.recv()
            except MediaStreamError:
                return  # the track ended (the session closed it)
            container = self._container
            if container is None:
                return  # stop() closed the file while this frame was on its way
            if self._origin is None:
                self._origin = loop.time()
            at = loop.time() - self._origin
            if self.synchronized:
                presented = _presented(frame)
                if presented is not None:
                    if self._presented_origin is None:
                        self._presented_origin = presented
                    at = presented - self._presented_origin
                    if at < -_lasts(frame) / 2:
                        self.skipped += 1  # before the first frame of the recording
                        continue
            try:
                self._write(container, lane, frame, at)
            except Exception as exc:
                self._fail(lane, exc)
                return

    def _write(self, container: OutputContainer, lane: _Lane, frame: Any, arrival: float) -> None:
        if lane.kind == "video":
            if not isinstance(frame, av.VideoFrame):
                raise TypeError(f"not a video frame: {type(frame).__name__}")
            if lane.timeline is None:
                video = lane.stream
                assert isinstance(video, VideoStream)
                video.width, video.height = frame.width, frame.height  # sized by the first
                base = video.codec_context.time_base or VIDEO_TIME_BASE
                lane.timeline = _Timeline(base, VIDEO_MIN_STEP if base == VIDEO_TIME_BASE else 1)
            length = 0
        else:
            if not isinstance(frame, av.AudioFrame):
                raise TypeError(f"not an audio frame: {type(frame).__name__}")
            if lane.timeline is None:
                lane.timeline = _Timeline(fractions.Fraction(1, frame.sample_rate), 1)
            length = frame.samples
        pts, time_base = frame.pts, frame.time_base
        frame.pts = lane.timeline.place(pts, time_base, arrival, length)
        frame.time_base = lane.timeline.time_base
        try:
            packets = lane.stream.encode(frame)
        finally:
            # The frame may be another reader's too (a MediaRelay): give it back unchanged.
            frame.pts, frame.time_base = pts, time_base
        container.mux(packets)
        lane.frames += 1
        lane.started.set()

    def _fail(self, lane: _Lane, exc: Exception) -> None:
        lane.failed = True
        reason = f"{lane.kind}: {describe(exc)}"
        log.warning("recording %s to %s stopped: %s", lane.kind, self.path, describe(exc))
        if self.failure is None:
            self.failure = reason
        lane.started.set()  # audio waiting for a video track that failed records alone

    async def stop(self) -> None:
        """Flush and close the file; idempotent. A recording that never started is a no-op.

        The file is closed even when this is cancelled while the reader tasks wind down."""
        if self._state != "recording":
            self._state = "stopped"
            return
        self._state = "stopped"
        tasks, self._tasks = self._tasks, set()
        try:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._close()

    def _close(self) -> None:
        """Flush each encoder and close the container (synchronous: nothing interleaves)."""
        container, self._container = self._container, None
        if container is None:
            return
        for lane in self._lanes:
            if lane.timeline is None or lane.failed:
                continue  # no frame reached this encoder, or it already refused one
            try:
                container.mux(lane.stream.encode(None))
            except Exception as exc:
                self._fail(lane, exc)
        try:
            container.close()
        except Exception as exc:
            log.warning("closing the recording %s failed: %s", self.path, describe(exc))
            self.failure = self.failure or f"close: {describe(exc)}"

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
