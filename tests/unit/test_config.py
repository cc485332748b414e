"""SessionConfig and RetryPolicy refuse bad values with invalid_argument naming the field."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from avatar_sdk import AvatarError, ErrorCode, RetryPolicy, SessionConfig


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("agent_timeout", -1),
        ("agent_timeout", math.nan),
        ("agent_timeout", math.inf),
        ("agent_timeout", None),
        ("agent_timeout", True),
        ("agent_timeout", "10"),
        ("max_reconnect_attempts", 2.5),
        ("max_reconnect_attempts", -1),
        ("max_reconnect_attempts", False),
        ("tool_spiral_limit", None),
        ("hard_tool_spiral_limit", 1.5),
        ("hard_tool_spiral_limit", -3),
        ("recover_from_spiral", 1),
        ("handle_signals", "yes"),
        ("cold_reconnect", {"max_attempts": 2}),
        ("capacity_backoff", (30.0, -1.0)),
        ("capacity_backoff", (30.0, math.inf)),
        ("capacity_backoff", [30.0]),
        ("capacity_backoff", (True,)),
        ("max_message_size", 0),
        ("max_message_size", 1023),
        ("max_message_size", -1),
        ("max_message_size", True),
        ("max_message_size", 4.5),
        ("max_message_size", "4MiB"),
        ("max_message_size", None),
    ],
)
def test_session_config_names_the_bad_field(field: str, value: Any) -> None:
    with pytest.raises(AvatarError) as info:
        SessionConfig(**{field: value})
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert f"SessionConfig.{field} " in str(info.value)
    # with_() validates again, with the same error.
    with pytest.raises(AvatarError) as again:
        SessionConfig().with_(**{field: value})
    assert again.value.detail == info.value.detail


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_attempts", 0),
        ("max_attempts", 2.0),
        ("max_attempts", None),
        ("initial", -0.5),
        ("base", math.nan),
        ("cap", "30"),
        ("jitter", "partial"),
        ("reset_after_success", "yes"),
        ("stable_after", -1.0),
        ("stable_after", math.inf),
        ("stable_after", True),
    ],
)
def test_retry_policy_names_the_bad_field(field: str, value: Any) -> None:
    with pytest.raises(AvatarError) as info:
        RetryPolicy(**{field: value})
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert f"RetryPolicy.{field} " in str(info.value)


def test_good_values_pass() -> None:
    cfg = SessionConfig(
        agent_timeout=3,
        max_reconnect_attempts=0,
        hard_tool_spiral_limit=None,
        capacity_backoff=(),
        cold_reconnect=RetryPolicy(max_attempts=1, jitter="none", stable_after=0.0),
    )
    assert cfg.cold_reconnect.stable_after == 0.0
    assert SessionConfig().max_message_size == 4 * 1024 * 1024  # aiohttp's own default
    assert SessionConfig(max_message_size=1024).max_message_size == 1024
    assert RetryPolicy().stable_after == 10.0


def test_ice_zero_candidates_floor_is_gone() -> None:
    """aiortc gathers inside setLocalDescription: the floor never did anything."""
    assert "ice_zero_candidates_floor" not in {f.name for f in dataclasses.fields(SessionConfig)}
    with pytest.raises(TypeError):
        SessionConfig(ice_zero_candidates_floor=3.0)  # type: ignore[call-arg]


def test_event_queue_size_is_a_positive_int() -> None:
    assert SessionConfig().event_queue_size == 10_000
    assert SessionConfig(event_queue_size=1).event_queue_size == 1
    for bad in (0, -5, 2.5, True):
        with pytest.raises(AvatarError) as info:
            SessionConfig(event_queue_size=bad)  # type: ignore[arg-type]
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
        assert "event_queue_size" in str(info.value)
