"""Figure ``latency``: the avatar's voice onset to the app's first non-silent frame.

On loopback, against the staging backend: its voice track is switched from silence to the
tone at a chosen moment (the viewer's ``audio.active``), and the onset is the instant its
first tone frame is handed to the sender (the track's ``recv()`` returns it). The end is
the instant a reader of the received voice gets its first frame with a sample above
:data:`THRESHOLD`: ``session.avatar_audio`` for the SDK, the track of a bare aiortc peer
(:class:`~benchmarks.bare.BareClient`, aiortc's own four-frame audio buffer) beside it, one
after the other in the same run. ``TRIALS`` onsets each, the voice silent for
:data:`QUIET` before each.

What the SDK's figure holds: the voice's receive buffer
(:mod:`avatar_sdk.transport.rtc.core.voice_buffer`,
one frame on a calm loopback), the Opus decode on the loop, the pump and the session's
bounded track; aiortc's holds its fixed 80 ms prefetch. Both share the sender's pacing,
SRTP and the loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.testing import StagingServer

from .bare import BareClient
from .stats import FigureResult, Row, Summary, Target

TITLE = "voice latency: the avatar's voice onset to the app's first non-silent frame"

TRIALS = 20
#: Silence before each onset (s): the buffer is back at its calm state.
QUIET = 0.4
#: A sample above this (s16) is voice: the staging tone peaks near 9,800, PLC-free silence is 0.
THRESHOLD = 500
#: The issue's target for the SDK on loopback (aiortc's buffer alone: 80 ms).
SDK_TARGET = Target("<=", 30.0, "ms")


class _Probe:
    """The onset on the staging's voice track, and the first loud frame the app reads."""

    def __init__(self, track: Any) -> None:
        self.track = track
        self.on = False
        self.onset: float | None = None
        self.heard: float | None = None
        self._heard = asyncio.Event()
        track.active = lambda: self.on
        original: Callable[[], Any] = track.recv

        async def recv() -> Any:
            frame = await original()
            if self.on and self.onset is None and track.tone_frames:
                self.onset = time.monotonic()
            return frame

        track.recv = recv

    def frame(self, frame: Any) -> None:
        if self.onset is None or self.heard is not None:
            return
        if int(np.abs(frame.to_ndarray()).max()) > THRESHOLD:
            self.heard = time.monotonic()
            self._heard.set()

    async def trials(self, count: int) -> list[float]:
        latencies: list[float] = []
        for _ in range(count):
            self.on = False
            await asyncio.sleep(QUIET)
            self.onset = self.heard = None
            self._heard.clear()
            self.on = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heard.wait(), 3.0)
            self.on = False
            if self.onset is not None and self.heard is not None:
                latencies.append(self.heard - self.onset)
        return latencies


def _viewer_track(staging: StagingServer) -> Any:
    (viewer,) = [v for v in staging.media.viewers.values() if v.is_open]
    return viewer.audio


async def _sdk(staging: StagingServer, trials: int) -> tuple[list[float], dict[str, float]]:
    session = AvatarSession(
        staging.url, staging.token, video=False, allow_insecure_transport=True,
        config=SessionConfig(),
    )  # fmt: skip
    async with session:
        probe = _Probe(_viewer_track(staging))
        audio = session.avatar_audio
        assert audio is not None

        async def read() -> None:
            while True:
                probe.frame(await audio.recv())

        reader = asyncio.ensure_future(read())
        try:
            latencies = await probe.trials(trials)
        finally:
            reader.cancel()
        return latencies, session.stats().get("voice_buffer", {})


async def _bare(staging: StagingServer, trials: int) -> list[float]:
    client = BareClient(staging.url, staging.token, audio=None, video=False)
    try:
        await client.connect()
        probe = _Probe(_viewer_track(staging))
        client.on_frame = lambda kind, frame: probe.frame(frame) if kind == "audio" else None
        return await probe.trials(trials)
    finally:
        await client.close()


async def _run(trials: int) -> FigureResult:
    result = FigureResult("latency", TITLE)
    async with StagingServer() as staging:
        sdk, buffer = await _sdk(staging, trials)
    async with StagingServer() as staging:
        bare = await _bare(staging, trials)
    for label, values, target in (
        ("SDK: session.avatar_audio", sdk, SDK_TARGET),
        ("bare aiortc receiver", bare, None),
    ):
        s = Summary.of(values).scaled(1000.0)
        result.rows.append(Row(f"{label}: onset to first heard frame", s.n, s.median, "ms",
                               s.p90, s.maximum, target))  # fmt: skip
    delay_ms = buffer.get("target_delay", 0.0) * 1000
    result.notes.append(
        f"{trials} onsets each on loopback, {QUIET * 1000:.0f} ms of silence before each; "
        f"the SDK's voice buffer ended at target delay {delay_ms:.1f} ms, "
        f"concealed {buffer.get('concealed', 0):.0f}, late {buffer.get('late', 0):.0f}, "
        f"underruns {buffer.get('underruns', 0):.0f}."
    )
    result.data = {
        "trials": trials,
        "sdk_ms": [v * 1000 for v in sdk],
        "bare_ms": [v * 1000 for v in bare],
        "voice_buffer": buffer,
    }
    return result


def run(trials: int = TRIALS) -> FigureResult:
    """Run the latency figure in its own event loop."""
    return asyncio.run(_run(trials))
