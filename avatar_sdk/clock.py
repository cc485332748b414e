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
from collections.abc import Awaitable
from typing import Any, Protocol


class Clock(Protocol):
    """Monotonic seconds and a sleep on that time line (wall time for suspend detection)."""

    def monotonic(self) -> float: ...
    def wall(self) -> float: ...
    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.time``, ``asyncio.sleep``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


SYSTEM_CLOCK = SystemClock()


class FakeClock:
    """A virtual clock: time moves only when :meth:`advance` is called."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._wall_offset = 1_700_000_000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    def jump_wall(self, seconds: float) -> None:
        """Move the wall clock alone (a host that slept: monotonic time stood still)."""
        self._wall_offset += seconds

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)  # a zero wait yields, like asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + max(0.0, seconds), next(self._order), fut))
        await fut

    @property
    def sleepers(self) -> int:
        """Tasks currently sleeping on this clock."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking every sleeper due on the way, in order,
        and letting each woken task run before time moves on."""
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            when, _, fut = heapq.heappop(self._sleepers)
            self._now = max(self._now, when)
            if not fut.done():
                fut.set_result(None)
            for _ in range(5):
                await asyncio.sleep(0)
        self._now = target
        for _ in range(5):
            await asyncio.sleep(0)


async def sleep_or(clock: Clock, seconds: float, wake: Awaitable[Any]) -> None:
    """Sleep ``seconds`` on ``clock``, cut short when ``wake`` finishes first (an event, a
    peer going down); whichever is left is cancelled and awaited, so nothing leaks."""
    waits = {asyncio.ensure_future(clock.sleep(seconds)), asyncio.ensure_future(wake)}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
