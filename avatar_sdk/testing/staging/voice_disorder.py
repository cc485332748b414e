"""Lose or reorder chosen voice RTP packets on one WHEP viewer's audio sender.

Why: the client's voice receive buffer (:mod:`avatar_sdk.transport.rtc.core.voice_buffer`) conceals
a lost packet and puts a reordered one in place; on loopback neither happens by itself.
:class:`VoiceDisorder` makes them at will: :meth:`~VoiceDisorder.lose` drops the next
voice packets, :meth:`~VoiceDisorder.swap` holds the next one back and sends it right
after the one that follows it.

How, as :mod:`.packet_loss` does for the video: aiortc 1.16's ``RTCRtpSender`` sends
each packet with ``await self.transport._send_rtp(bytes)`` (the peer's shared DTLS
transport); an instance attribute of that name is called first. The filter reads the RTP
header's SSRC (bytes 8-12) and leaves every other stream (the video, RTCP) alone. Voice
packets are never retransmitted (no NACK for audio), so a dropped one is lost for good.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["VoiceDisorder", "disorder_voice"]


class VoiceDisorder:
    """The voice disorder of one audio sender; :meth:`lose` and :meth:`swap` arm it."""

    def __init__(self, sender: Any) -> None:
        transport = sender.transport
        if transport is None or not callable(getattr(transport, "_send_rtp", None)):
            raise RuntimeError("aiortc RTCRtpSender internals changed: no transport._send_rtp")
        self._ssrc = int(sender._ssrc)
        self._send: Callable[[bytes], Awaitable[None]] = transport._send_rtp
        self._to_lose = 0
        self._to_swap = 0
        self._held: bytes | None = None
        #: Sequence numbers dropped, and those sent after their successor.
        self.lost: list[int] = []
        self.swapped: list[int] = []
        transport._send_rtp = self._filtered_send

    @property
    def pending(self) -> int:
        """Packets armed to be lost or swapped and not yet sent (or held back)."""
        return self._to_lose + self._to_swap + (self._held is not None)

    def lose(self, count: int = 1) -> None:
        """Drop the next ``count`` voice packets."""
        self._to_lose += max(0, count)

    def swap(self, count: int = 1) -> None:
        """The next ``count`` voice packets (one at a time) each go out after the next one."""
        self._to_swap += max(0, count)

    async def _filtered_send(self, data: bytes) -> None:
        if len(data) < 12 or struct.unpack_from("!I", data, 8)[0] != self._ssrc:
            await self._send(data)
            return
        (seq,) = struct.unpack_from("!H", data, 2)
        if self._held is not None:
            held, self._held = self._held, None
            await self._send(data)
            await self._send(held)
            return
        if self._to_lose:
            self._to_lose -= 1
            self.lost.append(seq)
            return
        if self._to_swap:
            self._to_swap -= 1
            self.swapped.append(seq)
            self._held = data
            return
        await self._send(data)


def disorder_voice(pc: Any) -> VoiceDisorder:
    """Install a :class:`VoiceDisorder` on the audio sender of the staging peer ``pc``
    (a WHEP viewer's, ``staging.media.viewers[...].pc``)."""
    sender = next((t.sender for t in pc.getTransceivers() if t.kind == "audio"), None)
    if sender is None:
        raise RuntimeError("this peer sends no voice")
    return VoiceDisorder(sender)
