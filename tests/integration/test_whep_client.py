"""The WHEP client against an HTTP endpoint scripted per test (loopback aiohttp)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from aiortc import RTCConfiguration

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.clock import SYSTEM_CLOCK
from avatar_sdk.transport.rtc.stv import FanoutTrack, StvDownlink


class Endpoint:
    def __init__(self) -> None:
        self.status = 201
        self.location: str | None = "/rtc/v1/whep/resource/abc"
        self.delay = 0.0
        self.deletes: list[str] = []
        self.url = ""

    async def post(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.delay)  # the scenario: a slow endpoint, when a test asks
        headers = {"Location": self.location} if self.location else {}
        # Not a valid answer, on purpose: only the HTTP handling is under test here.
        return web.Response(status=self.status, text="v=0\r\n", headers=headers)

    async def delete(self, request: web.Request) -> web.Response:
        self.deletes.append(request.path)
        return web.Response(status=200)


@pytest_asyncio.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    ep = Endpoint()
    app = web.Application()
    app.router.add_post("/rtc/v1/whep/", ep.post)
    app.router.add_delete("/rtc/v1/whep/resource/{rid}", ep.delete)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    ep.url = f"http://127.0.0.1:{runner.addresses[0][1]}/rtc/v1/whep/?app=app&stream=s1"
    yield ep
    await runner.cleanup()


async def _subscribe(
    ep: Endpoint, timeout: float = 2.0
) -> tuple[StvDownlink, aiohttp.ClientSession]:
    http = aiohttp.ClientSession()
    link = StvDownlink(
        http=http,
        configuration=RTCConfiguration(),
        allow_private=True,
        video=True,
        outputs={"video": FanoutTrack("video"), "audio": FanoutTrack("audio")},
        clock=SYSTEM_CLOCK,
    )
    try:
        await link.subscribe(ep.url, timeout)
    except BaseException:
        await link.close()
        await http.close()
        raise
    return link, http


@pytest.mark.parametrize(
    ("status", "code", "hint"),
    [
        (404, ErrorCode.SESSION_GONE, "NO_ACTIVE_SESSION"),
        (409, ErrorCode.MEDIA_FAILED, "already has a viewer"),
        (415, ErrorCode.MEDIA_FAILED, "content type"),
        (500, ErrorCode.MEDIA_FAILED, "WHEP HTTP 500"),
    ],
)
async def test_each_whep_status_maps_to_a_clear_error(
    endpoint: Endpoint, status: int, code: ErrorCode, hint: str
) -> None:
    endpoint.status = status
    with pytest.raises(AvatarError) as info:
        await _subscribe(endpoint)
    assert info.value.code is code
    assert hint in str(info.value)
    assert endpoint.deletes == []  # nothing was created, nothing to delete


async def test_unanswered_post_is_a_connect_timeout(endpoint: Endpoint) -> None:
    endpoint.delay = 5.0
    with pytest.raises(AvatarError) as info:
        await _subscribe(endpoint, timeout=0.3)
    assert info.value.code is ErrorCode.CONNECT_TIMEOUT


async def test_relative_location_is_resolved_and_deleted_even_when_the_answer_fails(
    endpoint: Endpoint,
) -> None:
    """A 201 creates a server resource: even if its answer is unusable, it is released."""
    endpoint.status = 201
    with pytest.raises(AvatarError) as info:
        await _subscribe(endpoint)  # the scripted body is not a usable answer
    assert info.value.code is ErrorCode.MEDIA_FAILED
    assert endpoint.deletes == ["/rtc/v1/whep/resource/abc"]


async def test_private_location_is_refused_without_the_flag(endpoint: Endpoint) -> None:
    endpoint.location = "https://10.1.2.3/rtc/v1/whep/resource/abc"
    http = aiohttp.ClientSession()
    link = StvDownlink(
        http=http,
        configuration=RTCConfiguration(),
        allow_private=False,
        video=False,
        outputs={},
        clock=SYSTEM_CLOCK,
    )
    # The request URL is loopback too, so check the Location rule on its own.
    with pytest.raises(AvatarError) as info:
        await link._check_host(endpoint.location)
    assert info.value.code is ErrorCode.INSECURE_TRANSPORT
    assert "WHEP host 10.1.2.3 is a private address" in str(info.value)
    await link.close()
    await http.close()
