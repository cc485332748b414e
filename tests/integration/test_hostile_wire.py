"""Hostile or broken frames on the control socket (issue 12, defects 1-4).

Hand-made frames are written straight to the staging server's websocket
(``staging.faults.raw_frame``): nothing on the server validates them.
"""

from __future__ import annotations

import asyncio
import gc
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.events.bus import Event
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire import In

from .conftest import FAST, SessionFactory

MiB = 1024 * 1024
#: A JSON integer python-engineio refuses to parse (it allows 100 digits).
HUGE_INT = "1" * 101
DEEP = 50_000


@pytest_asyncio.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, Any]]]:
    """What reached the event loop's exception handler ("Task exception was never
    retrieved"...) during the test."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield errors
    loop.set_exception_handler(previous)


def unhandled(errors: list[dict[str, Any]]) -> list[str]:
    gc.collect()  # an unretrieved task exception is reported when its task is collected
    return [f"{e.get('message')}: {e.get('exception')!r}" for e in errors]


def reconnects(session: Any) -> int:
    return sum(session.stats()["reconnects"].values())


async def connected_session(make_session: SessionFactory, **kwargs: Any) -> Any:
    session = make_session(**kwargs)
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)  # the greeting: the socket is quiet now
    return session


async def still_talks(session: Any) -> None:
    """A whole turn round trip on the same socket, after whatever was sent before it."""
    await session.speak("still there?")
    await session.wait_for("agent_turn_ended", timeout=3)


# -- defect 1: frames the decoder rejects -----------------------------------------------------
UNDECODABLE = [
    pytest.param(f'42["agentRawText",{{"speechId":"s","n":{HUGE_INT}}}]', "agentRawText", id="int"),
    pytest.param('42["agentRawText",{"speechId":]', "agentRawText", id="bad-json"),
    pytest.param('42["agentRawText",{}]trailing', "agentRawText", id="trailing-garbage"),
    pytest.param(
        '42["agentRawText",' + "[" * DEEP + "]" * DEEP + "]", "agentRawText", id="deep-nesting"
    ),
    pytest.param('42{"event":"agentRawText"}', "<unknown>", id="non-list-payload"),
    pytest.param('42"agentRawText"', "<unknown>", id="string-payload"),
    pytest.param("42[17,{}]", "<non-string event>", id="non-string-name"),
    pytest.param("42[]", "<unknown>", id="empty-list"),
    pytest.param("42", "<unknown>", id="no-payload"),
    pytest.param('49["agentRawText",{}]', "<unknown>", id="unknown-socketio-type"),
    pytest.param('42/other,["agentRawText",{}]', "agentRawText", id="foreign-namespace"),
    pytest.param('4{"not":"a socket.io packet"}', "<unknown>", id="engineio-json-message"),
    pytest.param("4" + "[" * DEEP + "]" * DEEP, "<unknown>", id="engineio-deep-nesting"),
    pytest.param("x-not-engineio", "<unknown>", id="engineio-garbage"),
    pytest.param("9hello", "<unknown>", id="unknown-engineio-type"),
    pytest.param("5", "<unknown>", id="engineio-upgrade-from-server"),
    pytest.param('0{"sid":"x"}', "<unknown>", id="engineio-second-open"),
    pytest.param(
        '459-["agentRawText",{"_placeholder":true,"num":0}]', "agentRawText", id="binary-no-data"
    ),
]


@pytest.mark.parametrize(("frame", "event"), UNDECODABLE)
async def test_an_undecodable_frame_is_a_protocol_error_and_the_session_goes_on(
    staging: StagingServer,
    make_session: SessionFactory,
    loop_errors: list[dict[str, Any]],
    frame: str,
    event: str,
) -> None:
    session = await connected_session(make_session)
    reported = session.expect("protocol_error", timeout=5)
    assert await staging.faults.raw_frame(frame) == 1
    # The turn after it is answered in full (a binary header with no attachments is only
    # found out by the next text frame, which must not be swallowed as an attachment).
    await still_talks(session)
    error = await reported
    assert error.data["event"] == event
    assert error.data["detail"]
    assert session.state == "connected"
    assert session.health().upstream == "live"
    assert reconnects(session) == 0  # a bad frame is not a transport loss
    assert unhandled(loop_errors) == []


@pytest.mark.parametrize("name", [In.CONVERSATION_ENDED, In.REMOVE_PEER])
async def test_an_undecodable_terminal_event_still_ends_the_session(
    staging: StagingServer,
    make_session: SessionFactory,
    loop_errors: list[dict[str, Any]],
    name: str,
) -> None:
    session = await connected_session(make_session)
    reported = session.expect("protocol_error", timeout=3)
    ended = session.expect("ended", timeout=5)
    await staging.faults.raw_frame(f'42["{name}",{{"n":{HUGE_INT}}}]')
    assert (await reported).data["event"] == name
    await ended
    assert session.state in ("ended", "failed")
    assert unhandled(loop_errors) == []


# -- defect 2: reserved names as ordinary events ----------------------------------------------
@pytest.mark.parametrize("name", ["disconnect", "connect", "connect_error"])
async def test_a_reserved_event_name_is_a_protocol_error_not_a_signal(
    staging: StagingServer,
    make_session: SessionFactory,
    loop_errors: list[dict[str, Any]],
    name: str,
) -> None:
    session = await connected_session(make_session)
    recovering: list[Event] = []
    session.on("reconnecting", recovering.append)
    reported = session.expect("protocol_error", timeout=3)
    await staging.faults.raw_frame(f'42["{name}","transport close"]')
    error = await reported
    assert error.data["event"] == name
    await still_talks(session)
    assert recovering == []
    assert reconnects(session) == 0
    assert session.state == "connected"
    assert unhandled(loop_errors) == []


CATCH_ALL_FRAMES = [
    pytest.param('42["*"]', id="no-arguments"),
    pytest.param('42["*",{"speechId":"s"}]', id="object-argument"),
    pytest.param('42["*","agentRawText",{"speechId":"s","content":"x"}]', id="named-argument"),
]


@pytest.mark.parametrize("frame", CATCH_ALL_FRAMES)
async def test_the_catch_all_name_is_refused_like_the_reserved_names(
    staging: StagingServer,
    make_session: SessionFactory,
    loop_errors: list[dict[str, Any]],
    frame: str,
) -> None:
    """``*`` is python-socketio's catch-all handler name: sent as an event it would call
    that handler without the event name (a TypeError, or the first argument taken as the
    name). It is refused as a protocol error naming ``*``, and nothing is dispatched."""
    session = await connected_session(make_session)
    seen: list[Event] = []
    session.on("*", seen.append)
    reported = session.expect("protocol_error", timeout=3)
    await staging.faults.raw_frame(frame)
    error = await reported
    assert error.data["event"] == "*"
    assert "reserved" in error.data["detail"], error.data
    before = [e.name for e in seen if e.name in ("agent_text", "protocol_error")]
    await still_talks(session)
    assert before == ["protocol_error"]  # nothing dispatched under another name
    assert reconnects(session) == 0 and session.state == "connected"
    assert unhandled(loop_errors) == []


async def test_the_catch_all_name_through_the_recovery_buffer_is_refused_once(
    staging: StagingServer, make_session: SessionFactory, loop_errors: list[dict[str, Any]]
) -> None:
    """Emitted by the server like any event (it carries a recovery offset): refused, and a
    socket recovery right after does not have it replayed (its offset was recorded)."""
    session = await connected_session(make_session)
    errors: list[Event] = []
    session.on("protocol_error", errors.append)
    reported = session.expect("protocol_error", timeout=3)
    await staging.faults.malformed("*", {"speechId": "s"})
    assert (await reported).data["event"] == "*"
    recovered = session.expect("reconnected", timeout=5)
    await staging.faults.drop_socket()
    assert (await recovered).data["recovered"] is True
    await still_talks(session)
    assert [e.data["event"] for e in errors] == ["*"]
    assert unhandled(loop_errors) == []


# -- defect 3: CONNECT_ERROR mid-session ------------------------------------------------------
async def test_a_connect_error_mid_session_is_a_transport_loss_that_recovers(
    staging: StagingServer, make_session: SessionFactory, loop_errors: list[dict[str, Any]]
) -> None:
    session = await connected_session(make_session)
    lost = session.expect("reconnecting", timeout=3)
    recovered = session.expect("reconnected", timeout=5)
    await staging.faults.raw_frame('44{"message":"namespace refused"}')
    assert (await lost).data["reason"] == "io server refused"
    assert (await recovered).data["tier"] == "socket"
    await still_talks(session)
    assert session.health().upstream == "live"
    assert unhandled(loop_errors) == []


async def test_a_connect_error_then_a_refused_token_fails_with_auth_failed(
    staging: StagingServer, make_session: SessionFactory, loop_errors: list[dict[str, Any]]
) -> None:
    session = await connected_session(make_session)
    sid = next(iter(staging.conversations))
    staging.sio.refuse_recovery(sid)  # the server forgot the session...
    staging.token = "rotated"  # ...and no longer accepts the token
    ended = session.expect("ended", timeout=5)
    await staging.faults.raw_frame('44{"message":"not authorized"}')
    assert (await ended).data["code"] == "auth_failed"
    assert session.state == "failed"
    assert session.health().upstream == "failed"
    with pytest.raises(AvatarError) as raised:
        await session.speak("hello?")
    assert raised.value.code in (ErrorCode.INVALID_STATE, ErrorCode.CLOSED)
    assert unhandled(loop_errors) == []


# -- defect 4: oversized messages -------------------------------------------------------------
async def test_an_oversized_message_is_reported_once_and_skipped_not_replayed(
    staging: StagingServer, make_session: SessionFactory, loop_errors: list[dict[str, Any]]
) -> None:
    session = await connected_session(make_session)
    errors: list[Event] = []
    session.on("protocol_error", errors.append)
    reported = session.expect("protocol_error", timeout=5)
    recovered = session.expect("reconnected", timeout=8)
    await staging.faults.oversized(5 * MiB)  # over the 4 MiB default
    error = await reported
    assert error.data["event"] == "<unknown>"  # refused unread: its name is unknown
    match = re.fullmatch(
        r"message of (\d+) bytes over max_message_size \((\d+)\)", error.data["detail"]
    )
    assert match is not None, error.data["detail"]
    assert int(match.group(1)) > 5 * MiB
    assert int(match.group(2)) == 4 * MiB
    # The server would replay the same message to a socket-tier recovery: rebuild instead.
    assert (await recovered).data["tier"] == "cold"
    await still_talks(session)
    assert session.stats()["reconnects"] == {"socket": 0, "media": 0, "cold": 1}
    assert len(errors) == 1
    assert unhandled(loop_errors) == []


async def test_max_message_size_is_what_the_websocket_enforces(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    small = await connected_session(make_session, config=FAST.with_(max_message_size=64 * 1024))
    reported = small.expect("protocol_error", timeout=3)
    await staging.faults.oversized(100 * 1024)
    assert "over max_message_size" in (await reported).data["detail"]
    await small.close()

    big = await connected_session(make_session, config=FAST.with_(max_message_size=8 * MiB))
    warned = big.expect("time_warning", timeout=5)
    await staging.faults.oversized(5 * MiB)
    assert (await warned).data["remaining"] == 60
    assert reconnects(big) == 0


async def test_an_oversized_message_replayed_to_a_socket_recovery_goes_cold_at_once(
    staging: StagingServer, make_session: SessionFactory, loop_errors: list[dict[str, Any]]
) -> None:
    """The message is waiting in the server's recovery buffer when the socket drops for
    another reason: the in-place recovery is handed it first and dies on it."""
    probing = FAST.with_(
        socket_probe_interval=0.5,
        socket_probe_timeout=0.3,
        # Long enough that an attempt waiting out its whole connect timeout would show.
        server_connect_timeout=5.0,
        reconnect_window=10.0,
    )
    session = await connected_session(make_session, config=probing)
    sid = staging.live_sids[0]
    errors: list[Event] = []
    session.on("protocol_error", errors.append)
    tiers: list[str] = []
    session.on("reconnecting", lambda e: tiers.append(e.data["tier"]))
    # The probe notices in about 0.8 s; the replay kills the first attempt at once, and
    # that attempt fails then (not after server_connect_timeout), so the next one is cold.
    recovered = session.expect("reconnected", timeout=4)

    assert staging.faults.silent_socket(server_timeout=0.0) == 1
    for _ in range(100):  # the server times the socket out at once and keeps the session
        if staging.sio.is_pending_recovery(sid):
            break
        await asyncio.sleep(0.01)
    assert staging.sio.is_pending_recovery(sid)
    await staging.faults.oversized(5 * MiB)  # buffered for the recovery, not sent

    assert (await recovered).data["tier"] == "cold"
    assert tiers[0] == "socket"  # the probe found the dead socket; its recovery met the message
    assert [e.data["detail"].split(" over ")[1] for e in errors] == [
        f"max_message_size ({4 * MiB})"
    ]
    await still_talks(session)
    assert session.stats()["reconnects"] == {"socket": 0, "media": 0, "cold": 1}
    assert unhandled(loop_errors) == []
