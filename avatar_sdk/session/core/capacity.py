"""How long a session stays ``queued`` when the service has no capacity (pure).

The machine's ``capacity_unavailable`` transition parks the session in ``queued``; the
admission loop (:mod:`.recovery`) sleeps :func:`capacity_delay` seconds there before its
``retry`` on a fresh socket.
"""

from __future__ import annotations

import random
from typing import Final

__all__ = ["CAPACITY_JITTER", "capacity_delay"]

#: The reference client's jitter around each scheduled wait (±15%), so that a crowd of
#: waiting clients does not retry in lockstep.
CAPACITY_JITTER: Final = 0.15


def capacity_delay(
    schedule: tuple[float, ...], attempt: int, rng: random.Random | None = None
) -> float:
    """Seconds to stay ``queued`` before retry ``attempt`` (1-based): the schedule's entry,
    clamped at its last one, with the reference client's ±15% jitter so that a crowd of
    waiting clients does not retry in lockstep."""
    if not schedule:
        return 0.0
    base = schedule[min(max(attempt, 1), len(schedule)) - 1]
    return float(base * (rng or random).uniform(1 - CAPACITY_JITTER, 1 + CAPACITY_JITTER))
