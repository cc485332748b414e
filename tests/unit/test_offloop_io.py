"""File I/O stays off the event loop: the journal's writes and the thread leases' lock
files are done by a thread of their own, in order, with the same results as before."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

if sys.platform != "win32":
    import fcntl

from avatar_sdk.events.bus import Event
from avatar_sdk.events.journal import JOURNALED, Journal
from avatar_sdk.lifecycle.completion import CompletionSignal, ThreadLeases
from avatar_sdk.redact import REDACTED, register_secret
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.net.genie import GenieClient

SECRET = "tok-" + uuid.uuid4().hex  # registered like a session token
#: Longest a gated write waits (s): a hang guard only, never reached in a passing run.
GATE_BOUND = 10.0


class ThreadRecordingFile:
    """Wraps the journal's file: notes the thread of every write/flush; with ``gate``, every
    write waits until the gate opens (a disk that does not answer until the test says so)."""

    def __init__(self, inner: IO[str], gate: threading.Event | None = None) -> None:
        self.inner = inner
        self.gate = gate
        self.loop_thread = threading.current_thread()
        self.threads: list[threading.Thread] = []

    def write(self, text: str) -> int:
        self.threads.append(threading.current_thread())
        if self.gate is not None and threading.current_thread() is not self.loop_thread:
            # A write wrongly made on the loop does not wait (the test would hang): it is
            # noted on the loop's thread, which the test asserts never happens.
            self.gate.wait(GATE_BOUND)
        return self.inner.write(text)

    def flush(self) -> None:
        self.threads.append(threading.current_thread())
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()


def _events() -> list[Event]:
    """A session's worth of events: journaled ones, content that must stay out, a secret."""
    events = []
    for i in range(300):
        events.append(Event("state_changed", {"from": f"s{i}", "to": f"s{i + 1}"}))
        events.append(Event("agent_text", {"text": "private words"}))  # not journaled
        if i % 50 == 0:
            events.append(Event("error", {"message": f"bad auth {SECRET}", "n": i}))
    events.append(Event("ended", {"reason": "closed"}))
    return events


def _expected(events: list[Event], label: str, start: float) -> list[dict[str, Any]]:
    """What the journal has always written for ``events`` (``at`` aside: a wall clock)."""
    return [
        {
            "t": round(e.at - start, 4),
            "session": label,
            "event": e.name,
            "data": json.loads(json.dumps(e.data).replace(SECRET, REDACTED)),
        }
        for e in events
        if e.name in JOURNALED
    ]


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    register_secret(SECRET)
    return tmp_path / "session.jsonl"


async def test_journal_writes_off_the_loop_in_order_with_unchanged_content(
    journal_path: Path,
) -> None:
    journal = Journal(journal_path, session_label="sess-1")
    spy = ThreadRecordingFile(journal._writer.file)
    journal._writer.file = spy
    events = _events()
    for event in events:
        journal.record(event)
    await journal.aclose()
    assert spy.threads, "nothing was written"
    assert threading.current_thread() not in spy.threads
    lines = _read(journal_path)
    assert [{k: v for k, v in line.items() if k != "at"} for line in lines] == _expected(
        events, "sess-1", journal._start
    )
    assert all(line["at"].endswith("+00:00") for line in lines)
    assert not any(SECRET in json.dumps(line) for line in lines)
    assert journal.lines == len(lines)


async def test_a_slow_disk_never_stalls_the_loop_and_close_still_flushes_everything(
    journal_path: Path,
) -> None:
    journal = Journal(journal_path, session_label="sess-2")
    disk = threading.Event()  # closed: every write blocks until the test opens it
    journal._writer.file = slow = ThreadRecordingFile(journal._writer.file, gate=disk)
    for i in range(10):
        journal.record(Event("state_changed", {"i": i}))
    # Every record() returned while the disk was blocked: none ran a write on the loop.
    assert threading.current_thread() not in slow.threads
    disk.set()
    journal.close()  # the sync close (what endings.py calls) still waits for every line
    assert slow.threads and threading.current_thread() not in slow.threads
    assert [line["data"]["i"] for line in _read(journal_path)] == list(range(10))
    journal.record(Event("state_changed", {"i": 99}))  # after close: ignored
    journal.close()  # idempotent
    assert len(_read(journal_path)) == 10


async def test_journal_gap_is_recorded_when_the_queue_overflows(journal_path: Path) -> None:
    journal = Journal(journal_path, session_label="sess-3", max_pending=5)
    release = threading.Event()
    inner = journal._writer.file

    class Stalled(ThreadRecordingFile):
        def write(self, text: str) -> int:
            release.wait(5)
            return inner.write(text)

    journal._writer.file = Stalled(inner)
    for i in range(40):
        journal.record(Event("state_changed", {"i": i}))
    release.set()
    await journal.aclose()
    lines = _read(journal_path)
    gaps = [line for line in lines if line["event"] == "journal_gap"]
    kept = [line["data"]["i"] for line in lines if line["event"] == "state_changed"]
    assert kept == sorted(kept) and kept[0] == 0
    assert gaps and sum(g["data"]["dropped"] for g in gaps) == 40 - len(kept)
    assert journal.dropped == 40 - len(kept)


# -- thread leases -----------------------------------------------------------------------------

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="fcntl lock files")


@pytest.fixture
def lease_io_threads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """Threads (names) of every lock-file operation under ``tmp_path``."""
    seen: list[str] = []
    root = str(tmp_path)

    def note(path: Any) -> None:
        if isinstance(path, str | os.PathLike) and str(path).startswith(root):
            seen.append(threading.current_thread().name)

    def wrap(name: str, module: Any = os) -> None:
        original = getattr(module, name)

        def spy(path: Any, *args: Any, **kwargs: Any) -> Any:
            note(path)
            return original(path, *args, **kwargs)

        monkeypatch.setattr(module, name, spy)

    for name in ("open", "unlink", "rename", "scandir", "lstat"):
        wrap(name)
    original_flock = fcntl.flock

    def flock(fd: int, op: int) -> None:
        seen.append(threading.current_thread().name)
        original_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    yield seen


def _thread() -> str:
    return f"thr-io-{uuid.uuid4().hex[:10]}"


@posix_only
async def test_lease_files_are_never_touched_on_the_loop_thread(
    tmp_path: Path, lease_io_threads: list[str]
) -> None:
    directory = tmp_path / "leases"
    leases = ThreadLeases(directory)
    thread = _thread()
    first = CompletionSignal(None, timeout=1.0, leases=leases, thread_id=thread)
    second = CompletionSignal(None, timeout=1.0, leases=leases, thread_id=thread)
    first.hold()  # e.g. the thread id learned in a socket event handler
    second.hold()
    await first.lease.settled()
    assert len(await asyncio.to_thread(_lease_files, directory)) == 2
    assert (await first.complete())["outcome"] == "suppressed"
    second.abandon()
    await second.lease.settled()
    assert await asyncio.to_thread(_lease_files, directory) == []
    assert lease_io_threads, "no lock-file operation was seen"
    assert threading.current_thread().name not in lease_io_threads


def _lease_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.lease"))


@posix_only
async def test_two_holders_finishing_together_send_exactly_once(
    tmp_path: Path, staging: StagingServer
) -> None:
    genie = GenieClient(staging.genie_url, staging.token)
    try:
        leases = ThreadLeases(tmp_path / "leases")
        thread = _thread()
        holders = [
            CompletionSignal(genie, timeout=2.0, leases=leases, thread_id=thread) for _ in range(2)
        ]
        for holder in holders:
            holder.hold()
        results = await asyncio.gather(*(h.complete() for h in holders))
        assert sorted(r["outcome"] for r in results) == ["sent", "suppressed"]
        assert staging.completed_threads == [thread]
        assert _lease_files(tmp_path / "leases") == []
    finally:
        await genie.close()


@posix_only
def test_without_a_loop_lease_calls_stay_synchronous(tmp_path: Path) -> None:
    leases = ThreadLeases(tmp_path / "leases")
    thread = _thread()
    lease = leases.acquire(thread)  # e.g. a child process that prints READY right after
    assert len(_lease_files(tmp_path / "leases")) == 1
    assert leases.others_alive(thread) == 1
    lease.release()
    assert _lease_files(tmp_path / "leases") == []
