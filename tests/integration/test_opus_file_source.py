"""Pre-encoded sources: ``OpusFileSource`` (Ogg/Opus, never decoded) and ``EncodedSilenceSource``.

The Ogg/Opus fixtures are encoded at test time with PyAV (no binary in the repository).
Through a real session against the staging server, whose ASR peer decodes what arrives:
the file's tone is heard at its level, mute gives digital silence, switching to a PCM
source and back is heard both ways, and the end of the file leaves silence flowing.
"""

from __future__ import annotations

import asyncio
import fractions
import math
import time
from pathlib import Path

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from avatar_sdk import AvatarError, AvatarSession, ErrorCode
from avatar_sdk.media import EncodedSilenceSource, OpusFileSource, ToneSource, file_source
from avatar_sdk.media.opus import OPUS_SILENCE
from avatar_sdk.testing import StagingServer

from .conftest import FAST, until

MEDIA = FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0)
RATE = 48_000
#: The file's tone (RMS ~0.21 after Opus) and the PCM tone (RMS ~0.42) are told apart by level.
FILE_LEVEL = (0.1, 0.3)
PCM_LEVEL = (0.33, 0.5)


def write_tone(
    path: Path, seconds: float, *, amplitude: float = 0.3, codec: str = "libopus",
    frequency: float = 440.0,
) -> Path:  # fmt: skip
    """A mono sine encoded with ``codec`` into ``path`` (container from the suffix)."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=RATE, layout="mono")
        frames = int(seconds * RATE / 960)
        for n in range(frames):
            t = np.arange(960 * n, 960 * (n + 1))
            wave = amplitude * 32767 * np.sin(2 * math.pi * frequency * t / RATE)
            frame = av.AudioFrame.from_ndarray(
                wave.astype(np.int16).reshape(1, -1), format="s16", layout="mono"
            )
            frame.sample_rate, frame.pts = RATE, 960 * n
            frame.time_base = fractions.Fraction(1, RATE)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


async def take(track: MediaStreamTrack, count: int) -> list[av.Packet]:
    packets = []
    for _ in range(count):
        packet = await asyncio.wait_for(track.recv(), 2)
        assert isinstance(packet, av.Packet)
        packets.append(packet)
    return packets


# --------------------------------------------------------------------------- the sources alone


async def test_opus_file_packets_are_paced_and_never_decoded(tmp_path: Path) -> None:
    path = write_tone(tmp_path / "tone.opus", 1.0)
    with av.open(str(path)) as probe:
        stream = probe.streams.audio[0]
        want = [bytes(p) for p in probe.demux(stream) if p.size]
    source = OpusFileSource(path)
    try:
        started = time.monotonic()
        packets = await take(source, 11)
        elapsed = time.monotonic() - started
        assert [bytes(p) for p in packets] == want[:11]  # the file's packets, byte for byte
        assert all(
            p.duration == 960 and p.time_base == fractions.Fraction(1, RATE) for p in packets
        )
        assert [p.pts for p in packets] == [960 * i for i in range(11)]  # 20 ms of media time
        # No-pacing guard, one-sided: ten 20 ms intervals from a start on the 20 ms grid at
        # most one interval before ours cannot pass in less real time than nine (a busy
        # machine only makes it longer); an unpaced file is read out in ~0 s. The schedule
        # itself is pinned on a FakeClock (tests/unit/test_source_pacing.py).
        assert elapsed >= 0.9 * 9 * 0.02
        await take(source, len(want) - 11)
        with pytest.raises(MediaStreamError):
            await source.recv()  # end of file
        assert source.readyState == "ended" and source._container is None  # released
    finally:
        source.stop()


async def test_opus_file_loops_and_a_late_consumer_gets_no_burst(tmp_path: Path) -> None:
    path = write_tone(tmp_path / "short.ogg", 0.2)  # 10 packets (+ the encoder's flush)
    source = OpusFileSource(path, loop=True)
    try:
        await take(source, 25)
        assert source.loops >= 2
        await asyncio.sleep(0.3)  # 15 packets late
        started = time.monotonic()
        late = await take(source, 4)
        # One-sided: re-anchored on the 20 ms grid instant at or before now, the last three
        # are due 20, 40 and 60 ms after it, so at least 40 ms from now (a burst of the 15
        # overdue packets takes ~0 s). The rule itself: tests/unit/test_source_pacing.py.
        assert time.monotonic() - started >= 0.039
        assert [p.pts for p in late] == [960 * i for i in range(25, 29)]  # no pts jump
    finally:
        source.stop()
    assert source._container is None
    with pytest.raises(MediaStreamError):
        await source.recv()


async def test_encoded_silence_is_paced_opus_silence() -> None:
    source = EncodedSilenceSource()
    try:
        started = time.monotonic()
        packets = await take(source, 6)
        elapsed = time.monotonic() - started
        assert {bytes(p) for p in packets} == {OPUS_SILENCE}
        assert all(p.duration == 960 for p in packets)
        assert [p.pts for p in packets] == [960 * i for i in range(6)]
        # No-pacing guard, one-sided: five intervals from a start on the grid at most one
        # interval before ours cannot pass in less real time than four (see above).
        assert elapsed >= 0.9 * 4 * 0.02
    finally:
        source.stop()


def test_file_source_picks_opus_for_ogg_opus_only(tmp_path: Path) -> None:
    opus = file_source(write_tone(tmp_path / "voice.opus", 0.1))
    flac = file_source(write_tone(tmp_path / "voice.ogg", 0.1, codec="flac"))
    wav = file_source(write_tone(tmp_path / "voice.wav", 0.1, codec="pcm_s16le"))
    try:
        assert isinstance(opus, OpusFileSource)
        assert not isinstance(flac, OpusFileSource)  # Ogg FLAC is decoded as before
        assert not isinstance(wav, OpusFileSource)
    finally:
        for track in (opus, flac, wav):
            track.stop()


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("missing.opus", ErrorCode.DEVICE_NOT_FOUND),
        ("corrupt.opus", ErrorCode.INVALID_ARGUMENT),
        ("flac.ogg", ErrorCode.INVALID_ARGUMENT),
        ("pcm.wav", ErrorCode.INVALID_ARGUMENT),
        (".", ErrorCode.INVALID_ARGUMENT),
        ("http://127.0.0.1:9/x.opus", ErrorCode.INVALID_ARGUMENT),
    ],
)
def test_opus_file_refusals(tmp_path: Path, name: str, code: ErrorCode) -> None:
    (tmp_path / "corrupt.opus").write_bytes(b"OggS not really an ogg page" * 10)
    write_tone(tmp_path / "flac.ogg", 0.1, codec="flac")
    write_tone(tmp_path / "pcm.wav", 0.1, codec="pcm_s16le")
    target = name if "://" in name else tmp_path / name
    with pytest.raises(AvatarError) as info:
        OpusFileSource(target)
    assert info.value.code is code
    if code is ErrorCode.DEVICE_NOT_FOUND:
        assert isinstance(info.value, FileNotFoundError)


# --------------------------------------------------------------------------- through a session


def _session(staging: StagingServer, audio: MediaStreamTrack | None) -> AvatarSession:
    return AvatarSession(
        staging.url, staging.token, allow_insecure_transport=True, audio=audio, config=MEDIA,
        video=False,
    )  # fmt: skip


async def _heard(
    staging: StagingServer, sid: str, level: tuple[float, float] | None, frames: int = 25
) -> None:
    """Until ``frames`` more uplink frames decode at the server within ``level`` (None:
    digital silence), the last one included for silence. Counted over every frame, not
    sampled: a 0.6 s file may be decoded in one burst between two looks on a loaded
    machine (a fresh-clone run saw only silence: ``((0.1, 0.3), 0.0, 389)``)."""
    start = staging.media.asr_stats(sid).frames

    def done() -> bool:
        stats = staging.media.asr_stats(sid)
        if level is None:
            return stats.frames - start >= frames and stats.last_rms == 0.0
        heard = staging.media.asr_levels_since(sid, start)
        return sum(1 for rms in heard if level[0] < rms < level[1]) >= frames

    stats = staging.media.asr_stats
    assert await until(done, 8), (level, stats(sid).last_rms, stats(sid).frames - start)


async def test_opus_file_through_a_session_with_mute_and_switches(
    staging: StagingServer, tmp_path: Path
) -> None:
    opus = OpusFileSource(write_tone(tmp_path / "tone.opus", 1.0), loop=True)
    pcm = ToneSource(660.0, 0.6)
    session = _session(staging, opus)
    try:
        await session.connect()
        sid = staging.live_sids[0]
        await _heard(staging, sid, FILE_LEVEL)
        session.mic_enabled = False  # mute while the encoded file plays
        await _heard(staging, sid, None)
        session.mic_enabled = True
        await _heard(staging, sid, FILE_LEVEL)
        await session.switch_audio(pcm)  # encoded -> PCM, mid-session
        await _heard(staging, sid, PCM_LEVEL)
        before = opus.packets
        await session.switch_audio(opus)  # and back
        await _heard(staging, sid, FILE_LEVEL)
        assert opus.packets - before >= 20  # the level heard is the file's
        await session.switch_audio(EncodedSilenceSource())
        await _heard(staging, sid, None)
        assert staging.media.asr_stats(sid).offers == 1  # never renegotiated
        assert session.state == "connected"
    finally:
        await session.close()
        opus.stop()
        pcm.stop()
    assert opus._container is None


async def test_opus_file_end_leaves_silence_flowing(staging: StagingServer, tmp_path: Path) -> None:
    opus = OpusFileSource(write_tone(tmp_path / "short.opus", 0.6))
    session = _session(staging, opus)
    try:
        await session.connect()
        sid = staging.live_sids[0]
        await _heard(staging, sid, FILE_LEVEL, frames=5)
        await _heard(staging, sid, None, frames=25)  # the file ended; silence goes on
        assert opus.readyState == "ended" and opus._container is None
        assert session.state == "connected"
    finally:
        await session.close()
