"""The ledger of server-side resources the staging backend holds for its clients.

Why: a client that closes its own side well can still leave something open at the service
(a WHEP viewer is a media-server seat, a live server session an avatar held), and users pay
for that. The client-side leak checks (:mod:`avatar_sdk.testing.leaks`) cannot see it; this
ledger is the server's own account, read by tests, by the pytest plugin's leak check when a
backend stops, and by ``staging serve``'s control API (``GET /_control/resources``).

The ledger keeps no books of its own: each part of the backend that holds resources answers
what it holds now (:class:`~.state.ResourceHolder`), so an entry can never outlive the
resource or go missing. Every entry is a (kind, client) pair; the kinds:

* ``whep``: WHEP resources created and not DELETEd (a viewer whose conversation ended is
  still a seat until its client deletes it, as on the service);
* ``asr_peers``: ASR uplink peers still open;
* ``sessions``: live server sessions (a conversation not ended) whose socket is
  connected;
* ``genie_calls``: genie HTTP requests being answered to a client still waiting;
* ``held_for_recovery``: server sessions whose socket dropped, kept for connection-state
  recovery until the window expires. Reported, but not a client's leak: a client that
  closes while its socket is down cannot release them (:data:`RELEASED_ON_CLOSE`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Final, Protocol

from .state import LiveConversation, ResourceHolder


class PendingRecovery(Protocol):
    """The Socket.IO server's view of a dropped socket kept for recovery."""

    def is_pending_recovery(self, sid: str) -> bool: ...


#: Every kind the ledger reports, in the order :meth:`ResourceLedger.counts` lists them.
KINDS: Final = ("whep", "asr_peers", "sessions", "genie_calls", "held_for_recovery")

#: The kinds a client's close must bring to zero (what the plugin's leak check judges;
#: ``held_for_recovery`` is not one: a client whose socket is down cannot release it).
RELEASED_ON_CLOSE: Final = ("whep", "asr_peers", "sessions", "genie_calls")


class ResourceLedger:
    """What the backend's parts hold for clients, counted by kind and by client."""

    def __init__(self, holders: Iterable[ResourceHolder]) -> None:
        self._holders = tuple(holders)

    def entries(self) -> list[tuple[str, str]]:
        """Every resource held now, as (kind, client id)."""
        return [entry for holder in self._holders for entry in holder.held_resources()]

    def counts(self) -> dict[str, int]:
        """Held resources by kind; every kind of :data:`KINDS` is present (zero or more)."""
        counted = Counter(kind for kind, _ in self.entries())
        return {kind: counted.get(kind, 0) for kind in KINDS}

    def by_client(self) -> dict[str, dict[str, int]]:
        """Held resources per client id (a Socket.IO sid, a scripted session, a thread)."""
        clients: dict[str, Counter[str]] = {}
        for kind, client in self.entries():
            clients.setdefault(client, Counter())[kind] += 1
        return {client: dict(kinds) for client, kinds in clients.items()}

    def leftovers(self) -> dict[str, int]:
        """The kinds of :data:`RELEASED_ON_CLOSE` still held (empty: nothing left)."""
        counts = self.counts()
        return {kind: counts[kind] for kind in RELEASED_ON_CLOSE if counts[kind]}


class CallsInFlight:
    """HTTP calls of one kind being answered now to a client still waiting for the answer
    (a call whose client hung up holds nothing of it; a :class:`~.state.ResourceHolder`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._open: dict[int, tuple[str, Callable[[], bool]]] = {}
        self._next = 0

    def begin(self, client: str, waiting: Callable[[], bool]) -> int:
        """A call of ``client`` started (``waiting``: whether it still waits for the
        answer): its ticket for :meth:`end`."""
        self._next += 1
        self._open[self._next] = (client, waiting)
        return self._next

    def end(self, ticket: int) -> None:
        self._open.pop(ticket, None)

    def held_resources(self) -> list[tuple[str, str]]:
        return [(self.kind, client) for client, waiting in self._open.values() if waiting()]


class SessionHolds:
    """The live server sessions (Socket.IO sids whose conversation has not ended) held for
    clients, connected or kept for connection-state recovery (a
    :class:`~.state.ResourceHolder`)."""

    def __init__(
        self, conversations: Mapping[str, LiveConversation], pending: PendingRecovery
    ) -> None:
        self._conversations = conversations
        self._pending = pending

    def held_resources(self) -> list[tuple[str, str]]:
        return [
            ("held_for_recovery" if self._pending.is_pending_recovery(sid) else "sessions", sid)
            for sid, conv in list(self._conversations.items())
            if not conv.ended
        ]
