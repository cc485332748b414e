"""Events: the one way the SDK tells the application what happened.

Callbacks may be sync or async. A callback that raises is isolated: the session goes on and
a ``callback_error`` event is emitted (never recursively for a failing ``callback_error``
handler). Async callbacks run as tasks owned by the bus and are cancelled on ``close()``.

Every subscription starts when its method is called, never lazily at the first ``await`` or
iteration: ``w = session.expect("reconnected")`` before a fault and ``await w`` after it
cannot miss the event. Once the session ended the bus is closed, and waiting on it fails at
once with ``AvatarError(CLOSED)`` instead of hanging. Event names and payload shapes:
:mod:`avatar_sdk.events.names`.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import math
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar, overload

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from .names import EventName
from .stream import Event, EventStream, Expectation, Subscriber

log = sdk_logger(__name__)

__all__ = [
    "DEFAULT_QUEUE_CAP",
    "Callback",
    "Event",
    "EventBus",
    "EventSource",
    "EventStream",
    "Expectation",
    "known_event",
]

Callback = Callable[["Event"], Awaitable[None] | None] | Callable[["Event"], Any]
_F = TypeVar("_F", bound=Callable[..., Any])

#: Subscribers of ``events()`` buffer at most this many events; older ones are dropped
#: (a session takes its bound from ``SessionConfig.event_queue_size``).
DEFAULT_QUEUE_CAP = 10_000


def _key(name: str | EventName) -> str:
    """The plain-string form of an event name (an ``EventName`` is one already)."""
    if not isinstance(name, str):
        raise TypeError(f"event names are strings, not {type(name).__name__}")
    return str(name)


def _closed_error(name: str) -> AvatarError:
    return AvatarError(ErrorCode.CLOSED, f"the session ended: no {name!r} event will come")


def _check_bound(value: object, what: str) -> int:
    """``value`` as a queue bound (an int >= 1), or ``AvatarError(INVALID_ARGUMENT)``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{what} must be an int >= 1 (got {value!r})")
    return value


class EventBus:
    """Fan-out of events to callbacks, async iterators and one-shot waiters.

    Every subscription (``on``, ``events``, ``expect``, ``wait_for``) is registered when the
    method is called, never lazily on first await/iteration: an event emitted between the
    call and the ``await`` is delivered, not lost.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        """``clock``: what stamps each event's ``at`` (a session's own clock, so event
        times and the session's other times are on one line)."""
        self._clock = clock
        self._callbacks: dict[str, list[Callback]] = {}
        #: The live ``events()`` streams and ``expect()`` waiters, which register and remove
        #: themselves here (:class:`~.stream.Registry`).
        self.subscribers: list[Subscriber] = []
        self.waiters: list[Expectation] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.emitted = 0
        #: Events dropped by full ``events()`` buffers, all streams together.
        self.dropped = 0
        self.queue_size = DEFAULT_QUEUE_CAP

    def configure(self, *, queue_size: int | None = None) -> None:
        """Set the default bound of new ``events()`` streams (a session's
        ``event_queue_size``; its ``stats()`` reads :attr:`dropped` and :attr:`emitted`)."""
        if queue_size is not None:
            self.queue_size = _check_bound(queue_size, "event_queue_size")

    @property
    def closed(self) -> bool:
        """True once the bus closed (the session ended): no waiter can be satisfied any more."""
        return self._closed

    # -- subscription -----------------------------------------------------------------------
    def on(self, name: str | EventName, callback: Callback) -> Callable[[], None]:
        """Call ``callback(event)`` for every event named ``name`` (``"*"``: all events).

        Returns a function that unsubscribes.
        """
        if not callable(callback):
            raise TypeError(
                f"callback must be callable (a function of the Event), not {_shown(callback)}"
            )
        key = _key(name)
        if self._closed:
            raise _closed_error(key)
        self._callbacks.setdefault(key, []).append(callback)

        def unsubscribe() -> None:
            callbacks = self._callbacks.get(key)
            if callbacks is not None and callback in callbacks:
                callbacks.remove(callback)

        return unsubscribe

    def events(self, *names: str | EventName, cap: int | None = None) -> EventStream:
        """Events (optionally only those ``names``) from now until the bus closes.

        Subscribed at call time; buffers at most ``cap`` events (default: ``queue_size``;
        the oldest are dropped, and the stream says so, see :class:`EventStream`).
        Raises ``AvatarError(CLOSED)`` at once if the bus has closed.
        """
        if self._closed:
            raise AvatarError(ErrorCode.CLOSED, "the session ended: no further event will come")
        bound = self.queue_size if cap is None else _check_bound(cap, "max_queue")
        return EventStream(self, frozenset(_key(n) for n in names) if names else None, bound)

    def expect(
        self,
        name: str | EventName,
        *,
        predicate: Callable[[Event], bool] | None = None,
        timeout: float | None = None,
    ) -> Expectation:
        """The next event ``name`` (matching ``predicate``), registered now, awaited later.

        ``timeout`` (seconds) counts from this call. Raises ``AvatarError(CLOSED)`` at once
        if the bus has closed, ``TypeError`` for a ``predicate`` that is not callable or a
        ``timeout`` that is not a number. Must be called with an event loop running.
        """
        key = _key(name)
        check_waiter(predicate, timeout)
        if self._closed:
            raise _closed_error(key)
        return Expectation(self, key, predicate, timeout)

    def wait_for(
        self,
        name: str | EventName,
        *,
        timeout: float | None = None,
        predicate: Callable[[Event], bool] | None = None,
    ) -> Coroutine[Any, Any, Event]:
        """The next event ``name`` (matching ``predicate``), or ``TimeoutError`` after
        ``timeout`` seconds; ``AvatarError(CLOSED)`` once the bus closes.

        Registered when called, not when awaited (the returned coroutine only waits), so
        ``w = bus.wait_for(...); trigger(); await w`` cannot miss the event.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            # Made before any loop runs (``asyncio.run(bus.wait_for(...))``): nothing can be
            # emitted before it starts, so registering when it starts misses nothing.
            check_waiter(predicate, timeout)
            return self._wait_later(name, timeout, predicate)
        return self.expect(name, predicate=predicate, timeout=timeout).wait()

    async def _wait_later(
        self,
        name: str | EventName,
        timeout: float | None,
        predicate: Callable[[Event], bool] | None,
    ) -> Event:
        return await self.expect(name, predicate=predicate, timeout=timeout)

    # -- emission ---------------------------------------------------------------------------
    def emit(self, name: str | EventName, data: dict[str, Any] | None = None) -> Event:
        """Deliver an event synchronously to callbacks, iterators and waiters."""
        key = _key(name)
        event = Event(key, data if data is not None else {}, self._clock.monotonic())
        self.emitted += 1
        for sub in list(self.subscribers):
            if sub.push(event):
                self._count_drop()
        for waiter in list(self.waiters):
            if waiter.name != key or waiter.done():
                continue
            if waiter.predicate is not None and not self._safe_predicate(waiter.predicate, event):
                continue
            waiter.offer(event)
        for callback in [*self._callbacks.get(key, ()), *self._callbacks.get("*", ())]:
            self._run_callback(callback, event)
        return event

    def _count_drop(self) -> None:
        # A counter, never an event: telling the whole bus would re-enter the full queues.
        self.dropped += 1

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
        """Close the bus (after a terminal state): every ``events()`` stream ends once it has
        drained, every pending waiter fails with ``AvatarError(CLOSED)``, and later
        ``wait_for``/``expect`` calls fail at once instead of waiting for ever."""
        self._closed = True
        for sub in list(self.subscribers):
            sub.close()
        for waiter in list(self.waiters):
            waiter.fail(_closed_error(waiter.name), quiet=True)

    def in_callback(self) -> bool:
        """Whether the running task is one of this bus's async callbacks (which
        :meth:`aclose` waits for: such a task must not wait for the close in turn)."""
        return asyncio.current_task() in self._tasks

    async def aclose(self, timeout: float = 0.5) -> None:
        """Close the bus (see :meth:`close_streams`), give running async callbacks
        ``timeout`` seconds, then cancel them."""
        self.close_streams()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)


def _shown(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def check_waiter(predicate: object, timeout: object) -> None:
    """Refuse, when a waiter is registered, what would otherwise fail at the first event
    (a predicate that is not callable: logged per event, the waiter never resolving) or
    wait for ever: ``TypeError`` for a wrong type, ``AvatarError(INVALID_ARGUMENT)`` for
    a timeout that is negative or not finite."""
    if predicate is not None and not callable(predicate):
        hint = (
            f"; a timeout is written timeout={predicate!r}"
            if isinstance(predicate, int | float) and not isinstance(predicate, bool)
            else ""
        )
        raise TypeError(
            f"predicate must be callable (a function of the Event returning bool), not"
            f" {_shown(predicate)}{hint}"
        )
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be seconds (a number) or None, not {_shown(timeout)}")
    if not math.isfinite(timeout) or timeout < 0:
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"timeout must be finite seconds >= 0 (got {timeout!r})"
        )


#: Every name a session emits, plus ``"*"`` (all events).
_KNOWN_NAMES: Final = frozenset({str(n) for n in EventName} | {"*"})


def known_event(name: str | EventName) -> str:
    """``name`` if a session can emit it; else ``AvatarError(invalid_argument)`` with the
    closest known names (a typo such as ``"agent_txt"`` would otherwise wait forever)."""
    key = _key(name)
    if key not in _KNOWN_NAMES:
        close = difflib.get_close_matches(key, sorted(_KNOWN_NAMES), n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"unknown event name {key!r}{hint}")
    return key


class EventSource:
    """The public event verbs of a session (both transports): a base class that owns the
    session's :class:`EventBus` and delegates to it; the behaviour lives in the bus. Every
    verb refuses an event name no session emits (``invalid_argument``, with suggestions)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._bus = EventBus(clock)

    @overload
    def on(self, name: str | EventName, callback: Callback) -> Callable[[], None]: ...
    @overload
    def on(self, name: str | EventName) -> Callable[[_F], _F]: ...

    def on(
        self, name: str | EventName, callback: Callback | None = None
    ) -> Callable[[], None] | Callable[[_F], _F]:
        """Call ``callback(event)`` (sync or async) for each event ``name`` (``"*"``: all);
        returns a function that unsubscribes. Without ``callback`` it is a decorator:
        ``@session.on("agent_text")`` registers the function and returns it unchanged.

        A ``callback`` that is not callable raises ``TypeError`` here; on an ended session
        (as every event verb) this raises ``AvatarError(CLOSED)`` at once: no event will
        come."""
        key = known_event(name)
        if callback is not None:
            return self._bus.on(key, callback)

        def register(function: _F) -> _F:
            self._bus.on(key, function)
            return function

        return register

    def events(self, *names: str | EventName, max_queue: int | None = None) -> EventStream:
        """Async iterator of events (optionally only ``names``), subscribed at call time;
        ends when the session ends. ``aclose()`` or ``async with`` unsubscribes early.

        Buffers at most ``max_queue`` events (default ``SessionConfig.event_queue_size``,
        10,000); a consumer that falls behind loses the oldest and reads an
        ``events_dropped`` {count, total} event where they were (``stream.dropped``, and
        ``stats()["events_dropped"]`` for all streams). On an ended session this raises
        ``AvatarError(CLOSED)`` at once."""
        return self._bus.events(*(known_event(n) for n in names), cap=max_queue)

    def expect(
        self,
        name: str | EventName,
        *,
        predicate: Callable[[Event], bool] | None = None,
        timeout: float | None = None,
    ) -> Expectation:
        """The next event ``name`` (for which ``predicate(event)`` is true, if given),
        registered now and awaited later: ``w = session.expect("reconnected", timeout=5);
        <trigger>; event = await w``.

        Everything after the name is keyword-only (``expect(name, 30)`` is a
        ``TypeError``), and checked here: a ``predicate`` that is not callable or a
        ``timeout`` that is not a number raises ``TypeError``, a negative one
        ``AvatarError(INVALID_ARGUMENT)``. ``timeout`` (seconds) counts from this call;
        ``TimeoutError`` names the event. Raises ``AvatarError(CLOSED)`` at once on an
        ended session."""
        return self._bus.expect(known_event(name), predicate=predicate, timeout=timeout)

    def wait_for(
        self,
        name: str | EventName,
        *,
        timeout: float | None = None,
        predicate: Callable[[Event], bool] | None = None,
    ) -> Coroutine[Any, Any, Event]:
        """``await session.wait_for(name, timeout=30)``: the next event ``name`` (for which
        ``predicate(event)`` is true, if given). Subscribed when called, not when awaited;
        ``TimeoutError`` after ``timeout`` seconds; ``AvatarError(CLOSED)`` on an ended
        session, at once. Keyword-only and checked at the call, as :meth:`expect`."""
        return self._bus.wait_for(known_event(name), timeout=timeout, predicate=predicate)
