"""What the speaker sink adds to the voice path: how long a received frame waits in
:class:`~avatar_sdk.media.SpeakerSink`'s buffer before the device takes its first sample.

The device is simulated (a ``sounddevice`` stand-in whose output stream asks for a 10 ms
block every 10 ms of wall time, as PortAudio's callback does), so the figure is the sink's
own: the device's latency (what PortAudio reports as ``SpeakerSink.latency``) comes on top
of it on any sink. Frames arrive every 20 ms with a few ms of jitter, as the downlink
hands them over: three seconds of the avatar's voice, then a second of silence, and again.
Each voice frame carries a distinct constant value, so the stand-in device tells when its
first sample was handed over. Reported: the wait of the first frame of each answer (what
a voice-to-voice latency sees) and of every voice frame.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import types
from dataclasses import dataclass
from typing import Any
from unittest import mock

import av
import numpy as np

FRAME = 960  # 20 ms at 48 kHz: what the downlink hands over
RATE = 48000
TALK, PAUSE = 3.0, 1.0  # seconds of voice, then of silence


class _Device:
    """RawOutputStream stand-in: a thread pulling 10 ms blocks on a 10 ms clock."""

    latency = 0.0

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.first_seen: dict[int, float] = {}
        self._quit = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        frames = self.kwargs["blocksize"]
        tick = time.perf_counter()
        while not self._quit.is_set():
            tick += frames / RATE
            time.sleep(max(0.0, tick - time.perf_counter()))
            out = bytearray(frames * 2)
            self.kwargs["callback"](out, frames, None, 0)
            now = time.perf_counter()
            for value in np.unique(np.frombuffer(bytes(out), dtype=np.int16)):
                self.first_seen.setdefault(int(value), now)

    def close(self, ignore_errors: bool = True) -> None:
        self._quit.set()
        self._thread.join()


@dataclass(frozen=True, slots=True)
class Waits:
    """Milliseconds voice frames waited in the sink: each answer's first, and all."""

    answer_starts: list[float]
    voice: list[float]


async def _run(seconds: float, jitter: float, seed: int) -> Waits:
    from avatar_sdk.media import SpeakerSink  # noqa: PLC0415

    devices: list[_Device] = []

    def make(**kwargs: Any) -> _Device:
        devices.append(_Device(**kwargs))
        return devices[-1]

    fake = types.ModuleType("sounddevice")
    fake.RawOutputStream = make  # type: ignore[attr-defined]
    rng = np.random.default_rng(seed)
    written: dict[int, float] = {}
    starts: set[int] = set()
    with mock.patch.dict(sys.modules, {"sounddevice": fake}):
        sink = SpeakerSink()
        await sink.start()
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.05
        talking = False
        for k in range(round(seconds / 0.02)):
            due = start + 0.02 * k + float(np.clip(rng.normal(0, jitter), -0.01, 0.01))
            await asyncio.sleep(max(0.0, due - loop.time()))
            voice = (k * 0.02) % (TALK + PAUSE) < TALK
            value = 1000 + k if voice else 0
            frame = av.AudioFrame.from_ndarray(
                np.full((1, FRAME), value, dtype=np.int16), format="s16", layout="mono"
            )
            frame.sample_rate = RATE
            if voice:
                written[value] = time.perf_counter()
                if not talking:
                    starts.add(value)
            talking = voice
            sink.write(frame)
        await asyncio.sleep(0.1)
        await sink.stop()
    seen = devices[0].first_seen
    waits = {v: 1000 * (seen[v] - t) for v, t in written.items() if v in seen}
    return Waits([waits[v] for v in sorted(starts) if v in waits], list(waits.values()))


def measure(seconds: float = 20.0, jitter: float = 0.003, seed: int = 1) -> Waits:
    """How long voice frames waited in the sink (``python -m benchmarks --only echo``)."""
    return asyncio.run(_run(seconds, jitter, seed))


if __name__ == "__main__":
    measured = measure()
    for name, waits in (("answer starts", measured.answer_starts), ("voice", measured.voice)):
        ordered = sorted(waits)
        print(f"{name}: median {ordered[len(ordered) // 2]:.1f} ms, worst {ordered[-1]:.1f} ms")
