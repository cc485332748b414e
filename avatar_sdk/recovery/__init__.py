"""Pure guard logic: the tool-spiral breaker and the brain-stall watchdog (no I/O)."""

from .spiral import SpiralBreaker, SpiralVerdict
from .watchdogs import PendingResponse, StallWatchdog

__all__ = ["PendingResponse", "SpiralBreaker", "SpiralVerdict", "StallWatchdog"]
