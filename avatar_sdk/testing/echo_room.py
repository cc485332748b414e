"""A synthetic room for judging an echo canceller: what the speaker plays comes back to the
microphone through an impulse response and a delay, with noise and, for a while, the user.

Pure numpy (no audio device), so the canceller's tests and the ``echo`` figure of ``make
bench`` measure the same thing: the echo return loss enhancement (ERLE, how much quieter
the echo is after the canceller while only the avatar talks) and what is left of the
user's voice while both talk (double talk).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import av
import numpy as np

__all__ = ["EchoRoom", "RoomResult", "run_room", "voice_like"]

Signal = np.ndarray[Any, np.dtype[np.float64]]


def voice_like(seconds: float, rate: int, *, pitch: float, seed: int) -> Signal:
    """A voiced, syllabic signal (harmonics of a gliding pitch under a 3-4 Hz envelope,
    a little breath noise), peak 0.5: speech enough for an echo canceller."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * rate)) / rate
    f0 = pitch * (1 + 0.1 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6)))
    phase = 2 * np.pi * np.cumsum(f0) / rate
    x = sum(np.sin(k * phase) / k for k in range(1, 20))
    envelope = (0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(3.0, 4.0) * t + rng.uniform(0, 6))) ** 2
    x = (x + 0.05 * rng.standard_normal(t.size)) * envelope
    return np.asarray(0.5 * x / np.max(np.abs(x)), dtype=np.float64)


@dataclass(frozen=True)
class EchoRoom:
    """The room: ``seconds`` of the avatar talking; the echo path an exponentially decaying
    random impulse response (``decay`` seconds, ``length`` seconds long, gain ``echo_gain``
    in energy) after ``delay`` seconds; noise at ``noise_dbfs``; the user talking from
    ``double_talk[0]`` to ``double_talk[1]`` s."""

    rate: int = 48000
    seconds: float = 8.0
    delay: float = 0.08
    length: float = 0.15
    decay: float = 0.03
    echo_gain: float = 0.5
    noise_dbfs: float = -60.0
    double_talk: tuple[float, float] = (5.0, 7.0)
    seed: int = 1

    def signals(self) -> tuple[Signal, Signal, Signal, Signal]:
        """far (played), echo (what reaches the microphone of it), near (the user), mic."""
        rng = np.random.default_rng(self.seed)
        rate = self.rate
        far = voice_like(self.seconds, rate, pitch=140.0, seed=self.seed)
        taps = round(self.length * rate)
        h = rng.standard_normal(taps) * np.exp(-np.arange(taps) / (self.decay * rate))
        h *= self.echo_gain / np.sqrt(np.sum(h**2))
        lag = round(self.delay * rate)
        echo = np.concatenate([np.zeros(lag), np.convolve(far, h)])[: far.size]
        near = voice_like(self.seconds, rate, pitch=210.0, seed=self.seed + 1)
        mask = np.zeros(far.size)
        start, end = (round(s * rate) for s in self.double_talk)
        mask[start:end] = 1.0
        near = near * mask
        noise = rng.standard_normal(far.size) * 10 ** (self.noise_dbfs / 20)
        return far, echo, near, echo + near + noise


@dataclass(frozen=True)
class RoomResult:
    """ERLE (dB) while only the avatar talks, after ``converge`` seconds; the user's voice
    during double talk after the canceller relative to before (dB, 0 is untouched)."""

    erle_db: float
    near_kept_db: float
    cleaned: Signal = field(repr=False)


def _frame(samples: Signal, rate: int, pts: int) -> av.AudioFrame:
    pcm = np.clip(samples * 32767, -32768, 32767).astype(np.int16).reshape(1, -1)
    frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
    frame.sample_rate = rate
    frame.pts = pts
    frame.time_base = Fraction(1, rate)
    return frame


def _power(x: Signal) -> float:
    return float(np.mean(x**2)) + 1e-20


def run_room(
    room: EchoRoom,
    far: Callable[[av.AudioFrame], None],
    near: Callable[[av.AudioFrame], av.AudioFrame],
    *,
    frame_seconds: float = 0.02,
    converge: float = 1.0,
) -> RoomResult:
    """Play the room through a canceller's ``far``/``near`` in frames of
    ``frame_seconds`` (any length), and measure it."""
    far_signal, _echo, near_signal, mic = room.signals()
    rate = room.rate
    step = max(1, round(frame_seconds * rate))
    cleaned: list[Signal] = []
    for i in range(0, mic.size, step):
        far(_frame(far_signal[i : i + step], rate, i))
        out = near(_frame(mic[i : i + step], rate, i))
        cleaned.append(out.to_ndarray().reshape(-1).astype(np.float64) / 32767)
    out_signal = np.concatenate(cleaned)[: mic.size]
    a, b = round(converge * rate), round(room.double_talk[0] * rate)
    erle = 10 * np.log10(_power(mic[a:b]) / _power(out_signal[a:b]))
    c, d = b, round(room.double_talk[1] * rate)
    kept = 10 * np.log10(_power(out_signal[c:d]) / _power(near_signal[c:d]))
    return RoomResult(float(erle), float(kept), out_signal)
