"""The ``latency`` figure's uplink rows: a captured frame to its RTP packet.

Issue 30 item 2: the uplink sends a captured frame at once. Measured on the SDK's own ASR
sender against the staging backend, per source: the capture is the instant the source's
``recv()`` returns a frame (a file's frame read, a tone's frame due on the grid), the
packet the instant aiortc hands the RTP packet carrying that audio's last sample to its
DTLS transport (``RTCDtlsTransport._send_rtp``, wrapped for the run). Packet ``k``
carries the uplink's samples ``[960 k, 960 (k + 1))``; its capture is that of the frame
that completed them, so a frame held back anywhere (an encoder's queue, a relay) shows as
a whole frame of latency. A microphone's frames take the same path after capture
(``UplinkTrack`` → the peer's relay → the loop's encoder → aiortc's packetizer).
"""

from __future__ import annotations

import asyncio
import fractions
import math
import tempfile
import time
import wave
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import av
import numpy as np
from aiortc.rtcdtlstransport import RTCDtlsTransport
from aiortc.rtp import is_rtcp

from avatar_sdk import AvatarSession
from avatar_sdk.media import ToneSource, file_source
from avatar_sdk.media.opus import packet_samples
from avatar_sdk.testing import StagingServer

from .stats import Row, Summary, Target

#: The issue's target for capture -> packet (median).
UPLINK_TARGET = Target("<=", 5.0, "ms")
#: Seconds of audio measured per source, and the packets skipped at the start (the peer
#: connecting).
SECONDS = 3.0
SKIP = 10
RATE = 48_000
FRAME = 960


def _tone(seconds: float) -> np.ndarray[Any, Any]:
    t = np.arange(int(seconds * RATE))
    return (0.3 * 32767 * np.sin(2 * math.pi * 440.0 * t / RATE)).astype(np.int16)


def _wav(path: Path, seconds: float) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(_tone(seconds).tobytes())
    return path


def _opus(path: Path, seconds: float) -> Path:
    samples = _tone(seconds)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libopus", rate=RATE, layout="mono")
        for n in range(len(samples) // FRAME):
            frame = av.AudioFrame.from_ndarray(
                samples[n * FRAME : (n + 1) * FRAME].reshape(1, -1), format="s16", layout="mono"
            )
            frame.sample_rate, frame.pts = RATE, FRAME * n
            frame.time_base = fractions.Fraction(1, RATE)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


class _Captures:
    """The source's frames as captured: when each returned, and the samples up to its end."""

    def __init__(self, source: Any) -> None:
        self.ends: list[tuple[float, int]] = []
        original: Callable[[], Awaitable[Any]] = source.recv

        async def recv() -> Any:
            got = await original()
            n = got.samples if isinstance(got, av.AudioFrame) else packet_samples(got)
            total = (self.ends[-1][1] if self.ends else 0) + n
            self.ends.append((time.monotonic(), total))
            return got

        source.recv = recv

    def completed(self, sample: int) -> float | None:
        """When the frame holding ``sample`` (its last one: exclusive end) was captured."""
        for at, end in self.ends:
            if end >= sample:
                return at
        return None


async def _one(staging: StagingServer, source: Any) -> list[float]:
    captures = _Captures(source)
    sent: list[tuple[int, float]] = []
    original = RTCDtlsTransport._send_rtp

    async def send_rtp(self: RTCDtlsTransport, data: bytes) -> None:
        if len(data) >= 12 and not is_rtcp(data):
            sent.append((int.from_bytes(data[8:12], "big"), time.monotonic()))
        await original(self, data)

    RTCDtlsTransport._send_rtp = send_rtp  # type: ignore[method-assign]
    try:
        session = AvatarSession(
            staging.url, staging.token, audio=source, video=False, allow_insecure_transport=True
        )
        async with session:
            await asyncio.sleep(SECONDS)
            lanes = session.media
            assert lanes is not None and lanes.asr is not None
            (sender,) = lanes.asr.pc.getSenders()
            ssrc = int(sender._ssrc)
    finally:
        RTCDtlsTransport._send_rtp = original  # type: ignore[method-assign]
        source.stop()  # the application's source: a file's reader thread ends with it
    packets = [at for s, at in sent if s == ssrc]
    latencies = []
    for k, at in enumerate(packets[SKIP:], start=SKIP):
        captured = captures.completed((k + 1) * FRAME)
        if captured is not None:
            latencies.append(at - captured)
    return latencies


async def uplink_rows() -> tuple[list[Row], list[str]]:
    """One row per source: capture -> RTP packet (ms)."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        wav, opus = _wav(Path(tmp) / "a.wav", 8), _opus(Path(tmp) / "a.opus", 8)
        sources: list[tuple[str, Callable[[], Any]]] = [
            ("tone (ToneSource, PCM encoded on the loop)", ToneSource),
            ("WAV file (file_source, PCM)", lambda: file_source(str(wav))),
            ("Ogg/Opus file (sent undecoded)", lambda: file_source(str(opus))),
        ]
        for label, make in sources:
            async with StagingServer() as staging:
                values = await _one(staging, make())
            s = Summary.of(values).scaled(1000.0)
            rows.append(Row(f"uplink, {label}: capture to RTP packet", s.n, s.median, "ms",
                            s.p90, s.maximum, UPLINK_TARGET))  # fmt: skip
    notes = [
        f"uplink rows: {SECONDS:.0f} s per source, the first {SKIP} packets skipped; packet k "
        "is timed from the capture of the frame that completed its samples (a microphone's "
        "frames take the same path after capture)."
    ]
    return rows, notes
