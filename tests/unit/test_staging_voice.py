"""The staging avatar's voice is Opus encoded once per process, not per frame per viewer."""

from __future__ import annotations

import asyncio
import itertools
import math
import time

import av

from avatar_sdk.clock import FakeClock
from avatar_sdk.media.levels import frame_rms
from avatar_sdk.media.opus import OPUS_SILENCE
from avatar_sdk.testing.synthetic import AUDIO_FRAME, AUDIO_RATE, MediaGate, OpusToneTrack

PERIOD = AUDIO_FRAME / AUDIO_RATE


async def _paced(track: OpusToneTrack, clock: FakeClock) -> av.Packet:
    """The track's next packet, its slot reached on ``clock`` exactly (no real lateness: a
    loaded machine's late wake-up would jump the voice's timeline, a real server's rule)."""
    packet = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0)
    while not packet.done():
        await clock.advance(PERIOD)
    return await packet


def _decode(payloads: list[bytes]) -> list[av.AudioFrame]:
    codec = av.CodecContext.create("libopus", "r")
    codec.sample_rate = 48_000
    frames: list[av.AudioFrame] = []
    for payload in payloads:
        frames.extend(codec.decode(av.Packet(payload)))  # type: ignore[arg-type]
    return frames


async def test_the_voice_is_a_shared_precomputed_cycle_at_the_tone_level() -> None:
    speaking = True
    clock = FakeClock()
    first = OpusToneTrack(active=lambda: speaking, clock=clock)
    second = OpusToneTrack(active=lambda: speaking)
    try:
        assert first._cycle is second._cycle  # encoded once, shared by every viewer
        assert len(first._cycle) == 50  # one second of 20 ms packets
        loud = [await _paced(first, clock) for _ in range(60)]  # past the end of the cycle
        speaking = False
        quiet = [await _paced(first, clock) for _ in range(3)]
    finally:
        first.stop()
        second.stop()
    pts = [p.pts for p in loud + quiet]
    assert all(b - a == AUDIO_FRAME for a, b in itertools.pairwise(pts))  # no slot jumped
    assert {bytes(p) for p in quiet} == {OPUS_SILENCE}
    assert first.tone_frames == 60 and first.frames_sent == 63
    frames = _decode([bytes(p) for p in loud + quiet])
    levels = [frame_rms(f) for f in frames]
    tone = 0.3 / math.sqrt(2)
    # Steady at the tone's level across the cycle's wrap (no glitch), then exact zeros.
    assert all(abs(level - tone) < 0.03 for level in levels[5:60]), levels[:60]
    assert levels[-3] < tone / 2  # the decoder's fade-out of the last tone frame
    assert levels[-2:] == [0.0, 0.0]


async def test_a_stalled_gate_blocks_the_voice() -> None:
    gate = MediaGate()
    track = OpusToneTrack(gate=gate)
    try:
        await track.recv()
        gate.stall()
        resumed: list[float] = []

        def resume() -> None:
            resumed.append(time.monotonic())
            gate.resume()

        asyncio.get_running_loop().call_later(0.1, resume)
        packet = await asyncio.wait_for(track.recv(), 2)
        assert resumed and time.monotonic() >= resumed[0]  # no packet (no RTP) until resumed
        assert packet.pts is not None and packet.pts >= AUDIO_FRAME
    finally:
        track.stop()
