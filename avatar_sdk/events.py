"""Events: the one way the SDK tells the application what happened.

Callbacks may be sync or async. A callback that raises is isolated: the session goes on and
a ``callback_error`` event is emitted (never recursively for a failing ``callback_error``
handler). Async callbacks run as tasks owned by the bus and are cancelled on ``close()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import AvatarError, ErrorCode

log = logging.getLogger(__name__)

Callback = Callable[["Event"], Awaitable[None] | None] | Callable[["Event"], Any]

#: Subscribers of ``events()`` buffer at most this many events; older ones are dropped.
DEFAULT_QUEUE_CAP = 10_000


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened. ``at`` is ``time.monotonic()`` seconds."""

    name: str
    data: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)


class _Subscriber:
    __slots__ = ("cap", "closed", "dropped", "items", "names", "waiter")

    def __init__(self, names: frozenset[str] | None, cap: int) -> None:
        self.names = names
        self.cap = cap
        self.items: deque[Event] = deque()
        self.dropped = 0
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None

    def push(self, event: Event) -> None:
        if self.names is not None and event.name not in self.names:
            return
        if len(self.items) >= self.cap:
            self.items.popleft()
            self.dropped += 1
        self.items.append(event)
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class EventBus:
    """Fan-out of events to callbacks, async iterators and one-shot waiters."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list[Callback]] = {}
        self._subscribers: list[_Subscriber] = []
        self._waiters: list[tuple[str, Callable[[Event], bool] | None, asyncio.Future[Event]]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.emitted = 0

    # -- subscription -----------------------------------------------------------------------
    def on(self, name: str, callback: Callback) -> Callable[[], None]:
        """Call ``callback(event)`` for every event named ``name`` (``"*"``: all events).

        Returns a function that unsubscribes.
        """
        if not callable(callback):
            raise TypeError("callback must be callable")
        self._callbacks.setdefault(name, []).append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError, KeyError):
                self._callbacks[name].remove(callback)

        return unsubscribe

    async def events(self, *names: str, cap: int = DEFAULT_QUEUE_CAP) -> AsyncIterator[Event]:
        """Iterate over events (optionally only those ``names``) until the bus closes."""
        sub = _Subscriber(frozenset(names) if names else None, cap)
        self._subscribers.append(sub)
        try:
            while True:
                while sub.items:
                    yield sub.items.popleft()
                if sub.closed or self._closed:
                    return
                sub.waiter = asyncio.get_running_loop().create_future()
                await sub.waiter
                sub.waiter = None
        finally:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(sub)

    async def wait_for(
        self,
        name: str,
        timeout: float | None = None,
        predicate: Callable[[Event], bool] | None = None,
    ) -> Event:
        """The next event named ``name`` (matching ``predicate``), or ``TimeoutError``."""
        fut: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
        entry = (name, predicate, fut)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    # -- emission ---------------------------------------------------------------------------
    def emit(self, name: str, data: dict[str, Any] | None = None) -> Event:
        """Deliver an event synchronously to callbacks, iterators and waiters."""
        event = Event(name, data if data is not None else {})
        self.emitted += 1
        for sub in list(self._subscribers):
            sub.push(event)
        for entry in list(self._waiters):
            wname, predicate, fut = entry
            if wname != name or fut.done():
                continue
            if predicate is not None and not self._safe_predicate(predicate, event):
                continue
            fut.set_result(event)
        for callback in [*self._callbacks.get(name, ()), *self._callbacks.get("*", ())]:
            self._run_callback(callback, event)
        return event

    def _safe_predicate(self, predicate: Callable[[Event], bool], event: Event) -> bool:
        try:
            return bool(predicate(event))
        except Exception as exc:
            self._report_callback_error(event, exc)
            return False

    def _run_callback(self, callback: Callback, event: Event) -> None:
        try:
            result = callback(event)
        except Exception as exc:
            self._report_callback_error(event, exc)
            return
        if inspect.isawaitable(result):
            if self._closed:
                # Nothing may outlive the session: drop (and close) late coroutines.
                if inspect.iscoroutine(result):
                    result.close()
                return
            task = asyncio.ensure_future(self._await_callback(result, event))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _await_callback(self, awaitable: Awaitable[Any], event: Event) -> None:
        try:
            await awaitable
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._report_callback_error(event, exc)

    def _report_callback_error(self, event: Event, exc: BaseException) -> None:
        log.warning("callback for %r raised %s", event.name, type(exc).__name__, exc_info=exc)
        if event.name != "callback_error":
            self.emit("callback_error", {"event": event.name, "error": repr(exc)[:500]})

    # -- lifecycle --------------------------------------------------------------------------
    def close_streams(self) -> None:
        """End every ``events()`` iterator once it has drained (after a terminal state)."""
        self._closed = True
        for sub in list(self._subscribers):
            sub.close()

    async def aclose(self, timeout: float = 0.5) -> None:
        """Close iterators, give running async callbacks ``timeout`` seconds, then cancel."""
        self.close_streams()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        for _, _, fut in list(self._waiters):
            if not fut.done():
                fut.set_exception(AvatarError(ErrorCode.CLOSED, "the session ended"))


class EventSource:
    """The public event verbs of a session, over its ``_bus`` (shared by both transports)."""

    _bus: EventBus

    def on(self, name: str, callback: Callback) -> Callable[[], None]:
        """Call ``callback(event)`` for each event ``name`` (``"*"``: all). Returns unsubscribe."""
        return self._bus.on(name, callback)

    def events(self, *names: str) -> AsyncIterator[Event]:
        """Async iterator of events (optionally only ``names``); ends when the session ends."""
        return self._bus.events(*names)

    async def wait_for(
        self,
        name: str,
        timeout: float | None = None,
        predicate: Callable[[Event], bool] | None = None,
    ) -> Event:
        """The next event ``name`` (for which ``predicate(event)`` is true, if given);
        ``TimeoutError`` after ``timeout`` seconds."""
        return await self._bus.wait_for(name, timeout, predicate)
