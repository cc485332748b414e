"""Names catalogue, clamping and ProtocolError hygiene."""

from __future__ import annotations

import pickle

from avatar_sdk.wire import INBOUND, MAX_TEXT, In, ProtocolError, clamp_text, parse_event


def test_inbound_catalogue() -> None:
    assert In.ON_SERVER_CONNECTED == "onServerConnected"
    assert In.AGENT_RAW_TEXT == "agent_raw_text"
    assert In.ASR_WEBRTC_ANSWER == "asr-webrtc-answer"
    assert In.SESSION_ERROR == "session_error"
    assert len(INBOUND) == 44
    assert "stvNewSession" in INBOUND


def test_clamp_strips_controls_keeps_whitespace() -> None:
    assert clamp_text("hello\x00\x07world") == "helloworld"
    assert clamp_text("a\tb\nc\rd\x7f\x1b[31m") == "a\tb\nc\rd[31m"
    assert clamp_text("x" * (MAX_TEXT + 50)) == "x" * MAX_TEXT
    assert clamp_text("abcdef", 3) == "abc"
    assert clamp_text("abc", -1) == ""


def test_protocol_error_shape_and_truncation() -> None:
    err = ProtocolError("agent_raw_text", "delta must be a string")
    assert isinstance(err, ValueError)
    assert (err.event, err.detail) == ("agent_raw_text", "delta must be a string")
    assert str(err) == "agent_raw_text: delta must be a string"
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err)
    assert len(str(ProtocolError("e" * 5000, "d" * 5000))) < 500


def test_protocol_error_never_echoes_long_payload_values() -> None:
    secret = "djJ8" + "S" * 500
    try:
        parse_event("agent_raw_text", [{"delta": {"ks": secret}}])
    except ProtocolError as err:
        assert secret not in str(err)
        assert "S" * 81 not in str(err)
    else:  # pragma: no cover
        raise AssertionError("expected ProtocolError")
    try:
        parse_event("stvNewSession", [secret])
    except ProtocolError as err:
        assert "S" * 81 not in str(err)
    else:  # pragma: no cover
        raise AssertionError("expected ProtocolError")
