"""Every close releases every server resource, read from the backend's resource ledger
(``StagingServer.live_resources()``), at the awaits where a close can land mid-request.

``faults.whep_delay`` answers WHEP POSTs late with their resource already created, so a
close lands while a POST is in flight; each test sweeps loop-turn offsets from the moment
the server has the POST, so the close lands at several points of the client's await."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from avatar_sdk import AvatarError, AvatarSession, RetryPolicy
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.leaks import settle_server
from avatar_sdk.transport.rtc import asr as asr_module

from .conftest import FAST, sdk_tasks, until

MEDIA = FAST.with_(
    overall_connect_timeout=10.0, asr_timeout=5.0, media_recovery_timeout=5.0, close_timeout=3.0
)

#: Loop turns between the server holding the POST and the close.
OFFSETS = (0, 1, 3, 10, 40)

#: How late the WHEP POSTs are answered (s): long enough for every offset to land inside.
DELAY = 0.4


def media_session(staging: StagingServer, **config: object) -> AvatarSession:
    return AvatarSession(
        staging.url,
        staging.token,
        allow_insecure_transport=True,
        config=MEDIA.with_(**config),
    )


async def turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def post_in_flight(staging: StagingServer, posts_before: int) -> None:
    """Until the server holds a new WHEP POST with its resource created (delayed answer)."""
    assert await until(
        lambda: staging.media.whep_posts > posts_before and staging.live_resources()["whep"], 5
    )


async def assert_released(staging: StagingServer) -> None:
    assert await settle_server(staging, 2.0) == {}, staging.resources_by_client()
    assert await until(lambda: sdk_tasks() == [], 2), sdk_tasks()


@pytest.mark.parametrize("offset", OFFSETS)
async def test_a_close_during_the_connects_whep_post_deletes_its_resource(
    staging: StagingServer, offset: int
) -> None:
    staging.faults.whep_delay(DELAY)
    session = media_session(staging)
    connecting = asyncio.ensure_future(session.connect())
    await post_in_flight(staging, 0)
    await turns(offset)
    await session.close()
    with pytest.raises(AvatarError):
        await connecting
    assert session.state == "ended"
    await assert_released(staging)


@pytest.mark.parametrize("offset", OFFSETS)
async def test_a_close_during_a_whep_resubscribe_deletes_its_resource(
    staging: StagingServer, offset: int
) -> None:
    session = media_session(staging)
    await session.connect()
    posts = staging.media.whep_posts
    staging.faults.whep_delay(DELAY)
    await staging.faults.ice_failure("stv", mode="close")
    await post_in_flight(staging, posts)
    await turns(offset)
    await session.close()
    await assert_released(staging)


@pytest.mark.parametrize("offset", OFFSETS)
async def test_a_close_during_a_cold_attempts_whep_post_deletes_its_resource(
    staging: StagingServer, offset: int
) -> None:
    session = media_session(staging, cold_reconnect=RetryPolicy(max_attempts=3, base=0.05))
    await session.connect()
    posts = staging.media.whep_posts
    staging.faults.whep_delay(DELAY)
    await staging.faults.drop_socket(recovery=False)
    await post_in_flight(staging, posts)
    await turns(offset)
    await session.close()
    await assert_released(staging)


async def test_a_whep_post_slower_than_half_the_close_budget_is_still_deleted(
    staging: StagingServer,
) -> None:
    """The close lets an in-flight POST take most of ``close_timeout`` (it used to cancel
    it at half, and the resource the server made for it stayed)."""
    staging.faults.whep_delay(0.7)
    session = media_session(staging, close_timeout=1.0)
    connecting = asyncio.ensure_future(session.connect())
    await post_in_flight(staging, 0)
    await session.close()
    with pytest.raises(AvatarError):
        await connecting
    await assert_released(staging)


@pytest.mark.staging_leftovers("a POST slower than the whole close budget keeps its viewer")
async def test_a_whep_post_slower_than_the_close_budget_is_cancelled_and_said(
    staging: StagingServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``close()`` stays bounded: a POST still unanswered when most of ``close_timeout`` is
    spent is cancelled, and a warning says what the server may still hold."""
    staging.faults.whep_delay(3.0)
    session = media_session(staging, close_timeout=0.5)
    connecting = asyncio.ensure_future(session.connect())
    await post_in_flight(staging, 0)
    with caplog.at_level("WARNING", logger="avatar_sdk"):
        await asyncio.wait_for(session.close(), 2.0)
    with pytest.raises(AvatarError):
        await connecting
    assert "WHEP POST unanswered" in caplog.text
    # The bound has its price, said above and seen here: the server made a viewer for it.
    assert await until(lambda: staging.live_resources()["whep"] == 1, 5)


async def test_a_close_while_the_resubscribe_opens_the_old_viewers_delete_still_deletes_it(
    staging: StagingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A WHEP re-subscribe first DELETEs the old viewer; a close() that lands while that
    DELETE's connection is being opened (the request not sent yet) cancels the recovery.

    The interleaving is planted, not raced: the DELETE's ``connector.connect`` starts the
    close and holds until the close is under way (or cuts the DELETE off, as a cancel landing
    in ``sock_connect`` does), then connects for real. It failed with ``whep=1`` held at the
    server (and the old peer's close skipped) when the downlink's close ran in the
    recovery's task, cut off by the cancel, with nobody left owning the old downlink."""
    session = media_session(staging)
    await session.connect()
    real_connect = aiohttp.BaseConnector.connect
    closing: list[asyncio.Task[None]] = []

    async def connect(self: aiohttp.BaseConnector, req: Any, *args: Any, **kwargs: Any) -> Any:
        if req.method == "DELETE" and not closing:
            closing.append(asyncio.ensure_future(session.close()))
            assert await until(lambda: session.state in ("disconnecting", "ended"), 5)
        return await real_connect(self, req, *args, **kwargs)

    monkeypatch.setattr(aiohttp.BaseConnector, "connect", connect)
    await staging.faults.ice_failure("stv", mode="close")
    assert await until(lambda: bool(closing), 5)
    await closing[0]
    assert session.state == "ended"
    await assert_released(staging)


async def test_a_close_while_an_uplink_renegotiation_closes_the_old_peer_still_closes_it(
    staging: StagingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The uplink's counterpart: an ASR renegotiation first closes the old uplink; a close()
    that lands while it does cancels the recovery. Planted as above: the old uplink's peer
    close starts the session's close and holds until it is under way, so the cancel lands
    there. It failed with the old peer left open (and the uplink marked closed, so nobody
    closed it again) when the uplink's close ran in the recovery's task."""
    session = media_session(staging)
    await session.connect()
    real_close_peer = asr_module.close_peer
    closing: list[asyncio.Task[None]] = []
    old_peers: list[Any] = []

    async def close_peer(pc: Any, timeout: float) -> None:
        if not closing and session.state == "recovering_media":
            old_peers.append(pc)
            closing.append(asyncio.ensure_future(session.close()))
            assert await until(lambda: session.state in ("disconnecting", "ended"), 5)
        await real_close_peer(pc, timeout)

    monkeypatch.setattr(asr_module, "close_peer", close_peer)
    await staging.faults.ice_failure("asr", mode="blackhole")
    assert await until(lambda: bool(closing), 10)
    await closing[0]
    assert session.state == "ended"
    assert [pc.connectionState for pc in old_peers] == ["closed"]
    await assert_released(staging)
