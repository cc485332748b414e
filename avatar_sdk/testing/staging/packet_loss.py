"""Lose chosen video RTP packets on one WHEP viewer's sender, and their resends.

Why: the network lab's random loss sometimes takes a packet and every retransmission of
it, which froze the client's video for seconds (aiortc's receiver waits for the missing
packet until 512 more have arrived). That case is rare at random and must be reproduced
at will, on loopback: :class:`VideoPacketLoss` drops the next ``count`` video packets the
sender sends and the first ``resends_lost`` retransmissions of each (None: every one, a
packet lost for good).

How: aiortc 1.16's ``RTCRtpSender`` sends each packet with ``await
self.transport._send_rtp(bytes)`` (its ``transport`` is the peer's shared DTLS transport)
and answers a NACK with ``await self._retransmit(seq)``; an instance attribute of either
name is called first. The filter reads the RTP header's SSRC (bytes 8-12) and sequence
number (bytes 2-4) and leaves every other stream (the voice, RTCP) alone. A resend goes
through ``_retransmit``, so it is told apart from a first send without parsing RTX.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["VideoPacketLoss"]


class VideoPacketLoss:
    """The packet loss of one video sender; :meth:`lose` arms it (installed once)."""

    def __init__(self, sender: Any) -> None:
        transport = sender.transport
        if transport is None or not callable(getattr(transport, "_send_rtp", None)):
            raise RuntimeError("aiortc RTCRtpSender internals changed: no transport._send_rtp")
        self._ssrc = int(sender._ssrc)
        self._send: Callable[[bytes], Awaitable[None]] = transport._send_rtp
        self._retransmit: Callable[[int], Awaitable[None]] = sender._retransmit
        self._to_lose = 0
        self._resends_lost: int | None = 0
        #: Sequence numbers lost, with how many more of their resends are to be lost
        #: (None: all of them).
        self.lost: dict[int, int | None] = {}
        self.resends_dropped = 0
        self.resends_sent = 0
        self._resending = False
        transport._send_rtp = self._filtered_send
        sender._retransmit = self._filtered_retransmit

    def lose(self, count: int, *, resends_lost: int | None) -> None:
        """Drop the next ``count`` video packets and the first ``resends_lost`` resends of
        each (None: every resend)."""
        self._to_lose += max(0, count)
        self._resends_lost = resends_lost

    async def _filtered_send(self, data: bytes) -> None:
        if self._to_lose and not self._resending and len(data) >= 12:
            (seq,) = struct.unpack_from("!H", data, 2)
            (ssrc,) = struct.unpack_from("!I", data, 8)
            if ssrc == self._ssrc:
                self._to_lose -= 1
                self.lost[seq] = self._resends_lost
                return
        await self._send(data)

    async def _filtered_retransmit(self, sequence_number: int) -> None:
        if sequence_number in self.lost:
            left = self.lost[sequence_number]
            if left is None or left > 0:
                self.lost[sequence_number] = None if left is None else left - 1
                self.resends_dropped += 1
                return
            self.resends_sent += 1
        self._resending = True
        try:
            await self._retransmit(sequence_number)
        finally:
            self._resending = False
