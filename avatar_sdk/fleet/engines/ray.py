"""The Ray engine: one async Ray actor per assignment, each an event loop running its share
of the sessions, on this machine (``ray.init()``) or on an existing cluster (``address=``).

Needs the ``ray`` extra (``pip install 'avatar-sdk[ray]'``). Each actor runs the same
:func:`avatar_sdk.fleet.worker.run_worker` as every other engine. Measurements stream back
by long polling: the driver keeps one ``drain(wait)`` call in flight per actor, which the
actor answers as soon as it has measurements (or after ``wait`` seconds, or when its worker
is done), so results arrive within one loop turn of being measured with no timer on the
driver. An actor that dies (its node lost, killed, out of memory) surfaces as a
``RayActorError`` on its pending call: its unfinished sessions are reported ``failed``
with code ``internal``. The ramp starts once every actor is up (``ready()``), so early
sessions are not started late while actors boot.

Ray was chosen over a hand-written cluster protocol because it already places actors on
nodes, ships the scenario's code (``runtime_env``) and reports dead workers.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import RayError

from ...besteffort import best_effort
from ...errors import AvatarError, ErrorCode
from ...logs import logger_levels, sdk_logger, set_logger_levels
from ..measure import Measurement
from ..plan import WorkerAssignment
from ..worker import Emit, run_worker
from .ledger import SessionLedger

__all__ = ["RayEngine"]

log = sdk_logger(__name__)


class FleetActor:
    """The actor body (made remote by :class:`RayEngine`): one worker's sessions."""

    def __init__(self, levels: Mapping[str, int]) -> None:
        set_logger_levels(levels)  # the driver's: the CLI quiets the stack's chatter
        self._batch: list[Measurement] = []
        self._arrived = asyncio.Event()
        self._stop = asyncio.Event()
        self._done = False

    async def ready(self) -> int:
        """Once the WebRTC stack is imported (the ramp waits for every actor); its pid."""
        import avatar_sdk.session.facade  # noqa: F401, PLC0415

        return os.getpid()

    async def run(self, assignment: WorkerAssignment) -> None:
        try:
            await run_worker(assignment, self._emit, stop=self._stop)
        finally:
            self._done = True
            self._arrived.set()

    async def drain(self, wait: float) -> tuple[list[Measurement], bool]:
        """What was measured since the last call, waiting up to ``wait`` seconds for
        something; and whether the worker is done (nothing will follow)."""
        if not self._batch and not self._done:
            try:
                async with asyncio.timeout(wait):
                    await self._arrived.wait()
            except TimeoutError:
                pass
        self._arrived.clear()
        items, self._batch = self._batch, []
        return items, self._done and not self._batch

    async def stop(self) -> None:
        """Close every session now (they are reported ``stopped``)."""
        self._stop.set()

    def _emit(self, item: Measurement) -> None:
        self._batch.append(item)
        self._arrived.set()


class RayEngine:
    """Ray actors, one per assignment.

    ``address``: an existing cluster (``"auto"``, ``"ray://head:10001"``); None starts a
    new local Ray instance for the run (``address="local"``, even when a cluster started
    with ``ray start`` runs on this machine) and shuts it down after.
    A Ray instance already initialised by the caller is used as is and left running.
    ``runtime_env``: passed to ``ray.init`` (ship your scenario to a cluster:
    ``{"working_dir": ".", "pip": ["avatar-sdk"]}``); ``init_options``: any other
    ``ray.init`` keyword; ``num_cpus``: CPUs each actor reserves (placement);
    ``poll_wait``: the longest a ``drain`` call waits; ``start_timeout``: how long the actors
    may take to start; ``stop_grace``: after a stop, how long actors get to close their
    sessions before they are killed; ``connect_timeout``: how long starting or reaching
    Ray may take (``ray.init`` to a dead address waits minutes) before the run fails with
    ``AvatarError(unreachable)``.
    """

    def __init__(
        self,
        *,
        address: str | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        init_options: Mapping[str, Any] | None = None,
        num_cpus: float = 1.0,
        poll_wait: float = 0.5,
        start_timeout: float = 120.0,
        stop_grace: float = 10.0,
        connect_timeout: float = 60.0,
    ) -> None:
        self.address = address
        self.runtime_env = dict(runtime_env or {})
        self.init_options = dict(init_options or {})
        self.num_cpus = num_cpus
        self.poll_wait = poll_wait
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self.connect_timeout = connect_timeout

    async def run(self, assignments: Sequence[WorkerAssignment], emit: Emit) -> None:
        connection = await self._init(len(assignments))
        try:
            await self._run(assignments, emit)
        finally:
            if connection is not None:
                await connection.close(self.stop_grace)

    async def _init(self, workers: int) -> _RayConnection | None:
        """Connect to (or start) Ray unless the caller already did; the connection we made."""
        if ray.is_initialized():
            return None
        options: dict[str, Any] = {"include_dashboard": False, **self.init_options}
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        if self.address is None:  # a new local instance with room for every actor
            options["address"] = "local"
            needed = math.ceil(workers * self.num_cpus)
            options.setdefault("num_cpus", max(os.cpu_count() or 1, needed))
        else:
            options["address"] = self.address
        connection = _RayConnection(options)
        await connection.open(self.connect_timeout)
        return connection

    async def _run(self, assignments: Sequence[WorkerAssignment], emit: Emit) -> None:
        levels = logger_levels()
        remote = ray.remote(FleetActor).options(num_cpus=self.num_cpus, max_concurrency=64)
        lanes: list[_Lane] = []
        try:  # created inside: an actor that cannot be created still has the others killed
            for assignment in assignments:
                lanes.append(_Lane(assignment, remote.remote(levels), emit))
            await self._start(lanes)
            async with asyncio.TaskGroup() as pumps:
                for lane in lanes:
                    if not lane.finished:
                        pumps.create_task(lane.pump(self.poll_wait), name=lane.name)
        finally:
            await self._stop(lanes)

    async def _start(self, lanes: Sequence[_Lane]) -> None:
        """Wait until every actor is up (or lost), then start the ramp on all of them."""
        waits: dict[asyncio.Future[None], _Lane] = {
            asyncio.ensure_future(lane.wait_ready()): lane for lane in lanes
        }
        for task in await _settle_within(waits, self.start_timeout):
            waits[task].lose(f"ray actor not up in {self.start_timeout:g}s", code="start_timeout")
        t0 = time.time()
        for lane in lanes:
            if not lane.finished:
                lane.start(t0)

    async def _stop(self, lanes: Sequence[_Lane]) -> None:
        """Stop what still runs, drain it for ``stop_grace``, kill every actor. Runs on every
        way out of :meth:`run`, cancellation included."""
        live = [lane for lane in lanes if not lane.finished]
        for lane in live:
            lane.request_stop()
        if live:
            drains = [asyncio.ensure_future(lane.pump(self.poll_wait)) for lane in live]
            await _settle_within(drains, self.stop_grace)
        for lane in lanes:
            lane.kill()
            lane.lose("ray actor stopped before reporting its sessions")


async def _settle_within(
    tasks: Iterable[asyncio.Future[None]], timeout: float
) -> set[asyncio.Future[None]]:
    """Wait up to ``timeout`` for ``tasks``; the late ones (returned) are cancelled. On
    every way out, cancellation included, none is left running or unawaited."""
    pending = set(tasks)
    late: set[asyncio.Future[None]] = set()
    try:
        if pending:
            _, late = await asyncio.wait(pending, timeout=timeout)
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return late


class _RayConnection:
    """``ray.init`` and ``ray.shutdown`` on one thread of its own that lives as long as the
    connection.

    Not the loop (``ray.init`` blocks for seconds, and dialling a dead address for
    minutes), and not a pool thread that could exit meanwhile: Ray's local processes (GCS,
    raylet) are started with the parent-death signal, which Linux sends when the *thread*
    that started them exits, so they would die under the run. A daemon thread: one still
    dialling after :meth:`open` gave up must not hold up the interpreter's exit; if it
    connects after all, it disconnects at once.
    """

    def __init__(self, options: Mapping[str, Any]) -> None:
        self._options = dict(options)
        self._release = threading.Event()
        self._abandoned = threading.Event()
        self._opened: asyncio.Future[BaseException | None] | None = None
        self._closed: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def open(self, timeout: float) -> None:
        """Connected within ``timeout`` seconds, or ``AvatarError`` (unreachable, or
        invalid_argument for what ``ray.init`` refused)."""
        loop = self._loop = asyncio.get_running_loop()
        self._opened = loop.create_future()
        self._closed = loop.create_future()
        thread = threading.Thread(target=self._own, name="avatar-fleet:ray", daemon=True)
        thread.start()
        where = self._options.get("address")
        try:
            async with asyncio.timeout(timeout):
                failure = await self._opened
        except TimeoutError:
            self._abandoned.set()
            raise AvatarError(
                ErrorCode.UNREACHABLE, f"ray at {where!r} not reached within {timeout:g}s"
            ) from None
        except asyncio.CancelledError:
            self._abandoned.set()
            raise
        if failure is None:
            return
        code = (
            ErrorCode.UNREACHABLE
            if isinstance(failure, ConnectionError | TimeoutError)
            else ErrorCode.INVALID_ARGUMENT
        )
        raise AvatarError(code, f"ray.init failed: {type(failure).__name__}: {failure}") from None

    async def close(self, timeout: float) -> None:
        """Disconnect (a local instance we started stops), waiting up to ``timeout``."""
        self._release.set()
        if self._closed is None:
            return
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._closed)
        except TimeoutError:
            log.warning("ray.shutdown did not finish within %gs", timeout)

    def _own(self) -> None:
        """The thread: init, wait for the release, shut down."""
        outcome: BaseException | None = None
        try:
            ray.init(**self._options)
        except BaseException as exc:  # handed to the loop, classified there
            outcome = exc
        if not self._abandoned.is_set():
            self._tell(self._opened, outcome)
            if outcome is None:
                self._release.wait()
        if outcome is None:
            with best_effort("ray.shutdown", log):
                ray.shutdown()
        self._tell(self._closed, None)

    def _tell(self, future: asyncio.Future[Any] | None, value: Any) -> None:
        loop = self._loop
        if future is None or loop is None or loop.is_closed():
            return

        def settle() -> None:
            if not future.done():
                future.set_result(value)

        with best_effort("hand a ray outcome to the loop", log):
            loop.call_soon_threadsafe(settle)


class _Lane:
    """The driver's side of one actor: its pending calls and its sessions' ledger."""

    def __init__(self, assignment: WorkerAssignment, actor: Any, emit: Emit) -> None:
        self.assignment = assignment
        self.actor = actor
        self.name = f"avatar-fleet:ray-worker-{assignment.worker}"
        self._emit = emit
        self._ledger = SessionLedger(assignment)
        self._run_ref: Any = None
        #: The drain call in flight: kept across a cancelled pump, whose answer (a batch the
        #: actor already handed over) the next pump then reads instead of losing it.
        self._drain_ref: Any = None
        self.finished = False

    async def wait_ready(self) -> None:
        try:
            await self.actor.ready.remote()
        except RayError as exc:
            self.lose(f"ray actor failed to start: {type(exc).__name__}")

    def start(self, t0: float) -> None:
        self._run_ref = self.actor.run.remote(self.assignment.with_t0(t0))

    def request_stop(self) -> None:
        with best_effort(f"stop {self.name}", log):
            self.actor.stop.remote()

    async def pump(self, wait: float) -> None:
        """Forward this actor's measurements until its worker is done or it is lost."""
        while not self.finished:
            if self._drain_ref is None:
                self._drain_ref = self.actor.drain.remote(wait)
            try:
                items, done = await self._drain_ref
            except RayError as exc:
                self._drain_ref = None
                self.lose(f"ray actor lost: {type(exc).__name__}")
                return
            self._drain_ref = None
            for item in items:
                self._ledger.observe(item)
                self._emit(item)
            if done:
                await self._settle()

    async def _settle(self) -> None:
        """The worker is done: surface its run's exception, if any, then stop pumping."""
        try:
            await self._run_ref
        except RayError as exc:
            log.error("%s failed: %s", self.name, type(exc).__name__)
        self.lose("ray worker returned with sessions unfinished")

    def lose(self, detail: str, *, code: str = "internal") -> None:
        """No more measurements will come: report the unfinished sessions failed."""
        self.finished = True
        for item in self._ledger.lost(detail, code=code):
            self._emit(item)

    def kill(self) -> None:
        with best_effort(f"kill {self.name}", log):
            ray.kill(self.actor)
