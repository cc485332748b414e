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
    THREAD_KNOWN = "thread_known"
    CONNECT_RETRYING = "connect_retrying"
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
    SESSION_RENEWING = "session_renewing"
    SESSION_RENEWED = "session_renewed"
    # Conversation
    AGENT_TEXT = "agent_text"
    AGENT_SPEECH_STARTED = "agent_speech_started"
    AGENT_TURN_ENDED = "agent_turn_ended"
    CAPTION = "caption"
    AGENT_TALKING = "agent_talking"
    USER_TRANSCRIPTION = "user_transcription"
    USER_STARTED_TALKING = "user_started_talking"
    USER_SPEECH_ENDED = "user_speech_ended"
    TURN_LATENCY = "turn_latency"
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
    # Scripted video
    SAY_STARTED = "say_started"
    SAY_FINISHED = "say_finished"
    SESSION_EXPIRING = "session_expiring"


# -- connectivity ------------------------------------------------------------------------------
class StateChangedPayload(TypedDict):
    """The session moved to another state (every transition; ``trigger`` names the cause)."""

    state: str
    previous: str
    trigger: str


class ConnectedPayload(TypedDict):
    """The connect sequence finished: the conversation is usable."""

    thread_id: str | None
    duration: float  # connect() to usable


class ThreadKnownPayload(TypedDict):
    """The conversation's thread id was adopted from the server (the greeting's first
    delta carries it), once per session; ``connect()`` waits for it within the greeting.
    A session given ``thread_id=`` knows it from the start and never emits this."""

    thread_id: str  # keep it to resume the conversation later (AvatarSession(thread_id=...))


class ConnectRetryingPayload(TypedDict):
    """A first-connect attempt failed and ``connect(retry=...)`` tries again after
    ``retry_in`` seconds, on a fresh socket (the failed attempt's is closed)."""

    attempt: int  # the attempt that failed (1: the first)
    max_attempts: int
    code: str  # its error code, e.g. "transport_closed", "unreachable", "join_timeout"
    retry_in: float


class ReconnectingPayload(TypedDict):
    """A recovery tier started (socket: same server session; cold: a new one)."""

    tier: Literal["socket", "media", "cold"]
    attempt: int
    max_attempts: int
    reason: str  # what was lost, e.g. "transport close", "stv session gone (404)"


class ReconnectedPayload(TypedDict):
    """A recovery tier finished and the session is usable again."""

    tier: Literal["socket", "media", "cold"]
    recovered: bool  # True only for an in-place socket recovery
    duration: float  # from noticing the loss to usable again


class MediaRecoveringPayload(TypedDict):
    """One media channel is being recovered in place (the control socket is alive)."""

    channel: Literal["asr", "stv"]
    method: str
    attempt: int
    reason: str


class MediaRecoveredPayload(TypedDict):
    """A media channel works again, verified by media flowing."""

    channel: Literal["asr", "stv"]
    method: Literal["ice_restart", "renegotiate", "whep_resubscribe"]
    duration: float


class QueuedPayload(TypedDict):
    """No agent is free: the session waits ``retry_in`` seconds before trying again."""

    attempt: int
    retry_in: float


class CapacityChangedPayload(TypedDict):
    """The server reported its capacity (``availabilityResult``); information only."""

    available: bool
    details: dict[str, Any] | None


class GaveUpPayload(TypedDict):
    """A recovery tier spent its budget; ``failed`` follows."""

    tier: str
    attempts: int
    code: str


class EndedPayload(TypedDict):
    """The last event of a session, after ``close()``, a server end or a failure."""

    reason: str
    code: str | None
    severity: str
    recoverable: bool
    message: str  # a readable sentence


class ErrorPayload(TypedDict):
    """A classified error; the session may go on (``recoverable``) or be ending."""

    code: str
    message: str
    severity: str
    recoverable: bool


class SessionErrorPayload(TypedDict):
    """The server reported the agent process restarted or gone."""

    code: str
    recoverable: bool
    message: str


class SessionReleasedPayload(TypedDict):
    """While paused, the server let go of the media; ``resume()`` rebuilds it."""

    reason: Literal["ready", "pause_expired"]


class SessionRenewingPayload(TypedDict):
    """A renewal started: a new server session on the same thread is being prepared
    (``docs/lifecycle.md``, Long conversations)."""

    reason: Literal["time_cap", "manual"]
    time_left: float | None  # seconds left on the current server session's cap, if known


class SessionRenewedPayload(TypedDict):
    """The new server session is the user's; the old one was closed (no
    ``session_completed``: the thread goes on)."""

    renewals: int  # renewals so far in this session
    gap: float | None  # old link's last avatar frame to the new one's first (None: no media)
    thread_id: str | None
    strategy: Literal["make_before_break", "break_before_make"]
    cut_turn: bool  # no turn boundary came before the last safe moment
    abandoned_tool_calls: list[str]  # call ids of the old session never answered (cut only)


class SessionCompletedPayload(TypedDict):
    """The outcome of the end-of-conversation signal (``docs/lifecycle.md``)."""

    thread_id: str | None
    delivered: bool
    reason: str
    outcome: str  # sent, already_sent, suppressed, timeout, http_error, ...
    status: NotRequired[int | None]  # the HTTP status, on an HTTP error
    peers: NotRequired[int | None]  # other live holders of the thread, when suppressed


class ProtocolErrorPayload(TypedDict):
    """A server frame the SDK could not accept (malformed, oversized, a reserved name),
    reported once; the session goes on (after a cold reconnect for an oversized one)."""

    event: str  # the frame's event name, or "<unknown>" when it cannot be read
    detail: str


class CallbackErrorPayload(TypedDict):
    """A callback of yours raised; it was isolated and the session goes on."""

    event: str
    error: str


class EventsDroppedPayload(TypedDict):
    """Only in an ``events()`` stream, just before the first event read after a gap."""

    count: int  # events this stream lost since the consumer last read one
    total: int  # this stream's losses so far (``EventStream.dropped``)


class ConnectionQualityPayload(TypedDict):
    """Periodic media statistics per channel (opt-in: ``quality_interval``)."""

    channel: Literal["asr", "stv"]
    rtt: float | None  # seconds
    jitter: float | None  # seconds
    packet_loss: float | None  # fraction, 0..1
    bitrate: float | None  # bits per second


class NetworkChangedPayload(TypedDict):
    """The host network changed; the socket is probed at once and the media restarted.
    ``cause``: ``"application"`` (``notify_network_change()``), ``"resume"`` (a detected
    suspend) or ``"detected"`` (``SessionConfig.watch_network``); ``detail``: what changed
    (``"address 10.0.0.3 added"``), empty when not known."""

    cause: Literal["application", "resume", "detected"]
    detail: str


class IdleTimeoutPayload(TypedDict):
    """No conversation activity for ``idle_timeout`` seconds; the session ends."""

    after: float


# -- conversation ------------------------------------------------------------------------------
class AgentTextPayload(TypedDict):
    """One segment of the brain's answer as it streams (``agent_raw_text``)."""

    speech_id: str | None
    turn_id: str | None
    type: str  # text, avatar, avatar-filler (spoken), think, tool, tool_response, ... (open set)
    content: str
    is_final: bool
    spoken: bool  # said out loud: join these for a transcript (not tools, thinking or UI)


class AgentSpeechStartedPayload(TypedDict):
    """The agent started a new utterance (``is_new_turn``: a new turn, not a repeat)."""

    speech_id: str | None
    turn_id: str | None
    is_new_turn: bool


class AgentTurnEndedPayload(TypedDict):
    """The agent finished its turn."""

    speech_id: str | None
    turn_id: str | None


class CaptionPayload(TypedDict):
    """Text the avatar is speaking, chunk by chunk, as its voice is generated."""

    text: str
    speech_id: str | None
    duration: float | None


class AgentTalkingPayload(TypedDict):
    """The avatar started or stopped talking."""

    talking: bool


class UserTranscriptionPayload(TypedDict):
    """What the server heard the user say (its ASR of the uplink)."""

    text: str
    final: bool


class UserStartedTalkingPayload(TypedDict):
    """The server detected the user speaking."""


class UserSpeechEndedPayload(TypedDict):
    """The SDK found the end of the user's speech on the uplink frames it sends (an energy
    rule with hangover, ``docs/latency.md``): a spoken turn, timed from there."""

    duration: float  # the speech, its first voiced frame to its last
    detected_after: float  # the end of speech to this event (the rule's hangover)


class TurnLatencyPayload(TypedDict):
    """A turn's figures, final (``docs/latency.md``): seconds from the turn written to the
    socket (``source`` ``speak``) or from the end of the user's speech (``voice``); None
    where not seen. The same values as its ``Reply``, the spans and the metrics."""

    source: Literal["speak", "voice"]
    speech_id: str | None
    text_latency: float | None  # -> the first spoken text
    audio_latency: float | None  # -> the first audible avatar frame handed to the app
    generated_latency: float | None  # -> the avatar finished generating the answer
    played_latency: float | None  # -> its last audible frame handed to the app (media)
    voice_to_voice: float | None  # a spoken turn's audio_latency (None for ``speak``)
    interrupted: bool


class AgentInterruptedPayload(TypedDict):
    """The agent's answer was cut by a newer user turn (barge-in)."""


class ToolCallPayload(TypedDict):
    """The brain called a client-side tool (deduplicated within a turn)."""

    name: str
    args: dict[str, Any]
    fused_args: list[dict[str, Any]]
    speech_id: str | None
    call_id: str | None


class ToolCallResultPayload(TypedDict):
    """A tool handler of yours returned or raised."""

    call: ToolCallPayload
    ok: bool
    value: NotRequired[Any]  # when ok
    error: NotRequired[str]  # when not ok


class ToolCallInvalidPayload(TypedDict):
    """A tool call's arguments failed its schema; the handler did not run."""

    call: ToolCallPayload
    errors: list[str]


class ResponsePendingPayload(TypedDict):
    """A user turn awaits an answer."""


class ResponseSettledPayload(TypedDict):
    """The answer started arriving, or the turn ended or was interrupted."""


class TimeWarningPayload(TypedDict):
    """The conversation's time limit is near."""

    remaining: float | None


class TimeExpiredPayload(TypedDict):
    """The conversation's time limit was reached."""


class ConversationEndedPayload(TypedDict):
    """The server ended the conversation."""


class ConversationResumedPayload(TypedDict):
    """The server confirmed ``resume()``: the conversation goes on."""


# -- guards ------------------------------------------------------------------------------------
class ToolSpiralDetectedPayload(TypedDict):
    """Soft spiral tier: many tool calls in one turn (once per turn; nothing is interrupted)."""

    count: int
    limit: int


class ToolSpiralRecoveringPayload(TypedDict):
    """Hard spiral tier: the session rebuilds on a new socket."""

    count: int
    limit: int
    last_turn_text: str | None


class SpiralRecoveredPayload(TypedDict):
    """After a spiral rebuild, the abandoned turn was resent once, words only."""

    text: str


class BrainStalledPayload(TypedDict):
    """The brain stayed silent after a user turn (repeats while it lasts)."""

    after: float
    count: int


class TurnResentPayload(TypedDict):
    """A turn the server never confirmed was resent once after a recovery."""

    text: str
    tier: str


class RetryBudgetResetPayload(TypedDict):
    """A stable connected period renewed the cold tier's streak budget."""

    tier: str
    spent: int
    stable_for: float


#: The ``Event.data`` shape of each event.
# -- scripted video ----------------------------------------------------------------------------
class SayStartedPayload(TypedDict):
    """A ``ScriptedAvatarSession.say`` started: its voice onset on the downlink."""

    turn_id: str
    at: float  # on the session's clock


class SayFinishedPayload(TypedDict):
    """A say finished: its voice ended, an interrupt cut it, or a bound ran out."""

    turn_id: str
    at: float  # on the session's clock
    reason: Literal["played", "interrupted", "no_onset", "bound", "ended"]
    interrupted: bool


class SessionExpiringPayload(TypedDict):
    """The scripted session's token expires soon (``ScriptedConfig.expiry_warning``)."""

    expires_at: float  # the token's exp, epoch seconds
    remaining: float


PAYLOADS: Final[dict[EventName, type]] = {
    EventName.STATE_CHANGED: StateChangedPayload,
    EventName.CONNECTED: ConnectedPayload,
    EventName.THREAD_KNOWN: ThreadKnownPayload,
    EventName.CONNECT_RETRYING: ConnectRetryingPayload,
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
    EventName.SESSION_RENEWING: SessionRenewingPayload,
    EventName.SESSION_RENEWED: SessionRenewedPayload,
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
    EventName.USER_SPEECH_ENDED: UserSpeechEndedPayload,
    EventName.TURN_LATENCY: TurnLatencyPayload,
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
    EventName.SAY_STARTED: SayStartedPayload,
    EventName.SAY_FINISHED: SayFinishedPayload,
    EventName.SESSION_EXPIRING: SessionExpiringPayload,
}
