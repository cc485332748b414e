"""A resource's release that runs once, to the end, whoever asked for it first.

A session closes its parts from tasks that ``close()`` may cancel: a recovery closing the
peer it replaces, a cold rebuild closing the link it gives up. Awaited in the caller's task,
such a release is cut wherever the cancel lands (a WHEP DELETE never sent, a peer left
open), and a ``closed`` flag set at its start keeps anyone from finishing it. Here the
release runs as a task of its own: a cancelled caller stops waiting, not releasing, and
every later caller (the owner's own close) awaits the same release.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class ReleaseOnce:
    """Runs one release, once, as its own task; :meth:`run` awaits it (shielded)."""

    def __init__(self) -> None:
        self._task: asyncio.Future[None] | None = None

    @property
    def started(self) -> bool:
        """True once a release was asked for (it may still run)."""
        return self._task is not None

    async def run(self, release: Callable[[], Awaitable[None]]) -> None:
        """Start ``release()`` unless started already, and wait until it has ended.

        Its error is raised to every caller that waits; a cancel of a caller is not passed
        on to the release."""
        if self._task is None:
            self._task = asyncio.ensure_future(release())
            self._task.add_done_callback(mark_retrieved)  # every caller may be gone
        await asyncio.shield(self._task)


def mark_retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a finished future's exception as seen (a done callback): whoever awaits it is
    told, and when nobody does, asyncio must not report it as never retrieved."""
    if not future.cancelled():
        future.exception()
