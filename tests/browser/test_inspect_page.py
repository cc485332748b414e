"""``avatar-sdk inspect`` end to end: a real session against the staging backend, with a
socket drop, a cold reconnect, a tool call and a renewal, recorded as a cassette and a
journal; the command draws each into an HTML page, opened from disk (``file://``) in a real
headless Chromium (Debian's ``chromium``, driven by Playwright, which downloads no browser;
`make test` installs Chromium when it is missing). The page is drawn, every element the
session calls for is there with its hover title, no script runs, and no request leaves the
page's own file (each is recorded, and any other is refused)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from playwright.async_api import Page, Route, async_playwright

from avatar_sdk import AvatarSession, RenewalPolicy
from avatar_sdk.testing import StagingServer

from ..chromium import launch_options
from ..integration.conftest import FAST

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "<script>window.injected = 1</script>"
WAIT = 10.0

pytestmark = pytest.mark.timeout(180)


async def record_a_session(cassette: Path, journal: Path) -> None:
    """A session with each thing the page draws: turns, a socket drop (recovered in
    place), a cold reconnect, a tool call and a renewal."""
    async with StagingServer() as staging:
        session = AvatarSession(
            staging.url,
            staging.token,
            media=False,
            allow_insecure_transport=True,
            thread_id="thr-inspect",
            config=FAST.with_(renewal=RenewalPolicy(), max_conversation_length=600),
            record=cassette,
            journal=journal,
        )
        try:
            await session.connect(wait_for_greeting=True)
            await session.ask(f"hello {SCRIPT}", timeout=WAIT)
            socket = session.expect("reconnected", timeout=WAIT)
            await staging.faults.drop_socket()
            assert (await socket).data["tier"] == "socket"
            staging.brain.tool_calls([f'open_filing {{"doc": "{SCRIPT}"}}'], then="Opened.")
            await session.ask("open it", timeout=WAIT)
            cold = session.expect(
                "reconnected", predicate=lambda e: e.data["tier"] == "cold", timeout=WAIT
            )
            await staging.faults.drop_socket(recovery=False)
            await cold
            renewed = session.expect("session_renewed", timeout=WAIT)
            await asyncio.wait_for(session.renew(), WAIT)
            await renewed
            await session.ask("after the renewal", timeout=WAIT)
        finally:
            await session.close()


async def inspect(record: Path, page: Path) -> str:
    """``avatar-sdk inspect RECORD -o PAGE`` as a user runs it (its own process)."""
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}  # this tree's SDK
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk._cli", "inspect", str(record), "-o", str(page),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, output.decode(errors="replace")
    assert os.path.isfile(page)  # noqa: ASYNC240 - one stat, after the process ended
    return output.decode()


async def count(page: Page, selector: str) -> int:
    return await page.locator(selector).count()


async def title_of(page: Page, selector: str) -> str:
    return await page.locator(f"{selector} > title").first.text_content() or ""


async def check_page(page: Page, *, source: str) -> None:
    """What every drawing of the recorded session shows, from either record."""
    svg = page.locator(f'section[data-source="{source}"] svg').first
    box = await svg.bounding_box()
    assert box is not None and box["width"] > 1000 and box["height"] > 100  # drawn
    assert await count(page, '[data-kind="state"]') >= 8
    assert await count(page, '[data-kind="recovery"][data-tier="socket"]') == 2  # ok, failed
    assert await count(page, '[data-kind="recovery"][data-tier="cold"]') == 1
    assert await count(page, '[data-kind="renewal"]') == 1
    assert await count(page, '[data-kind="swap"]') == 1
    assert await count(page, '[data-kind="tool_call"]') == 1
    assert await count(page, '[data-kind="turn"]') == 3
    assert await count(page, '[data-kind="turn"] [data-figure="text_latency"]') == 3
    cold = await title_of(page, '[data-kind="recovery"][data-tier="cold"]')
    assert cold.startswith("cold recovery (recovered)\nat ") and " ms)" in cold
    socket = await title_of(page, '[data-kind="recovery"][data-tier="socket"]')
    assert socket.startswith("socket recovery (recovered)")
    turn = await title_of(page, '[data-kind="turn"]')
    assert "text_latency: " in turn and "generated_latency: " in turn
    assert "open_filing" in await title_of(page, '[data-kind="tool_call"]')
    assert "make" in await title_of(page, '[data-kind="renewal"]')  # make before break
    # Hovering an element highlights it (the tooltip is its <title>, drawn by the browser).
    band = page.locator('[data-kind="renewal"]').first
    await band.hover()
    assert await band.evaluate("e => getComputedStyle(e).opacity") == "0.75"
    # The records' text is shown, never run.
    assert await page.evaluate("document.scripts.length") == 0
    assert await page.evaluate("window.injected") is None


async def test_inspect_draws_a_recorded_session_offline_in_a_browser(tmp_path: Path) -> None:
    cassette, journal = tmp_path / "session.cassette.jsonl", tmp_path / "session.journal.jsonl"
    await record_a_session(cassette, journal)
    pages = {"cassette": tmp_path / "cassette.html", "journal": tmp_path / "journal.html"}
    assert "(1 session)" in await inspect(cassette, pages["cassette"])
    assert "(1 session)" in await inspect(journal, pages["journal"])

    requests: list[str] = []
    refused: list[str] = []
    errors: list[str] = []

    async def only_files(route: Route) -> None:
        if route.request.url.startswith("file:"):
            await route.continue_()
        else:
            refused.append(route.request.url)
            await route.abort()

    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            **launch_options(tmp_path / "profile")
        )
        try:
            await context.route("**/*", only_files)
            context.on("request", lambda request: requests.append(request.url))
            for source, path in pages.items():
                page = await context.new_page()
                page.on("pageerror", lambda error: errors.append(str(error)))
                await page.goto(path.as_uri())
                await check_page(page, source=source)
                await page.close()
        finally:
            await context.close()
    assert errors == []
    assert refused == []
    assert requests == [path.as_uri() for path in pages.values()]  # each page, nothing else
