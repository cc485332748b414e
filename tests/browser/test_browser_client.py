"""A real browser against the staging backend (issue 34, item 3): the project's own page
(``web/``: socket.io-client from npm, the browser's own ``RTCPeerConnection``) in Debian's
Chromium, driven by Playwright (which downloads no browser), with Chromium's fake
microphone (a periodic beep). It proves the staging answers a browser's WebRTC stack
(Chromium's ICE, DTLS and H.264 decoder), which is what a web front end runs, and shows a
page surviving the staging's faults: an uplink ICE blackhole, a dropped socket recovered in
place or, its recovery refused, rebuilt cold on the same thread (issue 34, item 2).

The page subscribes under a public-looking media host (``StagingServer(media_host=...)``),
which Chromium resolves to the staging with its own resolver rules."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aioice.ice
import pytest
import pytest_asyncio
from aiohttp import web
from playwright.async_api import Page, async_playwright
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from avatar_sdk.testing import StagingServer

from ..chromium import CHROMIUM_ARGS, launch_options
from ..conftest import until

WEB = Path(__file__).resolve().parent / "web"
SOCKET_IO_JS = WEB / "node_modules" / "socket.io-client" / "dist" / "socket.io.min.js"
MEDIA_HOST = "media.staging.test"
BROWSER_ARGS = [
    *CHROMIUM_ARGS,
    # the fake microphone (a beep), granted without a prompt; the avatar's voice may play
    "--use-fake-device-for-media-stream",
    "--use-fake-ui-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
    # the public-looking media host is this machine (a browser resolves it, not the page)
    f"--host-resolver-rules=MAP {MEDIA_HOST} 127.0.0.1",
    # real host candidates (no mDNS names, which the staging's ICE agent cannot resolve)
    "--disable-features=WebRtcHideLocalIpsWithMdns",
]

pytestmark = pytest.mark.timeout(180)


async def _ensure_socket_io_client() -> None:
    """``npm install`` in ``web/`` unless the Makefile did it already (bounded)."""
    if SOCKET_IO_JS.is_file():
        return
    npm = shutil.which("npm") or pytest.fail("no npm on this machine (make test needs Node.js)")
    proc = await asyncio.create_subprocess_exec(
        npm, "install", "--no-audit", "--no-fund", "--silent", cwd=WEB,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(proc.communicate(), 300)
    if proc.returncode != 0 or not SOCKET_IO_JS.is_file():
        pytest.fail(f"npm install in {WEB} failed:\n{output.decode(errors='replace')}")


@pytest_asyncio.fixture
async def page_url() -> AsyncIterator[str]:
    """The test's own web server for the page (another origin than the staging's)."""
    await _ensure_socket_io_client()
    app = web.Application()
    files = {
        "/": WEB / "index.html",
        "/client.js": WEB / "client.js",
        "/socket.io.min.js": SOCKET_IO_JS,
    }

    async def serve(request: web.Request) -> web.FileResponse:
        return web.FileResponse(files[request.path])

    for route in files:
        app.router.add_get(route, serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture
async def staging() -> AsyncIterator[StagingServer]:
    async with StagingServer(media_host=MEDIA_HOST, speech_time_scale=0.1) as server:
        yield server


@pytest_asyncio.fixture
async def page(page_url: str, tmp_path: Path) -> AsyncIterator[Page]:
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            **launch_options(tmp_path / "profile", BROWSER_ARGS)
        )
        try:
            page = await context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(page_url)
            yield page
            assert errors == []
        finally:
            await context.close()


async def _state(page: Page) -> dict[str, Any]:
    state: dict[str, Any] = await page.evaluate("window.client.state")
    return state


async def test_a_browser_talks_to_the_staging(staging: StagingServer, page: Page) -> None:
    webrtc_url = await page.evaluate(
        "([url, token]) => window.client.connect(url, token)", [staging.url, staging.token]
    )
    assert webrtc_url.startswith(f"http://{MEDIA_HOST}:{staging.port}/")  # subscribed under it
    [sid] = staging.live_sids
    # The connect sequence, in the service's order (PROTOCOL.md §2).
    names = [event.event for event in staging.received if event.sid == sid]
    order = ["join", "stvNewSession", "asr-webrtc-init", "asr-webrtc-offer", "approvedPermissions"]
    assert [n for n in names if n in order] == order
    # The avatar's video decoded by Chromium (H.264), frames counted in the page.
    assert await until(lambda: staging.media.live_viewers() == 1, 10)
    for _ in range(100):
        state = await _state(page)
        if state["videoFrames"] >= 10:
            break
        await asyncio.sleep(0.1)
    assert state["videoFrames"] >= 10 and state["videoWidth"] > 0, state
    # The greeting plays: the avatar's voice reaches the playing element.
    await page.evaluate("window.client.next('stvFinishedTalking', 20000)")
    voice = await page.evaluate("window.client.voice()")
    assert voice["energy"] > 0 and voice["samples"] > 0, voice
    assert not voice["paused"] and not voice["muted"] and voice["time"] > 0, voice
    # A typed turn answered.
    staging.brain.reply("Hello from staging.")
    answer = await page.evaluate("window.client.say('hi there')")
    assert answer == "Hello from staging."
    # The fake microphone heard by the staging: decoded frames with sound in them.
    assert await until(lambda: staging.media.asr_stats(sid).frames >= 50, 10)
    assert max(staging.media.asr_peer(sid).levels_since(0)) > 0.01


async def test_a_browser_restarts_ice_after_the_staging_gave_up(
    staging: StagingServer, page: Page, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An uplink blackhole; the staging's consent checks give up (its peer ``failed``), then
    the page's ``restartIce()`` with an ``is_reconnect`` offer: audio flows again. The
    staging's checks run every 0.2 s here (it gives up in about 1.5 s, not 30 s)."""
    monkeypatch.setattr(aioice.ice, "CONSENT_INTERVAL", 0.2)
    await page.evaluate(
        "([url, token]) => window.client.connect(url, token)", [staging.url, staging.token]
    )
    [sid] = staging.live_sids
    assert await until(lambda: staging.media.asr_stats(sid).frames >= 50, 10)
    assert await staging.faults.ice_failure("asr", mode="blackhole") == 1
    assert await until(lambda: staging.media.asr_stats(sid).peer_state == "failed", 20)
    await asyncio.sleep(11.0)  # a browser calls ICE failed late (the staging once gave 10 s)
    before = staging.media.asr_stats(sid).frames
    await page.evaluate("window.client.restartIce()")
    assert await until(lambda: staging.media.asr_stats(sid).frames >= before + 50, 15), (
        staging.media.asr_stats(sid),
        await _state(page),
    )
    stats = staging.media.asr_stats(sid)
    assert stats.ice_restarts == 1 and stats.peers_created == 1
    assert max(staging.media.asr_peer(sid).levels_since(before)) > 0.01


async def _page_until(page: Page, condition: str, seconds: float) -> dict[str, Any]:
    """Wait (bounded) until ``condition``, a JS expression over ``state`` (the page's
    ``window.client.state``), holds; returns the page state then."""
    try:
        await page.wait_for_function(
            f"(() => {{ const state = window.client.state; return {condition}; }})()",
            polling=50,
            timeout=seconds * 1000,
        )
    except PlaywrightTimeoutError:
        pytest.fail(f"not within {seconds} s: {condition}; the page: {await _state(page)}")
    return await _state(page)


async def _connected_and_greeted(staging: StagingServer, page: Page) -> str:
    """The page connected, its greeting over (a typed turn is dropped during it); the sid."""
    await page.evaluate(
        "([url, token]) => window.client.connect(url, token)", [staging.url, staging.token]
    )
    await page.evaluate(
        "window.client.next('stvFinishedTalking', 20000, window.client.state.openedAt)"
    )
    [sid] = staging.live_sids
    return sid


async def test_a_browser_recovers_a_dropped_socket_in_place(
    staging: StagingServer, page: Page
) -> None:
    """A recoverable drop: socket.io-client reconnects and the server recovers the session
    (connection-state recovery, ``socket.recovered``): same server session, no new join."""
    sid = await _connected_and_greeted(staging, page)
    thread = staging.conversations[sid].thread_id
    assert await staging.faults.drop_socket() == 1
    state = await _page_until(page, "state.reconnects >= 1", 15)
    assert state["recovered"] is True and state["socketId"] == sid, state
    assert staging.recovered_sids == [sid] and staging.live_sids == [sid]
    assert staging.conversations[sid].thread_id == thread == state["threadId"]
    assert len(staging.received_events("join")) == 1  # recovered in place: no re-join
    staging.brain.reply("Still here.")
    assert await page.evaluate("window.client.say('are you there?')") == "Still here."
    assert staging.conversations[sid].user_turns == ["are you there?"]


async def test_a_browser_rebuilds_cold_when_recovery_is_refused(
    staging: StagingServer, page: Page
) -> None:
    """The server refuses recovery (a new sid): the page opens the session again on the
    reconnected socket, joining the same thread (``kaltura.threadId``), and opens its
    media again (a new ASR peer, a new WHEP viewer); the avatar's video is decoded again."""
    first = await _connected_and_greeted(staging, page)
    thread = staging.conversations[first].thread_id
    before = await _state(page)
    assert thread and before["threadId"] == thread  # learned from the greeting's `think`
    first_location = before["whepLocation"]
    assert await staging.faults.drop_socket(recovery=False) == 1
    state = await _page_until(page, "state.rebuilds >= 1", 30)
    assert state["recovered"] is False and state["socketId"] != first, state
    [second] = staging.live_sids
    assert second == state["socketId"] and staging.recovered_sids == []
    assert staging.conversations[second].thread_id == thread  # the same thread, joined again
    joins = staging.received_events("join")
    assert [j.sid for j in joins] == [first, second]
    assert joins[1].payload["kaltura"]["threadId"] == thread
    # Media subscribed again: one live viewer (the old one released), frames decoded again.
    assert await until(lambda: staging.media.live_viewers() == 1, 10)
    state = await _page_until(page, "state.videoFrames >= 10", 15)  # counted per subscription
    assert state["videoWidth"] > 0 and state["whepLocation"] != first_location, state
    assert await until(lambda: staging.media.asr_stats(second).frames >= 50, 10)  # mic again
    # The new session greets again (a typed turn is dropped meanwhile), then answers.
    await page.evaluate(
        "window.client.next('stvFinishedTalking', 20000, window.client.state.openedAt)"
    )
    staging.brain.reply("Back again.")
    assert await page.evaluate("window.client.say('still there?')") == "Back again."
    assert staging.conversations[second].user_turns == ["still there?"]
