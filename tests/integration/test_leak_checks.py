"""The suite's leak helpers can fail: each is shown a planted leak and must report it.

Why: ``sdk_tasks()`` once matched package names in ``repr(task.get_coro())``, which holds only
``<coroutine object Qualname at 0x..>``; it never matched, and fourteen "no task left"
assertions passed whatever the SDK left running. ``leftover_media_tasks()`` had the same flaw.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest_asyncio
from aiortc import RTCPeerConnection
from tenacity import AsyncRetrying, stop_after_attempt

from avatar_sdk import AvatarSession
from avatar_sdk.clock import SYSTEM_CLOCK
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.leaks import describe_task

from .conftest import SessionFactory, sdk_tasks, until
from .test_staging_media import leftover_media_tasks


@pytest_asyncio.fixture
async def planted() -> AsyncIterator[list[asyncio.Task[Any]]]:
    """Tasks a test plants on purpose: cancelled and awaited after it, whatever it found."""
    tasks: list[asyncio.Task[Any]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def names(tasks: list[asyncio.Task[Any]]) -> set[str]:
    return {t.get_name() for t in tasks}


async def test_sdk_tasks_reports_a_task_running_sdk_code(
    planted: list[asyncio.Task[Any]],
) -> None:
    assert sdk_tasks() == []
    planted.append(asyncio.ensure_future(SYSTEM_CLOCK.sleep(60)))
    planted[-1].set_name("planted-sdk-sleep")
    await asyncio.sleep(0)  # started: suspended inside avatar_sdk/clock.py
    assert names(sdk_tasks()) == {"planted-sdk-sleep"}


async def test_sdk_tasks_reports_sdk_code_under_a_wrapper(
    planted: list[asyncio.Task[Any]],
) -> None:
    """The top coroutine is the test's, tenacity's or functools'; the SDK's code runs below."""

    async def wrapper() -> None:
        await SYSTEM_CLOCK.sleep(60)

    async def retried() -> None:
        async for attempt in AsyncRetrying(stop=stop_after_attempt(1)):
            with attempt:
                await SYSTEM_CLOCK.sleep(60)

    @functools.wraps(SYSTEM_CLOCK.sleep)
    async def decorated(seconds: float) -> None:
        await SYSTEM_CLOCK.sleep(seconds)

    makers: dict[str, Callable[[], Awaitable[None]]] = {
        "wrapped": wrapper,
        "tenacity": retried,
        "functools": lambda: decorated(60),
    }
    for name, make in makers.items():
        planted.append(asyncio.ensure_future(make()))
        planted[-1].set_name(name)
    await asyncio.sleep(0)
    assert names(sdk_tasks()) == set(makers), [describe_task(t) for t in sdk_tasks()]


async def test_sdk_tasks_reports_a_session_left_open_and_nothing_once_closed(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """A connected session that is never closed leaves its supervisor's tasks and the
    Engine.IO client's loops running; the staging backend's own tasks never count."""
    session = make_session()
    await session.connect()
    leaked = [describe_task(t) for t in sdk_tasks()]
    assert any("_read_loop_websocket" in text for text in leaked), leaked  # engineio client
    assert any("watchdog" in text for text in leaked), leaked  # the session's supervisor
    assert not any("_service_task" in text or "_send_ping" in text for text in leaked), leaked
    await session.close()
    assert sdk_tasks() == []


async def test_sdk_tasks_reports_the_peers_tasks_of_a_media_session_left_open(
    staging: StagingServer,
) -> None:
    session = AvatarSession(staging.url, staging.token, allow_insecure_transport=True)
    try:
        await session.connect()
        leaked = [describe_task(t) for t in sdk_tasks()]
        assert any("_run_rtp" in text for text in leaked), leaked  # aiortc, started by the SDK
        assert any("query_consent" in text for text in leaked), leaked  # aioice
    finally:
        await session.close()
    assert await until(lambda: staging.media.open_peer_count() == 0, 3)
    assert sdk_tasks() == [], [describe_task(t) for t in sdk_tasks()]


async def test_leftover_media_tasks_reports_a_peer_left_open() -> None:
    """Two aiortc peers connected to each other over loopback: their ICE, DTLS and RTP
    tasks are reported until both are closed."""
    offerer, answerer = RTCPeerConnection(), RTCPeerConnection()
    try:
        offerer.createDataChannel("planted")
        await offerer.setLocalDescription(await offerer.createOffer())
        await answerer.setRemoteDescription(offerer.localDescription)
        await answerer.setLocalDescription(await answerer.createAnswer())
        await offerer.setRemoteDescription(answerer.localDescription)
        assert await until(lambda: offerer.connectionState == "connected", 10)
        leaked = [describe_task(t) for t in leftover_media_tasks()]
        assert any("query_consent" in text for text in leaked), leaked
        assert any("RTCDtlsTransport" in text for text in leaked), leaked
    finally:
        await offerer.close()
        await answerer.close()
    assert await until(lambda: leftover_media_tasks() == [], 3), leftover_media_tasks()
