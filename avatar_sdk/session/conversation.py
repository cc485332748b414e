"""Conversation events: parsed wire events turned into the public event vocabulary.

Pure: no I/O and no clock. The session feeds every parsed inbound event to
:meth:`ConversationView.apply` and emits what it returns, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..wire import (
    AgentEndTurn,
    AgentInterrupted,
    AgentRawText,
    AgentStartSpeech,
    AgentTurnToTalk,
    AvailabilityResult,
    ConversationEnded,
    ConversationResumed,
    ConversationTimeExpired,
    InboundEvent,
    StvFinishedTalking,
    StvSpeechChunk,
    StvStartedTalking,
    TimeWarning,
    UserStartedTalking,
)

PublicEvent = tuple[str, dict[str, Any]]


@dataclass
class ConversationView:
    """What the client knows of the conversation: thread, turn, who is talking."""

    thread_id: str | None = None
    speech_id: str | None = None
    turn_id: str | None = None
    agent_talking: bool = False

    def apply(self, event: InboundEvent) -> list[PublicEvent]:
        """Public events for one inbound event (possibly none)."""
        if isinstance(event, AgentRawText):
            seg = event.segment
            known: list[PublicEvent] = []
            if seg.thread_id and self.thread_id is None:
                # Adopted from the first delta that carries it (the greeting's first
                # ``think`` / ``init_response``): announced at once, before that segment.
                self.thread_id = seg.thread_id
                known.append(("thread_known", {"thread_id": seg.thread_id}))
            return [
                *known,
                (
                    "agent_text",
                    {
                        "speech_id": seg.speech_id,
                        "turn_id": event.turn_id,
                        "type": seg.type,
                        "content": seg.content,
                        "is_final": seg.is_final,
                        # What the avatar says out loud (not tool calls, tool responses,
                        # thinking or UI payloads): the one filter a transcript needs.
                        "spoken": seg.is_spoken,
                    },
                ),
            ]
        if isinstance(event, AgentStartSpeech):
            self.speech_id, self.turn_id = event.speech_id, event.turn_id
            return [
                (
                    "agent_speech_started",
                    {
                        "speech_id": event.speech_id,
                        "turn_id": event.turn_id,
                        "is_new_turn": event.is_new_turn,
                    },
                )
            ]
        if isinstance(event, AgentEndTurn):
            return [("agent_turn_ended", {"speech_id": event.speech_id, "turn_id": event.turn_id})]
        if isinstance(event, StvSpeechChunk):
            duration = None if event.duration_ms is None else event.duration_ms / 1000.0
            return [
                (
                    "caption",
                    {"text": event.text, "speech_id": event.speech_id, "duration": duration},
                )
            ]
        if isinstance(event, StvStartedTalking):
            self.agent_talking = True
            return [("agent_talking", {"talking": True})]
        if isinstance(event, StvFinishedTalking):
            self.agent_talking = False
            return [("agent_talking", {"talking": False})]
        if isinstance(event, AgentTurnToTalk):
            if event.user_transcription:
                return [("user_transcription", {"text": event.user_transcription, "final": True})]
            return []
        if isinstance(event, AgentInterrupted):
            self.agent_talking = False
            return [("agent_interrupted", {})]
        if isinstance(event, UserStartedTalking):
            return [("user_started_talking", {})]
        if isinstance(event, TimeWarning):
            return [("time_warning", {"remaining": event.remaining})]
        if isinstance(event, ConversationTimeExpired):
            return [("time_expired", {})]
        if isinstance(event, ConversationEnded):
            return [("conversation_ended", {})]
        if isinstance(event, ConversationResumed):
            return [("conversation_resumed", {})]
        if isinstance(event, AvailabilityResult):
            details = dict(event.details) if event.details is not None else None
            return [("capacity_changed", {"available": event.available, "details": details})]
        return []
