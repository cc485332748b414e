"""Figure ``pacing``: how close to real time the uplink sources keep their 20 ms schedule.

Every paced source (PCM ``SilenceSource`` and ``ToneSource``; pre-encoded
``EncodedSilenceSource``, ``EncodedToneSource`` and ``OpusFileSource`` on a looping 2 s Ogg/Opus
tone written at run time) is read by one consumer on the system clock, ``FRAMES`` frames each,
one source after the other in this process's event loop, nothing else running in it. Per
frame: its *lateness*, the ``time.monotonic()`` (the sources' own clock) at which ``recv()``
returned minus the instant its pts was due (the 20 ms grid instant at or before the first
frame's return, :mod:`avatar_sdk.media.grid`, plus pts / 48 kHz); and
over the run the *rate*, frames per second of wall time (50 nominal). A frame more than the
sources' 0.2 s re-anchoring bound late restarts the schedule (the source re-anchors, so does
the figure): counted apart, not in the lateness.

The schedule itself (frame n due when its pts is, the re-anchoring rule) is checked exactly
on a ``FakeClock`` by ``tests/unit/test_source_pacing.py``; the integration tests keep only a
one-sided no-pacing guard. This figure is the part a loaded machine changes: what the event
loop's timer resolution and the machine's other load add to each 20 ms wait.
"""

from __future__ import annotations

import asyncio
import fractions
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
from aiortc.mediastreams import MediaStreamTrack

from avatar_sdk.media import (
    EncodedSilenceSource,
    EncodedToneSource,
    OpusFileSource,
    SilenceSource,
    ToneSource,
)
from avatar_sdk.media.grid import grid_anchor

from .stats import FigureResult, Row, Summary, Target

TITLE = "uplink sources: lateness against their 20 ms schedule"

FRAMES = 150  # 3 s of audio per source
RATE = 48_000
FRAME_SAMPLES = 960
#: The sources' own re-anchoring bound (``_MAX_LAG`` in ``media/sources.py``, ``encoded.py``).
MAX_LAG = 0.2
#: Information only: a frame's median lateness under one event-loop timer tick or so.
LATENESS_TARGET = Target("<", 2.0, "ms")
RATE_TARGET = Target(">=", 49.0, "frames/s")


def _opus_tone(path: Path, seconds: float = 2.0) -> Path:
    """A mono 440 Hz tone as Ogg/Opus (20 ms packets)."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libopus", rate=RATE, layout="mono")
        for n in range(int(seconds * RATE / FRAME_SAMPLES)):
            t = np.arange(FRAME_SAMPLES * n, FRAME_SAMPLES * (n + 1))
            wave = 0.3 * 32767 * np.sin(2 * math.pi * 440.0 * t / RATE)
            frame = av.AudioFrame.from_ndarray(
                wave.astype(np.int16).reshape(1, -1), format="s16", layout="mono"
            )
            frame.sample_rate, frame.pts = RATE, FRAME_SAMPLES * n
            frame.time_base = fractions.Fraction(1, RATE)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


async def _measure(source: MediaStreamTrack, frames: int) -> tuple[list[float], float, int]:
    """Per-frame lateness (s), the rate (frames/s of wall time) and the re-anchorings."""
    lateness: list[float] = []
    reanchored = 0
    try:
        first = await source.recv()
        started = time.monotonic()
        # Its schedule starts on the process's 20 ms grid instant at or before the first
        # frame (avatar_sdk.media.grid), not at the moment the first frame was returned.
        reference = grid_anchor(started)
        origin = first.pts or 0
        for _ in range(frames - 1):
            frame = await source.recv()
            now = time.monotonic()
            media = ((frame.pts or 0) - origin) / RATE
            late = now - (reference + media)
            if late > MAX_LAG:  # the source re-anchored: its schedule starts again here
                reanchored += 1
                reference = now - media
                continue
            lateness.append(late)
        elapsed = time.monotonic() - started
    finally:
        source.stop()
    return lateness, (frames - 1) / elapsed if elapsed > 0 else math.inf, reanchored


async def _run(frames: int) -> FigureResult:
    result = FigureResult("pacing", TITLE)
    with tempfile.TemporaryDirectory(prefix="avatar-bench-pacing-") as tmp:
        opus = _opus_tone(Path(tmp) / "tone.opus")
        makers: dict[str, Callable[[], MediaStreamTrack]] = {
            "SilenceSource": SilenceSource,
            "ToneSource": ToneSource,
            "EncodedSilenceSource": EncodedSilenceSource,
            "EncodedToneSource": EncodedToneSource,
            "OpusFileSource": lambda: OpusFileSource(opus, loop=True),
        }
        per_source: dict[str, dict[str, object]] = {}
        for name, make in makers.items():
            lateness, rate, reanchored = await _measure(make(), frames)
            late = Summary.of(lateness).scaled(1000.0)
            result.rows += [
                Row(
                    f"{name}: frame lateness",
                    late.n,
                    late.median,
                    "ms",
                    late.p90,
                    late.maximum,
                    LATENESS_TARGET,
                ),
                Row(f"{name}: rate", 1, rate, "frames/s", target=RATE_TARGET),
            ]
            per_source[name] = {
                "lateness": late.as_json("ms"),
                "rate_fps": rate,
                "reanchored": reanchored,
            }
            if reanchored:
                result.notes.append(
                    f"{name}: {reanchored} frame(s) over {MAX_LAG * 1000:.0f} ms late "
                    "(the source re-anchored; left out of the lateness)"
                )
    result.notes.append(
        f"{frames} frames per source, one source at a time, one consumer; nominal rate 50 "
        "frames/s. The schedule's rule is tested on a FakeClock "
        "(tests/unit/test_source_pacing.py)."
    )
    result.data = {"frames": frames, "sources": per_source}
    return result


def run(frames: int = FRAMES) -> FigureResult:
    """Run the pacing figure in its own event loop."""
    return asyncio.run(_run(frames))
