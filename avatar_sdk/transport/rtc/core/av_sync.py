"""One timeline for the avatar's voice and video: presentation times from RTP and RTCP.

Why: each received track counts its own RTP clock from a random origin, so a frame's
timestamp says nothing about the other track's; and the two are held differently on the
way to the app (the voice by its receive buffer, the video by frame assembly and decoding),
so frames of one instant reach the app apart. The sender's RTCP sender reports pair, per
track, an NTP wall-clock time with an RTP timestamp: through them both tracks map onto the
sender's one clock (RFC 3550 6.4.1; libwebrtc's RtpToNtpEstimator and stream synchronizer).

* :class:`SenderClock`: one track's RTP timestamp → the sender's time (seconds). A report's
  NTP time is when the packet was *sent*, never before its RTP time's instant: the earliest
  mapping of the last :data:`REPORTS` reports is kept (the send delays' floor), so a late
  report does not move the timeline; a report further than :data:`RESTART` from it is a new
  sender clock and starts afresh.
* :class:`PresentationTimeline`: a frame's presentation time (seconds from the session's
  first frame, one timeline for both tracks), strictly increasing per track. The voice is
  the master: counted on its own RTP clock from its first frame, sample-continuous (a frame
  handed on late by a busy loop keeps its spacing, and the first report moves nothing); the
  video is mapped onto it through the two tracks' sender reports, and placed by its RTP clock
  from its arrival until its own first report.
* :meth:`PresentationTimeline.video_release`: when to hand a video frame on so that it
  meets the voice of the same instant: the voice's current transit (arrival at the app less
  sender time) after its sender time, at most :data:`MAX_HOLD` later. The voice is never
  held for the video (its latency is what conversations feel).

Pure: no asyncio, no aiortc; times are passed in (the receiver's monotonic seconds).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "MAX_HOLD",
    "REPORTS",
    "RESTART",
    "STALE",
    "PresentationTimeline",
    "SenderClock",
    "ntp_seconds",
]

#: Sender reports a track's mapping is taken from (aiortc sends one every 0.5-1.5 s).
REPORTS: Final = 5
#: A report this far (s) from the current mapping is a new sender clock, not a late send.
RESTART: Final = 1.0
#: The longest a video frame is held to meet its voice (s): the voice buffer's own bound.
MAX_HOLD: Final = 0.5
#: A transit measured longer ago than this (s) is not used (the other track stopped, or
#: the subscription changed).
STALE: Final = 2.0

_WRAP: Final = 1 << 32


def ntp_seconds(ntp: int) -> float:
    """A 64-bit NTP timestamp (32.32 fixed point) as seconds since 1900."""
    return (ntp >> 32) + (ntp & 0xFFFFFFFF) / _WRAP


def _ticks_between(rtp: int, reference: int) -> int:
    """``rtp - reference`` on the 32-bit RTP clock, the short way round (wraps unfolded)."""
    return (rtp - reference + (1 << 31)) % _WRAP - (1 << 31)


@dataclass
class SenderClock:
    """One track's RTP clock mapped onto its sender's wall clock by its sender reports."""

    rate: int
    #: The reports kept, as (RTP timestamp, sender seconds).
    _reports: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=REPORTS))
    #: The mapping in force: (RTP timestamp, sender seconds) of one instant.
    _anchor: tuple[int, float] | None = None
    restarts: int = 0

    @property
    def known(self) -> bool:
        return self._anchor is not None

    def report(self, ntp: int, rtp: int) -> None:
        """A sender report: ``rtp`` was sent at NTP time ``ntp``. A report of NTP time 0
        (a sender that has sent nothing yet) is ignored."""
        if ntp == 0:
            return
        seconds = ntp_seconds(ntp)
        if self._anchor is not None:
            predicted = self._at(self._anchor, rtp)
            if abs(seconds - predicted) > RESTART:
                self._reports.clear()
                self.restarts += 1
        self._reports.append((rtp, seconds))
        # The earliest mapping of those kept, expressed at the newest report's timestamp.
        self._anchor = (rtp, min(self._at(r, rtp) for r in self._reports))

    def _at(self, anchor: tuple[int, float], rtp: int) -> float:
        return anchor[1] + _ticks_between(rtp, anchor[0]) / self.rate

    def sender_time(self, rtp: int) -> float | None:
        """The sender's time (s, NTP epoch) of RTP timestamp ``rtp``; None before a report."""
        return None if self._anchor is None else self._at(self._anchor, rtp)


@dataclass
class _Track:
    """What the timeline remembers of one track."""

    tick: float  # one unit of the track's clock (s): the smallest step between two frames
    last: float | None = None  # the last presentation time handed out
    #: Arrival less sender time of its last frame placed by a report, and when it arrived.
    transit: float | None = None
    transit_at: float = 0.0
    #: (RTP timestamp, receiver time) of the frame its own clock is counted from: the
    #: voice's always, the video's until its first report.
    provisional: tuple[int, float] | None = None


class PresentationTimeline:
    """Presentation times of a session's avatar frames: one timeline for voice and video.

    Shared by the session's two output tracks and all its subscriptions: a re-subscribe
    continues the timeline (the same sender's clock), and each track's times only grow.
    Times are kept in the receiver's clock: a sender time is moved onto it by one offset,
    the transit of the first frame placed by a report (taken afresh when a sender's clock
    is more than :data:`RESTART` from it: another sender, after a renewal).
    """

    def __init__(self) -> None:
        self._origin: float | None = None  # receiver time of presentation time 0
        self._offset: float | None = None  # receiver time less sender time
        self._tracks = {"audio": _Track(1 / 48_000), "video": _Track(1 / 90_000)}

    def _fresh_transit(self, kind: str, now: float) -> float | None:
        track = self._tracks[kind]
        if track.transit is None or now - track.transit_at > STALE:
            return None
        return track.transit

    def place(
        self, kind: str, sender_time: float | None, arrival: float, rtp: int | None = None
    ) -> float:
        """The presentation time (s) of a ``kind`` frame of ``sender_time`` (None: no report
        for its track yet) and RTP timestamp ``rtp``, handed on at ``arrival`` (monotonic s).

        The voice is the master: with its RTP timestamp it is placed on its own clock from
        its first frame (sample-continuous: a player or a recording hears no gap or overlap,
        a report only tells the sender's clock through it), and the video is mapped onto it
        by the sender reports (libwebrtc's stream synchronizer delays the video likewise)."""
        track = self._tracks[kind]
        other = self._fresh_transit("video" if kind == "audio" else "audio", arrival)
        # By arrival, less what the other track's frames spend on the way beyond the offset
        # (so both are on one footing as soon as one has reports).
        extra = 0.0 if other is None or self._offset is None else other - self._offset
        if kind == "audio" and rtp is not None:
            # Where this frame belongs by what is known: by its report on a timeline the
            # video already set, else by its arrival; the voice's own clock counts from there.
            if sender_time is not None and self._offset is not None:
                expected = sender_time + self._offset
            else:
                expected = arrival - extra
            at = self._by_rtp(track, rtp, expected)
            if sender_time is not None:
                track.transit, track.transit_at = arrival - sender_time, arrival
                self._offset = at - sender_time
        elif sender_time is not None:
            transit = arrival - sender_time
            track.transit, track.transit_at = transit, arrival
            if self._offset is None or abs(transit - self._offset) > RESTART:
                self._offset = transit
            at = sender_time + self._offset
        elif rtp is not None:
            at = self._by_rtp(track, rtp, arrival - extra)
        else:
            at = arrival - extra
        if self._origin is None:
            self._origin = at
        placed = at - self._origin
        if track.last is not None:
            placed = max(placed, track.last + track.tick)
        placed = max(placed, 0.0)
        track.last = placed
        return placed

    @staticmethod
    def _by_rtp(track: _Track, rtp: int, arrived: float) -> float:
        """``rtp`` on the track's own clock from its anchor, the first frame's (RTP
        timestamp, receiver time); a frame further than :data:`RESTART` from where it arrived
        is another sender's clock (a re-subscribe, a renewal) and anchors afresh."""
        if track.provisional is not None:
            first_rtp, first_at = track.provisional
            at = first_at + _ticks_between(rtp, first_rtp) * track.tick
            if abs(at - arrived) <= RESTART:
                return at
        track.provisional = (rtp, arrived)
        return arrived

    def video_release(self, sender_time: float | None, arrival: float) -> float:
        """When (monotonic s) a video frame of ``sender_time`` that is ready at ``arrival``
        is handed on: when the voice of its instant is, at most :data:`MAX_HOLD` later;
        at once without a report or a recent voice frame, or when the voice is later."""
        voice = self._fresh_transit("audio", arrival)
        if sender_time is None or voice is None:
            return arrival
        return min(max(sender_time + voice, arrival), arrival + MAX_HOLD)

    def transit(self, kind: str, now: float) -> float | None:
        """The last transit (s) of ``kind`` placed by a report, if recent."""
        return self._fresh_transit(kind, now)
