"""What the server says, and what it means: every inbound event of the control socket is
parsed, offered to the handshake, the media lanes, the conversation view and the guards,
and turned into public events; socket drops go to the machine's rules.

A mixin of :class:`~avatar_sdk.session.AvatarSession`. Nothing in here may raise into the
socket's read loop: a malformed event is a ``protocol_error``, and so is a bug of ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from .config import SessionConfig
from .connector import FATAL_EVENTS, HANDSHAKE_EVENTS, Handshake
from .conversation import ConversationView
from .errors import AvatarError, ErrorCode
from .guards import ConversationGuards
from .lifecycle import CompletionSignal, IdleTimer
from .machine import SessionMachine, decide_disconnect
from .transport.control import ControlChannel
from .transport.csr import IO_SERVER_DISCONNECT
from .transport.media import MediaLanes
from .wire import (
    AgentTurnToTalk,
    AvailabilityResult,
    ConversationEnded,
    In,
    PauseSessionExpired,
    ProtocolError,
    SessionError,
    SessionReadyForResume,
    StvStartedTalking,
    UserStartedTalking,
    parse_event,
)

log = logging.getLogger("avatar_sdk.session")

#: Session-error codes from the agent process, and what they mean for the session.
AGENT_RESTARTED_CODES = frozenset({"AGENT_CHILD_CRASHED_RESTARTED"})
AGENT_FATAL_CODES = frozenset({"AGENT_CHILD_CRASHED", "AGENT_HANDLER_FAILED"})


class InboundDispatch:
    """Inbound events and socket drops of a session."""

    config: SessionConfig
    _machine: SessionMachine
    _channel: ControlChannel | None
    _handshake: Handshake | None
    _lanes: MediaLanes | None
    _view: ConversationView
    _guards: ConversationGuards
    _completion: CompletionSignal
    _idle: IdleTimer
    _stats: dict[str, Any]
    _probe_waiters: list[asyncio.Future[None]]
    _agent_ready: asyncio.Event
    _released: bool

    if TYPE_CHECKING:

        @property
        def state(self) -> str: ...
        def _emit(self, name: str, data: dict[str, Any] | None = None) -> None: ...
        def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]: ...
        async def _end(self, reason: str, code: ErrorCode | None) -> None: ...
        async def _fail(self, error: AvatarError, *, reason: str) -> None: ...
        async def _flush_held(self) -> None: ...
        async def _recover_from_spiral(self) -> None: ...
        async def _socket_recovery(self, channel: ControlChannel, reason: str) -> None: ...

    # -- inbound -----------------------------------------------------------------------------------
    def _on_channel_event(self, channel: ControlChannel, name: str, args: list[Any]) -> None:
        if channel is not self._channel:
            return  # a late event from a socket we already replaced
        try:
            self._dispatch_inbound(name, args)
        except Exception as exc:
            # A bug of ours must not take the socket's read loop down with it: report it
            # like a malformed event and keep the session going.
            log.error("handling %r failed: %r", name, exc, exc_info=exc)
            self._stats["protocol_errors"] += 1
            self._emit(
                "protocol_error", {"event": name, "detail": f"internal: {type(exc).__name__}"}
            )

    def _dispatch_inbound(self, name: str, args: list[Any]) -> None:
        try:
            parsed = parse_event(name, args)
        except ProtocolError as exc:
            self._stats["protocol_errors"] += 1
            self._emit("protocol_error", {"event": exc.event, "detail": exc.detail})
            return
        if name in HANDSHAKE_EVENTS and self._handshake is not None:
            self._handshake.offer(name, parsed)
        code = FATAL_EVENTS.get(name)
        if code is not None:
            self._on_fatal_server_event(AvatarError(code, name))
            return
        if isinstance(parsed, SessionError):
            self._on_session_error(parsed)
            return
        if isinstance(parsed, SessionReadyForResume | PauseSessionExpired):
            # The server let go of the avatar's media while paused; resume() rebuilds it.
            self._released = True
            expired = isinstance(parsed, PauseSessionExpired)
            self._emit("session_released", {"reason": "pause_expired" if expired else "ready"})
        if name == In.SHOW_AGENT and not self._machine.is_in("connecting"):
            self._agent_ready.set()
        if isinstance(parsed, AvailabilityResult):
            for waiter in self._probe_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._probe_waiters.clear()
        if self._lanes is not None:
            self._lanes.on_event(parsed)
        for public_name, data in self._view.apply(parsed):
            self._emit(public_name, data)
        if self._view.thread_id and self._completion.thread_id != self._view.thread_id:
            self._completion.hold(self._view.thread_id)
        if isinstance(parsed, AgentTurnToTalk | StvStartedTalking | UserStartedTalking):
            self._idle.touch()
        spiral = self._guards.observe(parsed)
        if spiral is not None and self._machine.is_in("connected", "recovering_media"):
            self._spawn(self._recover_from_spiral(), "spiral-recovery")
        if isinstance(parsed, ConversationEnded):
            reason = "conversation_ended"
            self._spawn(self._end(reason, ErrorCode.SERVER_ENDED), "end")

    def _on_fatal_server_event(self, error: AvatarError) -> None:
        if self._handshake is not None:
            self._handshake.fail(error)
        if self._machine.is_in("connected", "paused", "reconnecting", "recovering_media"):
            self._spawn(self._fail(error, reason=str(error.code)), "fail")

    def _on_session_error(self, event: SessionError) -> None:
        if event.code in AGENT_RESTARTED_CODES:
            err = AvatarError(ErrorCode.AGENT_RESTARTED, event.code)
            self._emit(
                "session_error", {"code": event.code, "recoverable": True, "message": event.message}
            )
            self._emit("error", err.as_event())
            # A restarting agent drops user turns: hold them until it is back (showAgent),
            # or for agent_timeout at most, then deliver them in order.
            self._agent_ready.clear()
            self._spawn(self._await_agent_ready(), "agent-restart")
            return
        recoverable = event.code not in AGENT_FATAL_CODES
        self._emit(
            "session_error",
            {"code": event.code, "recoverable": recoverable, "message": event.message},
        )
        if not recoverable:
            self._spawn(
                self._fail(
                    AvatarError(ErrorCode.AGENT_CRASHED, event.code), reason="agent_crashed"
                ),
                "fail",
            )

    async def _await_agent_ready(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._agent_ready.wait(), self.config.agent_timeout)
        self._agent_ready.set()
        await self._flush_held()

    def _on_channel_disconnect(self, channel: ControlChannel, reason: str) -> None:
        if channel is not self._channel:
            return
        decision = decide_disconnect(self.state, reason)
        log.info("socket disconnected (%s) in %s: %s", reason, self.state, decision.action)
        if decision.action == "abort_connect":
            if self._handshake is not None:
                code = (
                    ErrorCode.SERVER_ENDED
                    if reason == IO_SERVER_DISCONNECT
                    else ErrorCode.TRANSPORT_CLOSED
                )
                self._handshake.fail(AvatarError(code, reason))
        elif decision.action == "recover_socket":
            self._spawn(self._socket_recovery(channel, reason), "socket-recovery")
        elif decision.action == "end":
            code = (
                ErrorCode.SERVER_ENDED
                if reason == IO_SERVER_DISCONNECT
                else ErrorCode.TRANSPORT_CLOSED
            )
            self._spawn(self._end(reason, code), "end")
