"""Thread leases: which live sessions, in this process or another on this host, hold a
conversation thread. ``session_completed`` must not fire while another holder is alive.

One lock file per holder, kept open with an exclusive ``fcntl.flock`` for as long as the
lease is held; a file that can be locked belongs to a dead process (its lock died with it),
so a crashed holder never blocks anyone.

Who holds what *in this process* is plain memory, updated at once by every call. The lock
files (create, unlink, probe) are disk I/O, and leases are taken and dropped from socket
event handlers: called on a running event loop, :meth:`ThreadLease.acquire` and
:meth:`ThreadLease.release` only queue their file work to one ordered I/O thread per
process and return (:meth:`ThreadLease.settled` waits for it). Without a running loop they
wait for it, as before. One thread and one queue keep every file operation of the process
in call order, so a holder's own unlink always happens before its own count of the others
(:meth:`ThreadLeases.others_alive_async`): of two holders finishing together, at least one
still sees none and sends, in this process or across processes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import hashlib
import json
import os
import queue
import secrets
import stat
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from ..clock import SYSTEM_CLOCK
from ..logs import sdk_logger

if sys.platform != "win32":
    import fcntl

log = sdk_logger(__name__)

T = TypeVar("T")

#: Environment variable overriding the lease directory.
LEASE_DIR_ENV: Final = "AVATAR_SDK_LEASE_DIR"
_SUFFIX: Final = ".lease"
_TMP_PREFIX: Final = ".tmp-"
#: A never-published file older than this was left by a holder that died while creating it.
_TMP_MAX_AGE: Final = 60.0
_HASH_CHARS: Final = 32

# ---------------------------------------------------------------------------------------------
# The lease I/O thread
# ---------------------------------------------------------------------------------------------

_Job = tuple[Callable[[], object], "concurrent.futures.Future[object]"]


class _LeaseIO:
    """One daemon thread running every lock-file operation of the process, in call order.

    Daemon: at exit a queued unlink may never run, which is fine by design (the lock dies
    with the process, and the next prober removes the file).
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _started(self) -> bool:
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="avatar-sdk-leases", daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # no new threads (interpreter shutdown)
                    return False
                self._thread = thread
            return True

    def in_worker(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, job: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Queue ``job`` after every job queued before it (run here if no thread can)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        if self.in_worker() or not self._started():
            _run_job(job, future)
        else:
            self._jobs.put((job, future))  # type: ignore[arg-type]
        return future

    def _run(self) -> None:
        while True:
            job, future = self._jobs.get()
            _run_job(job, future)


def _run_job(job: Callable[[], T], future: concurrent.futures.Future[T]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(job())
    except BaseException as exc:
        future.set_exception(exc)


_io = _LeaseIO()


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _log_failure(future: concurrent.futures.Future[object]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("thread lease file operation failed: %r", future.exception())


def _file_work(job: Callable[[], object]) -> None:
    """Run ``job`` in order with the other lease file work: queued and not waited for on a
    running event loop (the loop never waits for the disk), waited for otherwise."""
    future = _io.submit(job)
    if _on_loop():
        future.add_done_callback(_log_failure)
    else:
        future.result()


def _file_result(job: Callable[[], T]) -> T:
    """Run ``job`` in order with the other lease file work and wait for its result."""
    return _io.submit(job).result()


async def _file_result_async(job: Callable[[], T]) -> T:
    """Run ``job`` in order with the other lease file work, awaiting its result."""
    return await asyncio.wrap_future(_io.submit(job))


# ---------------------------------------------------------------------------------------------
# Thread leases
# ---------------------------------------------------------------------------------------------

#: Reentrant: a holder's finalizer may run (garbage collection) while this thread holds it.
_registry_lock = threading.RLock()
#: thread id -> tokens of the live holders in this process.
_local_holders: dict[str, set[str]] = {}
#: every live holder of this process by token (their files are never probed by flock).
_own: dict[str, _Held] = {}


def default_lease_dir() -> Path:
    """``$AVATAR_SDK_LEASE_DIR``, else ``$XDG_RUNTIME_DIR/avatar-sdk/threads``, else
    ``<tempdir>/avatar-sdk-<uid>/threads``."""
    override = os.environ.get(LEASE_DIR_ENV)
    if override:
        return Path(override)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "avatar-sdk" / "threads"
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"avatar-sdk-{uid}" / "threads"


def _thread_key(thread_id: str) -> str:
    return hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]


def _private_dir(path: Path) -> bool:
    """Create ``path`` (mode 0700) if needed; True when it is a real directory owned by us
    that nobody else can write to."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        return False
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


@dataclass
class _Held:
    """The releasable part of a lease (kept apart so a finalizer can release it).

    ``thread_id`` is this process's bookkeeping (changed by the caller at once); ``fd`` and
    ``path`` are the lock file, only touched by lease file work (:func:`_file_work`).
    """

    token: str
    thread_id: str | None = None
    fd: int | None = None
    path: str | None = None

    def forget(self) -> None:
        """Stop counting this holder in this process (no I/O)."""
        with _registry_lock:
            if self.thread_id is not None:
                holders = _local_holders.get(self.thread_id)
                if holders is not None:
                    holders.discard(self.token)
                    if not holders:
                        del _local_holders[self.thread_id]
            self.thread_id = None

    def release(self) -> None:
        """Forget now; the lock file goes with the file work (see :func:`_file_work`)."""
        self.forget()
        _file_work(self.drop_file)

    def drop_file(self) -> None:
        """Unlink and close this holder's lock file, if any (lease file work)."""
        fd, path, self.fd, self.path = self.fd, self.path, None, None
        if fd is not None:
            # Unlink while still holding the lock, then close: a prober never sees a
            # lockable file that is still in use.
            if path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            with contextlib.suppress(OSError):
                os.close(fd)

    def finalize(self) -> None:
        self.release()
        with _registry_lock:
            _own.pop(self.token, None)


def _forget_after_fork() -> None:
    """In a forked child: the parent's leases are the parent's. Close the inherited file
    descriptors (without unlinking: the files are the parent's) and start empty, so the
    child neither keeps a dead parent's locks alive nor counts the parent's holders twice.
    The parent's I/O thread does not exist here: a fresh one starts on first use."""
    global _registry_lock, _io  # noqa: PLW0603 - a lock copied mid-use by fork() is unusable
    _registry_lock = threading.RLock()
    _io = _LeaseIO()
    for held in list(_own.values()):
        if held.fd is not None:
            with contextlib.suppress(OSError):
                os.close(held.fd)
        held.fd, held.path, held.thread_id = None, None, None
    _own.clear()
    _local_holders.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


class ThreadLeases:
    """The registry of thread holders: in-process always, cross-process through lock files.

    ``directory``: where lock files live (default :func:`default_lease_dir`, read when the
    registry is created). It must be a directory owned by this user and writable by nobody
    else; otherwise (or with ``cross_process=False``, or on Windows) only holders in this
    process are seen.
    """

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, *, cross_process: bool = True
    ) -> None:
        self._requested = Path(directory) if directory is not None else None
        self._cross_process = cross_process and sys.platform != "win32"
        self._directory: Path | None = None
        self._checked = False
        self._dir_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ThreadLeases dir={str(self.directory) if self.directory else None!r}>"

    @property
    def directory(self) -> Path | None:
        """The lock-file directory in use, or None when leases are in-process only."""
        with self._dir_lock:
            if not self._checked:
                self._checked = True
                self._directory = self._prepare()
            return self._directory

    def _prepare(self) -> Path | None:
        if not self._cross_process:
            return None
        explicit = self._requested is not None or bool(os.environ.get(LEASE_DIR_ENV))
        target = self._requested or default_lease_dir()
        try:
            chain = [target] if explicit else [target.parent, target]
            chain[0].parent.mkdir(parents=True, exist_ok=True)
            for path in chain:
                if not _private_dir(path):
                    log.warning("thread lease directory %s is not private; in-process only", path)
                    return None
        except OSError as exc:
            log.warning("thread lease directory %s unusable (%s); in-process only", target, exc)
            return None
        return target

    def holder(self) -> ThreadLease:
        """A new holder (one per session); it holds nothing until :meth:`ThreadLease.acquire`."""
        return ThreadLease(self)

    def acquire(self, thread_id: str) -> ThreadLease:
        """A new holder that holds ``thread_id`` at once."""
        lease = self.holder()
        lease.acquire(thread_id)
        return lease

    def others_alive(self, thread_id: str, exclude: ThreadLease | None = None) -> int:
        """How many live holders of ``thread_id`` there are besides ``exclude``: in this
        process, plus lock files of other processes whose lock is still held. Stale files
        (their process died) are removed on the way. A file that cannot be probed counts as
        alive (a missed completion only delays the backend's lifecycle rules; a premature
        one runs them while a conversation goes on). Waits for the disk: on an event loop
        use :meth:`others_alive_async`."""
        local, own = self.local_others(thread_id, exclude)
        return local + _file_result(lambda: self._foreign_alive(thread_id, own))

    async def others_alive_async(self, thread_id: str, exclude: ThreadLease | None = None) -> int:
        """:meth:`others_alive` with the lock-file probing off the event loop."""
        local, own = self.local_others(thread_id, exclude)
        return local + await self.foreign_alive_async(thread_id, own)

    def local_others(
        self, thread_id: str, exclude: ThreadLease | None = None
    ) -> tuple[int, frozenset[str]]:
        """Live holders of ``thread_id`` in this process besides ``exclude`` (no I/O), and
        the tokens of this process's holders (their files are never probed)."""
        mine = exclude.token if exclude is not None else None
        with _registry_lock:
            local = len(_local_holders.get(thread_id, set()) - {mine})
            own = frozenset(_own)
        return local, own

    async def foreign_alive_async(self, thread_id: str, own: frozenset[str]) -> int:
        """Live holders of ``thread_id`` in other processes, probed by the lease I/O thread
        after every file operation queued before (this process's own unlinks included)."""
        return await _file_result_async(lambda: self._foreign_alive(thread_id, own))

    def _foreign_alive(self, thread_id: str, own: frozenset[str]) -> int:
        directory = self.directory
        if directory is None:
            return 0
        prefix = _thread_key(thread_id) + "."
        alive = 0
        try:
            names = [e.name for e in os.scandir(directory)]
        except OSError as exc:
            log.info("thread lease directory unreadable: %s", exc)
            return 0
        for name in names:
            if name.startswith(_TMP_PREFIX):
                _sweep_tmp(os.path.join(directory, name))
                continue
            if not (name.startswith(prefix) and name.endswith(_SUFFIX)):
                continue
            if name[len(prefix) : -len(_SUFFIX)] in own:
                continue  # a holder of this process: counted (or excluded) above
            if _probe_alive(os.path.join(directory, name)):
                alive += 1
        return alive

    def _create_file(self, held: _Held, thread_id: str) -> None:
        """Create, lock, then publish (rename) this holder's file: a published file is
        always locked while its holder lives."""
        directory = self.directory
        if directory is None:
            return
        final = os.path.join(directory, f"{_thread_key(thread_id)}.{held.token}{_SUFFIX}")
        tmp = os.path.join(directory, f"{_TMP_PREFIX}{held.token}")
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd: int | None = None
        try:
            fd = os.open(tmp, flags | getattr(os, "O_CLOEXEC", 0), 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, json.dumps({"pid": os.getpid()}).encode() + b"\n")
            os.rename(tmp, final)
        except OSError as exc:
            log.warning("thread lease file not created (%s); in-process lease only", exc)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                with contextlib.suppress(OSError):
                    os.close(fd)
            return
        held.fd, held.path = fd, final


def _probe_alive(path: str) -> bool:
    """True when another process holds the lock on ``path``; removes the file otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return False  # released meanwhile
    except OSError:
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                # Locked; unless the locker is a concurrent prober that just unlinked it.
                return os.fstat(fd).st_nlink > 0
            return True
        # Lockable: its holder is gone. Remove it if the name still points at this file.
        with contextlib.suppress(OSError):
            here, now = os.fstat(fd), os.stat(path, follow_symlinks=False)
            if (here.st_dev, here.st_ino) == (now.st_dev, now.st_ino):
                os.unlink(path)
                log.debug("removed a stale thread lease")
        return False
    finally:
        os.close(fd)


def _sweep_tmp(path: str) -> None:
    """Remove a never-published file its (dead) creator left behind."""
    with contextlib.suppress(OSError):
        # A file's mtime is on the system's wall clock, shared with other processes: never
        # a session's injected clock.
        if SYSTEM_CLOCK.wall() - os.lstat(path).st_mtime > _TMP_MAX_AGE:
            _probe_alive(path)


class ThreadLease:
    """One holder's lease (one session): holds at most one thread at a time.

    Released by :meth:`release`, and by the garbage collector if the holder is forgotten.
    """

    def __init__(self, leases: ThreadLeases) -> None:
        self._leases = leases
        self._held = _Held(f"{os.getpid()}-{secrets.token_hex(6)}")
        with _registry_lock:
            _own[self._held.token] = self._held
        self._finalizer = weakref.finalize(self, self._held.finalize)

    def __repr__(self) -> str:
        return f"<ThreadLease held={self.held}>"

    @property
    def token(self) -> str:
        """This holder's identity (pid and random part; no thread id, no secret)."""
        return self._held.token

    @property
    def thread_id(self) -> str | None:
        return self._held.thread_id

    @property
    def held(self) -> bool:
        return self._held.thread_id is not None

    @property
    def leases(self) -> ThreadLeases:
        return self._leases

    def acquire(self, thread_id: str) -> None:
        """Hold ``thread_id`` (a different thread held before is released first).

        This process counts the holder at once. Its lock file, which other processes see,
        is created by the lease I/O thread: on a running event loop this returns without
        waiting for it (:meth:`settled` does), elsewhere once the file exists.
        """
        if not isinstance(thread_id, str) or not thread_id:
            raise ValueError("thread_id must be a non-empty string")
        if self._held.thread_id == thread_id:
            return
        held, leases = self._held, self._leases
        held.forget()
        with _registry_lock:
            _own[held.token] = held
            _local_holders.setdefault(thread_id, set()).add(held.token)
            held.thread_id = thread_id

        def move_file() -> None:
            held.drop_file()
            leases._create_file(held, thread_id)

        _file_work(move_file)

    def release(self) -> None:
        """Stop holding (idempotent). This process stops counting the holder at once; the
        lock file goes like :meth:`acquire` creates it."""
        self._held.release()

    async def settled(self) -> None:
        """Wait (off the loop) until the lock-file work queued so far is done: after it,
        other processes see what :meth:`acquire` / :meth:`release` did."""
        await _file_result_async(lambda: None)

    def peers(self, thread_id: str | None = None) -> int:
        """Other live holders of ``thread_id`` (default: the thread held). Waits for the
        disk: on an event loop use :meth:`peers_async`."""
        target = thread_id or self._held.thread_id
        return 0 if target is None else self._leases.others_alive(target, exclude=self)

    async def peers_async(self, thread_id: str | None = None) -> int:
        """:meth:`peers` with the lock-file probing off the event loop."""
        target = thread_id or self._held.thread_id
        if target is None:
            return 0
        return await self._leases.others_alive_async(target, exclude=self)

    def close(self) -> None:
        """Release and forget this holder for good."""
        self._finalizer()


_default_leases: ThreadLeases | None = None


def default_leases() -> ThreadLeases:
    """The process-wide registry (directory from :func:`default_lease_dir`)."""
    global _default_leases  # noqa: PLW0603 - one registry per process, created lazily
    with _registry_lock:
        if _default_leases is None:
            _default_leases = ThreadLeases()
        return _default_leases


# ---------------------------------------------------------------------------------------------
# The completion signal
# ---------------------------------------------------------------------------------------------
