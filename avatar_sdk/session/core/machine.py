"""SessionMachine: the one explicit state machine of a session.

Every state and every transition is declared in :data:`STATES` and :data:`TRANSITIONS`
below, each transition named by a :class:`Trigger`; nothing else changes a session's state.
Channels and guards report facts, the session runtime turns facts into triggers with the
pure ``decide_*`` functions (:mod:`.decisions`), and the machine refuses any transition that
is not declared: :meth:`SessionMachine.fire` raises
:class:`InvalidTransition` in strict mode (the test suite) and logs an error otherwise;
transitions that may legitimately lose a race use :meth:`SessionMachine.try_fire`.

The machine is synchronous on purpose: every callback is synchronous, and the asyncio
flavour of ``transitions`` turns a caller's ``CancelledError`` into ``False`` and cancels
other tasks mid-transition. Besides the state it holds the session's state *data*
(:class:`MachineData`): the user's pause, media released by the server, an agent that is
restarting, a backoff wait, and the health reason. A socket or cold recovery returns to
``paused`` when the user had paused (the server still holds the pause).

Public state names use ``_`` between levels (``connecting_socket``); internally the
hierarchical machine uses ``/`` because ``stv_session`` itself contains an underscore.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from transitions import MachineError
from transitions.extensions.nesting import HierarchicalMachine, NestedState

from ...config import SessionConfig
from ...errors import AvatarError, Category, ErrorCode
from ...logs import MACHINE_NAME, sdk_logger
from .health import Health

log = sdk_logger(__name__)

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
    "renewing",
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
    "renewing",
]

# Groups of top-level states, each named for the question it answers. They are written here
# only: the rest of the SDK asks the machine's predicates below, never lists states itself.
#: The server link is up and serves the conversation (a socket probe or a drop means something).
LINK_UP: Final = ("connected", "paused", "recovering_media")
#: A server session was joined on this link and has not ended (its verdicts end the session).
IN_CONVERSATION: Final = (*LINK_UP, "reconnecting")
#: The conversation runs: a turn goes out now, media flows and is watched.
USABLE: Final = ("connected", "recovering_media")
#: A turn is taken: sent now, or held until the session is usable again.
TAKES_TURNS: Final = ("reconnecting", "cold_reconnecting", "queued", "renewing", *USABLE)
#: The socket or cold tier is rebuilding the link.
LINK_RECOVERING: Final = ("reconnecting", "cold_reconnecting")
#: A connect sequence runs on the current link (the first one, or a cold rebuild's).
HANDSHAKING: Final = ("connecting", "cold_reconnecting")
#: States out of the ordinary course of a session: a transition into or out of one is logged
#: at INFO (a recovery, a capacity wait, a failure is news to an operator); every other one
#: (the connect steps, connected, a pause, the normal end) at DEBUG, so that a session that
#: goes as expected adds nothing to an application's INFO logs (issue 18: "a quiet library").
#: ``state_changed`` reports every one of them either way.
NOTEWORTHY: Final = frozenset(
    {"reconnecting", "recovering_media", "cold_reconnecting", "queued", "renewing", "failed"}
)


class Trigger(StrEnum):
    """The name of every declared transition: the only names :meth:`SessionMachine.fire`
    takes, and the ones :data:`TRANSITIONS` is built from (a misspelt trigger is an
    ``AttributeError`` at import, not a transition that silently never happens)."""

    START = "start"
    SOCKET_OPEN = "socket_open"
    JOINED = "joined"
    STV_READY = "stv_ready"
    AGENT_SHOWN = "agent_shown"
    PERMISSIONS_ASKED = "permissions_asked"
    MEDIA_SKIPPED = "media_skipped"
    ASR_READY = "asr_ready"
    VIDEO_READY = "video_ready"
    APPROVED = "approved"
    CAPACITY_UNAVAILABLE = "capacity_unavailable"
    RETRY = "retry"
    CONNECT_RETRY = "connect_retry"
    TRANSPORT_LOST = "transport_lost"
    RECOVERED = "recovered"
    MEDIA_DOWN = "media_down"
    MEDIA_RECOVERED = "media_recovered"
    RECOVERY_FAILED = "recovery_failed"
    SESSION_LOST = "session_lost"
    COLD_RECONNECTED = "cold_reconnected"
    PAUSE = "pause"
    RESUME = "resume"
    RENEW_BREAK = "renew_break"
    RENEWED = "renewed"
    RENEWAL_FAILED = "renewal_failed"
    END = "end"
    FINISHED = "finished"
    FAIL = "fail"


# (trigger, source(s), destination[, condition]). The only transitions that exist. A
# condition names a MachineData flag; the first declared transition whose condition holds wins.
TRANSITIONS: Final[list[tuple[Any, ...]]] = [
    (Trigger.START, "idle", "connecting/socket"),
    (Trigger.SOCKET_OPEN, "connecting/socket", "connecting/joining"),
    (Trigger.JOINED, "connecting/joining", "connecting/stv_session"),
    (Trigger.STV_READY, "connecting/stv_session", "connecting/agent"),
    (Trigger.AGENT_SHOWN, "connecting/agent", "connecting/ready"),
    (Trigger.PERMISSIONS_ASKED, "connecting/ready", "connecting/asr"),
    (Trigger.MEDIA_SKIPPED, "connecting/ready", "connecting/approving"),
    (Trigger.ASR_READY, "connecting/asr", "connecting/video"),
    (Trigger.VIDEO_READY, "connecting/video", "connecting/approving"),
    (Trigger.APPROVED, "connecting/approving", "connected"),
    # capacity: wait, then a fresh socket and a new join
    (Trigger.CAPACITY_UNAVAILABLE, ["connecting", "cold_reconnecting"], "queued"),
    (Trigger.RETRY, "queued", "connecting/socket"),
    # connect(retry=...): a failed first-connect attempt, tried again on a fresh socket
    (Trigger.CONNECT_RETRY, "connecting", "connecting/socket"),
    # tier 1: socket-transport recovery (connection-state recovery, no re-join)
    (Trigger.TRANSPORT_LOST, list(LINK_UP), "reconnecting"),
    (Trigger.TRANSPORT_LOST, "reconnecting", "reconnecting"),
    (Trigger.RECOVERED, "reconnecting", "paused", "user_paused"),
    (Trigger.RECOVERED, "reconnecting", "connected"),
    # tier 2: media recovery in place
    (Trigger.MEDIA_DOWN, "connected", "recovering_media"),
    (Trigger.MEDIA_RECOVERED, "recovering_media", "paused", "user_paused"),
    (Trigger.MEDIA_RECOVERED, "recovering_media", "connected"),
    # tier 3: cold reconnect on a brand-new socket, same thread
    (Trigger.RECOVERY_FAILED, "reconnecting", "cold_reconnecting"),
    (Trigger.SESSION_LOST, list(LINK_UP), "cold_reconnecting"),
    (Trigger.SESSION_LOST, "reconnecting", "cold_reconnecting"),
    (Trigger.COLD_RECONNECTED, "cold_reconnecting", "paused", "user_paused"),
    (Trigger.COLD_RECONNECTED, "cold_reconnecting", "connected"),
    (Trigger.PAUSE, "connected", "paused"),
    (Trigger.RESUME, "paused", "connected"),
    # renewal past the server's time cap (session/renewal.py). Make-before-break swaps
    # links while the session stays connected (no transition); break-before-make (the
    # service refused a second live session on the thread, or the old link ended first)
    # closes the old link, then joins the new one: turns are held meanwhile.
    (Trigger.RENEW_BREAK, "connected", "renewing"),
    (Trigger.RENEWED, "renewing", "connected"),
    (Trigger.RENEWAL_FAILED, "renewing", "cold_reconnecting"),
    # endings
    (Trigger.END, [s for s in LIVE if s != "idle"], "disconnecting"),
    (Trigger.END, "idle", "ended"),
    (Trigger.FINISHED, "disconnecting", "ended"),
    (Trigger.FAIL, [*LIVE, "disconnecting"], "failed"),
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


def transition_log_level(previous: str, current: str) -> int:
    """The level of a transition's log line: INFO into or out of a :data:`NOTEWORTHY`
    state, DEBUG otherwise."""
    return logging.INFO if NOTEWORTHY.intersection((previous, current)) else logging.DEBUG


# -- the machine ------------------------------------------------------------------------------
class InvalidTransition(RuntimeError):
    """A trigger fired in a state that does not declare it (a bug of ours)."""


@dataclass(slots=True)
class MachineData:
    """State data that lives with the machine, not in flags beside it."""

    #: The user paused the conversation: recoveries return to ``paused``, a cold
    #: reconnect pauses the new server session again.
    user_paused: bool = False
    #: The server let go of the avatar's media while paused; ``resume()`` rebuilds it.
    media_released: bool = False
    #: The agent process is restarting: user turns are held until it is back.
    agent_restarting: bool = False
    #: A recovery or capacity wait is sleeping before its next attempt.
    backing_off: bool = False
    #: The avatar's media was subscribed at least once (its output tracks are live).
    subscribed: bool = False
    #: Why the upstream is not live (an error code or a disconnect reason), and its category.
    reason: str | None = None
    category: str | None = None


#: Data changes that belong to a transition, applied when it happens.
_ON_TRIGGER: Final[dict[Trigger, dict[str, Any]]] = {
    Trigger.PAUSE: {"user_paused": True},
    Trigger.RESUME: {"user_paused": False, "media_released": False},
    Trigger.RECOVERED: {"reason": None, "category": None, "backing_off": False},
    Trigger.COLD_RECONNECTED: {"reason": None, "category": None, "backing_off": False},
    Trigger.MEDIA_RECOVERED: {"reason": None, "category": None},
    Trigger.APPROVED: {"reason": None, "category": None, "backing_off": False},
    Trigger.RENEWED: {"reason": None, "category": None, "backing_off": False},
}


def strict_default() -> bool:
    """Refuse an undeclared transition loudly (``AVATAR_SDK_STRICT_MACHINE``; the test suite
    sets it) rather than only logging it."""
    return os.environ.get("AVATAR_SDK_STRICT_MACHINE", "") not in ("", "0")


class _SlashState(NestedState):
    separator = "/"


class _Machine(HierarchicalMachine):
    state_cls = _SlashState


class _Model:
    """One session's place in the shared machine: its state, and (weakly) its owner, so
    the shared machine's list of models never keeps a session alive."""

    state: str

    def __init__(self, owner: SessionMachine) -> None:
        self.owner: weakref.ref[SessionMachine] = weakref.ref(owner)


ChangeListener = Callable[[str, str, str], None]


class _Flag:
    """A transition's condition: a :class:`MachineData` flag of the event's session."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def __call__(self, event: Any) -> bool:
        owner = event.model.owner()
        return owner is not None and bool(getattr(owner.data, self.flag))


def _after_change(event: Any) -> None:
    owner = event.model.owner()
    if owner is not None:
        owner._after_change(event)


def _declare(spec: tuple[Any, ...]) -> dict[str, Any]:
    trigger, source, dest, *condition = spec
    declared: dict[str, Any] = {"trigger": str(trigger), "source": source, "dest": dest}
    if condition:
        declared["conditions"] = [_Flag(condition[0])]
    return declared


_SHARED: _Machine | None = None


def _shared_machine() -> _Machine:
    """The one ``transitions`` machine every session's model is added to: the states,
    events and transitions are declared once per process, not once per session (each
    declaration is about 500 objects the garbage collector tracks; issue 23)."""
    global _SHARED  # noqa: PLW0603 - built on first use, then read only
    if _SHARED is None:
        _SHARED = _Machine(
            model=None,
            states=STATES,
            transitions=[_declare(t) for t in TRANSITIONS],
            initial="idle",
            auto_transitions=False,
            send_event=True,
            after_state_change=_after_change,
            queued=False,
            name=MACHINE_NAME,  # avatar_sdk.logs filters this machine's INFO lines only
        )
    return _SHARED


class SessionMachine:
    """A session's state and state data. ``fire(trigger)`` is the only way to change state."""

    def __init__(
        self, on_change: ChangeListener | None = None, *, strict: bool | None = None
    ) -> None:
        self._model = _Model(self)
        self._on_change = on_change
        self.strict = strict_default() if strict is None else strict
        self.data = MachineData()
        self._machine = _shared_machine()
        self._machine.add_model(self._model, initial="idle")
        # Leaves the shared machine when this session's machine is collected.
        weakref.finalize(self, self._machine.remove_model, self._model)
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

    # -- the rules about states (predicates; the only place state groups are spelled) ------
    @property
    def idle(self) -> bool:
        """Not started yet: ``connect()`` may run."""
        return self.is_in("idle")

    @property
    def connected(self) -> bool:
        """Connected and not paused nor recovering anything."""
        return self.is_in("connected")

    @property
    def paused(self) -> bool:
        return self.is_in("paused")

    @property
    def live(self) -> bool:
        """A conversation in progress on a working link (``connected`` or ``paused``): what
        ``health()`` calls live, and what an idle timeout may end."""
        return self.is_in("connected", "paused")

    @property
    def link_up(self) -> bool:
        """The link is up and serves the conversation (see :data:`LINK_UP`)."""
        return self.is_in(*LINK_UP)

    @property
    def in_conversation(self) -> bool:
        """A joined server session that has not ended (see :data:`IN_CONVERSATION`)."""
        return self.is_in(*IN_CONVERSATION)

    @property
    def usable(self) -> bool:
        """Turns go out now and media is watched (see :data:`USABLE`)."""
        return self.is_in(*USABLE)

    @property
    def takes_turns(self) -> bool:
        """A turn is accepted: sent now or held for later (see :data:`TAKES_TURNS`)."""
        return self.is_in(*TAKES_TURNS)

    @property
    def may_send_turn(self) -> bool:
        """A user turn may go out right now: usable, with the agent there (not restarting)."""
        return self.usable and not self.data.agent_restarting

    @property
    def recovering_media(self) -> bool:
        return self.is_in("recovering_media")

    @property
    def link_recovering(self) -> bool:
        """The socket or the cold tier is rebuilding the link."""
        return self.is_in(*LINK_RECOVERING)

    @property
    def recovering(self) -> bool:
        """Any recovery tier is running (socket, cold or media)."""
        return self.link_recovering or self.recovering_media

    @property
    def cold_reconnecting(self) -> bool:
        return self.is_in("cold_reconnecting")

    @property
    def handshaking(self) -> bool:
        """A connect sequence runs on the current link (see :data:`HANDSHAKING`)."""
        return self.is_in(*HANDSHAKING)

    def note_cause(self, cause: AvatarError | str, category: Category | str | None = None) -> None:
        """Record why the session left its course (``health().reason`` / ``category``): an
        error's code and category, or a reason word with its category."""
        if isinstance(cause, AvatarError):
            self.set(reason=str(cause.code), category=str(cause.category))
        else:
            self.set(reason=cause, category=None if category is None else str(category))

    def can(self, trigger: Trigger) -> bool:
        return trigger in self._machine.get_triggers(self._model.state)

    def fire(self, trigger: Trigger) -> None:
        """Run a declared transition. Firing an undeclared one is a bug: it raises
        :class:`InvalidTransition` in strict mode and is logged as an error otherwise
        (callers that may lose a race use :meth:`try_fire`)."""
        if not self.try_fire(trigger):
            message = f"transition {str(trigger)!r} is not declared from {self.state}"
            if self.strict:
                raise InvalidTransition(message)
            log.error(message)

    def try_fire(self, trigger: Trigger) -> bool:
        """Run a transition if it is declared now; False (nothing changes) if not."""
        if not self.can(trigger):
            log.debug("transition %r not allowed from %s", str(trigger), self.state)
            return False
        try:
            fired = bool(self._model.trigger(str(trigger)))  # type: ignore[attr-defined]
        except MachineError:
            return False
        if fired:
            for key, value in _ON_TRIGGER.get(trigger, {}).items():
                setattr(self.data, key, value)
        return fired

    def set(self, **changes: Any) -> None:
        """Change state data (a fact the machine keeps: released media, a backoff...)."""
        for key, value in changes.items():
            if not hasattr(self.data, key):
                raise AttributeError(f"MachineData has no field {key!r}")
            setattr(self.data, key, value)

    def health(self) -> Health:
        """Upstream health, read from the state and its data."""
        if self.live:
            return Health("live")
        upstream = (
            "failed"
            if self.is_in("failed")
            else "idle"
            if self.is_in("idle", "ended", "disconnecting")
            else "backoff"
            if self.data.backing_off or self.is_in("queued")
            else "connecting"
        )
        return Health(upstream, self.data.reason, self.data.category)

    def _after_change(self, event: Any) -> None:
        previous = public_name(event.transition.source)
        current = self.state
        trigger = str(event.event.name)
        self.history.append((previous, current, trigger))
        level = transition_log_level(previous, current)
        log.log(level, "state %s -> %s (%s)", previous, current, trigger)
        if self._on_change is not None:
            self._on_change(current, previous, trigger)
