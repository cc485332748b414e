"""transport/rtc/presentation.py: a subscription's frames stamped on the session's timeline
from its sender reports, and the video held to the voice of its instant, on a FakeClock.

Real aiortc receivers supply the timestamp mappers and RTCP handlers; the reports are fed
to them as the DTLS transport would."""

from __future__ import annotations

import fractions
import itertools
from typing import Any

import av
from aiortc import RTCPeerConnection
from aiortc.rtp import RtcpSenderInfo, RtcpSrPacket

from avatar_sdk.clock import FakeClock
from avatar_sdk.transport.rtc.core.av_sync import PresentationTimeline
from avatar_sdk.transport.rtc.presentation import Presenter

T0 = 3_900_000_000.0  # the sender's NTP seconds at its media time 0
ORIGIN = {"audio": 1_000, "video": 7_000_000}  # the RTP origins (random in aiortc)
RATE = {"audio": 48_000, "video": 90_000}


def ntp(seconds: float) -> int:
    whole = int(seconds)
    return whole << 32 | round((seconds - whole) * (1 << 32))


class Out:
    """An output track: the frames pushed, with the clock's time."""

    def __init__(self, clock: FakeClock, timeline: PresentationTimeline | None) -> None:
        self.clock = clock
        self.timeline = timeline
        self.pushed: list[tuple[float, Any]] = []

    def push(self, frame: Any) -> None:
        self.pushed.append((self.clock.monotonic(), frame))


class Sender:
    """Frames as the receivers decode them: pts = RTP timestamp less the first one mapped."""

    def __init__(self, receivers: dict[str, Any]) -> None:
        self.receivers = receivers

    def rtp(self, kind: str, t: float) -> int:
        return ORIGIN[kind] + round(t * RATE[kind])

    async def report(self, kind: str, t: float) -> None:
        info = RtcpSenderInfo(ntp(T0 + t), self.rtp(kind, t), 1, 1)
        await self.receivers[kind]._handle_rtcp_packet(RtcpSrPacket(ssrc=1, sender_info=info))

    def frame(self, kind: str, t: float) -> Any:
        mapper = self.receivers[kind]._RTCRtpReceiver__timestamp_mapper
        frame: Any
        if kind == "audio":
            frame = av.AudioFrame(format="s16", layout="mono", samples=960)
            frame.sample_rate = 48_000
        else:
            frame = av.VideoFrame(32, 32, "yuv420p")
        frame.pts = mapper.map(self.rtp(kind, t))
        frame.time_base = fractions.Fraction(1, RATE[kind])
        return frame


async def _setup() -> tuple[RTCPeerConnection, Presenter, Sender, FakeClock]:
    pc = RTCPeerConnection()
    receivers = {
        kind: pc.addTransceiver(kind, direction="recvonly").receiver for kind in ("audio", "video")
    }
    clock = FakeClock(start=100.0)
    return pc, Presenter(receivers, clock=clock), Sender(receivers), clock


def seconds(frame: Any) -> float:
    return float(frame.pts * frame.time_base)


async def test_frames_of_one_instant_get_one_presentation_time_from_the_reports() -> None:
    pc, presenter, sender, clock = await _setup()
    timeline = PresentationTimeline()
    audio, video = Out(clock, timeline), Out(clock, timeline)
    try:
        await sender.report("audio", 0.0)
        await sender.report("video", 0.0)
        # The voice of t reaches the app at 100 + t + 0.030, the video of t at + 0.010.
        for step in range(20):
            t = step * 0.05
            await clock.advance(100.0 + t + 0.010 - clock.monotonic())
            presenter.hand_on("video", sender.frame("video", t), video)
            await clock.advance(0.020)
            presenter.hand_on("audio", sender.frame("audio", t), audio)
        await clock.advance(1.0)
        assert presenter.reports("audio") == presenter.reports("video") == 1
        heard = [seconds(f) for _, f in audio.pushed]
        shown = [seconds(f) for _, f in video.pushed]
        assert len(heard) == len(shown) == 20
        for a, v in zip(heard, shown, strict=True):
            assert abs(a - v) < 1e-4  # one timeline: the same instant, the same time
        for times in (heard, shown):
            assert all(b > a for a, b in itertools.pairwise(times))
        assert all(f.time_base == fractions.Fraction(1, 48_000) for _, f in audio.pushed)
        # Each video frame after the first voice was handed on with its voice, 20 ms after
        # it was ready (the first one, with no voice yet to meet, at once).
        handed_v = [at for at, _ in video.pushed]
        handed_a = [at for at, _ in audio.pushed]
        assert handed_v[0] == 100.010
        assert all(abs(v - a) < 1e-6 for a, v in zip(handed_a[1:], handed_v[1:], strict=True))
        assert presenter.held == 19 and abs(presenter.longest_hold - 0.020) < 1e-6
    finally:
        presenter.close()
        await pc.close()


async def test_without_a_timeline_frames_go_on_as_they_are_and_close_drops_the_held() -> None:
    pc, presenter, sender, clock = await _setup()
    try:
        plain = Out(clock, None)
        frame = sender.frame("audio", 0.0)
        presenter.hand_on("audio", frame, plain)
        assert plain.pushed == [(100.0, frame)] and frame.pts == 0
        timeline = PresentationTimeline()
        audio, video = Out(clock, timeline), Out(clock, timeline)
        await sender.report("audio", 0.0)
        await sender.report("video", 0.0)
        presenter.hand_on("audio", sender.frame("audio", 0.1), audio)
        presenter.hand_on("video", sender.frame("video", 0.15), video)  # 50 ms before its voice
        assert video.pushed == []  # held for its voice
        presenter.close()
        await clock.advance(1.0)
        assert video.pushed == []
    finally:
        presenter.close()
        await pc.close()
