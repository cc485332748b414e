"""One RTP timeline per ASR peer when the uplink mixes Opus packets and PCM frames.

aiortc stamps a frame it encodes at (frame pts - its first frame's pts) and a packet it
packs at the packet's own pts, so a peer must hand it packets on the same timeline, and
never a PCM frame once packets went out (its encoder would restart at 0, and its resampler
rejects the gap). These drive the relay directly, no network.
"""

from __future__ import annotations

import fractions
from typing import Any

import av
import numpy as np
from aiortc.mediastreams import MediaStreamTrack

from avatar_sdk.transport.rtc.asr import OPUS_SILENCE, UplinkTrack, _PeerTrack, opus_silence

RATE = 48_000


class _Script(MediaStreamTrack):
    """Yields PCM tone frames or Opus packets (from a real encoder), unpaced."""

    kind = "audio"

    def __init__(self, encoded: bool) -> None:
        super().__init__()
        self.encoded = encoded
        self._codec: Any = av.CodecContext.create("libopus", "w")
        self._codec.sample_rate = RATE
        self._codec.format = "s16"
        self._codec.layout = "mono"
        self._codec.time_base = fractions.Fraction(1, RATE)
        self._n = 0

    def _frame(self) -> av.AudioFrame:
        samples = (np.sin(np.arange(960) / 10) * 10000).astype(np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = 960 * self._n + 7  # the uplink restamps
        frame.time_base = fractions.Fraction(1, RATE)
        self._n += 1
        return frame

    async def recv(self) -> av.AudioFrame | av.Packet[Any]:  # type: ignore[override]
        if not self.encoded:
            return self._frame()
        while True:
            packets = self._codec.encode(self._frame())
            if packets:
                return packets[0]  # type: ignore[no-any-return]


async def _take(peer: _PeerTrack, n: int) -> list[av.AudioFrame | av.Packet[Any]]:
    return [await peer.recv() for _ in range(n)]


async def test_pcm_then_packets_then_pcm_and_mute_keep_one_timeline() -> None:
    pcm, enc = _Script(encoded=False), _Script(encoded=True)
    uplink = UplinkTrack(pcm)
    peer = _PeerTrack(uplink)
    first = await _take(peer, 3)
    assert all(isinstance(f, av.AudioFrame) for f in first)  # aiortc encodes these
    assert [f.pts for f in first] == [0, 960, 1920]
    uplink.switch(enc)
    packets = await _take(peer, 3)
    assert all(isinstance(p, av.Packet) for p in packets)
    assert [p.pts for p in packets] == [2880, 3840, 4800]  # continues the frames' timeline
    uplink.switch(pcm)  # PCM again: encoded by the peer itself, never handed to aiortc
    again = await _take(peer, 3)
    assert all(isinstance(p, av.Packet) and bytes(p) for p in again)
    assert [p.pts for p in again] == [5760, 6720, 7680]
    uplink.muted = True  # pre-encoded silence, no encoding
    muted = await _take(peer, 2)
    assert [bytes(p) for p in muted] == [OPUS_SILENCE, OPUS_SILENCE]
    assert [p.pts for p in muted] == [8640, 9600]
    uplink.muted = False
    uplink.switch(enc)
    back = await _take(peer, 1)
    assert isinstance(back[0], av.Packet) and back[0].pts == 10560
    assert bytes(back[0]) != OPUS_SILENCE
    uplink.stop()


async def test_a_later_peer_starts_its_timeline_at_its_first_packet() -> None:
    uplink = UplinkTrack(_Script(encoded=True))
    first = _PeerTrack(uplink)
    await _take(first, 5)  # the uplink's clock is now at 5 frames
    second = _PeerTrack(uplink)  # a cold reconnect's new peer
    got = await _take(second, 3)
    assert [p.pts for p in got] == [0, 960, 1920]
    uplink.stop()


async def test_muting_an_encoded_source_sends_encoded_silence_on_its_clock() -> None:
    uplink = UplinkTrack(_Script(encoded=True))
    peer = _PeerTrack(uplink)
    await _take(peer, 2)
    uplink.muted = True
    muted = await _take(peer, 2)
    assert [bytes(p) for p in muted] == [OPUS_SILENCE, OPUS_SILENCE]
    assert [p.pts for p in muted] == [1920, 2880]
    assert uplink.frames_sent == 4
    uplink.stop()


def test_opus_silence_is_a_fresh_20ms_packet_each_time() -> None:
    a, b = opus_silence(), opus_silence()
    assert a is not b and bytes(a) == bytes(b) == OPUS_SILENCE
    assert a.duration == 960 and a.time_base == fractions.Fraction(1, RATE)


async def test_encoding_on_the_loop_sends_packets_from_the_first_frame() -> None:
    """``audio_codec="loop"``: aiortc never gets a PCM frame, the timeline starts at 0 and
    runs on through a switch to an encoded source and back."""
    pcm, enc = _Script(encoded=False), _Script(encoded=True)
    uplink = UplinkTrack(pcm)
    peer = _PeerTrack(uplink, encode_on_loop=True)
    first = await _take(peer, 3)
    assert all(isinstance(p, av.Packet) and bytes(p) for p in first)
    assert [p.pts for p in first] == [0, 960, 1920]
    uplink.switch(enc)
    packets = await _take(peer, 2)
    assert [p.pts for p in packets] == [2880, 3840]
    uplink.switch(pcm)
    again = await _take(peer, 2)
    assert [p.pts for p in again] == [4800, 5760]
    assert peer.pcm_to_aiortc == 0
    uplink.stop()
