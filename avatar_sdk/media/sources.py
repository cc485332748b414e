"""Audio sources for the ASR uplink (``AvatarSession(audio=...)``, ``switch_audio()``).

Every source here is an aiortc :class:`~aiortc.mediastreams.MediaStreamTrack` yielding
48 kHz mono s16 frames of 20 ms (960 samples) with ``pts`` counted in samples and
``time_base`` 1/48000, which is what Opus encodes natively: the uplink neither resamples
nor re-chunks, and a bot can swap one source for another without a timestamp jump.

Synthetic sources pace themselves on a monotonic clock like aiortc's ``AudioStreamTrack``
(the system clock unless one is injected with ``clock=``: a test drives the schedule with a
:class:`~avatar_sdk.clock.FakeClock` instead of measuring a loaded machine); file and
microphone sources are paced by the file's timestamps and the device's clock.
Device failures surface from ``recv()`` as the exceptions of :mod:`.devices`, which the
session turns into an ``error`` event while it keeps running (CONTRACT: audio source
failures). ``stop()`` releases whatever a source holds (thread, file, device).
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import functools
import importlib
import math
from collections import deque
from types import ModuleType
from typing import Any, Final, NamedTuple

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from ..besteffort import best_effort
from ..clock import SYSTEM_CLOCK, Clock
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from .devices import classify_device_error, describe, device_error
from .files import file_source
from .grid import grid_anchor
from .normalize import Normalizer
from .opus import check_tone

__all__ = [
    "FRAME_SAMPLES",
    "FRAME_SECONDS",
    "SAMPLE_RATE",
    "TIME_BASE",
    "FailingSource",
    "MicrophoneSource",
    "SilenceSource",
    "ToneSource",
    "file_source",
]

log = sdk_logger(__name__)

SAMPLE_RATE: Final = 48_000
FRAME_SAMPLES: Final = 960
FRAME_SECONDS: Final = FRAME_SAMPLES / SAMPLE_RATE
TIME_BASE: Final = fractions.Fraction(1, SAMPLE_RATE)

#: A consumer this far behind the schedule re-anchors instead of receiving a burst of
#: catch-up frames (a paused uplink must not flood the server with stale audio).
_MAX_LAG: Final = 0.2


def _s16_mono(payload: bytes, pts: int, rate: int = SAMPLE_RATE) -> av.AudioFrame:
    frame = av.AudioFrame(format="s16", layout="mono", samples=len(payload) // 2)
    frame.planes[0].update(payload)
    frame.sample_rate = rate
    frame.pts = pts
    frame.time_base = fractions.Fraction(1, rate)
    return frame


class _PacedSource(MediaStreamTrack):
    """Base of the synthetic sources: one 20 ms frame per 20 ms of ``clock`` time.

    ``clock`` (default: the system clock) is read and slept on for the schedule alone; it
    is injectable so that the pacing rule itself can be checked on a virtual clock.
    """

    kind = "audio"

    def __init__(self, *, clock: Clock | None = None) -> None:
        super().__init__()
        self._clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self._pts = 0
        self._anchor: float | None = None  # clock time of pts 0
        self.frames = 0

    async def _next_pts(self) -> int:
        """Wait until the next frame is due; its pts (raises MediaStreamError once stopped)."""
        if self.readyState != "live":
            raise MediaStreamError
        now = self._clock.monotonic()
        if self._anchor is None:
            self._anchor = grid_anchor(now)
        else:
            pts = self._pts + FRAME_SAMPLES  # committed only once due (a cancel skips nothing)
            due = self._anchor + pts / SAMPLE_RATE
            if due > now:
                await self._clock.sleep(due - now)
                if self.readyState != "live":
                    raise MediaStreamError
            elif now - due > _MAX_LAG:
                self._anchor = grid_anchor(now, pts / SAMPLE_RATE)
            self._pts = pts
        self.frames += 1
        return self._pts


_SILENCE: Final = bytes(FRAME_SAMPLES * 2)


class SilenceSource(_PacedSource):
    """Digital silence: keeps an uplink alive (and its RTP clock running) with no input."""

    async def recv(self) -> av.AudioFrame:
        return _s16_mono(_SILENCE, await self._next_pts())


class ToneSource(_PacedSource):
    """A continuous sine tone: audible, deterministic input for tests and demos.

    ``amplitude`` is a fraction of full scale (0..1); the RMS of the signal is
    ``amplitude / sqrt(2)``. The phase is continuous across frames.

    The samples come from a table of whole periods computed once per (frequency,
    amplitude) and shared by every source, so a frame costs a slice, not 960 ``sin`` calls
    (a fleet of bots runs one per session). A frequency whose exact period is longer than
    :data:`_MAX_TABLE` samples (an odd fractional frequency) falls back to one vectorised
    ``numpy.sin`` per frame.
    """

    def __init__(
        self, frequency: float = 440.0, amplitude: float = 0.3, *, clock: Clock | None = None
    ) -> None:
        frequency, amplitude = check_tone(frequency, amplitude)
        super().__init__(clock=clock)
        self.frequency = frequency
        self.amplitude = amplitude
        self._table = _tone_table(self.frequency, self.amplitude)
        self._offset = 0  # samples sent, modulo the table's period
        self._phase = 0.0
        self._step = 2 * math.pi * self.frequency / SAMPLE_RATE
        self._scale = self.amplitude * 32767

    def _payload(self) -> bytes:
        """The next 20 ms of the tone, s16 in native byte order (as the frame declares)."""
        table = self._table
        if table is not None:
            start = self._offset
            self._offset = (start + FRAME_SAMPLES) % table.period
            return table.data[start * 2 : (start + FRAME_SAMPLES) * 2]
        phase, step = self._phase, self._step
        angles = phase + step * _FRAME_INDEX
        samples = np.rint(self._scale * np.sin(angles)).astype(np.int16)
        self._phase = (phase + FRAME_SAMPLES * step) % (2 * math.pi)
        return samples.tobytes()

    async def recv(self) -> av.AudioFrame:
        pts = await self._next_pts()
        return _s16_mono(self._payload(), pts)


#: Longest exact period (in samples) tabulated; 48 kHz: any integer or half-integer Hz.
_MAX_TABLE: Final = 2 * SAMPLE_RATE
_FRAME_INDEX: Final = np.arange(FRAME_SAMPLES, dtype=np.float64)


class _ToneTable(NamedTuple):
    period: int  # samples after which the waveform repeats exactly
    data: bytes  # (period + FRAME_SAMPLES) s16 samples: any frame is one slice


@functools.lru_cache(maxsize=64)
def _tone_table(frequency: float, amplitude: float) -> _ToneTable | None:
    """Whole periods of the tone plus one frame of wrap-around; None when too long.

    The period is exact: ``frequency / SAMPLE_RATE`` as a fraction p/q repeats after q
    samples, so a frame slice at ``offset = n mod q`` equals sample n of the unbounded sine.
    """
    cycles = fractions.Fraction(frequency) / SAMPLE_RATE
    period = cycles.denominator
    if period > _MAX_TABLE:
        return None
    # (n * p) mod q in integers: the angle stays within one turn, so no precision is lost.
    turns = (np.arange(period + FRAME_SAMPLES, dtype=np.int64) * cycles.numerator) % period
    angles = (2 * math.pi / period) * turns
    samples = np.rint(amplitude * 32767 * np.sin(angles)).astype(np.int16)
    return _ToneTable(period, samples.tobytes())


class FailingSource(_PacedSource):
    """A source whose ``recv()`` raises ``exc``: proves the session survives a dead device.

    ``after_frames`` frames of silence come first, to fail mid-stream rather than at once.
    Every later ``recv()`` raises again until the track is stopped.
    """

    def __init__(
        self, exc: BaseException, *, after_frames: int = 0, clock: Clock | None = None
    ) -> None:
        super().__init__(clock=clock)
        self.exc = exc
        self.after_frames = after_frames
        self.failures = 0

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self.frames < self.after_frames:
            return _s16_mono(_SILENCE, await self._next_pts())
        self.failures += 1
        raise self.exc.with_traceback(None)


# --------------------------------------------------------------------------- microphone


def _import_sounddevice() -> ModuleType:
    try:
        return importlib.import_module("sounddevice")
    except ImportError:
        raise device_error(
            ErrorCode.DEVICE_NOT_FOUND,
            "microphone support is not installed: install avatar-sdk[mic]",
        ) from None
    except OSError as exc:  # sounddevice raises OSError when libportaudio is missing
        raise device_error(
            ErrorCode.DEVICE_NOT_FOUND, f"PortAudio is not available ({describe(exc)})"
        ) from exc


class MicrophoneSource(MediaStreamTrack):
    """A local input device through sounddevice/PortAudio (``pip install avatar-sdk[mic]``).

    ``device`` is a sounddevice device index or name substring (None: the default input);
    ``samplerate`` is the rate the device is opened at (48000 avoids resampling); frames
    are always 48 kHz mono 20 ms. The device opens on the first ``recv()`` so a failure
    reaches the session as a source failure, not a constructor error. Captured blocks wait
    in a queue of ``max_queue`` blocks; when the consumer lags, the oldest are dropped
    (``dropped``) to keep latency bounded. No audio for ``stall_timeout`` seconds (None
    disables) counts as a dead device.

    ``recv()`` raises :class:`~.devices.DevicePermissionError`,
    :class:`~.devices.DeviceNotFoundError` or :class:`~.devices.DeviceBusyError` (all
    ``AvatarError``) when the device cannot be opened or fails; the device is released
    and the track ends.
    """

    kind = "audio"

    def __init__(
        self,
        device: int | str | None = None,
        samplerate: int = SAMPLE_RATE,
        *,
        max_queue: int = 25,
        stall_timeout: float | None = 2.0,
    ) -> None:
        if samplerate <= 0 or max_queue < 1:
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, "samplerate and max_queue must be positive"
            )
        self._sd = _import_sounddevice()
        super().__init__()
        self.device = device
        self.samplerate = int(samplerate)
        self.stall_timeout = stall_timeout
        self._stream: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._blocks: deque[bytes] = deque(maxlen=max_queue)
        self._wakeup = asyncio.Event()
        self._failure: BaseException | None = None
        self._stopping = False
        self._in_pts = 0
        self._normalizer = Normalizer()
        self.dropped = 0
        self.overflows = 0

    async def recv(self) -> av.AudioFrame:
        return await self._normalizer.next_frame(self, self._refill)

    async def _refill(self) -> None:
        if self._stream is None:
            self._open()
        block = await self._next_block()
        self._normalizer.push(_s16_mono(block, self._in_pts, self.samplerate))
        self._in_pts += len(block) // 2

    def _open(self) -> None:
        self._loop = asyncio.get_running_loop()
        stream: Any = None
        try:
            stream = self._sd.RawInputStream(
                samplerate=self.samplerate,
                blocksize=max(1, round(self.samplerate * FRAME_SECONDS)),
                device=self.device,
                channels=1,
                dtype="int16",
                callback=self._on_audio,
                finished_callback=self._on_finished,
            )
            stream.start()
        except Exception as exc:
            if stream is not None:
                with best_effort("closing an input stream that failed to start", log):
                    stream.close(ignore_errors=True)
            raise self._fail(self._map(exc, opening=True)) from exc
        self._stream = stream

    @staticmethod
    def _map(exc: BaseException, *, opening: bool) -> AvatarError:
        code = classify_device_error(exc)
        if code is None:
            # sounddevice raises ValueError for a device name that matches nothing.
            not_found = opening and isinstance(exc, ValueError)
            code = ErrorCode.DEVICE_NOT_FOUND if not_found else ErrorCode.DEVICE_BUSY
        return device_error(code, describe(exc))

    def _fail(self, error: AvatarError) -> AvatarError:
        """Release the device and end the track; the error to raise from ``recv()``."""
        self.stop()
        return error

    async def _next_block(self) -> bytes:
        while not self._blocks:
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise self._fail(self._map(failure, opening=False)) from failure
            if self.readyState != "live":
                raise MediaStreamError
            self._wakeup.clear()
            try:
                async with asyncio.timeout(self.stall_timeout):
                    await self._wakeup.wait()
            except TimeoutError:
                raise self._fail(
                    device_error(
                        ErrorCode.DEVICE_BUSY, f"no audio from the device for {self.stall_timeout}s"
                    )
                ) from None
        return self._blocks.popleft()

    # PortAudio thread -------------------------------------------------------------

    def _on_audio(self, indata: Any, frames: int, time_info: Any, status: Any) -> None:
        if status:
            self.overflows += 1
        self._to_loop(self._push_block, bytes(indata))

    def _on_finished(self) -> None:
        if not self._stopping:
            self._to_loop(self._device_lost)

    def _to_loop(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
            loop.call_soon_threadsafe(fn, *args)

    # event loop --------------------------------------------------------------------

    def _push_block(self, block: bytes) -> None:
        if self.readyState != "live":
            return
        if len(self._blocks) == self._blocks.maxlen:
            self.dropped += 1
        self._blocks.append(block)
        self._wakeup.set()

    def _device_lost(self) -> None:
        if self.readyState == "live" and self._failure is None:
            self._failure = FileNotFoundError("the input device stopped delivering audio")
            self._wakeup.set()

    def stop(self) -> None:
        self._stopping = True
        stream, self._stream = self._stream, None
        if stream is not None:
            with best_effort("closing the input stream", log):
                stream.close(ignore_errors=True)
        self._blocks.clear()
        super().stop()
        self._wakeup.set()
