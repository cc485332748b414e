"""What the recovery parts share: the link slot, a recovery's outcome, its bookkeeping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import AvatarError
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
    """The link of the moment (None while none is open). Owned by the session; the
    recovery controller replaces its content on a cold reconnect."""

    def __init__(self) -> None:
        self.current: ServerLink | None = None


def record_recovery(stats: dict[str, Any], tier: str, duration: float) -> None:
    """Count a recovery and keep its duration (the last 100 per tier)."""
    stats["reconnects"][tier] += 1
    durations = stats["recovery_durations"][tier]
    durations.append(duration)
    del durations[:-100]
