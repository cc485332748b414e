"""What ``AvatarSession(audio_codec="loop")`` costs the event loop, per 20 ms audio frame.

Times, on this machine, the work the opt-in moves onto the loop: one uplink encode with
the mono 32 kb/s voice encoder and one downlink decode with aiortc's Opus decoder (what
``transport.loop_decode`` runs), each of a 20 ms frame of a 440 Hz tone; and, for
comparison, aiortc's stereo 96 kb/s encode (what its thread runs by default) and the
round trip of one ``run_in_executor`` hand-off (what the default pays per frame, per
direction, before any codec work). Prints median and p99 in microseconds.

    python -m tools.loop_codec_cost [--frames 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import fractions
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import av
import numpy as np
from aiortc.codecs.opus import OpusDecoder, OpusEncoder
from aiortc.jitterbuffer import JitterFrame

from avatar_sdk.media.opus import FRAME_SAMPLES, SAMPLE_RATE, VoiceEncoder

WARMUP = 100


def _tone_frames(count: int) -> list[av.AudioFrame]:
    frames = []
    for n in range(count):
        t = np.arange(n * FRAME_SAMPLES, (n + 1) * FRAME_SAMPLES)
        wave = (0.3 * 32767 * np.sin(2 * math.pi * 440 * t / SAMPLE_RATE)).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(wave.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = SAMPLE_RATE
        frame.pts = n * FRAME_SAMPLES
        frame.time_base = fractions.Fraction(1, SAMPLE_RATE)
        frames.append(frame)
    return frames


def _time(items: list[Any], work: Callable[[Any], object]) -> list[float]:
    spent = []
    for index, item in enumerate(items):
        started = time.perf_counter_ns()
        work(item)
        if index >= WARMUP:
            spent.append((time.perf_counter_ns() - started) / 1000)
    return spent


async def _handoffs(count: int) -> list[float]:
    loop = asyncio.get_running_loop()
    spent = []
    for index in range(count):
        started = time.perf_counter_ns()
        await loop.run_in_executor(None, int)
        if index >= WARMUP:
            spent.append((time.perf_counter_ns() - started) / 1000)
    return spent


def _summary(name: str, values: list[float]) -> str:
    p99 = statistics.quantiles(values, n=100)[98]
    return f"{name:<44} median {statistics.median(values):7.1f} us   p99 {p99:7.1f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=3000)
    count = parser.parse_args().frames + WARMUP
    voice = VoiceEncoder()
    packets = [bytes(p) for f in _tone_frames(count) for p in voice.encode(f)]
    encode = _time(_tone_frames(count), VoiceEncoder().encode)
    print(_summary("loop: uplink encode (mono 32 kb/s voice)", encode))
    decoder = OpusDecoder()
    jitter = [JitterFrame(data=p, timestamp=i * FRAME_SAMPLES) for i, p in enumerate(packets)]
    print(_summary("loop: downlink decode (aiortc OpusDecoder)", _time(jitter, decoder.decode)))
    stereo = _time(_tone_frames(count), OpusEncoder().encode)
    print(_summary("thread: aiortc encode (stereo 96 kb/s)", stereo))
    print(_summary("thread: one run_in_executor hand-off", asyncio.run(_handoffs(count))))


if __name__ == "__main__":
    main()
