"""Session configuration. Every duration is in seconds (float)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields, replace
from typing import Literal


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff for the cold-reconnect tier.

    The first retry is immediate (``initial``), later ones wait ``base * 2**(n-1)`` capped at
    ``cap``, with full jitter so a fleet of clients does not reconnect in lockstep after a
    server restart.
    """

    max_attempts: int = 6
    initial: float = 0.0
    base: float = 0.25
    cap: float = 30.0
    jitter: Literal["full", "none"] = "full"
    reset_after_success: bool = True
    #: Seconds connected after a cold reconnect before the tier's streak budget resets
    #: (with ``reset_after_success``); shorter stays count as one streak of failures.
    stable_after: float = 10.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        for name in ("initial", "base", "cap", "stable_after"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        if attempt <= 1:
            return self.initial
        ceiling = min(self.cap, self.base * 2.0 ** (attempt - 2))
        if self.jitter == "none":
            return ceiling
        return float((rng or random).uniform(0.0, ceiling))


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Timeouts, budgets and guard limits. Defaults follow the reference client."""

    overall_connect_timeout: float = 30.0
    server_connect_timeout: float = 10.0
    join_room_timeout: float = 5.0
    join_complete_timeout: float = 20.0
    agent_timeout: float = 10.0
    asr_timeout: float = 30.0
    reconnect_window: float = 22.0
    max_reconnect_attempts: int = 5
    ice_stuck_timeout: float = 10.0
    ice_zero_candidates_floor: float = 3.0
    media_stall_timeout: float = 2.0
    socket_probe_interval: float = 5.0
    #: How long a probe (a ``checkAvailability`` round trip) may take before the socket
    #: counts as dead; also the verification of a socket-tier recovery.
    socket_probe_timeout: float = 1.0
    #: After a recovery, how long a turn sent before it waits for the server's evidence of
    #: receipt (its speechId, or ``agentTurnToTalk``) before it is resent once.
    turn_confirm_timeout: float = 3.0
    brain_stall_timeout: float = 12.0
    tool_spiral_limit: int = 10
    hard_tool_spiral_limit: int | None = None
    recover_from_spiral: bool = True
    cold_reconnect: RetryPolicy = field(default_factory=RetryPolicy)
    capacity_max_wait: float = 300.0
    #: Seconds queued before each new attempt when the backend has no capacity (the
    #: reference schedule, clamped at its last entry, ±15% jitter).
    capacity_backoff: tuple[float, ...] = (
        30.0,
        45.0,
        60.0,
        90.0,
        120.0,
        180.0,
        240.0,
        300.0,
        360.0,
    )
    close_timeout: float = 2.0
    idle_timeout: float = 900.0
    complete_on_server_end: bool = False
    session_complete_timeout: float = 5.0
    #: Budget of one in-place media recovery attempt (re-subscribe or renegotiation), seconds.
    media_recovery_timeout: float = 10.0
    #: In-place attempts per channel before escalating to a cold reconnect.
    max_media_recoveries: int = 2
    #: Install SIGTERM/SIGINT handlers that close the session (and send session_completed)
    #: before the process goes; off by default: signal handling belongs to the application.
    handle_signals: bool = False
    #: Seconds between ``connection_quality`` events; 0 (default) = off, no task, no cost.
    quality_interval: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or value is None or isinstance(value, RetryPolicy):
                continue
            if isinstance(value, tuple):
                if not all(
                    isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in value
                ):
                    raise ValueError(f"SessionConfig.{f.name} must hold finite numbers >= 0")
                continue
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"SessionConfig.{f.name} must be a finite number >= 0")

    @property
    def effective_hard_tool_spiral_limit(self) -> int:
        """``None`` means three times the soft limit; 0 disables."""
        if self.hard_tool_spiral_limit is None:
            return self.tool_spiral_limit * 3
        return self.hard_tool_spiral_limit

    def with_(self, **changes: object) -> SessionConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]
