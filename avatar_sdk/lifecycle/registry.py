"""Every session built in this process, held weakly, with the backend it talks to.

Why: a session a test builds itself and forgets to close stays ``connected`` after the test,
its socket and aiohttp sessions open (aiohttp's "Unclosed client session" at collection
time is all one sees, with no name). The pytest plugin (:mod:`avatar_sdk.testing`) reads
this registry when it stops a staging backend: a session of that backend still open by then
was left open by the test. The session layer registers here; it never imports the testing
layer, and this module imports nothing but the standard library.

Weak references only: a session nobody holds is collected as before (the registry never
keeps one alive), and registering costs one dictionary entry.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass
from typing import Any

__all__ = ["LIVE_SESSIONS", "Registered", "SessionRegistry"]


@dataclass(frozen=True, slots=True)
class Registered:
    """What was noted of a session when it was built."""

    serial: int  # creation order in this process
    backend: str  # the backend base URL it was built for (checked, normalised)


class SessionRegistry:
    """Sessions by weak reference, in creation order (thread-safe: fleets build sessions on
    several loops of one process)."""

    def __init__(self) -> None:
        self._entries: weakref.WeakKeyDictionary[Any, Registered] = weakref.WeakKeyDictionary()
        self._serials = itertools.count()
        self._lock = threading.Lock()

    def add(self, session: object, *, backend: str) -> None:
        with self._lock:
            self._entries[session] = Registered(next(self._serials), backend)

    def sessions(self) -> list[tuple[Any, Registered]]:
        """The sessions still referenced somewhere, oldest first."""
        with self._lock:
            found = list(self._entries.items())
        return sorted(found, key=lambda item: item[1].serial)


#: The process's registry (``AvatarSession`` adds itself when it is built).
LIVE_SESSIONS = SessionRegistry()
