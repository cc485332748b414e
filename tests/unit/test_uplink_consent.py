"""The uplink's liveness rules on a fake clock (issue 17, items 1-2): ICE consent judges a
peer from its first moment, the receiver-report cadence once the server has reported
twice; neither misfires on a healthy peer whose server reports every 4.5 s, or never."""

from __future__ import annotations

import math
import random

import pytest
from pytest import approx

from avatar_sdk.clock import FakeClock
from avatar_sdk.transport.liveness.cadence import FACTOR, ReportCadence
from avatar_sdk.transport.rtc.consent import (
    MAX_INTERVAL,
    PROBES_PER_DEADLINE,
    ConsentWatch,
    probe_interval,
)

STALL = 2.0  # SessionConfig.media_stall_timeout
TICK = 0.1  # the media watchdog's tick


def test_a_peer_is_judged_from_its_first_moment() -> None:
    """The defect: nothing judged a peer before its first receiver report."""
    clock = FakeClock()
    watch = ConsentWatch(STALL, clock=clock.monotonic)
    assert watch.silence() is None and not watch.is_overdue()  # not connected yet
    watch.start(clock.monotonic())
    cadence = ReportCadence(STALL, clock=clock.monotonic)
    cadence.start(clock.monotonic())
    assert not watch.is_overdue(clock.monotonic() + STALL)
    assert watch.is_overdue(clock.monotonic() + STALL + TICK)  # dead at once: found
    assert not cadence.is_overdue(clock.monotonic() + 3600.0)  # reports cannot tell


def test_an_answer_resets_the_silence_and_since_counts_from_usable() -> None:
    clock = FakeClock()
    watch = ConsentWatch(STALL, clock=clock.monotonic)
    watch.start(1000.0)
    watch.answered(1001.5)
    watch.answered(1001.0)  # an answer to an older request, arriving late: no step back
    assert watch.last_answer == approx(1001.5) and watch.answers == 2
    assert watch.silence(1003.0) == approx(1.5)
    assert not watch.is_overdue(1003.5)
    assert watch.is_overdue(1003.6)
    # A socket-tier recovery in between: silence counts from when it became usable again.
    assert watch.silence(1010.0, since=1009.0) == approx(1.0)
    assert not watch.is_overdue(1010.0, since=1009.0)


def test_a_disabled_watch_gives_no_verdict() -> None:
    watch = ConsentWatch(STALL, clock=FakeClock().monotonic)
    watch.start(0.0)
    watch.disable()
    assert not watch.is_overdue(1e6)


def test_the_request_rate_is_a_quarter_of_the_deadline_at_most_every_half_second() -> None:
    assert probe_interval(2.0) == approx(MAX_INTERVAL)
    assert probe_interval(1.0) == approx(1.0 / PROBES_PER_DEADLINE)
    assert probe_interval(60.0) == approx(MAX_INTERVAL)
    assert probe_interval(0.0) > 0


async def _simulate(
    *,
    seconds: float,
    reports_every: float | None,
    loss: float,
    seed: int,
    dies_at: float | None = None,
) -> float | None:
    """A healthy (or, from ``dies_at``, silently dead) uplink for ``seconds`` on the fake
    clock: consent requests every ``probe_interval`` (0.8-1.2x), each answered after a
    random round trip unless lost; receiver reports every ``reports_every`` (None: never).
    The watchdog looks every tick. Returns when (after the start) it first judged the peer
    dead, or None."""
    rng = random.Random(seed)
    clock = FakeClock()
    t0 = clock.monotonic()
    watch = ConsentWatch(STALL, clock=clock.monotonic)
    cadence = ReportCadence(STALL, clock=clock.monotonic)
    watch.start(t0)
    cadence.start(t0)
    interval = probe_interval(STALL)
    answers: list[float] = []  # arrival times of answers still in flight
    next_probe = t0 + interval
    next_report = t0 + reports_every if reports_every is not None else math.inf
    while clock.monotonic() - t0 < seconds:
        await clock.advance(TICK)
        now = clock.monotonic()
        alive = dies_at is None or now - t0 < dies_at
        while next_probe <= now:
            if alive and rng.random() >= loss:
                answers.append(next_probe + rng.uniform(0.001, 0.3))  # round trip
            next_probe += interval * rng.uniform(0.8, 1.2)
        for arrival in [a for a in answers if a <= now]:
            answers.remove(arrival)
            watch.answered(arrival)
        while next_report <= now:
            if alive:
                cadence.observe(next_report)
            next_report += reports_every or math.inf
        if watch.is_overdue(now) or cadence.is_overdue(now):
            return now - t0
    return None


@pytest.mark.parametrize("reports_every", [4.5, None], ids=["reports-4.5s", "never-reports"])
@pytest.mark.parametrize("seed", range(5))
async def test_no_spurious_verdict_in_60_s_on_a_healthy_peer(
    reports_every: float | None, seed: int
) -> None:
    """60 s of a healthy peer, 5% of consent requests or answers lost: never judged dead."""
    assert await _simulate(seconds=60.0, reports_every=reports_every, loss=0.05, seed=seed) is None


@pytest.mark.parametrize("reports_every", [4.5, None], ids=["reports-4.5s", "never-reports"])
@pytest.mark.parametrize("dies_at", [0.05, 1.0, 9.7, 30.0])
async def test_a_silent_death_is_judged_within_the_deadline(
    reports_every: float | None, dies_at: float
) -> None:
    """Whenever the path dies (before any report too), the verdict comes within the
    consent deadline plus one request interval and a tick, not 3 x 4.5 s later."""
    found = await _simulate(
        seconds=60.0, reports_every=reports_every, loss=0.0, seed=1, dies_at=dies_at
    )
    assert found is not None
    assert dies_at < found <= dies_at + STALL + probe_interval(STALL) * 1.2 + 0.3 + 2 * TICK
    assert found - dies_at < FACTOR * 4.5
