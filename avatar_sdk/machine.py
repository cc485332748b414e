"""SessionMachine: the one explicit state machine of a session.

Every state and every transition is declared in :data:`STATES` and :data:`TRANSITIONS`
below; nothing else changes a session's state. Channels and guards report facts, the
session runtime turns facts into triggers with the pure ``decide_*`` functions here, and the
machine refuses any transition that is not declared (a bug, reported loudly in tests).

Public state names use ``_`` between levels (``connecting_socket``); internally the
hierarchical machine uses ``/`` because ``stv_session`` itself contains an underscore.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from transitions import MachineError
from transitions.extensions.asyncio import HierarchicalAsyncMachine, NestedAsyncState

from .config import SessionConfig
from .errors import ErrorCode
from .transport.csr import is_recoverable

log = logging.getLogger(__name__)

CONNECT_STEPS: Final = (
    "socket",
    "joining",
    "stv_session",
    "agent",
    "ready",
    "asr",
    "video",
    "approving",
)

STATES: Final[list[Any]] = [
    "idle",
    {"name": "connecting", "children": list(CONNECT_STEPS)},
    "connected",
    "reconnecting",
    "recovering_media",
    "cold_reconnecting",
    "queued",
    "paused",
    "disconnecting",
    "ended",
    "failed",
]

#: States from which the session is still alive (anything but the two terminal ones).
LIVE: Final = [
    "idle",
    "connecting",
    "connected",
    "reconnecting",
    "recovering_media",
    "cold_reconnecting",
    "queued",
    "paused",
]

# (trigger, source(s), destination). The only transitions that exist.
TRANSITIONS: Final[list[tuple[str, str | list[str], str]]] = [
    ("start", "idle", "connecting/socket"),
    ("socket_open", "connecting/socket", "connecting/joining"),
    ("joined", "connecting/joining", "connecting/stv_session"),
    ("stv_ready", "connecting/stv_session", "connecting/agent"),
    ("agent_shown", "connecting/agent", "connecting/ready"),
    ("permissions_asked", "connecting/ready", "connecting/asr"),
    ("media_skipped", "connecting/ready", "connecting/approving"),
    ("asr_ready", "connecting/asr", "connecting/video"),
    ("video_ready", "connecting/video", "connecting/approving"),
    ("approved", "connecting/approving", "connected"),
    # capacity: wait, then a fresh socket and a new join
    ("capacity_unavailable", ["connecting", "cold_reconnecting"], "queued"),
    ("retry", "queued", "connecting/socket"),
    # tier 1: socket-transport recovery (connection-state recovery, no re-join)
    ("transport_lost", ["connected", "paused", "recovering_media"], "reconnecting"),
    ("transport_lost", "reconnecting", "reconnecting"),
    ("recovered", "reconnecting", "connected"),
    # tier 2: media recovery in place
    ("media_down", "connected", "recovering_media"),
    ("media_recovered", "recovering_media", "connected"),
    # tier 3: cold reconnect on a brand-new socket, same thread
    ("recovery_failed", "reconnecting", "cold_reconnecting"),
    ("session_lost", ["connected", "paused", "recovering_media"], "cold_reconnecting"),
    ("cold_reconnected", "cold_reconnecting", "connected"),
    ("pause", "connected", "paused"),
    ("resume", "paused", "connected"),
    # endings
    ("end", [s for s in LIVE if s != "idle"], "disconnecting"),
    ("end", "idle", "ended"),
    ("finished", "disconnecting", "ended"),
    ("fail", [*LIVE, "disconnecting"], "failed"),
]

TERMINAL: Final = frozenset({"ended", "failed"})


@dataclass(frozen=True, slots=True)
class StepTimeout:
    """Which config field bounds a connect step, and the code its expiry reports."""

    field: str
    code: ErrorCode


#: Per-step waits of the connect sequence (PROTOCOL.md §2), declared once.
STEP_TIMEOUTS: Final[dict[str, StepTimeout]] = {
    "onServerConnected": StepTimeout("server_connect_timeout", ErrorCode.CONNECT_TIMEOUT),
    "clientConfiguration": StepTimeout("join_room_timeout", ErrorCode.JOIN_TIMEOUT),
    "joinComplete": StepTimeout("join_complete_timeout", ErrorCode.JOIN_TIMEOUT),
    "stvNewSession": StepTimeout("overall_connect_timeout", ErrorCode.CONNECT_TIMEOUT),
    "showAgent": StepTimeout("agent_timeout", ErrorCode.AGENT_TIMEOUT),
    "askPermissions": StepTimeout("agent_timeout", ErrorCode.AGENT_TIMEOUT),
    "asr-webrtc-ready": StepTimeout("asr_timeout", ErrorCode.ASR_FAILED),
    "asr-webrtc-answer": StepTimeout("asr_timeout", ErrorCode.ASR_FAILED),
}


def step_timeout(config: SessionConfig, event: str) -> tuple[float, ErrorCode]:
    """Seconds allowed for a handshake event, and the code to report when it never comes."""
    spec = STEP_TIMEOUTS[event]
    return float(getattr(config, spec.field)), spec.code


def public_name(internal: str) -> str:
    return internal.replace("/", "_")


# -- decisions (pure) -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DisconnectDecision:
    """What a socket disconnect means in a given state."""

    action: str  # "recover_socket" | "end" | "abort_connect" | "ignore"
    reason: str


def decide_disconnect(state: str, reason: str) -> DisconnectDecision:
    """The machine's rule for a dropped control socket.

    A recoverable reason while live goes to the socket tier; any other reason ends the
    session with that reason (the server ended it on purpose). During the connect sequence a
    drop fails the attempt at once instead of waiting for a step timeout.
    """
    if state.startswith("connecting"):
        return DisconnectDecision("abort_connect", reason)
    if state in ("connected", "paused", "recovering_media"):
        if is_recoverable(reason):
            return DisconnectDecision("recover_socket", reason)
        return DisconnectDecision("end", reason)
    return DisconnectDecision("ignore", reason)


def capacity_delay(
    schedule: tuple[float, ...], attempt: int, rng: random.Random | None = None
) -> float:
    """Seconds to stay ``queued`` before retry ``attempt`` (1-based): the schedule's entry,
    clamped at its last one, with the reference client's ±15% jitter so that a crowd of
    waiting clients does not retry in lockstep."""
    if not schedule:
        return 0.0
    base = schedule[min(max(attempt, 1), len(schedule)) - 1]
    return float(base * (rng or random).uniform(0.85, 1.15))


class ClockJumpDetector:
    """Notices a suspend/resume: the wall clock advanced much more than the monotonic clock
    between two checks (CLOCK_MONOTONIC stops while the host sleeps)."""

    def __init__(self, threshold: float = 2.0) -> None:
        self.threshold = threshold
        self._last: tuple[float, float] | None = None

    def check(self, wall: float, mono: float) -> float | None:
        """Seconds the host was away since the last check, or None."""
        last, self._last = self._last, (wall, mono)
        if last is None:
            return None
        gap = (wall - last[0]) - (mono - last[1])
        return gap if gap > self.threshold else None


def decide_connect_failure(code: ErrorCode) -> str:
    """Trigger for a failed connect attempt: capacity waits in ``queued``, the rest fail."""
    return "capacity_unavailable" if code is ErrorCode.CAPACITY_UNAVAILABLE else "fail"


# -- the machine ------------------------------------------------------------------------------
class _SlashState(NestedAsyncState):
    separator = "/"


class _Machine(HierarchicalAsyncMachine):
    state_cls = _SlashState


class _Model:
    state: str


ChangeListener = Callable[[str, str, str], None]


class SessionMachine:
    """A session's state. ``fire(trigger)`` is the only way to change it."""

    def __init__(self, on_change: ChangeListener | None = None) -> None:
        self._model = _Model()
        self._on_change = on_change
        self._machine = _Machine(
            model=self._model,
            states=STATES,
            transitions=[[t, s, d] for t, s, d in TRANSITIONS],  # type: ignore[misc]
            initial="idle",
            auto_transitions=False,
            send_event=True,
            after_state_change=self._after_change,
            queued=False,
        )
        self.history: list[tuple[str, str, str]] = []

    @property
    def state(self) -> str:
        """Public state name (``connecting_socket``...)."""
        return public_name(self._model.state)

    @property
    def terminal(self) -> bool:
        return self._model.state in TERMINAL

    def is_in(self, *names: str) -> bool:
        """True if the state is one of ``names`` or nested in one of them."""
        internal = self._model.state
        return any(internal == n or internal.startswith(n + "/") for n in names)

    def can(self, trigger: str) -> bool:
        return trigger in self._machine.get_triggers(self._model.state)

    async def fire(self, trigger: str) -> bool:
        """Run a declared transition; False (and a log line) if it is not allowed now."""
        if not self.can(trigger):
            log.debug("transition %r not allowed from %s", trigger, self.state)
            return False
        try:
            return bool(await self._model.trigger(trigger))  # type: ignore[attr-defined]
        except MachineError:
            return False

    def _after_change(self, event: Any) -> None:
        previous = public_name(event.transition.source)
        current = self.state
        trigger = str(event.event.name)
        self.history.append((previous, current, trigger))
        log.info("state %s -> %s (%s)", previous, current, trigger)
        if self._on_change is not None:
            self._on_change(current, previous, trigger)


def mermaid() -> str:
    """The machine as a Mermaid state diagram, generated from :data:`TRANSITIONS`."""
    lines = ["stateDiagram-v2", "  [*] --> idle"]
    lines.append("  state connecting {")
    for a, b in itertools.pairwise(CONNECT_STEPS):
        lines.append(f"    connecting_{a} --> connecting_{b}")
    lines.append("  }")
    seen: set[tuple[str, str, str]] = set()
    for trigger, sources, dest in TRANSITIONS:
        for src in [sources] if isinstance(sources, str) else sources:
            a, b = public_name(src), public_name(dest)
            inner = a.startswith("connecting_") and b.startswith("connecting_")
            if inner and trigger != "media_skipped":
                continue
            key = (a, b, trigger)
            if key in seen:
                continue
            seen.add(key)
            lines.append(f"  {a} --> {b}: {trigger}")
    lines += ["  ended --> [*]", "  failed --> [*]"]
    return "\n".join(lines) + "\n"
