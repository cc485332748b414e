"""Session configuration. Every duration is in seconds (float).

Both classes check every field when built (``with_()`` and ``dataclasses.replace`` included)
and refuse a bad value with ``AvatarError(INVALID_ARGUMENT)`` naming the field, so a typo
fails at construction instead of deep inside a reconnect.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Final, Literal

from .errors import AvatarError, ErrorCode
from .wire.errors import preview


def _is_seconds(value: object) -> bool:
    """A finite number >= 0 (bool excluded; an int is finite however large)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return value >= 0 and (isinstance(value, int) or math.isfinite(value))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


#: Default of ``SessionConfig.max_message_size``, bytes.
#: Where audio is encoded and decoded (``AvatarSession(audio_codec=)``): aiortc's worker
#: threads, or the event loop (the default: cheaper, ``docs/media.md``).
AudioCodec = Literal["thread", "loop"]
AUDIO_CODECS: Final[tuple[AudioCodec, ...]] = ("thread", "loop")
#: ``audio_codec`` when none is given.
DEFAULT_AUDIO_CODEC: Final[AudioCodec] = "loop"

MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024
#: Smallest ``max_message_size``: below it the connect sequence's own messages would not fit.
MIN_MESSAGE_SIZE: Final = 1024


def _is_message_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= MIN_MESSAGE_SIZE


def _invalid(owner: str, name: str, rule: str, value: object) -> AvatarError:
    return AvatarError(ErrorCode.INVALID_ARGUMENT, f"{owner}.{name} {rule} (got {preview(value)})")


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Backoff for the cold-reconnect tier.

    The first retry is immediate (``initial``), later ones wait ``base * 2**(n-1)`` capped at
    ``cap``, with full jitter (``jitter="none"``: the cap itself) so a fleet of clients does
    not reconnect in lockstep after a server restart. ``max_attempts`` (>= 1) is the streak
    budget: consecutive failed attempts before the session gives up.

    ``reset_after_success``: a connected period of at least ``stable_after`` seconds
    (default 10), measured up to the moment the link is first lost again, resets the cold
    tier's streak budget, so a session that recovered and then stayed up meets its next
    outage with all ``max_attempts``; a cold reconnect whose link drops again sooner counts
    against the same streak like a failed attempt (a flapping server cannot retry forever).

    ``min_span``: an outage that begins with budget left is retried for at least this many
    seconds (default 10) from the moment the link was lost, however fast the attempts fail
    and whatever the jitter draws: the session gives up only when both ``max_attempts`` and
    ``min_span`` are spent. So no outage shorter than ``min_span`` ends a session.
    """

    max_attempts: int = 6
    """Consecutive failed cold attempts (the streak budget, >= 1) before ``gave_up``."""
    initial: float = 0.0
    """Seconds before the first retry: immediate by default, as the reference client does."""
    base: float = 0.25
    """Seconds: the ceiling of retry ``n`` (n >= 2) is ``base * 2**(n-2)``, capped at ``cap``."""
    cap: float = 30.0
    """Seconds: no retry waits longer, however long the streak."""
    jitter: Literal["full", "none"] = "full"
    """``"full"``: each wait is uniform in ``[0, ceiling]`` so a fleet does not reconnect in
    lockstep after a server restart; ``"none"``: the ceiling itself (tests, demos)."""
    reset_after_success: bool = True
    """A connected period of ``stable_after`` seconds renews the whole ``max_attempts`` budget
    (``retry_budget_reset`` event); ``False`` keeps counting for the session's life."""
    stable_after: float = 10.0
    """Seconds connected without interruption (up to the moment the link is first lost)
    that count as stable for ``reset_after_success``; a cold reconnect whose link drops
    sooner counts against the same streak (a flapping server cannot be retried forever)."""
    min_span: float = 10.0
    """Seconds from the loss of the link during which an outage that began with budget left
    is never given up, even once ``max_attempts`` are spent: attempts go on, the last one
    right at the end of the span, so an outage shorter than this never ends a session
    (a budget spent in a burst of fast failures would end it in under a second). 0: the
    attempts alone decide."""

    def __post_init__(self) -> None:
        if not (_is_count(self.max_attempts) and self.max_attempts >= 1):
            raise _invalid("RetryPolicy", "max_attempts", "must be an int >= 1", self.max_attempts)
        for name in ("initial", "base", "cap", "stable_after", "min_span"):
            value = getattr(self, name)
            if not _is_seconds(value):
                raise _invalid("RetryPolicy", name, "must be a finite number >= 0", value)
        if self.jitter not in ("full", "none"):
            raise _invalid("RetryPolicy", "jitter", "must be 'full' or 'none'", self.jitter)
        if not isinstance(self.reset_after_success, bool):
            raise _invalid(
                "RetryPolicy", "reset_after_success", "must be a bool", self.reset_after_success
            )

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        if attempt <= 1:
            return self.initial
        # The exponent is clamped: past ``max_attempts`` (while ``min_span`` runs out) the
        # retry number can grow large, and 2.0 ** 1024 raises OverflowError.
        ceiling = min(self.cap, self.base * 2.0 ** min(attempt - 2, 1000))
        if self.jitter == "none":
            return ceiling
        return float((rng or random).uniform(0.0, ceiling))


@dataclass(frozen=True, slots=True, kw_only=True)
class RenewalPolicy:
    """Renewal past the server's time cap (``SessionConfig(renewal=RenewalPolicy())``).

    When the server's cap approaches (``time_warning``, or ``max_conversation_length``
    known in advance), the session opens a second server link on the same thread, lets its
    opening greeting play there unseen and unheard, and swaps to it at a turn boundary
    (make-before-break); when the service refuses a second live session on the thread it
    closes the old link first (break-before-make). ``docs/lifecycle.md`` tells the whole
    story, and what cannot be known about a real service.
    """

    lead_time: float = 30.0
    """Seconds before the cap at which the renewal starts (the second link is joined)."""
    boundary_wait: float = 15.0
    """Seconds the swap waits, once the new link is ready, for a turn boundary (the avatar
    quiet, no user turn unanswered, no tool call pending) before swapping anyway
    (``session_renewed.cut_turn``); also never later than ``safety_margin`` before the cap."""
    safety_margin: float = 3.0
    """Seconds before the cap that are the last safe moment to swap: past it the swap
    happens at once, mid-turn if need be (``cut_turn``)."""
    max_renewals: int | None = 100
    """Renewals at most in the session's life (None: no bound); past it the session ends
    at the cap like one without renewal. A bound on what an app can run up by accident."""
    max_duration: float | None = None
    """Seconds from ``connect()`` after which no renewal starts (None: no bound)."""
    make_before_break: bool = True
    """False: always close the old link before joining the new one (break-before-make)."""
    retry: RetryPolicy = field(
        default_factory=lambda: RetryPolicy(max_attempts=3, base=0.5, cap=5.0, min_span=0.0)
    )
    """Backoff between attempts when a renewal's new link fails (its socket drops, WHEP
    answers 404, it never becomes playable); the current link is kept meanwhile. Default
    ``RetryPolicy(max_attempts=3, base=0.5, cap=5.0, min_span=0)``: 3 attempts."""

    def __post_init__(self) -> None:
        for name in ("lead_time", "boundary_wait", "safety_margin"):
            value = getattr(self, name)
            if not _is_seconds(value):
                raise _invalid("RenewalPolicy", name, "must be a finite number >= 0", value)
        if self.safety_margin >= self.lead_time and self.lead_time > 0:
            raise _invalid(
                "RenewalPolicy", "safety_margin", "must be less than lead_time", self.safety_margin
            )
        if self.max_renewals is not None and not _is_count(self.max_renewals):
            raise _invalid(
                "RenewalPolicy", "max_renewals", "must be an int >= 0 or None", self.max_renewals
            )
        if self.max_duration is not None and not _is_seconds(self.max_duration):
            raise _invalid(
                "RenewalPolicy", "max_duration", "must be seconds >= 0 or None", self.max_duration
            )
        if not isinstance(self.make_before_break, bool):
            raise _invalid(
                "RenewalPolicy", "make_before_break", "must be a bool", self.make_before_break
            )
        if not isinstance(self.retry, RetryPolicy):
            raise _invalid("RenewalPolicy", "retry", "must be a RetryPolicy", self.retry)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionConfig:
    """Timeouts, budgets and guard limits of a session. Every duration is in seconds.

    Defaults follow the reference client. Build one with keyword arguments, e.g.
    ``SessionConfig(reconnect_window=10.0, idle_timeout=0)``, and derive variants with
    ``config.with_(brain_stall_timeout=5.0)``. A bad value raises
    ``AvatarError(invalid_argument)`` naming the field.
    """

    overall_connect_timeout: float = 30.0
    """Seconds for the whole connect sequence (and each cold-reconnect attempt's handshake);
    every step's own wait is clipped by it. Expiry: ``connect_timeout``."""
    server_connect_timeout: float = 10.0
    """Seconds from opening the socket to the server's ``onServerConnected``. Expiry:
    ``connect_timeout`` (a refused token is ``auth_failed`` at once)."""
    join_room_timeout: float = 5.0
    """Seconds from ``join`` to ``clientConfiguration``. Expiry: ``join_timeout``."""
    join_complete_timeout: float = 20.0
    """Seconds from ``join`` to ``joinComplete`` (longer than ``join_room_timeout``: the
    server sends it only after initialising the thread). Expiry: ``join_timeout``."""
    agent_timeout: float = 10.0
    """Seconds for each of ``showAgent`` and ``askPermissions``; also how long turns are held
    while a restarted agent comes back. Expiry: ``agent_timeout``."""
    asr_timeout: float = 30.0
    """Seconds for each step of the ASR uplink handshake (``asr-webrtc-ready``, the answer,
    ICE connected). Expiry: ``asr_failed``."""
    reconnect_window: float = 22.0
    """Seconds the socket tier may try to restore the same server session (the server keeps
    it about 20 s) before the cold tier takes over."""
    max_reconnect_attempts: int = 5
    """Socket-tier attempts within ``reconnect_window`` before the cold tier takes over."""
    ice_stuck_timeout: float = 10.0
    """Seconds a renegotiated uplink peer may stay in ICE new/checking before that media
    recovery attempt is given up (instead of spending its whole budget)."""
    media_stall_timeout: float = 2.0
    """Seconds without a decoded downlink frame (ICE still up) before the downlink counts as
    dead; also the floor of the uplink's receiver-report deadline."""
    video_stall_timeout: float = 3.0
    """Seconds without a new downlink video frame (assembled from RTP, decoded or not) while
    the voice still arrives before a keyframe is asked for (an RTCP PLI); only for sessions
    that receive video. 0 disables the video rule (the voice alone then keeps the downlink
    alive, as ``media_stall_timeout`` judges it)."""
    video_keyframe_wait: float = 2.0
    """Seconds after that keyframe request, with still no video frame, before the downlink
    is re-subscribed (WHEP, the media tier's in-place recovery)."""
    socket_probe_interval: float = 5.0
    """Seconds of inbound silence on the control socket before it is probed with a
    ``checkAvailability`` round trip; 0 disables the probe (only the socket's own close,
    or Engine.IO's 45 s ping timeout, then notices a dead socket)."""
    socket_probe_timeout: float = 1.0
    """Seconds a probe may take before the socket counts as dead; also the verification of
    a socket-tier recovery."""
    turn_confirm_timeout: float = 3.0
    """After a recovery, seconds a turn sent before it waits for the server's evidence of
    receipt (its speechId, or ``agentTurnToTalk``) before it is resent once
    (``turn_resent``); raise it for a slow brain, 0 resends at once."""
    brain_stall_timeout: float = 12.0
    """Seconds of brain silence after a user turn before ``brain_stalled`` (repeated every
    window while the silence lasts); 0 disables the watchdog."""
    tool_spiral_limit: int = 10
    """Soft spiral tier: raw tool segments in one turn before ``tool_spiral_detected``
    (once per turn; nothing is interrupted); 0 disables spiral counting altogether."""
    hard_tool_spiral_limit: int | None = None
    """Hard spiral tier: tool segments since the last perceivable output before the session
    rebuilds on a new socket (``tool_spiral_recovering``); ``None`` = 3 x
    ``tool_spiral_limit``, 0 disables the hard tier."""
    recover_from_spiral: bool = True
    """After a hard-tier rebuild, resend the abandoned turn once with a words-only prefix
    (``spiral_recovered``); ``False`` only reports it in ``tool_spiral_recovering``."""
    cold_reconnect: RetryPolicy = field(default_factory=RetryPolicy)
    """Backoff and streak budget of the cold tier (a new socket and a full handshake);
    codes that cannot succeed on retry (``auth_failed``, ``tier_exceeded``, ...) stop at
    once."""
    capacity_max_wait: float = 300.0
    """Seconds queued in all, waiting for a free agent (``queued`` events), before the
    session fails with ``capacity_unavailable``."""
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
    """Seconds queued before each new attempt when the backend has no capacity (the
    reference schedule, clamped at its last entry, +-15% jitter)."""
    close_timeout: float = 2.0
    """Seconds within which ``close()`` (or a cancelled ``connect()``) finishes from any
    state, including the WHEP DELETE and the socket's goodbye."""
    idle_timeout: float = 900.0
    """Seconds without conversation activity before the session ends itself (reason
    ``idle_timeout``, and the thread is completed); 0 disables."""
    complete_on_server_end: bool = False
    """Also send ``session_completed`` when the server ends the conversation
    (``conversationEnded``); off as in the reference client, so the application may
    continue the thread."""
    session_complete_timeout: float = 5.0
    """Seconds the ``session_completed`` POST may take (it never stretches ``close()``
    beyond ``close_timeout``)."""
    media_recovery_timeout: float = 10.0
    """Seconds for one in-place media recovery attempt (WHEP re-subscribe or uplink
    renegotiation)."""
    max_media_recoveries: int = 2
    """In-place attempts per channel before escalating to the cold tier."""
    handle_signals: bool = False
    """Install SIGTERM/SIGINT handlers that close the session (and send
    ``session_completed``) before the process goes; off by default: signal handling belongs
    to the application."""
    watch_network: bool = True
    """Notice host network changes by itself (an address added or removed, the default
    route moved, a carrier lost or regained: netlink on Linux, address polling elsewhere)
    and react as to ``notify_network_change()``: probe the control socket at once and
    restart both media channels (``docs/resilience.md``); ``False``: only the application's
    ``notify_network_change()`` and a detected suspend do that."""
    network_poll_interval: float = 2.0
    """Seconds between two looks at the host's addresses where netlink is not available
    (the polling fallback of ``watch_network``); 0 disables the fallback."""
    quality_interval: float = 0.0
    """Seconds between ``connection_quality`` events; 0 (default) = off: no task, no cost."""
    event_queue_size: int = 10_000
    """Default bound of each ``session.events()`` buffer (events, >= 1; ``max_queue=``
    overrides it per stream). A consumer that falls behind loses the oldest events and
    reads an ``events_dropped`` notice where they were."""
    max_message_size: int = MAX_MESSAGE_SIZE
    """Largest control-socket message accepted, in bytes (at least 1024; 4 MiB, aiohttp's
    default). A bigger one is refused unread: one ``protocol_error``, then a cold reconnect,
    because a connection-state recovery would replay it (``docs/security.md``)."""

    wait_for_greeting: bool = False
    """``connect()`` (and so ``async with``) returns only once the opening greeting is over
    (its turn ended and the avatar finished saying it), so a first ``speak()`` is not a
    barge-in; ``connect(wait_for_greeting=...)`` overrides it per call. An agent that does
    not greet: no greeting begins within ``agent_timeout`` of the approval, and
    ``connect()`` returns then."""
    greeting_timeout: float = 30.0
    """Seconds ``connect(wait_for_greeting=True)`` waits for the greeting to be over, after
    the session connected; past it ``connect()`` returns anyway (logged at INFO: the session
    is fine, a turn spoken now is still held until the greeting's end)."""

    max_conversation_length: float | None = None
    """Seconds the server allows one server session (the agent's ``maxConversationLength``,
    when the app provisioned it and knows it), counted from each server session's approval:
    ``session.time_left`` counts down from it before any ``time_warning``, and a renewal
    can be planned without waiting for the warning. None (default): unknown, learned from
    the server's warning."""
    renewal: RenewalPolicy | None = None
    """Renew the server session before the server's cap ends it (a ``RenewalPolicy``); None
    (default): off, the conversation ends at the cap as the server decides."""

    def __post_init__(self) -> None:
        for f in fields(self):
            # Annotations are strings here (postponed evaluation); every one is in the table.
            check, rule = _FIELD_LIMITS.get(f.name) or _FIELD_RULES[str(f.type)]
            value = getattr(self, f.name)
            if not check(value):
                raise _invalid("SessionConfig", f.name, rule, value)
        if self.event_queue_size < 1:
            # A bound of 0 would drop every event: a stream that can never yield anything.
            raise _invalid(
                "SessionConfig", "event_queue_size", "must be an int >= 1", self.event_queue_size
            )

    @property
    def effective_hard_tool_spiral_limit(self) -> int:
        """``None`` means three times the soft limit; 0 disables."""
        if self.hard_tool_spiral_limit is None:
            return self.tool_spiral_limit * 3
        return self.hard_tool_spiral_limit

    def with_(self, **changes: object) -> SessionConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]


#: Fields whose rule is narrower than their type's (checked instead of the type's rule).
_FIELD_LIMITS: Final[dict[str, tuple[Callable[[object], bool], str]]] = {
    "max_message_size": (_is_message_size, f"must be an int >= {MIN_MESSAGE_SIZE} (bytes)"),
}

#: How a SessionConfig field of each annotated type is checked, and the rule it states.
_FIELD_RULES: Final[dict[str, tuple[Callable[[object], bool], str]]] = {
    "float": (_is_seconds, "must be a finite number >= 0"),
    "int": (_is_count, "must be an int >= 0"),
    "int | None": (lambda v: v is None or _is_count(v), "must be an int >= 0 or None"),
    "bool": (lambda v: isinstance(v, bool), "must be a bool"),
    "RetryPolicy": (lambda v: isinstance(v, RetryPolicy), "must be a RetryPolicy"),
    "float | None": (
        lambda v: v is None or (_is_seconds(v) and float(v) > 0),  # type: ignore[arg-type]
        "must be seconds > 0 or None",
    ),
    "RenewalPolicy | None": (
        lambda v: v is None or isinstance(v, RenewalPolicy),
        "must be a RenewalPolicy or None",
    ),
    "tuple[float, ...]": (
        lambda v: isinstance(v, tuple) and all(_is_seconds(x) for x in v),
        "must be a tuple of finite numbers >= 0",
    ),
}
