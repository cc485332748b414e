"""Synthetic media for the staging backend: the avatar's "face" and "voice".

PyAV:

* :class:`PatternTrack`: a moving grey-scale pattern whose top band encodes the frame
  counter in 32 black/white blocks (8-bit marker + 24-bit counter), readable after a lossy
  H264/VP8 round trip with :func:`read_frame_counter`, and a second band its media time
  (ms since its :class:`MediaEpoch`), read with :func:`read_media_time`;
* :class:`ToneTrack`: 48 kHz mono 20 ms frames, a sine while ``active()`` says so (the
  avatar is speaking), digital silence otherwise;
* :class:`OpusToneTrack`: the same voice as Opus packets, encoded once per process (the
  one-second cycle of :func:`~avatar_sdk.media.opus.encoded_tone`, the 3-byte Opus silence
  frame when quiet): what the staging server sends, so a viewer costs no encoding at all;
* :class:`MediaEpoch`: the instant a viewer's tracks count their media time from, so the
  video drawn at media time ``t`` and the voice of time ``t`` (:attr:`OpusToneTrack.onsets`:
  when each stretch of tone began) are the same instant: what an A/V offset is measured by;
* :class:`MediaGate`: stalls every track that shares it. A stalled ``recv()`` blocks, so
  aiortc sends no RTP while ICE, DTLS and RTCP stay up: exactly a "media stall".

Both tracks pace themselves on the wall clock and never burst to catch up after a stall:
the timestamps jump forward instead, as a live source's would.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from ..clock import SYSTEM_CLOCK, Clock
from ..media.opus import OPUS_SILENCE, encoded_tone, opus_packet, tone_second

__all__ = [
    "AUDIO_RATE",
    "MediaEpoch",
    "MediaGate",
    "OpusToneTrack",
    "PacedTrack",
    "PatternTrack",
    "ToneTrack",
    "read_frame_counter",
    "read_media_time",
]

AUDIO_RATE = 48_000
AUDIO_FRAME = 960  # 20 ms at 48 kHz
VIDEO_CLOCK = 90_000

_MARKER = 0xA5  # top 8 bits of the encoded word: "this frame is synthetic"
_TIME_MARKER = 0x5A  # top 8 bits of the second band's word: "media time in ms follows"
_BITS = 32
_BAND_ROWS = 16
_HIGH, _LOW = 235, 16  # video-range white and black


class MediaGate:
    """Shared stall switch for synthetic tracks (``recv()`` blocks while stalled)."""

    def __init__(self) -> None:
        self._until = 0.0
        self._resumed = asyncio.Event()

    @property
    def stalled(self) -> bool:
        return time.monotonic() < self._until

    def stall(self, seconds: float | None = None) -> None:
        """Stop every track sharing this gate for ``seconds`` (None: until :meth:`resume`)."""
        self._until = math.inf if seconds is None else time.monotonic() + max(0.0, seconds)

    def resume(self) -> None:
        """Let frames flow again."""
        self._until = 0.0
        self._resumed.set()
        self._resumed = asyncio.Event()

    async def wait_open(self) -> None:
        """Return once the gate is open (at once when it is)."""
        while self.stalled:
            left = self._until - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._resumed.wait(), None if math.isinf(left) else left)


class MediaEpoch:
    """Where the media time of the tracks sharing it starts: the first of them to start."""

    def __init__(self) -> None:
        self.start: float | None = None

    def begin(self, now: float) -> float:
        """The epoch: ``now`` for the first track that starts, the same for the others."""
        if self.start is None:
            self.start = now
        return self.start


class PacedTrack(MediaStreamTrack):
    """Wall-clock pacing shared by the synthetic tracks (``clock``: the real one, or a
    :class:`~avatar_sdk.clock.FakeClock` to pace a track's frames in a unit test).
    ``epoch``: shared by a viewer's tracks, their media times count from one instant and
    their frames keep to its grid (otherwise each counts from its own first frame)."""

    def __init__(
        self,
        period: float,
        gate: MediaGate | None,
        clock: Clock = SYSTEM_CLOCK,
        epoch: MediaEpoch | None = None,
    ) -> None:
        super().__init__()
        self._clock = clock
        self._period = period
        self._gate = gate
        self._epoch = epoch
        self._start: float | None = None
        self._due = 0.0
        self._next = 0  # the next slot on the epoch's grid
        self.frames_sent = 0

    async def _next_slot(self) -> float:
        """Wait for the next frame slot; return seconds since the track started."""
        if self.readyState != "live":
            raise MediaStreamError
        if self._gate is not None and self._gate.stalled:
            await self._gate.wait_open()
        now = self._clock.monotonic()
        if self._epoch is not None:
            return await self._next_grid_slot(now, self._epoch)
        if self._start is None:
            self._start = self._due = now
        if self._due > now:
            await self._clock.sleep(self._due - now)
            now = self._clock.monotonic()
        if self.readyState != "live":
            raise MediaStreamError
        # After a stall: no burst of late frames, the timeline jumps instead.
        self._due = max(self._due, now - self._period) + self._period
        return now - self._start

    async def _next_grid_slot(self, now: float, epoch: MediaEpoch) -> float:
        """With an epoch: frames on its grid (multiples of the period since the epoch), each
        sent at or just after its instant and stamped with it, so the media time of every
        frame is its instant, whatever the wake-up's lateness; after a stall, the slots
        missed are skipped (no burst)."""
        if self._start is None:
            self._start = epoch.begin(now)
            self._next = 0
        passed = math.floor((now - self._start) / self._period + 1e-9)
        slot = max(self._next, passed)
        due = self._start + slot * self._period
        if due > now:
            await self._clock.sleep(due - now)
            if self.readyState != "live":
                raise MediaStreamError
        self._next = slot + 1
        return slot * self._period


class PatternTrack(PacedTrack):
    """A moving test pattern; frame ``n`` carries ``n`` in its top band."""

    kind = "video"

    def __init__(
        self,
        *,
        width: int = 320,
        height: int = 240,
        fps: float = 20.0,
        gate: MediaGate | None = None,
        epoch: MediaEpoch | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if width < _BITS * 4 or height < _BAND_ROWS * 3 or width % 2 or height % 2:
            raise ValueError("PatternTrack needs an even size of at least 128x48")
        super().__init__(1.0 / fps, gate, clock, epoch)
        self.width = width
        self.height = height
        self._ramp = bytes(16 + (x * 2) % 220 for x in range(2 * width))
        self._last_pts = -1
        #: This track's own stall switch (the video only, not the voice sharing ``gate``).
        self.freeze = MediaGate()

    async def recv(self) -> av.VideoFrame:
        if self.freeze.stalled:
            await self.freeze.wait_open()
        elapsed = await self._next_slot()
        # Rounded: on an epoch's grid, elapsed is a multiple of the period give or take a ulp.
        pts = max(self._last_pts + 1, round(elapsed * VIDEO_CLOCK))
        frame = self.render(self.frames_sent, round(pts * 1000 / VIDEO_CLOCK))
        frame.pts = self._last_pts = pts
        frame.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        self.frames_sent += 1
        return frame

    def render(self, counter: int, media_ms: int = 0) -> av.VideoFrame:
        """Frame ``counter`` of the pattern (a diagonal ramp scrolling 4 px per frame), drawn
        at ``media_ms`` (ms of media time, in the second band)."""
        w, h = self.width, self.height
        frame = av.VideoFrame(w, h, "yuv420p")
        luma = frame.planes[0]
        pad = bytes(luma.line_size - w)
        shift = counter * 4
        rows = [_band_row(_MARKER << 24 | counter & 0xFFFFFF, w) + pad] * _BAND_ROWS
        rows += [_band_row(_TIME_MARKER << 24 | media_ms & 0xFFFFFF, w) + pad] * _BAND_ROWS
        for y in range(2 * _BAND_ROWS, h):
            off = (shift + y) % w
            rows.append(self._ramp[off : off + w] + pad)
        luma.update(b"".join(rows))
        tint = 128 + (counter // 20) % 2 * 24  # a slow colour blink, handy when watching it
        for plane in frame.planes[1:]:
            plane.update(bytes([tint]) * plane.buffer_size)
        return frame


def _band_row(word: int, width: int) -> bytes:
    block = width // _BITS
    row = bytearray()
    for bit in range(_BITS - 1, -1, -1):
        row += bytes([_HIGH if word >> bit & 1 else _LOW]) * block
    row += bytes([_LOW]) * (width - len(row))
    return bytes(row)


def _read_band(frame: av.VideoFrame, band: int, marker: int) -> int | None:
    if frame.width < _BITS * 4 or frame.height < _BAND_ROWS * (band + 1):
        return None
    if frame.format.name != "yuv420p":
        frame = frame.reformat(format="yuv420p")
    luma = frame.planes[0]
    data = bytes(luma)
    block = frame.width // _BITS
    row = (band * _BAND_ROWS + _BAND_ROWS // 2) * luma.line_size
    word = 0
    for bit in range(_BITS):
        word = word << 1 | (data[row + bit * block + block // 2] > 128)
    if word >> 24 != marker:
        return None
    return word & 0xFFFFFF


def read_frame_counter(frame: av.VideoFrame) -> int | None:
    """The counter :class:`PatternTrack` drew into ``frame``; None if it is not one of ours."""
    return _read_band(frame, 0, _MARKER)


def read_media_time(frame: av.VideoFrame) -> float | None:
    """The media time (s since its :class:`MediaEpoch`, to the ms) :class:`PatternTrack`
    drew into ``frame``; None if it is not one of ours."""
    ms = _read_band(frame, 1, _TIME_MARKER)
    return None if ms is None else ms / 1000


class _Voice(PacedTrack):
    """A 20 ms audio slot each ``recv``: the tone while ``active()`` says so (the avatar is
    speaking), silence otherwise. Subclasses say how a slot is carried."""

    kind = "audio"

    def __init__(
        self,
        *,
        frequency: float = 440.0,
        amplitude: float = 0.3,
        active: Callable[[], bool] | None = None,
        gate: MediaGate | None = None,
        clock: Clock = SYSTEM_CLOCK,
        epoch: MediaEpoch | None = None,
    ) -> None:
        super().__init__(AUDIO_FRAME / AUDIO_RATE, gate, clock, epoch)
        self.active = active
        #: The media times (s) at which the last stretches of tone began, oldest first.
        self.onsets: deque[float] = deque(maxlen=100)
        self._speaking = False
        self.frequency = float(frequency)
        self.amplitude = max(0.0, min(1.0, amplitude))
        self._pts = 0
        self.tone_frames = 0
        self._prepare()

    def _prepare(self) -> None:
        """Compute once what every slot reuses (the tone's samples or packets)."""

    @property
    def skipped_seconds(self) -> float:
        """Voice time passed over after stalls (a loaded server's loop): the slots whose pts
        were jumped, which no frame carried."""
        return max(0, self._pts // AUDIO_FRAME - self.frames_sent) * AUDIO_FRAME / AUDIO_RATE

    async def _slot(self) -> tuple[int, bool]:
        """The next slot's pts (jumping forward after a stall) and whether it is tone."""
        elapsed = await self._next_slot()
        slot = math.floor(
            elapsed * AUDIO_RATE / AUDIO_FRAME + 1e-6
        )  # a grid instant, give or take a ulp
        self._pts = max(self._pts, slot * AUDIO_FRAME)
        pts, speaking = self._pts, self.active is None or self.active()
        if speaking and not self._speaking:
            self.onsets.append(pts / AUDIO_RATE)
        self._speaking = speaking
        self._pts += AUDIO_FRAME
        self.frames_sent += 1
        self.tone_frames += speaking
        return pts, speaking


class ToneTrack(_Voice):
    """48 kHz mono PCM frames: a sine while ``active()`` is true, silence otherwise."""

    def _prepare(self) -> None:
        self._tone = tone_second(self.frequency, self.amplitude)
        self._silence = bytes(AUDIO_FRAME * 2)

    async def recv(self) -> av.AudioFrame:
        pts, speaking = await self._slot()
        frame = av.AudioFrame(format="s16", layout="mono", samples=AUDIO_FRAME)
        if speaking:
            start = (pts % AUDIO_RATE) * 2
            frame.planes[0].update(self._tone[start : start + AUDIO_FRAME * 2])
        else:
            frame.planes[0].update(self._silence)
        frame.sample_rate = AUDIO_RATE
        frame.pts = pts
        frame.time_base = fractions.Fraction(1, AUDIO_RATE)
        return frame


class OpusToneTrack(_Voice):
    """:class:`ToneTrack`'s voice as pre-encoded Opus packets (nothing encoded per frame).

    aiortc sends ``av.Packet``s as they are, so every viewer of every session shares one
    precomputed packet cycle; silence is the Opus silence frame, which any decoder turns
    into exact zeros.
    """

    def _prepare(self) -> None:
        self._cycle = encoded_tone(self.frequency, self.amplitude)

    async def recv(self) -> av.Packet[Any]:
        pts, speaking = await self._slot()
        payload = self._cycle[(pts // AUDIO_FRAME) % len(self._cycle)] if speaking else OPUS_SILENCE
        return opus_packet(payload, AUDIO_FRAME, pts)
