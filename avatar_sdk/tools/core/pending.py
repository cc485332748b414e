"""Tool calls waiting for an acknowledgement (PROTOCOL.md §3.6), pure bookkeeping: bounded,
aged, and forgotten when the server session is rebuilt. Delivery is :mod:`.acks`."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

#: An acknowledgement older than this is stale: the brain stopped waiting long ago.
ACK_MAX_AGE: Final = 600.0
#: At most this many acknowledgements are remembered (oldest forgotten first).
MAX_PENDING_ACKS: Final = 256


@dataclass(frozen=True, slots=True)
class PendingAck:
    name: str
    at: float
    generation: int


class PendingAcks:
    """Tool calls that wait for ``respond_to_tool``; bounded and aged."""

    def __init__(self) -> None:
        self._acks: OrderedDict[str, PendingAck] = OrderedDict()
        self.generation = 0

    def add(self, call_id: str, name: str, now: float) -> None:
        self._acks[call_id] = PendingAck(name, now, self.generation)
        while len(self._acks) > MAX_PENDING_ACKS:
            self._acks.popitem(last=False)

    def take(self, call_id: str, now: float) -> PendingAck | None:
        """The pending call, or None if unknown or stale (it is forgotten either way)."""
        ack = self._acks.pop(call_id, None)
        if ack is None or now - ack.at > ACK_MAX_AGE:
            return None
        return ack

    def restore(self, call_id: str, ack: PendingAck) -> None:
        """Put a call back after a failed delivery, so a retry can still answer it."""
        self._acks[call_id] = ack

    def rebuilt(self) -> None:
        """A new server session: nobody is waiting for the old session's answers."""
        self._acks.clear()
        self.generation += 1

    def __len__(self) -> int:
        return len(self._acks)

    def ids(self) -> list[str]:
        """The call ids still waiting, oldest first."""
        return list(self._acks)
