"""The local engine: one ``spawn`` process per assignment, each an event loop running its
share of the sessions, so every core of the machine is used.

Protocol over one duplex pipe per worker (pickled tuples)::

    worker -> driver   ("ready",)             imports done, waiting for the start
    driver -> worker   ("go", t0)             the ramp's start, re-based once all are ready
    worker -> driver   ("m", [measurement])   a batch (everything emitted in one loop turn)
    driver -> worker   ("stop",)              close every session now
    worker -> driver   ("done",)              then the pipe closes (EOF)

The driver's loop never blocks on a pipe: one reader thread waits on all of them
(``multiprocessing.connection.wait``) and hands each message to the loop with
``call_soon_threadsafe``. The ramp starts when every worker is ready (a spawned interpreter
takes a second or more to import the WebRTC stack), so early sessions are not started late
in a burst; a worker not ready within ``start_timeout`` is told to stop and its sessions
are reported ``failed`` with code ``start_timeout``. A worker whose pipe closes before it
reported all its sessions died: they are reported ``failed`` with code ``internal``. Every
process is joined, or terminated then joined, on every way out of :meth:`LocalEngine.run`,
cancellation included; workers ignore SIGINT (a terminal's Ctrl-C reaches the whole
process group) and stop when the driver says.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from ...besteffort import best_effort
from ...logs import logger_levels, sdk_logger, set_logger_levels
from ..measure import Measurement
from ..plan import WorkerAssignment
from ..worker import Emit, run_worker
from .ledger import SessionLedger

__all__ = ["LocalEngine"]

log = sdk_logger(__name__)

_EOF = ("eof",)
#: The failure code of the sessions of a worker not ready within ``start_timeout``.
START_TIMEOUT = "start_timeout"
#: (worker number, message) as the reader thread hands them to the loop.
_Inbox = asyncio.Queue[tuple[int, tuple[Any, ...]]]


# -- the worker process -------------------------------------------------------------------------
def _child(conn: Connection, assignment: WorkerAssignment, levels: dict[str, int]) -> None:
    """Worker-process entry point."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_logger_levels(levels)  # the driver's: the CLI quiets the stack's chatter
    try:
        import avatar_sdk.session.facade  # noqa: F401, PLC0415 - the stack loads before the ramp

        conn.send(("ready",))
        message = conn.recv()
        if message[0] != "go":
            return
        asyncio.run(_child_main(conn, assignment.with_t0(float(message[1]))))
        conn.send(("done",))
    except (EOFError, OSError):
        return  # the driver is gone: nobody to report to
    finally:
        conn.close()


def send_batch(conn: Connection, items: list[Measurement]) -> bool:
    """Send ``items`` as one ``("m", items)`` message; False when the driver is gone.

    A batch that cannot be sent whole (an item that does not pickle: ``send`` pickles
    before it writes, so nothing half-written reaches the pipe) is logged with the error's
    type and sent item by item, so one bad item loses only itself."""
    try:
        conn.send(("m", items))
        return True
    except OSError:
        return False
    except Exception as exc:
        log.warning(
            "fleet worker: a batch of %d measurements cannot be sent (%s: %s): sending them"
            " one by one", len(items), type(exc).__name__, exc,
        )  # fmt: skip
    for item in items:
        try:
            conn.send(("m", [item]))
        except OSError:
            return False
        except Exception as exc:
            log.error(
                "fleet worker: measurement %r of session %s dropped (%s: %s)",
                item.get("kind"), item.get("session"), type(exc).__name__, exc,
            )  # fmt: skip
    return True


async def _child_main(conn: Connection, assignment: WorkerAssignment) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    fd = conn.fileno()
    batch: list[Measurement] = []

    def readable() -> None:
        try:
            while conn.poll():
                if conn.recv()[0] == "stop":
                    stop.set()
        except (EOFError, OSError):
            loop.remove_reader(fd)
            stop.set()

    def flush() -> None:
        items = batch[:]
        batch.clear()
        if not send_batch(conn, items):
            stop.set()  # the driver is gone: close the sessions

    def emit(item: Measurement) -> None:
        if not batch:
            loop.call_soon(flush)
        batch.append(item)

    loop.add_reader(fd, readable)
    try:
        await run_worker(assignment, emit, stop=stop)
    finally:
        loop.remove_reader(fd)
        if batch:
            flush()


# -- the driver -------------------------------------------------------------------------------
class _Worker:
    def __init__(self, assignment: WorkerAssignment, process: BaseProcess, conn: Connection):
        self.assignment = assignment
        self.process = process
        self.conn = conn
        self.ready = False
        self.gone = False
        self.ledger = SessionLedger(assignment)

    @property
    def number(self) -> int:
        return self.assignment.worker

    def send(self, message: tuple[Any, ...]) -> None:
        if self.gone:
            return
        with best_effort(f"send {message[0]!r} to fleet worker {self.number}", log):
            self.conn.send(message)


def _reader(conns: dict[Connection, int], deliver: Callable[[int, tuple[Any, ...]], None]) -> None:
    """Reader-thread body: every message of every pipe to ``deliver``, then an EOF mark."""
    live = dict(conns)
    while live:
        for ready in wait(list(live)):
            assert isinstance(ready, Connection)
            worker = live[ready]
            try:
                message = ready.recv()
            except (EOFError, OSError):
                del live[ready]
                message = _EOF
            try:
                deliver(worker, message)
            except RuntimeError:  # the driver's loop is closed: nobody listens any more
                return


class LocalEngine:
    """Worker processes on this machine (``multiprocessing`` ``spawn`` context).

    ``start_timeout``: how long workers may take to become ready (imports) before the ramp
    starts without the late ones (their sessions fail with code ``start_timeout``);
    ``stop_grace``: after a stop (cancellation), how long
    workers get to close their sessions before they are terminated.
    """

    def __init__(self, *, start_timeout: float = 120.0, stop_grace: float = 10.0) -> None:
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self.processes: list[BaseProcess] = []

    async def run(self, assignments: Sequence[WorkerAssignment], emit: Emit) -> None:
        loop = asyncio.get_running_loop()
        context = multiprocessing.get_context("spawn")
        inbox: _Inbox = asyncio.Queue()
        levels = logger_levels()
        workers: dict[int, _Worker] = {}
        reader: threading.Thread | None = None
        try:
            for assignment in assignments:
                parent, child = context.Pipe()
                process = context.Process(
                    target=_child,
                    args=(child, assignment, levels),
                    name=f"avatar-fleet-worker-{assignment.worker}",
                    daemon=True,
                )
                workers[assignment.worker] = _Worker(assignment, process, parent)
                try:
                    process.start()
                finally:
                    child.close()  # the child has its own copy: EOF comes when it exits
                self.processes.append(process)

            def deliver(worker: int, message: tuple[Any, ...]) -> None:
                loop.call_soon_threadsafe(inbox.put_nowait, (worker, message))

            conns = {w.conn: w.number for w in workers.values()}
            reader = threading.Thread(
                target=_reader, args=(conns, deliver), name="avatar-fleet-reader", daemon=True
            )
            reader.start()
            await self._start(workers, inbox, emit)
            while not all(w.gone for w in workers.values()):
                self._handle(workers, *await inbox.get(), emit)
        finally:
            await self._shutdown(workers, inbox, emit, reader)

    async def _start(self, workers: dict[int, _Worker], inbox: _Inbox, emit: Emit) -> None:
        """Wait until every worker is ready (or gone), then start the ramp on all of them."""
        deadline = time.monotonic() + self.start_timeout
        while not all(w.ready or w.gone for w in workers.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                self._give_up_on_late(workers, emit)
                break
            try:
                self._handle(workers, *(await _next(inbox, left)), emit)
            except TimeoutError:
                continue
        t0 = time.time()
        for worker in workers.values():
            worker.send(("go", t0) if worker.ready else ("stop",))

    def _give_up_on_late(self, workers: dict[int, _Worker], emit: Emit) -> None:
        """Workers still importing at ``start_timeout``: told to stop (next), their sessions
        reported ``failed`` with code ``start_timeout`` now, not as a lost worker later."""
        late = [w for w in workers.values() if not (w.ready or w.gone)]
        log.warning(
            "fleet workers %s not ready within %gs (start_timeout): starting without them, "
            "their %d session(s) fail with code start_timeout",
            [w.number for w in late], self.start_timeout,
            sum(len(w.ledger.pending) for w in late),
        )  # fmt: skip
        detail = f"not ready within {self.start_timeout:g}s (start_timeout)"
        for worker in late:
            for item in worker.ledger.lost(detail, code=START_TIMEOUT):
                emit(item)

    def _handle(
        self, workers: dict[int, _Worker], number: int, message: tuple[Any, ...], emit: Emit
    ) -> None:
        worker = workers[number]
        kind = message[0]
        if kind == "ready":
            worker.ready = True
        elif kind == "m":
            for item in message[1]:
                worker.ledger.observe(item)
                emit(item)
        elif kind == "eof":
            worker.gone = True
            self._report_lost(worker, emit)

    def _report_lost(self, worker: _Worker, emit: Emit) -> None:
        """Sessions a worker never reported finished: it died under them."""
        for item in worker.ledger.lost(f"worker process exited ({worker.process.exitcode})"):
            emit(item)

    async def _shutdown(
        self,
        workers: dict[int, _Worker],
        inbox: _Inbox,
        emit: Emit,
        reader: threading.Thread | None,
    ) -> None:
        """Stop, drain, join; terminate what does not stop. Runs on every way out."""
        try:
            live = [w for w in workers.values() if not w.gone]
            for worker in live:
                worker.send(("stop",))
            deadline = time.monotonic() + self.stop_grace
            while reader is not None and any(not w.gone for w in workers.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    self._handle(workers, *(await _next(inbox, left)), emit)
                except TimeoutError:
                    break
        finally:
            for worker in workers.values():
                process = worker.process
                if process.is_alive():
                    process.terminate()
            for worker in workers.values():
                await asyncio.to_thread(_reap, worker.process)
            if reader is not None:
                await asyncio.to_thread(reader.join, 5.0)
            while not inbox.empty():  # what arrived while terminating
                self._handle(workers, *inbox.get_nowait(), emit)
            for worker in workers.values():
                if not worker.gone:
                    worker.gone = True
                    self._report_lost(worker, emit)
                worker.conn.close()
                if worker.process.pid is not None:
                    worker.process.close()
            self.processes.clear()


async def _next(inbox: _Inbox, seconds: float) -> tuple[int, tuple[Any, ...]]:
    """The next message, or TimeoutError after ``seconds``."""
    async with asyncio.timeout(seconds):
        return await inbox.get()


def _reap(process: BaseProcess) -> None:
    """Join ``process``; kill it if it ignored the terminate (closed later, by the caller,
    once its exit code has been read)."""
    if process.pid is None:
        return  # never started
    process.join(5.0)
    if process.is_alive():
        process.kill()
        process.join(5.0)
