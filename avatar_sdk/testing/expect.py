"""``expect_events``: assert that a session emits events in an order, within a time.

Tests of a bot read best as the story they check: "a drop, then a reconnect, then the
avatar speaks again". ``expect_events`` subscribes when it is *called* (like
``session.expect``), so it can be set up before the action that triggers the events and
awaited after it without missing any; other events in between are allowed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..events.bus import Event, EventSource, EventStream

__all__ = ["EventSequence", "expect_events"]

#: One expected step: an event name, or a name and the data fields it must carry.
Step = str | tuple[str, Mapping[str, Any]]


def _describe(step: Step) -> str:
    if isinstance(step, str):
        return step
    name, fields = step
    shown = ", ".join(f"{k}={v!r}" for k, v in fields.items())
    return f"{name}({shown})"


def _matches(step: Step, event: Event) -> bool:
    if isinstance(step, str):
        return event.name == step
    name, fields = step
    return event.name == name and all(
        k in event.data and event.data[k] == v for k, v in fields.items()
    )


class EventSequence:
    """The events ``steps`` in that order (others may come between), subscribed when made.

    Await it for the matched :class:`~avatar_sdk.events.bus.Event` list. It raises
    ``AssertionError`` naming the missing step and listing what the session did emit when
    ``timeout`` (seconds, counted from creation) passes or the session ends first.
    """

    def __init__(self, session: EventSource, steps: Sequence[Step], timeout: float) -> None:
        if isinstance(steps, str) or not steps:
            raise TypeError("steps must be a non-empty list of event names")
        for step in steps:
            if not isinstance(step, str | tuple):
                raise TypeError(f"a step is an event name or (name, {{field: value}}): {step!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise TypeError(f"timeout must be seconds (a number), not {type(timeout).__name__}")
        self.steps: list[Step] = list(steps)
        self.timeout = timeout
        self._deadline = time.monotonic() + timeout
        self._stream: EventStream = session.events()
        self._seen: list[str] = []
        self._result: list[Event] | None = None

    def __await__(self) -> Generator[Any, None, list[Event]]:
        return self.wait().__await__()

    async def wait(self) -> list[Event]:
        """Await the sequence (a coroutine, for ``asyncio.create_task``)."""
        if self._result is not None:
            return self._result
        matched: list[Event] = []
        try:
            for step in self.steps:
                matched.append(await self._next_match(step, matched))
        finally:
            await self._stream.aclose()
        self._result = matched
        return matched

    async def _next_match(self, step: Step, matched: list[Event]) -> Event:
        while True:
            remaining = self._deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                event = await asyncio.wait_for(self._stream.__anext__(), remaining)
            except TimeoutError:
                raise AssertionError(
                    self._failure(step, matched, f"not within {self.timeout:g}s")
                ) from None
            except StopAsyncIteration:
                raise AssertionError(
                    self._failure(step, matched, "the session ended first")
                ) from None
            self._seen.append(event.name)
            if _matches(step, event):
                return event

    def _failure(self, step: Step, matched: list[Event], why: str) -> str:
        done = [_describe(s) for s in self.steps[: len(matched)]]
        seen = ", ".join(self._seen[-30:]) or "nothing"
        return (
            f"expected event {_describe(step)!r} {why}"
            f" (matched so far: {done or 'none'}; the session emitted: {seen})"
        )


def expect_events(session: EventSource, steps: Sequence[Step], *, timeout: float) -> EventSequence:
    """Expect the session to emit ``steps`` in order within ``timeout`` seconds.

    ``steps`` are event names, or ``(name, {field: value})`` pairs the event's data must
    match; other events may come between them. Subscribed at call time::

        waiter = expect_events(session, ["reconnecting", "reconnected"], timeout=5)
        await staging.faults.drop_socket()
        events = await waiter            # the matched events, in order

    ``await expect_events(...)`` right away is fine for events the test has not triggered
    yet. A miss raises ``AssertionError`` saying what came instead. ``timeout`` is
    keyword-only, and a value that is not a number of seconds is a ``TypeError`` here.
    """
    return EventSequence(session, steps, timeout)
