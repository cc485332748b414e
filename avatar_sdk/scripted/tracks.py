"""The scripted session's output tracks: the voice hub every downlink frame goes through
(levelled for the say ledger, then fanned out to the application's readers), and the frame
iterator that owns one reader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..media.sinks import FrameIterator
from ..transport.rtc.stv import FanoutTrack

__all__ = ["ReaderIterator", "VoiceHub"]


class VoiceHub(FanoutTrack):
    """The session's audio track: every decoded frame is levelled for the say ledger, then
    fanned out to the application's readers (``avatar_audio`` and each ``frames()``)."""

    def __init__(self, kind: str, tap: Callable[[Any], None] | None = None) -> None:
        super().__init__(kind)
        self._tap = tap
        self.readers: list[FanoutTrack] = []

    @property
    def watched(self) -> bool:
        """Watched through ``avatar_*`` itself, by a reader, or by the tap."""
        return self._tap is not None or super().watched or any(r.watched for r in self.readers)

    def pause(self) -> None:
        super().pause()
        for reader in self.readers:
            reader.pause()

    def push(self, frame: Any) -> None:
        if self._tap is not None:
            self._tap(frame)
        for reader in list(self.readers):
            reader.push(frame)
        super().push(frame)


class ReaderIterator(FrameIterator):
    """A :class:`FrameIterator` over one of the session's reader tracks, which it owns:
    closing it stops the reader and takes it off the fan-out."""

    def __init__(
        self, reader: FanoutTrack, *, max_queue: int, on_close: Callable[[], None]
    ) -> None:
        super().__init__(reader, max_queue=max_queue)
        self.reader = reader
        self._on_close = on_close

    async def aclose(self) -> None:
        self._on_close()
        self.reader.stop()
        await super().aclose()
