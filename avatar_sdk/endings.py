"""How a session ends: gracefully (``close()``, a server end, the idle timeout) or by
failure, and the ``session_completed`` signal that goes with a genuine end.

A mixin of :class:`~avatar_sdk.session.AvatarSession`. Teardown is bounded by
``close_timeout`` whatever state the socket and peers are in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .config import SessionConfig
from .connector import Handshake
from .errors import CATALOGUE, AvatarError, ErrorCode
from .events import EventBus
from .guards import ConversationGuards
from .journal import Journal
from .lifecycle import CompletionSignal, IdleTimer, default_hooks
from .machine import SessionMachine
from .transport.asr import UplinkTrack
from .transport.control import ControlChannel
from .transport.genie import GenieClient
from .transport.media import MediaLanes
from .transport.stv import FanoutTrack

log = logging.getLogger("avatar_sdk.session")

#: What an ``ended`` event without an error code says to a person.
_ENDED_MESSAGES = {
    "closed": "The session was closed.",
    "cancelled": "Connecting was cancelled.",
    "idle_timeout": "The conversation ended after a long silence.",
}


def ended_message(reason: str) -> str:
    """A readable sentence for an ``ended`` reason that carries no error code."""
    return _ENDED_MESSAGES.get(reason, f"The session ended ({reason}).")


class SessionEndings:
    """Endings of a session (see ``docs/lifecycle.md``)."""

    config: SessionConfig
    _machine: SessionMachine
    _bus: EventBus
    _channel: ControlChannel | None
    _lanes: MediaLanes | None
    _handshake: Handshake | None
    _guards: ConversationGuards
    _genie: GenieClient | None
    _completion: CompletionSignal
    _idle: IdleTimer
    _journal: Journal | None
    _outputs: dict[str, FanoutTrack]
    _uplink_track: UplinkTrack
    _tasks: set[asyncio.Task[Any]]
    _connect_task: asyncio.Task[Any] | None
    _close_requested: bool
    _end_reason: str | None
    _health_reason: str | None
    _health_category: str | None
    _unregister_signals: Callable[[], None] | None

    if TYPE_CHECKING:

        def _emit(self, name: str, data: dict[str, Any] | None = None) -> None: ...
        def _fail_held(self, error: AvatarError) -> None: ...
        def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]: ...

    # -- endings ---------------------------------------------------------------------------------
    async def close(self) -> None:
        """End the session gracefully; returns within ``config.close_timeout`` (+ a little)."""
        if self._machine.terminal:
            return
        self._close_requested = True
        connect_task = self._connect_task
        if connect_task is not None and connect_task is not asyncio.current_task():
            connect_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, AvatarError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(connect_task), self.config.close_timeout)
            if self._machine.terminal:
                return
        await self._end("closed", None)

    async def _finish(self, reason: str) -> None:
        await self._end(reason, None)

    async def _end(self, reason: str, code: ErrorCode | None) -> None:
        """Graceful end: ``disconnecting`` → teardown → ``ended``."""
        if self._machine.terminal or self._machine.is_in("disconnecting"):
            return
        if not await self._machine.fire("end"):
            return
        self._end_reason = reason
        completing: asyncio.Task[None] | None = None
        if reason in ("closed", "idle_timeout") or (
            reason == "conversation_ended" and self.config.complete_on_server_end
        ):
            # Sent beside the teardown, so a slow genie host does not stretch close().
            completing = asyncio.ensure_future(self._signal_completion(reason))
        else:
            self._completion.abandon()
        await self._teardown(AvatarError(ErrorCode.CLOSED, reason))
        if completing is not None:
            await completing
        await self._release_lifecycle()
        if self._machine.is_in("disconnecting"):
            await self._machine.fire("finished")
        info = CATALOGUE[code] if code is not None else None
        self._emit(
            "ended",
            {
                "reason": reason,
                "code": str(code) if code is not None else None,
                "severity": str(info.severity) if info else "info",
                "recoverable": info.retryable if info else False,
                "message": info.message if info else ended_message(reason),
            },
        )
        await self._bus.aclose()
        if self._journal is not None:
            self._journal.close()

    async def _fail(self, error: AvatarError, *, reason: str) -> None:
        """Terminal failure: ``error`` event, teardown, ``failed``, ``ended``."""
        if self._machine.terminal:
            return
        self._health_reason = str(error.code)
        self._health_category = str(error.category)
        self._emit("error", error.as_event())
        await self._machine.fire("fail")
        # A fatal end is not the end of the conversation: the app may continue the thread.
        self._completion.abandon()
        await self._teardown(error)
        await self._release_lifecycle()
        self._emit(
            "ended",
            {
                "reason": reason,
                "code": str(error.code),
                "severity": str(error.severity),
                "recoverable": error.retryable,
                "message": error.message,
            },
        )
        await self._bus.aclose()
        if self._journal is not None:
            self._journal.close()

    async def _signal_completion(self, reason: str) -> None:
        """``session_completed``: at most one POST per session, within ``close_timeout``
        here; if the genie host is slower than that, the exit hook retries at interpreter
        exit. Never raises."""
        label = {"closed": "close", "conversation_ended": "server_ended"}.get(reason, reason)
        try:
            payload = await asyncio.wait_for(
                self._completion.complete(reason=label), self.config.close_timeout
            )
        except TimeoutError:
            payload = {
                "thread_id": self._completion.thread_id,
                "delivered": False,
                "reason": label,
                "outcome": "timeout",
            }
        self._emit("session_completed", payload)

    async def _release_lifecycle(self) -> None:
        self._idle.cancel()
        if self._completion.finished:
            default_hooks().untrack(self._completion)
        if self._unregister_signals is not None:
            self._unregister_signals()
            self._unregister_signals = None
        if self._genie is not None:
            await self._genie.close()

    def _on_idle(self) -> None:
        if self._machine.is_in("connected", "paused"):
            self._emit("idle_timeout", {"after": self.config.idle_timeout})
            self._spawn(self._end("idle_timeout", None), "idle-end")

    async def _teardown(self, error: AvatarError) -> None:
        """Release every task, socket and waiter this session owns (bounded)."""
        current = asyncio.current_task()
        self._fail_held(error)
        if self._handshake is not None:
            self._handshake.fail(error)
        pending = [t for t in self._tasks if t is not current and not t.done()]
        for task in pending:
            task.cancel()
        channel, self._channel = self._channel, None
        await asyncio.gather(
            channel.close(self.config.close_timeout) if channel is not None else asyncio.sleep(0),
            self._close_media(),
        )
        await self._guards.aclose()
        for track in self._outputs.values():
            track.stop()
        self._uplink_track.stop()
        if pending:
            await asyncio.wait(pending, timeout=self.config.close_timeout)

    async def _close_media(self) -> None:
        lanes, self._lanes = self._lanes, None
        if lanes is not None:
            await lanes.close(self.config.close_timeout / 2)
