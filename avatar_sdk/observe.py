"""The one observer protocol of a session, and its one fan-out.

An :class:`Observer` is told what a session says and hears, as it happens: on the wire
(every Socket.IO event in and out, every socket opened, refused or closed with its reason,
every HTTP exchange, the media lanes' state changes, a periodic media sample), the
application's calls on the session (``speak``, ``interrupt``, ``close``...), and a few
session points no wire fact shows (:class:`Point`: a turn accepted or written, a tool call
dispatched or acknowledged). The cassette recorder and the OpenTelemetry instrumentation
are its two implementations; ``AvatarSession(observer=...)`` adds one of your own.

A session holds one :class:`Observers`: the fan-out its parts and channels report to. It
calls each observer in turn, where the fact happens, and isolates each one (an observer
that raises is logged with its type and never reaches the session). With nobody
observing, it is falsy: hot paths test ``if observers:`` and pay nothing more.

``link`` numbers the control channels of one session in the order they were opened (0 the
first; a cold reconnect opens the next); an in-place (socket tier) recovery keeps its
link's number. ``data`` and ``args`` may hold user text: an observer decides what to keep.
Not a stable public API: facts are added as observers need them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Protocol

from .logs import sdk_logger

__all__ = [
    "NO_OBSERVERS",
    "HttpExchange",
    "Instrumentation",
    "Observer",
    "Observers",
    "Point",
    "observers_of",
]

log = sdk_logger(__name__)


class Point(StrEnum):
    """The session points (facts no wire record shows), and what their ``data`` holds."""

    #: ``speak()``'s turn reached the turn desk (before it is sent or held): {text}
    TURN_REQUESTED = "turn_requested"
    #: a user turn was written to the control socket: {text, resent}
    TURN_SENT = "turn_sent"
    #: a tool call was dispatched: {name, call_id, waits} (``waits``: it expects an ack)
    TOOL_DISPATCHED = "tool_dispatched"
    #: ``respond_to_tool`` finished: {call_id, name, ok, reason, status}
    TOOL_ACKED = "tool_acked"


@dataclass(frozen=True, slots=True)
class HttpExchange:
    """One HTTP request and its answer. ``url`` carries no credential (the SDK sends its
    token in a header, never in a URL); ``status`` None: no answer (timeout, network)."""

    service: str  # "whep" | "genie"
    method: str
    url: str
    status: int | None
    request_body: str | None = None
    response_body: str | None = None
    outcome: str = "ok"


class Observer:
    """Base class: every method does nothing; override the ones you need."""

    # -- the wire ----------------------------------------------------------------------------
    def socket_opened(self, link: int, sid: str, recovered: bool) -> None:
        """The socket of ``link`` is open (``recovered``: an in-place recovery)."""

    def socket_failed(self, link: int, code: str) -> None:
        """Opening the socket of ``link`` failed (an ``ErrorCode`` value)."""

    def socket_closed(self, link: int, reason: str) -> None:
        """The socket of ``link`` closed (Socket.IO's reason: ``transport close``...)."""

    def event_in(self, link: int, name: str, args: list[Any]) -> None:
        """The server sent ``name`` with ``args`` on ``link``."""

    def event_out(self, link: int, name: str, payload: Any) -> None:
        """The session sent ``name`` with ``payload`` on ``link`` (once written)."""

    def http_exchange(self, exchange: HttpExchange) -> None:
        """One HTTP exchange finished (or failed)."""

    def media_state(self, lane: str, state: str) -> None:
        """A media lane's peer (``asr`` | ``stv``) changed its connection state."""

    def media_sample(self, counts: dict[str, int]) -> None:
        """A periodic sample of the media counters (totals since the session started)."""

    # -- the session -------------------------------------------------------------------------
    def session_call(self, name: str, args: dict[str, Any]) -> None:
        """The application called ``name`` on the session (``speak``, ``interrupt``,
        ``close``...), once the call was accepted; ``args`` as given."""

    def point(self, point: Point, data: Mapping[str, Any]) -> None:
        """A session point was reached (:class:`Point` says what ``data`` holds)."""


class Observers(Observer):
    """The observers of one session as one: the fan-out, and the one error isolation.

    ``info``: what the session is, for an observer's resource-like attributes
    (``server_address``, ``server_port``, ``media``); read-only.
    """

    __slots__ = ("_observers", "info")

    def __init__(
        self, observers: Iterable[Observer | None] = (), info: Mapping[str, Any] | None = None
    ) -> None:
        self._observers: list[Observer] = [o for o in observers if o is not None]
        self.info: Mapping[str, Any] = MappingProxyType(dict(info or {}))

    def __bool__(self) -> bool:
        return bool(self._observers)

    def add(self, observer: Observer) -> Callable[[], None]:
        """Tell ``observer`` every fact from now on; returns remove."""
        self._observers.append(observer)

        def remove() -> None:
            if observer in self._observers:
                self._observers.remove(observer)

        return remove

    def _each(self, what: str, call: Callable[[Observer], None]) -> None:
        for observer in list(self._observers):
            try:
                call(observer)
            except Exception as exc:
                log.warning(
                    "an observer failed at %s (%s); the session goes on", what, type(exc).__name__
                )

    def socket_opened(self, link: int, sid: str, recovered: bool) -> None:
        self._each("socket_opened", lambda o: o.socket_opened(link, sid, recovered))

    def socket_failed(self, link: int, code: str) -> None:
        self._each("socket_failed", lambda o: o.socket_failed(link, code))

    def socket_closed(self, link: int, reason: str) -> None:
        self._each("socket_closed", lambda o: o.socket_closed(link, reason))

    def event_in(self, link: int, name: str, args: list[Any]) -> None:
        self._each("event_in", lambda o: o.event_in(link, name, args))

    def event_out(self, link: int, name: str, payload: Any) -> None:
        self._each("event_out", lambda o: o.event_out(link, name, payload))

    def http_exchange(self, exchange: HttpExchange) -> None:
        self._each("http_exchange", lambda o: o.http_exchange(exchange))

    def media_state(self, lane: str, state: str) -> None:
        self._each("media_state", lambda o: o.media_state(lane, state))

    def media_sample(self, counts: dict[str, int]) -> None:
        self._each("media_sample", lambda o: o.media_sample(counts))

    def session_call(self, name: str, args: dict[str, Any]) -> None:
        self._each("session_call", lambda o: o.session_call(name, args))

    def point(self, point: Point, data: Mapping[str, Any]) -> None:
        self._each(str(point), lambda o: o.point(point, data))


def observers_of(observer: Observer | None) -> Observers:
    """``observer`` as a fan-out (itself when it is one): what a channel built on its own
    reports to, so that whatever it is handed is isolated the same way."""
    if isinstance(observer, Observers):
        return observer
    return Observers([observer])


#: Nobody observing: the default of a part built without a session's observers. Never
#: added to (a part that may be observed is given its session's own :class:`Observers`).
NO_OBSERVERS = Observers()


class Instrumentation(Protocol):
    """What ``AvatarSession(telemetry=...)`` accepts: an object that attaches itself to a
    new session (``avatar_sdk.telemetry.Telemetry``)."""

    def attach(self, session: Any) -> None: ...
