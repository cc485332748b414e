"""Bad input, secrets, callbacks and server-side endings."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from avatar_sdk import AvatarError, AvatarSession, ErrorCode
from avatar_sdk.events.bus import EventStream
from avatar_sdk.session.core.router import FATAL_EVENTS as FATAL
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire import INBOUND, In

from .conftest import SessionFactory, until


@pytest.mark.parametrize(
    "event", [In.AGENT_RAW_TEXT, In.AGENT_START_SPEECH, In.STV_SPEECH_CHUNK, In.SESSION_ERROR]
)
async def test_malformed_event_is_a_protocol_error_and_the_session_goes_on(
    staging: StagingServer, make_session: SessionFactory, event: str
) -> None:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    waiter = session.expect("protocol_error", timeout=2)
    await staging.faults.malformed(event)
    err = await waiter
    assert err.data["event"] == event
    assert session.state == "connected"
    await session.speak("are you ok?")
    await session.wait_for("agent_turn_ended", timeout=2)


async def test_unknown_and_debug_events_are_tolerated(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    conv = next(iter(staging.conversations.values()))
    errors: list[object] = []
    session.on("protocol_error", errors.append)
    await conv.emit("someFutureEvent", {"x": 1})
    await conv.emit(In.DEBUG_LLM_INPUT, {"userInput": "x"})
    await session.speak("hi")
    await session.wait_for("agent_turn_ended", timeout=2)
    assert errors == []


async def test_a_raising_callback_is_isolated(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()

    def boom(_: object) -> None:
        raise RuntimeError("app bug")

    async def async_boom(_: object) -> None:
        raise ValueError("async app bug")

    session.on("agent_text", boom)
    session.on("agent_speech_started", async_boom)
    errors: list[str] = []
    session.on("callback_error", lambda e: errors.append(e.data["event"]))
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    assert "agent_text" in errors
    assert "agent_speech_started" in errors
    assert session.state == "connected"


async def test_token_never_appears_in_logs_reprs_or_errors(
    staging: StagingServer, make_session: SessionFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("socketio", "engineio", "socketio.client", "engineio.client", "avatar_sdk"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        session = make_session()
        await session.connect()
        await session.speak("hello")
        await staging.faults.drop_socket()
        await session.wait_for("reconnected", timeout=3)
        bad = make_session(token=staging.token + "x")
        with pytest.raises(AvatarError) as info:
            await bad.connect()
        await session.close()
    finally:
        for name in ("socketio", "engineio", "socketio.client", "engineio.client", "avatar_sdk"):
            logging.getLogger(name).setLevel(logging.NOTSET)
    assert len(caplog.records) > 10  # the capture really saw DEBUG traffic
    assert staging.token not in caplog.text
    assert staging.token not in repr(session)
    assert staging.token not in str(info.value) and staging.token not in repr(info.value)


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://backend.example", ErrorCode.INSECURE_TRANSPORT),
        ("ws://backend.example", ErrorCode.INSECURE_TRANSPORT),
        ("ftp://backend.example", ErrorCode.INVALID_ARGUMENT),
        ("not a url", ErrorCode.INVALID_ARGUMENT),
        ("https://host:99999", ErrorCode.INVALID_ARGUMENT),
        ("", ErrorCode.INVALID_ARGUMENT),
    ],
)
def test_bad_urls_are_refused_at_construction(url: str, code: ErrorCode) -> None:
    with pytest.raises(AvatarError) as info:
        AvatarSession(url, "secret-token", media=False)
    assert info.value.code is code


def test_empty_token_is_refused() -> None:
    with pytest.raises(AvatarError) as info:
        AvatarSession("https://backend.example", "", media=False)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


async def test_nobody_listening_is_a_bounded_classified_failure(
    make_session: SessionFactory,
) -> None:
    session = make_session(url="http://127.0.0.1:9")
    with pytest.raises(AvatarError) as info:
        await session.connect()
    assert info.value.code in (ErrorCode.UNREACHABLE, ErrorCode.CONNECT_TIMEOUT)
    assert session.state == "failed"


async def test_conversation_end_from_server(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    seen: list[str] = []
    session.on("*", lambda e: seen.append(e.name))
    await staging.faults.end_conversation()
    ended = await session.wait_for("ended", timeout=2)
    assert ended.data["reason"] == "conversation_ended"
    assert ended.data["code"] == "server_ended"
    assert seen.index("time_expired") < seen.index("conversation_ended") < seen.index("ended")
    assert session.state == "ended"
    assert staging.completed_threads == []  # server-ended: no completion by default


async def test_agent_crash_restarted_keeps_the_session(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    waiter = session.expect("session_error", timeout=2)
    await staging.faults.agent_crash(recoverable=True)
    ev = await waiter
    assert ev.data["recoverable"] is True
    assert session.state == "connected"


async def test_agent_crash_fatal_fails_the_session(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    await staging.faults.agent_crash(recoverable=False)
    ended = await session.wait_for("ended", timeout=2)
    assert ended.data["code"] == "agent_crashed"
    assert session.state == "failed"


async def test_pause_resume_and_mute(staging: StagingServer, make_session: SessionFactory) -> None:
    session = make_session()
    await session.connect()
    session.mic_enabled = False
    await session.pause()
    assert session.state == "paused"
    await session.resume()
    assert session.state == "connected"
    session.mic_enabled = True
    await session.speak("done")
    await session.wait_for("agent_turn_ended", timeout=2)
    names = [r.event for r in staging.received]
    assert (
        names.index("muteUser")
        < names.index("pauseConversation")
        < names.index("resumeConversation")
    )
    assert "unmuteUser" in names


async def test_events_iterator_ends_after_the_session(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()

    async def collect(stream: EventStream) -> list[str]:
        return [e.name async for e in stream]

    collector = asyncio.ensure_future(collect(session.events()))  # subscribed here, now
    await session.connect()
    await session.close()
    names = await asyncio.wait_for(collector, 2)
    assert names[0] == "state_changed"
    assert "connected" in names
    assert names[-1] == "ended"


async def test_calls_in_the_wrong_state_are_invalid_state(make_session: SessionFactory) -> None:
    session = make_session()
    with pytest.raises(AvatarError) as info:
        await session.speak("too early")
    assert info.value.code is ErrorCode.INVALID_STATE
    with pytest.raises(AvatarError):
        await session.pause()


async def test_turns_spoken_while_the_agent_restarts_are_held_then_delivered_in_order(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    waiter = session.expect("session_error", timeout=2)
    await staging.faults.agent_crash(recoverable=True, restart_after=0.3)
    await waiter
    conv = staging.conversations[staging.live_sids[0]]
    agent_down_when_done: list[bool] = []
    first = asyncio.ensure_future(session.speak("first while restarting"))
    first.add_done_callback(lambda _: agent_down_when_done.append(conv.agent_down))
    second = asyncio.ensure_future(session.speak("second while restarting"))
    await asyncio.wait_for(asyncio.gather(first, second), 3)
    # Held, not thrown at a restarting agent: the first turn completed only once it was back.
    assert agent_down_when_done == [False]
    assert await until(lambda: len(conv.user_turns) + len(conv.dropped_turns) >= 2, 3)
    assert conv.dropped_turns == []
    assert conv.user_turns == ["first while restarting", "second while restarting"]
    assert session.state == "connected"


JUNK: list[Any] = [
    None,
    "x",
    5,
    1.5,
    True,
    [],
    [1, "2"],
    {"x": {"y": []}},
    {"speechId": 1, "delta": "{"},
]


async def test_junk_for_every_inbound_event_never_breaks_the_session(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    conv = staging.conversations[staging.live_sids[0]]
    details: list[str] = []
    session.on("protocol_error", lambda e: details.append(e.data["detail"]))
    names = sorted(INBOUND - {In.CONVERSATION_ENDED, In.SESSION_ERROR} - set(FATAL))
    for name in names:
        for payload in JUNK:
            await conv.emit(name, payload)
    # The answer to a turn spoken now comes after all the junk, on the same socket.
    answered = session.expect("agent_turn_ended", timeout=3)
    await session.speak("still fine?")
    await answered
    assert session.state == "connected"
    assert details  # the junk was noticed and reported...
    assert not [d for d in details if d.startswith("internal")]  # ...never by a crash of ours


async def test_an_internal_handling_bug_is_reported_not_fatal(
    staging: StagingServer, make_session: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = make_session()
    await session.connect()

    def broken(event: object) -> None:
        raise RuntimeError("guard bug")

    monkeypatch.setattr(session._guards, "observe", broken)
    waiter = session.expect("protocol_error", timeout=3)
    await session.speak("trigger the bug")
    assert (await waiter).data["detail"] == "internal: RuntimeError"
    monkeypatch.undo()
    assert session.state == "connected"
    await session.speak("recovered")
    await session.wait_for("agent_turn_ended", timeout=3)


async def test_a_ws_url_reaches_the_backend_as_http_does(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """The backend URL may be written ws(s):// (python-socketio reaches a Socket.IO server
    from either); the messages say so (tests/unit/test_urls.py)."""
    session = make_session(url=staging.url.replace("http://", "ws://", 1))
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=3)
    assert session.state == "connected"
