"""Small helpers shared by the socket-level figures."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from avatar_sdk import AvatarSession
from avatar_sdk.events.bus import Event
from avatar_sdk.testing import StagingServer


def new_session(staging: StagingServer) -> AvatarSession:
    """A control-plane-only session against the local staging server."""
    return AvatarSession(staging.url, staging.token, media=False, allow_insecure_transport=True)


class Stamp:
    """Timestamps (``time.perf_counter``) of one event name, taken inside the emitting call.

    Register it *before* triggering what causes the event, then ``await stamp.next(t)``: no
    event can slip between the trigger and the wait, and the stamp is the emission instant
    rather than the moment the awaiting task is scheduled again.
    """

    def __init__(self, session: AvatarSession, name: str) -> None:
        self._future: asyncio.Future[tuple[float, Event]] | None = None
        self.unsubscribe: Callable[[], None] = session.on(name, self._on_event)

    def arm(self) -> None:
        self._future = asyncio.get_running_loop().create_future()

    def _on_event(self, event: Event) -> None:
        now = time.perf_counter()
        if self._future is not None and not self._future.done():
            self._future.set_result((now, event))

    async def next(self, timeout: float) -> tuple[float, Event]:
        """The stamp and event of the first emission since :meth:`arm`."""
        if self._future is None:
            raise RuntimeError("Stamp.next() before arm()")
        try:
            return await asyncio.wait_for(self._future, timeout)
        finally:
            self._future = None


async def wait_state(session: AvatarSession, state: str, timeout: float) -> None:
    """Return once ``session.state == state`` (``TimeoutError`` after ``timeout`` s)."""
    loop = asyncio.get_running_loop()
    reached: asyncio.Future[None] = loop.create_future()

    def on_change(event: Event) -> None:
        if event.data.get("state") == state and not reached.done():
            reached.set_result(None)

    unsubscribe = session.on("state_changed", on_change)
    try:
        if session.state != state:
            await asyncio.wait_for(reached, timeout)
    finally:
        unsubscribe()


def describe_error(exc: BaseException) -> str:
    """A one-line description of a failure, for the table and the JSON."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def ms(seconds: float) -> float:
    return seconds * 1000.0


JsonDict = dict[str, Any]
