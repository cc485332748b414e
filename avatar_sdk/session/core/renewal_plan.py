"""The arithmetic of a server's time cap and of its renewal (pure: no I/O, no clock).

:class:`TimeLeft` answers ``session.time_left``: seconds until the server ends the current
server session, from its last ``time_warning`` (counting down on the session's clock) or,
before any warning, from ``SessionConfig.max_conversation_length`` counted from that server
session's approval; None when neither is known.

:func:`renewal_due` says whether a renewal should start now, :func:`swap_deadline` until
when the swap may wait for a turn boundary, and :class:`Boundary` whether the conversation
is at one (the avatar quiet, no user turn unanswered, no tool call pending).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...config import RenewalPolicy


@dataclass(slots=True)
class TimeLeft:
    """Seconds left on the current server session's cap (see the module docstring)."""

    cap: float | None = None
    #: When the current server session was approved (session clock), None before.
    started_at: float | None = None
    #: The last warning: (remaining seconds, when it arrived).
    warned: tuple[float, float] | None = None
    #: The cap as the server's warnings tell it (time since approval + remaining): the
    #: next server session's count uses it before its own warning comes.
    learned: float | None = None

    def start(self, at: float) -> None:
        """A new server session is current from ``at``: its own count starts."""
        self.started_at = at
        self.warned = None

    def warn(self, remaining: float | None, at: float) -> None:
        """The server's ``conversationTimeWarning`` (None: a warning with no usable number,
        which says nothing about when)."""
        if remaining is not None and remaining >= 0:
            self.warned = (float(remaining), at)
            if self.started_at is not None:
                self.learned = (at - self.started_at) + float(remaining)

    @property
    def known_cap(self) -> float | None:
        """The cap as best known: told by a warning, else the configured one."""
        return self.learned if self.learned is not None else self.cap

    def left(self, now: float) -> float | None:
        if self.warned is not None:
            remaining, at = self.warned
            return max(0.0, remaining - (now - at))
        cap = self.learned if self.learned is not None else self.cap
        if cap is not None and self.started_at is not None:
            return max(0.0, cap - (now - self.started_at))
        return None


Due = Literal["now", "later", "never"]

#: A renewal starts no earlier than this fraction of the cap before its end, and the last
#: safe moment is no earlier than this fraction of the lead time before it: a policy
#: written for a 10-minute cap stays sensible on a short one (a renewal every half cap at
#: most, instead of one right after another).
LEAD_FRACTION = 0.5
MARGIN_FRACTION = 0.25


def effective_lead(policy: RenewalPolicy, cap: float | None) -> tuple[float, float]:
    """(lead time, safety margin) for a cap of ``cap`` seconds (None: unknown): the
    policy's, shortened on a cap too short for them."""
    lead = policy.lead_time
    if cap is not None:
        lead = min(lead, cap * LEAD_FRACTION)
    return lead, min(policy.safety_margin, lead * MARGIN_FRACTION)


def renewal_due(
    policy: RenewalPolicy | None,
    left: float | None,
    *,
    renewals: int,
    running_for: float,
    cap: float | None = None,
) -> Due:
    """Whether a renewal starts now: ``"now"`` once ``left`` is within the policy's lead
    time; ``"never"`` when renewal is off or out of budget (``max_renewals``,
    ``max_duration``); ``"later"`` otherwise (the cap unknown, or still far)."""
    if policy is None:
        return "never"
    if policy.max_renewals is not None and renewals >= policy.max_renewals:
        return "never"
    if policy.max_duration is not None and running_for >= policy.max_duration:
        return "never"
    if left is None or left > effective_lead(policy, cap)[0]:
        return "later"
    return "now"


def swap_deadline(
    policy: RenewalPolicy,
    *,
    ready_at: float,
    now: float,
    left: float | None,
    cap: float | None = None,
) -> float:
    """The latest moment (session clock) the swap waits for a turn boundary: the policy's
    ``boundary_wait`` after the new link was ready, and never past the last safe moment
    (``safety_margin`` before the cap)."""
    deadline = ready_at + policy.boundary_wait
    if left is not None:
        margin = effective_lead(policy, cap)[1]
        deadline = min(deadline, now + max(0.0, left - margin))
    return deadline


@dataclass(frozen=True, slots=True)
class Boundary:
    """What makes a turn boundary, as read from the session's parts at one moment."""

    usable: bool
    floor_busy: bool
    gate_open: bool
    unconfirmed_turns: int
    held_turns: int
    awaiting_replies: int
    pending_tool_calls: int

    @property
    def reached(self) -> bool:
        """The avatar is not talking nor generating, no user turn is unconfirmed, held or
        waiting for its answer, and no tool call waits for its response."""
        return (
            self.usable
            and not self.floor_busy
            and self.gate_open
            and self.unconfirmed_turns == 0
            and self.held_turns == 0
            and self.awaiting_replies == 0
            and self.pending_tool_calls == 0
        )
