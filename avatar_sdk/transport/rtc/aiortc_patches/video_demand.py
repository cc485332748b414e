"""Decode the avatar's video only while someone watches it.

Why: aiortc decodes every received video frame (H264 at 20 fps, on its decoder thread)
whether or not anybody reads the track. A load test, or a bot that only listens, pays for
a decode nobody looks at: the largest single share of an audio+video session's CPU.

How, touching as little as we could: aiortc 1.16's ``RTCRtpReceiver`` hands each
complete encoded frame (assembled by its jitter buffer, on the event loop) to its decoder
thread with ``put()`` on its private ``__decoder_queue``; the thread reads it with
``get()``. :func:`decode_video_on_demand` puts a :class:`DemandQueue` in the queue's place
(before ``receive()`` starts the thread, which takes the queue object then): ``get()`` is
the real queue's, and ``put()`` forwards a frame only while :attr:`DemandQueue.wanted`
says so. Everything else stays aiortc's: RTP, NACKs, RTCP, the jitter buffer, the thread.

- **Wanted**: until the first frame is decoded (the playable gate waits for it) and while a
  consumer reads the video (``demand()``, the received track's :attr:`FanoutTrack.watched
  <avatar_sdk.transport.rtc.stv.FanoutTrack.watched>`).
- **Resuming**: frames are dropped until a keyframe (an H264 IDR or SPS, a VP8 key frame;
  any frame of another codec), and a keyframe is asked for at once with a PLI: the
  receiver's own ``__decoder_error`` event is set, which makes aiortc send a PLI on the
  next packet (exactly what it does after a decode error). Asked again every
  :data:`PLI_EVERY` dropped frames while none comes.
- **Liveness**: every assembled frame is stamped (:attr:`DemandQueue.assembled_at`),
  decoded or not, so the downlink's liveness does not depend on anybody watching.

Private names used: ``RTCRtpReceiver._RTCRtpReceiver__decoder_queue``,
``_RTCRtpReceiver__decoder_thread`` (None before ``receive()``) and
``_RTCRtpReceiver__decoder_error``. aiortc is pinned exactly (pyproject);
:func:`decode_video_on_demand` raises ``RuntimeError`` on a receiver that does not look
like 1.16's, and ``tests/unit/test_video_demand.py`` fails if those names move.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from aiortc.rtcrtpreceiver import RTCRtpReceiver

from ....logs import sdk_logger

__all__ = [
    "PLI_EVERY",
    "DemandQueue",
    "decode_video_on_demand",
    "is_keyframe",
    "request_keyframe",
]

log = sdk_logger(__name__)

_QUEUE = "_RTCRtpReceiver__decoder_queue"
_THREAD = "_RTCRtpReceiver__decoder_thread"
_ERROR = "_RTCRtpReceiver__decoder_error"

#: While resuming, a PLI is sent again after this many frames dropped without a keyframe
#: (a lost PLI or keyframe must not leave the consumer without video).
PLI_EVERY = 20


def is_keyframe(codec_name: str, data: bytes) -> bool:
    """Whether a depayloaded frame starts a decodable picture.

    H264 (Annex B as aiortc's depayloader gives it): a NAL unit of type 5 (IDR) or 7 (SPS,
    sent before an IDR). VP8: the payload header's inverse key frame bit is 0. Any other
    codec: True (every frame is passed on; the decoder copes as aiortc's always did).
    """
    name = codec_name.lower()
    if name == "h264":
        start = 0
        while True:
            at = data.find(b"\x00\x00\x01", start)
            if at < 0 or at + 3 >= len(data):
                return False
            if data[at + 3] & 0x1F in (5, 7):
                return True
            start = at + 3
    if name == "vp8":
        return bool(data) and data[0] & 0x01 == 0
    return True


class DemandQueue:
    """Stands in for a video receiver's decoder queue: forwards frames only when wanted."""

    def __init__(
        self,
        receiver: RTCRtpReceiver,
        real: queue.Queue[Any],
        error: threading.Event,
        *,
        demand: Callable[[], bool],
        first_decoded: Callable[[], bool],
        clock: Callable[[], float],
    ) -> None:
        self._receiver = receiver
        self._real = real
        self._error = error
        self._demand = demand
        self._first_decoded = first_decoded
        self._clock = clock
        #: Frames the jitter buffer assembled, all of them (decoded or not).
        self.assembled = 0
        #: When the last one was assembled (the session's monotonic clock); None before.
        self.assembled_at: float | None = None
        self.forwarded = 0  # frames handed to the decoder thread
        self.skipped = 0  # frames dropped: nobody watching, or waiting for a keyframe
        self.plis = 0  # keyframes asked for
        self.resumes = 0  # times decoding started again after a pause
        self.decoding = True
        self._need_key = True
        self._dropped_waiting = 0
        self.on_pause: Callable[[], None] | None = None

    @property
    def wanted(self) -> bool:
        return not self._first_decoded() or self._demand()

    # Called on the loop by RTCRtpReceiver._handle_rtp_packet and __stop_decoder.
    def put(self, task: tuple[Any, Any] | None) -> None:
        if task is None:  # stop: the thread must see it
            self._real.put(None)
            return
        self.assembled += 1
        self.assembled_at = self._clock()
        if not self.wanted:
            if self.decoding:
                self.decoding = False
                self._need_key = True
                if self.on_pause is not None:
                    self.on_pause()
            self.skipped += 1
            return
        if not self.decoding:
            self.decoding = True
            self.resumes += 1
        codec, encoded = task
        if self._need_key:
            if not is_keyframe(str(codec.name), bytes(encoded.data)):
                self.skipped += 1
                if self._dropped_waiting % PLI_EVERY == 0:
                    self._ask_keyframe()
                self._dropped_waiting += 1
                return
            self._need_key = False
            self._dropped_waiting = 0
        self.forwarded += 1
        self._real.put(task)

    def await_keyframe(self) -> None:
        """Drop frames until the next keyframe: the frames before it were lost (a skipped
        hole, :mod:`.video_repair`, which has just asked for one)."""
        self._need_key = True
        self._dropped_waiting = 1  # asked for already: ask again after PLI_EVERY frames

    def _ask_keyframe(self) -> None:
        # aiortc sends a PLI on the next RTP packet when its decoder reported an error.
        self.plis += 1
        self._error.set()

    # Called by the decoder thread (started by receive(), which took this object).
    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self._real.get(*args, **kwargs)


def decode_video_on_demand(
    receiver: RTCRtpReceiver,
    *,
    demand: Callable[[], bool],
    first_decoded: Callable[[], bool],
    clock: Callable[[], float],
) -> DemandQueue:
    """Make a video ``receiver`` decode only while ``demand()`` (or before the first
    decoded frame, ``first_decoded()`` False); call before it starts receiving.

    :raises RuntimeError: aiortc's internals are not the ones this was written for.
    """
    real = getattr(receiver, _QUEUE, None)
    error = getattr(receiver, _ERROR, None)
    if (
        not isinstance(real, queue.Queue)
        or not isinstance(error, threading.Event)
        or getattr(receiver, _THREAD, False) is not None
    ):
        raise RuntimeError("aiortc RTCRtpReceiver internals changed: cannot decode video on demand")
    gate = DemandQueue(
        receiver, real, error, demand=demand, first_decoded=first_decoded, clock=clock
    )
    setattr(receiver, _QUEUE, gate)
    return gate


async def request_keyframe(receiver: RTCRtpReceiver) -> int:
    """Ask the sender of ``receiver``'s video for a keyframe at once: an RTCP PLI for each
    source heard in the last 10 s (aiortc's ``getSynchronizationSources()``), sent now, not
    on the next RTP packet (a stalled sender may send none); the receiver's decoder-error
    flag is also set, so aiortc asks again on the next packet. Returns the PLIs sent now.

    Uses aiortc 1.16's ``RTCRtpReceiver._send_rtcp_pli`` (a private name:
    ``tests/unit/test_video_demand.py`` fails if it moves).
    """
    error = getattr(receiver, _ERROR, None)
    if isinstance(error, threading.Event):
        error.set()
    sent = 0
    for source in receiver.getSynchronizationSources():
        try:
            await receiver._send_rtcp_pli(source.source)
        except Exception as exc:  # a transport closing under us: the next look retries
            log.debug("PLI not sent: %s: %s", type(exc).__name__, exc)
            continue
        sent += 1
    return sent
