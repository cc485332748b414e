"""The pure arithmetic of the server's time cap and of renewal (issue 19):
``session/core/renewal_plan.py``, and the checks of ``RenewalPolicy``. No I/O, no clock of its
own: every time is given."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from avatar_sdk import AvatarError, AvatarSession, ErrorCode, RenewalPolicy, SessionConfig
from avatar_sdk.session.core.renewal_plan import (
    Boundary,
    TimeLeft,
    effective_lead,
    renewal_due,
    swap_deadline,
)
from avatar_sdk.testing import FakeClock


def test_time_left_is_unknown_until_a_cap_or_a_warning() -> None:
    t = TimeLeft()
    assert t.left(100.0) is None
    t.start(100.0)
    assert t.left(130.0) is None


async def test_time_left_counts_down_from_the_configured_cap_on_the_injected_clock() -> None:
    clock = FakeClock()
    t = TimeLeft(cap=600.0)
    t.start(clock.monotonic())
    await clock.advance(45.0)
    assert t.left(clock.monotonic()) == pytest.approx(555.0)
    await clock.advance(1000.0)
    assert t.left(clock.monotonic()) == 0.0


async def test_the_watch_starts_a_renewal_at_the_lead_time_under_a_fake_clock() -> None:
    """The session's watch (``RenewalController.watch``), on a fake clock: no renewal while
    the cap is far, one when ``time_left`` reaches the lead time, none out of budget."""
    clock = FakeClock()
    config = SessionConfig(max_conversation_length=60.0, renewal=RenewalPolicy(lead_time=20.0))
    session = AvatarSession(
        "http://127.0.0.1:9", "tok", media=False, allow_insecure_transport=True,
        config=config, clock=clock,
    )  # fmt: skip
    renewal = session._renewal
    started: list[float] = []

    async def renew(reason: str) -> None:
        started.append(clock.monotonic())
        renewal.started(_Approved(clock.monotonic()))  # as a swap does: a new count
        session._stats.renewals += 1

    renewal.renew = renew  # type: ignore[method-assign]
    session._machine.fire("start")
    for step in ("socket_open", "joined", "stv_ready", "agent_shown", "media_skipped", "approved"):
        session._machine.fire(step)
    renewal.started(_Approved(clock.monotonic()))
    t0 = clock.monotonic()
    watch = asyncio.ensure_future(renewal.watch())
    await clock.advance(39.0)
    assert started == []
    await clock.advance(1.5)
    assert [round(t - t0, 1) for t in started] == [40.0]  # 60 s cap, 20 s lead
    await clock.advance(40.5)
    assert [round(t - t0, 1) for t in started] == [40.0, 80.0]
    watch.cancel()
    await asyncio.gather(watch, return_exceptions=True)
    await session.close()


@dataclasses.dataclass
class _Approved:
    """A link as the watch sees it: only its approval time."""

    approved_at: float


def test_a_warning_wins_and_its_cap_is_learned_for_the_next_server_session() -> None:
    t = TimeLeft(cap=600.0)
    t.start(0.0)
    t.warn(60.0, at=480.0)  # the server's cap is 540 s, not the 600 configured
    assert t.left(500.0) == pytest.approx(40.0)
    assert t.known_cap == pytest.approx(540.0)
    t.start(1000.0)  # a renewal: a new count, from the learned cap
    assert t.warned is None
    assert t.left(1100.0) == pytest.approx(440.0)


def test_a_warning_without_a_number_says_nothing() -> None:
    t = TimeLeft()
    t.start(0.0)
    t.warn(None, at=10.0)
    t.warn(-5.0, at=10.0)
    assert t.left(20.0) is None


def test_renewal_is_due_within_the_lead_time_and_never_out_of_budget() -> None:
    policy = RenewalPolicy(lead_time=30.0, max_renewals=2, max_duration=3600.0)

    def due(left: float | None, renewals: int = 0, running_for: float = 0.0) -> str:
        return renewal_due(policy, left, renewals=renewals, running_for=running_for)

    assert renewal_due(None, 1.0, renewals=0, running_for=0.0) == "never"
    assert due(None) == "later"
    assert due(31.0) == "later"
    assert due(30.0) == "now"
    assert due(5.0, renewals=2) == "never"
    assert due(5.0, running_for=3600.0) == "never"


def test_a_short_cap_shortens_the_lead_and_the_margin() -> None:
    policy = RenewalPolicy(lead_time=30.0, safety_margin=3.0)
    assert effective_lead(policy, None) == (30.0, 3.0)
    assert effective_lead(policy, 600.0) == (30.0, 3.0)
    assert effective_lead(policy, 10.0) == (5.0, 1.25)
    # A renewal every half cap at most, not one right after another.
    assert renewal_due(policy, 6.0, renewals=0, running_for=0.0, cap=10.0) == "later"
    assert renewal_due(policy, 5.0, renewals=0, running_for=0.0, cap=10.0) == "now"


def test_the_swap_waits_for_a_boundary_at_most_until_the_last_safe_moment() -> None:
    policy = RenewalPolicy(lead_time=30.0, boundary_wait=15.0, safety_margin=3.0)
    assert swap_deadline(policy, ready_at=100.0, now=100.0, left=None) == 115.0
    assert swap_deadline(policy, ready_at=100.0, now=100.0, left=25.0) == 115.0
    assert swap_deadline(policy, ready_at=100.0, now=105.0, left=5.0) == 107.0
    assert swap_deadline(policy, ready_at=100.0, now=105.0, left=1.0) == 105.0


def test_a_boundary_needs_every_part_quiet() -> None:
    quiet = Boundary(True, False, True, 0, 0, 0, 0)
    assert quiet.reached
    for changed in (
        {"usable": False}, {"floor_busy": True}, {"gate_open": False},
        {"unconfirmed_turns": 1}, {"held_turns": 1}, {"awaiting_replies": 1},
        {"pending_tool_calls": 1},
    ):  # fmt: skip
        assert not dataclasses.replace(quiet, **changed).reached, changed


@pytest.mark.parametrize(
    "fields",
    [
        {"lead_time": -1},
        {"boundary_wait": float("nan")},
        {"safety_margin": 40.0},  # not less than the lead time
        {"max_renewals": -1},
        {"max_duration": -5},
        {"make_before_break": "yes"},
        {"retry": 3},
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(fields: dict[str, object]) -> None:
    with pytest.raises(AvatarError) as refused:
        RenewalPolicy(**fields)  # type: ignore[arg-type]
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert next(iter(fields)) in str(refused.value)


def test_the_session_config_fields() -> None:
    assert SessionConfig().renewal is None  # off by default
    assert SessionConfig().max_conversation_length is None
    assert SessionConfig(renewal=RenewalPolicy()).renewal == RenewalPolicy()
    for bad in ({"renewal": "on"}, {"max_conversation_length": 0}, {"max_conversation_length": -1}):
        with pytest.raises(AvatarError):
            SessionConfig(**bad)  # type: ignore[arg-type]


def test_the_machine_declares_the_renewing_state_and_draws_it() -> None:
    from avatar_sdk.session.core.diagram import mermaid  # noqa: PLC0415
    from avatar_sdk.session.core.machine import SessionMachine  # noqa: PLC0415

    m = SessionMachine(strict=True)
    for step in ("start", "socket_open", "joined", "stv_ready", "agent_shown", "media_skipped"):
        m.fire(step)
    m.fire("approved")
    assert not m.can("renewed")  # only from renewing
    m.fire("renew_break")
    assert m.state == "renewing" and m.takes_turns and not m.usable and not m.link_up
    assert m.health().upstream == "connecting"
    m.fire("renewed")
    assert m.state == "connected"
    m.fire("renew_break")
    m.fire("renewal_failed")
    assert m.state == "cold_reconnecting"
    diagram = mermaid()
    for line in (
        "connected --> renewing: renew_break",
        "renewing --> connected: renewed",
        "renewing --> cold_reconnecting: renewal_failed",
        "renewing --> disconnecting: end",
    ):
        assert line in diagram, line
