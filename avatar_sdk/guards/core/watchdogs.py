"""The brain-stall watchdog and the pending-response signal (PROTOCOL.md §4.5), pure.

Time is passed in (``now``), so the rules are tested in microseconds without sleeping;
the session drives them from one timer task.
"""

from __future__ import annotations


class StallWatchdog:
    """Fires every ``timeout`` seconds while the brain stays silent after a user turn.

    Armed (count reset, full window) by a user turn, the spiral resend and
    ``agent_start_speech``; cleared only by perceivable output (spoken segments, GenUI, the
    avatar or the user starting to talk). Tool, think and turn-end events do not clear it:
    a brain that only calls tools is still silent to the user. ``timeout`` 0 disables it.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = max(0.0, timeout)
        self.deadline: float | None = None
        self.count = 0

    @property
    def armed(self) -> bool:
        return self.deadline is not None

    def arm(self, now: float) -> None:
        if not self.timeout:
            return
        self.count = 0
        self.deadline = now + self.timeout

    def clear(self) -> None:
        self.deadline = None
        self.count = 0

    def due(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def fire(self, now: float) -> int:
        """Record one firing (call when ``due``); returns the count, 1, 2, 3… It repeats:
        the next firing is one full window later."""
        self.count += 1
        self.deadline = now + self.timeout
        return self.count


class PendingResponse:
    """Is an answer outstanding? Idempotent, so each change is reported exactly once."""

    def __init__(self) -> None:
        self.pending = False

    def arm(self) -> bool:
        """True if this call changed the state (emit ``response_pending``)."""
        changed = not self.pending
        self.pending = True
        return changed

    def settle(self) -> bool:
        """True if this call changed the state (emit ``response_settled``)."""
        changed = self.pending
        self.pending = False
        return changed
