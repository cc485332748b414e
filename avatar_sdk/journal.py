"""An optional JSONL journal of what happened to a session: enough to reconstruct an
incident (transitions, errors, recoveries), never a secret or a conversation's content."""

from __future__ import annotations

import datetime
import json
import logging
import time
from pathlib import Path
from typing import IO, Any, Final

from .events import Event
from .redact import scrub

log = logging.getLogger(__name__)

#: Events worth a line. Conversation content (agent_text, captions, transcriptions) is
#: deliberately absent: a journal is an operations record, not a transcript.
JOURNALED: Final = frozenset(
    {
        "state_changed",
        "connected",
        "reconnecting",
        "reconnected",
        "media_recovering",
        "media_recovered",
        "queued",
        "gave_up",
        "error",
        "session_error",
        "protocol_error",
        "callback_error",
        "network_changed",
        "ended",
    }
)


class Journal:
    """Appends one JSON object per journaled event to ``path``."""

    def __init__(self, path: str | Path, *, session_label: str) -> None:
        self.path = Path(path)
        self._label = session_label
        self._start = time.monotonic()
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        self.lines = 0

    def record(self, event: Event) -> None:
        if event.name not in JOURNALED or self._file is None:
            return
        entry: dict[str, Any] = {
            "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            "t": round(event.at - self._start, 4),
            "session": self._label,
            "event": event.name,
            "data": scrub(event.data),
        }
        try:
            self._file.write(json.dumps(entry, default=str) + "\n")
            self._file.flush()
            self.lines += 1
        except (OSError, ValueError) as exc:
            log.warning("journal write failed (%s); journaling stops", type(exc).__name__)
            self.close()

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None
