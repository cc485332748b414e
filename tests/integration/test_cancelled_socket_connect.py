"""A socket connect cancelled just as the server's CONNECT reply arrives is cancelled.

python-socketio's ``AsyncClient.connect`` waits for the CONNECT reply with
``asyncio.wait_for``, which on Python 3.11 swallows a cancellation that lands in the loop
iteration where the reply resolves the wait (CPython gh-86296; see
``test_cancel_swallowed.py`` for the SDK's own waits): ``connect()`` then returns a
connected socket to a task that was cancelled. Under load a close lands there by chance:
the socket tier's attempt went on to probe and re-assert ("socket-recovery ... did not stop
within 2s of its cancellation"), and a cold attempt went on with a socket nobody would
close (its staging sid still live long after ``close()``, until the join's own timeout).

Deterministic: the cancel is issued from the ``connect`` handler, ``hops`` callbacks after
the reply is handled (a sweep over the iteration that matters); the channel must raise
``CancelledError`` (or, cancelled too late, have finished), and its close leave no server
session live.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.socketio.control import ControlChannel
from avatar_sdk.transport.socketio.csr import RecoveringAsyncClient

from .conftest import FAST, HANG_GUARD, sdk_tasks, until


def channel_for(staging: StagingServer) -> ControlChannel:
    return ControlChannel(
        staging.url,
        staging.token,
        sticky_id="cancelled-connect",
        partner_id=None,
        on_event=lambda event, args: None,
        on_disconnect=lambda channel, reason: None,
        on_protocol_error=lambda event, detail, name_only: None,
        now=time.monotonic,
    )


def cancel_on_connect_reply(
    monkeypatch: pytest.MonkeyPatch, target: list[asyncio.Task[Any]], hops: int
) -> list[bool]:
    """When the client handles its CONNECT reply, cancel ``target[0]`` ``hops`` callbacks
    later (0: in the very iteration the reply resolves the connect's wait); what each
    ``cancel()`` returned (False: the task had finished, a cancel too late to count)."""
    cancelled: list[bool] = []
    real = RecoveringAsyncClient._trigger_event

    async def trigger(self: RecoveringAsyncClient, event: str, *args: Any, **kwargs: Any) -> Any:
        if event == "connect" and target:
            loop = asyncio.get_running_loop()

            def hop(left: int) -> None:
                if left == 0:
                    cancelled.append(target[0].cancel())
                else:
                    loop.call_soon(hop, left - 1)

            loop.call_soon(hop, hops)
        return await real(self, event, *args, **kwargs)

    monkeypatch.setattr(RecoveringAsyncClient, "_trigger_event", trigger)
    return cancelled


async def outcome(task: asyncio.Task[Any], cancelled: list[bool]) -> None:
    """A task cancelled while it ran raises ``CancelledError``; one that had finished
    before its cancel (or before the cancel was even issued: on 3.12+ ``wait_for`` runs in
    the caller's task, so the connect ends in fewer loop turns) keeps its result."""
    try:
        await task
    except asyncio.CancelledError:
        assert cancelled == [True]
        return
    assert True not in cancelled, "cancelled while running, yet it returned a result"


@pytest.mark.parametrize("hops", [0, 1, 2, 3])
async def test_an_open_cancelled_as_its_reply_arrives_raises_and_leaves_no_socket(
    staging: StagingServer, monkeypatch: pytest.MonkeyPatch, hops: int
) -> None:
    channel = channel_for(staging)
    target: list[asyncio.Task[Any]] = []
    cancelled = cancel_on_connect_reply(monkeypatch, target, hops)
    opening = asyncio.ensure_future(channel.open(5.0))
    target.append(opening)
    try:
        await outcome(opening, cancelled)  # today: returned a connected socket
    finally:
        await channel.close(1.0)  # what the link does with its channel at the end
    assert await until(lambda: staging.live_sids == [], 2), staging.live_sids
    assert await until(lambda: sdk_tasks() == [], 2), sdk_tasks()


@pytest.mark.parametrize("hops", [0, 1, 2, 3])
async def test_a_reconnect_cancelled_as_its_reply_arrives_raises(
    staging: StagingServer, monkeypatch: pytest.MonkeyPatch, hops: int
) -> None:
    """The socket tier's reconnect (connection-state recovery on the same client)."""
    channel = channel_for(staging)
    try:
        await channel.open(5.0)
        target: list[asyncio.Task[Any]] = []
        cancelled = cancel_on_connect_reply(monkeypatch, target, hops)
        await staging.faults.drop_socket()
        assert await until(lambda: not channel.connected, 2)
        reconnecting = asyncio.ensure_future(channel.reconnect(5.0))
        target.append(reconnecting)
        await outcome(reconnecting, cancelled)  # today: returned a recovered socket
    finally:
        await channel.close(1.0)
    assert await until(lambda: staging.live_sids == [], 2), staging.live_sids
    assert await until(lambda: sdk_tasks() == [], 2), sdk_tasks()


def close_on_connect_reply(
    monkeypatch: pytest.MonkeyPatch, session: AvatarSession, closes: list[asyncio.Task[None]]
) -> None:
    """The session's ``close()`` begun in the iteration where a (re)connect's CONNECT reply
    is handled: its teardown cancels the recovery there."""
    real = RecoveringAsyncClient._trigger_event

    async def trigger(self: RecoveringAsyncClient, event: str, *args: Any, **kwargs: Any) -> Any:
        if event == "connect" and not closes and session.state != "connected":
            closes.append(asyncio.ensure_future(session.close()))
            await asyncio.sleep(0)  # close() cancels the recovery now, as the reply lands
        return await real(self, event, *args, **kwargs)

    monkeypatch.setattr(RecoveringAsyncClient, "_trigger_event", trigger)


async def closed_cleanly(
    staging: StagingServer, closes: list[asyncio.Task[None]], caplog: pytest.LogCaptureFixture
) -> None:
    assert await until(lambda: bool(closes), 5)
    await closes[0]
    stuck = [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()]
    assert stuck == []  # today: the recovery, cancelled, went on
    assert sdk_tasks() == [], sdk_tasks()
    assert await until(lambda: staging.live_sids == [], 2), (
        staging.resources_by_client(),
        staging.disconnects,
    )


async def test_a_close_as_the_socket_tier_reconnects_stops_it(
    staging: StagingServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="avatar_sdk.session.supervisor")
    session = AvatarSession(
        staging.url, staging.token, media=False, allow_insecure_transport=True, config=FAST
    )
    await session.connect()
    closes: list[asyncio.Task[None]] = []
    close_on_connect_reply(monkeypatch, session, closes)
    await staging.faults.drop_socket()
    await closed_cleanly(staging, closes, caplog)


async def test_a_close_as_a_cold_attempt_connects_leaves_no_sid(
    staging: StagingServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="avatar_sdk.session.supervisor")
    config = FAST.with_(
        join_complete_timeout=6 * HANG_GUARD, overall_connect_timeout=8 * HANG_GUARD
    )
    session = AvatarSession(
        staging.url, staging.token, media=False, allow_insecure_transport=True, config=config
    )
    await session.connect()
    closes: list[asyncio.Task[None]] = []
    close_on_connect_reply(monkeypatch, session, closes)
    staging.faults.withhold("joinComplete")  # a cold attempt that went on would hang here
    await staging.faults.drop_socket(recovery=False)
    await closed_cleanly(staging, closes, caplog)
