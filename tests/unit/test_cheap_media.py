"""The table tone and the numpy levels give what the per-sample Python code gave.

Each reference below is the pure-Python code these replaced (issue 11, "cheaper media per
session"), kept here as the specification of the output.
"""

from __future__ import annotations

import math
import operator
from array import array

import av
import numpy as np
import pytest

from avatar_sdk.media.levels import frame_rms
from avatar_sdk.media.sources import FRAME_SAMPLES, SAMPLE_RATE, ToneSource, _tone_table
from avatar_sdk.testing.synthetic import AUDIO_FRAME, AUDIO_RATE, ToneTrack


def _reference_tone(frequency: float, amplitude: float, frames: int) -> array[int]:
    """The old ToneSource: one ``math.sin`` per sample, phase carried frame to frame."""
    phase = 0.0
    step = 2 * math.pi * frequency / SAMPLE_RATE
    scale = amplitude * 32767
    out: array[int] = array("h")
    for _ in range(frames):
        out.extend(round(scale * math.sin(phase + i * step)) for i in range(FRAME_SAMPLES))
        phase = (phase + FRAME_SAMPLES * step) % (2 * math.pi)
    return out


@pytest.mark.parametrize(
    ("frequency", "amplitude", "tabulated"),
    [
        (440.0, 0.3, True),
        (1000.0, 0.5, True),
        (1.0, 1.0, True),  # the longest integer period: the whole one-second table
        (440.5, 0.3, True),  # half-integer Hz: a two-second period
        (23_999.0, 1.0, True),  # near Nyquist
        (440.0, 0.0, True),
        (123.456, 0.7, False),  # no short exact period: the per-frame numpy fallback
    ],
)
def test_tone_equals_the_per_sample_formula(
    frequency: float, amplitude: float, tabulated: bool
) -> None:
    frames = 260  # 5.2 s: past the end of every table, several times for the short ones
    tone = ToneSource(frequency, amplitude)
    try:
        assert (tone._table is not None) is tabulated
        got = np.frombuffer(b"".join(tone._payload() for _ in range(frames)), dtype=np.int16)
    finally:
        tone.stop()
    want = np.array(_reference_tone(frequency, amplitude, frames), dtype=np.int64)
    assert got.size == want.size == frames * FRAME_SAMPLES
    assert int(np.max(np.abs(got.astype(np.int64) - want))) <= 1  # within one LSB


def test_tone_tables_are_shared_between_sources() -> None:
    a, b = ToneSource(440.0, 0.3), ToneSource(440.0, 0.3)
    try:
        assert a._table is b._table is _tone_table(440.0, 0.3)
        assert a._table is not None and a._table.period == 1200  # 440/48000 = 11/1200
    finally:
        a.stop()
        b.stop()


def _reference_frame_rms(frame: av.AudioFrame) -> float:
    """The old frame_rms for the formats it read directly."""
    typecode, full_scale = {
        "s16": ("h", 32768.0),
        "s16p": ("h", 32768.0),
        "s32": ("i", 2147483648.0),
        "s32p": ("i", 2147483648.0),
        "flt": ("f", 1.0),
        "fltp": ("f", 1.0),
        "dbl": ("d", 1.0),
        "dblp": ("d", 1.0),
    }[frame.format.name]
    per_plane = frame.samples * (1 if frame.format.is_planar else len(frame.layout.channels))
    total, count = 0.0, 0
    for plane in frame.planes:
        values = array(typecode)
        values.frombytes(memoryview(plane)[: per_plane * values.itemsize])
        total += float(sum(map(operator.mul, values, values)))
        count += len(values)
    return math.sqrt(total / count) / full_scale if count else 0.0


def _reference_audio_rms(frame: av.AudioFrame) -> float:
    """The old testing.synthetic.audio_rms (the staging server's uplink level, now frame_rms)."""
    kinds = {"s16": ("h", 32768.0), "s16p": ("h", 32768.0), "flt": ("f", 1.0)}
    kinds["fltp"] = kinds["flt"]
    kinds["s32"] = kinds["s32p"] = ("i", 2147483648.0)
    kind = kinds.get(frame.format.name)
    if kind is None or not frame.samples:
        return 0.0
    code, scale = kind
    per_plane = frame.samples * (1 if frame.format.is_planar else len(frame.layout.channels))
    total, count = 0.0, 0
    for plane in frame.planes:
        values = array(code)
        values.frombytes(bytes(plane)[: per_plane * values.itemsize])
        total += math.fsum(v * v for v in values)
        count += len(values)
    return math.sqrt(total / count) / scale if count else 0.0


_DTYPES = {
    "s16": np.int16,
    "s16p": np.int16,
    "s32": np.int32,
    "s32p": np.int32,
    "flt": np.float32,
    "fltp": np.float32,
    "dbl": np.float64,
    "dblp": np.float64,
}


def _random_frame(fmt: str, layout: str, samples: int, seed: int) -> av.AudioFrame:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(_DTYPES[fmt])
    frame = av.AudioFrame(format=fmt, layout=layout, samples=samples)
    per_plane = samples * (1 if frame.format.is_planar else len(frame.layout.channels))
    for plane in frame.planes:
        if dtype.kind == "i":
            info = np.iinfo(dtype)
            data = rng.integers(info.min, info.max, per_plane, dtype=dtype, endpoint=True)
        else:
            data = rng.uniform(-1.0, 1.0, per_plane).astype(dtype)
        raw = data.tobytes()
        plane.update(raw + bytes(plane.buffer_size - len(raw)))  # padding is not audio
    frame.sample_rate = 48_000
    return frame


_CASES = [
    (fmt, layout, samples)
    for fmt in _DTYPES
    for layout in ("mono", "stereo")
    for samples in (960, 441, 1)
]


@pytest.mark.parametrize(("fmt", "layout", "samples"), _CASES)
def test_frame_rms_equals_the_python_loop(fmt: str, layout: str, samples: int) -> None:
    for seed in range(3):
        frame = _random_frame(fmt, layout, samples, seed)
        want = _reference_frame_rms(frame)
        # int16 squares sum exactly in float64; wider or float samples round differently.
        rel = 0.0 if fmt.startswith("s16") else 1e-12
        assert frame_rms(frame) == pytest.approx(want, rel=rel, abs=0.0)


#: The formats the staging server's own uplink level read (it gave 0.0 for the others; the
#: uplink is decoded to s16, and the one level function reads every format of ``_CASES``).
_UPLINK_CASES = [case for case in _CASES if not case[0].startswith("dbl")]


@pytest.mark.parametrize(("fmt", "layout", "samples"), _UPLINK_CASES)
def test_the_uplink_level_equals_its_python_loop(fmt: str, layout: str, samples: int) -> None:
    """The staging server levels its uplink with ``frame_rms`` now: the same numbers."""
    for seed in range(3):
        frame = _random_frame(fmt, layout, samples, seed)
        want = _reference_audio_rms(frame)
        rel = 0.0 if fmt.startswith("s16") else 1e-12
        assert frame_rms(frame) == pytest.approx(want, rel=rel, abs=0.0)


def test_levels_of_silence_and_full_scale() -> None:
    silence = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
    silence.planes[0].update(bytes(silence.planes[0].buffer_size))
    assert frame_rms(silence) == 0.0
    square = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
    square.planes[0].update(np.array([-32768, -32768] * 480, dtype=np.int16).tobytes())
    assert frame_rms(square) == 1.0


def _reference_tone_second(frequency: float, amplitude: float) -> bytes:
    """The old staging ToneTrack table: one second plus one frame, a sin per sample."""
    peak = max(0.0, min(1.0, amplitude)) * 32767
    return array(
        "h",
        (
            round(peak * math.sin(2 * math.pi * frequency * (i % AUDIO_RATE) / AUDIO_RATE))
            for i in range(AUDIO_RATE + AUDIO_FRAME)
        ),
    ).tobytes()


@pytest.mark.parametrize(("frequency", "amplitude"), [(440.0, 0.3), (220.5, 1.0), (97.3, 0.8)])
def test_staging_tone_table_equals_the_per_sample_formula(
    frequency: float, amplitude: float
) -> None:
    track = ToneTrack(frequency=frequency, amplitude=amplitude)
    try:
        got = np.frombuffer(track._tone, dtype=np.int16).astype(np.int64)
    finally:
        track.stop()
    want = np.frombuffer(_reference_tone_second(frequency, amplitude), dtype=np.int16)
    assert got.size == want.size
    assert int(np.max(np.abs(got - want))) <= 1
