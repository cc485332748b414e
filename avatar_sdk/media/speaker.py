"""The avatar's voice on an output device: :class:`SpeakerSink` (the ``voice`` extra).

The sink reads a received track (``session.avatar_audio``, which the session re-feeds across
every recovery tier and renewal, so the sink outlives the subscriptions it plays) into a
small buffer that PortAudio's callback drains in 10 ms blocks. What the callback hands to
the device, silence for an underrun included, is the playout: :attr:`SpeakerSink.played`
counts its samples, and each block is given, on the event loop, to the echo canceller's far
end (the exact signal the speaker plays) and to ``on_played``. The buffer holds at most
``max_buffer`` seconds; a burst beyond that drops the oldest samples (``dropped``).

What the sink adds to the voice path is what waits in that buffer. Frames arrive with
jitter and on another clock than the device's, so a late frame (an underrun: silence
played) shifts everything after it, and the backlog would only grow, up to ``max_buffer``.
The sink keeps it at one output buffer: every quarter second, when the buffer never fell
below 5 ms over that time, the excess is trimmed from its head if the head is quiet (the
avatar's silence between words and answers; never in the middle of its voice, which would
click). ``trimmed`` counts the samples removed. The start of an answer, which follows
silence, so waits at most one 20 ms frame (``python -m benchmarks --only echo``).

Device failures raise :class:`~.devices.DeviceNotFoundError`, ``DeviceBusyError`` or
``DevicePermissionError`` (the microphone's codes) from :meth:`SpeakerSink.start`; a device
lost later (PortAudio finishes the stream on its own) ends the reader with
``DeviceNotFoundError`` in :attr:`SpeakerSink.failure`.

The sink is stopped with the session: when the track it reads ends (``session.avatar_audio``
ends only when the session closes, never across a recovery), it releases the device, so a
session that closes while the speaker is open leaves no stream, task or descriptor behind.
:attr:`SpeakerSink.released` is set whenever the device has been let go (track ended, device
lost, :meth:`SpeakerSink.stop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import sys
import threading
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import Any, Self

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from ..besteffort import best_effort
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from .devices import classify_device_error, describe, device_error
from .echo import VOICE_EXTRA, EchoCanceller

__all__ = ["SpeakerSink", "import_sounddevice", "map_device_failure"]

log = sdk_logger(__name__)

RATE = 48000
BLOCK = RATE // 100  # 10 ms: the canceller's chunk, and the device's block
#: The backlog is judged over this many device blocks (a quarter second) ...
TRIM_WINDOW = 25
#: ... and trimmed down to this many samples (5 ms: a margin against the next late frame) ...
TRIM_KEEP = RATE // 200
#: ... when what it would remove is this quiet (1% of full scale, int16).
QUIET = 328


def import_sounddevice(extra: str = VOICE_EXTRA) -> ModuleType:
    """sounddevice, or ``device_not_found`` naming ``extra`` (or PortAudio's absence)."""
    try:
        return importlib.import_module("sounddevice")
    except ImportError:
        raise device_error(
            ErrorCode.DEVICE_NOT_FOUND, f"audio device support is not installed: install {extra}"
        ) from None
    except OSError as exc:  # sounddevice raises OSError when libportaudio is missing
        raise device_error(
            ErrorCode.DEVICE_NOT_FOUND, f"PortAudio is not available ({describe(exc)})"
        ) from exc


def map_device_failure(exc: BaseException, *, opening: bool) -> AvatarError:
    """The public device error for a PortAudio/OS failure (a bad name: not found)."""
    code = classify_device_error(exc)
    if code is None:
        not_found = opening and isinstance(exc, ValueError)
        code = ErrorCode.DEVICE_NOT_FOUND if not_found else ErrorCode.DEVICE_BUSY
    return device_error(code, describe(exc))


class SpeakerSink:
    """Plays a received audio track on an output device (None: the default output).

    ``await sink.start(track)`` opens the device and starts reading; ``await sink.stop()``
    (or ``async with``) stops reading and releases the device; the track is never stopped
    (the session owns it). ``canceller``: an :class:`~.echo.EchoCanceller` told of every
    block played. ``on_played(samples, seconds_until_heard)``: called on the loop for each
    block handed to the device.
    """

    def __init__(
        self,
        device: int | str | None = None,
        *,
        canceller: EchoCanceller | None = None,
        max_buffer: float = 0.06,
        on_played: Callable[[np.ndarray[Any, np.dtype[np.int16]], float], None] | None = None,
    ) -> None:
        if max_buffer < 0.02:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "max_buffer must be at least 0.02 s")
        self._sd = import_sounddevice()
        self.device = device
        self.canceller = canceller
        self.on_played = on_played
        self._limit = round(max_buffer * RATE)
        self._lock = threading.Lock()
        self._buffer = np.zeros(0, dtype=np.int16)
        self._resampler: av.AudioResampler | None = None
        self._stream: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reader: asyncio.Task[None] | None = None
        #: Samples handed to the device (silence for underruns included).
        self.played = 0
        #: 10 ms blocks the device asked for while the buffer was empty (or short).
        self.underruns = 0
        #: Samples dropped because the buffer was over ``max_buffer``.
        self.dropped = 0
        #: Quiet samples trimmed to keep the backlog at one output buffer.
        self.trimmed = 0
        self._floor = sys.maxsize
        self._judged = 0
        #: The device's output latency (s) as PortAudio reports it, once open.
        self.latency = 0.0
        #: What ended the reader, when something did (a device failure, the track's error).
        self.failure: BaseException | None = None
        #: Set when the device is released (the track ended, the device was lost, stop()).
        self.released = asyncio.Event()
        #: Called (on the loop) once the device has been released.
        self.on_released: Callable[[], None] | None = None

    @property
    def running(self) -> bool:
        return self._stream is not None

    @property
    def buffered(self) -> float:
        """Seconds of audio waiting for the device."""
        with self._lock:
            return len(self._buffer) / RATE

    async def start(self, track: MediaStreamTrack | None = None) -> None:
        """Open the device; read ``track`` (if given) into it until :meth:`stop`."""
        if self._stream is None:
            self._open()
            self.released.clear()
        if track is not None and self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(
                self._read(track), name="avatar_sdk.media.SpeakerSink"
            )

    def _open(self) -> None:
        self._loop = asyncio.get_running_loop()
        stream: Any = None
        try:
            stream = self._sd.RawOutputStream(
                samplerate=RATE,
                blocksize=BLOCK,
                device=self.device,
                channels=1,
                dtype="int16",
                latency="low",
                callback=self._on_block,
                finished_callback=self._on_finished,
            )
            stream.start()
        except Exception as exc:
            if stream is not None:
                with best_effort("closing an output stream that failed to start", log):
                    stream.close(ignore_errors=True)
            raise map_device_failure(exc, opening=True) from exc
        self.latency = float(stream.latency)
        if self.canceller is not None:
            self.canceller.delay_hint(self.latency)
        self._stream = stream

    def write(self, frame: av.AudioFrame) -> None:
        """Queue one frame (any format and rate) for the device."""
        if (
            frame.format.name == "s16"
            and frame.layout.nb_channels == 1
            and frame.sample_rate == RATE
        ):
            samples = np.frombuffer(bytes(frame.planes[0]), dtype=np.int16)[: frame.samples]
        else:
            if self._resampler is None:
                self._resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
            parts = [f.to_ndarray().reshape(-1) for f in self._resampler.resample(frame)]
            samples = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)
        with self._lock:
            buffer = np.concatenate([self._buffer, samples])
            excess = len(buffer) - self._limit
            if excess > 0:
                self.dropped += excess
                buffer = buffer[excess:]
            self._buffer = buffer

    async def _read(self, track: MediaStreamTrack) -> None:
        try:
            while True:
                frame = await track.recv()
                if isinstance(frame, av.AudioFrame):
                    self.write(frame)
        except MediaStreamError:
            pass  # the session closed: the speaker goes with it
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failure = exc
            log.warning("the speaker stopped reading its track: %s", describe(exc))
        self._reader = None
        self._release()

    # PortAudio thread -------------------------------------------------------------

    def _on_block(self, outdata: Any, frames: int, time_info: Any, status: Any) -> None:
        with self._lock:
            take = self._buffer[:frames]
            self._buffer = self._buffer[len(take) :]
            self._trim_backlog()
        if len(take) < frames:
            if len(take) or self.played:
                self.underruns += 1
            take = np.concatenate([take, np.zeros(frames - len(take), dtype=np.int16)])
        outdata[:] = take.tobytes()
        until_heard = 0.0
        # A host API without output timing hands no such fields (or None): nothing to add.
        with contextlib.suppress(AttributeError, TypeError):
            until_heard = max(0.0, float(time_info.outputBufferDacTime - time_info.currentTime))
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
                loop.call_soon_threadsafe(self._played_block, take, until_heard)

    def _trim_backlog(self) -> None:
        """Under the lock: every ``TRIM_WINDOW`` blocks, the lowest level the buffer fell
        to over them, above ``TRIM_KEEP``, is backlog; drop it if its head is quiet."""
        self._floor = min(self._floor, len(self._buffer))
        self._judged += 1
        if self._judged < TRIM_WINDOW:
            return
        excess, self._floor, self._judged = self._floor - TRIM_KEEP, sys.maxsize, 0
        if excess <= 0:
            return
        head = self._buffer[:excess]
        if int(np.abs(head.astype(np.int32)).max(initial=0)) <= QUIET:
            self._buffer = self._buffer[excess:]
            self.trimmed += excess

    def _on_finished(self) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._device_finished)

    # event loop --------------------------------------------------------------------

    def _device_finished(self) -> None:
        """PortAudio finished the stream: lost unless we were closing it ourselves."""
        if self._stream is None:
            return
        self.failure = device_error(ErrorCode.DEVICE_NOT_FOUND, "the output device was lost")
        log.warning("the speaker's device was lost")
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
        self._release()

    def _played_block(self, samples: np.ndarray[Any, np.dtype[np.int16]], until: float) -> None:
        self.played += len(samples)
        if self._stream is None:
            return
        if self.canceller is not None:
            frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
            frame.sample_rate = RATE
            self.canceller.far(frame)
        if self.on_played is not None:
            self.on_played(samples, until)

    def _release(self) -> None:
        """Close the device (idempotent); tell ``released`` and ``on_released``."""
        stream, self._stream = self._stream, None
        if stream is not None:
            with best_effort("closing the output stream", log):
                stream.close(ignore_errors=True)
        with self._lock:
            self._buffer = np.zeros(0, dtype=np.int16)
        if not self.released.is_set():
            self.released.set()
            if self.on_released is not None:
                with best_effort("the speaker's on_released", log):
                    self.on_released()

    async def stop(self) -> None:
        """Stop reading and release the device (idempotent)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        self._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
