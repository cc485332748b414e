"""Replay of the golden session capture (PROTOCOL §6).

The fixture is a copy of the reference client's ``test/fixtures/golden-session.json``
(MIT) kept in this repo so CI does not depend on anything outside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from avatar_sdk.wire import (
    INBOUND,
    OUTBOUND,
    AgentRawText,
    UnknownEvent,
    build_approved_permissions,
    build_asr_ice_candidate,
    build_asr_init,
    build_asr_offer,
    build_check_availability,
    build_empty,
    build_join,
    build_stv_new_session,
    build_text_entered,
    parse_event,
)

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "golden-session.json"
GOLDEN: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
SHAPES: dict[str, Any] = GOLDEN["shapes"]

_LEAVES: dict[str, Any] = {"str": "x", "int": 1, "bool": False, "NoneType": None}


def sample(shape: Any) -> Any:
    """Build a payload from a field → type-name shape, as the reference evals do."""
    if isinstance(shape, dict):
        return {key: sample(value) for key, value in shape.items()}
    if isinstance(shape, list):
        return []
    return _LEAVES[shape]


def sample_for(event: str) -> Any:
    if event == "agent_raw_text":
        return {
            "speechId": "a-transcript-x",
            "turnId": "t",
            "delta": '{"type":"text","content":"hi"}',
        }
    return sample(SHAPES[f"in {event}"])


def test_fixture_lists_27_inbound_and_15_outbound() -> None:
    assert len(GOLDEN["inboundEvents"]) == 27
    assert len(GOLDEN["outboundEvents"]) == 15
    assert len(SHAPES) == 42


def test_catalogue_covers_fixture() -> None:
    assert set(GOLDEN["inboundEvents"]) <= INBOUND
    assert set(GOLDEN["outboundEvents"]) == OUTBOUND


@pytest.mark.parametrize("event", GOLDEN["inboundEvents"])
def test_every_golden_inbound_event_parses(event: str) -> None:
    ev = parse_event(event, [sample_for(event)])
    assert not isinstance(ev, UnknownEvent)
    # Connection-state recovery may append an offset; that must not change anything.
    assert parse_event(event, [sample_for(event), "offset-1"]) == ev


def test_golden_agent_raw_text() -> None:
    ev = parse_event("agent_raw_text", [sample_for("agent_raw_text")])
    assert isinstance(ev, AgentRawText)
    assert (ev.segment.type, ev.segment.content, ev.speech_id) == ("text", "hi", "a-transcript-x")


def _keys(value: Any) -> Any:
    """Shape of a payload reduced to its key structure."""
    if isinstance(value, dict):
        return {k: _keys(v) for k, v in value.items()}
    return None


@pytest.mark.parametrize(
    ("event", "payload"),
    [
        ("approvedPermissions", build_approved_permissions("r")),
        ("asr-webrtc-ice-candidate", build_asr_ice_candidate("c", "0", 0, username_fragment="u")),
        ("asr-webrtc-init", build_asr_init("s")),
        ("asr-webrtc-offer", build_asr_offer("v=0", is_reconnect=False)),
        ("checkAvailability", build_check_availability()),
        ("debug_text_entered", build_text_entered("hi")),
        ("onTextEntered", build_text_entered("hi")),
        ("muteUser", build_empty()),
        ("unmuteUser", build_empty()),
        ("pauseConversation", build_empty()),
        ("resumeConversation", build_empty()),
        ("tapToTalkStart", build_empty()),
        ("tapToTalkEnd", build_empty()),
    ],
)
def test_outbound_builders_match_golden_shapes(event: str, payload: dict[str, Any]) -> None:
    assert _keys(payload) == _keys(SHAPES[f"out {event}"])


def test_join_and_stv_new_session_deviate_from_capture_on_purpose() -> None:
    join = build_join(room_id="r", token="t")
    expected = _keys(SHAPES["out join"])
    expected["kaltura"]["ks"] = None  # the capture was redacted; ks is required in practice
    assert _keys(join) == expected
    # The capture came from the vendor client, which sends cast_mode; the SDK never does.
    assert build_stv_new_session("r") == {"room_id": "r"}
