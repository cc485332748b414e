"""Health: the answer to "is the upstream usable right now, and if not, why" (pure).

Both sessions report it (:meth:`AvatarSession.health` reads it from its machine, the
scripted session from its own states); it lives apart from either so that neither imports
the other's rules to name it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Health"]


@dataclass(frozen=True, slots=True)
class Health:
    """Is the upstream usable right now, and if not, why."""

    upstream: str  # "live" | "idle" | "connecting" | "backoff" | "failed"
    reason: str | None = None
    category: str | None = None
