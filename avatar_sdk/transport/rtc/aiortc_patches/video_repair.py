"""Keep the avatar's video moving past a packet that never arrives.

Why: aiortc 1.16's video receiver assembles frames in a jitter buffer of 512 packets that
hands a frame on only once every packet before it has arrived, and it sends a NACK only
when a *new* gap appears. A packet whose NACK or retransmission is lost too (the end of a
loss burst: no new gap follows, so nobody asks again) blocks every later frame until 512
more packets have arrived behind it: 12-25 s of frozen picture at the avatar's bitrate,
with the voice flowing. A keyframe request cannot help, since the keyframe waits behind
the same hole. The network lab saw it (a 5.2 s freeze after ``loss 5% 6s``, ended only by
the video rule's re-subscribe), and ``faults.lose_video_packets`` reproduces it at will.

Two repairs on the receiving side, as libwebrtc's NACK module and packet buffer do:

1. **Ask again** (:class:`NackRetry`): while packets are missing, the NACK listing them is
   sent again every :data:`NACK_RETRY_EVERY` (on the next packet received), and a packet
   is given up :data:`HOLE_WAIT` after it went missing.
2. **Skip the hole** (:class:`HoleWatch`): when the oldest frame has waited
   :data:`HOLE_WAIT` for a missing packet while later packets kept arriving, the buffer is
   emptied, the missing packets forgotten and a keyframe asked for at once (an RTCP PLI);
   frames are dropped until that keyframe (``DemandQueue.await_keyframe``), as a decoder
   would only show corruption before it. The picture stops for ``HOLE_WAIT`` plus one
   keyframe's trip, never for 512 packets.

And one for latency: aiortc hands a frame on only once the first packet of the *next* one
arrives (50 ms later at 20 fps, and the video of an instant then reaches the app well after
its voice). A frame whose packets are all here, the last one carrying the RTP marker bit
(the end of a frame, RFC 6184 5.1), is handed on at once (:func:`complete_frame`).

The decisions are pure and take the time (tested under a fake clock). The patch is two
stand-ins set on the receiver before it receives: ``_RTCRtpReceiver__jitter_buffer``
(called as ``add(packet) -> (pli, frame)``) and ``_RTCRtpReceiver__nack_generator``
(``add(packet) -> bool`` and ``missing``), each wrapping aiortc's own object. The buffer's
``_origin``, ``_packets`` and ``remove()`` are read to find and drop the hole.
:func:`repair_video_reception` raises ``RuntimeError`` on a receiver that does not look
like 1.16's, and ``tests/unit/test_video_repair.py`` fails if those names move.
"""

from __future__ import annotations

from collections.abc import Callable

from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtcrtpreceiver import NackGenerator, RTCRtpReceiver
from aiortc.rtp import RtpPacket

from ....logs import sdk_logger

__all__ = [
    "HOLE_WAIT",
    "NACK_RETRY_EVERY",
    "HoleWatch",
    "NackRetry",
    "VideoRepair",
    "complete_frame",
    "repair_video_reception",
]

log = sdk_logger(__name__)

_JITTER = "_RTCRtpReceiver__jitter_buffer"
_NACKS = "_RTCRtpReceiver__nack_generator"

#: A missing video packet is asked for again this often (s), until it arrives or is
#: given up. About one retry per frame at 20 fps; on a path with a longer round trip the
#: sender may resend a packet twice, which its receiver ignores.
NACK_RETRY_EVERY = 0.1
#: How long the oldest frame may wait for a missing packet while later packets arrive
#: before the hole is skipped to the next keyframe (s). Five retries.
HOLE_WAIT = 0.5


class NackRetry:
    """When to send a video receiver's NACK again, and which missing packets to give up."""

    def __init__(self, *, every: float = NACK_RETRY_EVERY, give_up: float = HOLE_WAIT) -> None:
        self.every = every
        self.give_up = give_up
        self._missing_since: dict[int, float] = {}
        self._sent_at: float | None = None
        self.retries = 0  # NACKs sent again (not counting each gap's first)
        self.given_up = 0  # packets never received, no longer asked for

    def on_packet(self, now: float, missing: set[int], *, new_gap: bool) -> bool:
        """A packet arrived; ``missing`` is the generator's set (packets given up are
        taken out of it). Returns whether to send the NACK listing ``missing`` now."""
        for seq in list(self._missing_since):
            if seq not in missing:
                del self._missing_since[seq]
        for seq in missing:
            self._missing_since.setdefault(seq, now)
        for seq, since in list(self._missing_since.items()):
            if now - since >= self.give_up:
                missing.discard(seq)
                del self._missing_since[seq]
                self.given_up += 1
        if new_gap:
            self._sent_at = now
            return True
        if missing and (self._sent_at is None or now - self._sent_at >= self.every):
            self._sent_at = now
            self.retries += 1
            return True
        return False

    def forget(self, missing: set[int]) -> None:
        """The hole was skipped: nothing is asked for any more."""
        missing.clear()
        self._missing_since.clear()


class HoleWatch:
    """How long a jitter buffer has been held up by a missing packet."""

    def __init__(self, *, wait: float = HOLE_WAIT) -> None:
        self.wait = wait
        self._stuck_since: float | None = None

    def look(self, now: float, *, frame_out: bool, stuck: bool) -> bool:
        """After one packet was added: ``frame_out`` a frame came out, ``stuck`` none could
        (a packet before a later frame's is missing). Returns whether to skip the hole."""
        if frame_out or not stuck:
            self._stuck_since = None
            return False
        if self._stuck_since is None:
            self._stuck_since = now
            return False
        if now - self._stuck_since >= self.wait:
            self._stuck_since = None
            return True
        return False


def is_stuck(buffer: JitterBuffer, packet: RtpPacket) -> bool:
    """Whether ``buffer`` (to which ``packet`` was just added, with no frame out) holds a
    packet of a frame later than its oldest one yet gave no frame: a packet is missing.

    aiortc hands a frame on when the first packet of the next frame arrives; so with no
    frame out, a hole at the oldest position, or an oldest packet of another frame than
    the one just added, means the oldest frame cannot complete.
    """
    origin = buffer._origin
    if origin is None:
        return False
    oldest = buffer._packets[origin % buffer.capacity]
    return oldest is None or oldest.timestamp != packet.timestamp


def complete_frame(buffer: JitterBuffer) -> JitterFrame | None:
    """The oldest frame of ``buffer``, taken out of it, if it is complete: its packets from
    the oldest position on, without a gap, one timestamp, the last one with the RTP marker
    bit. None (and the buffer untouched) otherwise: aiortc hands it on later, its way."""
    origin = buffer._origin
    if origin is None:
        return None
    packets: list[RtpPacket] = []
    for count in range(buffer.capacity):
        packet = buffer._packets[(origin + count) % buffer.capacity]
        if packet is None or (packets and packet.timestamp != packets[0].timestamp):
            return None
        packets.append(packet)
        if packet.marker:
            buffer.remove(len(packets))
            data = b"".join(getattr(p, "_data", b"") for p in packets)
            return JitterFrame(data=data, timestamp=packets[0].timestamp)
    return None


class _RetryingNacks:
    """Stands in for the receiver's NackGenerator: the same ``add`` and ``missing``."""

    def __init__(self, inner: NackGenerator, retry: NackRetry, clock: Callable[[], float]) -> None:
        self._inner = inner
        self._retry = retry
        self._clock = clock

    @property
    def missing(self) -> set[int]:
        return self._inner.missing

    def add(self, packet: RtpPacket) -> bool:
        new_gap = self._inner.add(packet)
        return self._retry.on_packet(self._clock(), self._inner.missing, new_gap=new_gap)

    def forget(self) -> None:
        self._retry.forget(self._inner.missing)


class _HoleSkippingBuffer:
    """Stands in for the receiver's video JitterBuffer: the same ``add``, plus the skip."""

    def __init__(
        self,
        inner: JitterBuffer,
        watch: HoleWatch,
        clock: Callable[[], float],
        on_skip: Callable[[int], None],
    ) -> None:
        self._inner = inner
        self._watch = watch
        self._clock = clock
        self._on_skip = on_skip
        #: After a skip: the frame being received then, whose start is gone (dropped).
        self._partial_timestamp: int | None = None

    @property
    def capacity(self) -> int:
        return self._inner.capacity

    def add(self, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
        if self._partial_timestamp is not None:
            if packet.timestamp == self._partial_timestamp:
                return False, None
            self._partial_timestamp = None  # the next frame starts here
        pli, frame = self._inner.add(packet)
        if frame is None:
            frame = complete_frame(self._inner)
        stuck = frame is None and is_stuck(self._inner, packet)
        if not self._watch.look(self._clock(), frame_out=frame is not None, stuck=stuck):
            return pli, frame
        dropped = sum(p is not None for p in self._inner._packets)
        self._inner.remove(self._inner.capacity)
        self._inner._origin = None
        self._partial_timestamp = packet.timestamp
        self._on_skip(dropped)
        return True, None  # the receiver sends a PLI at once


class VideoRepair:
    """The two repairs of one video receiver, with their counts."""

    def __init__(
        self,
        receiver: RTCRtpReceiver,
        *,
        clock: Callable[[], float],
        on_skip: Callable[[], None] | None = None,
    ) -> None:
        buffer = getattr(receiver, _JITTER, None)
        nacks = getattr(receiver, _NACKS, None)
        if not isinstance(buffer, JitterBuffer) or not isinstance(nacks, NackGenerator):
            raise RuntimeError("aiortc RTCRtpReceiver internals changed: cannot repair video")
        for name in ("_origin", "_packets", "remove"):
            if not hasattr(buffer, name):
                raise RuntimeError(f"aiortc JitterBuffer internals changed: no {name}")
        self.retry = NackRetry()
        self.watch = HoleWatch()
        self._nacks = _RetryingNacks(nacks, self.retry, clock)
        self._on_skip = on_skip
        self.holes_skipped = 0
        self.packets_dropped = 0  # packets emptied out of the buffer by the skips
        setattr(receiver, _NACKS, self._nacks)
        setattr(receiver, _JITTER, _HoleSkippingBuffer(buffer, self.watch, clock, self._skipped))

    @property
    def nack_retries(self) -> int:
        return self.retry.retries

    def _skipped(self, dropped: int) -> None:
        self.holes_skipped += 1
        self.packets_dropped += dropped
        self._nacks.forget()
        log.info(
            "video packet missing for %.1fs: skipped to the next keyframe (%d packets dropped)",
            self.watch.wait,
            dropped,
        )
        if self._on_skip is not None:
            self._on_skip()


def repair_video_reception(
    receiver: RTCRtpReceiver, *, clock: Callable[[], float], on_skip: Callable[[], None] | None
) -> VideoRepair:
    """Install both repairs on a video ``receiver`` (before it receives). ``on_skip`` is
    told each skip (the decoder must then wait for a keyframe).

    :raises RuntimeError: aiortc's internals are not the ones this was written for.
    """
    return VideoRepair(receiver, clock=clock, on_skip=on_skip)
