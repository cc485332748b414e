"""What the session's parts share: the link slot and a recovery's outcome (the counters
are :mod:`.stats`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AvatarError
from .link import ServerLink


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a recovery ended: usable again (``ok``), or failed with ``error``."""

    tier: str
    ok: bool
    duration: float = 0.0
    error: AvatarError | None = None
    end_reason: str = "gave_up"


class LinkSlot:
    """The link of the moment (None while none is open), and the links being closed. Owned
    by the session; the recovery controller replaces its content on a cold reconnect, and
    the endings close whatever is in it, a link still closing included."""

    def __init__(self) -> None:
        self.current: ServerLink | None = None
        self.retiring: set[ServerLink] = set()

    async def retire(self, timeout: float) -> None:
        """Close the current link and empty the slot; kept in ``retiring`` until closed."""
        old, self.current = self.current, None
        if old is None:
            return
        self.retiring.add(old)
        await old.close(timeout)
        self.retiring.discard(old)
