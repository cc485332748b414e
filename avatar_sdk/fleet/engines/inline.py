"""The inline engine: every assignment on the driver's own event loop, no processes.

For small runs, tests and debugging (a breakpoint in a scenario works), and the only engine
that takes a scenario callable that cannot be pickled (a closure, a lambda).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..plan import WorkerAssignment
from ..worker import Emit, run_worker

__all__ = ["InlineEngine"]


class InlineEngine:
    """Runs each assignment's :func:`run_worker` as a task of the current loop."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        #: The driver's ``Telemetry`` for a traced run (``run_fleet`` sets it): the
        #: sessions run in the driver's process, with its providers.
        self.telemetry: Any = None

    async def run(self, assignments: Sequence[WorkerAssignment], emit: Emit) -> None:
        """Until every session finished. Cancelled: every session closes and is reported
        ``stopped``; setting ``stop`` does the same without cancelling."""
        self.stop = asyncio.Event()
        async with asyncio.TaskGroup() as tasks:
            for assignment in assignments:
                tasks.create_task(
                    run_worker(assignment, emit, stop=self.stop, telemetry=self.telemetry),
                    name=f"avatar-fleet:inline-worker-{assignment.worker}",
                )
