"""Client-side tool arguments against their JSON Schema: registration checks and error paths."""

from __future__ import annotations

import json
from typing import Any

import pytest

from avatar_sdk import AvatarError, ChatSession, ErrorCode, SessionConfig
from avatar_sdk.guards.brain import ConversationGuards
from avatar_sdk.wire import AgentRawText, AgentStartSpeech, parse_delta

ORDER = {
    "type": "object",
    "required": ["customer", "items"],
    "additionalProperties": False,
    "properties": {
        "customer": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1}},
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["sku"],
                "properties": {"sku": {"type": "string"}, "qty": {"$ref": "#/$defs/qty"}},
            },
        },
    },
    "$defs": {"qty": {"type": "integer", "minimum": 1}},
}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, data: dict[str, Any]) -> None:
        self.events.append((name, data))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [data for n, data in self.events if n == name]


def make_guards() -> tuple[ConversationGuards, Recorder]:
    recorder = Recorder()
    return ConversationGuards(SessionConfig(), recorder, hard_tier=False), recorder


def call_tool(guards: ConversationGuards, name: str, args: Any, turn: str = "t1") -> None:
    """One new turn carrying one tool segment ``name <args as JSON>``."""
    guards.observe(AgentStartSpeech("s1", turn, True))
    content = f"{name} {args if isinstance(args, str) else json.dumps(args)}"
    seg = parse_delta(json.dumps({"type": "tool", "content": content}), "s1")
    guards.observe(AgentRawText("s1", turn, seg))


def errors_of(schema: dict[str, Any], args: Any) -> list[str]:
    guards, recorder = make_guards()
    ran: list[Any] = []
    guards.on_tool_call("t", lambda a, c: ran.append(a), schema)
    call_tool(guards, "t", args)
    invalid = recorder.named("tool_call_invalid")
    assert bool(invalid) != bool(ran)  # exactly one of: handler ran, call reported invalid
    return invalid[0]["errors"] if invalid else []


# -- registration ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "integr"}, "$.type"),
        ({"type": "object", "properties": {"qty": {"minimum": "one"}}}, "$.properties.qty.minimum"),
        ({"required": "slide"}, "$.required"),
        ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, "#/$defs/missing"),
        ({"$ref": "https://schemas.example.com/tool.json"}, "https://schemas.example.com"),
        ({"$schema": "https://json-schema.org/draft/2099/schema"}, "unknown $schema"),
        ({"type": "object", "enum": [{1, 2}]}, "not JSON"),
        ({"type": "number", "maximum": float("inf")}, "not JSON"),
    ],
)
def test_an_invalid_schema_is_refused_at_registration(schema: Any, named: str) -> None:
    guards, _ = make_guards()
    with pytest.raises(AvatarError) as info:
        guards.on_tool_call("navigate_to_slide", lambda a, c: None, schema)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert "navigate_to_slide" in str(info.value) and named in str(info.value)


def test_a_schema_that_is_not_a_mapping_is_refused() -> None:
    guards, _ = make_guards()
    with pytest.raises(AvatarError) as info:
        guards.on_tool_call("t", lambda a, c: None, ["type", "object"])  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_ARGUMENT and "mapping" in str(info.value)


def test_the_schema_is_copied_at_registration() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    guards, recorder = make_guards()
    guards.on_tool_call("t", lambda a, c: None, schema)
    schema["properties"]["n"]["type"] = "string"  # too late: the checked copy is used
    call_tool(guards, "t", {"n": 3})
    assert recorder.named("tool_call") and not recorder.named("tool_call_invalid")


# -- errors ---------------------------------------------------------------------------------------
def test_nested_errors_carry_their_json_paths() -> None:
    args = {
        "customer": {"name": ""},
        "items": [{"sku": "A1", "qty": 2}, {"qty": 0}, {"sku": 7, "qty": 1.5}],
        "coupon": "X",
    }
    assert errors_of(ORDER, args) == [
        "$: Additional properties are not allowed ('coupon' was unexpected)",
        "$.customer.name: '' should be non-empty",
        "$.items[1]: 'sku' is a required property",
        "$.items[1].qty: 0 is less than the minimum of 1",
        "$.items[2].qty: 1.5 is not of type 'integer'",
        "$.items[2].sku: 7 is not of type 'string'",
    ]
    assert errors_of(ORDER, {"customer": {"name": "Ada"}, "items": [{"sku": "A1", "qty": 2}]}) == []


def test_the_invalid_event_carries_the_call_and_the_handler_does_not_run() -> None:
    guards, recorder = make_guards()
    ran: list[Any] = []
    schema = {"type": "object", "required": ["slide"], "properties": {"slide": {"type": "integer"}}}
    guards.on_tool_call("navigate_to_slide", lambda a, c: ran.append(a), schema)
    call_tool(guards, "navigate_to_slide", {"slide": "three"})
    (invalid,) = recorder.named("tool_call_invalid")
    assert invalid["call"]["name"] == "navigate_to_slide"
    assert invalid["call"]["args"] == {"slide": "three"}
    assert invalid["errors"] == ["$.slide: 'three' is not of type 'integer'"]
    assert not ran and not recorder.named("tool_call")


def test_numbers_must_be_finite() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "number"}}}
    # Python's json reads NaN and Infinity; JSON has neither.
    assert errors_of(schema, '{"x": NaN}') == ["$.x: nan is not of type 'number'"]
    assert errors_of(schema, '{"x": -Infinity}') == ["$.x: -inf is not of type 'number'"]
    assert errors_of(schema, {"x": 10**400}) == []
    assert errors_of(schema, {"x": 2.5}) == []


def test_a_flood_of_errors_is_capped_and_long_messages_cut() -> None:
    ids = {"type": "array", "items": {"type": "string"}}
    errors = errors_of({"type": "object", "properties": {"ids": ids}}, {"ids": list(range(50))})
    assert len(errors) == 21 and errors[-1] == "$: 30 more error(s)"
    short = {"type": "object", "properties": {"s": {"maxLength": 3}}}
    (long,) = errors_of(short, {"s": "y" * 5000})
    assert long.startswith("$.s: 'yyy") and len(long) < 260 and long.endswith("...")


def test_a_ref_under_a_nested_id_is_checked_when_used() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$id": "https://example.com/a", "$ref": "b.json"}},
    }
    assert errors_of(schema, {}) == []  # no "a": nothing to resolve
    (error,) = errors_of(schema, {"a": 1})
    assert error.startswith("$: schema $ref") and "b.json" in error


async def test_chat_session_registration_checks_the_schema_too() -> None:
    chat = ChatSession("https://genie.example.com", "djJ8MTIzNDU2fGFiY2RlZmdoaWprbG1ub3A")
    try:
        with pytest.raises(AvatarError) as info:
            chat.on_tool_call("navigate_to_slide", lambda a, c: None, {"type": "integr"})
        assert info.value.code is ErrorCode.INVALID_ARGUMENT and "$.type" in str(info.value)
    finally:
        await chat.close()
