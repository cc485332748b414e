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
from typing import Any

import pytest
import pytest_asyncio
from click.testing import CliRunner

from avatar_sdk._cli.main import main
from avatar_sdk.testing import StagingServer

from .conftest import HANG_GUARD

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["--set", "close_timeout=1", "--set", "join_complete_timeout=2", "--reply-timeout", "10"]


async def start_talk(
    *args: str, token: str, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """``avatar-sdk ARGS`` as a process, its stdin a pipe held open by the test."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk._cli", *args,
        cwd=ROOT,
        env={**os.environ, "AVATAR_TOKEN": token, "PYTHONPATH": str(ROOT), **(env or {})},
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


# -- item 2: a URL that points at some other HTTP server --------------------------------------
@pytest_asyncio.fixture
async def foreign_http() -> AsyncIterator[str]:
    """``python3 -m http.server`` on a free loopback port: HTTP, but not a Socket.IO server."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(  # noqa: ASYNC220 - started once, waited for in the finally
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "http.server did not start"
                await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


async def test_talk_to_a_foreign_http_server_names_status_and_path(foreign_http: str) -> None:
    proc = await start_talk("talk", foreign_http, "--insecure", "--no-media", *QUICK, token="t")
    assert proc.stdin is not None and proc.stderr is not None
    try:
        code = await asyncio.wait_for(proc.wait(), 30)
    finally:
        await stop(proc)
    stderr = (await proc.stderr.read()).decode()
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    line = lines[0]
    assert "[bad_request]" in line, line
    assert "GET /socket.io/?EIO=4" in line and "404 Not Found" in line, line
    assert "not a Socket.IO server" in line, line
    assert "attempts" not in line  # a wrong URL is not retried
    assert "check the URL" in line, line
    assert code == 3, stderr


# -- item 7: -v after the subcommand, Ctrl-C during start-up ----------------------------------
def _commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for name, command in group.commands.items():
        path = (*prefix, name)
        if hasattr(command, "commands"):
            found += _commands(command, path)
        else:
            found.append(path)
    return found


def test_every_subcommand_takes_verbose_after_its_name() -> None:
    runner = CliRunner()
    for path in _commands(main):
        for flag in ("-v", "--verbose"):
            result = runner.invoke(main, [*path, flag, "--help"])
            assert result.exit_code == 0, (path, flag, result.output)
            assert "No such option" not in result.output
        assert "--verbose" in runner.invoke(main, [*path, "--help"]).output, path


async def test_talk_verbose_after_the_subcommand_logs_at_info() -> None:
    staging = StagingServer()
    await staging.start()
    url = staging.url
    await staging.stop()  # connection refused: the retry is told at INFO
    proc = await start_talk("talk", url, "--insecure", "--no-media", "--verbose",
                            "--connect-attempts", "2", "--say", "hi", token="t")  # fmt: skip
    assert proc.stderr is not None
    try:
        code = await asyncio.wait_for(proc.wait(), 60)
    finally:
        await stop(proc)
    stderr = (await proc.stderr.read()).decode()
    assert code == 5, stderr
    assert "avatar-sdk: INFO avatar_sdk._cli.main: " in stderr, stderr  # -v after `talk`


async def in_start_up(proc: asyncio.subprocess.Process, bound: float = 30) -> None:
    """Until the process loads the session stack (PyAV's library in its memory map): the
    interpreter is up, the command is importing or connecting."""
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + bound
    while "/av/" not in await asyncio.to_thread(maps.read_text):
        assert time.monotonic() < deadline, "the session stack never loaded"
        await asyncio.sleep(0.01)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc")
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.1, 0.2, 0.4, 0.8])
async def test_ctrl_c_during_start_up_exits_130_quietly(
    staging: StagingServer, delay: float, tmp_path: Path
) -> None:
    """Wherever the Ctrl-C lands: in the imports (a C extension's module init turned it
    into an ``ImportError``: exit 1 with a traceback), between them and the loop's own
    handler (exit -2), or connecting. The imports run from an empty bytecode cache, as
    on a fresh clone, so they are slow enough for the sweep to land inside them."""
    staging.faults.withhold("showAgent")  # never connected: the run stays in its start-up
    proc = await start_talk("talk", staging.url, "--insecure", "--no-media", *QUICK,
                            token=staging.token,
                            env={"PYTHONPYCACHEPREFIX": str(tmp_path / "pyc")})  # fmt: skip
    assert proc.stderr is not None
    try:
        await in_start_up(proc)
        await asyncio.sleep(delay)  # somewhere in the imports, or connecting
        proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(proc.wait(), 10)
    finally:
        await stop(proc)
    stderr = (await proc.stderr.read()).decode()
    assert code == 130, stderr
    assert "Aborted!" not in stderr and "Traceback" not in stderr, stderr


# -- item 4: the thread id, known at connect and announced ------------------------------------
async def test_the_thread_is_known_when_connect_returns_and_announced(
    staging: StagingServer,
) -> None:
    from avatar_sdk import AvatarSession  # noqa: PLC0415

    session = AvatarSession(staging.url, staging.token, media=False, allow_insecure_transport=True)
    announced = session.expect("thread_known", timeout=HANG_GUARD)
    try:
        await session.connect()
        assert session.thread_id is not None  # not a few hundred ms later
        event = await announced
        assert event.data == {"thread_id": session.thread_id}
    finally:
        await session.close()


async def test_talk_json_carries_the_thread_before_the_session_completes(
    staging: StagingServer,
) -> None:
    proc = await start_talk("talk", staging.url, "--insecure", "--no-media", "--json", *QUICK,
                            "--say", "hi", token=staging.token)  # fmt: skip
    assert proc.stdout is not None
    try:
        out = await asyncio.wait_for(proc.stdout.read(), 60)
        code = await asyncio.wait_for(proc.wait(), 10)
    finally:
        await stop(proc)
    assert code == 0
    names = [json.loads(line)["event"] for line in out.decode().splitlines()]
    known = [json.loads(line)["data"] for line in out.decode().splitlines()
             if json.loads(line)["event"] == "thread_known"]  # fmt: skip
    assert len(known) == 1 and known[0]["thread_id"], names
    assert names.index("thread_known") < names.index("agent_turn_ended")


#: A child that runs ``avatar-sdk`` and sends itself SIGINT at one exact point of its
#: imports: just before (``before``) or just after (``after``) module ``argv[1]`` executes.
_SIGINT_AT_IMPORT = """
import importlib.machinery, os, runpy, signal, sys
target, when = sys.argv[1], sys.argv[2]
class Hook:
    def find_spec(self, name, path, target_module=None):
        if name != target:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            if when == "before":
                os.kill(os.getpid(), signal.SIGINT)
            if when == "in-zlib":  # the C init imports zlib itself: interrupted in there
                sys.modules.pop("zlib", None)
                sys.meta_path.insert(0, Interrupt())
            run(module)
            if when == "after":
                os.kill(os.getpid(), signal.SIGINT)
        spec.loader.exec_module = exec_module
        return spec
class Interrupt:
    def find_spec(self, name, path, target_module=None):
        if name == "zlib":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Hook())
sys.argv = ["avatar-sdk", *sys.argv[3:]]
runpy.run_module("avatar_sdk._cli", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    ("module", "when"),
    [
        ("av._core", "in-zlib"),  # in PyAV's C init: it became an ImportError (exit 1)
        ("av._core", "before"),
        ("aiortc", "before"),
        ("avatar_sdk._cli.talk", "after"),  # imports done, the loop not yet running
    ],
)
async def test_ctrl_c_at_any_point_of_the_imports_exits_130_quietly(
    staging: StagingServer, module: str, when: str
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _SIGINT_AT_IMPORT, module, when,
        "talk", staging.url, "--insecure", "--no-media", *QUICK,
        cwd=ROOT, env={**os.environ, "AVATAR_TOKEN": staging.token, "PYTHONPATH": str(ROOT)},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        code = await asyncio.wait_for(proc.wait(), 30)
    finally:
        await stop(proc)
    assert proc.stderr is not None
    stderr = (await proc.stderr.read()).decode()
    assert code == 130, stderr
    assert "Traceback" not in stderr and "Aborted!" not in stderr, stderr
    assert not staging.received_events("join")  # interrupted before any server session
