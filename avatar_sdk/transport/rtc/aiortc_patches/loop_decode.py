"""Decode a received audio track on the event loop instead of aiortc's decoder thread.

Why: aiortc 1.16's ``RTCRtpReceiver`` gives every receiver a decoder thread. Each complete
encoded frame goes to it through a ``queue.Queue`` and each decoded frame comes back
through ``run_coroutine_threadsafe``: two cross-thread hand-offs (and GIL switches) every
20 ms for an Opus decode that itself takes a few tens of microseconds. For audio the
hand-off costs more than the decode (issue 11's profile); for H264 video it does not, so
video keeps its thread.

How, touching as little as we could: the receiver uses its private ``__decoder_queue``
only through ``put()`` on the loop (a ``(codec, frame)`` to decode, ``None`` to stop) and
its decoder thread only through its truthiness and ``join()``. :func:`decode_audio_on_loop`
puts a :class:`LoopDecoder` in the queue's place, whose ``put()`` decodes at once with
aiortc's own decoder and feeds the track's queue, exactly what the thread would have
done. The thread that ``receive()`` still starts finds ``get()`` returning ``None`` at
once and ends, posting its end marker into a throwaway queue (``receive`` is wrapped for
that one synchronous call).

The voice is decoded only while somebody listens (:class:`LoopDecoder`'s ``wanted``, the
downlink's output track's :attr:`~.stv.FanoutTrack.watched`): a frame nobody hears is
counted for liveness and dropped before the decoder (about 0.5 point of a core per
audio-only session in the ``load`` figure).

Private names used: ``RTCRtpReceiver._RTCRtpReceiver__decoder_queue``,
``RTCRtpReceiver._track`` and ``RemoteStreamTrack._queue``. aiortc is pinned exactly
(pyproject) because of this; :func:`decode_audio_on_loop` refuses a receiver that does not
look like 1.16's, and ``tests/integration/test_loop_codec.py`` fails if they move.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable
from typing import Any

import av
from aiortc.codecs import get_decoder
from aiortc.rtcrtpreceiver import RTCRtpReceiver

from ....logs import sdk_logger

__all__ = ["LoopDecoder", "decode_audio_on_loop"]

log = sdk_logger(__name__)

_QUEUE = "_RTCRtpReceiver__decoder_queue"
_THREAD = "_RTCRtpReceiver__decoder_thread"


class LoopDecoder:
    """Stands in for a receiver's decoder queue: decodes on the loop as frames arrive.

    With ``wanted``, a frame is decoded only while ``wanted()`` is true (somebody listens:
    the voice on demand, as the video is); any other is counted, handed to ``on_skipped``
    (liveness: the voice still arrives) and dropped before the Opus decoder. The first
    skipped frame after decoded ones calls ``on_pause`` (what the consumer buffered is
    stale), and decoding resumes with a fresh decoder, as at the start of a stream.
    """

    def __init__(
        self,
        receiver: RTCRtpReceiver,
        *,
        wanted: Callable[[], bool] | None = None,
        on_skipped: Callable[[], None] | None = None,
        on_pause: Callable[[], None] | None = None,
    ) -> None:
        self._receiver = receiver
        self._decoder: Any = None
        self._codec_name: str | None = None
        self.wanted = wanted
        self.on_skipped = on_skipped
        self.on_pause = on_pause
        self._skipping = False
        self.frames_decoded = 0
        self.frames_skipped = 0
        self.decode_errors = 0
        self.ended = False

    # Called on the loop by RTCRtpReceiver._handle_rtp_packet and __stop_decoder.
    def put(self, task: tuple[Any, Any] | None) -> None:
        track = self._receiver._track
        out: asyncio.Queue[Any] | None = getattr(track, "_queue", None)
        if task is None:
            if not self.ended and out is not None:
                self.ended = True
                out.put_nowait(None)  # what the thread sends when it stops: the track ends
            return
        if self.ended or out is None:
            return
        codec, encoded = task
        if self.wanted is not None and not self.wanted():
            self.frames_skipped += 1
            if not self._skipping:
                self._skipping = True
                self._codec_name = None  # a fresh decoder when somebody listens again
                if self.on_pause is not None:
                    self.on_pause()
            if self.on_skipped is not None:
                self.on_skipped()
            return
        self._skipping = False
        if codec.name != self._codec_name:
            self._decoder = get_decoder(codec)
            self._codec_name = codec.name
        try:
            frames = self._decoder.decode(encoded)
        except av.FFmpegError as exc:  # keep the decoder state, as aiortc's thread does
            self.decode_errors += 1
            log.warning("audio frame not decoded (%s: %s)", type(exc).__name__, exc)
            return
        for frame in frames:
            out.put_nowait(frame)
        self.frames_decoded += len(frames)

    # Called by the decoder thread aiortc starts in receive(): end it at once.
    def get(self, *args: object, **kwargs: object) -> None:
        return None


def decode_audio_on_loop(
    receiver: RTCRtpReceiver,
    *,
    wanted: Callable[[], bool] | None = None,
    on_skipped: Callable[[], None] | None = None,
    on_pause: Callable[[], None] | None = None,
) -> LoopDecoder:
    """Make an audio ``receiver`` decode on the event loop; call before it starts.
    ``wanted``, ``on_skipped``, ``on_pause``: decode only on demand (:class:`LoopDecoder`).

    :raises RuntimeError: aiortc's internals are not the ones this was written for.
    """
    current = getattr(receiver, _QUEUE, None)
    if (
        not isinstance(current, queue.Queue)
        or getattr(receiver, _THREAD, False) is not None
        or not hasattr(receiver, "_track")
    ):
        raise RuntimeError("aiortc RTCRtpReceiver internals changed: cannot decode on the loop")
    decoder = LoopDecoder(receiver, wanted=wanted, on_skipped=on_skipped, on_pause=on_pause)
    setattr(receiver, _QUEUE, decoder)
    original = receiver.receive

    async def receive(parameters: Any) -> None:
        track = receiver._track
        if track is None:
            await original(parameters)
            return
        real = track._queue
        track._queue = asyncio.Queue()  # the idle thread's output: its end marker only
        try:
            await original(parameters)  # synchronous in 1.16: starts the thread, no await
        finally:
            track._queue = real

    receiver.receive = receive  # type: ignore[method-assign]
    return decoder
