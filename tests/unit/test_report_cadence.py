"""The uplink's receiver-report deadline under a fake clock (issue 8, defect 4)."""

from __future__ import annotations

import random

from pytest import approx

from avatar_sdk.transport.liveness.cadence import FACTOR, WINDOW, ReportCadence


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def test_no_verdict_before_the_first_report_however_long_the_silence() -> None:
    clock = FakeClock()
    cadence = ReportCadence(1.0, clock=clock)
    cadence.start(clock.now)
    clock.advance(3600.0)
    assert cadence.deadline() is None
    assert cadence.silence() is None
    assert not cadence.is_overdue()
    assert not cadence.is_overdue(clock.now, since=0.0)


def test_one_report_without_a_known_start_gives_no_verdict_yet() -> None:
    clock = FakeClock()
    cadence = ReportCadence(1.0, clock=clock)
    cadence.observe()
    clock.advance(60.0)
    assert cadence.interval() is None and cadence.deadline() is None
    assert not cadence.is_overdue()


def test_a_first_report_a_full_interval_after_connect_does_not_double_the_deadline() -> None:
    """Issue 17, item 2: the first report's delay after connect seeded the window as twice
    that delay. A server whose first report comes a full 4.5 s interval after connect (RFC
    3550 allows it) got a 27 s deadline for its next 8 reports instead of 3 x 4.5 s."""
    clock = FakeClock()
    cadence = ReportCadence(2.0, clock=clock)
    cadence.start(clock.now)
    cadence.observe(clock.advance(4.5))  # the first report: no gap observed yet
    for _ in range(WINDOW + 2):
        cadence.observe(clock.advance(4.5))
        # never more than the rule applied to the gaps actually observed (all 4.5 s)
        assert cadence.deadline() == approx(max(2.0, FACTOR * 4.5))
    assert cadence.gaps == approx((4.5,) * WINDOW)
    assert not cadence.is_overdue(clock.advance(13.4))
    assert cadence.is_overdue(clock.advance(0.2))


def test_the_delay_before_the_first_report_is_not_taken_for_a_gap() -> None:
    """Connect -> first report is no inter-report gap (RFC 3550 sends the first report after
    about half an interval, or a whole one): no report-based verdict until a gap is seen.
    ICE consent (``transport.consent``) watches the peer meanwhile."""
    clock = FakeClock()
    cadence = ReportCadence(1.0, clock=clock)
    cadence.start(clock.now)
    cadence.observe(clock.advance(0.5))
    assert cadence.gaps == () and cadence.deadline() is None
    assert not cadence.is_overdue(clock.advance(60.0))
    cadence.observe(clock.now)
    assert cadence.gaps == approx((60.0,))


def test_deadline_is_factor_times_the_largest_recent_gap_and_grows_with_it() -> None:
    clock = FakeClock()
    cadence = ReportCadence(1.0, clock=clock)
    cadence.observe(clock.now)
    for gap in (0.6, 0.9, 0.7):
        cadence.observe(clock.advance(gap))
    assert cadence.interval() == approx(0.9)
    assert cadence.deadline() == approx(FACTOR * 0.9)
    cadence.observe(clock.advance(2.0))  # a slower report grows the deadline at once
    assert cadence.deadline() == approx(FACTOR * 2.0)
    # a server that reports every 5 s is given 15 s, not media_stall_timeout
    for _ in range(WINDOW):
        cadence.observe(clock.advance(5.0))
    assert cadence.deadline() == approx(FACTOR * 5.0)
    assert not cadence.is_overdue(clock.advance(14.9))
    assert cadence.is_overdue(clock.advance(0.2))


def test_old_gaps_age_out_of_the_window() -> None:
    clock = FakeClock()
    cadence = ReportCadence(0.5, clock=clock)
    cadence.observe(clock.now)
    cadence.observe(clock.advance(4.0))
    for _ in range(WINDOW):
        cadence.observe(clock.advance(1.0))
    assert cadence.interval() == approx(1.0)
    assert cadence.deadline() == approx(FACTOR * 1.0)


def test_the_deadline_never_drops_below_the_floor() -> None:
    clock = FakeClock()
    cadence = ReportCadence(2.0, clock=clock)
    cadence.observe(clock.now)
    for _ in range(WINDOW):
        cadence.observe(clock.advance(0.1))  # a very chatty server
    assert cadence.deadline() == approx(2.0)
    assert not cadence.is_overdue(clock.advance(1.9))
    assert cadence.is_overdue(clock.advance(0.2))
    cadence.floor = 5.0  # the floor is the configured media_stall_timeout
    assert cadence.deadline() == approx(5.0)


def test_silence_counts_from_when_the_session_became_usable_at_the_earliest() -> None:
    clock = FakeClock()
    cadence = ReportCadence(1.0, clock=clock)
    cadence.observe(clock.now)
    cadence.observe(clock.advance(1.0))
    since = clock.advance(10.0)  # e.g. a socket-tier recovery: nothing counted meanwhile
    assert cadence.silence(since=since) == approx(0.0)
    assert not cadence.is_overdue(clock.advance(2.9), since=since)
    assert cadence.is_overdue(clock.advance(0.2), since=since)


def test_a_new_peer_has_no_verdict_until_it_reports_but_keeps_the_cadence() -> None:
    clock = FakeClock()
    cadence = ReportCadence(1.0, clock=clock)
    cadence.observe(clock.now)
    for _ in range(3):
        cadence.observe(clock.advance(2.0))
    cadence.start(clock.advance(0.1))  # renegotiated: a fresh transport
    assert cadence.last_report is None and cadence.reports == 0
    assert not cadence.is_overdue(clock.advance(30.0))
    cadence.observe(clock.advance(0.3))  # no seed: the server's cadence is known
    assert cadence.gaps == approx((2.0, 2.0, 2.0))
    assert cadence.deadline() == approx(FACTOR * 2.0)


def test_a_report_read_twice_or_out_of_order_is_ignored() -> None:
    clock = FakeClock()
    cadence = ReportCadence(1.0, clock=clock)
    cadence.observe(clock.now)
    cadence.observe(clock.advance(1.0))
    cadence.observe(clock.now)
    cadence.observe(clock.now - 0.5)
    assert cadence.gaps == approx((1.0,)) and cadence.reports == 2


def test_aiortc_cadence_is_never_judged_dead_with_a_one_second_floor() -> None:
    """The defect: reports every 0.5-1.5 s against media_stall_timeout=1.0."""
    rng = random.Random(8)
    clock = FakeClock()
    cadence = ReportCadence(1.0, clock=clock)
    cadence.start(clock.now)
    cadence.observe(clock.advance(0.5 + rng.random()))
    for _ in range(2000):
        gap = 0.5 + rng.random()
        # the watchdog looks every 0.1 s until the next report arrives
        step = 0.0
        while step + 0.1 < gap:
            step += 0.1
            assert not cadence.is_overdue(clock.now + step)
        cadence.observe(clock.advance(gap))
