"""Thread leases: which live sessions, in this process or another on this host, hold a
conversation thread. ``session_completed`` must not fire while another holder is alive.

One lock file per holder, kept open with an exclusive ``fcntl.flock`` for as long as the
lease is held; a file that can be locked belongs to a dead process (its lock died with it),
so a crashed holder never blocks anyone.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import secrets
import stat
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Final

if sys.platform != "win32":
    import fcntl

log = logging.getLogger(__name__)

#: Environment variable overriding the lease directory.
LEASE_DIR_ENV: Final = "AVATAR_SDK_LEASE_DIR"
_SUFFIX: Final = ".lease"
_TMP_PREFIX: Final = ".tmp-"
#: A never-published file older than this was left by a holder that died while creating it.
_TMP_MAX_AGE: Final = 60.0
_HASH_CHARS: Final = 32

# ---------------------------------------------------------------------------------------------
# Thread leases
# ---------------------------------------------------------------------------------------------

_registry_lock = threading.Lock()
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
    """The releasable part of a lease (kept apart so a finalizer can release it)."""

    token: str
    thread_id: str | None = None
    fd: int | None = None
    path: str | None = None

    def release(self) -> None:
        with _registry_lock:
            if self.thread_id is not None:
                holders = _local_holders.get(self.thread_id)
                if holders is not None:
                    holders.discard(self.token)
                    if not holders:
                        del _local_holders[self.thread_id]
            self.thread_id = None
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
    child neither keeps a dead parent's locks alive nor counts the parent's holders twice."""
    global _registry_lock  # noqa: PLW0603 - a lock copied mid-use by fork() is unusable
    _registry_lock = threading.Lock()
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
        one runs them while a conversation goes on)."""
        mine = exclude.token if exclude is not None else None
        with _registry_lock:
            local = len(_local_holders.get(thread_id, set()) - {mine})
            own = set(_own)
        return local + self._foreign_alive(thread_id, own)

    def _foreign_alive(self, thread_id: str, own: set[str]) -> int:
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
        if time.time() - os.lstat(path).st_mtime > _TMP_MAX_AGE:
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
        """Hold ``thread_id`` (a different thread held before is released first)."""
        if not isinstance(thread_id, str) or not thread_id:
            raise ValueError("thread_id must be a non-empty string")
        if self._held.thread_id == thread_id:
            return
        self._held.release()
        with _registry_lock:
            _own[self._held.token] = self._held
            _local_holders.setdefault(thread_id, set()).add(self._held.token)
            self._held.thread_id = thread_id
        self._leases._create_file(self._held, thread_id)

    def release(self) -> None:
        """Stop holding (idempotent)."""
        self._held.release()

    def peers(self, thread_id: str | None = None) -> int:
        """Other live holders of ``thread_id`` (default: the thread held)."""
        target = thread_id or self._held.thread_id
        return 0 if target is None else self._leases.others_alive(target, exclude=self)

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
