"""An optional JSONL journal of what happened to a session: enough to reconstruct an
incident (transitions, errors, recoveries), never a secret or a conversation's content.

Events arrive on the event loop (socket handlers emit them); the file is written by a
thread of the journal's own, so a slow or stalled disk never stalls the conversation. Lines
are built (and secrets scrubbed) on the loop, in event order, and written in that order.
``close()`` / ``aclose()`` return once every accepted line is on disk.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ..clock import SYSTEM_CLOCK, Clock
from ..logs import sdk_logger
from ..redact import scrub
from .bus import Event
from .line_writer import LineWriter

log = sdk_logger(__name__)

#: Events worth a line. Conversation content (agent_text, captions, transcriptions) is
#: deliberately absent: a journal is an operations record, not a transcript (the events
#: below that carry some are cut to their operational fields by ``JOURNALED_FIELDS``).
#: ``avatar-sdk inspect`` draws a session from these lines.
JOURNALED: Final = frozenset(
    {
        "state_changed",
        "connect_retrying",
        "turn_latency",
        "tool_call",
        "turn_resent",
        "brain_stalled",
        "session_renewing",
        "session_renewed",
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

#: The fields journaled of an event that carries conversation content elsewhere in its
#: data (a speech id holds the start of the user's words, a tool call's arguments and a
#: resent turn's text are content); events absent here are journaled whole.
JOURNALED_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "turn_latency": frozenset(
        {
            "source",
            "text_latency",
            "audio_latency",
            "generated_latency",
            "played_latency",
            "voice_to_voice",
            "interrupted",
        }
    ),
    "tool_call": frozenset({"name", "call_id"}),
    "turn_resent": frozenset({"tier"}),
}


def journaled_data(name: str, data: Any) -> Any:
    """``data`` as journaled for event ``name``: only its operational fields."""
    kept = JOURNALED_FIELDS.get(name)
    if kept is None or not isinstance(data, Mapping):
        return data
    return {k: v for k, v in data.items() if k in kept}


#: Lines waiting for the disk beyond this are dropped (and the gap recorded): memory stays
#: bounded when the disk stalls, and the loop never waits for it.
DEFAULT_MAX_PENDING: Final = 10_000
#: How long ``close()`` waits for the writer to finish the lines still pending (s).
DEFAULT_CLOSE_TIMEOUT: Final = 5.0
#: The same for a journal never closed, at interpreter exit or when collected (s).
_EXIT_TIMEOUT: Final = 1.0


class Journal:
    """Appends one JSON object per journaled event to ``path``.

    ``max_pending``: lines queued for the disk beyond which new ones are dropped; the next
    accepted line (or ``close``) is preceded by a ``journal_gap`` line with the count.
    The file is opened here (a bad path fails at once); every write happens off the loop.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        session_label: str,
        max_pending: int = DEFAULT_MAX_PENDING,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``clock``: the one that stamped the events (a session's), so each line's ``t``
        (seconds since the journal opened) measures the same time line."""
        self.path = Path(path)
        self._label = session_label
        self._start = clock.monotonic()
        self.max_pending = max(1, int(max_pending))
        self._writer = LineWriter(self.path.open("a", encoding="utf-8"), "avatar-sdk-journal")
        self._closed = False
        #: Lines dropped because the disk fell behind (see ``max_pending``).
        self.dropped = 0
        self._gap = 0
        self._gap_at = 0.0
        # Never closed: the lines still pending are written when it is collected or at exit.
        self._finalizer = weakref.finalize(self, self._writer.stop, _EXIT_TIMEOUT)

    @property
    def lines(self) -> int:
        """Lines written to the file so far (final once closed)."""
        return self._writer.written

    def _line(self, name: str, at: float, data: Any) -> str:
        entry: dict[str, Any] = {
            "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            "t": round(at - self._start, 4),
            "session": self._label,
            "event": name,
            "data": scrub(journaled_data(name, data)),
        }
        return json.dumps(entry, default=str) + "\n"

    def _gap_line(self) -> list[str]:
        if not self._gap:
            return []
        line = self._line("journal_gap", self._gap_at, {"dropped": self._gap})
        self._gap = 0
        return [line]

    def record(self, event: Event) -> None:
        """Queue ``event``'s line (only journaled events); never waits for the disk."""
        if event.name not in JOURNALED or self._closed or self._writer.failed:
            return
        line = self._line(event.name, event.at, event.data)
        if self._writer.pending() >= self.max_pending:
            if not self._gap:
                self._gap_at = event.at
                log.warning("journal: the disk fell behind; dropping lines")
            self._gap += 1
            self.dropped += 1
            return
        self._writer.put([*self._gap_line(), line])

    def _begin_close(self) -> None:
        if not self._closed:
            self._closed = True
            if not self._writer.failed:
                self._writer.put(self._gap_line())

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:
        """Stop journaling; returns once every accepted line is written (at most ``timeout``
        seconds). Blocks its caller: on an event loop prefer :meth:`aclose`."""
        self._begin_close()
        self._finished(self._writer.stop(timeout), timeout)

    async def aclose(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:
        """:meth:`close` without blocking the event loop."""
        self._begin_close()
        self._finished(await asyncio.to_thread(self._writer.stop, timeout), timeout)

    def _finished(self, done: bool, timeout: float) -> None:
        if done:
            self._finalizer.detach()
        else:  # the exit-time finalizer gives the writer one more chance
            log.warning("journal: the disk did not take the last lines within %.3gs", timeout)
