"""The connect sequence over loopback against the staging backend."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from avatar_sdk import AvatarError, AvatarSession, ErrorCode
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.socketio.csr import RecoveringAsyncClient

from .conftest import FAST, HANG_GUARD, SessionFactory, sdk_tasks, until


async def test_full_connect_sequence_walks_every_declared_state(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    states: list[str] = []
    session.on("state_changed", lambda e: states.append(e.data["state"]))
    await session.connect()
    assert session.state == "connected"
    assert states == [
        "connecting_socket",
        "connecting_joining",
        "connecting_stv_session",
        "connecting_agent",
        "connecting_ready",
        "connecting_approving",
        "connected",
    ]
    joins = staging.received_events("join")
    assert len(joins) == 1
    assert joins[0].payload["kaltura"]["ks"] == staging.token
    assert "threadId" not in joins[0].payload["kaltura"]
    # The greeting turn (started by approvedPermissions) carries the thread id.
    await session.wait_for("agent_turn_ended", timeout=2)
    assert [r.event for r in staging.received][:4] == [
        "join",
        "stvNewSession",
        "checkAvailability",
        "approvedPermissions",
    ]
    assert session.thread_id is not None
    assert session.thread_id == next(iter(staging.conversations.values())).thread_id


async def test_two_turn_conversation(staging: StagingServer, make_session: SessionFactory) -> None:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=2)
    staging.brain.reply("Paris is the capital of France.")
    texts: list[str] = []
    session.on(
        "agent_text",
        lambda e: texts.append(e.data["content"]) if e.data["type"] == "avatar" else None,
    )
    await session.speak("What is the capital of France?")
    await session.wait_for("agent_turn_ended", timeout=2)
    assert "".join(texts) == "Paris is the capital of France."
    sent = [r.payload for r in staging.received_events("onTextEntered")]
    assert sent == [
        {"text": "", "isFinal": False, "isSpeechStart": True},
        {"text": "What is the capital of France?", "isFinal": True},
    ]


@pytest.mark.parametrize(
    ("withheld", "code", "bound"),
    [
        ("onServerConnected", ErrorCode.CONNECT_TIMEOUT, FAST.server_connect_timeout),
        ("clientConfiguration", ErrorCode.JOIN_TIMEOUT, FAST.join_room_timeout),
        ("joinComplete", ErrorCode.JOIN_TIMEOUT, FAST.join_complete_timeout),
        ("stvNewSession", ErrorCode.CONNECT_TIMEOUT, FAST.overall_connect_timeout),
        ("showAgent", ErrorCode.AGENT_TIMEOUT, FAST.agent_timeout),
        ("askPermissions", ErrorCode.AGENT_TIMEOUT, FAST.agent_timeout),
    ],
)
async def test_withheld_handshake_step_fails_with_its_code_within_its_timeout(
    staging: StagingServer,
    make_session: SessionFactory,
    withheld: str,
    code: ErrorCode,
    bound: float,
) -> None:
    staging.faults.withhold(withheld)
    session = make_session()
    started = time.monotonic()
    with pytest.raises(AvatarError) as info:
        await session.connect()
    elapsed = time.monotonic() - started
    assert info.value.code is code
    assert session.state == "failed"
    assert elapsed < bound + 1.0
    assert await until(lambda: staging.live_sids == [], 2)  # the attempt's socket was closed
    assert sdk_tasks() == []


async def test_wrong_token_is_auth_failed_at_once_and_never_retried(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """The refusal itself ends connect(): one CONNECT, refused, and no retry of any kind.

    "At once" is asserted as behaviour: every timeout connect() could wait out is set far
    above the hang guard, so returning within the guard means the refusal was acted on;
    a retry, were one made, is cheap here (the capacity queue's backoff is 10 ms), so it
    would show as a second refused CONNECT, not as a slow test."""
    config = FAST.with_(
        server_connect_timeout=4 * HANG_GUARD,
        overall_connect_timeout=6 * HANG_GUARD,
        capacity_backoff=(0.01,),
        capacity_max_wait=1.0,
    )
    session = make_session(token="not-the-token", config=config)
    started = time.monotonic()
    with pytest.raises(AvatarError) as info:
        async with asyncio.timeout(HANG_GUARD):  # a hang fails here, not at pytest's timeout
            await session.connect()
    elapsed = time.monotonic() - started
    assert info.value.code is ErrorCode.AUTH_FAILED
    assert (staging.refused_connections, staging.connections) == (1, 0)  # one CONNECT, refused
    assert session.state == "failed"  # terminal: nothing left that could retry later
    assert session.health().upstream == "failed"
    assert session.health().category == "auth"
    assert sdk_tasks() == []
    assert elapsed < HANG_GUARD  # no timeout waited out (see the docstring)


async def test_server_never_answers_a_join_without_token(staging: StagingServer) -> None:
    """The real backend accepts the socket but ignores a join lacking kaltura.ks."""
    client = RecoveringAsyncClient()
    got: list[str] = []

    @client.on("*")
    async def _any(event: str, *args: object) -> None:
        got.append(event)

    await client.connect(staging.url, auth={"token": staging.token}, transports=["websocket"])
    await client.emit("join", {"room": "r1", "channel": "r1", "kaltura": {}})
    # The server has handled the join (it decides without awaiting anything); a marker it
    # emits now reaches us after any answer it could have given, on the same socket.
    assert await until(lambda: staging.received_events("join"), 2)
    conv = staging.conversations[staging.live_sids[0]]
    await conv.emit("testMarker", {})
    assert await until(lambda: "testMarker" in got, 2)
    assert got == ["onServerConnected", "testMarker"]
    assert not conv.joined
    await client.close_gracefully(1.0)


@pytest.mark.parametrize(
    ("fault", "code"),
    [("tier_exceeded", ErrorCode.TIER_EXCEEDED)],
)
async def test_fatal_join_verdicts_fail_connect(
    staging: StagingServer, make_session: SessionFactory, fault: str, code: ErrorCode
) -> None:
    getattr(staging.faults, fault)()
    session = make_session()
    with pytest.raises(AvatarError) as info:
        await session.connect()
    assert info.value.code is code
    assert not info.value.retryable
    assert session.state == "failed"


async def test_cancelled_connect_tears_down_within_close_timeout(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """A cancelled connect() tears down on close_timeout, not on the step it was waiting
    for (showAgent, withheld: it never comes) nor on that step's timeouts, set far above the
    hang guard here so that waiting any of them fails the test."""
    staging.faults.withhold("showAgent")
    config = FAST.with_(agent_timeout=6 * HANG_GUARD, overall_connect_timeout=8 * HANG_GUARD)
    session = make_session(config=config)
    waiting = session.expect(
        "state_changed", predicate=lambda e: e.data["state"] == "connecting_agent", timeout=2
    )
    task = asyncio.ensure_future(session.connect())
    await waiting
    assert session.state == "connecting_agent"
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(HANG_GUARD):  # a hang fails here, not at pytest's timeout
            await task
    assert time.monotonic() - started < HANG_GUARD < config.agent_timeout
    assert session.state == "ended"
    assert await until(lambda: staging.live_sids == [], 2)
    assert sdk_tasks() == []


async def test_close_during_connect_raises_closed(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.faults.withhold("joinComplete")
    session = make_session()
    joining = session.expect(
        "state_changed", predicate=lambda e: e.data["state"] == "connecting_joining", timeout=2
    )
    task = asyncio.ensure_future(session.connect())
    await joining
    assert await until(lambda: staging.received_events("join"), 2)  # waiting for joinComplete
    await session.close()
    with pytest.raises(AvatarError) as info:
        await task
    assert info.value.code is ErrorCode.CLOSED
    assert session.state == "ended"


async def test_close_leaves_no_task_and_no_socket(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    await session.speak("hello")
    await session.close()
    assert await until(lambda: staging.live_sids == [], 2)
    assert sdk_tasks() == []
    # A graceful disconnect: the server keeps nothing for recovery.
    assert staging.sio.sessions_by_sid == {}
    assert session.state == "ended"


async def test_context_manager(staging: StagingServer) -> None:
    async with AvatarSession(
        staging.url, staging.token, media=False, allow_insecure_transport=True, config=FAST
    ) as session:
        assert session.state == "connected"
    assert session.state == "ended"


async def test_a_refused_connection_says_so_with_host_and_port(
    make_session: SessionFactory,
) -> None:
    """Issue 10: "connection refused" and "host not found" read as what they are, never
    "the connection was lost" for a connection that never opened."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    session = make_session(url=f"http://127.0.0.1:{port}")
    with pytest.raises(AvatarError) as refused:
        await session.connect()
    assert refused.value.code is ErrorCode.UNREACHABLE
    assert f"connection refused by 127.0.0.1:{port}" in str(refused.value)
    assert "lost" not in str(refused.value)


async def test_a_host_that_does_not_resolve_says_host_not_found(
    make_session: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_such_host(*args: object, **kwargs: object) -> object:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)  # no DNS traffic from a test
    session = make_session(url="http://no-such-host.invalid:8765")
    with pytest.raises(AvatarError) as refused:
        await session.connect()
    assert refused.value.code is ErrorCode.UNREACHABLE
    assert "host not found: no-such-host.invalid" in str(refused.value)
