"""The console script: diagram in sync with the docs, standalone staging with its fault API."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import aiohttp

from avatar_sdk import AvatarSession
from avatar_sdk.machine import mermaid

from .conftest import FAST

ROOT = Path(__file__).resolve().parents[2]


def test_docs_diagram_is_the_generated_one() -> None:
    # The page holds a marker that the docs build fills from the machine (tools/docgen.py).
    from tools.docgen import expand  # noqa: PLC0415 - the docs tooling, only for this test

    text = expand((ROOT / "docs" / "state-machine.md").read_text())
    assert mermaid() in text, "docs/state-machine.md lost its generated state diagram"


async def test_standalone_staging_serves_sessions_and_faults() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk.cli", "staging", "serve", "--port", "0",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        info = json.loads(line)
        session = AvatarSession(
            info["url"], info["token"], media=False, allow_insecure_transport=True, config=FAST
        )
        await session.connect()
        waiter = session.expect("reconnected", timeout=5)
        async with aiohttp.ClientSession() as http:
            url = f"{info['url']}/_control/faults/drop_socket"
            async with http.post(url, json={"recovery": True}) as resp:
                assert resp.status == 200
                assert (await resp.json())["result"] == 1
            async with http.post(f"{info['url']}/_control/faults/no_such_fault") as resp:
                assert resp.status == 404
        assert (await waiter).data["recovered"] is True
        await session.close()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)
