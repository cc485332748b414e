"""Events: the bus, the per-subscriber stream, the names and payload types, the journal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .bus import EventBus, EventSource, known_event
    from .names import PAYLOADS, EventName
    from .stream import Event, Expectation

#: Public name -> the submodule that defines it (loaded on first use).
_EXPORTS: dict[str, str] = {
    "Event": ".stream",
    "EventBus": ".bus",
    "EventName": ".names",
    "EventSource": ".bus",
    "Expectation": ".stream",
    "PAYLOADS": ".names",
    "known_event": ".bus",
}

__all__ = [
    "PAYLOADS",
    "Event",
    "EventBus",
    "EventName",
    "EventSource",
    "Expectation",
    "known_event",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
