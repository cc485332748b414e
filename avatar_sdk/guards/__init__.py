"""Brain guards, shared by both transports.

Pure arithmetic (``spiral``: the tool-spiral breaker; ``watchdogs``: the brain-stall watchdog
and the pending-response signal) and ``brain``, which applies them, and hands tool calls to
:mod:`avatar_sdk.tools`, for one conversation's brain events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .brain import SPIRAL_RECOVERY_PREFIX, ConversationGuards
    from .core.spiral import SpiralBreaker, SpiralVerdict
    from .core.watchdogs import PendingResponse, StallWatchdog

#: Public name -> the submodule that defines it (loaded on first use).
_EXPORTS: dict[str, str] = {
    "ConversationGuards": ".brain",
    "PendingResponse": ".core.watchdogs",
    "SPIRAL_RECOVERY_PREFIX": ".brain",
    "SpiralBreaker": ".core.spiral",
    "SpiralVerdict": ".core.spiral",
    "StallWatchdog": ".core.watchdogs",
}

__all__ = [
    "SPIRAL_RECOVERY_PREFIX",
    "ConversationGuards",
    "PendingResponse",
    "SpiralBreaker",
    "SpiralVerdict",
    "StallWatchdog",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
