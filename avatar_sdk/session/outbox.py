"""The outbox: every send of a session, strictly in call order, on the link of the moment."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from .link import ServerLink

log = sdk_logger("avatar_sdk.session")

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


class HoldsLink(Protocol):
    """Where the outbox finds the link of the moment (the session's :class:`LinkSlot`)."""

    @property
    def current(self) -> ServerLink | None: ...


class Outbox:
    """Every event the session sends on a live link goes out here, strictly in call order.

    Why one queue: a user verb that does not wait (``mic_enabled = False``) and one that
    does (``await speak()``) issued back to back must reach the server in that order, or
    the server hears a turn from a microphone the user had already muted. Each send takes
    its place synchronously when it is called (or posted) and goes out once the one before
    it has gone, been refused or been cancelled, so a dead send never blocks the queue.
    The connect sequence's own events go on the link it is building, which no other part
    can reach before it is in the slot.
    """

    def __init__(self, slot: HoldsLink) -> None:
        self._slot = slot
        self._tail: asyncio.Future[Any] | None = None

    async def send(self, event: str, payload: Any, *, link: ServerLink | None = None) -> None:
        """Send on ``link`` (default: the current one) after every earlier send. Raises
        ``AvatarError(TRANSPORT_CLOSED)`` when there is no connected link."""
        previous, mine = self._tail, asyncio.get_running_loop().create_future()
        self._tail = mine
        try:
            await self._in_turn(previous, event, payload, link)
        finally:
            mine.set_result(None)

    def post(self, event: str, payload: Any, spawn: Spawn, name: str) -> asyncio.Task[Any]:
        """Send without waiting (a property setter's event), in a supervised task that holds
        its place in the order from now. For events a recovery re-applies anyway: a refusal
        (no connected link) is logged, not raised."""
        task = spawn(self._posted(self._tail, event, payload), name)
        self._tail = task
        return task

    async def _posted(self, previous: asyncio.Future[Any] | None, event: str, payload: Any) -> None:
        try:
            await self._in_turn(previous, event, payload, None)
        except AvatarError as error:
            log.info("%s not sent (%s); the next recovery re-applies it", event, error.code)

    async def _in_turn(
        self,
        previous: asyncio.Future[Any] | None,
        event: str,
        payload: Any,
        link: ServerLink | None,
    ) -> None:
        if previous is not None and not previous.done():
            await asyncio.wait({previous})
        target = link if link is not None else self._slot.current
        if target is None or not target.connected:
            raise AvatarError(ErrorCode.TRANSPORT_CLOSED, f"cannot send {event}: no link")
        await target.emit(event, payload)
