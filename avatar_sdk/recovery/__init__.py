"""Pure guard logic: the tool-spiral breaker, the brain-stall watchdog and the uplink's
receiver-report cadence (no I/O)."""

from .cadence import ReportCadence
from .spiral import SpiralBreaker, SpiralVerdict
from .watchdogs import PendingResponse, StallWatchdog

__all__ = ["PendingResponse", "ReportCadence", "SpiralBreaker", "SpiralVerdict", "StallWatchdog"]
