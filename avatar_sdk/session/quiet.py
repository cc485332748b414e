"""Whether the avatar is quiet: no agent turn in progress and nothing being said.

``agent_turn_ended`` is not the end of an answer: the server ends the agent's turn when the
answer has been *generated*, and the avatar goes on *saying* it (``stvSpeechChunk`` captions,
then ``stvStartedTalking`` ... ``stvFinishedTalking``, PROTOCOL.md §3.9) for as long as its
audio lasts. A user turn sent in between is a barge-in on that answer. :class:`Voice` is the
pure rule, fed the session's public events; :class:`QuietWatch` lets a caller await it
(``AvatarSession.wait_until_quiet``), with the session's injected clock for the timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..clock import Clock, Timer
from ..events.bus import Event

#: States in which nothing the avatar was saying can still be heard: a cold reconnect's new
#: server session does not finish the old one's turn, and an ended session says nothing more.
_SILENCING_STATES = frozenset({"cold_reconnecting", "queued", "disconnecting", "ended", "failed"})
_TERMINAL_STATES = frozenset({"ended", "failed"})


@dataclass(slots=True)
class Voice:
    """What the avatar is doing, from the session's events. Pure: no I/O, no clock.

    ``turn_open``: an agent turn began (``agent_speech_started``) and has not ended;
    ``speech_due``: captions of speech arrived and the talking has not begun yet;
    ``talking``: between ``agent_talking {talking: true}`` and its ``false`` (or an
    ``agent_interrupted``). ``over``: the session ended; it is quiet for good.
    """

    turn_open: bool = False
    speech_due: bool = False
    talking: bool = False
    over: bool = False

    @property
    def quiet(self) -> bool:
        return self.over or not (self.turn_open or self.speech_due or self.talking)

    def observe(self, name: str, data: Mapping[str, Any]) -> None:
        """Feed one public event (any name: the ones that say nothing are ignored)."""
        if self.over:
            return
        if name == "agent_speech_started":
            if data.get("is_new_turn", True):
                self.turn_open = True
        elif name == "caption":
            self.speech_due = True
        elif name == "agent_talking":
            self.talking = bool(data.get("talking"))
            self.speech_due = False
        elif name == "agent_turn_ended":
            self.turn_open = False
        elif name == "agent_interrupted":
            self.turn_open = self.speech_due = self.talking = False
        elif name == "state_changed":
            state = str(data.get("state"))
            if state in _SILENCING_STATES:
                self.turn_open = self.speech_due = self.talking = False
            if state in _TERMINAL_STATES:
                self.over = True


class QuietWatch:
    """Awaitable quiet: subscribe :meth:`observe` to every event of the session's bus
    (synchronously, so no event is missed), then ``await watch.wait(timeout)``."""

    def __init__(self, clock: Clock) -> None:
        self.voice = Voice()
        self._clock = clock
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def quiet(self) -> bool:
        return self.voice.quiet

    def observe(self, event: Event) -> None:
        self.voice.observe(event.name, event.data)
        if self.voice.quiet and self._waiters:
            waiters, self._waiters = self._waiters, []
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    async def wait(self, timeout: float | None = None) -> None:
        """Return once the avatar is quiet (at once if it is, or the session is over);
        ``TimeoutError`` after ``timeout`` seconds of the session's clock."""
        if self.voice.quiet:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        timer: Timer | None = None
        if timeout is not None:
            timer = self._clock.call_later(timeout, lambda: _expire(future, timeout))
        try:
            await future
        finally:
            if timer is not None:
                timer.cancel()
            if future in self._waiters:
                self._waiters.remove(future)


def _expire(future: asyncio.Future[None], timeout: float) -> None:
    if not future.done():
        future.set_exception(
            TimeoutError(f"the avatar was still talking after {timeout:g} s (wait_until_quiet)")
        )
