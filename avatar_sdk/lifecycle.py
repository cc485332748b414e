"""Session lifecycle: the ``session_completed`` signal (PROTOCOL.md §5) and process shutdown.

Three pieces, each usable on its own:

* :class:`ThreadLeases` / :class:`ThreadLease`: who else holds a conversation thread. In
  this process a module-level registry of live holders; across processes on the same host
  one lock file per (thread, holder) in a private directory, each kept open with an
  exclusive ``fcntl.flock`` for as long as the lease is held. The kernel drops a flock when
  its process dies (even on SIGKILL), so a file that can be locked belongs to a dead holder:
  it is removed and ignored (crash-safe). File names carry a hash of the thread id, never
  the id itself, and files hold only the holder's pid.
* :class:`CompletionSignal`: one session's completion. ``complete()`` releases the
  session's lease, then either stands down (another live holder: ``suppressed``; the last
  holder standing sends) or POSTs ``{"id": thread_id}`` once. At most one successful POST
  per session; a failed one may be retried by a later trigger; it never raises (except
  ``CancelledError``) and is bounded by ``timeout``.
* :class:`ShutdownHooks`: opt-in SIGTERM/SIGINT handling on the running loop (registered
  async callbacks, usually ``session.close``, run within ``grace`` seconds, then the
  previous disposition is restored and the signal delivered again), and an interpreter-exit
  hook that sends the completions still pending from a fresh event loop in a daemon thread,
  never delaying exit by more than ``exit_bound`` seconds.

What fires and what does not is the caller's policy (CONTRACT.md): ``close()``, leaving
``async with``, an idle timeout and process shutdown complete the thread; recovery tiers,
pause/resume and transport replacement never touch this module; a server-ended or fatal end
calls :meth:`CompletionSignal.abandon` (unless ``complete_on_server_end``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import copy
import errno
import hashlib
import inspect
import json
import logging
import os
import secrets
import signal
import stat
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .transport.genie import GenieClient, GenieOutcome

if sys.platform != "win32":
    import fcntl

log = logging.getLogger(__name__)

__all__ = [
    "LEASE_DIR_ENV",
    "OUTCOMES",
    "CompletionSignal",
    "IdleTimer",
    "ShutdownHooks",
    "ThreadLease",
    "ThreadLeases",
    "default_hooks",
    "default_lease_dir",
    "default_leases",
]

#: Environment variable overriding the lease directory.
LEASE_DIR_ENV: Final = "AVATAR_SDK_LEASE_DIR"
#: Every ``outcome`` a completion can report.
OUTCOMES: Final = frozenset(
    {
        "sent",
        "already_sent",
        "suppressed",
        "no_thread",
        "no_genie",
        "disabled",
        "http_error",
        "network_error",
        "timeout",
    }
)
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


def _detached(genie: GenieClient) -> GenieClient:
    """A copy of ``genie`` with its own HTTP session (for another event loop)."""
    clone = copy.copy(genie)
    clone._http = None
    clone._own_http = True
    return clone


class CompletionSignal:
    """One session's ``session_completed`` signal.

    ``genie``: where to POST (None: ``no_genie``). ``timeout``: the POST's own deadline
    (``SessionConfig.session_complete_timeout``). ``leases``: the holder registry (default
    :func:`default_leases`). ``enabled=False``: never POSTs, holds no lease (outcome
    ``disabled``). ``thread_id``: a thread known from the start (it counts as known; the
    lease is taken by :meth:`hold`).

    Payload of :meth:`complete` (the ``session_completed`` event plus details):
    ``{thread_id, delivered, reason, outcome}``, plus ``status`` (int or None) for
    ``http_error`` and ``peers`` (int) for ``suppressed``. ``delivered`` is True when the
    backend has this session's signal (``sent``, ``already_sent``).

    Use from one event loop (the exit hook runs after that loop is gone).
    """

    def __init__(
        self,
        genie: GenieClient | None,
        *,
        timeout: float,
        leases: ThreadLeases | None = None,
        enabled: bool = True,
        thread_id: str | None = None,
    ) -> None:
        if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
            raise ValueError("thread_id must be a non-empty string")
        self.genie = genie
        self.timeout = max(0.0, float(timeout))
        self.enabled = enabled
        self._lease = (leases or default_leases()).holder()
        self._thread_id = thread_id
        #: ``open`` (nothing final yet), ``inflight``, ``sent`` or ``suppressed``.
        self._state = "open"
        self._abandoned = False
        self._inflight: asyncio.Future[dict[str, Any]] | None = None
        self._last: dict[str, Any] | None = None
        self.posts = 0

    def __repr__(self) -> str:
        return f"<CompletionSignal thread={self._thread_id!r} state={self._state}>"

    @property
    def thread_id(self) -> str | None:
        return self._thread_id

    @property
    def lease(self) -> ThreadLease:
        return self._lease

    @property
    def state(self) -> str:
        return self._state

    @property
    def delivered(self) -> bool:
        return self._state == "sent"

    @property
    def finished(self) -> bool:
        """True once sent or suppressed: further calls do no I/O."""
        return self._state in ("sent", "suppressed")

    @property
    def pending(self) -> bool:
        """Would the exit hook send something: enabled, a genie, a thread, not finished and
        not abandoned."""
        return (
            self.enabled
            and self.genie is not None
            and self._thread_id is not None
            and not self._abandoned
            and self._state in ("open", "inflight")
        )

    def hold(self, thread_id: str | None = None) -> None:
        """Note ``thread_id`` (default: the one known) and hold its lease while the session
        lives. Call when the session starts or learns its thread. No-op when disabled or
        finished."""
        if thread_id is not None:
            if not isinstance(thread_id, str) or not thread_id:
                raise ValueError("thread_id must be a non-empty string")
            self._thread_id = thread_id
        if self._thread_id is None or not self.enabled or self.finished:
            return
        self._abandoned = False
        self._lease.acquire(self._thread_id)

    def abandon(self) -> None:
        """The session ended without completing (server end, fatal end): release the lease
        and leave the thread open; the exit hook skips it. ``complete()`` still works."""
        self._abandoned = True
        self._lease.release()

    async def complete(self, thread_id: str | None = None, reason: str = "close") -> dict[str, Any]:
        """Signal that the conversation genuinely ended (``reason``: the trigger, e.g.
        ``close``, ``idle_timeout``, ``signal``). Never raises except ``CancelledError``."""
        try:
            return await self._complete(thread_id, reason, timeout=self.timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never into close()
            log.warning("session_completed failed unexpectedly: %r", exc)
            return self._payload(thread_id or self._thread_id, reason, "network_error")

    def _payload(
        self, thread_id: str | None, reason: str, outcome: str, **extra: Any
    ) -> dict[str, Any]:
        payload = {
            "thread_id": thread_id,
            "delivered": outcome in ("sent", "already_sent"),
            "reason": reason,
            "outcome": outcome,
        }
        payload.update(extra)
        return payload

    async def _complete(
        self, thread_id: str | None, reason: str, *, timeout: float, detached: bool = False
    ) -> dict[str, Any]:
        # Everything up to the first await is synchronous on purpose: releasing the lease and
        # counting the others happen as one step, so of two holders finishing together at
        # least one (the last to count) sees none and sends.
        if thread_id is not None and thread_id != self._thread_id and self._state == "open":
            self._thread_id = thread_id
        tid = self._thread_id
        if not self.enabled:
            self._lease.release()
            return self._payload(tid, reason, "disabled")
        if self._state == "sent":
            return self._payload(tid, reason, "already_sent")
        if self._state == "suppressed":
            return self._payload(tid, reason, "suppressed", peers=(self._last or {}).get("peers"))
        if self._state == "inflight" and not detached and self._inflight is not None:
            inflight = self._inflight
            await asyncio.wait({inflight})  # raises only if this caller is cancelled
            if inflight.cancelled():  # the first caller was cancelled: try again ourselves
                return await self._complete(thread_id, reason, timeout=timeout)
            first = inflight.result()
            if first["outcome"] == "sent":
                return self._payload(tid, reason, "already_sent")
            return {**first, "reason": reason}
        if tid is None:
            return self._payload(None, reason, "no_thread")
        self._lease.release()
        peers = self._lease.leases.others_alive(tid, exclude=self._lease)
        if peers:
            self._state = "suppressed"
            self._last = self._payload(tid, reason, "suppressed", peers=peers)
            log.info("session_completed suppressed: %d other live holder(s)", peers)
            return self._last
        if self.genie is None:
            return self._payload(tid, reason, "no_genie")
        return await self._post(tid, reason, timeout=timeout, detached=detached)

    async def _post(
        self, tid: str, reason: str, *, timeout: float, detached: bool
    ) -> dict[str, Any]:
        assert self.genie is not None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._state, self._inflight = "inflight", future
        genie = _detached(self.genie) if detached else self.genie
        self.posts += 1
        try:
            try:
                async with asyncio.timeout(timeout + 0.5):
                    outcome = await genie.session_completed(tid, timeout)
            except TimeoutError:
                outcome = GenieOutcome(False, "timeout")
            except (OSError, ValueError, RuntimeError) as exc:
                log.info("session_completed POST failed: %s", type(exc).__name__)
                outcome = GenieOutcome(False, "network_error")
            finally:
                if detached:
                    with contextlib.suppress(Exception):
                        await genie.close()
        except BaseException:
            self._state, self._inflight = "open", None
            future.cancel()
            raise
        if outcome.ok:
            self._state = "sent"
            payload = self._payload(tid, reason, "sent")
        else:
            self._state = "open"  # a later trigger may retry
            extra = {"status": outcome.status} if outcome.reason == "http_error" else {}
            payload = self._payload(tid, reason, outcome.reason, **extra)
            log.info("session_completed not delivered: %s %s", outcome.reason, outcome.status)
        self._inflight = None
        self._last = payload
        future.set_result(payload)
        return payload


# ---------------------------------------------------------------------------------------------
# Idle timer
# ---------------------------------------------------------------------------------------------


class IdleTimer:
    """Calls ``on_idle`` (sync, or async: run as a task) once after ``timeout`` seconds
    without :meth:`touch`. ``timeout <= 0`` disables it. Needs a running loop to start."""

    def __init__(self, timeout: float, on_idle: Callable[[], object]) -> None:
        self.timeout = float(timeout)
        self._on_idle = on_idle
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[Any] | None = None
        self.fired = False

    @property
    def armed(self) -> bool:
        return self._handle is not None

    def start(self) -> None:
        """Arm (or re-arm) the timer."""
        self.cancel()
        if self.timeout <= 0 or self.fired:
            return
        self._handle = asyncio.get_running_loop().call_later(self.timeout, self._fire)

    def touch(self) -> None:
        """Conversation activity: the countdown starts again (only while armed)."""
        if self._handle is not None:
            self.start()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self.fired = True
        try:
            result = self._on_idle()
        except Exception:
            log.exception("idle callback failed")
            return
        if inspect.isawaitable(result):
            self._task = asyncio.ensure_future(result)
            self._task.add_done_callback(_log_task_error)


def _log_task_error(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("lifecycle callback failed: %r", task.exception())


# ---------------------------------------------------------------------------------------------
# Shutdown hooks
# ---------------------------------------------------------------------------------------------

#: A shutdown callback: sync, or returning an awaitable (``session.close``).
ShutdownCallback = Callable[[], object]


@dataclass
class _Installed:
    sig: int
    previous: Any  # the Python-level disposition before install
    previous_loop_handle: asyncio.Handle | None


class ShutdownHooks:
    """Process shutdown for open sessions.

    *Signals* (opt-in, :meth:`install`): on SIGTERM/SIGINT the registered callbacks (each
    session registers its ``close``) run concurrently on the loop, bounded by ``grace``
    seconds (stragglers are cancelled); then the previous dispositions are restored and the
    same signal is delivered again, so the process ends exactly as it would have without
    the SDK: SIGTERM with the default disposition kills the process by SIGTERM (wait status
    -15, a shell shows exit code 143; ``atexit`` does not run, nothing is sent twice), SIGINT
    raises ``KeyboardInterrupt`` (``asyncio.run`` re-raises it), an application handler
    installed before is called. A second signal during the grace period skips the rest.
    Signals whose disposition was ``SIG_IGN`` are left alone.

    *Interpreter exit*: :meth:`track` a :class:`CompletionSignal` and, at exit, every one
    still :attr:`~CompletionSignal.pending` is completed (reason ``exit``) from a fresh event
    loop in a daemon thread; exit waits at most ``exit_bound`` seconds.

    Signal callbacks that are bound methods (``session.close``) are held through
    :class:`weakref.WeakMethod`, so a forgotten session does not leak (plain functions are
    held strongly). Tracked completions are held strongly until they finish (or are
    untracked): a :class:`CompletionSignal` does not reference its session, and a session
    dropped without ``close()`` must still complete its thread at exit, which a weak
    reference cannot promise (the garbage collector may run first). Untracking on close
    is still the rule.
    """

    def __init__(self, *, grace: float = 2.0, exit_bound: float = 1.0) -> None:
        self.grace = max(0.0, float(grace))
        self.exit_bound = max(0.0, float(exit_bound))
        self._callbacks: dict[int, Callable[[], ShutdownCallback | None]] = {}
        self._ids = iter(range(1, sys.maxsize))
        self._installed: list[_Installed] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shutdown_task: asyncio.Task[None] | None = None
        self._tracked: dict[int, CompletionSignal] = {}
        self._atexit = False
        self.signalled: int | None = None

    # -- callbacks ----------------------------------------------------------------------------
    def register(self, callback: ShutdownCallback) -> Callable[[], None]:
        """Run ``callback()`` (sync or async) on SIGTERM/SIGINT; returns an unregister."""
        key = next(self._ids)
        ref: Callable[[], ShutdownCallback | None]
        if inspect.ismethod(callback):
            ref = weakref.WeakMethod(callback)
        else:

            def ref() -> ShutdownCallback:
                return callback

        self._callbacks[key] = ref

        def unregister() -> None:
            self._callbacks.pop(key, None)

        return unregister

    def _live_callbacks(self) -> list[ShutdownCallback]:
        live = []
        for key, ref in list(self._callbacks.items()):
            callback = ref()
            if callback is None:
                self._callbacks.pop(key, None)
            else:
                live.append(callback)
        return live

    # -- signals ------------------------------------------------------------------------------
    @property
    def installed(self) -> tuple[int, ...]:
        return tuple(i.sig for i in self._installed)

    def install(
        self,
        signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT),
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> tuple[int, ...]:
        """Handle ``signals`` on ``loop`` (default: the running loop; it must run in the main
        thread). Returns the signals now handled. Idempotent per signal."""
        loop = loop or asyncio.get_running_loop()
        if self._shutdown_task is not None and self._shutdown_task.done():
            self._shutdown_task = None
        if self._loop is not None and self._loop is not loop:
            self.uninstall()
        self._loop = loop
        for raw in signals:
            sig = int(raw)
            if sig in self.installed:
                continue
            previous = signal.getsignal(sig)
            if previous is signal.SIG_IGN:
                continue
            loop_handlers: dict[int, asyncio.Handle] = getattr(loop, "_signal_handlers", {})
            prev_handle = loop_handlers.get(sig)
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError) as exc:
                log.warning("cannot handle signal %s here: %s", sig, exc)
                continue
            self._installed.append(_Installed(sig, previous, prev_handle))
        return self.installed

    def uninstall(self) -> None:
        """Restore the dispositions found at install time."""
        loop, installed, self._installed = self._loop, self._installed, []
        for item in reversed(installed):
            with contextlib.suppress(Exception):
                if loop is not None and not loop.is_closed():
                    loop.remove_signal_handler(item.sig)
                handle = item.previous_loop_handle
                if handle is not None and loop is not None and not loop.is_closed():
                    loop.add_signal_handler(
                        item.sig,
                        handle._callback,  # type: ignore[attr-defined]
                        *handle._args,
                    )
                else:
                    previous = item.previous if item.previous is not None else signal.SIG_DFL
                    signal.signal(item.sig, previous)

    def _on_signal(self, sig: int) -> None:
        if self._shutdown_task is not None:  # a second signal: stop waiting
            self._redeliver(sig)
            return
        self.signalled = sig
        assert self._loop is not None
        self._shutdown_task = self._loop.create_task(self._shutdown(sig))

    async def _shutdown(self, sig: int) -> None:
        log.info("signal %s: closing %d session(s)", sig, len(self._callbacks))
        tasks = [asyncio.ensure_future(_call(cb)) for cb in self._live_callbacks()]
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=self.grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=0.1)
            for task in done:
                _log_task_error(task)
        self._redeliver(sig)

    def _redeliver(self, sig: int) -> None:
        self.uninstall()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        signal.raise_signal(sig)

    # -- interpreter exit ---------------------------------------------------------------------
    def track(self, completion: CompletionSignal) -> None:
        """Complete ``completion`` at interpreter exit if it is still pending then."""
        for key, tracked in list(self._tracked.items()):
            if tracked.finished:
                del self._tracked[key]
        self._tracked[id(completion)] = completion
        if not self._atexit:
            atexit.register(self.run_exit_hook)
            self._atexit = True

    def untrack(self, completion: CompletionSignal) -> None:
        self._tracked.pop(id(completion), None)

    def run_exit_hook(self, reason: str = "exit") -> list[dict[str, Any]]:
        """Send the pending completions, waiting at most ``exit_bound`` seconds; returns the
        payloads that finished in time. What ``atexit`` calls."""
        pending = [c for c in list(self._tracked.values()) if c.pending]
        if not pending:
            return []
        results: list[dict[str, Any]] = []
        bound = self.exit_bound

        async def run_all() -> None:
            # gather starts them in order; each one's lease release and peer count run
            # before its first await, so holders in this process settle among themselves.
            done = await asyncio.gather(
                *(
                    c._complete(None, reason, timeout=min(c.timeout, bound), detached=True)
                    for c in pending
                ),
                return_exceptions=True,
            )
            results.extend(r for r in done if isinstance(r, dict))

        def worker() -> None:
            with contextlib.suppress(Exception):
                asyncio.run(asyncio.wait_for(run_all(), bound))

        thread = threading.Thread(target=worker, name="avatar-sdk-exit", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no new threads at this point of shutdown: run here
            worker()
            return list(results)
        thread.join(bound)
        return list(results)

    def close(self) -> None:
        """Uninstall signals and drop the exit hook."""
        self.uninstall()
        if self._atexit:
            atexit.unregister(self.run_exit_hook)
            self._atexit = False
        self._tracked.clear()
        self._callbacks.clear()


async def _call(callback: ShutdownCallback) -> None:
    result = callback()
    if inspect.isawaitable(result):
        await result


_default_hooks: ShutdownHooks | None = None


def default_hooks() -> ShutdownHooks:
    """The process-wide :class:`ShutdownHooks` (signals stay uninstalled until
    :meth:`ShutdownHooks.install`)."""
    global _default_hooks  # noqa: PLW0603 - signals are process-wide
    with _registry_lock:
        if _default_hooks is None:
            _default_hooks = ShutdownHooks()
        return _default_hooks
