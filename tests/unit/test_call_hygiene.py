"""A sweep of the public API for arguments that can be misread by position.

A flag or an option passed by position reads as something else at the call site
(``faults.drop_socket(False)``: false what?), and two options of one type in a row
(``wait_for(name, 30)`` vs ``expect(name, 30)``) are silently swapped. So every parameter
of the public surface whose default is a bool, and every option after an event name, is
keyword-only; the few documented positional calls of CONTRACT.md stay (``on(name,
callback)``, ``on_tool_call(name, handler)``, ``capacity_full(seconds)``...).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from avatar_sdk import AvatarSession, ChatSession, RetryPolicy, SessionConfig
from avatar_sdk.events.bus import EventBus, EventSource
from avatar_sdk.fleet.context import ScenarioContext
from avatar_sdk.fleet.plan import SessionSpec
from avatar_sdk.testing.expect import expect_events
from avatar_sdk.testing.staging.brain import Brain
from avatar_sdk.testing.staging.faults import Faults

SURFACE: tuple[type, ...] = (
    AvatarSession,
    ChatSession,
    EventSource,
    EventBus,
    ScenarioContext,
    Faults,
    Brain,
)


def _public_callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    for cls in SURFACE:
        for name, member in inspect.getmembers(cls):
            if (name.startswith("_") and name != "__init__") or not callable(member):
                continue
            yield f"{cls.__name__}.{name}", member
    yield "expect_events", expect_events


def _positional(function: Callable[..., Any]) -> list[inspect.Parameter]:
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return []
    return [
        p
        for p in params
        if p.name != "self" and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


def test_no_flag_of_the_public_api_is_taken_by_position() -> None:
    offenders = [
        f"{where}({p.name}={p.default!r})"
        for where, function in _public_callables()
        for p in _positional(function)
        if isinstance(p.default, bool)
    ]
    assert offenders == []


@pytest.mark.parametrize("verb", ["expect", "wait_for"])
@pytest.mark.parametrize("cls", [EventSource, EventBus, AvatarSession, ChatSession])
def test_nothing_after_the_event_name_is_positional(cls: type, verb: str) -> None:
    assert [p.name for p in _positional(getattr(cls, verb))] == ["name"]


def test_expect_events_takes_its_timeout_by_keyword() -> None:
    assert [p.name for p in _positional(expect_events)] == ["session", "steps"]


def test_settings_are_built_by_keyword() -> None:
    """``SessionConfig(30, 10, 5)`` or ``RetryPolicy(6, 0.0, 0.25)`` would set fields by
    their order in the class body: a reordering, or a reader's guess, swaps timeouts."""
    assert _positional(SessionConfig) == []
    assert _positional(RetryPolicy) == []
    assert [p.name for p in _positional(SessionSpec)] == ["url", "token"]
