"""The timings of a scripted session (pure), and the one rule they do not configure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from ...errors import AvatarError, ErrorCode

__all__ = ["HEALTHY_STRETCH", "ScriptedConfig"]

#: Seconds a (re-)subscribed downlink must stay alive for its failed re-subscribes to be
#: forgiven: ``max_resubscribes`` counts the ones in a row without such a stretch.
HEALTHY_STRETCH: Final = 5.0


@dataclass(frozen=True, slots=True)
class ScriptedConfig:
    """Timings of a :class:`~.session.ScriptedAvatarSession` (seconds)."""

    keep_alive_interval: float = 10.0  # cadence of keep-alive calls while open
    expiry_warning: float = 300.0  # session_expiring this long before the token's exp
    request_timeout: float = 10.0  # each REST call
    connect_timeout: float = 30.0  # create + init-client + subscribe + playable gate
    media_stall_timeout: float = 2.0  # no downlink frame this long: the peer is dead
    recovery_timeout: float = 10.0  # one WHEP re-subscribe, verified by a frame
    max_resubscribes: int = 5  # in a row without a HEALTHY_STRETCH, then ended
    close_timeout: float = 2.0  # end() and the teardown
    onset_margin: float = 2.0  # no voice onset within duration + this: no_onset
    voice_threshold: float = 0.01  # RMS (1.0 = full scale) that counts as voice
    voice_hangover: float = 0.2  # quiet this long after voice: an offset

    def __post_init__(self) -> None:
        for name in (
            "keep_alive_interval", "request_timeout", "connect_timeout",
            "media_stall_timeout", "recovery_timeout", "close_timeout", "onset_margin",
            "voice_threshold", "voice_hangover",
        ):  # fmt: skip
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (math.isfinite(value) and value > 0)
            ):
                raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{name} must be a number > 0")
        if not (math.isfinite(self.expiry_warning) and self.expiry_warning >= 0):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "expiry_warning must be >= 0")
        if isinstance(self.max_resubscribes, bool) or self.max_resubscribes < 0:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "max_resubscribes must be an int >= 0")
