"""The socket and cold tiers' retry budgets, under a fake clock (issue 17, items 3 and 4).

A fake backend on the :class:`FakeClock` stands in for the server: it can refuse every
connection for a while (a blackout), keep or forget the session for connection-state
recovery, and drop every link a second after it came up (a flapping server). The recovery
controller is driven the way the session drives it: a dropped link goes to
``recover_socket``, which escalates to ``recover_cold`` by itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import random
from collections.abc import Coroutine
from types import SimpleNamespace
from typing import Any

import pytest

from avatar_sdk import AvatarError, ErrorCode, RetryPolicy, SessionConfig
from avatar_sdk.clock import FakeClock
from avatar_sdk.session.core.machine import SessionMachine
from avatar_sdk.session.core.retry_budget import (
    SOCKET_TIER_DELAYS,
    SOCKET_TIER_JITTER,
    SPAN_RETRY_FLOOR,
    BudgetReset,
    ColdStreak,
    socket_tier_delay,
)
from avatar_sdk.session.core.stats import SessionStats
from avatar_sdk.session.recovery import LinkSlot, Outcome, RecoveryController
from avatar_sdk.transport.socketio.control import ConnectOutcome

#: A fast cold policy, like the one that spent its 6 attempts in under a second (item 4).
FAST_POLICY = RetryPolicy(max_attempts=6, initial=0.0, base=0.02, cap=0.1)
POLICIES = {"default": RetryPolicy(), "fast": FAST_POLICY}


class _Channel:
    def __init__(self, server: _Backend) -> None:
        self._server = server
        self.last_activity = 0.0

    async def reconnect(self, timeout: float) -> ConnectOutcome:
        server = self._server
        server.reconnects.append(server.clock.monotonic())
        await server.answer(timeout)
        return ConnectOutcome(sid="s", recovered=server.keeps_sessions, replayed=0, duration=0.0)


class _Link:
    lanes = None

    def __init__(self, server: _Backend) -> None:
        self.channel = _Channel(server)
        self.connected = True

    async def probe(self, timeout: float) -> bool:
        return True

    async def emit(self, event: str, payload: Any) -> None:
        return None

    async def close(self, timeout: float) -> None:
        self.connected = False


class _Backend:
    """The server side, on the fake clock: it refuses every connection until
    ``refuse_until``, leaves every connection attempt unanswered until ``hang_until`` (a
    black-holed server: an attempt then times out, or goes through once the server is
    back); ``keeps_sessions``: a reconnect restores the session in place."""

    def __init__(self, clock: FakeClock, join_timeout: float) -> None:
        self.clock = clock
        self.join_timeout = join_timeout
        self.refuse_until = -math.inf
        self.hang_until = -math.inf
        self.keeps_sessions = True
        self.joins: list[float] = []
        self.reconnects: list[float] = []
        #: The next joins that fail even though the server is up (a restarting backend).
        self.failing_joins = 0

    @property
    def refusing(self) -> bool:
        return self.clock.monotonic() < self.refuse_until

    def blackout(self, seconds: float) -> None:
        self.refuse_until = self.clock.monotonic() + seconds

    async def answer(self, timeout: float) -> None:
        """How a connection attempt fares now: refused, unanswered, or through."""
        clock = self.clock
        await clock.sleep(0)
        if self.refusing:
            raise AvatarError(ErrorCode.UNREACHABLE, "connection refused")
        gives_up = clock.monotonic() + timeout
        if clock.monotonic() < self.hang_until:
            await clock.sleep(min(gives_up, self.hang_until) - clock.monotonic())
            if clock.monotonic() >= gives_up:
                raise AvatarError(ErrorCode.CONNECT_TIMEOUT, "socket open timed out")

    def create(self) -> _Link:
        return _Link(self)

    async def join(self, link: Any, deadline: Any, **_: Any) -> None:
        self.joins.append(self.clock.monotonic())
        await self.answer(self.join_timeout)
        if self.failing_joins:
            self.failing_joins -= 1
            raise AvatarError(ErrorCode.JOIN_TIMEOUT, "no clientConfiguration")


class _Session:
    """A connected session's machine, link slot and recovery controller."""

    def __init__(self, config: SessionConfig) -> None:
        self.clock = FakeClock()
        self.server = _Backend(self.clock, config.overall_connect_timeout)
        self.machine = SessionMachine(strict=True)
        for trigger in (
            "start", "socket_open", "joined", "stv_ready", "agent_shown", "media_skipped",
            "approved",
        ):  # fmt: skip
            self.machine.fire(trigger)
        self.slot = LinkSlot()
        self.slot.install(self.server.create())  # type: ignore[arg-type]
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.outcomes: list[Outcome] = []
        self.tasks: list[asyncio.Task[Any]] = []

        async def on_outcome(outcome: Outcome) -> None:
            self.outcomes.append(outcome)
            if not outcome.ok:
                self.machine.fire("fail")

        async def nothing(link: Any) -> None:
            return None

        def spawn(coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
            task = asyncio.ensure_future(coro)
            self.tasks.append(task)
            return task

        self.controller = RecoveryController(
            machine=self.machine,
            config=config,
            clock=self.clock,
            slot=self.slot,
            builder=self.server,  # type: ignore[arg-type]
            view=SimpleNamespace(thread_id="thread-1"),
            restore=nothing,
            reassert=nothing,
            emit=lambda name, data: self.events.append((name, data)),
            spawn=spawn,
            on_outcome=on_outcome,
            stats=SessionStats(),
        )

    def start_drop(self) -> asyncio.Task[Outcome | None]:
        """The server drops the current link: the session's recovery starts."""
        link = self.slot.current
        assert link is not None
        return asyncio.ensure_future(self.controller.recover_socket(link, "transport close"))

    async def run(self, task: asyncio.Future[Any], seconds: float) -> None:
        """Let ``seconds`` of virtual time pass in 10 ms steps, or less if ``task`` ends."""
        waited = 0.0
        while waited < seconds:
            for _ in range(50):  # let the recovery run until it sleeps on the clock
                await asyncio.sleep(0)
            if task.done():
                return
            await self.clock.advance(0.01)
            waited += 0.01

    async def drop(self, *, limit: float = 600.0) -> Outcome:
        """The server drops the current link: the session's recovery, run to its end on the
        fake clock (``limit`` virtual seconds at most)."""
        task = self.start_drop()
        await self.run(task, limit)
        assert task.done(), f"the recovery was still running after {limit:g} virtual seconds"
        outcome = task.result()
        assert outcome is not None
        return outcome

    def named(self, name: str) -> list[dict[str, Any]]:
        return [data for event, data in self.events if event == name]


@pytest.fixture(params=["lowest", "highest", "seeded"])
def jitter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every jitter draw at its lowest, at its highest, or seeded: a bound that holds
    "whatever the jitter draws" holds at both ends."""
    if request.param == "lowest":
        monkeypatch.setattr(random, "uniform", min)
    elif request.param == "highest":
        monkeypatch.setattr(random, "uniform", max)
    else:
        random.seed(17)
    return str(request.param)


# -- item 4: a short outage never ends the session ------------------------------------------


@pytest.mark.parametrize("seconds", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("window", [10.0, 2.0])
@pytest.mark.parametrize("keeps_sessions", [True, False])
async def test_a_blackout_shorter_than_the_bound_never_ends_the_session(
    jitter: str, seconds: float, policy: str, window: float, keeps_sessions: bool
) -> None:
    """The server refuses every connection for ``seconds`` after dropping the link. With a
    10 s window (the measured case) and a 2 s one (the cold tier must carry it), whether the
    server kept the session or not, with the default and a fast cold policy: recovered."""
    session = _Session(
        SessionConfig(
            reconnect_window=window,
            max_reconnect_attempts=5,
            cold_reconnect=POLICIES[policy],
        )
    )
    session.server.keeps_sessions = keeps_sessions
    session.server.blackout(seconds)
    outcome = await session.drop()
    assert outcome.ok, (outcome, session.named("gave_up"))
    assert session.named("gave_up") == []
    assert session.machine.state == "connected"
    assert session.server.reconnects or session.server.joins  # it did try during the outage


async def test_the_socket_tier_spreads_its_attempts_over_its_window(jitter: str) -> None:
    """Five refused attempts do not burn out in a second: the first at once, the rest on
    the schedule (its waits stretched by the jitter, never shortened), all in the window;
    then the cold tier takes over."""
    session = _Session(
        SessionConfig(
            reconnect_window=22.0,
            max_reconnect_attempts=5,
            cold_reconnect=RetryPolicy(min_span=60.0),  # the cold tier is still at it at 20 s
        )
    )
    began = session.clock.monotonic()
    session.server.blackout(60.0)
    task = session.start_drop()
    await session.run(task, 20.0)
    offsets = [at - began for at in session.server.reconnects]
    assert len(offsets) == 5, offsets
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert offsets[0] == 0.0
    for gap, floor in zip(gaps, SOCKET_TIER_DELAYS, strict=False):
        assert floor - 1e-6 <= gap <= floor * (1 + SOCKET_TIER_JITTER) + 0.05, (gaps, floor)
    assert session.machine.state == "cold_reconnecting"
    session.server.refuse_until = -math.inf  # the server is back: the cold tier gets in
    await session.run(task, RetryPolicy().cap + 1.0)  # within one capped backoff
    assert task.done() and (await task) is not None
    assert session.machine.state == "connected"


async def test_a_window_too_short_for_the_next_attempt_goes_cold_at_once() -> None:
    """An attempt that would start after ``reconnect_window`` is not made (nor waited for)."""
    session = _Session(SessionConfig(reconnect_window=1.0, max_reconnect_attempts=5))
    began = session.clock.monotonic()
    session.server.blackout(60.0)
    task = session.start_drop()
    await session.run(task, 0.9)
    assert [at - began for at in session.server.reconnects] == pytest.approx([0.0, 0.3], abs=0.08)
    assert session.machine.state == "cold_reconnecting"
    assert session.server.joins  # the cold tier started before the window ended
    session.server.refuse_until = -math.inf
    await session.run(task, 5.0)
    assert task.done()


@pytest.mark.parametrize("policy", sorted(POLICIES))
async def test_an_outage_longer_than_the_span_still_ends_in_gave_up(
    jitter: str, policy: str
) -> None:
    """The span is a floor, not forever: a server that never comes back is given up once
    both the attempts and ``min_span`` are spent; the attempts past ``max_attempts`` are
    spaced, not a burst."""
    cold = POLICIES[policy]
    session = _Session(SessionConfig(reconnect_window=2.0, cold_reconnect=cold))
    began = session.clock.monotonic()
    session.server.blackout(3600.0)
    outcome = await session.drop(limit=120.0)
    assert not outcome.ok
    [gave_up] = session.named("gave_up")
    assert gave_up["attempts"] >= cold.max_attempts
    joins = session.server.joins
    assert joins[-1] - began >= cold.min_span - 1e-3  # the last attempt at the span's end
    # Past the budget, the attempts are spaced (the last wait is cut at the span's end).
    tail = joins[cold.max_attempts - 1 : -1]
    assert all(b - a >= SPAN_RETRY_FLOOR - 0.02 for a, b in itertools.pairwise(tail)), tail
    assert len(joins) <= cold.max_attempts + cold.min_span / SPAN_RETRY_FLOOR + 1


async def test_min_span_zero_lets_the_attempts_alone_decide() -> None:
    """``min_span=0``: the old rule, the budget alone (here spent within the first second)."""
    cold = dataclasses.replace(FAST_POLICY, min_span=0.0, jitter="none")
    session = _Session(SessionConfig(reconnect_window=0.5, cold_reconnect=cold))
    session.server.blackout(3600.0)
    outcome = await session.drop(limit=30.0)
    assert not outcome.ok
    assert len(session.server.joins) == cold.max_attempts


# -- item 3: a flapping server is not retried forever ---------------------------------------


@pytest.mark.parametrize("socket_tier", ["fresh_session", "hangs_then_fresh"])
async def test_a_server_that_drops_every_link_after_a_second_gives_up(
    jitter: str, socket_tier: str
) -> None:
    """Every link dies 1 s after it came up. ``fresh_session``: the server refuses
    connection-state recovery (a new session at once, every cold attempt succeeds);
    ``hangs_then_fresh``: it leaves every connection unanswered for longer than
    ``stable_after`` first, then its first join fails, so the socket tier spends seconds
    that must not count as a stable period."""
    policy = RetryPolicy(max_attempts=3, base=0.01, cap=0.05)
    session = _Session(SessionConfig(reconnect_window=22.0, cold_reconnect=policy))
    session.server.keeps_sessions = False
    flaps = 0
    outcome = Outcome("cold", True)
    while outcome.ok and flaps < 30:
        await session.clock.advance(1.0)  # the link lives one second
        flaps += 1
        if socket_tier == "hangs_then_fresh":
            session.server.hang_until = session.clock.monotonic() + policy.stable_after + 1.0
            session.server.failing_joins = 1
        outcome = await session.drop()
    assert not outcome.ok, f"still recovering after {flaps} flaps: retried forever"
    [gave_up] = session.named("gave_up")
    assert gave_up["tier"] == "cold"
    assert session.named("retry_budget_reset") == []
    # Each cold reconnect that did not hold for stable_after counts against the streak.
    assert flaps <= policy.max_attempts + 1
    assert session.machine.state == "failed"


class _DeadMediaLanes:
    """Media lanes whose downlink never recovers: each in-place attempt runs its whole
    ``media_recovery_timeout`` on the fake clock, then fails."""

    asr = None
    stv = None

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    async def recover_stv(self, emit: Any, timeout: float) -> str:
        await self._clock.sleep(timeout)
        raise AvatarError(ErrorCode.MEDIA_FAILED, "no frame after re-subscribing")


async def test_a_stable_period_ends_when_media_is_lost_not_when_it_escalates() -> None:
    """Rebuilt at t0, the downlink dies at t0 + 1 s and its in-place recovery takes 20 s to
    fail: the escalation to the cold tier is judged on the 1 s the link was whole, so the
    rebuild counts and a 1-attempt streak is spent (before, the 21 s counted as stable)."""
    policy = RetryPolicy(max_attempts=1, base=0.0, cap=0.0, min_span=0.0)
    config = SessionConfig(
        cold_reconnect=policy, media_recovery_timeout=10.0, max_media_recoveries=2
    )
    session = _Session(config)
    session.machine.fire("session_lost")
    assert (await session.controller.recover_cold("rebuild")).ok
    await session.clock.advance(1.0)
    link = session.slot.current
    assert link is not None
    lanes = _DeadMediaLanes(session.clock)
    link.lanes = lanes  # type: ignore[assignment]
    session.controller.media._start_media_recovery(link, lanes, "stv", "no frames")  # type: ignore[arg-type]
    assert session.machine.state == "recovering_media"
    task = session.slot.tasks(link).running("stv")  # a task of the link's own scope
    assert task is not None
    await session.run(task, 30.0)
    assert task.done() and task.exception() is None
    assert session.named("retry_budget_reset") == []
    [gave_up] = session.named("gave_up")
    assert gave_up == {"tier": "cold", "attempts": 0, "code": "gave_up"}
    assert session.machine.state == "failed"


# -- the pure rules ---------------------------------------------------------------------------


def test_the_socket_schedule_is_a_floor_clamped_at_its_last_entry() -> None:
    rng = random.Random(3)
    assert socket_tier_delay(0) == 0.0
    for retry in range(1, 12):
        floor = SOCKET_TIER_DELAYS[min(retry, len(SOCKET_TIER_DELAYS)) - 1]
        for _ in range(50):
            assert floor <= socket_tier_delay(retry, rng) <= floor * (1 + SOCKET_TIER_JITTER)
    # The default five attempts start at 0, 0.3, 1.5, 4.2 and 9.0 s at the earliest.
    starts = list(itertools.accumulate([0.0, *SOCKET_TIER_DELAYS[:4]]))
    assert starts == pytest.approx([0.0, 0.3, 1.5, 4.2, 9.0])


def test_a_stable_period_ends_when_the_link_is_first_lost() -> None:
    """Up 1 s, then lost; the cold tier starts 30 s later (the socket tier failing in
    between): not stable, and the reconnect that did not hold counts."""
    streak = ColdStreak(RetryPolicy(max_attempts=3))
    streak.begin_cold(0.0)
    streak.failed()
    streak.succeeded(1.0)
    streak.lost(2.0)
    assert streak.begin_cold(32.0) is None
    assert streak.spent == 2
    assert streak.lost_at == 2.0  # the outage (and its span) began at the loss


def test_any_uninterrupted_stretch_of_stable_after_renews_the_budget() -> None:
    """Up 12 s, a blip restored in place, up 1 s, lost: the 12 s stretch was stable."""
    streak = ColdStreak(RetryPolicy(max_attempts=3, stable_after=10.0))
    streak.begin_cold(0.0)
    streak.failed()
    streak.failed()
    streak.succeeded(1.0)
    streak.lost(13.0)
    streak.restored(13.1)
    streak.lost(14.1)
    assert streak.begin_cold(20.0) == BudgetReset(spent=2, stable_for=pytest.approx(12.0))
    assert streak.spent == 0


def test_media_lost_then_restored_splits_the_stretch() -> None:
    """Media lost 1 s after a rebuild and recovered in place only after 20 s: the stretch
    ended at the loss, so an escalation then is judged on 1 s, not 21 s."""
    streak = ColdStreak(RetryPolicy(max_attempts=3, stable_after=10.0))
    streak.begin_cold(0.0)
    streak.succeeded(0.0)
    streak.lost(1.0)  # media down
    streak.begin_cold(21.0)  # its recovery failed: escalated
    assert streak.spent == 1


def test_the_span_is_owed_only_to_an_outage_that_begins_with_budget_left() -> None:
    policy = RetryPolicy(max_attempts=2, min_span=10.0)
    streak = ColdStreak(policy)
    streak.begin_cold(100.0)
    streak.failed()
    streak.failed()
    assert not streak.exhausted(100.5)  # attempts spent, span not
    assert streak.wait(0.0, 100.5) == SPAN_RETRY_FLOOR  # spaced, not a burst
    assert streak.wait(30.0, 109.8) == pytest.approx(0.2)  # never past the span's end
    assert streak.exhausted(110.0)
    streak.succeeded(111.0)
    streak.lost(112.0)  # lost again 1 s later: the streak is spent before the outage begins
    streak.begin_cold(112.0)
    assert streak.exhausted(112.0)


def test_min_span_is_a_validated_retry_policy_field() -> None:
    assert RetryPolicy().min_span == 10.0
    for bad in (-1.0, math.inf, True, "10"):
        with pytest.raises(AvatarError, match=r"RetryPolicy\.min_span "):
            RetryPolicy(min_span=bad)  # type: ignore[arg-type]
    assert RetryPolicy(base=1.0, cap=30.0, jitter="none").delay(5000) == 30.0  # no overflow
