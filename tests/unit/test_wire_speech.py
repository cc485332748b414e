"""speechId parsing and minting (§3.7)."""

from __future__ import annotations

import re

import pytest

from avatar_sdk.wire import KNOWN_TRIGGERS, SpeechId, make_speech_id


@pytest.mark.parametrize(
    ("raw", "nonce", "trigger", "payload"),
    [
        ("4nkM-transcript-Hey, what's up?", "4nkM", "transcript", "Hey, what's up?"),
        ("1Yev-approved-permissions", "1Yev", "approved-permissions", ""),
        ("ab12-contact-info-received-jane@x.io", "ab12", "contact-info-received", "jane@x.io"),
        ("ab12-contact-info-rejected", "ab12", "contact-info-rejected", ""),
        ("Zz9a-begin-agent-conversation", "Zz9a", "begin-agent-conversation", ""),
        ("Q1w2-code-block-completed-block-7-of-9", "Q1w2", "code-block-completed", "block-7-of-9"),
        (
            "abcd-transcript-well - you know -- yes-",
            "abcd",
            "transcript",
            "well - you know -- yes-",
        ),
        ("abcd-tap-to-talk", "abcd", "tap-to-talk", ""),
        ("abcd-wake-up", "abcd", "wake-up", ""),
        ("a-transcript-x", "a", "transcript", "x"),
        ("abcd-transcript-", "abcd", "transcript", ""),
    ],
)
def test_parse(raw: str, nonce: str, trigger: str, payload: str) -> None:
    sid = SpeechId.parse(raw)
    assert sid == SpeechId(nonce, trigger, payload)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "abcd",
        "abcd-",
        "abcd-unknown-trigger",
        "abcd-transcripts-x",
        "-transcript-x",
        "ab cd-transcript-x",
        "abcd-wake-upx",
    ],
)
def test_parse_rejects(raw: str) -> None:
    assert SpeechId.parse(raw) is None


def test_parse_non_string() -> None:
    assert SpeechId.parse(None) is None  # type: ignore[arg-type]


def test_round_trip() -> None:
    for raw in ("4nkM-transcript-Hey, what's up?", "1Yev-approved-permissions", "x-wake-up-a-b"):
        sid = SpeechId.parse(raw)
        assert sid is not None
        assert str(sid) == raw


def test_make_speech_id() -> None:
    for trigger in KNOWN_TRIGGERS:
        raw = make_speech_id(trigger, "pay-load")
        sid = SpeechId.parse(raw)
        assert sid is not None
        assert (sid.trigger, sid.payload) == (trigger, "pay-load")
        assert re.fullmatch(r"[A-Za-z0-9]{4}", sid.nonce)
    assert make_speech_id("approved-permissions", nonce="1Yev") == "1Yev-approved-permissions"
    with pytest.raises(ValueError):
        make_speech_id("nope")
    with pytest.raises(ValueError):
        make_speech_id("transcript", nonce="a-b")


def test_is_user_turn() -> None:
    assert SpeechId("a", "transcript", "x").is_user_turn
    assert not SpeechId("a", "wake-up", "").is_user_turn
