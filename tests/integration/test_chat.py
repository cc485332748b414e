"""ChatSession (the HTTP text transport) over loopback against the staging converse endpoint."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from avatar_sdk import AvatarError, ErrorCode, SessionConfig
from avatar_sdk.chat.session import (
    MAX_LINE_BYTES,
    SPIRAL_RECOVERY_PREFIX,
    ChatSession,
    converse_once,
)
from avatar_sdk.clock import FakeClock
from avatar_sdk.events.bus import Event
from avatar_sdk.testing import StagingServer

from .conftest import HANG_GUARD, sdk_tasks, until

FAST = SessionConfig(close_timeout=1.0, session_complete_timeout=2.0, server_connect_timeout=2.0)
ChatFactory = Callable[..., ChatSession]


@pytest_asyncio.fixture
async def make_chat(staging: StagingServer) -> AsyncIterator[ChatFactory]:
    """Build chat sessions against ``staging``; all are closed after the test."""
    made: list[ChatSession] = []

    def factory(**kwargs: Any) -> ChatSession:
        kwargs.setdefault("allow_insecure_transport", True)
        kwargs.setdefault("config", FAST)
        chat = ChatSession(
            kwargs.pop("genie_url", staging.genie_url), kwargs.pop("token", staging.token), **kwargs
        )
        made.append(chat)
        return chat

    yield factory
    for chat in made:
        await chat.close()


def record(chat: ChatSession, *names: str) -> list[Event]:
    seen: list[Event] = []
    for name in names:
        chat.on(name, seen.append)
    return seen


def chat_tasks() -> list[asyncio.Task[Any]]:
    """Live tasks of the client side (the SDK's, aiohttp's client): the suite's one helper."""
    return sdk_tasks()


async def eventually(predicate: Callable[[], bool], timeout: float = 2.0) -> None:
    assert await until(predicate, timeout, step=0.01), "condition not reached in time"


async def test_two_turn_chat(staging: StagingServer, make_chat: ChatFactory) -> None:
    chat = make_chat()
    events = record(chat, "agent_text", "response_pending", "response_settled")
    staging.brain.reply("Paris is the capital of France.")
    first = await chat.send("What is the capital of France?")
    staging.brain.reply("About two million people live there.")
    second = await chat.send("How many people live there?")

    assert first.text == "Paris is the capital of France."
    assert second.text == "About two million people live there."
    assert first.segments[0].type == "think"
    assert {s.type for s in first.segments} == {"think", "text"}
    assert not first.spiral_stopped and not first.truncated and first.tool_calls == ()
    spoken = [
        e.data["content"] for e in events if e.name == "agent_text" and e.data["type"] == "text"
    ]
    assert "".join(spoken) == first.text + second.text
    # Each turn: pending once, settled once (by the first non-think segment).
    assert [e.name for e in events if e.name != "agent_text"] == [
        "response_pending",
        "response_settled",
    ] * 2
    assert [r.user_message for r in staging.converse_requests] == [
        "What is the capital of France?",
        "How many people live there?",
    ]
    assert all(r.completed for r in staging.converse_requests)


async def test_thread_id_learned_and_reused(staging: StagingServer, make_chat: ChatFactory) -> None:
    chat = make_chat()
    assert chat.thread_id is None
    first = await chat.send("hello")
    learned = staging.converse_requests[0].thread_id
    assert learned and chat.thread_id == learned == first.thread_id
    await chat.send("again")
    bodies = [r.body for r in staging.converse_requests]
    assert bodies[0] == {"userMessage": "hello", "sse": False}
    assert bodies[1] == {"userMessage": "again", "sse": False, "threadId": learned}

    # A seeded thread (e.g. an avatar session's) rides the first request and is kept.
    seeded = make_chat(thread_id="thr-seeded", request_vars={"user_name": "Ada"})
    reply = await seeded.send("continue")
    assert staging.converse_requests[-1].body == {
        "userMessage": "continue",
        "sse": False,
        "threadId": "thr-seeded",
        "request_vars": {"user_name": "Ada"},
    }
    assert reply.thread_id == seeded.thread_id == "thr-seeded"


async def test_tool_calls_dispatch_validate_and_isolate(
    staging: StagingServer, make_chat: ChatFactory
) -> None:
    chat = make_chat()
    events = record(chat, "tool_call", "tool_call_result", "tool_call_invalid", "callback_error")
    calls: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def navigate(args: dict[str, Any], call: dict[str, Any]) -> str:
        calls.append((args, call))
        return f"on slide {args['slide']}"

    async def broken(args: dict[str, Any], call: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    schema = {
        "type": "object",
        "properties": {"slide": {"type": "integer", "minimum": 1}},
        "required": ["slide"],
    }
    chat.on_tool_call("navigate_to_slide", navigate, schema)
    chat.on_tool_call("highlight", broken)
    chat.on("agent_text", lambda e: 1 / 0)  # a raising callback never breaks the turn
    staging.brain.tool_calls(
        [
            'navigate_to_slide {"slide": 2}',
            'navigate_to_slide {"slide": 2}',  # duplicate within the turn: dropped
            'navigate_to_slide {"slide": "two"}',  # fails the schema
            'highlight {"id": "chart"}',
        ],
        then="Here you go.",
    )
    reply = await chat.send("show slide two")
    await eventually(lambda: any(e.data.get("ok") is False for e in events))

    assert reply.text == "Here you go."
    assert [c["name"] for c in reply.tool_calls] == ["navigate_to_slide", "highlight"]
    assert [args for args, _ in calls] == [{"slide": 2}]
    assert calls[0][1]["name"] == "navigate_to_slide"
    assert len(reply.invalid_tool_calls) == 1
    invalid = reply.invalid_tool_calls[0]
    assert invalid["call"]["args"] == {"slide": "two"} and invalid["errors"]
    names = [e.name for e in events if e.name != "callback_error"]
    assert names.count("tool_call") == 2 and names.count("tool_call_invalid") == 1
    results = [e.data for e in events if e.name == "tool_call_result"]
    assert {"ok": True, "value": "on slide 2"}.items() <= results[0].items()
    assert results[1]["ok"] is False and "handler bug" in results[1]["error"]
    assert any(e.name == "callback_error" for e in events)

    # Each send is a new turn: the same call is dispatched again.
    staging.brain.tool_calls(['navigate_to_slide {"slide": 2}'], then="Again.")
    await chat.send("once more")
    assert len(calls) == 2


async def test_soft_spiral_signalled_once_per_turn(
    staging: StagingServer, make_chat: ChatFactory
) -> None:
    chat = make_chat(config=FAST.with_(tool_spiral_limit=10))
    spirals = record(chat, "tool_spiral_detected")
    staging.brain.tool_spiral(12)
    reply = await chat.send("walk me through the deck")
    assert [e.data for e in spirals] == [{"count": 10, "limit": 10}]
    assert reply.spiral_detected and not reply.spiral_stopped
    assert sum(1 for s in reply.segments if s.is_tool) == 12  # signal only: reading went on
    assert reply.text == ""

    # The count restarts with the next turn; duplicates count too (before de-duplication).
    staging.brain.tool_spiral(12, identical=True)
    again = await chat.send("again")
    assert [e.data for e in spirals] == [{"count": 10, "limit": 10}] * 2
    assert len(again.tool_calls) == 1 and again.spiral_detected

    staging.brain.reply("Fine.")
    calm = await chat.send("and now?")
    assert len(spirals) == 2 and not calm.spiral_detected


async def test_brain_stalled_repeats_then_clears(
    staging: StagingServer, make_chat: ChatFactory
) -> None:
    window = 0.4
    clock = FakeClock()  # the stall watchdog runs on a fake clock
    chat = make_chat(config=FAST.with_(brain_stall_timeout=window), clock=clock)
    stalls = record(chat, "brain_stalled")
    armed = chat.expect("response_pending", timeout=5)  # the turn went out: the dog is armed
    staging.brain.stall(1.0)  # a think segment first (it does not count), then real silence
    turn = asyncio.ensure_future(chat.send("are you there?"))
    await armed
    await clock.advance(window)
    assert await until(lambda: len(stalls) == 1, 2)
    await clock.advance(window)  # it repeats every window
    assert await until(lambda: len(stalls) == 2, 2)
    reply = await turn
    assert reply.text == "You said: are you there?"
    await clock.advance(window * 10)  # the spoken text cleared it: no third firing
    assert [e.data for e in stalls] == [
        {"after": window, "count": 1},
        {"after": window, "count": 2},
    ]

    staging.brain.reply("Quick answer.")
    await chat.send("quick?")
    await clock.advance(window * 10)
    assert len(stalls) == 2


async def test_caller_timeout_closes_the_request_cleanly(
    staging: StagingServer, make_chat: ChatFactory
) -> None:
    chat = make_chat()
    settled = record(chat, "response_settled", "error")
    staging.brain.stall(10.0)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await chat.send("this will hang", timeout=0.3)
    # A hang guard: the caller's timeout ended it, not the brain's 10 s stall.
    assert time.monotonic() - started < HANG_GUARD < 10.0
    # The server sees the connection go away: the HTTP response was closed, not leaked.
    await eventually(lambda: staging.converse_requests[-1].aborted)
    assert [e.name for e in settled] == ["response_settled"]
    assert {t.get_name() for t in chat_tasks()} <= {"avatar-sdk:chat-brain-watchdog"}

    # Cancelling the call does the same.
    staging.brain.stall(10.0)
    task = asyncio.ensure_future(chat.send("hang again"))
    await eventually(lambda: len(staging.converse_requests) == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: staging.converse_requests[-1].aborted)

    # The session is still usable: the lock was released.
    staging.brain.reply("Back again.")
    reply = await chat.send("hello?", timeout=5)
    assert reply.text == "Back again."
    await chat.close()
    assert chat_tasks() == []


async def test_turns_are_serialized(staging: StagingServer, make_chat: ChatFactory) -> None:
    chat = make_chat()
    staging.brain.stall(0.3)
    staging.brain.reply("Second.")
    first, second = await asyncio.gather(chat.send("one"), chat.send("two"))
    assert first.text == "You said: one" and second.text == "Second."
    one, two = staging.converse_requests
    assert one.ended_at is not None and two.at >= one.ended_at
    assert two.body is not None and two.body["threadId"] == one.thread_id


async def test_converse_once_recovers_a_spiral_with_one_follow_up(
    staging: StagingServer, make_chat: ChatFactory
) -> None:
    chat = make_chat()
    staging.brain.tool_spiral(12)
    staging.brain.reply("Slide three covers revenue.")
    result = await converse_once(chat, "What is on slide three?")

    requests = staging.converse_requests
    assert [r.user_message for r in requests] == [
        "What is on slide three?",
        SPIRAL_RECOVERY_PREFIX + "What is on slide three?",
    ]
    assert requests[1].body is not None and requests[1].body["threadId"] == requests[0].thread_id
    assert requests[0].aborted  # reading stopped at 8 tool segments: the stream was closed
    first = result.first_attempt
    assert first is not None and first.spiral_stopped and first.text == ""
    assert sum(1 for s in first.segments if s.is_tool) == 8
    assert len(first.tool_calls) == 3  # max_per_tool
    assert result.spiral_recovered and not result.spiral_stopped
    assert result.text == "Slide three covers revenue."
    assert result.thread_id == chat.thread_id

    # A follow-up that spirals too is returned as is: exactly one retry, never two.
    staging.brain.tool_spiral(12)
    staging.brain.tool_spiral(12)
    again = await converse_once(chat, "And slide four?")
    assert len(staging.converse_requests) == 4
    assert again.first_attempt is not None and not again.spiral_recovered
    assert again.spiral_stopped and again.text == ""

    # No recovery when asked not to, or when the turn has text.
    staging.brain.tool_spiral(12)
    plain = await converse_once(chat, "no retry", recover_from_spiral=False)
    assert plain.spiral_stopped and plain.first_attempt is None
    staging.brain.reply("Just words.")
    words = await converse_once(chat, "words")
    assert words.text == "Just words." and words.first_attempt is None
    assert len(staging.converse_requests) == 6


async def test_converse_once_truncates_at_max_segments(
    staging: StagingServer, make_chat: ChatFactory
) -> None:
    chat = make_chat()
    staging.brain.reply("one two three four five six seven eight nine ten eleven twelve")
    result = await converse_once(chat, "count", max_segments=2)
    assert result.truncated and len(result.segments) == 2 and not result.spiral_stopped


async def test_close_sends_session_completed_exactly_once(
    staging: StagingServer, make_chat: ChatFactory
) -> None:
    chat = make_chat()
    completed = record(chat, "session_completed")
    await chat.send("hello")
    await chat.close()
    await chat.close()
    assert staging.completed_threads == [chat.thread_id]
    assert [e.data for e in completed] == [
        {"thread_id": chat.thread_id, "delivered": True, "reason": "close", "outcome": "sent"}
    ]
    with pytest.raises(AvatarError) as info:
        await chat.send("after close")
    assert info.value.code is ErrorCode.CLOSED

    # No thread yet: nothing to complete, still one event; `async with` closes.
    async with make_chat() as idle:
        idle_events = record(idle, "session_completed")
    assert [e.data["outcome"] for e in idle_events] == ["no_thread"]
    assert len(staging.completed_threads) == 1


async def test_close_aborts_a_running_turn(staging: StagingServer, make_chat: ChatFactory) -> None:
    chat = make_chat()
    staging.brain.stall(10.0)
    task = asyncio.ensure_future(chat.send("long question"))
    await eventually(lambda: chat.thread_id is not None)  # the think segment arrived
    started = time.monotonic()
    await chat.close()
    # A hang guard: close() cut the turn, it did not wait for the brain's 10 s stall.
    assert time.monotonic() - started < HANG_GUARD < 10.0
    with pytest.raises(AvatarError) as info:
        await task
    assert info.value.code is ErrorCode.CLOSED
    await eventually(lambda: staging.converse_requests[-1].aborted)
    assert staging.completed_threads == [chat.thread_id]
    assert chat_tasks() == []


async def test_bad_token_fails_with_auth_failed(
    staging: StagingServer, make_chat: ChatFactory
) -> None:
    bad_token = "not-the-token-" + "x" * 20
    chat = make_chat(token=bad_token)
    errors = record(chat, "error")
    with pytest.raises(AvatarError) as info:
        await chat.send("hello")
    assert info.value.code is ErrorCode.AUTH_FAILED
    assert "401" in str(info.value) and bad_token not in str(info.value)
    assert [e.data["code"] for e in errors] == ["auth_failed"]
    assert staging.converse_requests[-1].status == 401
    assert bad_token not in repr(chat)


def test_insecure_genie_url_is_refused(staging: StagingServer) -> None:
    with pytest.raises(AvatarError) as info:
        ChatSession("http://genie.example.com", staging.token)
    assert info.value.code is ErrorCode.INSECURE_TRANSPORT


async def test_envelopes_keepalives_and_bad_lines(make_chat: ChatFactory) -> None:
    """Any genie: envelope lines, keepalive pings, junk and an overlong line, no final newline."""

    async def converse(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        think = json.dumps({"type": "think", "content": "", "threadId": "thr-env"})
        await response.write(json.dumps({"delta": think, "speechId": "ab12-transcript-x"}).encode())
        await response.write(b"\nnot json\n")
        for _ in range(2):  # pings prove nothing: the brain is still silent
            await response.write(b'{"type":"keepalive","content":""}\n')
            await asyncio.sleep(0.3)  # the scenario: a silent brain, pinging
        await response.write(b'{"type":"text","content":"' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n')
        await response.write(
            b'{"type":"text","content":"Hello"}\n{"type":"text","content":" there"}'
        )
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/genie/assistant/converse", converse)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        chat = make_chat(
            genie_url=f"http://127.0.0.1:{port}/genie",
            config=FAST.with_(brain_stall_timeout=0.25),
        )
        events = record(chat, "protocol_error", "brain_stalled", "response_settled")
        reply = await chat.send("hi")
        await chat.close()
    finally:
        await runner.cleanup()
    assert reply.text == "Hello there" and reply.thread_id == "thr-env"
    assert reply.segments[0].speech_id == "ab12-transcript-x"
    assert [s.type for s in reply.segments] == ["think", "keepalive", "keepalive", "text", "text"]
    names = [e.name for e in events]
    assert names.count("protocol_error") == 2
    assert names.index("brain_stalled") < names.index("response_settled")


async def test_lines_split_across_writes_and_an_overlong_line_dropped_whole(
    make_chat: ChatFactory,
) -> None:
    """Framing over real chunks: a line cut mid-JSON joins up, an over-long line whose tail
    is valid JSON is dropped whole (its tail never becomes a segment), the last line needs
    no newline, and the drop is reported once as ``protocol_error``."""
    pieces = [
        b'{"type":"text","con',
        b'tent":"Hello"}\n{"type":"te',
        *[b" " * (MAX_LINE_BYTES // 4)] * 5,  # padding past the limit, over several writes
        b'{"type":"text","content":" TAIL"}\n',
        b'{"type":"text","content":" wor',
        b'ld"}',
    ]

    async def converse(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        for piece in pieces:
            await response.write(piece)
            await asyncio.sleep(0.01)  # let each write go out on its own
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/genie/assistant/converse", converse)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        chat = make_chat(genie_url=f"http://127.0.0.1:{port}/genie")
        errors = record(chat, "protocol_error")
        reply = await chat.send("hi")
        await chat.close()
    finally:
        await runner.cleanup()
    assert reply.text == "Hello world"
    assert [s.content for s in reply.segments] == ["Hello", " world"]
    assert [e.data for e in errors] == [
        {"event": "converse", "detail": f"1 line(s) over {MAX_LINE_BYTES} bytes"}
    ]


async def test_respond_to_tool_unknown_call(make_chat: ChatFactory) -> None:
    chat = make_chat()
    assert await chat.respond_to_tool("call-1", {"ok": True}) == {
        "ok": False,
        "reason": "unknown_or_stale",
    }
    with pytest.raises(AvatarError):
        await chat.respond_to_tool("", {})
