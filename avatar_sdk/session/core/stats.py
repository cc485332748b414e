"""A session's counters, typed: what ``AvatarSession.stats()`` reports.

One :class:`SessionStats` per session, handed to the parts that count (the recovery tiers,
the inbound handler, the turn desk, every control channel of the session). Each counter is
a declared field with its default, so a misspelt counter is a type error (and, with slots,
an ``AttributeError``) instead of a new key nobody reads; the recurring updates are methods.

:meth:`SessionStats.snapshot` builds the public snapshot, a plain dict the caller may keep,
with exactly the keys documented in ``docs/resilience.md`` (Counters) and typed by
:class:`StatsSnapshot`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, NotRequired, TypedDict

#: The recovery tiers, as counted (``docs/resilience.md``).
Tier = Literal["socket", "media", "cold"]
TIERS: Final[tuple[Tier, ...]] = ("socket", "media", "cold")
#: Recovery durations kept per tier (the most recent ones).
KEEP_DURATIONS: Final = 100


class _Counts(TypedDict):
    reconnects: dict[str, int]
    recovery_durations: dict[str, list[float]]
    events_in: int
    events_out: int
    protocol_errors: int
    connect_duration: float | None
    events_dropped: int
    turns_resent: int
    #: Present once a silently dead socket was found (as before the counters were typed).
    dead_socket_detections: NotRequired[int]
    #: Present once a renewal happened (``docs/lifecycle.md``, Long conversations).
    renewals: NotRequired[int]
    renewal_gaps: NotRequired[list[float]]
    #: Present once the avatar's voice arrived (``docs/media.md``, The voice's receive buffer).
    voice_buffer: NotRequired[dict[str, float]]


class StatsSnapshot(_Counts):
    """What ``AvatarSession.stats()`` returns (a copy: nested counters copied too)."""

    events_emitted: int


def _per_tier_counts() -> dict[str, int]:
    return dict.fromkeys(TIERS, 0)


def _per_tier_durations() -> dict[str, list[float]]:
    return {tier: [] for tier in TIERS}


@dataclass(slots=True)
class SessionStats:
    """The counters one session keeps. ``events_in`` / ``events_out`` are written by its
    control channels (one object for all of them, so the totals span reconnects); the
    bus's own counts (``events_emitted``, ``events_dropped``) join in :meth:`snapshot`."""

    reconnects: dict[str, int] = field(default_factory=_per_tier_counts)
    recovery_durations: dict[str, list[float]] = field(default_factory=_per_tier_durations)
    events_in: int = 0
    events_out: int = 0
    protocol_errors: int = 0
    connect_duration: float | None = None
    turns_resent: int = 0
    dead_socket_detections: int = 0
    #: Renewals past the server's time cap, and their gaps (seconds, the last 100).
    renewals: int = 0
    renewal_gaps: list[float] = field(default_factory=list)

    def record_renewal(self, gap: float | None) -> None:
        """Count a renewal and keep its gap (the last 100)."""
        self.renewals += 1
        if gap is not None:
            self.renewal_gaps.append(gap)
            del self.renewal_gaps[:-KEEP_DURATIONS]

    def record_recovery(self, tier: Tier, duration: float) -> None:
        """Count a recovery of ``tier`` and keep its duration (the last 100 per tier)."""
        self.reconnects[tier] += 1
        durations = self.recovery_durations[tier]
        durations.append(duration)
        del durations[:-KEEP_DURATIONS]

    def snapshot(
        self,
        *,
        events_emitted: int,
        events_dropped: int,
        voice_buffer: dict[str, float] | None = None,
    ) -> StatsSnapshot:
        """A copy the caller may keep, in the key order ``stats()`` always had.
        ``voice_buffer``: the voice's receive buffer counts, once it received any."""
        counts: _Counts = {
            "reconnects": dict(self.reconnects),
            "recovery_durations": {k: list(v) for k, v in self.recovery_durations.items()},
            "events_in": self.events_in,
            "events_out": self.events_out,
            "protocol_errors": self.protocol_errors,
            "connect_duration": self.connect_duration,
            "events_dropped": events_dropped,
            "turns_resent": self.turns_resent,
        }
        if self.dead_socket_detections:
            counts["dead_socket_detections"] = self.dead_socket_detections
        if self.renewals:
            counts["renewals"] = self.renewals
            counts["renewal_gaps"] = list(self.renewal_gaps)
        if voice_buffer is not None:
            counts["voice_buffer"] = dict(voice_buffer)
        return {**counts, "events_emitted": events_emitted}


#: Every key a snapshot may hold (``dead_socket_detections``, ``renewals``,
#: ``renewal_gaps`` and ``voice_buffer`` only once they count something).
STATS_KEYS: Final = StatsSnapshot.__required_keys__ | StatsSnapshot.__optional_keys__
