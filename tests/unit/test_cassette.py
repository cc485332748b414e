"""The cassette format, its reader and the replay's pure rules (no sockets)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from avatar_sdk import AvatarError, ErrorCode, RetryPolicy, SessionConfig
from avatar_sdk.cassette.format import (
    ContentRedactor,
    config_from_dict,
    config_to_dict,
    parse_lines,
)
from avatar_sdk.cassette.golden import from_shape
from avatar_sdk.testing.replay import out_key, script_of, shape_mismatch
from avatar_sdk.wire import Out

HEADER = {"kind": "cassette", "version": 1, "session": {"media": False}}


def text(*entries: dict[str, Any], tail: str = "") -> list[str]:
    return [json.dumps(e) + "\n" for e in (HEADER, *entries)] + ([tail] if tail else [])


def test_a_complete_cassette_parses_in_order() -> None:
    tape = parse_lines(
        text(
            {"t": 0.0, "kind": "call", "name": "connect", "args": {}},
            {"t": 0.1, "kind": "out", "link": 0, "name": "join", "payload": {}},
            {"t": 0.2, "kind": "end", "records": 2},
        )
    )
    assert tape.complete and tape.truncated_line is None
    assert [(r.index, r.kind, r.name) for r in tape.records] == [
        (0, "call", "connect"),
        (1, "out", "join"),
    ]


def test_a_partial_last_line_is_left_out_and_reported() -> None:
    lines = text({"t": 0.0, "kind": "call", "name": "connect"}, tail='{"t": 0.1, "kind": "o')
    tape = parse_lines(lines)
    assert not tape.complete and tape.truncated_line == 3 and len(tape.records) == 1


@pytest.mark.parametrize(
    ("lines", "detail"),
    [
        ([], "empty file"),
        (['{"kind": "journal"}\n'], "line 1 is not a cassette header"),
        (['{"kind": "cassette", "version": 99}\n'], "format version 99"),
        (text(tail="[1, 2]\n"), "line 2 is not a JSON object"),
        (text({"t": "soon", "kind": "in"}), "line 2 is not a cassette record"),
        (text({"t": 1, "kind": "teleport"}), "line 2 is not a cassette record"),
        ([*text(), "{broken\n", json.dumps({"t": 1, "kind": "end"}) + "\n"], "line 2 is not"),
    ],
)
def test_bad_input_is_a_classified_error(lines: list[str], detail: str) -> None:
    with pytest.raises(AvatarError) as caught:
        parse_lines(lines, "x.jsonl")
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
    assert detail in caught.value.message and "x.jsonl" in caught.value.message


def test_the_config_round_trips_and_tolerates_strangers() -> None:
    config = SessionConfig(turn_confirm_timeout=0.1, cold_reconnect=RetryPolicy(max_attempts=2))
    data = json.loads(json.dumps(config_to_dict(config)))
    assert config_from_dict(data) == config
    odd = {**data, "from_the_future": 1, "close_timeout": "soon", "cold_reconnect": {"x": 1}}
    assert config_from_dict(odd).close_timeout == SessionConfig().close_timeout
    assert config_from_dict("nonsense") == SessionConfig()


def test_user_text_gets_a_stable_placeholder_everywhere() -> None:
    redactor = ContentRedactor()
    long = "tell me everything about the quarterly guidance range and the risks " * 2
    assert redactor.register("did you get this?") == "user-text-1"
    assert redactor.register("did you get this?") == "user-text-1"
    assert redactor.register(long) == "user-text-2"
    value = {
        "text": "did you get this?",
        "ids": ["ab12-transcript-did you get this?", f"cd34-transcript-{long.strip()[:60]}"],
        "n": 3,
    }
    assert redactor.apply(value) == {
        "text": "user-text-1",
        "ids": ["ab12-transcript-user-text-1", "cd34-transcript-user-text-2"],
        "n": 3,
    }


def record_lines(*entries: tuple[str, str, int]) -> list[str]:
    return text(*({"t": i, "kind": k, "name": n, "link": link, "args": [{}], "payload": {}}
                  for i, (k, n, link) in enumerate(entries)))  # fmt: skip


def test_the_script_leaves_live_signalling_out() -> None:
    tape = parse_lines(
        record_lines(
            ("out", "join", 0),
            ("out", Out.ASR_WEBRTC_OFFER, 0),
            ("in", "asr-webrtc-answer", 0),
            ("out", Out.CHECK_AVAILABILITY, 0),
            ("in", "availabilityResult", 0),
            ("in", "joinComplete", 0),
            ("media", "", 0),
            ("call", "register_tool", 0),
            ("call", "speak", 0),
        )
    )
    assert [(r.kind, r.name) for r in script_of(tape)] == [
        ("out", "join"),
        ("in", "joinComplete"),
        ("call", "speak"),
    ]


def test_turns_are_matched_on_their_text_and_flags() -> None:
    marker = {"text": "", "isFinal": False, "isSpeechStart": True}
    turn = {"text": "hi", "isFinal": True}
    assert out_key(Out.TEXT_ENTERED, marker) != out_key(Out.TEXT_ENTERED, turn)
    assert out_key(Out.TEXT_ENTERED, turn) == out_key(Out.TEXT_ENTERED, dict(turn))
    assert out_key("join", {"room": "a"}) == out_key("join", {"room": "b"})


def test_shapes_are_checked_field_by_field() -> None:
    shape = {"room": "str", "kaltura": {"capabilities": {"avatar": "str"}}, "isMobile": "bool"}
    good = from_shape(shape)
    assert shape_mismatch(good, shape) is None
    assert shape_mismatch({**good, "extra": 1}, shape) is None
    assert shape_mismatch({**good, "isMobile": 0}, shape) == "payload.isMobile is not bool"
    bad = {**good, "kaltura": {"capabilities": {}}}
    assert shape_mismatch(bad, shape) == "payload.kaltura.capabilities.avatar is missing"
    assert shape_mismatch([], shape) == "payload is not an object"
    assert shape_mismatch({"n": True}, {"n": "int"}) == "payload.n is not int"
