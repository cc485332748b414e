"""ChatSession's pure parts: NDJSON framing, line parsing, request building, converse_once."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.chat.session import (
    SPIRAL_RECOVERY_PREFIX,
    ChatReply,
    ChatSession,
    LineSplitter,
    build_converse_body,
    check_request_vars,
    converse_once,
    parse_converse_line,
)
from avatar_sdk.chat.wire import http_error
from avatar_sdk.testing import Brain
from avatar_sdk.wire import ProtocolError

TOKEN = "djJ8MTIzNDU2fGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6"


# -- LineSplitter ---------------------------------------------------------------------------------
def test_lines_split_across_chunks() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert splitter.feed(b":2}\n\n{") == [b'{"b":2}', b""]
    assert splitter.flush() == b"{"
    assert splitter.flush() is None


def test_overlong_lines_are_dropped_not_buffered() -> None:
    splitter = LineSplitter(max_line=8)
    assert splitter.feed(b"0123456789\nok\n") == [b"ok"]
    # Across chunks: the long line is skipped up to its newline, then parsing resumes.
    assert splitter.feed(b"01234") == []
    assert splitter.feed(b"56789abc") == []
    assert splitter.feed(b"def\nnext\n") == [b"next"]
    assert splitter.dropped == 2
    assert splitter.feed(b"0123456789") == []
    assert splitter.flush() is None and splitter.dropped == 3


def test_an_overlong_line_is_dropped_whole_even_when_its_tail_is_json() -> None:
    """The case aiohttp's bounded readline gets wrong: its tail must not become a line."""
    splitter = LineSplitter(max_line=8)
    assert splitter.feed(b"        ") == []  # exactly the limit: still a candidate line
    assert splitter.feed(b'  {"type":"tool"}\n{"a":1}\n') == [b'{"a":1}']
    assert splitter.dropped == 1
    assert splitter.feed(b"12345678\n") == [b"12345678"]  # max_line bytes: kept


# -- parse_converse_line --------------------------------------------------------------------------
def test_a_bare_delta_line_is_a_segment() -> None:
    line = json.dumps(
        {"role": "assistant", "type": "think", "content": "", "threadId": "thr-1", "et": 0.1}
    ).encode()
    seg = parse_converse_line(line + b"\r")
    assert seg is not None
    assert (seg.type, seg.thread_id, seg.speech_id, seg.is_think) == ("think", "thr-1", None, True)


def test_an_envelope_line_carries_a_json_string_delta() -> None:
    delta = json.dumps({"type": "text", "content": "hello\x00\x07 world"})
    seg = parse_converse_line(json.dumps({"delta": delta, "speechId": "abcd-transcript-hi"}))
    assert seg is not None
    assert (seg.type, seg.content, seg.speech_id) == ("text", "hello world", "abcd-transcript-hi")
    assert seg.is_spoken
    # A non-JSON delta string is spoken text, as on the socket.
    plain = parse_converse_line(json.dumps({"delta": "just words"}))
    assert plain is not None and (plain.type, plain.content) == ("text", "just words")
    nested = parse_converse_line(json.dumps({"delta": {"type": "tool", "content": "t {}"}}))
    assert nested is not None and nested.is_tool


@pytest.mark.parametrize(
    "line", [b"", b"   ", b": comment", b"data: [DONE]", b"event: x", b"id: 3"]
)
def test_framing_lines_are_skipped(line: bytes) -> None:
    assert parse_converse_line(line) is None


def test_sse_data_lines_are_accepted() -> None:
    seg = parse_converse_line(b'data: {"type":"text","content":"hi"}')
    assert seg is not None and seg.content == "hi"


@pytest.mark.parametrize("line", [b"not json", b"[1, 2]", b'"text"', b"{broken"])
def test_malformed_lines_raise_protocol_error(line: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_converse_line(line)
    assert info.value.event == "converse"


def test_a_typeless_object_defaults_to_text() -> None:
    seg = parse_converse_line(b'{"content": "hi"}')
    assert seg is not None and seg.type == "text"


# -- requests -------------------------------------------------------------------------------------
def test_request_body() -> None:
    assert build_converse_body("hi", thread_id=None, request_vars=None) == {
        "userMessage": "hi",
        "sse": False,
    }
    assert build_converse_body("hi", thread_id="t", request_vars={"a": 1}) == {
        "userMessage": "hi",
        "sse": False,
        "threadId": "t",
        "request_vars": {"a": 1},
    }


def test_request_vars_validation() -> None:
    assert check_request_vars(None) is None
    ok = {"name": "Ada", "n": 3, "x": 1.5, "flag": True, "none": None}
    assert check_request_vars(ok) == ok
    for bad in ({"sys__role": "x"}, {"Secrets": "x"}, {"a": {"b": 1}}, {"a": [1]}, {"a": 1e999}):
        with pytest.raises(AvatarError) as info:
            check_request_vars(bad)
        assert info.value.code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (401, ErrorCode.AUTH_FAILED),
        (403, ErrorCode.AUTH_FAILED),
        (400, ErrorCode.BAD_REQUEST),
        (404, ErrorCode.BAD_REQUEST),
        (422, ErrorCode.BAD_REQUEST),
        (429, ErrorCode.CAPACITY_UNAVAILABLE),
        (500, ErrorCode.TRANSPORT_CLOSED),
        (503, ErrorCode.TRANSPORT_CLOSED),
    ],
)
def test_http_status_classification(status: int, code: ErrorCode) -> None:
    error = http_error(status)
    assert error.code is code and str(status) in str(error)


# -- construction ---------------------------------------------------------------------------------
def test_construction_guards_and_token_secrecy() -> None:
    chat = ChatSession("https://genie.example.com/", TOKEN, thread_id="thr-1")
    assert TOKEN not in repr(chat)
    assert "genie.example.com" in repr(chat) and chat.thread_id == "thr-1"
    with pytest.raises(AvatarError) as info:
        ChatSession("http://genie.example.com", TOKEN)
    assert info.value.code is ErrorCode.INSECURE_TRANSPORT
    assert ChatSession("http://127.0.0.1:9", TOKEN, allow_insecure_transport=True)
    for kwargs in ({"thread_id": ""}, {"request_vars": {"sys__x": 1}}):
        with pytest.raises(AvatarError):
            ChatSession("https://genie.example.com", TOKEN, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(AvatarError):
        ChatSession("https://genie.example.com", "")


async def test_send_validates_before_any_request() -> None:
    chat = ChatSession("https://genie.invalid", TOKEN)
    bad_calls: list[dict[str, Any]] = [
        {"text": "  "},
        {"text": "hi", "timeout": 0},
        {"text": "hi", "timeout": float("nan")},
        {"text": "hi", "max_tool_calls": 0},
        {"text": "hi", "max_segments": True},
    ]
    for kwargs in bad_calls:
        with pytest.raises(AvatarError) as info:
            await chat.send(**kwargs)
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
    await chat.close()
    with pytest.raises(AvatarError) as closed:
        await chat.send("hi")
    assert closed.value.code is ErrorCode.CLOSED


# -- converse_once --------------------------------------------------------------------------------
def _call(name: str, slide: int) -> dict[str, Any]:
    return {"name": name, "args": {"slide": slide}, "fused_args": [], "speech_id": None}


def _reply(text: str, *, stopped: bool = False, calls: int = 0) -> ChatReply:
    return ChatReply(
        text=text,
        segments=(),
        tool_calls=tuple(_call("navigate_to_slide", i) for i in range(calls)),
        spiral_stopped=stopped,
        thread_id="thr-1",
    )


class FakeChat:
    """Stands in for ChatSession.send: scripted replies, recorded requests."""

    def __init__(self, *replies: ChatReply) -> None:
        self.replies = list(replies)
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def send(self, text: str, **kwargs: Any) -> ChatReply:
        self.sent.append((text, kwargs))
        return self.replies.pop(0)


async def test_converse_once_single_follow_up_with_prefix() -> None:
    fake = FakeChat(_reply("", stopped=True, calls=8), _reply("Words now."))
    result = await converse_once(cast(ChatSession, fake), "Q?", max_tool_calls=8)
    assert [t for t, _ in fake.sent] == ["Q?", SPIRAL_RECOVERY_PREFIX + "Q?"]
    assert fake.sent[0][1] == {"timeout": None, "max_tool_calls": 8, "max_segments": 2000}
    assert result.text == "Words now." and result.spiral_recovered
    assert result.first_attempt is not None
    assert result.first_attempt.spiral_stopped and len(result.first_attempt.tool_calls) == 3


async def test_converse_once_never_retries_twice() -> None:
    fake = FakeChat(_reply("", stopped=True), _reply("", stopped=True))
    result = await converse_once(cast(ChatSession, fake), "Q?")
    assert len(fake.sent) == 2
    assert result.spiral_stopped and not result.spiral_recovered and result.first_attempt


@pytest.mark.parametrize(
    ("reply", "recover"),
    [
        (_reply("", stopped=True), False),  # recovery disabled
        (_reply("Some words.", stopped=True), True),  # stopped, but there is text
        (_reply(""), True),  # empty but not a spiral
    ],
)
async def test_converse_once_without_follow_up(reply: ChatReply, recover: bool) -> None:
    fake = FakeChat(reply)
    result = await converse_once(cast(ChatSession, fake), "Q?", recover_from_spiral=recover)
    assert len(fake.sent) == 1
    assert result.first_attempt is None and not result.spiral_recovered


async def test_converse_once_caps_calls_per_tool() -> None:
    calls = (*(_call("a", i) for i in range(5)), _call("b", 1), _call("b", 2))
    reply = ChatReply("x", (), calls, spiral_stopped=False, thread_id=None)
    result = await converse_once(cast(ChatSession, FakeChat(reply)), "Q?", max_per_tool=2)
    assert [(c["name"], c["args"]["slide"]) for c in result.tool_calls] == [
        ("a", 0),
        ("a", 1),
        ("b", 1),
        ("b", 2),
    ]
    with pytest.raises(AvatarError):
        await converse_once(cast(ChatSession, FakeChat(reply)), "Q?", max_per_tool=0)


# -- the staging brain's spiral script (both transports) ---------------------------------------
def test_brain_tool_spiral_script() -> None:
    brain = Brain()
    brain.tool_spiral(7, turn_boundaries=2)
    plan = brain.next_plan("go")
    assert plan.text is None and len(plan.tool_calls) == 7 and plan.turn_splits == (2, 4)
    assert [json.loads(c.split(" ", 1)[1])["slide"] for c in plan.tool_calls] == list(range(1, 8))
    events = brain.turn_events(
        speech_id="abcd-transcript-go",
        turn_id="t1",
        text="",
        thread_id=None,
        tool_calls=plan.tool_calls,
    )
    starts = [p for e, p in events if e == "agent_start_speech"]
    assert len(starts) == 3 and all(p["isNewTurn"] for p in starts)
    assert "wake-up" in starts[1]["speechId"]
    tools = [json.loads(p["delta"]) for e, p in events if e == "agent_raw_text"]
    assert sum(1 for d in tools if d["type"] == "tool") == 7
    assert not any(e == "generatingSpeech" for e, _ in events)  # no spoken text

    brain.tool_spiral(3, name="open_filing", identical=True)
    same = brain.next_plan("again")
    assert same.tool_calls == ['open_filing {"slide": 1}'] * 3 and same.turn_splits == ()
    # turn_events of an unrelated list never inherits the splits.
    other = brain.turn_events(
        speech_id="abcd-transcript-x",
        turn_id="t2",
        text="",
        thread_id=None,
        tool_calls=list(same.tool_calls),
    )
    assert sum(1 for e, _ in other if e == "agent_start_speech") == 1
