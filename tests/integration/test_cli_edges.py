"""The console script at the edges a new user meets, as real processes (issue 33): a session
that ends while stdin is still open, a URL that points at some other HTTP server, ``-v`` after
the subcommand, Ctrl-C during start-up, and the thread id in ``talk --json``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from click.testing import CliRunner

from avatar_sdk._cli.main import main
from avatar_sdk.testing import StagingServer

from .conftest import HANG_GUARD

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["--set", "close_timeout=1", "--set", "join_complete_timeout=2", "--reply-timeout", "10"]


async def start_talk(*args: str, token: str) -> asyncio.subprocess.Process:
    """``avatar-sdk ARGS`` as a process, its stdin a pipe held open by the test."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk._cli", *args,
        cwd=ROOT, env={**os.environ, "AVATAR_TOKEN": token, "PYTHONPATH": str(ROOT)},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def read_until(proc: asyncio.subprocess.Process, marker: bytes, bound: float) -> bytes:
    """stdout up to the line holding ``marker`` (the lines read so far)."""
    assert proc.stdout is not None
    seen = b""
    async with asyncio.timeout(bound):
        while marker not in seen:
            line = await proc.stdout.readline()
            assert line, f"stdout closed before {marker!r}: {seen!r}"
            seen += line
    return seen


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


# -- item 1: the session ends, stdin is still open --------------------------------------------
@pytest.mark.parametrize("ending", ["end_conversation", "backend_gone"])
async def test_talk_on_stdin_exits_when_the_session_ends(
    staging: StagingServer, ending: str
) -> None:
    talk = ["talk", staging.url, "--insecure", "--no-media", *QUICK]
    if ending == "backend_gone":
        # A cold reconnect that cannot succeed gives up quickly.
        talk += ["--set", "cold_reconnect.max_attempts=1", "--set", "reconnect_window=1"]
    proc = await start_talk(*talk, token=staging.token)
    assert proc.stdin is not None and proc.stderr is not None
    try:
        proc.stdin.write(b"hi\n")
        await proc.stdin.drain()
        await read_until(proc, b"avatar: You said: hi", 30)
        if ending == "end_conversation":
            await staging.faults.end_conversation()
        else:
            await staging.stop()
        code = await asyncio.wait_for(proc.wait(), 20)  # stdin is still open
    finally:
        await stop(proc)
    stderr = (await proc.stderr.read()).decode()
    assert code in (5, 6), stderr
    assert "Traceback" not in stderr
