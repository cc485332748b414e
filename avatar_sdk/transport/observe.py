"""WireObserver: a generic tap on what a session says and hears, for recording and telemetry.

The channels call an observer (when one is given; none by default, at no cost) with facts
as they happen on the wire: every Socket.IO event in and out, every socket opened, refused
or closed (with its reason), every HTTP exchange (WHEP, genie), the media lanes' state
changes, a periodic media sample, and the application's calls on the session. An observer
never changes what happens: each call is made inside :func:`notify`, which logs and
swallows whatever the observer raises.

``link`` numbers the control channels of one session in the order they were opened (0 the
first; a cold reconnect opens the next); an in-place (socket tier) recovery keeps its
link's number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..logs import sdk_logger

log = sdk_logger(__name__)


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


class WireObserver:
    """Base class: every method does nothing; override the ones you need."""

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

    def session_call(self, name: str, args: dict[str, Any]) -> None:
        """The application called ``name`` on the session (``speak``, ``close``...)."""


class FanoutObserver(WireObserver):
    """Several observers as one (a cassette and a tracer, say), each isolated."""

    def __init__(self, observers: list[WireObserver]) -> None:
        self.observers = list(observers)

    def _all(self, call: Callable[[WireObserver], None]) -> None:
        for observer in self.observers:
            notify(observer, call)

    def socket_opened(self, link: int, sid: str, recovered: bool) -> None:
        self._all(lambda o: o.socket_opened(link, sid, recovered))

    def socket_failed(self, link: int, code: str) -> None:
        self._all(lambda o: o.socket_failed(link, code))

    def socket_closed(self, link: int, reason: str) -> None:
        self._all(lambda o: o.socket_closed(link, reason))

    def event_in(self, link: int, name: str, args: list[Any]) -> None:
        self._all(lambda o: o.event_in(link, name, args))

    def event_out(self, link: int, name: str, payload: Any) -> None:
        self._all(lambda o: o.event_out(link, name, payload))

    def http_exchange(self, exchange: HttpExchange) -> None:
        self._all(lambda o: o.http_exchange(exchange))

    def media_state(self, lane: str, state: str) -> None:
        self._all(lambda o: o.media_state(lane, state))

    def media_sample(self, counts: dict[str, int]) -> None:
        self._all(lambda o: o.media_sample(counts))

    def session_call(self, name: str, args: dict[str, Any]) -> None:
        self._all(lambda o: o.session_call(name, args))


def notify(observer: WireObserver | None, call: Callable[[WireObserver], None]) -> None:
    """Call ``call(observer)``; an observer that raises is logged, never propagated."""
    if observer is None:
        return
    try:
        call(observer)
    except Exception as exc:
        log.warning("wire observer failed (%s); the session goes on", type(exc).__name__)


__all__ = ["FanoutObserver", "HttpExchange", "WireObserver", "notify"]
