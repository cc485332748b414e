"""The avatar's voice receive buffer: when each received audio packet is played out.

Why: aiortc 1.16's audio receiver hands a frame on only once four complete frames are
queued behind it (``JitterBuffer(capacity=16, prefetch=4)``): 80 ms of fixed delay on a
network with no jitter at all, and no more than 80 ms of tolerance on one with a lot.
This rule, after libwebrtc NetEq's delay manager (written anew here), holds each packet
only as long as the jitter it has observed requires:

* **Timeline.** A packet's *transit* is its arrival time minus its RTP time. The fastest
  transit of the last :data:`WINDOW` packets is the base; a packet's *relative delay* is
  its transit above that base (what the network added to it). A packet is due at its RTP
  time + the playout offset, which follows base + target delay.
* **Target delay**: the :data:`QUANTILE` of the window's relative delays, never under one
  frame, capped at :data:`MAX_DELAY`. It grows at once (a packet later than the target
  raises it to that packet's delay), and shrinks by at most :data:`SHRINK_RATE`.
* **Reorder**: packets are kept by sequence number and played in that order.
* **Loss**: a missing packet with a later one already here is concealed when its own time
  comes (an :class:`Playout` without payload: the install decodes it as Opus PLC), so it
  never holds later audio longer than the target delay. Nothing later here is a sender's
  pause (or the end of the voice), not a loss: nothing is concealed, nothing counted.
* **Late**: a packet whose turn was concealed already is dropped and counted; one that
  arrives after its time with nothing to conceal (the buffer ran dry) is played at once
  and counted as an underrun.
* **Bounded**: at most :data:`MAX_PACKETS` are held; a sender's burst beyond that drops
  the oldest (counted as overflow) and the timeline skips it. The playout offset moves
  earlier at most
  :data:`CATCH_UP` seconds per second (a faster sender or clock: the delay re-converges),
  and a jump too large to be jitter (:data:`RESYNC_DELAY`, or a sequence jump of
  :data:`MAX_MISORDER`) restarts the timeline (counted).

Pure: no asyncio, no aiortc; times are passed in. The install on aiortc's receiver is
:mod:`avatar_sdk.transport.rtc.aiortc_patches.voice_buffer`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Final

__all__ = [
    "CATCH_UP",
    "MAX_DELAY",
    "MAX_MISORDER",
    "MAX_PACKETS",
    "QUANTILE",
    "RESYNC_DELAY",
    "SHRINK_RATE",
    "WINDOW",
    "Playout",
    "VoiceBuffer",
    "VoiceBufferCounts",
]

#: Packets whose transit and relative delay the rule remembers (2 s of 20 ms frames).
WINDOW: Final = 100
#: The share of the window's packets the target delay covers in time.
QUANTILE: Final = 0.97
#: The target delay never exceeds this (s): past it, waiting costs more than concealing.
MAX_DELAY: Final = 0.5
#: How fast the target delay falls when the jitter does (s per s): one frame per 400 ms.
SHRINK_RATE: Final = 0.05
#: How fast the playout offset may move earlier (s per s): frames are then handed on up
#: to 1.25 times faster than real time, until the buffer is back at its target.
CATCH_UP: Final = 0.25
#: Packets held at most (1 s of 20 ms frames): the excess of a burst is dropped, oldest first.
MAX_PACKETS: Final = 50
#: A relative delay above this is no jitter: the sender's clock or stream restarted (s).
RESYNC_DELAY: Final = 1.0
#: A sequence number this far from the expected one restarts the timeline (aiortc's value).
MAX_MISORDER: Final = 100
#: The frame length assumed until two consecutive packets tell (48 kHz RTP clock, 20 ms).
DEFAULT_FRAME_TICKS: Final = 960
#: The longest plausible frame (120 ms at 48 kHz), in RTP ticks.
MAX_FRAME_TICKS: Final = 5760


@dataclass(slots=True)
class VoiceBufferCounts:
    """What the voice buffers of one session counted (all subscriptions together), and the
    current target delay (s). ``AvatarSession.stats()["voice_buffer"]`` is a snapshot."""

    packets: int = 0  # received
    played: int = 0  # handed to the decoder as received
    concealed: int = 0  # missing packets concealed (Opus PLC)
    late: int = 0  # arrived after their turn was concealed: dropped
    underruns: int = 0  # played after their time: the buffer had run dry
    reordered: int = 0  # arrived after a later packet, put in place
    duplicates: int = 0  # already played: dropped
    overflow: int = 0  # dropped to keep the buffer under MAX_PACKETS
    resyncs: int = 0  # timeline restarts (a jump no jitter explains)
    target_delay: float = 0.0

    def snapshot(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Playout:
    """One frame's turn: ``payload`` to decode, or None to conceal (its packet is missing).
    ``sequence`` and ``timestamp`` are the RTP values (16 and 32 bits)."""

    sequence: int
    timestamp: int
    payload: bytes | None


@dataclass(slots=True)
class _Held:
    timestamp: int  # extended (unwrapped)
    payload: bytes


def _unwrap(value: int, last: int | None, bits: int) -> int:
    """``value`` (modulo 2**bits) as the extended number nearest ``last``."""
    if last is None:
        return value
    span = 1 << bits
    delta = (value - last) % span
    if delta >= span // 2:
        delta -= span
    return last + delta


class VoiceBuffer:
    """The playout decisions for one received voice stream (see the module docstring).

    Feed :meth:`push` each packet as it arrives and call :meth:`poll` at
    :meth:`next_due`; both return the frames whose turn has come, in order.
    """

    def __init__(
        self,
        *,
        clock_rate: int = 48000,
        counts: VoiceBufferCounts | None = None,
        window: int = WINDOW,
        max_packets: int = MAX_PACKETS,
    ) -> None:
        self.rate = clock_rate
        self.counts = counts if counts is not None else VoiceBufferCounts()
        self._window = window
        self._max_packets = max_packets
        self._held: dict[int, _Held] = {}
        self._next: int | None = None  # extended sequence number to play next
        self._top_seq: int | None = None  # highest extended sequence number seen
        self._top_ts: int | None = None
        self._last_played_ts: int | None = None
        self._frame_ticks = DEFAULT_FRAME_TICKS
        self._concealed: deque[int] = deque(maxlen=MAX_MISORDER)
        self._transits: deque[float] = deque(maxlen=window)
        self._delays: deque[float] = deque(maxlen=window)
        self._target = self.frame
        self._offset: float | None = None  # playout time = RTP time + offset
        self._target_at: float | None = None  # when the target was last set
        self._offset_at: float | None = None  # when the offset was last moved
        self.counts.target_delay = self._target

    # -- what the rule knows ----------------------------------------------------------------
    @property
    def frame(self) -> float:
        """One frame's duration (s), as the packets' timestamps tell."""
        return self._frame_ticks / self.rate

    @property
    def target_delay(self) -> float:
        """How long a packet is held past the fastest one's arrival (s)."""
        return self._target

    @property
    def held(self) -> int:
        """Packets waiting for their turn."""
        return len(self._held)

    def next_due(self) -> float | None:
        """When the next frame's turn comes (the time line of ``now``); None: nothing waits
        (empty, or only a missing packet with nothing later: a pause, not a loss)."""
        if self._next is None or not self._held or self._offset is None:
            return None
        held = self._held.get(self._next)
        if held is not None:
            return held.timestamp / self.rate + self._offset
        return self._missing_timestamp() / self.rate + self._offset

    # -- input ----------------------------------------------------------------------------------
    def push(self, now: float, sequence: int, timestamp: int, payload: bytes) -> list[Playout]:
        """A packet arrived at ``now``; returns the frames due now (this one, perhaps)."""
        counts = self.counts
        counts.packets += 1
        seq = _unwrap(sequence, self._top_seq, 16)
        ts = _unwrap(timestamp, self._top_ts, 32)
        out: list[Playout] = []
        if self._next is not None and abs(seq - self._next) >= MAX_MISORDER:
            out.extend(self._restart())
        if self._next is None:
            self._next = seq
        elif seq < self._next:
            if seq in self._concealed:
                counts.late += 1
                self._transits.append(now - ts / self.rate)
                self._delays.append(self._transits[-1] - min(self._transits))
                self._retarget(now, self._delays[-1])
            else:
                counts.duplicates += 1
            return out + self.poll(now)
        elif seq in self._held:
            counts.duplicates += 1
            return out + self.poll(now)
        if self._top_seq is None or seq > self._top_seq:
            if self._top_seq == seq - 1 and self._top_ts is not None:
                ticks = ts - self._top_ts
                if 0 < ticks <= MAX_FRAME_TICKS:
                    self._frame_ticks = ticks
            self._top_seq, self._top_ts = seq, ts
        else:
            counts.reordered += 1
        transit = now - ts / self.rate
        if self._transits and transit - min(self._transits) > RESYNC_DELAY:
            out.extend(self._restart())
            self._next = self._top_seq = seq
            self._top_ts = ts
        elif self._ran_dry(now, seq, ts):
            counts.underruns += 1
        self._transits.append(transit)
        delay = transit - min(self._transits)
        self._delays.append(delay)
        self._held[seq] = _Held(ts, payload)
        self._retarget(now, delay)
        while len(self._held) > self._max_packets:
            self._drop_oldest()
        return out + self.poll(now)

    def poll(self, now: float) -> list[Playout]:
        """The frames whose turn has come by ``now``, in order."""
        self._retarget(now, None)
        out: list[Playout] = []
        while self._next is not None and self._held and self._offset is not None:
            held = self._held.get(self._next)
            ts = held.timestamp if held is not None else self._missing_timestamp()
            due = ts / self.rate + self._offset
            if now < due:
                break
            if held is not None:
                del self._held[self._next]
                self.counts.played += 1
                out.append(Playout(self._next & 0xFFFF, ts & 0xFFFFFFFF, held.payload))
            else:
                self.counts.concealed += 1
                self._concealed.append(self._next)
                out.append(Playout(self._next & 0xFFFF, ts & 0xFFFFFFFF, None))
            self._last_played_ts = ts
            self._next += 1
        return out

    # -- the rules ------------------------------------------------------------------------------
    def _retarget(self, now: float, delay: float | None) -> None:
        """Fast growth, slow decay of the target; the offset follows base + target."""
        if delay is not None:
            elapsed = 0.0 if self._target_at is None else max(0.0, now - self._target_at)
            self._target_at = now
            ordered = sorted(self._delays)
            wanted = max(self.frame, ordered[min(len(ordered) - 1, int(QUANTILE * len(ordered)))])
            if delay > self._target:
                wanted = max(wanted, delay)
            wanted = min(MAX_DELAY, wanted)
            if wanted >= self._target:
                self._target = wanted
            else:
                self._target = max(wanted, self._target - SHRINK_RATE * elapsed)
            self.counts.target_delay = self._target
        if not self._transits:
            return
        moved = 0.0 if self._offset_at is None else max(0.0, now - self._offset_at)
        self._offset_at = now
        desired = min(self._transits) + self._target
        if self._offset is None or desired >= self._offset:
            self._offset = desired
        else:
            self._offset = max(desired, self._offset - CATCH_UP * moved)

    def _ran_dry(self, now: float, seq: int, ts: int) -> bool:
        """Whether packet ``seq`` comes after its time with nothing held: its turn came and
        nothing was here to play or conceal (an underrun)."""
        if seq != self._next or self._held or self._offset is None:
            return False
        return now > ts / self.rate + self._offset

    def _missing_timestamp(self) -> int:
        """The RTP time of the missing packet ``_next``, from the first later one held."""
        assert self._next is not None
        later = min(self._held)
        return self._held[later].timestamp - (later - self._next) * self._frame_ticks

    def _drop_oldest(self) -> None:
        """Over the cap: the oldest frame is dropped, and the timeline skips it (the next
        frame takes its turn), down to where base + target would put it."""
        oldest = min(self._held)
        del self._held[oldest]
        self.counts.overflow += 1
        if self._next is not None and oldest >= self._next:
            self._next = oldest + 1
        if self._offset is not None and self._transits:
            desired = min(self._transits) + self._target
            self._offset = max(desired, self._offset - self.frame)

    def _restart(self) -> list[Playout]:
        """A jump no jitter explains: what is held is played at once, the timeline restarts."""
        self.counts.resyncs += 1
        out = [
            Playout(seq & 0xFFFF, held.timestamp & 0xFFFFFFFF, held.payload)
            for seq, held in sorted(self._held.items())
        ]
        self.counts.played += len(out)
        self._held.clear()
        self._transits.clear()
        self._delays.clear()
        self._concealed.clear()
        self._next = self._top_seq = self._top_ts = None
        self._offset = self._target_at = self._offset_at = None
        return out
