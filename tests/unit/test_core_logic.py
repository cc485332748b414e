"""Pure logic: the machine's table and decisions, retry policy, event bus, redaction, URLs."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from avatar_sdk import AvatarError, ErrorCode, RetryPolicy, SessionConfig
from avatar_sdk.errors import CATALOGUE
from avatar_sdk.events.bus import EventBus, EventStream
from avatar_sdk.redact import RedactingFilter, redact, register_secret
from avatar_sdk.session.core.capacity import capacity_delay
from avatar_sdk.session.core.clock_jump import ClockJumpDetector
from avatar_sdk.session.core.decisions import decide_connect_failure, decide_disconnect
from avatar_sdk.session.core.diagram import mermaid
from avatar_sdk.session.core.machine import (
    STEP_TIMEOUTS,
    InvalidTransition,
    SessionMachine,
    step_timeout,
)

CONTRACT_STATES = {
    "idle", "connecting_socket", "connecting_joining", "connecting_stv_session",
    "connecting_agent", "connecting_ready", "connecting_asr", "connecting_video",
    "connecting_approving", "connected", "reconnecting", "recovering_media",
    "cold_reconnecting", "queued", "paused", "disconnecting", "ended", "failed",
}  # fmt: skip


def test_every_contract_state_is_in_the_diagram() -> None:
    text = mermaid()
    for state in CONTRACT_STATES:
        assert state in text, state


def test_machine_refuses_undeclared_transitions_and_terminal_states_stay() -> None:
    changes: list[tuple[str, str, str]] = []
    m = SessionMachine(lambda *c: changes.append(c), strict=True)
    assert not m.try_fire("approved")  # not from idle
    with pytest.raises(InvalidTransition, match="'approved' is not declared from idle"):
        m.fire("approved")
    assert m.state == "idle"
    for trigger in ("start", "socket_open", "joined", "stv_ready", "agent_shown", "media_skipped"):
        m.fire(trigger)
    assert m.state == "connecting_approving"
    m.fire("fail")
    assert m.state == "failed" and m.terminal
    for trigger in ("start", "end", "fail", "recovered", "retry"):
        assert not m.try_fire(trigger)
    assert changes[0] == ("connecting_socket", "idle", "start")


def test_a_lenient_machine_logs_an_undeclared_transition_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    m = SessionMachine(strict=False)
    with caplog.at_level(logging.ERROR, logger="avatar_sdk.session.core.machine"):
        m.fire("recovered")
    assert m.state == "idle"
    assert "not declared" in caplog.text


def _connected(**data: bool) -> SessionMachine:
    m = SessionMachine(strict=True)
    for trigger in ("start", "socket_open", "joined", "stv_ready", "agent_shown"):
        m.fire(trigger)
    m.fire("media_skipped")
    m.fire("approved")
    m.set(**data)
    return m


def test_a_paused_session_returns_to_paused_after_either_recovery_tier() -> None:
    m = _connected()
    m.fire("pause")
    assert m.data.user_paused
    m.fire("transport_lost")
    m.fire("recovered")
    assert m.state == "paused"
    m.fire("transport_lost")
    m.fire("recovery_failed")
    m.fire("cold_reconnected")
    assert m.state == "paused"
    m.fire("resume")
    assert m.state == "connected" and not m.data.user_paused
    m.fire("transport_lost")
    m.fire("recovered")
    assert m.state == "connected"


def test_machine_data_is_only_known_fields() -> None:
    m = _connected()
    m.set(backing_off=True, reason="x")
    assert m.data.backing_off and m.data.reason == "x"
    with pytest.raises(AttributeError):
        m.set(not_a_field=True)


def test_any_connecting_substate_can_fail_or_queue() -> None:
    for steps in (0, 2, 5):
        m = SessionMachine()
        m.fire("start")
        for trigger in ("socket_open", "joined", "stv_ready", "agent_shown", "media_skipped")[
            :steps
        ]:
            m.fire(trigger)
        assert m.can("fail") and m.can("capacity_unavailable")


@pytest.mark.parametrize(
    ("state", "reason", "action"),
    [
        ("connected", "transport close", "recover_socket"),
        ("connected", "ping timeout", "recover_socket"),
        ("paused", "transport error", "recover_socket"),
        ("connected", "io server disconnect", "end"),
        ("connected", "io client disconnect", "end"),
        ("connecting_joining", "transport close", "abort_connect"),
        ("reconnecting", "transport close", "ignore"),
        ("ended", "transport close", "ignore"),
        # a CONNECT_ERROR for the connected namespace: one socket-tier try decides
        ("connected", "io server refused", "recover_socket"),
        ("paused", "io server refused", "recover_socket"),
        # an oversized message: resuming would replay it, so rebuild
        ("connected", "message too big", "recover_cold"),
        ("recovering_media", "message too big", "recover_cold"),
        ("reconnecting", "message too big", "ignore"),
        ("connecting_socket", "message too big", "abort_connect"),
    ],
)
def test_disconnect_decisions(state: str, reason: str, action: str) -> None:
    assert decide_disconnect(state, reason).action == action


def test_connect_failure_decision() -> None:
    assert decide_connect_failure(ErrorCode.CAPACITY_UNAVAILABLE) == "capacity_unavailable"
    assert decide_connect_failure(ErrorCode.JOIN_TIMEOUT) == "fail"


def test_step_timeouts_come_from_config() -> None:
    cfg = SessionConfig(join_room_timeout=1.5, agent_timeout=2.5)
    assert step_timeout(cfg, "clientConfiguration") == (1.5, ErrorCode.JOIN_TIMEOUT)
    assert step_timeout(cfg, "askPermissions") == (2.5, ErrorCode.AGENT_TIMEOUT)
    assert set(STEP_TIMEOUTS) >= {"onServerConnected", "joinComplete", "showAgent"}


def test_retry_policy_first_retry_immediate_then_capped_full_jitter() -> None:
    policy = RetryPolicy(base=0.25, cap=1.0)
    rng = random.Random(7)
    assert policy.delay(1) == 0.0
    delays = [policy.delay(n, rng) for n in range(2, 40)]
    assert all(0.0 <= d <= 1.0 for d in delays)
    assert RetryPolicy(jitter="none", base=0.25, cap=1.0).delay(3) == 0.5
    with pytest.raises(AvatarError, match=r"RetryPolicy\.max_attempts "):
        RetryPolicy(max_attempts=0)
    with pytest.raises(AvatarError, match=r"SessionConfig\.agent_timeout "):
        SessionConfig(agent_timeout=-1)
    assert SessionConfig().effective_hard_tool_spiral_limit == 30


def test_catalogue_covers_every_code_and_non_retryables() -> None:
    assert set(CATALOGUE) == set(ErrorCode)
    for code in (
        "auth_failed",
        "tier_exceeded",
        "bad_request",
        "peer_removed",
        "unsupported_client",
    ):
        assert not AvatarError(ErrorCode(code)).retryable
    assert AvatarError(ErrorCode.CAPACITY_UNAVAILABLE).retryable


async def test_event_bus_isolates_callbacks_and_serves_iterators_and_waiters() -> None:
    bus = EventBus()
    seen: list[str] = []
    bus.on("x", lambda e: seen.append(e.data["v"]))
    bus.on("x", lambda e: 1 / 0)
    errors: list[str] = []
    bus.on("callback_error", lambda e: errors.append(e.data["event"]))
    unsubscribe = bus.on("x", lambda e: seen.append("second"))
    waiter = bus.wait_for("x", timeout=1)  # registered now, awaited below
    bus.emit("x", {"v": "a"})
    unsubscribe()
    bus.emit("x", {"v": "b"})
    assert seen == ["a", "second", "b"]
    assert errors == ["x", "x"]
    assert (await waiter).data == {"v": "a"}
    with pytest.raises(TimeoutError):
        await bus.wait_for("never", timeout=0.01)

    async def collect(stream: EventStream) -> list[str]:
        return [e.name async for e in stream]

    task = asyncio.ensure_future(collect(bus.events("y")))  # subscribed here, now
    bus.emit("y")
    bus.emit("z")
    await bus.aclose()
    assert await task == ["y"]


def test_redacting_filter_scrubs_registered_secrets() -> None:
    register_secret("tok-SUPER-secret-123")
    assert redact("auth tok-SUPER-secret-123 here") == "auth <redacted> here"
    record = logging.LogRecord(
        "engineio.client", logging.INFO, "f", 1, "sent %s", ("tok-SUPER-secret-123",), None
    )
    RedactingFilter().filter(record)
    assert "tok-SUPER-secret-123" not in record.getMessage()


def test_capacity_delay_clamps_and_jitters_within_15_percent() -> None:
    rng = random.Random(1)
    schedule = (30.0, 45.0, 60.0)
    assert 25.5 <= capacity_delay(schedule, 1, rng) <= 34.5
    assert all(51.0 <= capacity_delay(schedule, n, rng) <= 69.0 for n in (3, 4, 50))
    assert capacity_delay((), 1) == 0.0


def test_clock_jump_detector_sees_a_suspend_only() -> None:
    detector = ClockJumpDetector(threshold=2.0)
    assert detector.check(1000.0, 10.0) is None
    assert detector.check(1000.5, 10.5) is None  # normal tick
    assert detector.check(1001.5, 11.0) is None  # NTP slew of 0.5 s: ignored
    jump = detector.check(1061.5, 11.5)  # 60 s of wall time in 0.5 s of monotonic time
    assert jump is not None and 59.0 < jump < 60.0
