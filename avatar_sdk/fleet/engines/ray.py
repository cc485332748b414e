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
import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import RayError

from ...besteffort import best_effort
from ...errors import AvatarError, ErrorCode
from ...logs import logger_levels, set_logger_levels
from ..measure import Measurement
from ..plan import WorkerAssignment
from ..worker import Emit, run_worker
from .ledger import SessionLedger

__all__ = ["RayEngine"]

log = logging.getLogger(__name__)


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
        import avatar_sdk.session  # noqa: F401, PLC0415

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
        owned = await self._init(len(assignments))
        try:
            await self._run(assignments, emit)
        finally:
            if owned:
                await asyncio.to_thread(ray.shutdown)

    async def _init(self, workers: int) -> bool:
        """Connect to (or start) Ray unless the caller already did; True when we did."""
        if ray.is_initialized():
            return False
        options: dict[str, Any] = {"include_dashboard": False, **self.init_options}
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        if self.address is None:  # a new local instance with room for every actor
            options["address"] = "local"
            needed = math.ceil(workers * self.num_cpus)
            options.setdefault("num_cpus", max(os.cpu_count() or 1, needed))
        else:
            options["address"] = self.address
        await _init_ray(options, self.connect_timeout)
        return True

    async def _run(self, assignments: Sequence[WorkerAssignment], emit: Emit) -> None:
        levels = logger_levels()
        remote = ray.remote(FleetActor).options(num_cpus=self.num_cpus, max_concurrency=64)
        lanes = [_Lane(a, remote.remote(levels), emit) for a in assignments]
        try:
            await self._start(lanes)
            async with asyncio.TaskGroup() as pumps:
                for lane in lanes:
                    if not lane.finished:
                        pumps.create_task(lane.pump(self.poll_wait), name=lane.name)
        finally:
            await self._stop(lanes)

    async def _start(self, lanes: Sequence[_Lane]) -> None:
        """Wait until every actor is up (or lost), then start the ramp on all of them."""
        waits = {asyncio.ensure_future(lane.wait_ready()): lane for lane in lanes}
        _, late = await asyncio.wait(waits, timeout=self.start_timeout)
        for task in late:
            task.cancel()
            waits[task].lose(f"ray actor not up in {self.start_timeout:g}s")
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
            _, late = await asyncio.wait(drains, timeout=self.stop_grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*drains, return_exceptions=True)
        for lane in lanes:
            lane.kill()
            lane.lose("ray actor stopped before reporting its sessions")


async def _init_ray(options: Mapping[str, Any], timeout: float) -> None:
    """``ray.init(**options)`` off the loop, bounded by ``timeout``; its failure classified.

    On a daemon thread of its own rather than ``asyncio.to_thread``: a ``ray.init`` still
    dialling a dead address after the timeout must not hold up the interpreter's exit (the
    default executor's threads are joined at exit). If it does connect after all, it
    disconnects at once: nobody owns that connection any more.
    """
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[BaseException | None] = loop.create_future()
    abandoned = threading.Event()

    def settle(outcome: BaseException | None) -> None:
        if not answer.done():
            answer.set_result(outcome)

    def dial() -> None:
        outcome: BaseException | None = None
        try:
            ray.init(**options)
        except BaseException as exc:  # handed to the loop, classified there
            outcome = exc
        if abandoned.is_set():
            if outcome is None:
                with best_effort("disconnect from a Ray reached too late", log):
                    ray.shutdown()
            return
        with best_effort("hand ray.init's outcome to the loop", log):
            loop.call_soon_threadsafe(settle, outcome)

    where = options.get("address")
    threading.Thread(target=dial, name="avatar-fleet:ray-init", daemon=True).start()
    try:
        async with asyncio.timeout(timeout):
            failure = await answer
    except TimeoutError:
        abandoned.set()
        raise AvatarError(
            ErrorCode.UNREACHABLE, f"ray at {where!r} not reached within {timeout:g}s"
        ) from None
    except asyncio.CancelledError:
        abandoned.set()
        raise
    if failure is None:
        return
    code = (
        ErrorCode.UNREACHABLE
        if isinstance(failure, ConnectionError | TimeoutError)
        else ErrorCode.INVALID_ARGUMENT
    )
    raise AvatarError(code, f"ray.init failed: {type(failure).__name__}: {failure}") from None


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

    def lose(self, detail: str) -> None:
        """No more measurements will come: report the unfinished sessions failed."""
        self.finished = True
        for item in self._ledger.lost(detail):
            self._emit(item)

    def kill(self) -> None:
        with best_effort(f"kill {self.name}", log):
            ray.kill(self.actor)
