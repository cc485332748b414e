"""The uplink's receiver-report deadline, following the cadence observed on it (pure).

The server's RTCP receiver reports are the uplink's liveness signal (aiortc keeps a
silently dead peer "connected" for ~30 s), but servers send them at very different rates:
aiortc every 0.5-1.5 s, libwebrtc-based media servers every 2.5-7.5 s for audio (RFC 3550
randomises each interval over [0.5, 1.5] times the nominal one). A fixed silence limit
either fires between two healthy reports or detects a dead path late, so the limit is
derived from the gaps actually seen on the peer:

* ``deadline = max(floor, FACTOR * interval)`` where ``floor`` is
  ``SessionConfig.media_stall_timeout`` and ``interval`` is the **largest** of the last
  ``WINDOW`` (8) inter-report gaps. The maximum, not a mean: randomised intervals go up to
  1.5x the nominal one and a healthy peer must never be judged on its typical gap.
* ``FACTOR`` 3: one lost report makes a gap of two intervals, each up to 1.5x nominal,
  i.e. 3x nominal; the largest of 8 uniform draws is below the nominal interval only
  with probability 1/256, so 3x that maximum still covers one lost report.
* The deadline never exceeds that rule applied to the gaps actually observed. The delay
  from connect to a peer's first report is no gap: RFC 3550 (section 6.2) sends the first
  report after about half an interval, or a whole one, so it says neither "the interval is
  this" (too short a deadline: a healthy peer judged dead) nor "twice this" (the seed this
  rule once used: a server whose first report came a full 4.5 s interval after connect got
  a 27 s deadline for its next 8 reports instead of 13.5 s). So there is no report-based
  verdict (``deadline()`` is None) until a gap has been seen on this server: before that,
  and whether or not the server reports at all, the peer is watched by ICE consent
  (:mod:`.consent`) from its first moment, and by its transport state (failed, closed).
* A new peer for the same server (:meth:`start`) keeps the gaps already observed: the
  server's cadence did not change, only the transport did.

Times are passed in (or read from the injected ``clock``, the session's monotonic reader:
the module stays pure, importing no clock of its own), so the rule is tested under a fake
clock without sleeping, and its times are on the same line as the watchdog that asks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

#: How many recent inter-report gaps the interval estimate looks at.
WINDOW = 8
#: Deadline = FACTOR x the largest recent gap (never below the floor); see the module doc.
FACTOR = 3.0


class ReportCadence:
    """Receiver reports of one uplink: when the last one came, and how late is too late."""

    def __init__(
        self,
        floor: float,
        *,
        clock: Callable[[], float],
        window: int = WINDOW,
        factor: float = FACTOR,
    ) -> None:
        self.floor = max(0.0, floor)
        self.factor = factor
        self._clock = clock
        self._gaps: deque[float] = deque(maxlen=max(1, window))
        self.started_at: float | None = None
        self.last_report: float | None = None
        self.reports = 0  # on the current peer

    def start(self, at: float | None = None) -> None:
        """A new peer whose transport connected at ``at`` (None: not yet): forget its
        predecessor's last report (no verdict until this one reports), keep the gaps
        (``at`` is kept for diagnostics only: connect -> first report is no gap)."""
        self.started_at = at
        self.last_report = None
        self.reports = 0

    def observe(self, report_time: float | None = None) -> None:
        """A receiver report arrived at ``report_time`` (default: now)."""
        at = self._clock() if report_time is None else report_time
        if self.last_report is not None:
            if at <= self.last_report:
                return  # the same report read twice, or out of order
            self._gaps.append(at - self.last_report)
        self.last_report = at
        self.reports += 1

    @property
    def gaps(self) -> tuple[float, ...]:
        """The recent inter-report gaps the estimate looks at, oldest first."""
        return tuple(self._gaps)

    def interval(self) -> float | None:
        """The robust interval estimate: the largest recent gap (None before any)."""
        return max(self._gaps) if self._gaps else None

    def deadline(self) -> float | None:
        """Longest tolerated silence after a report; None while there is no verdict (no
        report on this peer yet, or no interval known)."""
        interval = self.interval()
        if self.last_report is None or interval is None:
            return None
        return max(self.floor, self.factor * interval)

    def silence(self, now: float | None = None, since: float | None = None) -> float | None:
        """Seconds without a report, counted from ``since`` at the earliest (when the
        session last became usable); None before the first report."""
        if self.last_report is None:
            return None
        current = self._clock() if now is None else now
        start = self.last_report if since is None else max(self.last_report, since)
        return current - start

    def is_overdue(self, now: float | None = None, since: float | None = None) -> bool:
        """True when the silence exceeds the deadline (never before the first report)."""
        deadline = self.deadline()
        silent = self.silence(now, since)
        return deadline is not None and silent is not None and silent > deadline
