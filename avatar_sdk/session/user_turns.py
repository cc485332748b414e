"""UserTurns: the user's turns as the public verbs make them (``speak``, ``ask``, quiet).

``speak()`` registers a :class:`~.speech.SpeechHandle` and runs the turn as a supervised
task over the turn desk; ``ask()`` questions go one at a time and each waits for the floor
(past the greeting, no agent turn generating or being said) so that it is not a barge-in;
``wait_until_quiet()`` waits for the same floor without the greeting. The facade checks
the arguments and reports the call; this holds what happens next.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..clock import Clock, sleep_or
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from .replies import Replies, SpeechHandle
from .supervisor import Supervisor
from .turn_desk import TurnDesk

log = sdk_logger("avatar_sdk.session")

__all__ = ["UserTurns"]


class UserTurns:
    """The user's turns of one session (module docstring)."""

    def __init__(
        self,
        *,
        clock: Clock,
        desk: TurnDesk,
        replies: Replies,
        supervisor: Supervisor,
        media: bool,
    ) -> None:
        self._clock = clock
        self._desk = desk
        self._replies = replies
        self._supervisor = supervisor
        self._media = media
        self._asking = False
        self._ask_free = asyncio.Event()

    # -- speak ------------------------------------------------------------------------------
    def speak(self, text: str, checked: str) -> SpeechHandle:
        """Send ``text`` (``checked``: as the desk will write it) as a supervised task;
        its handle, registered now so that its reply is matched by its own ids."""
        self._replies.note_user("speak")
        handle = self._replies.register(checked, media=self._media)
        task = self._supervisor.spawn(self._speak(text, handle), "speak")
        task.add_done_callback(lambda t: self._speak_done(t, handle))
        return handle

    async def _speak(self, text: str, handle: SpeechHandle) -> None:
        try:
            await self._desk.speak(text, on_sent=handle._on_sent)
        except AvatarError as error:
            handle._fail(error)
            return
        except Exception as exc:  # a bug of ours: that turn fails, the session goes on
            log.error("speak() failed: %r", exc, exc_info=exc)
            handle._fail(AvatarError(ErrorCode.INTERNAL, f"speak: {type(exc).__name__}"))
            return
        handle._resolve_sent(None)

    def _speak_done(self, task: asyncio.Task[Any], handle: SpeechHandle) -> None:
        if task.cancelled():  # the session closed under it
            handle._fail(self._replies.ended or AvatarError(ErrorCode.CLOSED, "closed"))

    # -- ask --------------------------------------------------------------------------------
    @asynccontextmanager
    async def one_ask(self, deadline: float) -> AsyncIterator[None]:
        """One ``ask()`` at a time: each waits for the one before (``TimeoutError`` when
        ``deadline`` passes first)."""
        clock = self._clock
        while self._asking:
            left = deadline - clock.monotonic()
            if left <= 0:
                raise TimeoutError("an earlier ask() of this session did not finish in time")
            self._ask_free.clear()
            await sleep_or(clock, left, self._ask_free)
        self._asking = True
        try:
            yield
        finally:
            self._asking = False
            self._ask_free.set()

    async def until_floor(self, deadline: float) -> None:
        """Until a question would not cut an agent turn short: past the greeting due after
        approval (it begins within ``agent_timeout``, or never will), then until no agent
        turn is generating or being said (with media, and its voice quiet here: at most a
        second more). ``TimeoutError`` at ``deadline``."""
        desk = self._desk
        await desk.past_expected(limit=max(0.0, deadline - self._clock.monotonic()))
        await self._replies.until_free(deadline, lambda: desk.gate.phase == "open")
        await self._replies.until_quiet(deadline)  # media: its last audio arrived here too

    async def until_quiet(self, deadline: float) -> None:
        """Until no agent turn is in progress and nothing is still being said; at once when
        the session is over, or when it ends meanwhile."""
        if self._replies.ended is not None:
            return  # an ended session is quiet
        try:  # the same floor ask() waits for (session/core/reply_match.py: Floor)
            await self._replies.until_free(deadline, lambda: True)
            await self._replies.until_quiet(deadline)
        except AvatarError:
            return  # the session ended meanwhile: nothing more will be said
