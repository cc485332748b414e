"""The thread-owned line writer of the journal and of the cassette recorder.

Lines are handed over on the event loop (:meth:`LineWriter.put` never waits for the disk)
and written, in order and flushed, by a thread of the writer's own: a slow or stalled disk
never stalls a conversation. A write that fails stops the writing (later lines are
drained and discarded) instead of raising on the loop.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import IO

from ..logs import sdk_logger

# The journal's logger, as before this writer had a module of its own.
log = sdk_logger("avatar_sdk.events.journal")


class LineWriter:
    """A file and the thread that writes it, line batches in the order they were put
    (apart from its owner, so a finalizer can stop it when the owner is dropped unclosed)."""

    def __init__(self, file: IO[str], name: str) -> None:
        self.file: IO[str] | None = file
        self.written = 0
        self._cond = threading.Condition()
        self._pending: deque[str] = deque()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def failed(self) -> bool:
        return self.file is None

    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    def put(self, lines: list[str]) -> None:
        with self._cond:
            self._pending.extend(lines)
            self._cond.notify()

    def stop(self, timeout: float) -> bool:
        """Ask the thread to write what is pending and close the file; True once done."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending) or self._stopping)
                batch = list(self._pending)
                self._pending.clear()
                done = self._stopping and not batch
            if done:
                break
            self._write(batch)
        file, self.file = self.file, None
        if file is not None:
            try:
                file.close()
            except (OSError, ValueError) as exc:
                log.warning("journal close failed (%s)", type(exc).__name__)

    def _write(self, batch: list[str]) -> None:
        file = self.file
        if file is None:
            return  # journaling stopped after a failed write: drain and discard
        try:
            file.write("".join(batch))
            file.flush()
            self.written += len(batch)
        except (OSError, ValueError) as exc:
            log.warning("journal write failed (%s); journaling stops", type(exc).__name__)
            self.file = None
            try:
                file.close()
            except (OSError, ValueError):
                log.debug("journal: closing after a failed write failed too")
