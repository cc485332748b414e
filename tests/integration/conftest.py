from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest_asyncio

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.leaks import (
    LeakCheck,
    sdk_tasks,  # noqa: F401 (re-exported: tests import it here)
)
from avatar_sdk.transport.liveness.channel_down import ChannelDown
from avatar_sdk.transport.rtc.media import MediaLanes
from avatar_sdk.transport.rtc.stv import StvDownlink

from ..conftest import until

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

#: Wall-clock bound (s) of a wait that must end on an answer or on a short bound of its own
#: (close_timeout, a caller's timeout), not on a longer wait it should not make: a test sets
#: every such longer wait (a hung server step, a step timeout, a reconnect window) far above
#: it. A hang guard only, far above what a loaded machine adds; never a speed claim (speed
#: is measured by ``make bench``).
HANG_GUARD = 5.0

SessionFactory = Callable[..., AvatarSession]


@pytest_asyncio.fixture
async def leak_check() -> AsyncIterator[LeakCheck]:
    """A :class:`LeakCheck` taken before the test; after it, nothing it counts may be left
    (tasks, sockets, peers, file descriptors) once 2 s have passed."""
    check = LeakCheck()
    yield check
    leaks = await check.settle(2.0)
    assert not leaks, leaks


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


@dataclass(frozen=True)
class Verdict:
    """One judgement of the media watchdog: how long it had been watching the channel it
    asked about, and what it found dead (empty: all well)."""

    watched_for: float
    down: dict[str, ChannelDown]


def spy_on_media_watchdog(lanes: MediaLanes) -> list[Verdict]:
    """Record every judgement the session's media watchdog makes of ``lanes`` from now on
    (the real ``down_channels`` still answers). Lets a test wait for the positive fact "the
    watchdog looked at healthy media for N seconds" instead of sleeping N seconds and
    checking that no recovery started."""
    verdicts: list[Verdict] = []
    judge = lanes.down_channels

    def spy(now: float, stall: float, since: float | None = None) -> dict[str, ChannelDown]:
        down = judge(now, stall, since)
        watched = now - since if since is not None else 0.0
        verdicts.append(Verdict(watched, dict(down)))
        return down

    lanes.down_channels = spy  # type: ignore[method-assign]
    return verdicts


async def connected_session(
    staging: StagingServer, config: SessionConfig, **kwargs: Any
) -> AvatarSession:
    """A media session against ``staging``, connected (the caller closes it)."""
    session = AvatarSession(
        staging.url, staging.token, allow_insecure_transport=True, config=config, **kwargs
    )
    await session.connect()
    return session


def current_downlink(session: AvatarSession) -> StvDownlink:
    """The session's WHEP downlink of the moment (a re-subscribe replaces it)."""
    lanes = session.media
    assert lanes is not None and lanes.stv is not None
    return lanes.stv


async def healthy_for_three_stall_windows(lanes: MediaLanes, stall: float) -> None:
    """Wait until the media watchdog has judged ``lanes`` for three ``stall`` windows, and
    check it found nothing down meanwhile (a positive fact, not a sleep)."""
    verdicts = spy_on_media_watchdog(lanes)
    assert await until(lambda: any(v.watched_for >= 3 * stall for v in verdicts), 10)
    assert [v.down for v in verdicts if v.down] == []


async def dead_downlink_found_in_its_bound(
    session: AvatarSession, staging: StagingServer, stall: float
) -> None:
    """Stall the downlink's media for good: the session must start a media recovery of the
    STV channel within ``stall`` plus a watchdog tick of slack, for the silence."""
    recovering = session.expect(
        "media_recovering", predicate=lambda e: e.data["channel"] == "stv", timeout=10
    )
    await staging.faults.media_stall("stv", seconds=None)
    stalled = time.monotonic()
    event = await recovering
    assert time.monotonic() - stalled < stall + 1.0
    assert str(event.data["reason"]).startswith("no media for")
