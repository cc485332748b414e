"""Taps: the internal observation points instrumentations read (telemetry, recording).

The public events (``docs/events.md``) tell an application what happened; a few moments an
instrumentation needs are not events of their own (a ``speak()`` call before its turn goes
out, the turn going out, a tool call's acknowledgement outcome). The parts of a session
report them to its :class:`Taps`, and an instrumentation subscribes with :meth:`Taps.add`:
the core never calls OpenTelemetry (or a recorder) itself, and observes nothing at all when
nothing is attached (one truthiness test per point).

A tap callback runs synchronously where the point is reached; one that raises is logged
with its type and never reaches the session. ``data`` may hold user text: a subscriber
decides what to keep (the telemetry keeps none unless asked, ``docs/observability.md``).
Not a stable public API: the points are added as instrumentations need them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Protocol

from .logs import sdk_logger

__all__ = ["NO_TAPS", "Instrumentation", "Point", "TapCallback", "Taps"]

log = sdk_logger(__name__)


class Point(StrEnum):
    """Every observation point, and what its ``data`` holds."""

    #: ``speak()`` accepted a turn (before it is sent or held): {text}
    TURN_REQUESTED = "turn_requested"
    #: a user turn was written to the control socket: {text, resent}
    TURN_SENT = "turn_sent"
    #: the barge-in marker alone went out (``interrupt()``): {}
    INTERRUPT_SENT = "interrupt_sent"
    #: a tool call was dispatched: {name, call_id, waits} (``waits``: it expects an ack)
    TOOL_DISPATCHED = "tool_dispatched"
    #: ``respond_to_tool`` finished: {call_id, name, ok, reason, status}
    TOOL_ACKED = "tool_acked"


TapCallback = Callable[[Point, Mapping[str, Any]], object]


class Taps:
    """The observation points of one session, and who listens to them.

    ``info``: what the session is, for an instrumentation's resource-like attributes
    (``server_address``, ``server_port``, ``media``); read-only.
    """

    __slots__ = ("_callbacks", "info")

    def __init__(self, info: Mapping[str, Any] | None = None) -> None:
        self._callbacks: list[TapCallback] = []
        self.info: Mapping[str, Any] = MappingProxyType(dict(info or {}))

    def __bool__(self) -> bool:
        return bool(self._callbacks)

    def add(self, callback: TapCallback) -> Callable[[], None]:
        """Call ``callback(point, data)`` at every point from now on; returns remove."""
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    def emit(self, point: Point, data: Mapping[str, Any]) -> None:
        """Report one point (callers test ``if taps:`` first on hot paths)."""
        for callback in list(self._callbacks):
            try:
                callback(point, data)
            except Exception as exc:
                log.warning("a tap callback failed at %s: %s", point, type(exc).__name__)


#: Taps that observe nothing: the default of a part built without a session's taps.
NO_TAPS = Taps()


class Instrumentation(Protocol):
    """What ``AvatarSession(telemetry=...)`` accepts: an object that attaches itself to a
    new session (``avatar_sdk.telemetry.Telemetry``)."""

    def attach(self, session: Any) -> None: ...
