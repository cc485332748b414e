"""Any audio re-chunked to what the uplink sends: 48 kHz mono s16, 20 ms, continuous pts."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from .opus import FRAME_SAMPLES, SAMPLE_RATE, TIME_BASE

__all__ = ["Normalizer"]


class Normalizer:
    """Re-chunk any audio into 48 kHz mono s16 20 ms frames with a continuous pts."""

    def __init__(self) -> None:
        self._resampler = av.AudioResampler(
            format="s16", layout="mono", rate=SAMPLE_RATE, frame_size=FRAME_SAMPLES
        )
        self._ready: deque[av.AudioFrame] = deque()
        self._pts = 0

    def push(self, frame: av.AudioFrame) -> None:
        self._ready.extend(self._resampler.resample(frame))

    def pop(self) -> av.AudioFrame | None:
        if not self._ready:
            return None
        frame = self._ready.popleft()
        frame.pts = self._pts
        frame.time_base = TIME_BASE
        self._pts += frame.samples
        return frame

    async def next_frame(
        self, track: MediaStreamTrack, refill: Callable[[], Awaitable[None]]
    ) -> av.AudioFrame:
        """The next whole frame for ``track``'s ``recv``: ``refill`` (which pushes more of the
        source's audio) is awaited until one is ready; ``MediaStreamError`` once ``track``
        has stopped."""
        while True:
            if track.readyState != "live":
                raise MediaStreamError
            frame = self.pop()
            if frame is not None:
                return frame
            await refill()
