"""Jitter, reorder and loss on one WHEP viewer's voice: the staging's voice-path faults.

Why: the client's voice receive buffer (:mod:`avatar_sdk.transport.rtc.core.voice_buffer`)
holds packets as long as the jitter it sees requires, puts a reordered one in place and
conceals a lost one; on loopback none of that happens by itself. :class:`VoiceFaults`
makes it happen on the staging's own audio sender, over real WebRTC, per viewer:

* **loss**: a packet is dropped (the next ``count`` ones, and/or each with probability
  ``rate``). Voice packets are never retransmitted (no NACK for audio): lost for good.
* **reorder**: a packet is held back and sent right after the one that follows it.
* **jitter**: each packet is sent a delay drawn for it alone, uniform in
  ``[0, seconds]``; packets whose delays differ by more than a frame arrive out of order,
  as on a real path.

Applied in that order (a packet lost is neither reordered nor delayed). Each random
choice draws from its own ``random.Random`` seeded with the fault's seed, so the same
seed makes the same decisions packet after packet, whatever the other faults do.

How, as :mod:`.packet_loss` does for the video: aiortc 1.16's ``RTCRtpSender`` sends each
packet with ``await self.transport._send_rtp(bytes)`` (the peer's shared DTLS transport);
an instance attribute of that name is called first. The filter reads the RTP header's
SSRC (bytes 8-12) and leaves every other stream (the video, RTCP) alone.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ...besteffort import best_effort
from ...logs import sdk_logger

log = sdk_logger(__name__)

__all__ = [
    "MAX_JITTER",
    "VoiceFaultSettings",
    "VoiceFaults",
    "check_jitter",
    "check_rate",
    "install_voice_faults",
]

#: The largest jitter a fault may draw (s): beyond it the voice buffer gives up waiting
#: (its own cap is 0.5 s) and the fault would only test concealment.
MAX_JITTER = 1.0


def check_rate(rate: float) -> float:
    """``rate`` as a probability, or ValueError (a 400 over the control API)."""
    rate = float(rate)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be within [0, 1], got {rate}")
    return rate


def check_jitter(seconds: float) -> float:
    """``seconds`` as a jitter bound, or ValueError."""
    seconds = float(seconds)
    if not 0.0 <= seconds <= MAX_JITTER:
        raise ValueError(f"jitter must be within [0, {MAX_JITTER}] s, got {seconds}")
    return seconds


@dataclass(slots=True)
class VoiceFaultSettings:
    """The lasting part of a session's voice faults (rates and jitter, with their seeds):
    what a viewer subscribing later is given too."""

    loss_rate: float = 0.0
    loss_seed: int = 0
    reorder_rate: float = 0.0
    reorder_seed: int = 0
    jitter: float = 0.0
    jitter_seed: int = 0

    def apply(self, faults: VoiceFaults) -> None:
        """Give ``faults`` these settings (their random draws start again from the seeds)."""
        faults.lose(rate=self.loss_rate, seed=self.loss_seed)
        faults.reorder(rate=self.reorder_rate, seed=self.reorder_seed)
        faults.jitter(self.jitter, seed=self.jitter_seed)


class VoiceFaults:
    """The voice faults of one audio sender; :meth:`lose`, :meth:`reorder` and
    :meth:`jitter` arm them, :meth:`clear` disarms them (installed once, for good)."""

    def __init__(self, sender: Any) -> None:
        transport = sender.transport
        if transport is None or not callable(getattr(transport, "_send_rtp", None)):
            raise RuntimeError("aiortc RTCRtpSender internals changed: no transport._send_rtp")
        self._ssrc = int(sender._ssrc)
        self._send: Callable[[bytes], Awaitable[None]] = transport._send_rtp
        self._lose_next = 0
        self._loss_rate = 0.0
        self._loss_rng = random.Random(0)
        self._swap_next = 0
        self._reorder_rate = 0.0
        self._reorder_rng = random.Random(0)
        self._jitter = 0.0
        self._jitter_rng = random.Random(0)
        self._held: bytes | None = None
        self._timers: set[asyncio.TimerHandle] = set()
        self._sending: set[asyncio.Task[None]] = set()
        self._closed = False
        #: Voice packets seen; sequence numbers dropped, and when (``time.monotonic()``);
        #: those sent after their successor; the delays the jitter drew (s).
        self.packets = 0
        self.lost: list[int] = []
        self.lost_at: list[float] = []
        self.swapped: list[int] = []
        self.delays: list[float] = []
        transport._send_rtp = self._filtered_send

    @property
    def pending(self) -> int:
        """Packets armed to be lost or swapped and not yet sent, held back, or in flight."""
        held = self._held is not None
        return self._lose_next + self._swap_next + held + len(self._timers) + len(self._sending)

    def lose(self, count: int = 0, *, rate: float = 0.0, seed: int = 0) -> None:
        """Drop the next ``count`` voice packets, and from then on each with probability
        ``rate`` (drawn from ``random.Random(seed)``)."""
        self._lose_next += max(0, int(count))
        self._loss_rate = check_rate(rate)
        self._loss_rng = random.Random(f"loss:{seed}")

    def reorder(self, count: int = 0, *, rate: float = 0.0, seed: int = 0) -> None:
        """The next ``count`` voice packets (one at a time), and from then on each with
        probability ``rate``, go out right after the packet that follows them."""
        self._swap_next += max(0, int(count))
        self._reorder_rate = check_rate(rate)
        self._reorder_rng = random.Random(f"reorder:{seed}")

    def jitter(self, seconds: float, *, seed: int = 0) -> None:
        """Delay each voice packet from now on by its own draw, uniform in [0, ``seconds``]."""
        self._jitter = check_jitter(seconds)
        self._jitter_rng = random.Random(f"jitter:{seed}")

    def clear(self) -> None:
        """No more faults; a packet held back goes out with the next one, those delayed
        already go out at their time."""
        self._lose_next = self._swap_next = 0
        self._loss_rate = self._reorder_rate = self._jitter = 0.0

    def close(self) -> None:
        """Forget the packets still delayed (the peer is closing)."""
        self._closed = True
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        for task in self._sending:
            task.cancel()

    async def _filtered_send(self, data: bytes) -> None:
        if len(data) < 12 or struct.unpack_from("!I", data, 8)[0] != self._ssrc:
            await self._send(data)
            return
        self.packets += 1
        (seq,) = struct.unpack_from("!H", data, 2)
        if self._lose_next or (self._loss_rate and self._loss_rng.random() < self._loss_rate):
            self._lose_next = max(0, self._lose_next - 1)
            self.lost.append(seq)
            self.lost_at.append(time.monotonic())
            return
        if self._held is not None:
            held, self._held = self._held, None
            await self._delayed(data)
            await self._delayed(held)
            return
        swap = self._swap_next or (
            self._reorder_rate and self._reorder_rng.random() < self._reorder_rate
        )
        if swap:
            self._swap_next = max(0, self._swap_next - 1)
            self.swapped.append(seq)
            self._held = data
            return
        await self._delayed(data)

    async def _delayed(self, data: bytes) -> None:
        delay = self._jitter_rng.uniform(0.0, self._jitter) if self._jitter else 0.0
        if delay <= 0.0 or self._closed:
            await self._send(data)
            return
        self.delays.append(delay)
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle

        def launch() -> None:
            self._timers.discard(timer)
            if self._closed:
                return
            task = loop.create_task(self._send_late(data))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

        timer = loop.call_later(delay, launch)
        self._timers.add(timer)

    async def _send_late(self, data: bytes) -> None:
        # The peer may have closed meanwhile (aiortc raises ConnectionError): that packet
        # is lost, as it would be on a path that went down.
        with best_effort("sending a delayed voice packet", log):
            await self._send(data)


def install_voice_faults(pc: Any) -> VoiceFaults | None:
    """Install :class:`VoiceFaults` on the audio sender of the staging peer ``pc`` (a WHEP
    viewer's); None when it sends no voice or has no transport yet."""
    sender = next((t.sender for t in pc.getTransceivers() if t.kind == "audio"), None)
    if sender is None or sender.transport is None:
        return None
    return VoiceFaults(sender)
