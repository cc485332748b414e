"""The two-tier tool-call-spiral circuit breaker (PROTOCOL.md §4.6), pure.

A tool-eager brain can call the same client command dozens of times instead of speaking.
Soft tier: raw tool segments per turn, counted before de-duplication, signalled once per
turn and never acted on (an interrupt would cut the turn's narration and does not stop a
server-side spiral). Hard tier: a session-scoped count since the last perceivable output,
immune to turn boundaries (an idle "wake-up" turn in the middle of a spiral must not hide
it); tripping it makes the session rebuild the server session on a brand-new socket.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SpiralVerdict:
    """What one tool segment did to the breaker."""

    soft: bool  # the soft limit was reached for the first time this turn
    hard: bool  # the hard limit was reached (latched until re-armed)
    turn_count: int
    session_count: int


class SpiralBreaker:
    """Counts tool segments; limits of 0 disable a tier (soft 0 disables counting at all)."""

    def __init__(self, soft_limit: int, hard_limit: int) -> None:
        self.soft_limit = max(0, soft_limit)
        self.hard_limit = max(0, hard_limit) if self.soft_limit else 0
        self.turn_count = 0
        self.session_count = 0
        self._soft_signalled = False
        self._latched = False

    def on_tool_segment(self) -> SpiralVerdict:
        """One raw ``tool`` segment arrived (duplicates included)."""
        if not self.soft_limit:
            return SpiralVerdict(False, False, 0, 0)
        self.turn_count += 1
        self.session_count += 1
        soft = self.turn_count >= self.soft_limit and not self._soft_signalled
        if soft:
            self._soft_signalled = True
        hard = bool(self.hard_limit) and self.session_count >= self.hard_limit and not self._latched
        if hard:
            self._latched = True
        return SpiralVerdict(soft, hard, self.turn_count, self.session_count)

    def on_new_turn(self) -> None:
        """``agent_start_speech`` with ``isNewTurn``: the per-turn (soft) count restarts."""
        self.turn_count = 0
        self._soft_signalled = False

    def on_perceivable_output(self) -> None:
        """The brain spoke (or showed GenUI): it is not spiralling; the hard count restarts."""
        self.session_count = 0
        self._latched = False

    def on_rebuilt(self) -> None:
        """A cold reconnect succeeded: re-arm, so that a second spiral also recovers."""
        self.session_count = 0
        self.turn_count = 0
        self._soft_signalled = False
        self._latched = False

    @property
    def latched(self) -> bool:
        return self._latched
