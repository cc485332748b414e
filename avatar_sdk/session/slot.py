"""What the session's parts share: the link slot, a recovery's outcome, the counters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def record_recovery(stats: dict[str, Any], tier: str, duration: float) -> None:
    """Count a recovery and keep its duration (the last 100 per tier)."""
    stats["reconnects"][tier] += 1
    durations = stats["recovery_durations"][tier]
    durations.append(duration)
    del durations[:-100]


def new_stats() -> dict[str, Any]:
    """A session's counters, empty (``AvatarSession.stats()`` returns a copy)."""
    return {
        "reconnects": {"socket": 0, "media": 0, "cold": 0},
        "recovery_durations": {"socket": [], "media": [], "cold": []},
        "events_in": 0,
        "events_out": 0,
        "protocol_errors": 0,
        "connect_duration": None,
    }


def stats_snapshot(stats: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A copy of ``stats`` the caller may keep (nested counters copied too)."""
    snapshot = dict(stats)
    snapshot["reconnects"] = dict(stats["reconnects"])
    snapshot["recovery_durations"] = {k: list(v) for k, v in stats["recovery_durations"].items()}
    snapshot.update(extra)
    return snapshot
