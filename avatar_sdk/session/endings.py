"""How a session ends: gracefully (``close()``, a server end, the idle timeout) or by
failure, and the ``session_completed`` signal that goes with a genuine end.

:class:`Endings` is composed into the session with every resource it releases passed in
explicitly. Teardown is bounded by ``close_timeout`` whatever state the socket and peers
are in, and releases in one order: waiters, tasks, link, guards, tracks, lifecycle, bus.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from ..config import SessionConfig
from ..errors import CATALOGUE, AvatarError, ErrorCode
from ..events.bus import EventBus
from ..events.journal import Journal
from ..guards.brain import ConversationGuards
from ..lifecycle.completion import CompletionSignal, IdleTimer, default_hooks
from ..logs import sdk_logger
from ..transport.rtc.asr import UplinkTrack
from ..transport.rtc.stv import FanoutTrack
from .core.machine import SessionMachine, Trigger
from .core.outcome import Outcome
from .genie_host import GenieHost
from .link_slot import LinkSlot
from .replies import Replies
from .supervisor import Supervisor
from .turn_desk import TurnDesk

log = sdk_logger("avatar_sdk.session")

#: What an ``ended`` event without an error code says to a person.
_ENDED_MESSAGES = {
    "closed": "The session was closed.",
    "cancelled": "Connecting was cancelled.",
    "idle_timeout": "The conversation ended after a long silence.",
}
#: Graceful endings that complete the conversation's thread (``session_completed``).
_COMPLETING = frozenset({"closed", "idle_timeout"})


def ended_message(reason: str) -> str:
    """A readable sentence for an ``ended`` reason that carries no error code."""
    return _ENDED_MESSAGES.get(reason, f"The session ended ({reason}).")


@dataclass
class Endings:
    """The endings of one session (see ``docs/lifecycle.md``)."""

    config: SessionConfig
    machine: SessionMachine
    bus: EventBus
    slot: LinkSlot
    supervisor: Supervisor
    guards: ConversationGuards
    #: The genie client of the moment (its host may be learned at connect).
    genie: GenieHost
    completion: CompletionSignal
    idle: IdleTimer
    journal: Journal | None
    outputs: dict[str, FanoutTrack]
    uplink_track: UplinkTrack
    #: Turns held or unconfirmed: delivered after a recovery, failed at the end.
    desk: TurnDesk
    #: Speech handles and asks: failed at the end.
    replies: Replies
    unregister_signals: Callable[[], None] | None = None
    #: Set once the session is terminal and its ``ended`` event is out: what a ``close()``
    #: that comes while an end is already under way waits for.
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set once the end is over: ``ended`` delivered, the bus drained, the journal and
    #: ``after_end`` closed. What a ``close()`` after (or during) any end returns on.
    done: asyncio.Event = field(default_factory=asyncio.Event)
    #: Closed last, after ``ended`` and the journal (a cassette, an exporter's flush).
    after_end: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)

    def on_task_failure(self, name: str, exc: BaseException) -> None:
        """A supervised task died: the session fails loudly, never limps on."""
        error = AvatarError(ErrorCode.INTERNAL, f"{name}: {type(exc).__name__}")
        if not self.machine.terminal:
            self.supervisor.spawn(self.fail(error, reason="internal"), "fail")

    def on_idle(self) -> None:
        """The idle timer fired: a live conversation ends (and completes its thread)."""
        if self.machine.live:
            self.bus.emit("idle_timeout", {"after": self.config.idle_timeout})
            self.supervisor.spawn(self.end("idle_timeout", None), "idle-end")

    async def settle(self, outcome: Outcome) -> None:
        """Every recovery ends here: fail, or deliver what waited (unconfirmed, held turns)."""
        if not outcome.ok:
            assert outcome.error is not None
            await self.fail(outcome.error, reason=outcome.end_reason)
            return
        if outcome.tier == "cold":
            self.guards.on_rebuilt()
        self.supervisor.spawn(self.desk.after_recovery(outcome.tier), "turn-delivery")

    async def end(self, reason: str, code: ErrorCode | None) -> None:
        """Graceful end: ``disconnecting`` → teardown → ``ended``."""
        if not self.machine.try_fire(Trigger.END):
            return  # already ending or ended: "end" is declared from live states only
        completing: asyncio.Task[None] | None = None
        if reason in _COMPLETING or (
            reason == "conversation_ended" and self.config.complete_on_server_end
        ):
            # Sent beside the teardown, so a slow genie host does not stretch close().
            completing = asyncio.ensure_future(self._signal_completion(reason))
        else:
            self.completion.abandon()
        # Waiters (a held turn, an ask) fail with the end's own code: closed, server_ended.
        await self._teardown(AvatarError(code or ErrorCode.CLOSED, reason))
        if completing is not None:
            await completing
        await self._release_lifecycle()
        self.machine.try_fire(Trigger.FINISHED)
        info = CATALOGUE[code] if code is not None else None
        await self._ended(
            {
                "reason": reason,
                "code": str(code) if code is not None else None,
                "severity": str(info.severity) if info else "info",
                "recoverable": info.retryable if info else False,
                "message": info.message if info else ended_message(reason),
            }
        )

    async def fail(self, error: AvatarError, *, reason: str) -> None:
        """Terminal failure: ``error`` event, teardown, ``failed``, ``ended``."""
        if self.machine.terminal:
            return
        self.machine.note_cause(error)
        self.bus.emit("error", error.as_event())
        self.machine.fire(Trigger.FAIL)
        # A fatal end is not the end of the conversation: the app may continue the thread.
        self.completion.abandon()
        await self._teardown(error)
        await self._release_lifecycle()
        await self._ended(
            {
                "reason": reason,
                "code": str(error.code),
                "severity": str(error.severity),
                "recoverable": error.retryable,
                "message": error.message,
            }
        )

    async def wait_finished(self) -> None:
        """Until an end already under way (a close, a failure, a server end) is over: its
        ``ended`` event delivered and everything it owned released (bounded: its teardown
        and the completion signal are each bounded by ``close_timeout``). Called from one
        of the bus's own callbacks (which the end waits for), only until ``ended`` is out."""
        limit = 2 * self.config.close_timeout + 1.0
        over = self.finished if self.bus.in_callback() else self.done
        try:
            async with asyncio.timeout(limit):
                await over.wait()
        except TimeoutError:
            log.warning("close(): the end under way did not finish within %.1f s", limit)

    async def _ended(self, payload: dict[str, Any]) -> None:
        # Set before the bus drains: a handler awaiting close() must not wait on itself.
        self.finished.set()
        self.bus.emit("ended", payload)
        await self.bus.aclose()
        if self.journal is not None:
            await self.journal.aclose()
        for close in self.after_end:
            try:
                await close()
            except Exception as exc:
                log.warning("closing %r failed (%s)", close, type(exc).__name__)
        self.done.set()

    async def _signal_completion(self, reason: str) -> None:
        """``session_completed``: at most one POST per session, within ``close_timeout``
        here; if the genie host is slower than that, the exit hook retries at interpreter
        exit. Never raises."""
        label = {"closed": "close", "conversation_ended": "server_ended"}.get(reason, reason)
        try:
            async with asyncio.timeout(self.config.close_timeout):
                payload = await self.completion.complete(reason=label)
        except TimeoutError:
            payload = {
                "thread_id": self.completion.thread_id,
                "delivered": False,
                "reason": label,
                "outcome": "timeout",
            }
        self.bus.emit("session_completed", payload)

    async def _release_lifecycle(self) -> None:
        self.idle.cancel()
        if self.completion.finished:
            default_hooks().untrack(self.completion)
        if self.unregister_signals is not None:
            self.unregister_signals()
            self.unregister_signals = None
        genie = self.genie.client
        if genie is not None:
            await genie.close()

    async def _teardown(self, error: AvatarError) -> None:
        """Release every task, socket and waiter this session owns (bounded)."""
        timeout = self.config.close_timeout
        # The session ends: held turns, speech handles and asks fail with ``error``.
        self.desk.fail_held(error)
        self.replies.fail_all(error)
        pending = self.supervisor.cancel_all(spare=asyncio.current_task())
        if pending:
            # Let the cancelled tasks leave the link first (a recovery mid-request must not
            # race the close of the HTTP session or peer it is using); bounded.
            _, pending_set = await asyncio.wait(pending, timeout=timeout / 4)
            pending = list(pending_set)
        links = [
            *self.slot.retiring,
            *self.slot.preparing,
            *([self.slot.current] if self.slot.current else []),
        ]
        self.slot.current = None
        # A link a cancelled cold rebuild was closing is still closing: await it too.
        await asyncio.gather(
            *(link.close(timeout) for link in links), self.supervisor.wait(pending, timeout)
        )
        self.slot.retiring.clear()
        self.slot.preparing.clear()
        await self.guards.aclose()
        for track in self.outputs.values():
            track.stop()
        self.uplink_track.stop()
