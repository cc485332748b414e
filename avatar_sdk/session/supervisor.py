"""Supervisor: the one owner of every background task of a session.

``asyncio.TaskGroup`` would cancel every sibling when one task fails and cannot outlive the
``async with`` block of a caller, while a session's tasks start and end at arbitrary times
across many public calls; so this small owner keeps the TaskGroup's two promises by hand:
no task is ever abandoned (``aclose()`` cancels and awaits every one), and a task that dies
with an exception is reported at once, to be turned into a classified session failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from ..logs import sdk_logger

log = sdk_logger(__name__)

FailureHandler = Callable[[str, BaseException], None]


def _log_only(name: str, exc: BaseException) -> None:
    """The failure handler until an owner sets its own: the failure is logged above."""


class Supervisor:
    """Owns tasks: ``spawn`` them, ``aclose`` cancels and awaits all of them."""

    def __init__(
        self,
        on_failure: FailureHandler | None = None,
        *,
        label: str = "avatar-sdk",
        owner: object | None = None,
    ) -> None:
        """``owner``: what these tasks work for (the session's facade), held here so that it
        lives as long as they run. Every task's done callback holds the supervisor, so a
        session its program dropped while connected stays reachable, as a running session
        must: the leak check finds it, and its close still runs."""
        self._owner = owner
        #: Told of every task that dies with an exception (the session's endings fail it).
        self.on_failure: FailureHandler = on_failure or _log_only
        self._label = label
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def closed(self) -> bool:
        return self._closed

    def scope(self, label: str) -> TaskScope:
        """A group of this supervisor's tasks that can be cancelled and awaited together."""
        return TaskScope(self, label)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a supervised task. After ``aclose()`` the coroutine is closed
        unrun and a cancelled task is returned, so late work never outlives the session."""
        task = asyncio.ensure_future(coro)
        task.set_name(f"{self._label}:{name}")
        if self._closed:
            task.cancel()
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("task %s failed: %r", task.get_name(), exc, exc_info=exc)
            self.on_failure(task.get_name(), exc)

    def cancel_all(self, *, spare: asyncio.Task[Any] | None = None) -> list[asyncio.Task[Any]]:
        """Close the supervisor and cancel every task but ``spare`` (usually the caller);
        returns the tasks that were still running, for :meth:`wait`."""
        self._closed = True
        pending = [t for t in self._tasks if t is not spare and not t.done()]
        for task in pending:
            task.cancel()
        return pending

    async def wait(self, tasks: list[asyncio.Task[Any]], timeout: float) -> None:
        """Wait up to ``timeout`` seconds for cancelled ``tasks``; one that ignores its
        cancellation is logged (it is a bug: it outlives its session)."""
        if not tasks:
            return
        _, stuck = await asyncio.wait(tasks, timeout=timeout)
        for task in stuck:
            log.error("task %s did not stop within %.3gs of its cancellation", task, timeout)

    async def aclose(self, timeout: float, *, spare: asyncio.Task[Any] | None = None) -> None:
        """Cancel every task (but ``spare``) and wait up to ``timeout`` seconds for them."""
        await self.wait(self.cancel_all(spare=spare), timeout)


class TaskScope:
    """The tasks of one server link, inside the session's supervisor.

    Why: a task that serves one link (its socket recovery, a channel's media recovery) must
    not outlive it, or it acts on a socket or peer that is gone; asking "is this still the
    current link?" at every step is how such code goes wrong. Tasks spawned here are the
    supervisor's (a dying one still fails the session; ``Supervisor.aclose`` still reaches
    it), and :meth:`aclose` cancels and awaits them when the link is replaced or closed.
    A task may carry a ``key`` (one recovery per channel): :meth:`running` finds it while
    it runs.
    """

    def __init__(self, supervisor: Supervisor, label: str) -> None:
        self._supervisor = supervisor
        self._label = label
        self._tasks: set[asyncio.Task[Any]] = set()
        self._keyed: dict[str, asyncio.Task[Any]] = {}
        self.closed = False

    def spawn(
        self, coro: Coroutine[Any, Any, Any], name: str, *, key: str | None = None
    ) -> asyncio.Task[Any]:
        """Run ``coro`` as a supervised task of this scope (cancelled at once once closed)."""
        task = self._supervisor.spawn(coro, f"{self._label}:{name}")
        if self.closed:
            task.cancel()
        self._tasks.add(task)
        if key is not None:
            self._keyed[key] = task
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        for key, keyed in list(self._keyed.items()):
            if keyed is task:
                del self._keyed[key]

    def running(self, key: str) -> asyncio.Task[Any] | None:
        """The task spawned under ``key``, while it has not finished."""
        return self._keyed.get(key)

    def others(self, *, than: asyncio.Task[Any] | None) -> dict[str, asyncio.Task[Any]]:
        """The keyed tasks still running besides ``than`` (usually the caller)."""
        return {k: t for k, t in self._keyed.items() if t is not than and not t.done()}

    async def aclose(self, timeout: float, *, spare: asyncio.Task[Any] | None = None) -> None:
        """Cancel every task of the scope but ``spare`` (the caller, when a task of this link
        is the one replacing it) and wait up to ``timeout`` seconds for them."""
        self.closed = True
        pending = [t for t in self._tasks if t is not spare and not t.done()]
        for task in pending:
            task.cancel()
        await self._supervisor.wait(pending, timeout)
