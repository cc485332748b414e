"""avatar_sdk.lifecycle.completion: thread leases, the session_completed signal, shutdown hooks."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import FrameType

import pytest
import pytest_asyncio

from avatar_sdk.clock import FakeClock
from avatar_sdk.lifecycle.completion import (
    LEASE_DIR_ENV,
    OUTCOMES,
    CompletionSignal,
    IdleTimer,
    ShutdownHooks,
    ThreadLeases,
    default_lease_dir,
)
from avatar_sdk.lifecycle.shutdown import _Installed
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.net.genie import GenieClient

from ..conftest import until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fcntl and POSIX signals")

ROOT = Path(__file__).resolve().parents[2]
#: Wall-clock bound (s) that only catches a hang or a wait that should not happen (each use
#: says which); never a speed claim: speed is measured in benchmarks/.
HANG_GUARD = 2.0


def new_thread() -> str:
    return f"thr-unit-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def leases(tmp_path: Path) -> ThreadLeases:
    return ThreadLeases(tmp_path / "leases")


@pytest_asyncio.fixture
async def genie(staging: StagingServer) -> AsyncIterator[GenieClient]:
    client = GenieClient(staging.genie_url, staging.token)
    yield client
    await client.close()


@pytest.fixture
def hooks() -> Iterator[ShutdownHooks]:
    made = ShutdownHooks(grace=0.5, exit_bound=1.0)
    yield made
    made.close()


def lease_files(leases: ThreadLeases) -> list[Path]:
    assert leases.directory is not None
    return sorted(leases.directory.glob("*.lease"))


# -- leases -----------------------------------------------------------------------------------


def test_lease_file_names_hide_the_thread_id_and_hold_no_secret(leases: ThreadLeases) -> None:
    thread = "../odd id/" + uuid.uuid4().hex
    lease = leases.acquire(thread)
    try:
        [path] = lease_files(leases)
        assert thread not in path.name and "/" not in path.name and "odd" not in path.name
        assert json.loads(path.read_text()) == {"pid": os.getpid()}
        assert (path.stat().st_mode & 0o777) == 0o600
        assert leases.directory is not None
        assert (leases.directory.stat().st_mode & 0o777) == 0o700
    finally:
        lease.release()
    assert lease_files(leases) == []
    lease.release()  # idempotent


def test_in_process_holders_count_each_other(leases: ThreadLeases) -> None:
    thread = new_thread()
    first, second = leases.acquire(thread), leases.acquire(thread)
    other = leases.acquire(new_thread())
    try:
        assert first.peers() == 1 and second.peers() == 1 and other.peers() == 0
        assert leases.others_alive(thread) == 2
        # A registry on another directory still sees holders of this process.
        assert ThreadLeases(cross_process=False).others_alive(thread) == 2
        first.release()
        assert second.peers() == 0
    finally:
        for lease in (first, second, other):
            lease.close()


def test_a_forgotten_holder_releases_on_collection(leases: ThreadLeases) -> None:
    thread = new_thread()
    lease = leases.acquire(thread)
    assert leases.others_alive(thread) == 1
    del lease
    assert leases.others_alive(thread) == 0
    assert lease_files(leases) == []


def test_a_thread_learned_later_moves_the_lease(leases: ThreadLeases) -> None:
    lease = leases.holder()
    assert not lease.held and lease.peers() == 0
    one, two = new_thread(), new_thread()
    lease.acquire(one)
    lease.acquire(two)
    try:
        assert leases.others_alive(one) == 0 and leases.others_alive(two) == 1
        assert len(lease_files(leases)) == 1
    finally:
        lease.close()


def test_stale_lease_of_a_dead_process_does_not_block(leases: ThreadLeases) -> None:
    thread = new_thread()
    assert leases.directory is not None
    script = textwrap.dedent(
        """
        import os, sys
        from avatar_sdk.lifecycle.completion import ThreadLeases
        lease = ThreadLeases(sys.argv[1]).acquire(sys.argv[2])
        os._exit(0)  # no release, no finalizer: the file stays, the lock dies with us
        """
    )
    subprocess.run(
        [sys.executable, "-c", script, str(leases.directory), thread],
        check=True,
        cwd=ROOT,
        timeout=20,
    )
    assert len(lease_files(leases)) == 1
    assert leases.others_alive(thread) == 0
    assert lease_files(leases) == []  # swept


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_inherit_the_parents_leases(leases: ThreadLeases) -> None:
    thread = new_thread()
    lease = leases.acquire(thread)
    try:
        pid = os.fork()
        if pid == 0:  # child: the parent's holder is another process's now
            ok = leases.others_alive(thread) == 1 and not lease.held
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert lease.held and len(lease_files(leases)) == 1
    finally:
        lease.release()
    assert leases.others_alive(thread) == 0


def test_lease_directory_defaults_and_override(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(LEASE_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_lease_dir() == tmp_path / "avatar-sdk" / "threads"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_lease_dir().name == "threads"
    assert default_lease_dir().parent.name == f"avatar-sdk-{os.getuid()}"
    monkeypatch.setenv(LEASE_DIR_ENV, str(tmp_path / "custom"))
    assert default_lease_dir() == tmp_path / "custom"
    assert ThreadLeases().directory == tmp_path / "custom"


def test_a_shared_directory_degrades_to_in_process_leases(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    leases = ThreadLeases(shared)
    assert leases.directory is None
    thread = new_thread()
    lease = leases.acquire(thread)
    try:
        assert list(shared.iterdir()) == []
        assert leases.others_alive(thread) == 1
    finally:
        lease.close()


# -- the completion signal ---------------------------------------------------------------------


async def test_suppressed_while_another_session_holds_then_sent_by_the_last(
    staging: StagingServer, genie: GenieClient, leases: ThreadLeases
) -> None:
    thread = new_thread()
    first = CompletionSignal(genie, timeout=2.0, leases=leases, thread_id=thread)
    second = CompletionSignal(genie, timeout=2.0, leases=leases)
    first.hold()
    second.hold(thread)  # learned later, e.g. from the first brain segment

    one = await first.complete(reason="close")
    assert one == {
        "thread_id": thread,
        "delivered": False,
        "reason": "close",
        "outcome": "suppressed",
        "peers": 1,
    }
    assert staging.completed_threads == []
    assert first.finished and not first.pending

    two = await second.complete(reason="idle_timeout")
    assert two == {
        "thread_id": thread,
        "delivered": True,
        "reason": "idle_timeout",
        "outcome": "sent",
    }
    assert staging.completed_threads == [thread]
    assert (await first.complete(reason="close"))["outcome"] == "suppressed"
    assert staging.completed_threads == [thread]
    assert lease_files(leases) == []


async def test_one_successful_post_per_session(
    staging: StagingServer, genie: GenieClient, leases: ThreadLeases
) -> None:
    thread = new_thread()
    signal_ = CompletionSignal(genie, timeout=2.0, leases=leases, thread_id=thread)
    signal_.hold()
    first = await signal_.complete(reason="idle_timeout")
    again = await signal_.complete(reason="close")
    assert first["outcome"] == "sent" and first["delivered"] is True
    assert again == {
        "thread_id": thread,
        "delivered": True,
        "reason": "close",
        "outcome": "already_sent",
    }
    assert staging.completed_threads == [thread]
    assert signal_.posts == 1 and signal_.delivered


async def test_concurrent_triggers_share_one_post(
    staging: StagingServer, genie: GenieClient, leases: ThreadLeases
) -> None:
    thread = new_thread()
    staging.faults.genie_delay(0.2)
    signal_ = CompletionSignal(genie, timeout=2.0, leases=leases, thread_id=thread)
    signal_.hold()
    a, b = await asyncio.gather(signal_.complete(reason="close"), signal_.complete(reason="x"))
    assert sorted([a["outcome"], b["outcome"]]) == ["already_sent", "sent"]
    assert staging.completed_threads == [thread]


async def test_a_failed_post_is_retried_by_a_later_trigger(
    staging: StagingServer, genie: GenieClient, leases: ThreadLeases
) -> None:
    thread = new_thread()
    staging.faults.genie_status(500, times=1)
    signal_ = CompletionSignal(genie, timeout=2.0, leases=leases, thread_id=thread)
    signal_.hold()
    failed = await signal_.complete(reason="idle_timeout")
    assert failed == {
        "thread_id": thread,
        "delivered": False,
        "reason": "idle_timeout",
        "outcome": "http_error",
        "status": 500,
    }
    assert staging.completed_threads == [] and signal_.pending
    retried = await signal_.complete(reason="close")
    assert retried["outcome"] == "sent"
    assert staging.completed_threads == [thread]
    assert signal_.posts == 2


async def test_no_post_without_a_thread(
    staging: StagingServer, genie: GenieClient, leases: ThreadLeases
) -> None:
    signal_ = CompletionSignal(genie, timeout=2.0, leases=leases)
    signal_.hold()  # nothing known yet: no lease
    result = await signal_.complete(reason="close")
    assert result == {
        "thread_id": None,
        "delivered": False,
        "reason": "close",
        "outcome": "no_thread",
    }
    assert not signal_.pending and staging.completed_threads == []
    # The thread becomes known later: a later trigger sends.
    thread = new_thread()
    signal_.hold(thread)
    assert (await signal_.complete(reason="close"))["outcome"] == "sent"
    assert staging.completed_threads == [thread]


async def test_disabled_and_no_genie(staging: StagingServer, leases: ThreadLeases) -> None:
    thread = new_thread()
    disabled = CompletionSignal(None, timeout=1.0, leases=leases, thread_id=thread, enabled=False)
    disabled.hold()
    assert leases.others_alive(thread) == 0  # a disabled session takes part in nothing
    assert (await disabled.complete())["outcome"] == "disabled"
    nobody = CompletionSignal(None, timeout=1.0, leases=leases, thread_id=thread)
    nobody.hold()
    assert not nobody.pending
    assert (await nobody.complete())["outcome"] == "no_genie"
    assert leases.others_alive(thread) == 0
    assert staging.completed_threads == []


async def test_abandon_leaves_the_thread_open(leases: ThreadLeases, genie: GenieClient) -> None:
    thread = new_thread()
    signal_ = CompletionSignal(genie, timeout=1.0, leases=leases, thread_id=thread)
    signal_.hold()
    assert signal_.pending and leases.others_alive(thread) == 1
    signal_.abandon()  # server end / fatal end
    assert not signal_.pending and leases.others_alive(thread) == 0


async def test_unreachable_genie_never_raises(leases: ThreadLeases) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    genie = GenieClient(f"http://127.0.0.1:{port}/genie", "tok-unreachable")
    try:
        signal_ = CompletionSignal(genie, timeout=2.0, leases=leases, thread_id=new_thread())
        signal_.hold()
        started = time.monotonic()
        result = await signal_.complete(reason="close")
        assert time.monotonic() - started < 2.0
    finally:
        await genie.close()
    assert result["outcome"] == "network_error" and result["delivered"] is False
    assert signal_.pending  # a later trigger may retry


async def test_a_slow_backend_is_bounded_by_the_timeout(
    staging: StagingServer, genie: GenieClient, leases: ThreadLeases
) -> None:
    staging.faults.genie_delay(3.0)
    signal_ = CompletionSignal(genie, timeout=0.3, leases=leases, thread_id=new_thread())
    started = time.monotonic()
    result = await signal_.complete(reason="close")
    elapsed = time.monotonic() - started
    assert result["outcome"] == "timeout" and result["delivered"] is False
    # It waited its timeout (a busy machine only makes that longer), and it gave up before
    # the server's answer at 3 s: a hang guard, not a speed claim.
    assert elapsed >= 0.25
    assert elapsed < HANG_GUARD < 3.0


async def test_cancellation_leaves_it_retryable(
    staging: StagingServer, genie: GenieClient, leases: ThreadLeases
) -> None:
    thread = new_thread()
    staging.faults.genie_delay(1.0)
    signal_ = CompletionSignal(genie, timeout=2.0, leases=leases, thread_id=thread)
    task = asyncio.ensure_future(signal_.complete(reason="close"))
    assert await until(lambda: signal_.posts == 1, 2)  # the POST is out; the server holds it
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert signal_.state == "open" and signal_.pending
    staging.faults.genie_delay(0)
    assert (await signal_.complete(reason="close"))["outcome"] == "sent"


async def test_a_second_trigger_survives_the_first_ones_cancellation(
    staging: StagingServer, genie: GenieClient, leases: ThreadLeases
) -> None:
    thread = new_thread()
    staging.faults.genie_delay(0.3)
    signal_ = CompletionSignal(genie, timeout=2.0, leases=leases, thread_id=thread)
    first = asyncio.ensure_future(signal_.complete(reason="idle_timeout"))
    # The first trigger's POST is out (the server holds it 0.3 s)...
    assert await until(lambda: signal_.state == "inflight" and signal_.posts == 1, 2)
    second = asyncio.ensure_future(signal_.complete(reason="close"))
    await asyncio.sleep(0)  # ...and the second runs up to its wait on that POST
    assert not second.done()
    first.cancel()
    result = await second  # not cancelled itself: it sends
    assert first.cancelled()
    assert result["outcome"] == "sent" and result["reason"] == "close"
    assert signal_.delivered
    assert signal_.posts == 2  # its own POST, once the first one was cancelled


def test_outcomes_are_listed() -> None:
    assert {"sent", "already_sent", "suppressed", "no_thread", "no_genie"} <= OUTCOMES
    assert {"disabled", "http_error", "network_error", "timeout"} <= OUTCOMES


# -- staging genie routes ----------------------------------------------------------------------


async def test_tool_response_route(staging: StagingServer, genie: GenieClient) -> None:
    ok = await genie.tool_response(tool_name="t", call_id="c1", response={"v": 1}, timeout=2.0)
    assert ok.ok
    assert staging.tool_responses == [
        {"tool_name": "t", "tool_id": "c1", "tool_invocation_id": "c1", "response": {"v": 1}}
    ]
    staging.faults.genie_status(503, times=1)
    failed = await genie.tool_response(tool_name="t", call_id="c2", response=None, timeout=2.0)
    assert (failed.ok, failed.status) == (False, 503)
    intruder = GenieClient(staging.genie_url, "wrong-token")
    try:
        denied = await intruder.tool_response(tool_name="t", call_id="c3", response=1, timeout=2)
        assert (denied.ok, denied.status) == (False, 401)
        denied = await intruder.session_completed("thr-x", 2.0)
        assert (denied.ok, denied.status) == (False, 401)
    finally:
        await intruder.close()
    assert len(staging.tool_responses) == 1 and staging.completed_threads == []


# -- shutdown hooks ----------------------------------------------------------------------------


async def test_signal_runs_callbacks_then_restores_and_redelivers(hooks: ShutdownHooks) -> None:
    seen: list[str] = []
    delivered = asyncio.Event()
    loop = asyncio.get_running_loop()

    def previous(signum: int, frame: FrameType | None) -> None:
        seen.append("previous")
        loop.call_soon_threadsafe(delivered.set)

    class Session:
        async def close(self) -> None:
            await asyncio.sleep(0.05)  # the scenario: a close that takes a moment
            seen.append("close")

    kept, dropped = Session(), Session()
    old = signal.signal(signal.SIGUSR1, previous)
    try:
        hooks.register(kept.close)
        hooks.register(dropped.close)
        del dropped  # held weakly: a forgotten session is not kept alive nor closed
        unregister = hooks.register(lambda: seen.append("unregistered"))
        unregister()
        assert hooks.install(signals=(signal.SIGUSR1,)) == (signal.SIGUSR1,)
        assert signal.getsignal(signal.SIGUSR1) is not previous
        os.kill(os.getpid(), signal.SIGUSR1)
        await asyncio.wait_for(delivered.wait(), 3.0)
        assert seen == ["close", "previous"]
        assert hooks.signalled == signal.SIGUSR1
        assert signal.getsignal(signal.SIGUSR1) is previous
        assert hooks.installed == ()
    finally:
        signal.signal(signal.SIGUSR1, old)


async def test_signal_grace_bounds_a_stuck_callback(hooks: ShutdownHooks) -> None:
    delivered = asyncio.Event()
    loop = asyncio.get_running_loop()

    def previous(signum: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(delivered.set)

    async def stuck() -> None:
        await asyncio.sleep(30)  # the scenario: a callback that never finishes in time

    old = signal.signal(signal.SIGUSR2, previous)
    try:
        hooks.grace = 0.2
        hooks.register(stuck)
        hooks.install(signals=(signal.SIGUSR2,))
        started = time.monotonic()
        os.kill(os.getpid(), signal.SIGUSR2)
        await asyncio.wait_for(delivered.wait(), 3.0)
        # The grace (0.2 s) cut the stuck callback (30 s): a hang guard, not a speed claim.
        assert time.monotonic() - started < HANG_GUARD < 30
    finally:
        signal.signal(signal.SIGUSR2, old)


async def test_ignored_signals_stay_ignored(hooks: ShutdownHooks) -> None:
    old = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        assert hooks.install(signals=(signal.SIGUSR1,)) == ()
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_a_disposition_that_cannot_be_restored_is_logged_not_hidden(
    hooks: ShutdownHooks, caplog: pytest.LogCaptureFixture
) -> None:
    hooks._installed.append(_Installed(signal.SIGUSR1, object(), None))  # not a handler
    with caplog.at_level(logging.DEBUG, logger="avatar_sdk"):
        hooks.uninstall()  # never raises: the other signals are still restored
    assert f"restoring the disposition of signal {int(signal.SIGUSR1)} failed" in caplog.text
    assert "TypeError" in caplog.text
    assert hooks.installed == ()


async def test_exit_hook_sends_pending_completions_once_per_thread(
    staging: StagingServer, genie: GenieClient, leases: ThreadLeases, hooks: ShutdownHooks
) -> None:
    shared, alone, done = new_thread(), new_thread(), new_thread()
    signals = []
    for thread in (shared, shared, alone, done):
        signal_ = CompletionSignal(genie, timeout=2.0, leases=leases, thread_id=thread)
        signal_.hold()
        hooks.track(signal_)
        signals.append(signal_)
    await signals[3].complete(reason="close")  # already completed: not pending at exit
    abandoned = CompletionSignal(genie, timeout=2.0, leases=leases, thread_id=new_thread())
    abandoned.hold()
    abandoned.abandon()
    hooks.track(abandoned)

    results = await asyncio.to_thread(hooks.run_exit_hook)
    outcomes = sorted(r["outcome"] for r in results)
    assert outcomes == ["sent", "sent", "suppressed"]
    assert sorted(staging.completed_threads) == sorted([shared, alone, done])
    assert lease_files(leases) == []


async def test_exit_hook_is_bounded(
    staging: StagingServer, genie: GenieClient, leases: ThreadLeases, hooks: ShutdownHooks
) -> None:
    """The exit bound caps a completion that would wait longer: the hook returns before the
    server's answer (3 s). What it reports is a race by design (the completion's own
    timeout is the bound too), so only "nothing delivered" is asserted here; the next test
    pins the result."""
    staging.faults.genie_delay(3.0)
    hooks.exit_bound = 0.3
    signal_ = CompletionSignal(genie, timeout=5.0, leases=leases, thread_id=new_thread())
    signal_.hold()
    hooks.track(signal_)
    started = time.monotonic()
    results = await asyncio.to_thread(hooks.run_exit_hook)
    assert time.monotonic() - started < HANG_GUARD < 3.0  # before the answer: capped
    assert not any(r.get("delivered") for r in results)


async def test_exit_hook_reports_a_completion_that_timed_out(
    staging: StagingServer, genie: GenieClient, leases: ThreadLeases, hooks: ShutdownHooks
) -> None:
    """A completion whose own timeout ends it within the exit bound is reported: exactly one
    payload, a timeout, not delivered (an empty list fails)."""
    staging.faults.genie_delay(3.0)
    hooks.exit_bound = HANG_GUARD
    signal_ = CompletionSignal(genie, timeout=0.2, leases=leases, thread_id=new_thread())
    signal_.hold()
    hooks.track(signal_)
    results = await asyncio.to_thread(hooks.run_exit_hook)
    assert [(r["outcome"], r["delivered"]) for r in results] == [("timeout", False)]


def test_exit_hook_without_pending_work_never_waits(hooks: ShutdownHooks) -> None:
    """Nothing pending: no worker, no wait for the exit bound (set far above the guard)."""
    hooks.exit_bound = 60.0
    started = time.monotonic()
    assert hooks.run_exit_hook() == []
    assert time.monotonic() - started < HANG_GUARD  # catches waiting the bound, not speed


# -- idle timer --------------------------------------------------------------------------------


async def test_idle_timer_fires_once_after_inactivity() -> None:
    clock = FakeClock()
    fired: list[float] = []

    async def on_idle() -> None:
        fired.append(clock.monotonic())

    timer = IdleTimer(0.15, on_idle, clock=clock)
    started = clock.monotonic()
    timer.start()
    await clock.advance(0.1)
    timer.touch()  # activity: the countdown restarts
    await clock.advance(0.1)
    assert fired == [] and timer.armed
    await clock.advance(0.15)
    assert fired == [pytest.approx(started + 0.25)]  # 0.15 s after the touch, once
    assert timer.fired and not timer.armed
    timer.touch()  # no re-arm after firing
    assert not timer.armed


async def test_idle_timer_zero_disables_and_cancel_stops() -> None:
    fired: list[int] = []
    disabled = IdleTimer(0, lambda: fired.append(1))
    disabled.start()
    assert not disabled.armed
    clock = FakeClock()
    timer = IdleTimer(0.05, lambda: fired.append(2), clock=clock)
    timer.start()
    timer.cancel()
    await clock.advance(1.0)
    assert fired == []
    assert clock.sleepers == 0
