"""The uplink sources' pacing rule, on a virtual clock (``clock=FakeClock()``).

Every paced source (PCM: ``SilenceSource``, ``ToneSource``, ``FailingSource``; pre-encoded:
``EncodedSilenceSource``, ``EncodedToneSource``, ``OpusFileSource``) releases its first
frame at once and frame n exactly when its pts is due on its clock: not before (a source
that does not pace floods the uplink) and not later (one that sleeps too long starves it).
A consumer more than 0.2 s behind re-anchors instead of receiving a burst; one less behind
catches up. Time moves only when the test says so, so the rule is checked to the
millisecond however loaded the machine is; how close to real time the system clock keeps
it is a speed figure (``make bench``, figure ``pacing``).
"""

from __future__ import annotations

import asyncio
import fractions
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from avatar_sdk.clock import FakeClock
from avatar_sdk.media import (
    EncodedSilenceSource,
    EncodedToneSource,
    FailingSource,
    OpusFileSource,
    SilenceSource,
    ToneSource,
)

RATE = 48_000
FRAME = 960  # samples: 20 ms
STEP = FRAME / RATE
#: How far before or after a frame's due time the clock is set to look at it (s): far below
#: a frame's 20 ms, far above float rounding of the schedule.
EPS = 1e-4

Make = Callable[[FakeClock], MediaStreamTrack]


def _opus_file(path: Path, seconds: float = 0.5) -> Path:
    """A mono 440 Hz tone as Ogg/Opus, 20 ms packets (PyAV's default for libopus)."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libopus", rate=RATE, layout="mono")
        for n in range(int(seconds * RATE / FRAME)):
            t = np.arange(FRAME * n, FRAME * (n + 1))
            wave = 0.3 * 32767 * np.sin(2 * math.pi * 440.0 * t / RATE)
            frame = av.AudioFrame.from_ndarray(
                wave.astype(np.int16).reshape(1, -1), format="s16", layout="mono"
            )
            frame.sample_rate, frame.pts = RATE, FRAME * n
            frame.time_base = fractions.Fraction(1, RATE)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


@pytest.fixture(
    params=["silence", "tone", "failing", "encoded_silence", "encoded_tone", "opus_file"]
)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Make:
    kind = request.param
    if kind == "opus_file":
        path = _opus_file(tmp_path / "tone.opus")
        return lambda clock: OpusFileSource(path, loop=True, clock=clock)
    makers: dict[str, Make] = {
        "silence": lambda clock: SilenceSource(clock=clock),
        "tone": lambda clock: ToneSource(clock=clock),
        "failing": lambda clock: FailingSource(OSError("x"), after_frames=1000, clock=clock),
        "encoded_silence": lambda clock: EncodedSilenceSource(clock=clock),
        "encoded_tone": lambda clock: EncodedToneSource(clock=clock),
    }
    return makers[kind]


async def _settle(task: asyncio.Task[Any], clock: FakeClock) -> None:
    """Let ``task`` run until it either finished or waits on ``clock`` (one timer due).

    Asserting "not released yet" is only meaningful once the source is really waiting on
    its clock; a source that waits on anything else (the system clock) fails here."""
    for _ in range(200):
        if task.done() or clock.sleepers:
            return
        await asyncio.sleep(0)
    raise AssertionError("recv() neither returned nor waited on the injected clock")


async def _advance_to(clock: FakeClock, when: float) -> None:
    await clock.advance(when - clock.monotonic())


async def _at_once(source: MediaStreamTrack, clock: FakeClock) -> Any:
    """``recv()`` when it must return without the clock moving."""
    task = asyncio.ensure_future(source.recv())
    await _settle(task, clock)
    assert task.done(), "recv() waited for a frame that was already due"
    return task.result()


async def _released_at(source: MediaStreamTrack, clock: FakeClock, due: float) -> Any:
    """``recv()`` that must still wait just before ``due`` and have returned just after."""
    task = asyncio.ensure_future(source.recv())
    try:
        await _settle(task, clock)
        assert not task.done(), f"released {due - clock.monotonic():.4f} s before its time"
        await _advance_to(clock, due - EPS)
        assert not task.done(), f"released {EPS} s before its time"
        await _advance_to(clock, due + EPS)
        assert task.done(), "not released once due"
        return task.result()
    finally:
        task.cancel()


async def test_every_frame_is_released_when_its_pts_is_due(make: Make) -> None:
    clock = FakeClock()
    source = make(clock)
    try:
        start = clock.monotonic()
        frames = [await _at_once(source, clock)]  # the first one at once
        for n in range(1, 61):  # past the encoded tone's 50-packet cycle
            frames.append(await _released_at(source, clock, start + n * STEP))
    finally:
        source.stop()
    assert [f.pts for f in frames] == [FRAME * n for n in range(61)]
    assert {f.time_base for f in frames} == {fractions.Fraction(1, RATE)}


async def test_a_consumer_far_behind_re_anchors_instead_of_a_burst(make: Make) -> None:
    clock = FakeClock()
    source = make(clock)
    try:
        first = await _at_once(source, clock)
        await clock.advance(0.5)  # 25 frames late: over the 0.2 s bound
        late = clock.monotonic()
        caught = await _at_once(source, clock)  # the overdue frame comes at once...
        after = await _released_at(source, clock, late + STEP)  # ...then paced again
        again = await _released_at(source, clock, late + 2 * STEP)
    finally:
        source.stop()
    assert [f.pts for f in (first, caught, after, again)] == [0, FRAME, 2 * FRAME, 3 * FRAME]


async def test_a_consumer_slightly_behind_catches_up_on_its_schedule(make: Make) -> None:
    clock = FakeClock()
    source = make(clock)
    try:
        start = clock.monotonic()
        await _at_once(source, clock)
        await _advance_to(clock, start + 5 * STEP + EPS)  # 0.1 s late: under the bound
        overdue = [await _at_once(source, clock) for _ in range(5)]  # frames 1..5 were due
        nxt = await _released_at(source, clock, start + 6 * STEP)  # the schedule kept
    finally:
        source.stop()
    assert [f.pts for f in [*overdue, nxt]] == [FRAME * n for n in range(1, 7)]


async def test_a_stop_during_the_wait_ends_the_track_without_a_frame(make: Make) -> None:
    clock = FakeClock()
    source = make(clock)
    await _at_once(source, clock)
    task = asyncio.ensure_future(source.recv())
    await _settle(task, clock)
    assert not task.done()
    source.stop()
    await clock.advance(1.0)  # well past the frame's due time: the wait is over
    assert task.done()
    with pytest.raises(MediaStreamError):
        task.result()


# -- the process-wide 20 ms grid (avatar_sdk.media.grid) -------------------------------------


def _on_grid(when: float) -> float:
    """The grid instant at or before ``when``."""
    return math.floor(when / STEP) * STEP


async def test_a_source_started_between_grid_instants_paces_on_the_grid(make: Make) -> None:
    clock = FakeClock(start=1000.007)  # 7 ms past a grid instant
    source = make(clock)
    try:
        first = await _at_once(source, clock)  # still at once: no start-up delay
        second = await _released_at(source, clock, 1000.020)  # the next grid instant
        third = await _released_at(source, clock, 1000.040)
    finally:
        source.stop()
    assert [f.pts for f in (first, second, third)] == [0, FRAME, 2 * FRAME]


async def test_sources_started_apart_are_due_at_the_same_instants(make: Make) -> None:
    """Two sessions' sources started 8 ms apart wake the loop once per 20 ms, not twice."""
    clock = FakeClock(start=2000.003)
    early = make(clock)
    try:
        await _at_once(early, clock)
        await clock.advance(0.008)
        late = make(clock)
        try:
            await _at_once(late, clock)
            both = [asyncio.ensure_future(s.recv()) for s in (early, late)]
            for task in both:
                await _settle(task, clock)
            await _advance_to(clock, 2000.020 - EPS)
            assert not any(task.done() for task in both), "released before the grid instant"
            await _advance_to(clock, 2000.020 + EPS)
            assert all(task.done() for task in both), "not both released on the grid instant"
        finally:
            late.stop()
    finally:
        early.stop()


async def test_a_re_anchored_consumer_comes_back_on_the_grid(make: Make) -> None:
    clock = FakeClock(start=3000.0)
    source = make(clock)
    try:
        await _at_once(source, clock)
        await clock.advance(0.513)  # over the 0.2 s bound, 13 ms past a grid instant
        late = clock.monotonic()
        await _at_once(source, clock)
        after = await _released_at(source, clock, _on_grid(late) + STEP)
    finally:
        source.stop()
    assert after.pts == 2 * FRAME
