"""Pre-encoded uplink sources for the ``load`` figure: Opus packets paced every 20 ms.

The SDK's uplink and aiortc's sender both pass an ``av.Packet`` through without encoding
it (aiortc packs anything that is not a ``Frame``), so a session fed by these costs no
Opus encode on the client. A public ``EncodedSilenceSource`` / ``OpusFileSource`` is being
added to :mod:`avatar_sdk.media` (issue 11); these stay benchmark-local until then, and are
what the SDK probe and the bare aiortc probe of the "encoded" mode both send.

Each packet carries its own ``pts`` (48 kHz samples) and ``time_base`` because the bare
aiortc sender reads the RTP timestamp from them; the SDK's uplink restamps them anyway.
"""

from __future__ import annotations

import asyncio
import fractions
import functools
import time
from typing import Any

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from avatar_sdk.media import FRAME_SAMPLES, SAMPLE_RATE, ToneSource
from avatar_sdk.transport.asr import VOICE_BITRATE, opus_silence

TIME_BASE = fractions.Fraction(1, SAMPLE_RATE)
FRAME_SECONDS = FRAME_SAMPLES / SAMPLE_RATE
#: Seconds of tone encoded once and then looped (440 Hz repeats exactly every 1/40 s).
TONE_LOOP = 1.0


@functools.lru_cache(maxsize=4)
def encoded_tone(seconds: float = TONE_LOOP, amplitude: float = 0.3) -> tuple[bytes, ...]:
    """``seconds`` of a 440 Hz tone as 20 ms Opus packets (mono, voice bitrate), encoded
    once per process: the loop costs nothing per packet afterwards."""
    codec: Any = av.CodecContext.create("libopus", "w")
    codec.sample_rate = SAMPLE_RATE
    codec.format = "s16"
    codec.layout = "mono"
    codec.time_base = TIME_BASE
    codec.bit_rate = VOICE_BITRATE
    codec.options = {"application": "voip"}
    tone = ToneSource(440.0, amplitude)
    packets: list[bytes] = []
    frames = round(seconds / FRAME_SECONDS)
    for index in range(frames):
        payload = tone._payload()  # the tone's samples, without its real-time pacing
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(payload)
        frame.sample_rate = SAMPLE_RATE
        frame.pts = index * FRAME_SAMPLES
        frame.time_base = TIME_BASE
        packets.extend(bytes(p) for p in codec.encode(frame))
    packets.extend(bytes(p) for p in codec.encode(None))
    tone.stop()
    return tuple(packets[:frames])


class EncodedSource(MediaStreamTrack):
    """A paced stream of pre-encoded 20 ms Opus packets (``tone=False``: encoded silence)."""

    kind = "audio"

    def __init__(self, *, tone: bool = True) -> None:
        super().__init__()
        self._packets = encoded_tone() if tone else None
        self._index = 0
        self._anchor: float | None = None
        self.sent = 0

    async def recv(self) -> av.Packet[Any]:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._anchor is None:
            self._anchor = now
        due = self._anchor + self.sent * FRAME_SECONDS
        if due > now:
            await asyncio.sleep(due - now)
        elif now - due > 0.2:  # far behind (a stalled loop): re-anchor, never burst
            self._anchor = now - self.sent * FRAME_SECONDS
        if self._packets is None:
            packet = opus_silence()
        else:
            packet = av.Packet(self._packets[self._index])
            self._index = (self._index + 1) % len(self._packets)
        packet.pts = self.sent * FRAME_SAMPLES
        packet.duration = FRAME_SAMPLES
        packet.time_base = TIME_BASE
        self.sent += 1
        return packet
