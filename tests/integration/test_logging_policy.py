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


_FAULTS_CHILD = """
import asyncio, logging, sys

if sys.argv[1] == "verbose":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.testing import StagingServer

async def main():
    async with StagingServer() as staging:
        config = SessionConfig(close_timeout=1.0)
        async with AvatarSession(
            staging.url, staging.token, media=False, allow_insecure_transport=True,
            config=config,
        ) as session:
            await session.wait_for("agent_turn_ended", timeout=10)
            reconnected = session.expect("reconnected", timeout=10)
            await staging.faults.drop_socket()   # the server closes a live socket
            await reconnected
            ended = session.expect("ended", timeout=10)
            await staging.faults.server_disconnect()
            await ended

asyncio.run(main())
"""


def _run_faults(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_FAULTS_CHILD), mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_no_bare_library_line_on_stderr_by_default_and_all_of_them_at_info() -> None:
    # Issue 33, item 3: "Server sent close packet data 1000, aborting" reached a user's
    # stderr (Python's last-resort handler) when the server closed a live socket.
    quiet = _run_faults("default")
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "aborting" not in quiet.stderr, quiet.stderr
    assert "packet" not in quiet.stderr, quiet.stderr
    verbose = _run_faults("verbose")
    assert verbose.returncode == 0, verbose.stderr[-2000:]
    assert "INFO avatar_sdk.transport.engineio: Server sent close packet" in verbose.stderr
