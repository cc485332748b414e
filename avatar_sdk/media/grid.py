"""The 20 ms frame grid every paced uplink source of a process runs on (pure).

Why: a wake-up from an idle sleep is the most expensive thing an audio session does on a
virtual machine. On the 2-core benchmark VM one costs the process 130-400 us of CPU
(``python -m benchmarks.wakeups``), more than encoding a 20 ms Opus frame (about 55 us).
K sessions pacing K private 20 ms schedules wake the event loop 50 x K times a second and
their packets reach the server one at a time; on one grid every source of the process is
due at the same instants, so the loop wakes 50 times a second for all of them (four
sleepers sharing an instant cost about 100 us each instead of 400) and their packets leave
back to back.

A schedule anchored with :func:`grid_anchor` starts on the grid instant at or before
``now`` (its first frame is due at once, as before) and every later frame of a whole
number of 20 ms blocks lands on the grid too. The grid is absolute (multiples of
:data:`GRID_PERIOD` on the clock's own time line), so sources started apart, in different
sessions, share it without talking to each other.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = ["GRID_PERIOD", "grid_anchor"]

#: One Opus frame: the uplink sources' frame length (960 samples at 48 kHz).
GRID_PERIOD: Final = 0.020


def grid_anchor(now: float, elapsed: float = 0.0, period: float = GRID_PERIOD) -> float:
    """The clock time of a schedule's pts 0 such that the frame at ``elapsed`` seconds
    of media is due on the grid instant at or before ``now``."""
    return math.floor(now / period) * period - elapsed
