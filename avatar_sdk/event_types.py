"""Every public event name, and the shape of each event's ``data``.

``EventName`` is a ``StrEnum``: its members are strings, so ``session.on("reconnected", ...)``
and ``session.on(EventName.RECONNECTED, ...)`` are the same subscription, and a typo in the
enum form is caught by the type checker instead of silently never firing. The payload
``TypedDict`` s document ``Event.data``; narrow with ``typing.cast``::

    event = await session.wait_for(EventName.RECONNECTED, timeout=5)
    data = cast(ReconnectedPayload, event.data)

A unit test scans the package for emitted event names and literal payload keys, so this
list cannot drift from what the SDK really emits. Durations are seconds.
"""

from enum import StrEnum
from typing import Any, Final, Literal, NotRequired, TypedDict


class EventName(StrEnum):
    """The name of every event the SDK emits (``Event.name``)."""

    # Connectivity
    STATE_CHANGED = "state_changed"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    RECONNECTED = "reconnected"
    MEDIA_RECOVERING = "media_recovering"
    MEDIA_RECOVERED = "media_recovered"
    QUEUED = "queued"
    CAPACITY_CHANGED = "capacity_changed"
    GAVE_UP = "gave_up"
    ENDED = "ended"
    ERROR = "error"
    SESSION_ERROR = "session_error"
    SESSION_RELEASED = "session_released"
    SESSION_COMPLETED = "session_completed"
    PROTOCOL_ERROR = "protocol_error"
    CALLBACK_ERROR = "callback_error"
    EVENTS_DROPPED = "events_dropped"
    CONNECTION_QUALITY = "connection_quality"
    NETWORK_CHANGED = "network_changed"
    IDLE_TIMEOUT = "idle_timeout"
    # Conversation
    AGENT_TEXT = "agent_text"
    AGENT_SPEECH_STARTED = "agent_speech_started"
    AGENT_TURN_ENDED = "agent_turn_ended"
    CAPTION = "caption"
    AGENT_TALKING = "agent_talking"
    USER_TRANSCRIPTION = "user_transcription"
    USER_STARTED_TALKING = "user_started_talking"
    AGENT_INTERRUPTED = "agent_interrupted"
    TOOL_CALL = "tool_call"
    TOOL_CALL_RESULT = "tool_call_result"
    TOOL_CALL_INVALID = "tool_call_invalid"
    RESPONSE_PENDING = "response_pending"
    RESPONSE_SETTLED = "response_settled"
    TIME_WARNING = "time_warning"
    TIME_EXPIRED = "time_expired"
    CONVERSATION_ENDED = "conversation_ended"
    CONVERSATION_RESUMED = "conversation_resumed"
    # Guards
    TOOL_SPIRAL_DETECTED = "tool_spiral_detected"
    TOOL_SPIRAL_RECOVERING = "tool_spiral_recovering"
    SPIRAL_RECOVERED = "spiral_recovered"
    BRAIN_STALLED = "brain_stalled"
    TURN_RESENT = "turn_resent"
    RETRY_BUDGET_RESET = "retry_budget_reset"


# -- connectivity ------------------------------------------------------------------------------
class StateChangedPayload(TypedDict):
    state: str
    previous: str
    trigger: str


class ConnectedPayload(TypedDict):
    thread_id: str | None
    duration: float


class ReconnectingPayload(TypedDict):
    tier: Literal["socket", "media", "cold"]
    attempt: int
    max_attempts: int
    reason: str


class ReconnectedPayload(TypedDict):
    tier: Literal["socket", "media", "cold"]
    recovered: bool  # True only for an in-place socket recovery
    duration: float


class MediaRecoveringPayload(TypedDict):
    channel: Literal["asr", "stv"]
    method: str
    attempt: int
    reason: str


class MediaRecoveredPayload(TypedDict):
    channel: Literal["asr", "stv"]
    method: Literal["ice_restart", "renegotiate", "whep_resubscribe"]
    duration: float


class QueuedPayload(TypedDict):
    attempt: int
    retry_in: float


class CapacityChangedPayload(TypedDict):
    available: bool
    details: dict[str, Any] | None


class GaveUpPayload(TypedDict):
    tier: str
    attempts: int
    code: str


class EndedPayload(TypedDict):
    reason: str
    code: str | None
    severity: str
    recoverable: bool
    message: str  # a readable sentence


class ErrorPayload(TypedDict):
    code: str
    message: str
    severity: str
    recoverable: bool


class SessionErrorPayload(TypedDict):
    code: str
    recoverable: bool
    message: str


class SessionReleasedPayload(TypedDict):
    reason: Literal["ready", "pause_expired"]


class SessionCompletedPayload(TypedDict):
    thread_id: str | None
    delivered: bool
    reason: str
    outcome: str  # sent, already_sent, suppressed, timeout, http_error, ...
    status: NotRequired[int | None]  # the HTTP status, on an HTTP error
    peers: NotRequired[int | None]  # other live holders of the thread, when suppressed


class ProtocolErrorPayload(TypedDict):
    event: str
    detail: str


class CallbackErrorPayload(TypedDict):
    event: str
    error: str


class EventsDroppedPayload(TypedDict):
    """Only in an ``events()`` stream, just before the first event read after a gap."""

    count: int  # events this stream lost since the consumer last read one
    total: int  # this stream's losses so far (``EventStream.dropped``)


class ConnectionQualityPayload(TypedDict):
    channel: Literal["asr", "stv"]
    rtt: float | None  # seconds
    jitter: float | None  # seconds
    packet_loss: float | None  # fraction, 0..1
    bitrate: float | None  # bits per second


class NetworkChangedPayload(TypedDict):
    pass


class IdleTimeoutPayload(TypedDict):
    after: float


# -- conversation ------------------------------------------------------------------------------
class AgentTextPayload(TypedDict):
    speech_id: str | None
    turn_id: str | None
    type: str
    content: str
    is_final: bool
    spoken: bool


class AgentSpeechStartedPayload(TypedDict):
    speech_id: str | None
    turn_id: str | None
    is_new_turn: bool


class AgentTurnEndedPayload(TypedDict):
    speech_id: str | None
    turn_id: str | None


class CaptionPayload(TypedDict):
    text: str
    speech_id: str | None
    duration: float | None


class AgentTalkingPayload(TypedDict):
    talking: bool


class UserTranscriptionPayload(TypedDict):
    text: str
    final: bool


class UserStartedTalkingPayload(TypedDict):
    pass


class AgentInterruptedPayload(TypedDict):
    pass


class ToolCallPayload(TypedDict):
    name: str
    args: dict[str, Any]
    fused_args: list[dict[str, Any]]
    speech_id: str | None
    call_id: str | None


class ToolCallResultPayload(TypedDict):
    call: ToolCallPayload
    ok: bool
    value: NotRequired[Any]  # when ok
    error: NotRequired[str]  # when not ok


class ToolCallInvalidPayload(TypedDict):
    call: ToolCallPayload
    errors: list[str]


class ResponsePendingPayload(TypedDict):
    pass


class ResponseSettledPayload(TypedDict):
    pass


class TimeWarningPayload(TypedDict):
    remaining: float | None


class TimeExpiredPayload(TypedDict):
    pass


class ConversationEndedPayload(TypedDict):
    pass


class ConversationResumedPayload(TypedDict):
    pass


# -- guards ------------------------------------------------------------------------------------
class ToolSpiralDetectedPayload(TypedDict):
    count: int
    limit: int


class ToolSpiralRecoveringPayload(TypedDict):
    count: int
    limit: int
    last_turn_text: str | None


class SpiralRecoveredPayload(TypedDict):
    text: str


class BrainStalledPayload(TypedDict):
    after: float
    count: int


class TurnResentPayload(TypedDict):
    text: str
    tier: str


class RetryBudgetResetPayload(TypedDict):
    tier: str
    spent: int
    stable_for: float


#: The ``Event.data`` shape of each event.
PAYLOADS: Final[dict[EventName, type]] = {
    EventName.STATE_CHANGED: StateChangedPayload,
    EventName.CONNECTED: ConnectedPayload,
    EventName.RECONNECTING: ReconnectingPayload,
    EventName.RECONNECTED: ReconnectedPayload,
    EventName.MEDIA_RECOVERING: MediaRecoveringPayload,
    EventName.MEDIA_RECOVERED: MediaRecoveredPayload,
    EventName.QUEUED: QueuedPayload,
    EventName.CAPACITY_CHANGED: CapacityChangedPayload,
    EventName.GAVE_UP: GaveUpPayload,
    EventName.ENDED: EndedPayload,
    EventName.ERROR: ErrorPayload,
    EventName.SESSION_ERROR: SessionErrorPayload,
    EventName.SESSION_RELEASED: SessionReleasedPayload,
    EventName.SESSION_COMPLETED: SessionCompletedPayload,
    EventName.PROTOCOL_ERROR: ProtocolErrorPayload,
    EventName.CALLBACK_ERROR: CallbackErrorPayload,
    EventName.EVENTS_DROPPED: EventsDroppedPayload,
    EventName.CONNECTION_QUALITY: ConnectionQualityPayload,
    EventName.NETWORK_CHANGED: NetworkChangedPayload,
    EventName.IDLE_TIMEOUT: IdleTimeoutPayload,
    EventName.AGENT_TEXT: AgentTextPayload,
    EventName.AGENT_SPEECH_STARTED: AgentSpeechStartedPayload,
    EventName.AGENT_TURN_ENDED: AgentTurnEndedPayload,
    EventName.CAPTION: CaptionPayload,
    EventName.AGENT_TALKING: AgentTalkingPayload,
    EventName.USER_TRANSCRIPTION: UserTranscriptionPayload,
    EventName.USER_STARTED_TALKING: UserStartedTalkingPayload,
    EventName.AGENT_INTERRUPTED: AgentInterruptedPayload,
    EventName.TOOL_CALL: ToolCallPayload,
    EventName.TOOL_CALL_RESULT: ToolCallResultPayload,
    EventName.TOOL_CALL_INVALID: ToolCallInvalidPayload,
    EventName.RESPONSE_PENDING: ResponsePendingPayload,
    EventName.RESPONSE_SETTLED: ResponseSettledPayload,
    EventName.TIME_WARNING: TimeWarningPayload,
    EventName.TIME_EXPIRED: TimeExpiredPayload,
    EventName.CONVERSATION_ENDED: ConversationEndedPayload,
    EventName.CONVERSATION_RESUMED: ConversationResumedPayload,
    EventName.TOOL_SPIRAL_DETECTED: ToolSpiralDetectedPayload,
    EventName.TOOL_SPIRAL_RECOVERING: ToolSpiralRecoveringPayload,
    EventName.SPIRAL_RECOVERED: SpiralRecoveredPayload,
    EventName.BRAIN_STALLED: BrainStalledPayload,
    EventName.TURN_RESENT: TurnResentPayload,
    EventName.RETRY_BUDGET_RESET: RetryBudgetResetPayload,
}
