"""The building blocks of the event bus: the :class:`Event` record, the subscription queue
of one ``events()`` iterator (:class:`EventStream`, draining the :class:`Subscriber` buffer
the bus fills), and the one-shot waiter behind ``expect()`` and ``wait_for()``
(:class:`Expectation`). Both register at construction, so a subscription exists from the
moment its method is called. Used by :mod:`avatar_sdk.events.bus`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..clock import SYSTEM_CLOCK
from ..logs import sdk_logger
from .names import EventName

log = sdk_logger("avatar_sdk.events")

#: The name of the notice a stream yields in place of the events it had to drop.
EVENTS_DROPPED = str(EventName.EVENTS_DROPPED)


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened. ``at``: monotonic seconds on the emitting session's clock
    (the system clock unless the session was given another one)."""

    name: str
    data: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=SYSTEM_CLOCK.monotonic)


class Subscriber:
    """The bounded queue of one ``events()`` stream, as the bus fills it (:meth:`push`,
    :meth:`close`) and the stream drains it (:meth:`take`)."""

    __slots__ = ("cap", "closed", "dropped", "gap", "gap_at", "items", "names", "waiter")

    def __init__(self, names: frozenset[str] | None, cap: int) -> None:
        self.names = names
        self.cap = cap
        self.items: deque[Event] = deque()
        self.dropped = 0
        #: Dropped since the consumer last took an event: the front of ``items`` is where
        #: they were (the oldest go first), so the notice goes out just before it.
        self.gap = 0
        self.gap_at = 0.0
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None

    def push(self, event: Event) -> bool:
        """Queue ``event`` (if it passes the filter); True when that dropped the oldest."""
        if self.names is not None and event.name not in self.names:
            return False
        dropped = len(self.items) >= self.cap
        if dropped:
            self.items.popleft()
            self.dropped += 1
            self.gap += 1
            self.gap_at = event.at
        self.items.append(event)
        self._wake()
        return dropped

    def take(self) -> Event | None:
        """The next event for the consumer: the notice of a gap first, if there is one."""
        if self.gap:
            notice = Event(EVENTS_DROPPED, {"count": self.gap, "total": self.dropped}, self.gap_at)
            self.gap = 0
            return notice
        return self.items.popleft() if self.items else None

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


def _unsubscribe(subscribers: list[Subscriber], sub: Subscriber) -> None:
    if sub in subscribers:
        subscribers.remove(sub)


class Registry(Protocol):
    """What a stream and a waiter need of their bus: whether it closed, and the two lists
    they register in (the bus, :class:`avatar_sdk.events.bus.EventBus`, fills them)."""

    @property
    def closed(self) -> bool: ...

    @property
    def subscribers(self) -> list[Subscriber]: ...

    @property
    def waiters(self) -> list[Expectation]: ...


class EventStream:
    """Async iterator of a bus's events, subscribed when created (not when first iterated),
    so nothing emitted between ``events()`` and the first ``__anext__`` is missed.

    Its buffer is bounded: a consumer that falls behind loses the oldest events, and the
    next thing it reads is ``Event("events_dropped", {"count", "total"})`` standing exactly
    where they were (``count``: lost since the last event read; ``total``: this stream's
    :attr:`dropped`). The notice is delivered whatever names the stream filters on, and
    only to this stream: it never goes through the bus, so a flood cannot feed itself.

    It ends once the bus has closed and the buffer is drained. ``aclose()`` (or leaving
    ``async with``) unsubscribes at once and drops what is buffered; a stream that is simply
    dropped (``break`` out of ``async for``) is unsubscribed when it is garbage collected.
    One consumer at a time: ``__anext__`` is not meant to be awaited by two tasks at once.
    """

    __slots__ = ("__weakref__", "_finalizer", "_sub")

    def __init__(self, bus: Registry, names: frozenset[str] | None, cap: int) -> None:
        sub = Subscriber(names, cap)
        self._sub = sub
        if bus.closed:
            sub.close()
        else:
            bus.subscribers.append(sub)
        # Holds the list and the subscriber, never the stream: a dropped stream is collected.
        self._finalizer = weakref.finalize(self, _unsubscribe, bus.subscribers, sub)
        self._finalizer.atexit = False

    @property
    def dropped(self) -> int:
        """Events discarded because the buffer was full (the oldest go first), in total."""
        return self._sub.dropped

    @property
    def max_queue(self) -> int:
        """The buffer's bound (events)."""
        return self._sub.cap

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        sub = self._sub
        while True:
            event = sub.take()
            if event is not None:
                return event
            if sub.closed:
                self._finalizer()
                raise StopAsyncIteration
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            sub.waiter = waiter
            try:
                await waiter
            finally:
                # A cancelled __anext__ (asyncio.wait_for) leaves the stream usable.
                if sub.waiter is waiter:
                    sub.waiter = None

    async def aclose(self) -> None:
        """Unsubscribe now; iteration ends and buffered events are dropped."""
        self._finalizer()
        self._sub.items.clear()
        self._sub.gap = 0
        self._sub.close()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        names = "*" if self._sub.names is None else ",".join(sorted(self._sub.names))
        state = "closed" if self._sub.closed else "open"
        sub = self._sub
        return f"<EventStream {names} {state} buffered={len(sub.items)} dropped={sub.dropped}>"


class Expectation:
    """The next event ``name`` (for which ``predicate`` is true), registered when created:
    create it before the action that triggers the event, await it after, and nothing is
    missed in between.

    Awaiting it returns the :class:`Event`; awaiting again returns the same event. The
    ``timeout`` (seconds) counts from creation, not from the ``await``: on expiry it raises
    ``TimeoutError`` naming the event. When the bus closes (the session ended) it raises
    ``AvatarError(ErrorCode.CLOSED)``. Cancelling the awaiting task, or :meth:`cancel`,
    unregisters it.
    """

    __slots__ = ("_bus", "_future", "_timer", "name", "predicate", "timeout")

    def __init__(
        self,
        bus: Registry,
        name: str,
        predicate: Callable[[Event], bool] | None,
        timeout: float | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.name = name
        self.predicate = predicate
        self.timeout = timeout
        self._future: asyncio.Future[Event] = loop.create_future()
        self._timer = loop.call_later(timeout, self._expire) if timeout is not None else None
        self._bus = bus
        bus.waiters.append(self)
        # Also covers a cancelled awaiting task, which cancels the future itself.
        self._future.add_done_callback(lambda _: self._unregister())

    def __await__(self) -> Generator[Any, None, Event]:
        return self._future.__await__()

    async def wait(self) -> Event:
        """Await the event (a coroutine, for ``asyncio.create_task``)."""
        return await self._future

    def done(self) -> bool:
        """True once the event arrived, the timeout passed, the bus closed, or cancelled."""
        return self._future.done()

    def cancel(self) -> bool:
        """Stop waiting (unregisters); an ``await`` then raises ``CancelledError``."""
        cancelled = self._future.cancel()
        self._unregister()
        return cancelled

    def offer(self, event: Event) -> None:
        """The bus's call: ``event`` matched; the waiter resolves and leaves the registry."""
        if not self._future.done():
            self._future.set_result(event)
        self._unregister()

    def fail(self, error: BaseException, *, quiet: bool = False) -> None:
        """The bus's call (or the timeout's): the waiter raises ``error`` and leaves."""
        if not self._future.done():
            self._future.set_exception(error)
            if quiet:
                # Marked retrieved: a waiter nobody awaited before the session ended is not
                # worth an "exception was never retrieved" log; an await still raises it.
                self._future.exception()
        self._unregister()

    def _expire(self) -> None:
        self.fail(TimeoutError(f"no {self.name!r} event within {self.timeout:g}s"))

    def _unregister(self) -> None:
        # Synchronous (not only the future's done callback, which runs a loop turn later):
        # a satisfied waiter must not see, or count as waiting for, the next event.
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiters = self._bus.waiters
        if self in waiters:
            waiters.remove(self)

    def __repr__(self) -> str:
        fut = self._future
        state = "pending" if not fut.done() else "cancelled" if fut.cancelled() else "done"
        return f"<Expectation {self.name!r} {state}>"
