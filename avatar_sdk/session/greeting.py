"""The greeting gate: what ``connect()`` waits for once the session is connected.

The thread id rides the greeting's first delta (``think`` / ``init_response``), so a session
that was not given one learns it a few hundred milliseconds after approval. ``connect()``
waits, within the greeting gate, for that delta, at most until the greeting is over (or known
never to begin, ``agent_timeout``) and bounded by ``greeting_timeout``: an app that stores the
thread to resume later has it when ``connect()`` returns. A server that sends no thread id
costs nothing more than its first delta; ``thread_known`` announces a later adoption anyway.
With ``wait_for_greeting`` it then waits for the whole greeting to be over.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..clock import Clock
from ..config import SessionConfig
from ..events.bus import EventBus, Expectation
from ..logs import sdk_logger
from .conversation import ConversationView
from .user_turns import UserTurns

log = sdk_logger(__name__)

__all__ = ["GreetingGate", "ThreadWatch"]


@dataclass(eq=False)
class ThreadWatch:
    """The two events that tell the thread id, registered before the connect sequence ran
    (the greeting may begin before it returns)."""

    known: Expectation
    first_text: Expectation

    def cancel(self) -> None:
        self.known.cancel()
        self.first_text.cancel()


class GreetingGate:
    """The waits of ``connect()`` after approval (module docstring)."""

    def __init__(
        self,
        *,
        config: SessionConfig,
        clock: Clock,
        bus: EventBus,
        view: ConversationView,
        turns: UserTurns,
    ) -> None:
        self._config = config
        self._clock = clock
        self._bus = bus
        self._view = view
        self._turns = turns

    def watch_thread(self) -> ThreadWatch | None:
        """Before the connect sequence: what will tell the thread id (None: it is known)."""
        if self._view.thread_id is not None:
            return None
        return ThreadWatch(self._bus.expect("thread_known"), self._bus.expect("agent_text"))

    async def after_connect(self, watch: ThreadWatch | None, *, greeting: bool) -> None:
        """Until the thread id is known (``watch``), then, with ``greeting``, until the
        greeting is over; each bounded by ``greeting_timeout``."""
        if watch is not None:
            await self._until_thread_known(watch)
        if greeting:
            limit = self._config.greeting_timeout
            try:
                await self._turns.until_floor(self._clock.monotonic() + limit)
            except TimeoutError:
                log.info("the greeting was not over within %.3gs; connect() returns", limit)

    async def _until_thread_known(self, watch: ThreadWatch) -> None:
        deadline = self._clock.monotonic() + self._config.greeting_timeout
        waits = [
            asyncio.ensure_future(watch.known.wait()),
            asyncio.ensure_future(watch.first_text.wait()),
            asyncio.ensure_future(self._turns.until_floor(deadline)),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        if self._view.thread_id is None:
            log.info("no thread id within the greeting; thread_known will tell it")
