"""Capacity: queue while the backend has no agent, then join on a fresh socket."""

from __future__ import annotations

import asyncio

import pytest

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.testing import StagingServer

from .conftest import FAST, SessionFactory, sdk_tasks, until

QUICK = FAST.with_(capacity_backoff=(0.2, 0.3), capacity_max_wait=5.0)


async def test_no_capacity_queues_then_connects_when_an_agent_frees_up(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.faults.capacity_full(0.5)
    session = make_session(config=QUICK)
    queued: list[dict[str, object]] = []
    states: list[str] = []
    session.on("queued", lambda e: queued.append(e.data))
    session.on("state_changed", lambda e: states.append(e.data["state"]))
    await asyncio.wait_for(session.connect(), 10)
    assert session.state == "connected"
    assert queued and queued[0]["attempt"] == 1
    assert 0.17 <= float(queued[0]["retry_in"]) <= 0.23  # type: ignore[arg-type]
    assert "queued" in states
    assert states[states.index("queued") + 1] == "connecting_socket"
    # Every attempt used a fresh socket; the refused ones were closed by the server.
    assert len(staging.received_events("join")) == len(queued) + 1
    assert len(staging.live_sids) == 1


async def test_capacity_wait_is_bounded(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.faults.capacity_full(60)
    session = make_session(config=QUICK.with_(capacity_max_wait=0.6))
    with pytest.raises(AvatarError) as info:
        await asyncio.wait_for(session.connect(), 10)
    assert info.value.code is ErrorCode.CAPACITY_UNAVAILABLE
    assert session.state == "failed"
    assert session.health().category == "capacity"
    assert await until(lambda: staging.live_sids == [], 2)  # every attempt's socket closed
    assert sdk_tasks() == []


async def test_close_while_queued_ends_promptly(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.faults.capacity_full(60)
    session = make_session(config=QUICK.with_(capacity_backoff=(30.0,), capacity_max_wait=100))
    task = asyncio.ensure_future(session.connect())
    await session.wait_for("queued", timeout=5)
    assert session.health().upstream == "backoff"
    await session.close()
    with pytest.raises(AvatarError) as info:
        await task
    assert info.value.code is ErrorCode.CLOSED
    assert session.state == "ended"
