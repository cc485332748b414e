"""transport/rtc/aiortc_patches/voice_buffer.py: the adaptive voice buffer in aiortc's audio
receiver.

The receiver's private objects are aiortc's own (timestamp mapper, Opus decoder), the
clock a :class:`FakeClock`; a real receiver is inspected for the names the patch uses, and
one without them is refused loudly."""

from __future__ import annotations

import fractions
from typing import Any

import numpy as np
import pytest
from aiortc import RTCPeerConnection
from aiortc.codecs import get_decoder
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from aiortc.rtcrtpreceiver import RTCRtpReceiver, TimestampMapper
from aiortc.rtp import RtpPacket
from av import AudioFrame, CodecContext

from avatar_sdk.clock import FakeClock
from avatar_sdk.transport.rtc.aiortc_patches import voice_buffer as voice_buffer_patch
from avatar_sdk.transport.rtc.aiortc_patches.voice_buffer import buffer_voice, concealment_packet

OPUS = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48000, channels=2, payloadType=111)


def _tone_packets(count: int) -> list[bytes]:
    encoder: Any = CodecContext.create("libopus", "w")
    encoder.bit_rate = 64000
    encoder.format = "s16"
    encoder.layout = "stereo"
    encoder.sample_rate = 48000
    encoder.time_base = fractions.Fraction(1, 48000)
    packets: list[bytes] = []
    for n in range(count):
        t = np.arange(960) + n * 960
        mono = (np.sin(2 * np.pi * 440 * t / 48000) * 8000).astype(np.int16)
        stereo = np.repeat(mono, 2).reshape(1, -1)
        frame = AudioFrame.from_ndarray(stereo, format="s16", layout="stereo")
        frame.sample_rate = 48000
        frame.pts = n * 960
        frame.time_base = fractions.Fraction(1, 48000)
        packets += [bytes(p) for p in encoder.encode(frame)]
    return packets


class _Receiver:
    """The receiver's attributes the patch reads and replaces (aiortc's own objects)."""

    def __init__(self) -> None:
        self._RTCRtpReceiver__jitter_buffer = JitterBuffer(capacity=16, prefetch=4)
        self._RTCRtpReceiver__decoder_queue = self
        self._RTCRtpReceiver__decoder_thread = True
        self._RTCRtpReceiver__timestamp_mapper = TimestampMapper()
        self._RTCRtpReceiver__codecs = {111: OPUS}
        self.decoder = get_decoder(OPUS)
        self.levels: list[tuple[int, int, int]] = []  # (pts, samples, peak) per decoded frame
        self.sizes: list[int] = []

    def put(self, task: tuple[Any, Any]) -> None:  # the decoder queue
        _, encoded = task
        self.sizes.append(len(encoded.data))
        for frame in self.decoder.decode(encoded):
            self.levels.append((frame.pts, frame.samples, int(np.abs(frame.to_ndarray()).max())))


async def test_frames_reach_the_decoder_one_frame_after_arrival_and_a_loss_is_concealed() -> None:
    clock = FakeClock()
    receiver = _Receiver()
    buffer = buffer_voice(receiver, clock=clock)  # type: ignore[arg-type]
    jitter: Any = receiver._RTCRtpReceiver__jitter_buffer
    assert jitter is buffer
    payloads = _tone_packets(30)
    for n, payload in enumerate(payloads):
        if n == 12:
            await clock.advance(0.02)
            continue  # lost
        packet = RtpPacket(payload_type=111, sequence_number=n + 500, timestamp=n * 960 + 7)
        packet._data = payload  # type: ignore[attr-defined]  # what depayload sets
        assert jitter.add(packet) == (False, None)
        decoded_before = len(receiver.levels)
        await clock.advance(0.0199)
        assert len(receiver.levels) == decoded_before  # held one frame
        await clock.advance(0.0001)
    await clock.advance(0.1)
    assert [pts for pts, _, _ in receiver.levels] == [n * 960 for n in range(30)]
    assert all(samples == 960 for _, samples, _ in receiver.levels)
    assert receiver.sizes[12] == 1  # the concealment packet: a TOC byte
    assert receiver.levels[12][2] > 1000  # libopus PLC continues the tone, no silence
    counts = buffer.counts
    assert (counts.concealed, counts.played, counts.late) == (1, 29, 0)
    assert counts.target_delay == 0.02


async def test_nothing_is_handed_on_once_the_receiver_stopped() -> None:
    clock = FakeClock()
    receiver = _Receiver()
    buffer = buffer_voice(receiver, clock=clock)  # type: ignore[arg-type]
    packet = RtpPacket(payload_type=111, sequence_number=1, timestamp=0)
    packet._data = _tone_packets(1)[0]  # type: ignore[attr-defined]
    buffer.add(packet)
    receiver._RTCRtpReceiver__decoder_thread = None  # what __stop_decoder leaves
    await clock.advance(0.1)
    assert receiver.levels == []
    assert clock.sleepers == 0


def test_the_concealment_packet_is_a_toc_byte_with_code_zero() -> None:
    assert concealment_packet(bytes([0xFF, 1, 2])) == bytes([0xFC])
    assert concealment_packet(b"") is None


async def test_a_real_audio_receiver_has_what_the_patch_replaces() -> None:
    pc = RTCPeerConnection()
    try:
        receiver = pc.addTransceiver("audio", direction="recvonly").receiver
        buffer = buffer_voice(receiver, clock=FakeClock())
        assert getattr(receiver, voice_buffer_patch._JITTER) is buffer
        video = pc.addTransceiver("video", direction="recvonly").receiver
        with pytest.raises(RuntimeError, match="internals changed"):
            buffer_voice(video, clock=FakeClock())  # the video's buffer is not the voice's
    finally:
        await pc.close()


def test_a_receiver_without_those_internals_is_refused() -> None:
    with pytest.raises(RuntimeError, match="internals changed"):
        buffer_voice(object(), clock=FakeClock())  # type: ignore[arg-type]
    bare = RTCRtpReceiver.__new__(RTCRtpReceiver)
    with pytest.raises(RuntimeError, match="internals changed"):
        buffer_voice(bare, clock=FakeClock())
