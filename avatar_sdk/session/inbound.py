"""InboundHandler: carries out what the pure router says an inbound event means.

Facts from the current link (events, protocol errors, disconnects) arrive here; the
:func:`~avatar_sdk.session.core.router.route` decision is applied to the machine's data, the turn
desk,
the conversation view, the guards and the lifecycle, and anything that takes time (an end,
a recovery, a spiral rebuild, waiting for a restarting agent) is started as a supervised
task. Nothing here may raise into the socket's read loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..config import SessionConfig
from ..errors import AvatarError, Category, ErrorCode
from ..guards.brain import ConversationGuards
from ..lifecycle.completion import CompletionSignal, IdleTimer
from ..logs import sdk_logger
from ..wire import ConversationTimeExpired, InboundEvent
from ..wire.disconnect import IO_SERVER_DISCONNECT
from .conversation import ConversationView
from .core.decisions import decide_disconnect
from .core.machine import SessionMachine, Trigger
from .core.router import route
from .core.stats import SessionStats
from .endings import Endings
from .link import ServerLink
from .link_slot import LinkSlot
from .recovery import RecoveryController
from .renewal import RenewalController
from .turn_desk import TurnDesk
from .user_state import UserState

log = sdk_logger("avatar_sdk.session")

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


@dataclass
class InboundHandler:
    """The session's reaction to what its current link reports."""

    config: SessionConfig
    machine: SessionMachine
    slot: LinkSlot
    spawn: Spawn
    endings: Endings
    recovery: RecoveryController
    desk: TurnDesk
    user: UserState
    view: ConversationView
    guards: ConversationGuards
    completion: CompletionSignal
    idle: IdleTimer
    emit: Callable[[str, dict[str, Any]], object]
    stats: SessionStats
    #: Renewal past the time cap: a server session that ends at its cap is taken over.
    renewal: RenewalController | None = None
    _agent_back: asyncio.Future[None] | None = None

    def on_protocol_error(self, link: ServerLink, event: str, detail: str) -> None:
        if link is self.slot.current:
            self.stats.protocol_errors += 1
            self.emit("protocol_error", {"event": event, "detail": detail})

    def on_inbound(self, link: ServerLink, name: str, event: InboundEvent) -> None:
        if link is not self.slot.current:
            return  # a late event from a link we already replaced
        try:
            self.user.observe(link, event)
            self._apply(name, event)
        except Exception as exc:
            # A bug of ours must not take the socket's read loop down with it: report it
            # like a malformed event and keep the session going.
            log.error("handling %r failed: %r", name, exc, exc_info=exc)
            self.on_protocol_error(link, name, f"internal: {type(exc).__name__}")

    def _apply(self, name: str, event: InboundEvent) -> None:
        m, spawn = self.machine, self.spawn
        routing = route(name, event, connecting=m.handshaking)
        if routing.fatal is not None:
            if m.in_conversation:
                spawn(self.endings.fail(routing.fatal, reason=str(routing.fatal.code)), "fail")
            return
        if routing.session_error is not None:
            self.emit("session_error", routing.session_error)
        if routing.agent_error is not None:
            if routing.agent_restarting:
                self.emit("error", routing.agent_error.as_event())
                self._agent_restarting()
            else:
                spawn(self.endings.fail(routing.agent_error, reason="agent_crashed"), "fail")
            return
        if routing.released is not None:
            m.set(media_released=True)
            self.emit("session_released", {"reason": routing.released})
        if routing.agent_back and self._agent_back is not None and not self._agent_back.done():
            self._agent_back.set_result(None)
        self.desk.observe(routing.speech_id, routing.turn_to_talk)
        if self.desk.observe_turn(event):
            # An uninterruptible turn (the greeting) ended: the turns held meanwhile go now.
            spawn(self.desk.flush(join=True), "turn-delivery")
        for public_name, data in self.view.apply(event):
            self.emit(public_name, data)
        if self.view.thread_id and self.completion.thread_id != self.view.thread_id:
            self.completion.hold(self.view.thread_id)
        if routing.activity:
            self.idle.touch()
        spiral = self.guards.observe(event)
        if spiral is not None and m.usable:
            spawn(self._recover_from_spiral(), "spiral-recovery")
        if isinstance(event, ConversationTimeExpired) and self.renewal is not None:
            self.renewal.expired()
        if routing.conversation_ended:
            if self.renewal is not None and self.renewal.take_over():
                return  # the cap ended this server session, not the conversation
            spawn(self.endings.end("conversation_ended", ErrorCode.SERVER_ENDED), "end")

    def on_disconnect(self, link: ServerLink, reason: str) -> None:
        if link is not self.slot.current:
            return
        decision = decide_disconnect(self.machine.state, reason)
        # INFO, a drop nobody asked for included: recovering from it is the SDK's job and
        # its events tell it (reconnecting, reconnected, gave_up); a warning is for what the
        # SDK cannot mend, and the socket libraries' own lines are INFO too (logs.py).
        log.info(
            "control socket disconnected (%s) in %s: %s",
            reason,
            self.machine.state,
            decision.action,
        )
        code = (
            ErrorCode.SERVER_ENDED if reason == IO_SERVER_DISCONNECT else ErrorCode.TRANSPORT_CLOSED
        )
        if decision.action == "abort_connect" or self.machine.cold_reconnecting:
            link.handshake.fail(AvatarError(code, reason))
        elif decision.action == "recover_socket":
            self.slot.tasks(link).spawn(
                self.recovery.recover_socket(link, reason), "socket-recovery"
            )
        elif decision.action == "recover_cold":
            self.spawn(self._recover_cold(reason), "cold-recovery")
        elif decision.action == "end":
            self.spawn(self.endings.end(reason, code), "end")

    async def _recover_cold(self, reason: str) -> None:
        """The socket cannot be resumed (it would be handed the same poisoned message
        again): a brand-new link, same thread."""
        if self.machine.try_fire(Trigger.SESSION_LOST):
            self.machine.note_cause(reason, Category.SERVER)
            await self.recovery.recover_cold(reason)

    # -- agent restart ----------------------------------------------------------------------
    def _agent_restarting(self) -> None:
        # A restarting agent drops user turns: hold them until it is back (showAgent), or
        # for agent_timeout at most, then deliver them in order.
        self.machine.set(agent_restarting=True)
        self.desk.reset_gate()  # the turn in flight (even the greeting) died with the agent
        self._agent_back = back = asyncio.get_running_loop().create_future()
        self.spawn(self._await_agent(back), "agent-restart")

    async def _await_agent(self, back: asyncio.Future[None]) -> None:
        await asyncio.wait({back}, timeout=self.config.agent_timeout)
        self.machine.set(agent_restarting=False)
        await self.desk.flush()

    # -- the hard spiral tier ---------------------------------------------------------------
    async def _recover_from_spiral(self) -> None:
        """The hard spiral limit tripped: rebuild on a brand-new socket (a re-join on the
        live one is silently ignored by the server), then resend the abandoned turn once."""
        if not self.machine.try_fire(Trigger.SESSION_LOST):
            return
        text = self.guards.last_turn_text
        outcome = await self.recovery.recover_cold("tool_spiral_hard_limit")
        if not (outcome.ok and self.config.recover_from_spiral and text):
            return
        if not self.machine.connected:
            return
        self.guards.last_turn_text = None
        if await self.desk.resend_after_spiral(text):
            self.guards.last_turn_text = text
            self.emit("spiral_recovered", {"text": text})
