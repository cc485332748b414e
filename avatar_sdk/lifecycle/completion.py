"""Session lifecycle: the ``session_completed`` signal (PROTOCOL.md §5) and process shutdown.

Three pieces, each usable on its own:

* :class:`ThreadLeases` / :class:`ThreadLease` (in :mod:`avatar_sdk.lifecycle.leases`, re-exported
  here): who else holds a conversation thread. In
  this process a module-level registry of live holders; across processes on the same host
  one lock file per (thread, holder) in a private directory, each kept open with an
  exclusive ``fcntl.flock`` for as long as the lease is held. The kernel drops a flock when
  its process dies (even on SIGKILL), so a file that can be locked belongs to a dead holder:
  it is removed and ignored (crash-safe). File names carry a hash of the thread id, never
  the id itself, and files hold only the holder's pid. The lock files are handled by one
  ordered I/O thread: on the event loop, taking and dropping a lease never waits for disk.
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
import copy
import inspect
from collections.abc import Callable
from typing import Any, Final, Protocol

from ..besteffort import best_effort
from ..clock import SYSTEM_CLOCK, Clock, Timer
from ..logs import sdk_logger
from ..transport.net.genie import GenieClient, GenieOutcome
from .leases import LEASE_DIR_ENV, ThreadLease, ThreadLeases, default_lease_dir, default_leases
from .shutdown import ShutdownHooks, default_hooks, log_task_error

log = sdk_logger(__name__)

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
        "tls_failed",
        "timeout",
    }
)


def _detached(genie: GenieClient) -> GenieClient:
    """A copy of ``genie`` with its own HTTP session (for another event loop)."""
    clone = copy.copy(genie)
    clone._http = None
    clone._own_http = True
    return clone


class GenieSource(Protocol):
    """Who knows the genie client of the moment (a session learns its host at connect)."""

    @property
    def client(self) -> GenieClient | None: ...


class CompletionSignal:
    """One session's ``session_completed`` signal.

    ``genie``: where to POST (None: ``no_genie``); or ``source``: who knows it when it is
    learned later (a session's genie host, read at each POST). ``timeout``: the POST's own deadline
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
        source: GenieSource | None = None,
    ) -> None:
        if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
            raise ValueError("thread_id must be a non-empty string")
        self._genie = genie
        self._source = source
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

    @property
    def genie(self) -> GenieClient | None:
        """Where the signal is POSTed now (None: ``no_genie``)."""
        return self._source.client if self._source is not None else self._genie

    @genie.setter
    def genie(self, client: GenieClient | None) -> None:
        self._genie = client

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

    async def complete_at_exit(self, reason: str, *, timeout: float) -> dict[str, Any]:
        """The exit hook's call (:mod:`.shutdown`): complete from a fresh loop in another
        thread, detached from this session's loop, within ``timeout`` seconds."""
        return await self._complete(None, reason, timeout=timeout, detached=True)

    async def _complete(
        self, thread_id: str | None, reason: str, *, timeout: float, detached: bool = False
    ) -> dict[str, Any]:
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
        # Releasing this holder and counting the others of this process are one step (no
        # await between): of two holders of this process finishing together, exactly one
        # sees none. Other processes' lock files are probed next by the lease I/O thread,
        # after this holder's own unlink (release() queued it first on the same ordered
        # thread): across processes, at least one holder (the last to count) sees none.
        self._lease.release()
        local, own = self._lease.leases.local_others(tid, exclude=self._lease)
        if local:
            return self._suppress(tid, reason, local)
        return await self._settle(tid, reason, own, timeout=timeout, detached=detached)

    def _suppress(self, tid: str, reason: str, peers: int) -> dict[str, Any]:
        self._state = "suppressed"
        self._last = self._payload(tid, reason, "suppressed", peers=peers)
        log.info("session_completed suppressed: %d other live holder(s)", peers)
        return self._last

    async def _settle(
        self, tid: str, reason: str, own: frozenset[str], *, timeout: float, detached: bool
    ) -> dict[str, Any]:
        """Probe the other processes, then POST: ``inflight`` from the first await on, so
        a concurrent trigger waits for this outcome instead of probing and posting again."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._state, self._inflight = "inflight", future
        try:
            try:
                async with asyncio.timeout(timeout + 0.5):
                    peers: int | None = await self._lease.leases.foreign_alive_async(tid, own)
            except TimeoutError:  # a hung disk: nothing is final, a later trigger may retry
                log.info("session_completed: the lease directory did not answer in time")
                peers = None
            if peers is None:
                self._state = "open"
                payload = self._payload(tid, reason, "timeout")
            elif peers:
                payload = self._suppress(tid, reason, peers)
            elif self.genie is None:
                self._state = "open"
                payload = self._payload(tid, reason, "no_genie")
            else:
                left = max(0.0, deadline - loop.time())
                payload = await self._post(tid, reason, timeout=left, detached=detached)
        except BaseException:
            self._state, self._inflight = "open", None
            future.cancel()
            raise
        self._inflight = None
        self._last = payload
        future.set_result(payload)
        return payload

    async def _post(
        self, tid: str, reason: str, *, timeout: float, detached: bool
    ) -> dict[str, Any]:
        """One POST; sets the state (``sent``, or ``open`` for a later retry)."""
        assert self.genie is not None
        genie = _detached(self.genie) if detached else self.genie
        self.posts += 1
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
                with best_effort("closing the exit hook's HTTP session", log):
                    await genie.close()
        if outcome.ok:
            self._state = "sent"
            return self._payload(tid, reason, "sent")
        self._state = "open"  # a later trigger may retry
        extra = {"status": outcome.status} if outcome.reason == "http_error" else {}
        log.info("session_completed not delivered: %s %s", outcome.reason, outcome.status)
        return self._payload(tid, reason, outcome.reason, **extra)


# ---------------------------------------------------------------------------------------------
# Idle timer
# ---------------------------------------------------------------------------------------------


class IdleTimer:
    """Calls ``on_idle`` (sync, or async: run as a task) once after ``timeout`` seconds
    without :meth:`touch`. ``timeout <= 0`` disables it. Needs a running loop to start."""

    def __init__(
        self,
        timeout: float,
        on_idle: Callable[[], object] | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.timeout = float(timeout)
        #: What runs once the timer fires (settable: the owner wires it once it exists).
        self.on_idle: Callable[[], object] = on_idle or (lambda: None)
        self._clock = clock
        self._handle: Timer | None = None
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
        self._handle = self._clock.call_later(self.timeout, self._fire)

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
            result = self.on_idle()
        except Exception:
            log.exception("idle callback failed")
            return
        if inspect.isawaitable(result):
            self._task = asyncio.ensure_future(result)
            self._task.add_done_callback(log_task_error)
