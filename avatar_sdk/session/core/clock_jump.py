"""A suspend/resume detector for the recovery tiers (pure: the clocks are read by the caller).

CLOCK_MONOTONIC stops while the host sleeps and the wall clock does not: a wall clock that
advanced much more than the monotonic one between two checks means the host was away, and
every link timer measured across the gap is meaningless.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_JUMP_THRESHOLD", "ClockJumpDetector"]

#: Seconds of wall-over-monotonic advance that count as a suspend (well above scheduling jitter).
DEFAULT_JUMP_THRESHOLD: Final = 2.0


class ClockJumpDetector:
    """Notices a suspend/resume: the wall clock advanced much more than the monotonic clock
    between two checks (CLOCK_MONOTONIC stops while the host sleeps)."""

    def __init__(self, threshold: float = DEFAULT_JUMP_THRESHOLD) -> None:
        self.threshold = threshold
        self._last: tuple[float, float] | None = None

    def check(self, wall: float, mono: float) -> float | None:
        """Seconds the host was away since the last check, or None."""
        last, self._last = self._last, (wall, mono)
        if last is None:
            return None
        gap = (wall - last[0]) - (mono - last[1])
        return gap if gap > self.threshold else None
