"""Brain segments (§3.4/§3.5) and tool-call parsing (§3.6)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from avatar_sdk.wire import (
    AgentRawText,
    BrainSegment,
    ToolCall,
    canonical_json,
    parse_delta,
    parse_event,
    parse_tool_call,
    parse_tool_response_name,
)


def seg_of(
    delta: dict[str, Any] | str, speech_id: str | None = "abcd-transcript-hi"
) -> BrainSegment:
    raw = delta if isinstance(delta, str) else json.dumps(delta)
    ev = parse_event("agent_raw_text", [{"speechId": speech_id, "turnId": "t", "delta": raw}])
    assert isinstance(ev, AgentRawText)
    return ev.segment


def tool(content: str, **extra: Any) -> BrainSegment:
    return parse_delta(json.dumps({"type": "tool", "content": content, **extra}), None)


# ----------------------------------------------------------------- segment types (§3.5)


def test_text_segment() -> None:
    s = seg_of(
        {"role": "assistant", "type": "text", "content": "Hello", "segmentNumber": 0, "et": 1.2}
    )
    assert (s.type, s.content, s.speech_id) == ("text", "Hello", "abcd-transcript-hi")
    assert s.is_spoken and s.is_perceivable and not s.is_genui and not s.is_tool
    assert s.raw["et"] == 1.2
    assert s.raw["speechId"] == "abcd-transcript-hi"


@pytest.mark.parametrize("kind", ["avatar", "avatar-filler"])
def test_avatar_segments_are_spoken(kind: str) -> None:
    s = seg_of({"type": kind, "content": "Let me check", "segmentNumber": 4})
    assert s.is_spoken and s.is_perceivable
    assert s.segment_number == 4


def test_think_with_thread_id() -> None:
    s = seg_of(
        {"type": "think", "content": "", "threadId": "th-9", "messageId": "m1", "isFinal": True}
    )
    assert s.is_think and not s.is_spoken and not s.is_perceivable
    assert (s.thread_id, s.message_id, s.is_final) == ("th-9", "m1", True)


def test_tool_and_tool_response_segments() -> None:
    s = seg_of(
        {
            "type": "tool",
            "content": 'navigate_to_slide {"slide": 3}',
            "tool_metadata": {
                "id": "call-1",
                "name": "navigate_to_slide",
                "wait_for_response": True,
            },
        }
    )
    assert s.is_tool and not s.is_perceivable
    call = parse_tool_call(s)
    assert call == ToolCall(
        name="navigate_to_slide",
        args={"slide": 3},
        fused_args=(),
        raw='navigate_to_slide {"slide": 3}',
        call_id="call-1",
        wait_for_response=True,
        tool_type=None,
    )
    resp = seg_of({"type": "tool_response", "content": "navigate_to_slide responded with size 12"})
    assert resp.is_tool_response
    assert parse_tool_response_name(resp) == "navigate_to_slide"


def test_unisphere_tool_genui_runtime() -> None:
    s = seg_of(
        {
            "type": "unisphere-tool",
            "content": "{}",
            "metadata": {"widgetName": "cards", "runtimeName": "flashcards-tool"},
        }
    )
    assert s.runtime == "flashcards"
    assert s.is_genui and s.is_perceivable and not s.is_spoken
    assert s.metadata == {"widgetName": "cards", "runtimeName": "flashcards-tool"}
    # The CM may rewrite the type from the runtime name, with or without the suffix.
    assert seg_of({"type": "flashcards-tool", "content": "x"}).is_genui
    assert seg_of({"type": "followups", "content": "x"}).is_genui
    form = seg_of({"type": "user-properties-form-tool", "content": "x"})
    assert form.is_genui and form.is_structured_form
    assert not seg_of({"type": "unisphere-tool", "content": "x"}).is_genui


def test_error_and_share_segments() -> None:
    err = seg_of({"type": "error", "content": "brain failed", "isFinal": True})
    assert (err.type, err.is_final, err.is_perceivable) == ("error", True, False)
    share = seg_of(
        {"type": "share", "content": {"canShare": True}, "segmentStart": True, "segmentEnd": True}
    )
    assert share.type == "share"
    assert json.loads(share.content) == {"canShare": True}
    assert share.raw["segmentEnd"] is True


# ----------------------------------------------------------------- delta parsing (§3.4)


@pytest.mark.parametrize("delta", ["plain words", "{broken", "[1, 2]", "42", "null", '"str"', ""])
def test_non_json_or_non_object_delta_falls_back_to_text(delta: str) -> None:
    s = parse_delta(delta, "env")
    assert (s.type, s.content, s.speech_id) == ("text", delta, "env")
    assert s.raw == {"type": "text", "content": delta, "speechId": "env"}


def test_delta_defaults_and_clamping() -> None:
    s = parse_delta(json.dumps({"content": "hello\x00\x07world"}), None)
    assert (s.type, s.content, s.speech_id) == ("text", "helloworld", None)
    assert parse_delta(json.dumps({"type": 7, "content": None}), None).type == "text"
    assert parse_delta(json.dumps({"type": "text"}), None).content == ""
    assert len(parse_delta(json.dumps({"content": "y" * 20000}), None).content) == 8000
    nested = parse_delta(json.dumps({"type": "share", "content": [{"b": 1}, 2]}), None)
    assert nested.content == '[{"b": 1}, 2]'
    assert parse_delta("hi\x00there", None).content == "hithere"


def test_delta_wrong_typed_optionals_are_dropped() -> None:
    s = parse_delta(
        json.dumps(
            {
                "type": "text",
                "content": "x",
                "threadId": 1,
                "messageId": [],
                "isFinal": "yes",
                "segmentNumber": "3",
                "metadata": "m",
                "tool_metadata": [1],
            }
        ),
        "env",
    )
    assert (s.thread_id, s.message_id, s.is_final, s.segment_number) == (None, None, False, None)
    assert (s.metadata, s.tool_metadata) == (None, None)


def test_delta_own_speech_id_wins_then_envelope() -> None:
    assert parse_delta(json.dumps({"speechId": "own"}), "env").speech_id == "own"
    assert parse_delta(json.dumps({"speechId": 5}), "env").speech_id == "env"


def test_deeply_nested_delta_does_not_raise() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert parse_delta(deep, None).type == "text"
    deep_obj = '{"type":"share","content":' + "[" * 5000 + "]" * 5000 + "}"
    assert parse_delta(deep_obj, None).type in ("text", "share")


# ----------------------------------------------------------------- tool parsing (§3.6)


def test_tool_name_only() -> None:
    call = parse_tool_call(tool("  get_experience_instructions  "))
    assert call is not None
    assert (call.name, call.args, call.fused_args) == ("get_experience_instructions", {}, ())
    assert call.raw == "  get_experience_instructions  "


def test_fused_tool_args() -> None:
    call = parse_tool_call(tool('open_filing {"a":1}{"b":2}'))
    assert call is not None
    assert call.name == "open_filing"
    assert call.args == {"b": 2}
    assert call.fused_args == ({"a": 1},)
    three = parse_tool_call(tool('x {"a":1} {"b":2}\n{"c":3}'))
    assert three is not None
    assert (three.args, three.fused_args) == ({"c": 3}, ({"a": 1}, {"b": 2}))


def test_braces_and_escaped_quotes_inside_strings() -> None:
    content = r'say {"text": "a } brace { and \"quoted\" \\", "n": {"deep": "}"}}{"z": "{"}'
    call = parse_tool_call(tool(content))
    assert call is not None
    assert call.fused_args == ({"text": 'a } brace { and "quoted" \\', "n": {"deep": "}"}},)
    assert call.args == {"z": "{"}


@pytest.mark.parametrize(
    ("content", "args", "fused"),
    [
        ('t {"a":1}{"b":', {"a": 1}, ()),
        ('t {"a":1}{bad json}', {"a": 1}, ()),
        ('t {"a":1} trailing {"b":2}', {"a": 1}, ()),
        ("t {unclosed", {}, ()),
        ('t {"a":1}{"b":2}{"c', {"b": 2}, ({"a": 1},)),
        ('t {"s": "unterminated}', {}, ()),
    ],
)
def test_malformed_tail_stops_splitting(content: str, args: Any, fused: Any) -> None:
    call = parse_tool_call(tool(content))
    assert call is not None
    assert (call.args, call.fused_args) == (args, fused)


def test_not_a_tool_call() -> None:
    assert parse_tool_call(tool("")) is None
    assert parse_tool_call(tool('   {"a": 1}')) is None
    assert parse_tool_call(seg_of({"type": "text", "content": "navigate {}"})) is None


def test_tool_metadata() -> None:
    meta = {"id": "tid", "wait_for_response": True, "type": "client"}
    call = parse_tool_call(tool("n {}", tool_metadata=meta))
    assert call is not None
    assert (call.call_id, call.wait_for_response, call.tool_type) == ("tid", True, "client")
    lax = parse_tool_call(tool("n {}", tool_metadata={"id": "tid", "wait_for_response": "true"}))
    assert lax is not None and lax.wait_for_response is False
    no_id = parse_tool_call(tool("n {}", tool_metadata={"id": "", "wait_for_response": True}))
    assert no_id is not None
    assert (no_id.call_id, no_id.wait_for_response, no_id.tool_type) == (None, False, None)


def test_huge_tool_input_is_bounded() -> None:
    content = "t " + '{"a":1}' * 200_000
    seg = BrainSegment("tool", content, None, None, None, False, None, None, None, {})
    call = parse_tool_call(seg)
    assert call is not None
    assert call.args == {"a": 1}
    assert len(call.fused_args) < 100
    deep = BrainSegment("tool", "t " + "{" * 50_000, None, None, None, False, None, None, None, {})
    assert parse_tool_call(deep) is not None
    nested = '{"a":' * 3000 + "1" + "}" * 3000
    call2 = parse_tool_call(
        BrainSegment("tool", "t " + nested, None, None, None, False, None, None, None, {})
    )
    assert call2 is not None


def test_tool_response_name() -> None:
    def resp(content: str) -> BrainSegment:
        return seg_of({"type": "tool_response", "content": content})

    assert parse_tool_response_name(resp("  highlight_chart responded with size 113")) == (
        "highlight_chart"
    )
    assert parse_tool_response_name(resp("open_filing  responded")) == "open_filing"
    assert parse_tool_response_name(resp("open_filing respondedly")) is None
    assert parse_tool_response_name(resp("responded")) is None
    assert parse_tool_response_name(seg_of({"type": "tool", "content": "x responded"})) is None


def test_canonical_json() -> None:
    a = {"b": [3, {"z": 1, "a": 2}], "a": {"y": None, "x": "é"}}
    assert canonical_json(a) == '{"a":{"x":"é","y":null},"b":[3,{"a":2,"z":1}]}'
    assert canonical_json({"a": 1, "b": 2}) == canonical_json({"b": 2, "a": 1})
    assert canonical_json([2, 1]) != canonical_json([1, 2])
    call = parse_tool_call(tool('go {"b": 1, "a": [1, 2]}'))
    assert call is not None and call.dedup_key == 'go:{"a":[1,2],"b":1}'
