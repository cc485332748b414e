"""session_completed across processes: cross-process thread leases (fcntl lock files),
SIGTERM handling and the interpreter-exit hook, with real child processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from avatar_sdk.lifecycle.completion import CompletionSignal, ThreadLeases
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.net.genie import GenieClient

#: Wall-clock bound (s) of a wait that must end on an answer or on the exit hook's own bound,
#: never on the backend's 5 s delay: a hang guard only, never a speed claim.
HANG_GUARD = 2.5

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fcntl and POSIX signals")

ROOT = Path(__file__).resolve().parents[2]


class Child:
    """A ``tests.integration._lifecycle_child`` process."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def line(self, timeout: float = 10.0) -> str:
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        if not raw:
            err = await self.stderr()
            raise AssertionError(f"child ended early (rc={self.proc.returncode}): {err}")
        return raw.decode().strip()

    async def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        await self.proc.stdin.drain()

    async def wait(self, timeout: float) -> int:
        return await asyncio.wait_for(self.proc.wait(), timeout)

    async def stderr(self) -> str:
        assert self.proc.stderr is not None
        try:
            return (await asyncio.wait_for(self.proc.stderr.read(), 2.0)).decode()
        except TimeoutError:
            return "<stderr unavailable>"

    async def reap(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()
        # Close the pipes before the loop goes (no ResourceWarning).
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        transport = getattr(self.proc, "_transport", None)
        if transport is not None:
            transport.close()


Spawn = Callable[..., Awaitable[Child]]


@pytest_asyncio.fixture
async def spawn(staging: StagingServer) -> AsyncIterator[Spawn]:
    children: list[Child] = []

    async def start(*args: str) -> Child:
        env = dict(os.environ)
        env["AVATAR_TEST_GENIE_URL"] = staging.genie_url
        env["AVATAR_TEST_TOKEN"] = staging.token
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integration._lifecycle_child",
            *args,
            cwd=ROOT,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        child = Child(proc)
        children.append(child)
        return child

    yield start
    for child in children:
        await child.reap()


@pytest.fixture
def lease_dir(tmp_path: Path) -> Path:
    return tmp_path / "leases"


def lease_files(directory: Path, pattern: str = "*.lease") -> list[Path]:
    return sorted(directory.glob(pattern))


def new_thread() -> str:
    return f"thr-proc-{uuid.uuid4().hex[:10]}"


async def test_second_process_suppresses_then_last_one_sends(
    staging: StagingServer, spawn: Spawn, lease_dir: Path
) -> None:
    thread = new_thread()
    genie = GenieClient(staging.genie_url, staging.token)
    try:
        mine = CompletionSignal(genie, timeout=2.0, leases=ThreadLeases(lease_dir))
        mine.hold(thread)
        child = await spawn("hold", str(lease_dir), thread)
        assert await child.line() == "READY"

        first = await mine.complete(reason="close")
        assert first["outcome"] == "suppressed"
        assert first["peers"] == 1 and first["delivered"] is False
        assert staging.completed_threads == []

        await child.send("complete")  # the last holder standing
        last = json.loads(await child.line())
        assert last["outcome"] == "sent" and last["delivered"] is True
        assert staging.completed_threads == [thread]
        await child.send("exit")
        assert await child.wait(5.0) == 0
    finally:
        await genie.close()


async def test_released_holder_no_longer_blocks(
    staging: StagingServer, spawn: Spawn, lease_dir: Path
) -> None:
    thread = new_thread()
    leases = ThreadLeases(lease_dir)
    child = await spawn("hold", str(lease_dir), thread)
    assert await child.line() == "READY"
    assert leases.others_alive(thread) == 1

    await child.send("release")
    assert await child.line() == "RELEASED"
    assert leases.others_alive(thread) == 0
    await child.send("exit")
    assert await child.wait(5.0) == 0

    genie = GenieClient(staging.genie_url, staging.token)
    try:
        result = await CompletionSignal(genie, timeout=2.0, leases=leases).complete(thread)
    finally:
        await genie.close()
    assert result["outcome"] == "sent"
    assert staging.completed_threads == [thread]
    assert not lease_files(lease_dir, "*")


async def test_sigkilled_holder_does_not_block(
    staging: StagingServer, spawn: Spawn, lease_dir: Path
) -> None:
    thread = new_thread()
    leases = ThreadLeases(lease_dir)
    child = await spawn("hold", str(lease_dir), thread)
    assert await child.line() == "READY"
    assert leases.others_alive(thread) == 1
    assert len(lease_files(lease_dir)) == 1

    child.proc.send_signal(signal.SIGKILL)
    assert await child.wait(5.0) == -signal.SIGKILL
    assert len(lease_files(lease_dir)) == 1  # left behind, but its lock died

    genie = GenieClient(staging.genie_url, staging.token)
    try:
        signal_ = CompletionSignal(genie, timeout=2.0, leases=leases, thread_id=thread)
        signal_.hold()
        result = await signal_.complete(reason="close")
    finally:
        await genie.close()
    assert result["outcome"] == "sent"
    assert staging.completed_threads == [thread]
    assert not lease_files(lease_dir)  # the stale file was swept


async def test_sigterm_completes_within_bound(
    staging: StagingServer, spawn: Spawn, lease_dir: Path
) -> None:
    thread = new_thread()
    child = await spawn("sigterm", str(lease_dir), thread)
    ready = await child.line()
    assert ready.startswith("READY") and str(int(signal.SIGTERM)) in ready.split()[1].split(",")

    sent_at = time.monotonic()
    child.proc.send_signal(signal.SIGTERM)
    payload = json.loads(await child.line(timeout=3.0))
    rc = await child.wait(3.0)
    elapsed = time.monotonic() - sent_at

    assert payload["outcome"] == "sent" and payload["reason"] == "signal"
    assert staging.completed_threads == [thread]
    assert elapsed < 3.0
    # Default SIGTERM disposition restored and the signal delivered again: killed by it.
    assert rc == -signal.SIGTERM
    assert not lease_files(lease_dir)


async def exit_hook_duration(child: Child) -> float:
    """Seconds the child spent in the SDK's exit hook (CLOCK_MONOTONIC is system-wide)."""
    exiting = await child.line()
    exited = await child.line()
    assert exiting.startswith("EXITING ") and exited.startswith("EXITED "), (exiting, exited)
    return float(exited.split()[1]) - float(exiting.split()[1])


async def test_exit_hook_completes_an_unclosed_session(
    staging: StagingServer, spawn: Spawn, lease_dir: Path
) -> None:
    """The hook delivers the completion and returns on the delivery, not at its bound (set
    far above the hang guard, so a hook that waits its bound out fails)."""
    thread = new_thread()
    child = await spawn("atexit", str(lease_dir), thread, str(4 * HANG_GUARD))
    assert await child.line() == "READY"
    in_hook = await exit_hook_duration(child)
    rc = await child.wait(5.0)
    assert rc == 0, await child.stderr()
    assert staging.completed_threads == [thread]
    assert in_hook < HANG_GUARD  # returned on the delivery (a hang guard, not a speed claim)
    assert lease_files(lease_dir) == []


async def test_exit_hook_never_delays_exit_beyond_its_bound(
    staging: StagingServer, spawn: Spawn, lease_dir: Path
) -> None:
    staging.faults.genie_delay(5.0)  # the backend hangs
    thread = new_thread()
    child = await spawn("atexit", str(lease_dir), thread, "0.5")
    assert await child.line() == "READY"
    ready_at = time.monotonic()
    in_hook = await exit_hook_duration(child)
    rc = await child.wait(4.0)
    assert rc == 0, await child.stderr()
    # It waited for the answer up to its bound (one-sided: a busy machine only waits longer)
    # and gave up at that bound, long before the backend's answer at 5 s (a hang guard).
    assert in_hook >= 0.5 - 0.05, in_hook
    assert in_hook < HANG_GUARD < 5.0, in_hook
    assert time.monotonic() - ready_at < 4.0  # nowhere near the backend's 5 s
