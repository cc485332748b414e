"""The inbound router: what a parsed server event means for the session, as plain data.

Pure, like h11's ``next_event``: no I/O, no tasks, no clock. The session feeds each parsed
event (after its link kept the handshake and media parts) to :func:`route` and carries out
the :class:`Routing` it gets back, so every rule here is tested without a network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ...errors import AvatarError, ErrorCode
from ...wire import (
    AgentTurnToTalk,
    ConversationEnded,
    In,
    InboundEvent,
    PauseSessionExpired,
    SessionError,
    SessionReadyForResume,
    StvStartedTalking,
    UserStartedTalking,
)

#: Session-error codes from the agent process, and what they mean for the session.
AGENT_RESTARTED_CODES: Final = frozenset({"AGENT_CHILD_CRASHED_RESTARTED"})
AGENT_FATAL_CODES: Final = frozenset({"AGENT_CHILD_CRASHED", "AGENT_HANDLER_FAILED"})


#: Server events answered once per connect; the connect sequence waits for them.
HANDSHAKE_EVENTS = frozenset(
    {
        In.ON_SERVER_CONNECTED,
        In.CLIENT_CONFIGURATION,
        In.JOIN_COMPLETE,
        In.STV_NEW_SESSION,
        In.SHOW_AGENT,
        In.ASK_PERMISSIONS,
        In.ASR_WEBRTC_READY,
        In.ASR_WEBRTC_ANSWER,
    }
)

#: Server verdicts that end a connect attempt, and the code each maps to.
FATAL_EVENTS: dict[str, ErrorCode] = {
    In.THROW_TO_NO_AGENT: ErrorCode.CAPACITY_UNAVAILABLE,
    In.THROW_TO_EXCEEDED_TIER: ErrorCode.TIER_EXCEEDED,
    In.THROW_TO_BAD_REQUEST: ErrorCode.BAD_REQUEST,
    In.REMOVE_PEER: ErrorCode.PEER_REMOVED,
    In.UNSUPPORTED_CLIENT: ErrorCode.UNSUPPORTED_CLIENT,
}


@dataclass(frozen=True, slots=True)
class Routing:
    """What one inbound event asks of the session (all fields default to "nothing")."""

    #: A server verdict that ends the session (or the connect attempt) with this error.
    fatal: AvatarError | None = None
    #: ``session_error`` event payload, and the error it implies (restart or crash).
    session_error: dict[str, object] | None = None
    agent_error: AvatarError | None = None
    #: The agent is restarting: hold user turns until it is back.
    agent_restarting: bool = False
    #: The agent is shown again (after a restart).
    agent_back: bool = False
    #: The server released the paused session's media ("ready" or "pause_expired").
    released: str | None = None
    conversation_ended: bool = False
    #: Conversation activity (re-arms the idle timer).
    activity: bool = False
    #: The speechId the event carries (turn-confirmation evidence), if any.
    speech_id: str | None = None
    #: The server handed a user turn to the brain: every turn sent before is confirmed.
    turn_to_talk: bool = False


def route(name: str, event: InboundEvent, *, connecting: bool) -> Routing:
    """The meaning of one inbound event. ``connecting``: the connect sequence is running
    (its handshake events are answers to it, not news)."""
    code = FATAL_EVENTS.get(name)
    if code is not None:
        return Routing(fatal=AvatarError(code, name))
    if isinstance(event, SessionError):
        return _session_error(event)
    speech_id = getattr(event, "speech_id", None)
    return Routing(
        released=(
            "pause_expired"
            if isinstance(event, PauseSessionExpired)
            else "ready"
            if isinstance(event, SessionReadyForResume)
            else None
        ),
        agent_back=name == In.SHOW_AGENT and not connecting,
        conversation_ended=isinstance(event, ConversationEnded),
        activity=isinstance(event, AgentTurnToTalk | StvStartedTalking | UserStartedTalking),
        speech_id=speech_id if isinstance(speech_id, str) else None,
        turn_to_talk=isinstance(event, AgentTurnToTalk),
    )


def _session_error(event: SessionError) -> Routing:
    if event.code in AGENT_RESTARTED_CODES:
        return Routing(
            session_error={"code": event.code, "recoverable": True, "message": event.message},
            agent_error=AvatarError(ErrorCode.AGENT_RESTARTED, event.code),
            agent_restarting=True,
        )
    fatal = event.code in AGENT_FATAL_CODES
    return Routing(
        session_error={"code": event.code, "recoverable": not fatal, "message": event.message},
        agent_error=AvatarError(ErrorCode.AGENT_CRASHED, event.code) if fatal else None,
    )
