"""The retry budgets of the socket and cold tiers: pure arithmetic, times passed in.

Two failures shaped these rules (issue 17):

* **A one-second outage ended sessions.** Against a server refusing every connection for
  1 s, the socket tier spent its 5 attempts in under a second (its waits were 0-0.8 s with
  full jitter) and a fast cold policy spent its 6 in the rest of that second. So the socket
  tier now follows a schedule that spreads its attempts over seconds
  (:data:`SOCKET_TIER_DELAYS`), and the cold tier gives up only when both its attempts and
  ``RetryPolicy.min_span`` seconds since the link was lost are spent
  (:meth:`ColdStreak.exhausted`), whatever the jitter draws.
* **A flapping server was retried forever.** The stable period that renews the cold
  tier's budget ran from the last cold reconnect to the start of the next one, so it
  counted the seconds the socket tier spent failing; and a cold reconnect that held for
  one second was a success that cost nothing. Now a stable period ends when the link is
  first lost, and a cold reconnect whose link did not stay up for ``stable_after``
  counts against the streak like a failed attempt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

from ...config import RetryPolicy

#: Seconds before socket-tier retry n (n = 1, 2, ...; the first attempt is immediate),
#: clamped at the last entry: LiveKit's default reconnect schedule (0.3 * n**2, capped at
#: 7 s). Why this one: most drops are one-off and connection-state recovery restores them
#: in milliseconds, so the first attempt goes at once and the second 0.3 s later (a
#: reconnect that beats the server to noticing the drop is refused: RECOVERY-NOTES); the
#: quadratic growth then spreads the default 5 attempts over 9 s (0, 0.3, 1.5, 4.2, 9.0),
#: so a server that refuses connections for a few seconds is still resumed in place, well
#: inside its ~20 s recovery window. socket.io-client's schedule (1 s growing to 5 s) was
#: the other candidate: it waits a whole second before the first retry, the cost that
#: dominates a recovery on a good network.
SOCKET_TIER_DELAYS: Final[tuple[float, ...]] = (0.3, 1.2, 2.7, 4.8, 7.0)
#: Each socket-tier wait is stretched by up to this fraction, drawn at random, so a fleet
#: dropped together does not retry in lockstep; never shortened, so the schedule above is
#: a floor whatever the draw.
SOCKET_TIER_JITTER: Final = 0.2
#: Shortest wait between the cold attempts made past ``max_attempts`` while ``min_span``
#: runs out, seconds: a policy with tiny waits (or a jitter draw near 0) must not turn the
#: rest of the span into a burst of rebuilds against a server that refuses them.
SPAN_RETRY_FLOOR: Final = 0.5
#: Slack when comparing clock readings (a sleep may wake a hair early).
_EPSILON: Final = 1e-3


def socket_tier_delay(retry: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before socket-tier retry ``retry`` (1-based: the wait after the
    first failed attempt is ``socket_tier_delay(1)``)."""
    if retry < 1:
        return 0.0
    base = SOCKET_TIER_DELAYS[min(retry, len(SOCKET_TIER_DELAYS)) - 1]
    return base * float((rng or random).uniform(1.0, 1.0 + SOCKET_TIER_JITTER))


@dataclass(frozen=True, slots=True)
class BudgetReset:
    """A stable period renewed the cold tier's budget (the ``retry_budget_reset`` event)."""

    spent: int
    stable_for: float


class ColdStreak:
    """The cold tier's streak budget across the outages of one session.

    The session tells it what happened, with the time: the link was lost (:meth:`lost`),
    restored in place (:meth:`restored`), a cold rebuild began (:meth:`begin_cold`), one of
    its attempts failed (:meth:`failed`) or it succeeded (:meth:`succeeded`). It answers
    when the cold tier may give up (:meth:`exhausted`) and how long it waits
    (:meth:`wait`).

    Rules (``docs/resilience.md``, "Retry budgets"):

    * ``spent`` counts failed cold attempts, and cold reconnects whose link was lost again
      before staying up ``stable_after`` seconds, as one streak across outages.
    * A *stable period*: the link stayed up ``stable_after`` seconds without interruption
      since the last cold reconnect, measured up to the moment it was first lost (never
      into the time a cheaper tier then spent failing). With ``reset_after_success`` it
      renews the whole budget.
    * An outage that begins with budget left is tried for at least ``min_span`` seconds
      from the moment the link was lost: the cold tier gives up only once it has spent
      ``max_attempts`` and an attempt started that late has failed too. An outage that
      begins with the budget already spent (the link kept failing) gives up at once.
    """

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self.spent = 0
        #: When the current outage began (the link first lost), None while live.
        self.lost_at: float | None = None
        self._up_since: float | None = None
        self._longest = 0.0  # the longest uninterrupted live stretch since the last rebuild
        self._unproven = False  # a cold reconnect whose stability is not judged yet
        self._span_owed = False  # this outage began with budget left: min_span is owed

    def lost(self, now: float) -> None:
        """The link (or a channel of it) was lost: the live stretch in progress ends here,
        and an outage begins unless one already has."""
        if self._up_since is not None:
            self._longest = max(self._longest, now - self._up_since)
            self._up_since = None
        if self.lost_at is None:
            self.lost_at = now

    def restored(self, now: float) -> None:
        """A cheaper tier restored the link in place: the outage is over, and a new live
        stretch begins."""
        self.lost_at = None
        self._up_since = now

    def begin_cold(self, now: float) -> BudgetReset | None:
        """A cold rebuild begins at ``now``: judge the last cold reconnect (stable: renew
        the budget; lost too soon: one more attempt spent), and note whether this outage
        is owed ``min_span``. The reset, if the budget was renewed."""
        self.lost(now)
        policy = self._policy
        reset = None
        if self._unproven:
            self._unproven = False
            if self._longest >= policy.stable_after:
                if policy.reset_after_success and self.spent:
                    reset = BudgetReset(self.spent, self._longest)
                    self.spent = 0
            else:
                self.spent += 1  # it did not hold: a flapping server must not retry forever
        self._span_owed = self.spent < policy.max_attempts
        return reset

    def failed(self) -> None:
        """A cold attempt failed."""
        self.spent += 1

    def succeeded(self, now: float) -> None:
        """A cold attempt succeeded at ``now``: a new link, not yet proven stable."""
        self.lost_at = None
        self._up_since = now
        self._longest = 0.0
        self._unproven = True

    @property
    def span_ends(self) -> float:
        """Before this time the cold tier does not give up an outage it owes ``min_span``."""
        lost = self.lost_at if self.lost_at is not None else 0.0
        return lost + self._policy.min_span

    def exhausted(self, attempt_started: float) -> bool:
        """May the cold tier give up, its last attempt having started at
        ``attempt_started`` (and failed)?"""
        if self.spent < self._policy.max_attempts:
            return False
        if not self._span_owed:
            return True
        return attempt_started + _EPSILON >= self.span_ends

    def wait(self, delay: float, now: float) -> float:
        """The wait before the next cold attempt: the policy's ``delay``; once the attempts
        are spent while the span is still owed, at least :data:`SPAN_RETRY_FLOOR` and never
        past the end of the span (so the last attempt is made right then, not a capped
        backoff later)."""
        if self._span_owed and self.spent >= self._policy.max_attempts:
            return max(0.0, min(max(delay, SPAN_RETRY_FLOOR), self.span_ends - now))
        return delay
