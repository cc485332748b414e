"""What a ``say`` returns: its handle (three futures on the session's clock) and how it
finished."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["SayHandle", "SayResult", "settle"]


@dataclass(frozen=True, slots=True)
class SayResult:
    """How a say finished. ``at``: on the session's clock. ``reason``: ``played`` (its
    voice ended on the downlink), ``interrupted`` (``interrupt()`` cut it), ``no_onset``
    (no voice within its duration + ``onset_margin``), ``bound`` (its voice ran past the
    duration; finished at the duration), ``ended`` (the session ended first)."""

    at: float
    reason: Literal["played", "interrupted", "no_onset", "bound", "ended"]

    @property
    def interrupted(self) -> bool:
        return self.reason == "interrupted"

    @property
    def observed(self) -> bool:
        """True when the finish was seen on the downlink (not inferred from a bound)."""
        return self.reason in ("played", "interrupted")


class SayHandle:
    """One accepted ``say``: three futures on the session's clock.

    ``accepted``: when the server took it (resolved when ``say`` returns); ``started``:
    the avatar's voice onset for it (None when no onset was seen: see ``finished``);
    ``finished``: a :class:`SayResult`. ``await handle`` waits for ``finished``. Nothing
    here raises: an ended session resolves them (reason ``ended``)."""

    def __init__(self, turn_id: str, duration: float, called_at: float) -> None:
        loop = asyncio.get_running_loop()
        self.turn_id = turn_id
        self.duration = duration
        self.called_at = called_at
        self.accepted: asyncio.Future[float] = loop.create_future()
        self.started: asyncio.Future[float | None] = loop.create_future()
        self.finished: asyncio.Future[SayResult] = loop.create_future()

    def __await__(self) -> Any:
        return asyncio.shield(self.finished).__await__()

    @property
    def done(self) -> bool:
        return self.finished.done()

    def __repr__(self) -> str:
        state = (
            f"finished:{self.finished.result().reason}"
            if self.finished.done()
            else "started"
            if self.started.done()
            else "queued"
        )
        return f"<SayHandle {self.turn_id} {self.duration:.2f}s {state}>"


def settle(fut: asyncio.Future[Any], value: Any) -> None:
    """Resolve ``fut`` unless it already is (a handle is resolved once, by whoever is first)."""
    if not fut.done():
        fut.set_result(value)
