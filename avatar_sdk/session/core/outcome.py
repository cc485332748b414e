"""A recovery's outcome: usable again, or failed with a classified error (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import AvatarError


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a recovery ended: usable again (``ok``), or failed with ``error``."""

    tier: str
    ok: bool
    duration: float = 0.0
    error: AvatarError | None = None
    end_reason: str = "gave_up"
