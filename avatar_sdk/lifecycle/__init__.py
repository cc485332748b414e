"""Lifecycle: the ``session_completed`` signal and idle timer (``completion``), thread leases
across processes (``leases``) and process shutdown hooks (``shutdown``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .completion import CompletionSignal, IdleTimer
    from .leases import ThreadLease, ThreadLeases, default_leases
    from .shutdown import ShutdownHooks, default_hooks

#: Public name -> the submodule that defines it (loaded on first use).
_EXPORTS: dict[str, str] = {
    "CompletionSignal": ".completion",
    "IdleTimer": ".completion",
    "ShutdownHooks": ".shutdown",
    "ThreadLease": ".leases",
    "ThreadLeases": ".leases",
    "default_hooks": ".shutdown",
    "default_leases": ".leases",
}

__all__ = [
    "CompletionSignal",
    "IdleTimer",
    "ShutdownHooks",
    "ThreadLease",
    "ThreadLeases",
    "default_hooks",
    "default_leases",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
