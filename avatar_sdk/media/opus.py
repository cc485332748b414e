"""Opus without a round trip: packet lengths, pre-encoded silence and tone, the voice encoder.

Shared by the uplink (:mod:`avatar_sdk.transport.rtc.asr`), the pre-encoded sources
(:mod:`.encoded`) and the staging backend's voice. It imports nothing from the transport
layer, so the sources can use it without an import cycle.
"""

from __future__ import annotations

import fractions
import functools
import math
from typing import Any, Final

import av
import numpy as np

from ..errors import AvatarError, ErrorCode

__all__ = [
    "FRAME_SAMPLES",
    "OPUS_SILENCE",
    "SAMPLE_RATE",
    "VOICE_BITRATE",
    "VoiceEncoder",
    "check_tone",
    "encoded_tone",
    "opus_packet_samples",
    "opus_silence",
    "packet_samples",
    "tone_second",
]

SAMPLE_RATE: Final = 48_000
FRAME_SAMPLES: Final = 960  # 20 ms
TIME_BASE: Final = fractions.Fraction(1, SAMPLE_RATE)

#: Opus TOC config (bits 7..3) -> samples per frame at 48 kHz (RFC 6716 section 3.1).
_OPUS_FRAME_SAMPLES: Final = (
    (480, 960, 1920, 2880) * 3  # SILK NB/MB/WB: 10, 20, 40, 60 ms
    + (480, 960) * 2  # hybrid SWB/FB: 10, 20 ms
    + (120, 240, 480, 960) * 4  # CELT NB/WB/SWB/FB: 2.5, 5, 10, 20 ms
)

#: The encoder settings of a voice uplink: one channel, a speech bitrate.
VOICE_BITRATE: Final = 32_000

#: A 20 ms CELT frame with the silence flag (TOC 0xF8: fullband, 20 ms, one frame). Any
#: Opus decoder turns it into exact zeros at once, whatever it decoded before, where a
#: fresh encoder's silence leaves a -110 dBFS residue in a decoder fed by another encoder.
OPUS_SILENCE: Final = b"\xf8\xff\xfe"


def opus_packet_samples(packet: bytes) -> int | None:
    """Samples (48 kHz) one Opus packet holds, from its TOC byte; None when unreadable."""
    if not packet:
        return None
    toc = packet[0]
    per_frame = _OPUS_FRAME_SAMPLES[toc >> 3]
    code = toc & 3
    if code == 0:
        return per_frame
    if code in (1, 2):
        return 2 * per_frame
    if len(packet) < 2:
        return None
    return (packet[1] & 0x3F) * per_frame


def packet_samples(packet: av.Packet[Any]) -> int:
    """How far a packet moves an RTP clock: its duration, else its TOC, else 20 ms."""
    if packet.duration and packet.time_base:
        return int(packet.duration * packet.time_base * SAMPLE_RATE)
    return opus_packet_samples(bytes(packet)) or FRAME_SAMPLES


def opus_packet(
    payload: bytes, samples: int | None = None, pts: int | None = None
) -> av.Packet[Any]:
    """``payload`` as an ``av.Packet`` with its duration (default: read from the TOC).

    ``pts`` (48 kHz samples) matters to a bare aiortc sender, which takes the RTP
    timestamp from it; the SDK's uplink restamps every packet on its own timeline.
    """
    packet = av.Packet(payload)
    packet.duration = samples or opus_packet_samples(payload) or FRAME_SAMPLES
    packet.time_base = TIME_BASE
    if pts is not None:
        packet.pts = pts
    return packet


def opus_silence() -> av.Packet[Any]:
    """20 ms of pre-encoded silence: costs no encoding (mute on an encoded uplink)."""
    return opus_packet(OPUS_SILENCE, FRAME_SAMPLES)


class VoiceEncoder:
    """Opus for a voice: mono, ``application=voip``, :data:`VOICE_BITRATE`.

    aiortc's own encoder is stereo at 96 kb/s, twice the work for a microphone's one
    channel; this is what the uplink uses whenever it encodes on the event loop.
    """

    def __init__(self, bitrate: int = VOICE_BITRATE) -> None:
        self._codec: Any = av.CodecContext.create("libopus", "w")
        self._codec.sample_rate = SAMPLE_RATE
        self._codec.format = "s16"
        self._codec.layout = "mono"
        self._codec.time_base = TIME_BASE
        self._codec.bit_rate = bitrate
        self._codec.options = {"application": "voip"}
        self._resampler = av.AudioResampler(
            format="s16", layout="mono", rate=SAMPLE_RATE, frame_size=FRAME_SAMPLES
        )

    def encode(self, frame: av.AudioFrame) -> list[av.Packet[Any]]:
        """The packets ``frame`` completes (none while the resampler buffers)."""
        frame.pts = None  # the caller stamps the packets; the resampler must not check gaps
        packets: list[av.Packet[Any]] = []
        for chunk in self._resampler.resample(frame):
            chunk.pts = None
            packets.extend(self._codec.encode(chunk))
        return packets


@functools.lru_cache(maxsize=16)
def check_tone(frequency: float, amplitude: float) -> tuple[float, float]:
    """A tone source's arguments as floats, or ``AvatarError(invalid_argument)``: the
    frequency in (0, Nyquist) Hz, the amplitude in [0, 1] (full scale)."""
    if not (math.isfinite(frequency) and 0 < frequency < SAMPLE_RATE / 2):
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"frequency must be in (0, {SAMPLE_RATE // 2}) Hz"
        )
    if not (math.isfinite(amplitude) and 0.0 <= amplitude <= 1.0):
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, "amplitude must be in [0, 1]")
    return float(frequency), float(amplitude)


def tone_second(frequency: float, amplitude: float) -> bytes:
    """One second of a sine plus one frame (so any 20 ms slice is contiguous), s16 mono.

    Index ``i`` is sample ``i mod 48000``: an integer frequency loops seamlessly after one
    second. numpy once per (frequency, amplitude), not a ``math.sin`` per sample.
    """
    peak = amplitude * 32767
    index = np.arange(SAMPLE_RATE + FRAME_SAMPLES, dtype=np.int64) % SAMPLE_RATE
    samples = np.rint(peak * np.sin(2 * math.pi * frequency * index / SAMPLE_RATE))
    return samples.astype(np.int16).tobytes()


@functools.lru_cache(maxsize=16)
def encoded_tone(frequency: float, amplitude: float) -> tuple[bytes, ...]:
    """One second of the tone as 50 Opus packets of 20 ms (:class:`VoiceEncoder`), cached.

    Encoded once per process per (frequency, amplitude), a few milliseconds; a source that
    cycles through the result costs nothing per packet. The second lap of two is kept:
    its first packet was encoded right after the end of the first lap, so the cycle loops
    as a continuous stream would (for an integer frequency, which repeats every second).
    """
    pcm = tone_second(frequency, amplitude)
    encoder = VoiceEncoder()
    step = FRAME_SAMPLES * 2  # bytes per frame
    cycle: list[bytes] = []
    for lap in range(2):
        for n in range(SAMPLE_RATE // FRAME_SAMPLES):
            frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
            frame.planes[0].update(pcm[n * step : (n + 1) * step])
            frame.sample_rate = SAMPLE_RATE
            packets = encoder.encode(frame)
            if lap:
                cycle.extend(bytes(p) for p in packets)
    return tuple(cycle)
