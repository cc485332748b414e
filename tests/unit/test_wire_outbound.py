"""Outbound payload builders must match PROTOCOL §2.1 byte for byte."""

from __future__ import annotations

import random
import re

import pytest

from avatar_sdk.wire import (
    OUTBOUND,
    Out,
    build_approved_permissions,
    build_asr_ice_candidate,
    build_asr_init,
    build_asr_offer,
    build_barge_in_marker,
    build_check_availability,
    build_empty,
    build_join,
    build_stv_new_session,
    build_text_entered,
    new_room_id,
    new_sticky_id,
)


def test_join_minimal_omits_undefined_keys_and_keeps_explicit_nulls() -> None:
    assert build_join(room_id="r1", token="djJ8tok") == {
        "room": "r1",
        "channel": "r1",
        "kaltura": {
            "force_experience": "avatar_only",
            "capabilities": {"avatar": "on", "generate_followup_questions": "on"},
            "ks": "djJ8tok",
        },
        "userAgent": "avatar-sdk-python",
        "userAgentHints": None,
        "isMobile": False,
        "channel_password": None,
        "peer_name": "unknown",
        "peer_video": False,
        "peer_audio": True,
    }


def test_join_full() -> None:
    payload = build_join(
        room_id="abc", token="t", thread_id="th-1", entry_id="1_xyz", user_agent="ua/1"
    )
    assert payload["kaltura"] == {
        "threadId": "th-1",
        "force_experience": "avatar_only",
        "capabilities": {"avatar": "on", "generate_followup_questions": "on"},
        "ks": "t",
        "entryId": "1_xyz",
    }
    assert payload["userAgent"] == "ua/1"
    for absent in ("client", "context_id"):
        assert absent not in payload
        assert absent not in payload["kaltura"]


def test_join_requires_token() -> None:
    with pytest.raises(ValueError):
        build_join(room_id="r", token="")


def test_join_returns_fresh_dicts() -> None:
    a = build_join(room_id="r", token="t")
    a["kaltura"]["capabilities"]["avatar"] = "off"
    assert build_join(room_id="r", token="t")["kaltura"]["capabilities"]["avatar"] == "on"


def test_simple_builders() -> None:
    assert build_stv_new_session("r") == {"room_id": "r"}
    assert build_check_availability() == {}
    assert build_asr_init("sess") == {"sessionId": "sess"}
    assert build_asr_offer("v=0\r\n", is_reconnect=False) == {
        "offer": {"type": "offer", "sdp": "v=0\r\n"},
        "is_reconnect": False,
    }
    assert build_asr_offer("v=0", is_reconnect=True)["is_reconnect"] is True
    assert build_approved_permissions("r") == {"room": "r"}
    assert build_empty() == {}
    assert build_empty() is not build_empty()


def test_ice_candidate() -> None:
    assert build_asr_ice_candidate("candidate:1 1 udp 1 1.2.3.4 5 typ host", "0", 0) == {
        "candidate": {
            "candidate": "candidate:1 1 udp 1 1.2.3.4 5 typ host",
            "sdpMid": "0",
            "sdpMLineIndex": 0,
        }
    }
    full = build_asr_ice_candidate("c", None, None, username_fragment="uf")
    assert full == {
        "candidate": {
            "candidate": "c",
            "sdpMid": None,
            "sdpMLineIndex": None,
            "usernameFragment": "uf",
        }
    }


def test_text_entered_and_barge_in_marker() -> None:
    assert build_text_entered("hi") == {"text": "hi", "isFinal": True}
    assert build_text_entered("hi", is_final=False) == {"text": "hi", "isFinal": False}
    assert build_text_entered("hi", is_speech_start=False) == {
        "text": "hi",
        "isFinal": True,
        "isSpeechStart": False,
    }
    assert build_barge_in_marker() == {"text": "", "isFinal": False, "isSpeechStart": True}


def test_ids() -> None:
    assert re.fullmatch(r"[a-z0-9]{12}", new_room_id())
    assert re.fullmatch(r"[a-z0-9]{16}", new_sticky_id())
    assert new_room_id(random.Random(7)) == new_room_id(random.Random(7))
    assert new_room_id() != new_room_id()


def test_outbound_names() -> None:
    assert Out.TEXT_ENTERED == "onTextEntered"
    assert Out.APPROVED_PERMISSIONS == "approvedPermissions"
    assert len(OUTBOUND) == 15
