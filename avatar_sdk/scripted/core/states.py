"""The scripted session's states and the only moves between them (pure).

A :class:`~.session.ScriptedAvatarSession` is ``idle`` until ``start()``, ``connecting``
while it creates the server session and subscribes, ``live`` once the first frame came,
``recovering`` while its downlink re-subscribes, and ``ended`` for good. Every move is
declared in :data:`MOVES`; :meth:`ScriptedStates.move` refuses any other one as the live
session's machine does (raised in strict mode, the test suite; logged otherwise).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from ...logs import sdk_logger
from ...session.core.machine import InvalidTransition, strict_default

__all__ = ["MOVES", "OPEN", "UPSTREAM", "ScriptedState", "ScriptedStates"]

log = sdk_logger(__name__)


class ScriptedState(StrEnum):
    """Where a scripted session is (its public ``state`` string)."""

    IDLE = "idle"
    CONNECTING = "connecting"
    LIVE = "live"
    RECOVERING = "recovering"
    ENDED = "ended"


#: The only moves: state -> the states it may go to.
MOVES: Final[dict[ScriptedState, frozenset[ScriptedState]]] = {
    # start(); end() before start()
    ScriptedState.IDLE: frozenset({ScriptedState.CONNECTING, ScriptedState.ENDED}),
    # the first frame came; start() failed or end() came first
    ScriptedState.CONNECTING: frozenset({ScriptedState.LIVE, ScriptedState.ENDED}),
    # the downlink re-subscribes; end(), the server reclaimed it, or the watch gave up
    ScriptedState.LIVE: frozenset({ScriptedState.RECOVERING, ScriptedState.ENDED}),
    # re-subscribed (or failed to, and is watched again); ended meanwhile
    ScriptedState.RECOVERING: frozenset({ScriptedState.LIVE, ScriptedState.ENDED}),
    ScriptedState.ENDED: frozenset(),
}

#: States in which the session takes calls (``say``, ``interrupt``, ``keep_alive``).
OPEN: Final = frozenset({ScriptedState.LIVE, ScriptedState.RECOVERING})

#: ``health().upstream`` of each state but ``ended`` (``failed`` or ``idle`` by its cause).
UPSTREAM: Final[dict[ScriptedState, str]] = {
    ScriptedState.IDLE: "idle",
    ScriptedState.CONNECTING: "connecting",
    ScriptedState.LIVE: "live",
    ScriptedState.RECOVERING: "connecting",
}


class ScriptedStates:
    """One scripted session's state; :meth:`move` is the only way to change it."""

    def __init__(
        self, initial: ScriptedState = ScriptedState.IDLE, *, strict: bool | None = None
    ) -> None:
        self.state = initial
        self.strict = strict_default() if strict is None else strict

    @property
    def open(self) -> bool:
        """The session takes calls (see :data:`OPEN`)."""
        return self.state in OPEN

    @property
    def ended(self) -> bool:
        return self.state is ScriptedState.ENDED

    def move(self, to: ScriptedState) -> bool:
        """Go to ``to`` if :data:`MOVES` declares it; an undeclared move is a bug of ours:
        it raises :class:`InvalidTransition` in strict mode, is logged otherwise, and
        changes nothing (False)."""
        if to in MOVES[self.state]:
            self.state = to
            return True
        message = f"scripted move {self.state} -> {to} is not declared"
        if self.strict:
            raise InvalidTransition(message)
        log.error(message)
        return False
