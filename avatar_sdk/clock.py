"""Time, injected: the recovery tiers, watchdogs and timers read it from a :class:`Clock`.

:class:`SystemClock` is the real one. :class:`FakeClock` (also exported by
``avatar_sdk.testing``) is a virtual clock for tests of the logic that waits: ``sleep()``
returns when a test calls :meth:`FakeClock.advance` past its deadline, so backoffs, stall
windows and timeouts are checked in microseconds and deterministically.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Monotonic seconds and a sleep on that time line (wall time for suspend detection)."""

    def monotonic(self) -> float: ...
    def wall(self) -> float: ...
    async def sleep(self, seconds: float) -> None: ...
    def call_later(self, seconds: float, callback: Callable[[], None]) -> Timer: ...


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.time``, ``asyncio.sleep``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def call_later(self, seconds: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, seconds), callback)


SYSTEM_CLOCK = SystemClock()


class _FakeTimer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A virtual clock: time moves only when :meth:`advance` is called."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._wall_offset = 1_700_000_000.0
        self._timers: list[tuple[float, int, _FakeTimer]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    def jump_wall(self, seconds: float) -> None:
        """Move the wall clock alone (a host that slept: monotonic time stood still)."""
        self._wall_offset += seconds

    def call_later(self, seconds: float, callback: Callable[[], None]) -> Timer:
        timer = _FakeTimer(callback)
        heapq.heappush(self._timers, (self._now + max(0.0, seconds), next(self._order), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)  # a zero wait yields, like asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, lambda: _resolve(fut))
        try:
            await fut
        finally:
            timer.cancel()

    @property
    def sleepers(self) -> int:
        """Timers still due on this clock."""
        return sum(1 for _, _, t in self._timers if not t.cancelled)

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing every timer due on the way, in order,
        and letting the woken tasks run before time moves on."""
        target = self._now + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, when)
            if not timer.cancelled:
                timer.callback()
            for _ in range(5):
                await asyncio.sleep(0)
        self._now = target
        for _ in range(5):
            await asyncio.sleep(0)


async def sleep_or(clock: Clock, seconds: float, wake: asyncio.Event) -> None:
    """Sleep ``seconds`` on ``clock``, cut short when ``wake`` is set (a changed deadline,
    a peer going down). The timer is a clock callback, not a task; only the event's wait
    runs as one, cancelled and awaited before returning, so nothing leaks."""
    timer_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    timer = clock.call_later(seconds, lambda: _resolve(timer_done))
    woken = asyncio.ensure_future(wake.wait())
    waits: set[asyncio.Future[Any]] = {timer_done, woken}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
        woken.cancel()
        await asyncio.gather(woken, return_exceptions=True)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
