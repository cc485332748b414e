"""Typed parsing of server → client events (PROTOCOL §3, §7).

``parse_event`` is the single entry point the control channel calls for every inbound
Socket.IO event. It returns one frozen dataclass per event and raises nothing but
``ProtocolError``, so a malformed or hostile payload costs one dropped event, never a
crashed dispatcher. Optional fields of the wrong type become ``None``; text fields are
clamped (§7) before any listener can see them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from .clamp import clamp_text
from .errors import ProtocolError, preview
from .names import In
from .segments import BrainSegment, parse_delta

__all__ = [
    "AgentEndTurn",
    "AgentInterrupted",
    "AgentRawText",
    "AgentStartSpeech",
    "AgentTurnToTalk",
    "AskPermissions",
    "AsrAnswer",
    "AsrError",
    "AsrIceCandidate",
    "AsrReady",
    "AvailabilityResult",
    "ClientConfiguration",
    "ConversationEnded",
    "ConversationResumed",
    "ConversationTimeExpired",
    "FatalServerEvent",
    "GeneratingSpeech",
    "Ignored",
    "InboundEvent",
    "JoinComplete",
    "PauseSessionExpired",
    "ResumingSession",
    "ServerConnected",
    "SessionError",
    "SessionReadyForResume",
    "ShowAgent",
    "SmartTurnStatus",
    "StvFinishedGenerating",
    "StvFinishedTalking",
    "StvNewSession",
    "StvSpeechChunk",
    "StvStartedTalking",
    "StvTaskFail",
    "TimeWarning",
    "UnknownEvent",
    "UserStartedTalking",
    "parse_event",
]

_AUDIO_ONLY_RE: Final = re.compile(r"no STV session", re.IGNORECASE)
#: Short server-supplied codes (error codes, reasons) are cut to this length.
_MAX_CODE: Final = 200


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class ServerConnected:
    """``onServerConnected``: handshake done; ``host_name`` identifies the pod."""

    final_url: str | None
    agent_name: str | None
    host_name: str | None
    loading_video_url: str | None = None


@dataclass(frozen=True, slots=True)
class ClientConfiguration:
    """``clientConfiguration``: per-session agent configuration (§3.8), unwrapped."""

    config: Mapping[str, Any]

    @property
    def capabilities(self) -> Mapping[str, bool]:
        """Feature flags as the reference client derives them (interruptions default on)."""
        c = self.config
        return {
            "screen_share": _truthy(c.get("isScreenShareEnabled")),
            "camera_analysis": _truthy(c.get("isCameraAnalysisEnabled")),
            "web_search": _truthy(c.get("isWebSearchEnabled")),
            "interruptions": c.get("interruptionsEnabled") is not False,
            "tap_to_talk": _truthy(c.get("isTapToTalk")),
        }


@dataclass(frozen=True, slots=True)
class JoinComplete:
    """``joinComplete``: the server finished thread init for our ``join``."""


@dataclass(frozen=True, slots=True)
class StvNewSession:
    """``stvNewSession``: the video (STV) session, or the audio/phone-mode reply."""

    session_id: str | None
    status: str | None
    webrtc_url: str | None

    @property
    def audio_only(self) -> bool:
        """No video downlink will exist, so the WHEP/playable gate must be skipped."""
        if self.status is not None and _AUDIO_ONLY_RE.search(self.status):
            return True
        return not self.session_id


@dataclass(frozen=True, slots=True)
class ShowAgent:
    """``showAgent``: the agent is ready."""


@dataclass(frozen=True, slots=True)
class AskPermissions:
    """``askPermissions``: the server is ready for media; ``audio`` may arrive as an object."""

    audio: bool
    video: bool


@dataclass(frozen=True, slots=True)
class AvailabilityResult:
    """``availabilityResult``: capacity reply to ``checkAvailability``; the socket stays open."""

    available: bool
    reason: str | None
    details: Mapping[str, Any] | None
    error: str | None


@dataclass(frozen=True, slots=True)
class FatalServerEvent:
    """throwToNoAgent / throwToExceededTier / throwToBadRequest / removePeer / unsupportedClient.

    The server disconnects right after these; ``event`` tells which, ``code`` is the
    optional detail (e.g. ``USAGE_LIMIT_EXCEEDED`` on unsupportedClient).
    """

    event: str
    code: str | None


@dataclass(frozen=True, slots=True)
class SessionError:
    """``session_error``: a server-side agent failure (e.g. ``AGENT_CHILD_CRASHED``).

    ``code`` is ``"UNKNOWN"`` when the server sent none, so the error is still surfaced.
    """

    code: str
    message: str | None


@dataclass(frozen=True, slots=True)
class AsrReady:
    """``asr-webrtc-ready``: the ASR bridge accepts an offer."""


@dataclass(frozen=True, slots=True)
class AsrAnswer:
    """``asr-webrtc-answer``: SDP answer for the uplink peer (not clamped: SDP is structured)."""

    sdp: str


@dataclass(frozen=True, slots=True)
class AsrIceCandidate:
    """``asr-ice-candidate``: trickled remote candidate (``""`` = end of candidates)."""

    candidate: str
    sdp_mline_index: int | None
    sdp_mid: str | None


@dataclass(frozen=True, slots=True)
class AsrError:
    """``asr-webrtc-error``: the ASR bridge failed."""

    error: str | None


@dataclass(frozen=True, slots=True)
class AgentRawText:
    """``agent_raw_text``: one brain segment."""

    speech_id: str | None
    turn_id: str | None
    segment: BrainSegment


@dataclass(frozen=True, slots=True)
class AgentStartSpeech:
    """``agent_start_speech``: ``is_new_turn`` false marks a duplicate speechId for a live turn."""

    speech_id: str | None
    turn_id: str | None
    is_new_turn: bool


@dataclass(frozen=True, slots=True)
class AgentEndTurn:
    """``agent_end_turn``: the agent's turn is complete."""

    speech_id: str | None
    turn_id: str | None


@dataclass(frozen=True, slots=True)
class StvFinishedGenerating:
    """``stvFinishedGenerating``: generation (not playback) finished."""

    speech_id: str | None


@dataclass(frozen=True, slots=True)
class GeneratingSpeech:
    """``generatingSpeech``: clean sentence about to be spoken (clamped)."""

    text: str
    speech_id: str | None


@dataclass(frozen=True, slots=True)
class StvSpeechChunk:
    """``stvSpeechChunk``: server-timed caption chunk; ``duration_ms == 1`` is a sentinel."""

    text: str
    speech_id: str | None
    duration_ms: int | None


@dataclass(frozen=True, slots=True)
class StvStartedTalking:
    """``stvStartedTalking``: avatar audio starts (no speechId on the wire)."""


@dataclass(frozen=True, slots=True)
class StvFinishedTalking:
    """``stvFinishedTalking``: avatar stopped; content is truncated after a barge-in."""

    agent_content: str | None


@dataclass(frozen=True, slots=True)
class AgentTurnToTalk:
    """``agentTurnToTalk``: user turn done; transcription only on a user-speech hand-off."""

    user_transcription: str | None


@dataclass(frozen=True, slots=True)
class AgentInterrupted:
    """``agentInterrupted``: a barge-in happened."""


@dataclass(frozen=True, slots=True)
class UserStartedTalking:
    """``userStartedTalking``: server VAD onset."""


@dataclass(frozen=True, slots=True)
class SmartTurnStatus:
    """``smartTurnStatus``: smart-turn VAD indicator."""

    status: str | None
    timeout_ms: int | None
    probability: float | None


@dataclass(frozen=True, slots=True)
class TimeWarning:
    """``conversationTimeWarning``: ``remaining`` is in seconds."""

    remaining: float | None


@dataclass(frozen=True, slots=True)
class ConversationTimeExpired:
    """``conversationTimeExpired``: sent just before ``conversationEnded``."""


@dataclass(frozen=True, slots=True)
class ConversationEnded:
    """``conversationEnded``: the server ended the conversation."""


@dataclass(frozen=True, slots=True)
class SessionReadyForResume:
    """``sessionReadyForResume``: media released, session kept (resumable)."""


@dataclass(frozen=True, slots=True)
class PauseSessionExpired:
    """``pauseSessionExpired``: the pause window expired server-side (not an end)."""


@dataclass(frozen=True, slots=True)
class ResumingSession:
    """``resumingSession``: the server accepted a resume and is rebuilding."""


@dataclass(frozen=True, slots=True)
class ConversationResumed:
    """``conversationResumed``: resume done."""


@dataclass(frozen=True, slots=True)
class StvTaskFail:
    """``stvTaskFail``: the STV send failed; the server hangs up next."""


@dataclass(frozen=True, slots=True)
class Ignored:
    """A known event with no SDK behaviour (debug_* telemetry, UI hints, validSession)."""

    event: str


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """An event name outside the catalogue; ``payload`` is passed through untouched."""

    event: str
    payload: Any


InboundEvent: TypeAlias = (
    ServerConnected
    | ClientConfiguration
    | JoinComplete
    | StvNewSession
    | ShowAgent
    | AskPermissions
    | AvailabilityResult
    | FatalServerEvent
    | SessionError
    | AsrReady
    | AsrAnswer
    | AsrIceCandidate
    | AsrError
    | AgentRawText
    | AgentStartSpeech
    | AgentEndTurn
    | StvFinishedGenerating
    | GeneratingSpeech
    | StvSpeechChunk
    | StvStartedTalking
    | StvFinishedTalking
    | AgentTurnToTalk
    | AgentInterrupted
    | UserStartedTalking
    | SmartTurnStatus
    | TimeWarning
    | ConversationTimeExpired
    | ConversationEnded
    | SessionReadyForResume
    | PauseSessionExpired
    | ResumingSession
    | ConversationResumed
    | StvTaskFail
    | Ignored
    | UnknownEvent
)


# --------------------------------------------------------------------------- field helpers


def _truthy(value: Any) -> bool:
    """JavaScript truthiness, because the reference client tests flags with ``!!x``."""
    if value is None or value is False:
        return False
    if isinstance(value, int | float):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True


def _str(d: Mapping[str, Any], key: str) -> str | None:
    value = d.get(key)
    return value if isinstance(value, str) else None


def _text(d: Mapping[str, Any], key: str) -> str | None:
    value = d.get(key)
    return clamp_text(value) if isinstance(value, str) else None


def _code(value: Any) -> str | None:
    return clamp_text(value, _MAX_CODE) if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # ints beyond float range
        return None
    return number if math.isfinite(number) else None


def _int(d: Mapping[str, Any], key: str) -> int | None:
    value = d.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    number = _number(value)
    return round(number) if number is not None else None


def _map(d: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = d.get(key)
    return value if isinstance(value, dict) else None


# --------------------------------------------------------------------------- parsers
# Each parser gets the event name and the first Socket.IO argument (``{}`` if absent).

_Parser: TypeAlias = Callable[[str, Any], InboundEvent]


def _obj(event: str, payload: Any) -> Mapping[str, Any]:
    """The payload as an object; ``null`` counts as ``{}`` since the fields are optional."""
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise ProtocolError(event, f"payload must be an object, got {preview(payload)}")
    return payload


def _server_connected(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    return ServerConnected(
        final_url=_str(d, "finalUrl"),
        agent_name=_text(d, "agentName"),
        host_name=_str(d, "hostName"),
        loading_video_url=_str(d, "loadingVideoURL"),
    )


def _client_configuration(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    inner = d.get("clientConfiguration")
    return ClientConfiguration(config=inner if isinstance(inner, dict) else d)


def _stv_new_session(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    return StvNewSession(
        session_id=_str(d, "session_id"),
        status=_code(d.get("status")),
        webrtc_url=_str(d, "webrtc_url"),
    )


def _ask_permissions(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    constraints = _map(d, "constraints")
    if constraints is None:
        # The server asks for the mic in every known flow; a bare ask still means "go".
        return AskPermissions(audio=True, video=False)
    return AskPermissions(
        audio=_truthy(constraints.get("audio", True)),
        video=_truthy(constraints.get("video", False)),
    )


def _availability(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    return AvailabilityResult(
        available=_truthy(d.get("available")),
        reason=_code(d.get("reason")),
        details=_map(d, "details"),
        error=_code(d.get("error")),
    )


def _fatal(event: str, payload: Any) -> InboundEvent:
    # Conventionally ``{}``; a malformed body must not hide that the server is hanging up.
    code = _code(payload.get("code")) if isinstance(payload, dict) else None
    return FatalServerEvent(event=event, code=code)


def _session_error(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    code = _code(d.get("code"))
    return SessionError(code=code or "UNKNOWN", message=_text(d, "message"))


def _asr_answer(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    answer = d.get("answer")
    sdp = answer.get("sdp") if isinstance(answer, dict) else d.get("sdp")
    if not isinstance(sdp, str) or not sdp:
        raise ProtocolError(event, "missing answer.sdp")
    return AsrAnswer(sdp=sdp)


def _asr_ice_candidate(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    candidate = d.get("candidate")
    source = d
    if isinstance(candidate, dict):
        # Some relays forward the RTCIceCandidateInit object instead of flattening it.
        source = candidate
        candidate = candidate.get("candidate")
    if not isinstance(candidate, str):
        raise ProtocolError(event, f"candidate must be a string, got {preview(candidate)}")
    mline = _int(source, "sdpMLineIndex")
    return AsrIceCandidate(
        candidate=candidate,
        sdp_mline_index=mline if mline is not None and mline >= 0 else None,
        sdp_mid=_str(source, "sdpMid"),
    )


def _asr_error(event: str, payload: Any) -> InboundEvent:
    if isinstance(payload, str):
        return AsrError(error=_code(payload))
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    return AsrError(error=_code(error))


def _agent_raw_text(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    delta = d.get("delta")
    if not isinstance(delta, str):
        raise ProtocolError(event, f"delta must be a string, got {preview(delta)}")
    speech_id = _str(d, "speechId")
    return AgentRawText(
        speech_id=speech_id,
        turn_id=_str(d, "turnId"),
        segment=parse_delta(delta, speech_id),
    )


def _agent_start_speech(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    return AgentStartSpeech(
        speech_id=_str(d, "speechId"),
        turn_id=_str(d, "turnId"),
        is_new_turn=_truthy(d.get("isNewTurn")),
    )


def _agent_end_turn(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    return AgentEndTurn(speech_id=_str(d, "speechId"), turn_id=_str(d, "turnId"))


def _stv_finished_generating(event: str, payload: Any) -> InboundEvent:
    return StvFinishedGenerating(speech_id=_str(_obj(event, payload), "speechId"))


def _generating_speech(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    return GeneratingSpeech(text=_text(d, "text") or "", speech_id=_str(d, "speechId"))


def _stv_speech_chunk(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    return StvSpeechChunk(
        text=_text(d, "text") or "",
        speech_id=_str(d, "speechId"),
        duration_ms=_int(d, "durationMs"),
    )


def _stv_finished_talking(event: str, payload: Any) -> InboundEvent:
    return StvFinishedTalking(agent_content=_text(_obj(event, payload), "agentContent"))


def _agent_turn_to_talk(event: str, payload: Any) -> InboundEvent:
    return AgentTurnToTalk(user_transcription=_text(_obj(event, payload), "userTranscription"))


def _smart_turn_status(event: str, payload: Any) -> InboundEvent:
    d = _obj(event, payload)
    return SmartTurnStatus(
        status=_code(d.get("status")),
        timeout_ms=_int(d, "timeout_ms"),
        probability=_number(d.get("probability")),
    )


def _time_warning(event: str, payload: Any) -> InboundEvent:
    return TimeWarning(remaining=_number(_obj(event, payload).get("remainingTime")))


def _signal(cls: Callable[[], InboundEvent]) -> _Parser:
    """Parser for an event whose payload is conventionally ``{}``: any payload is accepted."""

    def parse(event: str, payload: Any) -> InboundEvent:
        return cls()

    return parse


def _ignored(event: str, payload: Any) -> InboundEvent:
    return Ignored(event=event)


_PARSERS: Final[Mapping[str, _Parser]] = {
    In.ON_SERVER_CONNECTED: _server_connected,
    In.CLIENT_CONFIGURATION: _client_configuration,
    In.JOIN_COMPLETE: _signal(JoinComplete),
    In.VALID_SESSION: _ignored,
    In.STV_NEW_SESSION: _stv_new_session,
    In.SHOW_AGENT: _signal(ShowAgent),
    In.ASK_PERMISSIONS: _ask_permissions,
    In.AVAILABILITY_RESULT: _availability,
    In.THROW_TO_NO_AGENT: _fatal,
    In.THROW_TO_EXCEEDED_TIER: _fatal,
    In.THROW_TO_BAD_REQUEST: _fatal,
    In.REMOVE_PEER: _fatal,
    In.UNSUPPORTED_CLIENT: _fatal,
    In.SESSION_ERROR: _session_error,
    In.ASR_WEBRTC_READY: _signal(AsrReady),
    In.ASR_WEBRTC_ANSWER: _asr_answer,
    In.ASR_ICE_CANDIDATE: _asr_ice_candidate,
    In.ASR_WEBRTC_ERROR: _asr_error,
    In.AGENT_RAW_TEXT: _agent_raw_text,
    In.AGENT_START_SPEECH: _agent_start_speech,
    In.AGENT_END_TURN: _agent_end_turn,
    In.STV_FINISHED_GENERATING: _stv_finished_generating,
    In.GENERATING_SPEECH: _generating_speech,
    In.STV_SPEECH_CHUNK: _stv_speech_chunk,
    In.DEBUG_STV_TASK_GENERATED: _ignored,
    In.STV_STARTED_TALKING: _signal(StvStartedTalking),
    In.STV_FINISHED_TALKING: _stv_finished_talking,
    In.AGENT_TURN_TO_TALK: _agent_turn_to_talk,
    In.AGENT_INTERRUPTED: _signal(AgentInterrupted),
    In.USER_STARTED_TALKING: _signal(UserStartedTalking),
    In.SMART_TURN_STATUS: _smart_turn_status,
    In.CONVERSATION_TIME_WARNING: _time_warning,
    In.CONVERSATION_TIME_EXPIRED: _signal(ConversationTimeExpired),
    In.CONVERSATION_ENDED: _signal(ConversationEnded),
    In.SESSION_READY_FOR_RESUME: _signal(SessionReadyForResume),
    In.PAUSE_SESSION_EXPIRED: _signal(PauseSessionExpired),
    In.RESUMING_SESSION: _signal(ResumingSession),
    In.CONVERSATION_RESUMED: _signal(ConversationResumed),
    In.STV_TASK_FAIL: _signal(StvTaskFail),
    In.DEBUG_VAD_SPEECH_DETECTED: _ignored,
    In.DEBUG_LLM_INPUT: _ignored,
    In.DEBUG_CONVERSATION_STATE_CHANGE: _ignored,
    In.HIDE_TAP_TO_TALK_BUTTON: _ignored,
    In.SHOW_TAP_TO_TALK_BUTTON: _ignored,
}


def parse_event(event: str, args: Sequence[Any]) -> InboundEvent:
    """Parse one inbound Socket.IO event.

    ``args`` are the arguments after the event name: the payload is ``args[0]`` (``{}``
    when absent); trailing extras (a connection-state-recovery offset, an ack id) are
    ignored. Unknown names give ``UnknownEvent``. Raises only ``ProtocolError``.
    """
    if not isinstance(event, str):
        raise ProtocolError("<non-string event>", f"event name is {preview(event)}")
    if not isinstance(args, list | tuple):
        raise ProtocolError(event, f"args must be a list, got {preview(args)}")
    payload: Any = args[0] if args else {}
    parser = _PARSERS.get(event)
    if parser is None:
        return UnknownEvent(event=event, payload=payload)
    try:
        return parser(event, payload)
    except ProtocolError:
        raise
    except Exception as exc:
        # Last-resort guard: the dispatcher must survive a parser bug on hostile input.
        # ``__cause__`` keeps the original for debugging (and lets tests detect such bugs).
        raise ProtocolError(event, f"unparseable payload ({type(exc).__name__})") from exc
