"""Hands one subscription's avatar frames to the app on one timeline, video held to its voice.

Each decoded frame gets its presentation time (:class:`~.core.av_sync.PresentationTimeline`,
the session's, shared by its output tracks) as its ``pts`` in its own ``time_base``
(1/48000 for the voice, 1/90000 for the video): ``pts * time_base`` is seconds on one
timeline for both tracks. A video frame ready before the voice of its instant is held
until that voice is handed on (:meth:`~.core.av_sync.PresentationTimeline.video_release`),
on the real clock: media time, as the voice buffer's schedule.
"""

from __future__ import annotations

import fractions
from collections import deque
from typing import Any, Final, Protocol

from aiortc.rtcrtpreceiver import RTCRtpReceiver

from ...clock import SYSTEM_CLOCK, Clock, Timer
from .aiortc_patches.sender_reports import RtpClockTap, listen_sender_reports
from .core.av_sync import PresentationTimeline, SenderClock

__all__ = ["TIME_BASES", "Output", "Presenter"]

#: The time base of the ``pts`` each kind of frame is handed on with.
TIME_BASES: Final = {"audio": fractions.Fraction(1, 48_000), "video": fractions.Fraction(1, 90_000)}


class Output(Protocol):
    """Where frames go (the session's :class:`~.stv.FanoutTrack`)."""

    timeline: PresentationTimeline | None

    def push(self, frame: Any) -> None: ...


class Presenter:
    """One subscription's sender clocks, its frames' stamps and the video's hold."""

    def __init__(
        self, receivers: dict[str, RTCRtpReceiver], *, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._clock = clock
        self.clocks: dict[str, SenderClock] = {}
        self._taps: dict[str, RtpClockTap] = {}
        for kind, receiver in receivers.items():
            sender = self.clocks[kind] = SenderClock(rate=int(1 / TIME_BASES[kind]))
            self._taps[kind] = listen_sender_reports(receiver, sender.report)
        self._held: deque[tuple[float, Any, Output]] = deque()
        self._timer: Timer | None = None
        self._last_release = 0.0
        self._closed = False
        #: Video frames held to meet their voice, and the longest hold (s).
        self.held = 0
        self.longest_hold = 0.0

    def reports(self, kind: str) -> int:
        """Sender reports heard on ``kind``'s receiver."""
        tap = self._taps.get(kind)
        return tap.reports if tap is not None else 0

    def hand_on(self, kind: str, frame: Any, out: Output) -> None:
        """Stamp ``frame`` with its presentation time and push it to ``out`` (a video frame
        maybe later); without a timeline on ``out``, push it as it is."""
        timeline = out.timeline
        tap, sender = self._taps.get(kind), self.clocks.get(kind)
        if timeline is None or tap is None or sender is None or self._closed:
            out.push(frame)
            return
        now = self._clock.monotonic()
        rtp = tap.rtp_timestamp(getattr(frame, "pts", None))
        sent = sender.sender_time(rtp) if rtp is not None else None
        base = TIME_BASES[kind]
        frame.pts = round(timeline.place(kind, sent, now, rtp) / base)
        frame.time_base = base
        if kind != "video":
            out.push(frame)  # the voice is never held
            return
        release = max(timeline.video_release(sent, now), self._last_release)
        if release <= now and not self._held:
            out.push(frame)
            return
        self._last_release = release
        self.held += 1
        self.longest_hold = max(self.longest_hold, release - now)
        self._held.append((release, frame, out))
        if self._timer is None:
            self._arm()

    def _arm(self) -> None:
        if self._held:
            delay = max(0.0, self._held[0][0] - self._clock.monotonic())
            self._timer = self._clock.call_later(delay, self._release)

    def _release(self) -> None:
        self._timer = None
        now = self._clock.monotonic()
        while self._held and self._held[0][0] <= now:
            _, frame, out = self._held.popleft()
            out.push(frame)
        self._arm()

    def close(self) -> None:
        """Drop the frames still held; nothing more is handed on."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._held.clear()
