"""The avatar's own voice taken out of the microphone: :class:`EchoCanceller`.

On a laptop with speakers the avatar's answer comes back through the microphone, and the
service's voice-activity detector hears it as the user: the avatar interrupts itself. The
canceller is fed what the speaker plays (:meth:`EchoCanceller.far`) and cleans what the
microphone hears (:meth:`EchoCanceller.near`).

Why libwebrtc's audio processing (through ``livekit.rtc.AudioProcessingModule``, the
``voice`` extra): it is what every browser runs on a WebRTC call (AEC3, with its own delay
estimator, so the echo path's delay is measured from the signals rather than guessed), it
is maintained by the WebRTC project, and LiveKit ships it as prebuilt wheels that run
locally with no LiveKit server. SpeexDSP's canceller needs the delay given and converges
slower; writing one here would be a research project. Measured on a synthetic room
(``tests/unit/test_echo_canceller.py``, the ``echo`` figure of ``make bench``).

What is on: echo cancellation, noise suppression and the high-pass filter. Gain control
is off by default (``gain_control=True`` turns it on): AGC2 raises the residual echo while
the avatar talks, which is exactly what the service's VAD must not hear (measured: a
residual of 0.009 RMS became 0.09 with it on, above the staging VAD's 0.02).

The APM works on 10 ms frames of 16-bit mono; both sides take ``av.AudioFrame``s of any
length, format, layout and rate, converted to mono s16 at ``sample_rate`` and cut into
10 ms chunks. :meth:`near` returns a frame as long as the one given (after resampling):
when a frame is not a multiple of 10 ms, the remainder waits for the next one, and the
output lags the input by that remainder (under 10 ms), zeros filling the first frame.
Call both sides from one thread (the event loop): the far end must reach the canceller
no later than its echo reaches :meth:`near`.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Any, Final

import av
import numpy as np

from ..errors import AvatarError, ErrorCode

__all__ = ["VOICE_EXTRA", "EchoCanceller", "EchoStats", "import_livekit_rtc"]

#: The extra that brings the speaker and the canceller: ``pip install 'avatar-sdk[voice]'``.
VOICE_EXTRA: Final = "avatar-sdk[voice]"

_RATES: Final = frozenset({8000, 16000, 32000, 48000})


def import_livekit_rtc() -> Any:
    """``livekit.rtc``, or ``invalid_state`` naming the extra that brings it."""
    try:
        return importlib.import_module("livekit.rtc")
    except ImportError:
        raise AvatarError(
            ErrorCode.INVALID_STATE,
            f"echo cancellation is not installed: pip install '{VOICE_EXTRA}'",
        ) from None


@dataclass(frozen=True, slots=True)
class EchoStats:
    """What a canceller did: 10 ms chunks each side, and the CPU its processing took."""

    far_chunks: int
    near_chunks: int
    cpu_seconds: float


class _Mono16:
    """Any ``av.AudioFrame`` to mono int16 samples at one rate."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._resampler: av.AudioResampler | None = None

    def samples(self, frame: av.AudioFrame) -> np.ndarray[Any, np.dtype[np.int16]]:
        if (
            frame.format.name == "s16"
            and frame.layout.nb_channels == 1
            and frame.sample_rate == self.rate
        ):
            return np.frombuffer(bytes(frame.planes[0]), dtype=np.int16)[: frame.samples]
        if self._resampler is None:
            self._resampler = av.AudioResampler(format="s16", layout="mono", rate=self.rate)
        out = [f.to_ndarray().reshape(-1) for f in self._resampler.resample(frame)]
        if not out:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(out).astype(np.int16, copy=False)


class EchoCanceller:
    """libwebrtc's echo canceller, noise suppressor and high-pass filter on ``av`` frames.

    ``far(frame)``: what the speaker plays, as it plays it. ``near(frame)``: the
    microphone, returned cleaned. ``delay_hint(seconds)`` passes the devices' own
    latencies (output plus input) as AEC3's starting point; AEC3 estimates the actual
    delay from the signals either way. Raises ``invalid_state`` naming the ``voice`` extra
    when ``livekit`` is not installed, ``invalid_argument`` for a rate the APM cannot run.
    """

    def __init__(
        self,
        sample_rate: int = 48000,
        *,
        noise_suppression: bool = True,
        gain_control: bool = False,
        high_pass_filter: bool = True,
    ) -> None:
        if sample_rate not in _RATES:
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT,
                f"sample_rate must be one of {sorted(_RATES)}, not {sample_rate}",
            )
        self._rtc = import_livekit_rtc()
        self.sample_rate = sample_rate
        self._chunk = sample_rate // 100
        self._apm = self._rtc.AudioProcessingModule(
            echo_cancellation=True,
            noise_suppression=noise_suppression,
            high_pass_filter=high_pass_filter,
            auto_gain_control=gain_control,
        )
        self._far_in = _Mono16(sample_rate)
        self._near_in = _Mono16(sample_rate)
        self._far_pending = np.zeros(0, dtype=np.int16)
        self._near_pending = np.zeros(0, dtype=np.int16)
        self._cleaned = np.zeros(0, dtype=np.int16)
        self._delay_ms: int | None = None
        self._far_chunks = 0
        self._near_chunks = 0
        self._cpu_ns = 0

    def delay_hint(self, seconds: float) -> None:
        """The echo's expected delay (output plus input device latency), AEC3's start."""
        self._delay_ms = max(0, min(500, round(seconds * 1000)))

    def stats(self) -> EchoStats:
        return EchoStats(self._far_chunks, self._near_chunks, self._cpu_ns / 1e9)

    def far(self, frame: av.AudioFrame) -> None:
        """What the speaker plays (the far end), in the order it plays it."""
        samples = np.concatenate([self._far_pending, self._far_in.samples(frame)])
        n = self._chunk
        whole = len(samples) - len(samples) % n
        started = time.thread_time_ns()
        for i in range(0, whole, n):
            chunk = self._rtc.AudioFrame(samples[i : i + n].tobytes(), self.sample_rate, 1, n)
            self._apm.process_reverse_stream(chunk)
        self._cpu_ns += time.thread_time_ns() - started
        self._far_chunks += whole // n
        self._far_pending = samples[whole:]

    def near(self, frame: av.AudioFrame) -> av.AudioFrame:
        """The microphone's ``frame``, its echo cancelled: a mono s16 frame at
        ``sample_rate`` as long as the input (resampled), its ``pts`` kept when the rate
        is unchanged."""
        given = self._near_in.samples(frame)
        samples = np.concatenate([self._near_pending, given])
        n = self._chunk
        whole = len(samples) - len(samples) % n
        cleaned = [self._cleaned]
        started = time.thread_time_ns()
        for i in range(0, whole, n):
            chunk = self._rtc.AudioFrame(samples[i : i + n].tobytes(), self.sample_rate, 1, n)
            if self._delay_ms is not None:
                self._apm.set_stream_delay_ms(self._delay_ms)
            self._apm.process_stream(chunk)
            cleaned.append(np.frombuffer(bytes(chunk.data.cast("B")), dtype=np.int16))
        self._cpu_ns += time.thread_time_ns() - started
        self._near_chunks += whole // n
        self._near_pending = samples[whole:]
        out = np.concatenate(cleaned)
        if len(out) < len(given):  # the first remainder: the output starts that much late
            out = np.concatenate([np.zeros(len(given) - len(out), dtype=np.int16), out])
        self._cleaned = out[len(given) :]
        result = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(out[: len(given)]).reshape(1, -1), format="s16", layout="mono"
        )
        result.sample_rate = self.sample_rate
        if frame.sample_rate == self.sample_rate:
            result.pts = frame.pts
            if frame.time_base is not None:
                result.time_base = frame.time_base
        return result
