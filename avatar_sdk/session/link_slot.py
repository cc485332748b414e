"""The link slot: the link of the moment, the links being prepared or closed, and their
task scopes (the counters are :mod:`.stats`; every send goes through :mod:`.outbox`)."""

from __future__ import annotations

import asyncio

from .link import ServerLink
from .outbox import Outbox
from .supervisor import Supervisor, TaskScope


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
