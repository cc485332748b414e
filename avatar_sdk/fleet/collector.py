"""Keep CPython's full garbage collection from pausing every session of a process at once.

Why: a connected session holds hundreds of objects the collector tracks; at a thousand
sessions in one process one full collection walks them all and holds the event loop for
about half a second, so every session stalls together (the ``load`` figure: the reply p90
of 1,000 sessions 12-24x one session's; 1.1-1.4x with the sessions frozen). Once the
sessions are connected their graphs live as long as the work: ``gc.freeze()`` moves them
out of the collector's view, and ``gc.unfreeze()`` gives them back once they are closed.

For an application holding many sessions (``docs/fleet.md``)::

    freeze = CollectorFreeze(expected=len(sessions))
    for session in sessions:
        await session.connect()
        freeze.settled(session)       # the last one freezes what is alive now
    try:
        ...                           # the work
    finally:
        for session in sessions:
            await session.close()
        freeze.unfreeze()

``gc.freeze()`` is process-wide: one freezer at a time per process.
"""

from __future__ import annotations

import gc
from collections.abc import Hashable

__all__ = ["CollectorFreeze"]


class CollectorFreeze:
    """Freezes the process's live objects (after one full collection) once ``expected``
    members have settled (connected, or ended without connecting); :meth:`unfreeze`
    undoes it."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self._settled: set[Hashable] = set()
        #: How many objects the freeze moved out of the collector's view (0: not frozen).
        self.frozen = 0

    def settled(self, member: Hashable) -> None:
        """``member`` is connected (or will never be): counted once; the last one freezes."""
        self._settled.add(member)
        if len(self._settled) >= self.expected:
            self.freeze()

    def freeze(self) -> None:
        """Collect once, then freeze what is left (a no-op when frozen already)."""
        if self.frozen:
            return
        gc.collect()
        gc.freeze()
        self.frozen = max(1, gc.get_freeze_count())

    def unfreeze(self) -> None:
        """Give the frozen objects back to the collector (the sessions are closed)."""
        if self.frozen:
            gc.unfreeze()
            self.frozen = 0
