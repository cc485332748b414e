"""Which sessions of one worker are still unfinished, so an engine that loses the worker
(a process that died, a Ray actor that was killed) reports each of them ``failed`` with code
``internal`` (or the code it gives, e.g. ``start_timeout`` for a worker that never came up):
every session of a fleet ends with exactly one ``session_finished``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ...logs import sdk_logger
from ..measure import Measurement, measurement
from ..plan import WorkerAssignment

__all__ = ["SessionLedger"]

log = sdk_logger(__name__)


class SessionLedger:
    """Follows one worker's measurements: its started and not yet finished sessions."""

    def __init__(self, assignment: WorkerAssignment) -> None:
        self.worker = assignment.worker
        self.pending = set(assignment.sessions)
        self._started: dict[int, float] = {}

    def observe(self, item: Mapping[str, Any]) -> None:
        """Note a measurement of this worker on its way to the driver."""
        kind, session = item.get("kind"), item.get("session")
        if not isinstance(session, int):
            return
        if kind == "session_started":
            self._started[session] = time.monotonic()
        elif kind == "session_finished":
            self.pending.discard(session)

    def lost(self, detail: str, *, code: str = "internal") -> list[Measurement]:
        """The worker is gone: an ``error`` and a failed ``session_finished`` with ``code``
        for each session it never reported finished (then none are pending)."""
        if not self.pending:
            return []
        log.error(
            "fleet worker %d lost (%s) with %d session(s) unfinished: reported %s",
            self.worker, detail, len(self.pending), code,
        )  # fmt: skip
        now = time.monotonic()
        items: list[Measurement] = []
        for session in sorted(self.pending):
            seconds = now - self._started.get(session, now)
            items.append(measurement("error", session, self.worker, code=code, recoverable=False))
            items.append(
                measurement(
                    "session_finished", session, self.worker,
                    status="failed", code=code, seconds=seconds, detail=detail,
                )
            )  # fmt: skip
        self.pending.clear()
        return items
