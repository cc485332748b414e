"""Put the adaptive voice buffer (:mod:`.voice_buffer`) in aiortc's audio receiver.

Why: aiortc 1.16's audio ``JitterBuffer(capacity=16, prefetch=4)`` holds every voice
frame until four more are queued behind it, 80 ms on loopback (issue 30).

How: the receiver calls its private ``_RTCRtpReceiver__jitter_buffer.add(packet)`` (after
setting ``packet._data``) and decodes the frame it returns, if any. :class:`VoiceReceiveBuffer`
stands in for it: ``add`` feeds the rule and always returns no frame; the frames whose turn
has come (now, or at a timer on the session clock) are put where the receiver would have
put them, ``_RTCRtpReceiver__decoder_queue.put((codec, JitterFrame))`` (aiortc's thread or
the loop decoder, :mod:`.loop_decode`), their timestamps mapped by the receiver's own
``_RTCRtpReceiver__timestamp_mapper``; nothing is put once ``__decoder_thread`` is None
(the receiver stopped). A missing Opus packet is decoded as Opus packet-loss concealment:
a one-byte packet (the last packet's TOC byte, code 0: one frame of zero bytes), which
libopus decodes with its PLC, through the same decoder (PyAV cannot pass libopus a
NULL packet: an empty one ends the stream). In-band FEC is not used: FFmpeg's libopus
decoder cannot decode a packet's LBRR data, and the avatar's sender does not send it.

:func:`buffer_voice` raises ``RuntimeError`` on a receiver that does not look like 1.16's
audio receiver; ``tests/unit/test_voice_buffer_patch.py`` fails if those names move.
"""

from __future__ import annotations

from typing import Any

from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtcrtpreceiver import RTCRtpReceiver, TimestampMapper
from aiortc.rtp import RtpPacket

from ....clock import Clock, Timer
from ....logs import sdk_logger
from ..core.voice_buffer import Playout, VoiceBuffer, VoiceBufferCounts

__all__ = ["VoiceReceiveBuffer", "buffer_voice", "concealment_packet"]

log = sdk_logger(__name__)

_JITTER = "_RTCRtpReceiver__jitter_buffer"
_QUEUE = "_RTCRtpReceiver__decoder_queue"
_THREAD = "_RTCRtpReceiver__decoder_thread"
_MAPPER = "_RTCRtpReceiver__timestamp_mapper"
_CODECS = "_RTCRtpReceiver__codecs"


def concealment_packet(last: bytes) -> bytes | None:
    """The Opus packet libopus conceals one frame for: ``last``'s TOC byte with frame
    count code 0 and no frame data (RFC 6716 3.1; a frame of 0 bytes is decoded by PLC)."""
    return bytes([last[0] & 0xFC]) if last else None


class VoiceReceiveBuffer:
    """Stands in for an audio receiver's JitterBuffer: the same ``add``, timed output."""

    def __init__(
        self,
        receiver: RTCRtpReceiver,
        *,
        clock: Clock,
        counts: VoiceBufferCounts | None = None,
    ) -> None:
        self._receiver = receiver
        self._clock = clock
        self.rule = VoiceBuffer(counts=counts)
        self._timer: Timer | None = None
        self._codec: Any = None
        self._last_payload = b""
        self._closed = False

    @property
    def capacity(self) -> int:
        return 16  # what aiortc's audio buffer had; read by nobody for audio

    @property
    def counts(self) -> VoiceBufferCounts:
        return self.rule.counts

    # Called on the loop by RTCRtpReceiver._handle_rtp_packet.
    def add(self, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
        codecs: dict[int, Any] = getattr(self._receiver, _CODECS)
        self._codec = codecs.get(packet.payload_type, self._codec)
        data: bytes = getattr(packet, "_data", packet.payload)
        now = self._clock.monotonic()
        self._deliver(self.rule.push(now, packet.sequence_number, packet.timestamp, data))
        return False, None

    def close(self) -> None:
        """Stop the timer; nothing more is handed on."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _poll(self) -> None:
        self._timer = None
        self._deliver(self.rule.poll(self._clock.monotonic()))

    def _deliver(self, out: list[Playout]) -> None:
        if self._closed or not getattr(self._receiver, _THREAD, None):
            self.close()  # the receiver stopped: its decoder takes nothing more
            return
        if out and self._codec is not None:
            decoder = getattr(self._receiver, _QUEUE)
            mapper: TimestampMapper = getattr(self._receiver, _MAPPER)
            for frame in out:
                data = frame.payload
                if data is None:
                    if self._codec.name.lower() != "opus":
                        continue  # no concealment for other codecs: the frame is skipped
                    data = concealment_packet(self._last_payload)
                    if data is None:
                        continue
                else:
                    self._last_payload = data
                jitter_frame = JitterFrame(data=data, timestamp=mapper.map(frame.timestamp))
                decoder.put((self._codec, jitter_frame))
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        due = self.rule.next_due()
        if due is not None:
            self._timer = self._clock.call_later(due - self._clock.monotonic(), self._poll)


def buffer_voice(
    receiver: RTCRtpReceiver, *, clock: Clock, counts: VoiceBufferCounts | None = None
) -> VoiceReceiveBuffer:
    """Replace an audio ``receiver``'s jitter buffer with the adaptive one (before it
    receives). ``counts``: where it counts (shared by a session's subscriptions).

    :raises RuntimeError: aiortc's internals are not the ones this was written for.
    """
    current = getattr(receiver, _JITTER, None)
    if (
        not isinstance(current, JitterBuffer)
        or current._is_video
        or not hasattr(receiver, _QUEUE)
        or not hasattr(receiver, _THREAD)
        or not isinstance(getattr(receiver, _MAPPER, None), TimestampMapper)
        or not isinstance(getattr(receiver, _CODECS, None), dict)
    ):
        raise RuntimeError("aiortc RTCRtpReceiver internals changed: cannot buffer the voice")
    buffer = VoiceReceiveBuffer(receiver, clock=clock, counts=counts)
    setattr(receiver, _JITTER, buffer)
    return buffer
