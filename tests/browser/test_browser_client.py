"""A real browser against the staging backend (issue 34, item 3): the project's own page
(``web/``: socket.io-client from npm, the browser's own ``RTCPeerConnection``) in Debian's
Chromium, driven by Playwright (which downloads no browser), with Chromium's fake
microphone (a periodic beep). It proves the staging answers a browser's WebRTC stack
(Chromium's ICE, DTLS and H.264 decoder), which is what a web front end runs.

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

from avatar_sdk.testing import StagingServer

from ..conftest import until

WEB = Path(__file__).resolve().parent / "web"
SOCKET_IO_JS = WEB / "node_modules" / "socket.io-client" / "dist" / "socket.io.min.js"
MEDIA_HOST = "media.staging.test"
INSTALL = "apt-get install -y --no-install-recommends chromium (as root; `make test` does it)"
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
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


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:  # a failure, never a skip: CI must run this test
        pytest.fail(f"no chromium on this machine: {INSTALL}")
    return path


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
            user_data_dir=str(tmp_path / "profile"),  # fresh and empty
            executable_path=_chromium(),  # Debian's; Playwright downloads no browser
            headless=True,
            chromium_sandbox=False,  # --no-sandbox: the suite runs as root
            args=CHROMIUM_ARGS,
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
