"""Pre-encoded uplink audio: Opus packets from a source reach the server undecoded on our side.

aiortc's sender packs anything that is not a Frame, so the uplink passes ``av.Packet``s
through (issue 11, item 3). The staging server decodes what arrives: a tone encoded by the
source must come out at the server at the tone's level, through switches to and from PCM
sources and through mute.
"""

from __future__ import annotations

import fractions

import av
import pytest
from aiortc.mediastreams import MediaStreamTrack

from avatar_sdk import AvatarSession
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.rtc.asr import opus_packet_samples

from .conftest import FAST, until

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0)


class EncodedTone(MediaStreamTrack):
    """A paced tone, Opus-encoded here (mono, speech bitrate): yields ``av.Packet``s."""

    kind = "audio"

    def __init__(self, amplitude: float = 0.3) -> None:
        super().__init__()
        self._tone = ToneSource(440.0, amplitude)
        self._codec = av.CodecContext.create("libopus", "w")
        self._codec.sample_rate = 48_000
        self._codec.format = "s16"
        self._codec.layout = "mono"
        self._codec.time_base = fractions.Fraction(1, 48_000)
        self._codec.bit_rate = 32_000
        self.packets = 0

    async def recv(self) -> av.Packet:  # type: ignore[override]
        while True:
            frame = await self._tone.recv()
            packets = self._codec.encode(frame)  # type: ignore[attr-defined]
            if packets:
                self.packets += 1
                return packets[0]

    def stop(self) -> None:
        super().stop()
        self._tone.stop()


def _session(staging: StagingServer, audio: MediaStreamTrack) -> AvatarSession:
    return AvatarSession(
        staging.url, staging.token, allow_insecure_transport=True, audio=audio, config=MEDIA
    )


async def _heard(staging: StagingServer, sid: str, loud: bool, frames: int = 25) -> None:
    """Until ``frames`` more uplink frames decode at the server, the last ones loud or silent."""
    start = staging.media.asr_stats(sid).frames

    def done() -> bool:
        stats = staging.media.asr_stats(sid)
        level = stats.last_rms or 0.0
        return stats.frames - start >= frames and ((level > 0.05) if loud else level == 0.0)

    stats = staging.media.asr_stats
    assert await until(done, 8), (loud, stats(sid).last_rms, stats(sid).frames - start)


def test_opus_packet_samples_reads_the_toc() -> None:
    assert opus_packet_samples(bytes([15 << 3, 0])) == 960  # hybrid FB 20 ms, one frame
    assert opus_packet_samples(bytes([(31 << 3) | 1, 0])) == 1920  # CELT 20 ms, two frames
    assert opus_packet_samples(bytes([(0 << 3) | 3, 3])) == 1440  # SILK 10 ms, code 3 x3
    assert opus_packet_samples(bytes([16 << 3])) == 120  # CELT 2.5 ms
    assert opus_packet_samples(b"") is None


@pytest.mark.parametrize("first", ["encoded", "pcm"])
async def test_encoded_packets_reach_the_server_through_switches_and_mute(
    staging: StagingServer, first: str
) -> None:
    encoded = EncodedTone()
    pcm = ToneSource(660.0, 0.3)
    session = _session(staging, encoded if first == "encoded" else pcm)
    try:
        await session.connect()
        sid = staging.live_sids[0]
        await _heard(staging, sid, loud=True)
        if first == "pcm":
            await session.switch_audio(encoded)
            before = encoded.packets
            await _heard(staging, sid, loud=True)
            assert encoded.packets - before >= 20  # the tone heard is the encoded one
        session.mic_enabled = False  # mute while encoded: silence, still sent
        await _heard(staging, sid, loud=False)
        session.mic_enabled = True
        await _heard(staging, sid, loud=True)
        await session.switch_audio(pcm if first == "encoded" else ToneSource(550.0, 0.3))
        await _heard(staging, sid, loud=True)
        await session.switch_audio(None)
        await _heard(staging, sid, loud=False)
        await session.switch_audio(encoded)
        await _heard(staging, sid, loud=True)
        assert staging.media.asr_stats(sid).offers == 1  # never renegotiated
    finally:
        await session.close()
        encoded.stop()
        pcm.stop()
