"""The WHEP private-host guard over real sockets (issue 12, defect 7).

A WHEP URL comes from the server, so the SDK must not let it steer a request to the local
machine or network: every spelling of a loopback address, a name that resolves to one, and a
redirect are refused before any byte leaves. Each test puts a raw TCP listener on 127.0.0.1
and proves it saw no connection: after the refusal the test connects to it itself and waits
for that connection to be accepted; the listener accepts in arrival order, so a connection
made by the SDK would have been accepted first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from avatar_sdk import AvatarError, ErrorCode, SessionConfig
from avatar_sdk.clock import SYSTEM_CLOCK
from avatar_sdk.transport.net.hostguard import HostGuard
from avatar_sdk.transport.rtc.asr import UplinkTrack
from avatar_sdk.transport.rtc.media import MediaLanes
from avatar_sdk.wire.inbound import StvNewSession


class Listener:
    """A TCP listener on 127.0.0.1 that records who connected and never answers."""

    def __init__(self) -> None:
        self.peers: list[tuple[str, int]] = []
        self._accepted = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _on_client(self, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        async with self._accepted:
            self.peers.append(writer.get_extra_info("peername")[:2])
            self._accepted.notify_all()

    async def others(self) -> list[tuple[str, int]]:
        """Every connection accepted before one the test makes now (a barrier, no sleep)."""
        _, writer = await asyncio.open_connection("127.0.0.1", self.port)
        mine = writer.get_extra_info("sockname")[:2]
        async with self._accepted:
            await asyncio.wait_for(self._accepted.wait_for(lambda: mine in self.peers), 5)
        writer.close()
        return [peer for peer in self.peers if peer != mine]

    async def stop(self) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest_asyncio.fixture
async def listener() -> AsyncIterator[Listener]:
    lst = Listener()
    await lst.start()
    yield lst
    await lst.stop()


def _lanes(*, allow_private: bool, guard: HostGuard | None = None) -> MediaLanes:
    return MediaLanes(
        config=SessionConfig(),
        uplink_track=UplinkTrack(None),
        outputs={},
        video=False,
        allow_private=allow_private,
        clock=SYSTEM_CLOCK,
        host_guard=guard,
    )


async def _subscribe(lanes: MediaLanes, url: str, timeout: float = 2.0) -> AvatarError:
    stv = StvNewSession(session_id="s1", status=None, webrtc_url=url)
    try:
        with pytest.raises(AvatarError) as info:
            await lanes.start_stv(stv, lambda: timeout)
    finally:
        await lanes.close(1.0)
    return info.value


@pytest.mark.parametrize("host", ["0x7f000001", "127.1", "2130706433", "0177.0.0.1"])
async def test_numeric_spellings_of_loopback_are_refused_before_connecting(
    listener: Listener, host: str
) -> None:
    url = f"https://{host}:{listener.port}/rtc/v1/whep/?app=app&stream=s1"
    error = await _subscribe(_lanes(allow_private=False), url)
    assert error.code is ErrorCode.INSECURE_TRANSPORT
    assert f"WHEP host {host} is 127.0.0.1, a loopback address" in str(error)
    assert "allow_insecure_transport=True" in str(error)
    assert "Plain http" not in str(error)
    assert await listener.others() == []


async def test_a_name_that_resolves_to_loopback_is_refused(listener: Listener) -> None:
    lookups: list[str] = []

    async def lookup(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]

    url = f"https://media.example.test:{listener.port}/rtc/v1/whep/?app=app&stream=s1"
    error = await _subscribe(_lanes(allow_private=False, guard=HostGuard(lookup=lookup)), url)
    assert error.code is ErrorCode.INSECURE_TRANSPORT
    assert "WHEP host media.example.test resolves to 127.0.0.1, a loopback address" in str(error)
    assert lookups == ["media.example.test"]
    assert await listener.others() == []


async def test_the_connection_is_pinned_to_the_address_that_was_checked(
    listener: Listener,
) -> None:
    """DNS rebinding: the first answer is public, every later one loopback. The request goes
    to the checked (public, here unreachable) address; DNS is not asked again."""
    lookups: list[str] = []

    async def lookup(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["192.88.99.7"] if len(lookups) == 1 else ["127.0.0.1"]

    url = f"http://rebind.example.test:{listener.port}/rtc/v1/whep/?app=app&stream=s1"
    error = await _subscribe(
        _lanes(allow_private=False, guard=HostGuard(lookup=lookup)), url, timeout=0.5
    )
    assert error.code in (ErrorCode.MEDIA_FAILED, ErrorCode.CONNECT_TIMEOUT)
    assert lookups == ["rebind.example.test"]
    assert await listener.others() == []


async def test_a_redirect_from_the_whep_endpoint_is_not_followed(listener: Listener) -> None:
    """Even against a local backend (the staging setup): a 307 is an error, not a hop."""
    target = f"http://127.0.0.1:{listener.port}/elsewhere"

    async def redirect(_: web.Request) -> web.Response:
        return web.Response(status=307, headers={"Location": target})

    app = web.Application()
    app.router.add_post("/rtc/v1/whep/", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/rtc/v1/whep/?app=app&stream=s1"
        error = await _subscribe(_lanes(allow_private=True), url)
    finally:
        await runner.cleanup()
    assert error.code is ErrorCode.MEDIA_FAILED
    assert "WHEP 307 redirect to 127.0.0.1 not followed" in str(error)
    assert await listener.others() == []
