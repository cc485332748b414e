"""What the session's parts share: the link slot and its outbox, a recovery's outcome (the
counters are :mod:`.stats`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from .link import ServerLink
from .supervisor import Supervisor, TaskScope

log = sdk_logger("avatar_sdk.session")

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a recovery ended: usable again (``ok``), or failed with ``error``."""

    tier: str
    ok: bool
    duration: float = 0.0
    error: AvatarError | None = None
    end_reason: str = "gave_up"


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

    def __init__(self, slot: LinkSlot) -> None:
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


class LinkSlot:
    """The link of the moment (None while none is open), the links being closed, and the
    outbox every send goes through. Owned by the session; the recovery controller replaces
    its content on a cold reconnect, and the endings close whatever is in it, a link still
    closing included."""

    def __init__(self, supervisor: Supervisor | None = None) -> None:
        self.current: ServerLink | None = None
        self.retiring: set[ServerLink] = set()
        #: Links being prepared unseen (a renewal's), not yet current: the endings close
        #: them with the rest.
        self.preparing: set[ServerLink] = set()
        self.outbox = Outbox(self)
        self._supervisor = supervisor if supervisor is not None else Supervisor(label="link")
        self._scopes: dict[ServerLink, TaskScope] = {}

    def install(self, link: ServerLink) -> None:
        """Make ``link`` the link of the moment, with a fresh task scope of its own."""
        self.current = link
        self._scopes[link] = self._supervisor.scope(f"link-{len(self._scopes)}")

    def tasks(self, link: ServerLink) -> TaskScope:
        """The task scope of ``link`` (closed already if the link was retired: anything
        spawned there is cancelled at once, so late work for a gone link never runs)."""
        scope = self._scopes.get(link)
        if scope is None:
            scope = self._supervisor.scope("retired")
            scope.closed = True
        return scope

    def swap(self, link: ServerLink) -> ServerLink | None:
        """Make ``link`` current in one step (a renewal's swap); the link it replaces, if
        any, is retiring from now on and returned (:meth:`close_retired` closes it)."""
        old = self.current
        if old is not None:
            self.retiring.add(old)
        self.install(link)
        return old

    async def close_retired(self, old: ServerLink, timeout: float) -> None:
        """Close a link :meth:`swap` replaced: its tasks, then the link itself."""
        scope = self._scopes.pop(old, None)
        if scope is not None:
            await scope.aclose(timeout, spare=asyncio.current_task())
        await old.close(timeout)
        self.retiring.discard(old)

    async def retire(self, timeout: float) -> None:
        """Close the current link and empty the slot; kept in ``retiring`` until closed."""
        old, self.current = self.current, None
        if old is None:
            return
        self.retiring.add(old)
        scope = self._scopes.pop(old, None)
        if scope is not None:
            # Its tasks end with it; the caller's own survives when it is one of them (a
            # recovery of this link that escalated to a cold rebuild from inside its task).
            await scope.aclose(timeout, spare=asyncio.current_task())
        await old.close(timeout)
        self.retiring.discard(old)
