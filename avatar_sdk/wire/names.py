"""Socket.IO event names of the live service (PROTOCOL §2.1, §3).

Kept as constants so a typo is a NameError at import time instead of a handler that
silently never fires.
"""

from __future__ import annotations

from typing import Final

__all__ = ["INBOUND", "OUTBOUND", "In", "Out"]


class In:
    """Server → client event names."""

    # Handshake / session phase (§3.1)
    ON_SERVER_CONNECTED: Final = "onServerConnected"
    CLIENT_CONFIGURATION: Final = "clientConfiguration"
    JOIN_COMPLETE: Final = "joinComplete"
    VALID_SESSION: Final = "validSession"
    STV_NEW_SESSION: Final = "stvNewSession"
    SHOW_AGENT: Final = "showAgent"
    ASK_PERMISSIONS: Final = "askPermissions"
    AVAILABILITY_RESULT: Final = "availabilityResult"
    THROW_TO_NO_AGENT: Final = "throwToNoAgent"
    THROW_TO_EXCEEDED_TIER: Final = "throwToExceededTier"
    THROW_TO_BAD_REQUEST: Final = "throwToBadRequest"
    REMOVE_PEER: Final = "removePeer"
    UNSUPPORTED_CLIENT: Final = "unsupportedClient"
    SESSION_ERROR: Final = "session_error"
    # ASR signalling (§3.2)
    ASR_WEBRTC_READY: Final = "asr-webrtc-ready"
    ASR_WEBRTC_ANSWER: Final = "asr-webrtc-answer"
    ASR_ICE_CANDIDATE: Final = "asr-ice-candidate"
    ASR_WEBRTC_ERROR: Final = "asr-webrtc-error"
    # Conversation phase (§3.3)
    AGENT_RAW_TEXT: Final = "agent_raw_text"
    AGENT_START_SPEECH: Final = "agent_start_speech"
    AGENT_END_TURN: Final = "agent_end_turn"
    STV_FINISHED_GENERATING: Final = "stvFinishedGenerating"
    GENERATING_SPEECH: Final = "generatingSpeech"
    STV_SPEECH_CHUNK: Final = "stvSpeechChunk"
    DEBUG_STV_TASK_GENERATED: Final = "debug_stvTaskGenerated"
    STV_STARTED_TALKING: Final = "stvStartedTalking"
    STV_FINISHED_TALKING: Final = "stvFinishedTalking"
    AGENT_TURN_TO_TALK: Final = "agentTurnToTalk"
    AGENT_INTERRUPTED: Final = "agentInterrupted"
    USER_STARTED_TALKING: Final = "userStartedTalking"
    SMART_TURN_STATUS: Final = "smartTurnStatus"
    CONVERSATION_TIME_WARNING: Final = "conversationTimeWarning"
    CONVERSATION_TIME_EXPIRED: Final = "conversationTimeExpired"
    CONVERSATION_ENDED: Final = "conversationEnded"
    SESSION_READY_FOR_RESUME: Final = "sessionReadyForResume"
    PAUSE_SESSION_EXPIRED: Final = "pauseSessionExpired"
    RESUMING_SESSION: Final = "resumingSession"
    CONVERSATION_RESUMED: Final = "conversationResumed"
    STV_TASK_FAIL: Final = "stvTaskFail"
    DEBUG_VAD_SPEECH_DETECTED: Final = "debug_vad_speech_detected"
    DEBUG_LLM_INPUT: Final = "debug_llm_input"
    DEBUG_CONVERSATION_STATE_CHANGE: Final = "debug_conversationStateChange"
    HIDE_TAP_TO_TALK_BUTTON: Final = "hideTapToTalkButton"
    SHOW_TAP_TO_TALK_BUTTON: Final = "showTapToTalkButton"


class Out:
    """Client → server event names."""

    JOIN: Final = "join"
    STV_NEW_SESSION: Final = "stvNewSession"
    CHECK_AVAILABILITY: Final = "checkAvailability"
    ASR_WEBRTC_INIT: Final = "asr-webrtc-init"
    ASR_WEBRTC_OFFER: Final = "asr-webrtc-offer"
    ASR_WEBRTC_ICE_CANDIDATE: Final = "asr-webrtc-ice-candidate"
    APPROVED_PERMISSIONS: Final = "approvedPermissions"
    TEXT_ENTERED: Final = "onTextEntered"
    DEBUG_TEXT_ENTERED: Final = "debug_text_entered"
    MUTE_USER: Final = "muteUser"
    UNMUTE_USER: Final = "unmuteUser"
    PAUSE_CONVERSATION: Final = "pauseConversation"
    RESUME_CONVERSATION: Final = "resumeConversation"
    TAP_TO_TALK_START: Final = "tapToTalkStart"
    TAP_TO_TALK_END: Final = "tapToTalkEnd"


def _values(cls: type) -> frozenset[str]:
    return frozenset(v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str))


INBOUND: Final[frozenset[str]] = _values(In)
OUTBOUND: Final[frozenset[str]] = _values(Out)
