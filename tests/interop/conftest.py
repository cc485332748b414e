"""Fixtures for the interop tests: a real Node ``socket.io`` 4.8 server with CSR on.

``node/server.js`` is started as a subprocess per test (``node server.js 0 <window_ms>``);
its first stdout line is ``LISTENING <port>``. Later lines (``CONNECTION``, ``DISCONNECT``,
``ACKED``) are collected so tests can assert what the *server* saw. The server exits when
its stdin closes, which is how teardown stops it (with a bounded kill as the fallback).

Node and npm are required (they are on every development machine and in CI). If
``node/node_modules`` is missing, the fixture runs ``npm install`` itself: these tests never
skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

NODE_DIR = Path(__file__).resolve().parent / "node"
SERVER_JS = NODE_DIR / "server.js"
TOKEN = "interop-token"
DEFAULT_WINDOW_MS = 20_000
NPM_INSTALL_TIMEOUT = 120.0
STARTUP_TIMEOUT = 15.0

StartServer = Callable[..., Awaitable["NodeServer"]]


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool!r} is not on PATH: the interop tests need Node.js and npm")
    return path


async def _ensure_node_modules() -> None:
    """Install socket.io into ``node/node_modules`` unless it is there already (bounded)."""
    if (NODE_DIR / "node_modules" / "socket.io" / "package.json").is_file():
        return
    npm = _require("npm")
    proc = await asyncio.create_subprocess_exec(
        npm,
        "install",
        "--no-audit",
        "--no-fund",
        "--silent",
        cwd=NODE_DIR,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), NPM_INSTALL_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.fail(f"npm install in {NODE_DIR} took more than {NPM_INSTALL_TIMEOUT:.0f} s")
    if proc.returncode != 0:
        pytest.fail(f"npm install failed ({proc.returncode}):\n{output.decode(errors='replace')}")


@dataclass
class NodeServer:
    """A running ``server.js`` and the stdout lines it printed after ``LISTENING``."""

    url: str
    window_ms: int
    token: str
    process: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _reader: asyncio.Task[None] | None = None

    async def _read_stdout(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while line := await stream.readline():
            async with self._changed:
                self.lines.append(line.decode(errors="replace").rstrip("\n"))
                self._changed.notify_all()

    async def wait_line(self, prefix: str, timeout: float = 5.0) -> str:
        """The first collected stdout line starting with ``prefix`` (waits for it)."""

        def find() -> str | None:
            return next((line for line in self.lines if line.startswith(prefix)), None)

        try:
            async with asyncio.timeout(timeout), self._changed:
                while (found := find()) is None:
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(
                f"server printed no line starting with {prefix!r} within {timeout} s; "
                f"lines: {self.lines}"
            ) from None
        return found

    async def disconnect_reason(self, sid: str, timeout: float = 5.0) -> str:
        """The reason the server gave for the disconnect of socket ``sid``."""
        line = await self.wait_line(f"DISCONNECT {sid} ", timeout)
        return line.split(" ", 2)[2]

    async def stop(self) -> None:
        """Close stdin (the server exits by itself), then kill it if it lingers."""
        proc = self.process
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 3.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 3.0)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader


async def _start_server(window_ms: int, token: str) -> NodeServer:
    node = _require("node")
    await _ensure_node_modules()
    env = {**os.environ, "INTEROP_TOKEN": token}
    proc = await asyncio.create_subprocess_exec(
        node,
        str(SERVER_JS),
        "0",
        str(window_ms),
        cwd=NODE_DIR,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=None,  # inherited: shows up in pytest's captured output on failure
    )
    assert proc.stdout is not None
    try:
        first = await asyncio.wait_for(proc.stdout.readline(), STARTUP_TIMEOUT)
    except TimeoutError:
        first = b""
    parts = first.decode(errors="replace").split()
    if len(parts) != 2 or parts[0] != "LISTENING" or not parts[1].isdigit():
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 3.0)
        pytest.fail(f"node server.js did not start (rc={proc.returncode}, first line {first!r})")
    server = NodeServer(
        url=f"http://127.0.0.1:{parts[1]}", window_ms=window_ms, token=token, process=proc
    )
    server._reader = asyncio.get_running_loop().create_task(server._read_stdout())
    return server


@pytest_asyncio.fixture
async def start_node_server() -> AsyncIterator[StartServer]:
    """Start ``server.js`` instances (``await start(window_ms=...)``); all stop at teardown."""
    servers: list[NodeServer] = []

    async def start(window_ms: int = DEFAULT_WINDOW_MS, token: str = TOKEN) -> NodeServer:
        server = await _start_server(window_ms, token)
        servers.append(server)
        return server

    try:
        yield start
    finally:
        await asyncio.gather(*(server.stop() for server in servers))


@pytest_asyncio.fixture
async def node_server(start_node_server: StartServer) -> NodeServer:
    """A Node socket.io 4.8 server with a 20 s recovery window."""
    return await start_node_server()
