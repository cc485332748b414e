"""Property tests: parsers never raise anything but ProtocolError, whatever arrives."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from avatar_sdk.wire import (
    INBOUND,
    BrainSegment,
    ProtocolError,
    SpeechId,
    canonical_json,
    clamp_text,
    parse_delta,
    parse_event,
    parse_tool_call,
    parse_tool_response_name,
)
from avatar_sdk.wire.inbound import InboundEvent

# No example database: the suite must not write into the work tree.
EXAMPLES = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)

# Payloads that look like the real ones (right keys, arbitrary values) find more bugs
# than fully random dicts, which rarely hit a field a parser reads.
WIRE_KEYS = [
    "finalUrl", "agentName", "hostName", "clientConfiguration", "session_id", "status",
    "webrtc_url", "constraints", "audio", "video", "available", "reason", "details", "error",
    "code", "message", "answer", "sdp", "candidate", "sdpMLineIndex", "sdpMid", "speechId",
    "turnId", "delta", "isNewTurn", "text", "durationMs", "agentContent", "userTranscription",
    "timeout_ms", "probability", "remainingTime",
]  # fmt: skip
wire_like: st.SearchStrategy[Any] = st.recursive(
    st.dictionaries(st.sampled_from(WIRE_KEYS), json_values, max_size=4),
    lambda children: st.dictionaries(st.sampled_from(WIRE_KEYS), children, max_size=3),
    max_leaves=4,
)
payloads = json_values | wire_like
event_names = st.sampled_from(sorted(INBOUND)) | st.text(max_size=30)
arg_lists = st.lists(payloads, max_size=3) | st.tuples(payloads, st.text(max_size=10))

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _check(event: str, args: Any) -> None:
    try:
        result: InboundEvent = parse_event(event, args)
    except ProtocolError as err:
        # A __cause__ means the last-resort guard caught a parser bug: fail loudly here.
        assert err.__cause__ is None, repr(err.__cause__)
        assert len(err.detail) <= 320
    else:
        assert result is not None


@EXAMPLES
@given(event_names, arg_lists)
def test_parse_event_total(event: str, args: Any) -> None:
    _check(event, args)


@EXAMPLES
@given(st.sampled_from(sorted(INBOUND)), payloads, st.lists(json_values, max_size=2))
def test_parse_event_total_known_names(event: str, payload: Any, extra: list[Any]) -> None:
    _check(event, [payload, *extra])


@EXAMPLES
@given(st.text() | st.builds(json.dumps, wire_like) | st.builds(json.dumps, json_values))
def test_agent_raw_text_delta_never_raises(delta: str) -> None:
    ev = parse_event("agent_raw_text", [{"speechId": "a-transcript-x", "delta": delta}])
    seg = ev.segment  # type: ignore[union-attr]
    assert isinstance(seg, BrainSegment)
    assert len(seg.content) <= 8000
    assert CONTROL.search(seg.content) is None
    assert seg.speech_id is not None


def _tool_contents() -> st.SearchStrategy[str]:
    objects = st.builds(json.dumps, st.dictionaries(st.text(max_size=5), json_values, max_size=3))
    pieces = st.lists(
        objects | st.sampled_from(["{", "}", '"', "\\", " ", "x", '{"a":', "]"]), max_size=8
    )
    return st.text(max_size=60) | st.builds(
        lambda name, ps: name + " " + "".join(ps), st.text(max_size=10), pieces
    )


@EXAMPLES
@given(_tool_contents(), st.none() | json_values)
def test_parse_tool_call_never_raises(content: str, tool_metadata: Any) -> None:
    seg = parse_delta(
        json.dumps({"type": "tool", "content": content, "tool_metadata": tool_metadata}), None
    )
    call = parse_tool_call(seg)
    if call is not None:
        assert call.name and call.name == call.name.strip()
        assert isinstance(call.args, dict)
        assert all(isinstance(f, dict) for f in call.fused_args)
        canonical_json(call.args)  # always serialisable: the dedup key must exist
    resp = parse_delta(json.dumps({"type": "tool_response", "content": content}), None)
    name = parse_tool_response_name(resp)
    assert name is None or (name and not any(c.isspace() for c in name))


@EXAMPLES
@given(st.text(), st.integers(min_value=-5, max_value=200))
def test_clamp_text(value: str, limit: int) -> None:
    out = clamp_text(value, limit)
    assert len(out) <= max(limit, 0)
    assert CONTROL.search(out) is None
    if CONTROL.search(value) is None and len(value) <= limit:
        assert out == value


@EXAMPLES
@given(st.text(max_size=40))
def test_speech_id_parse_total_and_round_trips(raw: str) -> None:
    sid = SpeechId.parse(raw)
    if sid is not None:
        again = SpeechId.parse(str(sid))
        assert again == sid
        if not raw.endswith("-") or sid.payload:
            assert str(sid) == raw
