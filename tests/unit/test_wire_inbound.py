"""Every inbound event parsed from realistic payloads (PROTOCOL §3, §7)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from avatar_sdk.wire import (
    AgentEndTurn,
    AgentInterrupted,
    AgentRawText,
    AgentStartSpeech,
    AgentTurnToTalk,
    AskPermissions,
    AsrAnswer,
    AsrError,
    AsrIceCandidate,
    AsrReady,
    AvailabilityResult,
    ClientConfiguration,
    ConversationEnded,
    ConversationResumed,
    ConversationTimeExpired,
    FatalServerEvent,
    GeneratingSpeech,
    Ignored,
    InboundEvent,
    JoinComplete,
    PauseSessionExpired,
    ProtocolError,
    ResumingSession,
    ServerConnected,
    SessionError,
    SessionReadyForResume,
    ShowAgent,
    SmartTurnStatus,
    StvFinishedGenerating,
    StvFinishedTalking,
    StvNewSession,
    StvSpeechChunk,
    StvStartedTalking,
    StvTaskFail,
    TimeWarning,
    UnknownEvent,
    UserStartedTalking,
    inbound,
    parse_event,
)


def p(event: str, payload: Any = None, *extra: Any) -> InboundEvent:
    return parse_event(event, [payload, *extra] if payload is not None or extra else [])


def test_server_connected() -> None:
    ev = p(
        "onServerConnected",
        {"finalUrl": "https://cm/x", "agentName": "Ava", "hostName": "pod-7", "extra": 1},
    )
    assert ev == ServerConnected("https://cm/x", "Ava", "pod-7")
    assert p("onServerConnected", {"finalUrl": 5}) == ServerConnected(None, None, None)
    assert p("onServerConnected", {"loadingVideoURL": "https://v"}) == ServerConnected(
        None, None, None, "https://v"
    )


def test_client_configuration_wrapped_and_bare() -> None:
    cfg = {"languageCode": "en", "isTapToTalk": True, "interruptionsEnabled": False}
    wrapped = p("clientConfiguration", {"clientConfiguration": cfg})
    assert wrapped == ClientConfiguration(cfg)
    assert p("clientConfiguration", cfg) == ClientConfiguration(cfg)
    assert isinstance(wrapped, ClientConfiguration)
    assert wrapped.capabilities == {
        "screen_share": False,
        "camera_analysis": False,
        "web_search": False,
        "interruptions": False,
        "tap_to_talk": True,
    }
    assert ClientConfiguration({}).capabilities["interruptions"] is True


@pytest.mark.parametrize(
    ("event", "cls"),
    [
        ("joinComplete", JoinComplete),
        ("showAgent", ShowAgent),
        ("asr-webrtc-ready", AsrReady),
        ("stvStartedTalking", StvStartedTalking),
        ("agentInterrupted", AgentInterrupted),
        ("userStartedTalking", UserStartedTalking),
        ("conversationTimeExpired", ConversationTimeExpired),
        ("conversationEnded", ConversationEnded),
        ("sessionReadyForResume", SessionReadyForResume),
        ("pauseSessionExpired", PauseSessionExpired),
        ("resumingSession", ResumingSession),
        ("conversationResumed", ConversationResumed),
        ("stvTaskFail", StvTaskFail),
    ],
)
def test_signal_events_accept_any_payload(event: str, cls: type) -> None:
    samples: list[list[Any]] = [[], [{}], [None], ["junk"], [[1, 2]], [{}, 17], [{"x": {}}, "o"]]
    for args in samples:
        assert parse_event(event, args) == cls()


def test_conversation_resumed_with_ack_id() -> None:
    assert parse_event("conversationResumed", [{}, 42]) == ConversationResumed()


def test_stv_new_session_video_and_audio_mode() -> None:
    ev = p(
        "stvNewSession",
        {"session_id": "s1", "status": "session started", "webrtc_url": "https://srs/whep"},
    )
    assert ev == StvNewSession("s1", "session started", "https://srs/whep")
    assert isinstance(ev, StvNewSession)
    assert not ev.audio_only
    audio = p("stvNewSession", {"status": "audio/phone mode - no STV session"})
    assert isinstance(audio, StvNewSession)
    assert audio.audio_only
    odd = StvNewSession("s1", "AUDIO MODE - NO stv SESSION", None)
    assert odd.audio_only
    assert StvNewSession(None, "session started", None).audio_only


def test_ask_permissions() -> None:
    assert p("askPermissions", {"constraints": {"audio": True, "video": False}}) == (
        AskPermissions(audio=True, video=False)
    )
    assert p("askPermissions", {"constraints": {"audio": {"echoCancellation": True}}}) == (
        AskPermissions(audio=True, video=False)
    )
    assert p("askPermissions", {"constraints": {"audio": False, "video": True}}) == (
        AskPermissions(audio=False, video=True)
    )
    assert p("askPermissions", {}) == AskPermissions(audio=True, video=False)


def test_availability_result() -> None:
    details = {
        "stvAvailable": True,
        "whisperAvailable": True,
        "activeCalls": 3,
        "maxCalls": 20,
        "capacityAvailable": True,
    }
    assert p("availabilityResult", {"available": True, "details": details}) == (
        AvailabilityResult(True, None, details, None)
    )
    assert p("availabilityResult", {"error": "boom", "available": False}) == (
        AvailabilityResult(False, None, None, "boom")
    )
    assert p("availabilityResult", {"available": 0, "reason": "busy", "details": []}) == (
        AvailabilityResult(False, "busy", None, None)
    )


@pytest.mark.parametrize(
    "event",
    ["throwToNoAgent", "throwToExceededTier", "throwToBadRequest", "removePeer"],
)
def test_fatal_events(event: str) -> None:
    assert p(event, {}) == FatalServerEvent(event, None)
    assert parse_event(event, ["garbage"]) == FatalServerEvent(event, None)


def test_unsupported_client_code() -> None:
    assert p("unsupportedClient", {"code": "USAGE_LIMIT_EXCEEDED"}) == FatalServerEvent(
        "unsupportedClient", "USAGE_LIMIT_EXCEEDED"
    )


def test_session_error() -> None:
    assert p("session_error", {"code": "AGENT_CHILD_CRASHED_RESTARTED"}) == SessionError(
        "AGENT_CHILD_CRASHED_RESTARTED", None
    )
    assert p("session_error", {"code": "AGENT_HANDLER_FAILED", "message": "x\x00y"}) == (
        SessionError("AGENT_HANDLER_FAILED", "xy")
    )
    assert p("session_error", {"message": "no code"}) == SessionError("UNKNOWN", "no code")
    with pytest.raises(ProtocolError):
        p("session_error", "AGENT_CHILD_CRASHED")


def test_asr_answer() -> None:
    sdp = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n"
    assert p("asr-webrtc-answer", {"answer": {"type": "answer", "sdp": sdp}}) == AsrAnswer(sdp)
    bads: list[dict[str, Any]] = [
        {},
        {"answer": {}},
        {"answer": {"sdp": 3}},
        {"answer": {"sdp": ""}},
    ]
    for bad in bads:
        with pytest.raises(ProtocolError, match="asr-webrtc-answer"):
            p("asr-webrtc-answer", bad)


def test_asr_ice_candidate() -> None:
    payload = {
        "uid": "u",
        "type": "ice_candidate",
        "candidate": "candidate:1 1",
        "sdpMLineIndex": 0,
    }
    assert p("asr-ice-candidate", payload) == AsrIceCandidate("candidate:1 1", 0, None)
    nested = {"candidate": {"candidate": "c", "sdpMid": "0", "sdpMLineIndex": 1}}
    assert p("asr-ice-candidate", nested) == AsrIceCandidate("c", 1, "0")
    assert p("asr-ice-candidate", {"candidate": "", "sdpMLineIndex": "x"}) == AsrIceCandidate(
        "", None, None
    )
    with pytest.raises(ProtocolError):
        p("asr-ice-candidate", {"sdpMLineIndex": 0})


def test_asr_error() -> None:
    assert p("asr-webrtc-error", {"error": "ice failed"}) == AsrError("ice failed")
    assert p("asr-webrtc-error", {}) == AsrError(None)
    assert p("asr-webrtc-error", "boom") == AsrError("boom")
    assert p("asr-webrtc-error", {"error": {"message": "m"}}) == AsrError("m")


def test_agent_raw_text() -> None:
    delta = json.dumps(
        {"role": "assistant", "type": "avatar", "content": "Hi!", "segmentNumber": 2}
    )
    ev = p("agent_raw_text", {"speechId": "4nkM-transcript-hey", "turnId": "t1", "delta": delta})
    assert isinstance(ev, AgentRawText)
    assert (ev.speech_id, ev.turn_id) == ("4nkM-transcript-hey", "t1")
    assert ev.segment.type == "avatar"
    assert ev.segment.content == "Hi!"
    assert ev.segment.speech_id == "4nkM-transcript-hey"
    assert ev.segment.segment_number == 2
    for bad in ({}, {"delta": None}, {"delta": {"type": "text"}}, {"delta": 5}):
        with pytest.raises(ProtocolError):
            p("agent_raw_text", bad)
    with pytest.raises(ProtocolError):
        p("agent_raw_text", ["not", "a", "dict"])


def test_agent_start_speech_and_end_turn() -> None:
    ev = p("agent_start_speech", {"speechId": "s", "turnId": "t", "isNewTurn": True})
    assert ev == AgentStartSpeech("s", "t", True)
    assert p("agent_start_speech", {"speechId": "s", "isNewTurn": False}) == AgentStartSpeech(
        "s", None, False
    )
    assert p("agent_start_speech", {}) == AgentStartSpeech(None, None, False)
    assert p("agent_end_turn", {"speechId": "s", "turnId": "t"}) == AgentEndTurn("s", "t")
    assert p("stvFinishedGenerating", {"speechId": "s"}) == StvFinishedGenerating("s")
    assert p("stvFinishedGenerating", {"speechId": 3}) == StvFinishedGenerating(None)


def test_speech_text_events_are_clamped() -> None:
    assert p("generatingSpeech", {"text": "hello\x00\x07world", "speechId": "s"}) == (
        GeneratingSpeech("helloworld", "s")
    )
    assert p("generatingSpeech", {}) == GeneratingSpeech("", None)
    chunk = p("stvSpeechChunk", {"text": "a\x1bb\nc", "speechId": "s", "durationMs": 400})
    assert chunk == StvSpeechChunk("ab\nc", "s", 400)
    assert p("stvSpeechChunk", {"text": "x", "durationMs": 12.6}) == StvSpeechChunk("x", None, 13)
    assert p("stvSpeechChunk", {"text": "x", "durationMs": True}) == StvSpeechChunk("x", None, None)
    assert p("stvSpeechChunk", {"text": "x" * 9000}) == StvSpeechChunk("x" * 8000, None, None)
    assert p("stvFinishedTalking", {"agentContent": "bye\x00"}) == StvFinishedTalking("bye")
    assert p("stvFinishedTalking", {}) == StvFinishedTalking(None)
    assert p("agentTurnToTalk", {"userTranscription": "hello\x00\x07world"}) == (
        AgentTurnToTalk("helloworld")
    )
    assert p("agentTurnToTalk", {}) == AgentTurnToTalk(None)


def test_trailing_offset_argument_tolerated() -> None:
    assert parse_event("agentTurnToTalk", [{"userTranscription": "hi"}, "12-offset"]) == (
        AgentTurnToTalk("hi")
    )
    assert parse_event("agentTurnToTalk", ({"userTranscription": "hi"}, "o", 3)) == (
        AgentTurnToTalk("hi")
    )


def test_missing_or_null_payload_means_empty_object() -> None:
    assert parse_event("agentTurnToTalk", []) == AgentTurnToTalk(None)
    assert parse_event("agent_end_turn", [None]) == AgentEndTurn(None, None)


def test_smart_turn_and_time_warning() -> None:
    assert p("smartTurnStatus", {"status": "waiting", "timeout_ms": 1500, "probability": 0.7}) == (
        SmartTurnStatus("waiting", 1500, 0.7)
    )
    assert p("smartTurnStatus", {"probability": float("nan")}) == SmartTurnStatus(None, None, None)
    assert p("conversationTimeWarning", {"remainingTime": 60}) == TimeWarning(60.0)
    assert p("conversationTimeWarning", {"remainingTime": "60"}) == TimeWarning(None)
    assert p("conversationTimeWarning", {"remainingTime": 10**400}) == TimeWarning(None)


@pytest.mark.parametrize(
    "event",
    [
        "debug_vad_speech_detected",
        "debug_llm_input",
        "debug_conversationStateChange",
        "debug_stvTaskGenerated",
        "hideTapToTalkButton",
        "showTapToTalkButton",
        "validSession",
    ],
)
def test_ignored_events(event: str) -> None:
    assert p(event, {"transcript": "x", "isFinal": True}) == Ignored(event)
    assert parse_event(event, ["junk", 1]) == Ignored(event)


def test_unknown_event_passthrough() -> None:
    assert parse_event("brandNewEvent", [{"a": 1}, "off"]) == UnknownEvent(
        "brandNewEvent", {"a": 1}
    )
    assert parse_event("brandNewEvent", []) == UnknownEvent("brandNewEvent", {})


def test_data_events_reject_non_object_payload() -> None:
    for event in ("onServerConnected", "stvSpeechChunk", "agentTurnToTalk", "askPermissions"):
        for bad in ("str", 5, [1], True):
            with pytest.raises(ProtocolError) as info:
                parse_event(event, [bad])
            assert info.value.event == event


def test_bad_event_name_or_args() -> None:
    with pytest.raises(ProtocolError):
        parse_event(123, [])  # type: ignore[arg-type]
    with pytest.raises(ProtocolError):
        parse_event("joinComplete", "not-a-list")  # a str is a Sequence, but not an arg list
    with pytest.raises(ProtocolError):
        parse_event("joinComplete", None)  # type: ignore[arg-type]


def test_events_are_frozen() -> None:
    ev = AgentTurnToTalk("x")
    with pytest.raises(AttributeError):
        ev.user_transcription = "y"  # type: ignore[misc]


def test_parser_bug_is_contained_as_protocol_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(event: str, payload: Any) -> InboundEvent:
        raise TypeError("bug")

    monkeypatch.setitem(inbound._PARSERS, "agentTurnToTalk", broken)
    with pytest.raises(ProtocolError) as info:
        parse_event("agentTurnToTalk", [{}])
    assert isinstance(info.value.__cause__, TypeError)
    assert str(info.value) == "agentTurnToTalk: unparseable payload (TypeError)"
