from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.testing import StagingServer

#: Shrunk timeouts: behaviour is the same, tests finish fast.
FAST = SessionConfig(
    overall_connect_timeout=3.0,
    server_connect_timeout=1.0,
    join_room_timeout=0.5,
    join_complete_timeout=0.8,
    agent_timeout=0.5,
    reconnect_window=2.0,
    close_timeout=1.0,
)

SessionFactory = Callable[..., AvatarSession]


@pytest_asyncio.fixture
async def make_session(staging: StagingServer) -> AsyncIterator[SessionFactory]:
    """Build control-plane sessions against ``staging``; all are closed after the test."""
    made: list[AvatarSession] = []

    def factory(**kwargs: Any) -> AvatarSession:
        kwargs.setdefault("media", False)
        kwargs.setdefault("allow_insecure_transport", True)
        kwargs.setdefault("config", FAST)
        session = AvatarSession(
            kwargs.pop("url", staging.url), kwargs.pop("token", staging.token), **kwargs
        )
        made.append(session)
        return session

    yield factory
    for session in made:
        await session.close()


def sdk_tasks() -> list[asyncio.Task[Any]]:
    """Tasks still alive that belong to the SDK or to python-socketio/engineio."""
    current = asyncio.current_task()
    alive = []
    for task in asyncio.all_tasks():
        if task is current or task.done():
            continue
        text = repr(task.get_coro())
        if any(k in text for k in ("avatar_sdk", "socketio", "engineio")) and "testing" not in text:
            alive.append(task)
    return alive
