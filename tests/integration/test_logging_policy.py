"""A whole session, connected and closed, leaves the process's logging configuration as it
found it: no handler and no level on any client-side logger (a fresh interpreter, so no
earlier test has configured anything)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import asyncio, logging

def snapshot():
    return {
        name: ([type(h).__name__ for h in logger.handlers], logger.level)
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
        # the staging server is this test's backend, not the client under test
        and not name.endswith(".server")
    }

import aiohttp, aioice, aiortc, engineio, socketio, transitions.extensions
from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer

async def main():
    async with StagingServer() as staging:
        before = snapshot()
        async with AvatarSession(
            staging.url, staging.token, media=False, allow_insecure_transport=True
        ) as session:
            await session.wait_for("agent_turn_ended", timeout=10)
        after = snapshot()
    print({k: v for k, v in after.items() if v != before.get(k, ([], logging.NOTSET))})

asyncio.run(main())
"""


def test_a_session_configures_no_client_logger() -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "{}"
