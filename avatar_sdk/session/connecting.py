"""Connecting: the first connect of a session, and a ``close()`` that comes during it.

The connect sequence itself is the recovery controller's admission (queued while there is
no capacity, retried under a ``RetryPolicy``); this runs it between the machine's
``start`` and ``approved``, adopts the genie host the backend named at join, and turns
what ends it early into the session's end: a failure fails the session with its code, a
cancellation ends it (``cancelled``), and a ``close()`` meanwhile cancels the attempt and
makes it raise ``closed`` instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..clock import Clock
from ..config import RetryPolicy, SessionConfig
from ..errors import AvatarError, ErrorCode
from .core.machine import SessionMachine, Trigger
from .core.stats import SessionStats
from .endings import Endings
from .genie_host import GenieHost
from .link_slot import LinkSlot
from .recovery import RecoveryController

__all__ = ["Connecting"]


class Connecting:
    """The first connect of one session (module docstring)."""

    def __init__(
        self,
        *,
        config: SessionConfig,
        clock: Clock,
        machine: SessionMachine,
        slot: LinkSlot,
        recovery: RecoveryController,
        genie: GenieHost,
        endings: Endings,
        stats: SessionStats,
    ) -> None:
        self._config = config
        self._clock = clock
        self._machine = machine
        self._slot = slot
        self._recovery = recovery
        self._genie = genie
        self._endings = endings
        self._stats = stats
        self._task: asyncio.Task[Any] | None = None
        self._close_requested = False

    async def run(self, retry: RetryPolicy | None) -> float:
        """Connect, from ``idle`` to ``connected``; returns how long it took (seconds).

        :raises AvatarError: the attempt's error (the session is ``failed``), or ``closed``
            when ``close()`` came meanwhile.
        """
        machine = self._machine
        self._task = asyncio.current_task()
        started = self._clock.monotonic()
        machine.fire(Trigger.START)
        try:
            await self._recovery.admit(machine.fire, retry)
            # A genie host the backend named at join, when none was given (genie_host.py).
            link = self._slot.current
            result = link.result if link is not None else None
            self._genie.after_join(result.client_configuration if result else None)
            machine.fire(Trigger.APPROVED)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            reason = "closed" if self._close_requested else "cancelled"
            await asyncio.shield(self._endings.end(reason, None))
            if self._close_requested and task is not None:
                task.uncancel()
                raise AvatarError(ErrorCode.CLOSED, "close() was called during connect()") from None
            raise
        except AvatarError as error:
            await self._endings.fail(error, reason=f"connect failed: {error.code}")
            raise
        finally:
            self._task = None
        duration = self._clock.monotonic() - started
        self._stats.connect_duration = duration
        return duration

    async def close_requested(self) -> bool:
        """``close()`` was called: a connect under way is cancelled and awaited (within
        ``close_timeout``). True when that left the session over already."""
        self._close_requested = True
        task = self._task
        if task is None or task is asyncio.current_task():
            return False
        task.cancel()
        await asyncio.wait({task}, timeout=self._config.close_timeout)
        return self._machine.terminal
