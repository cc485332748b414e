"""Scripted video: ``ScriptedAvatarSession``, an avatar that speaks the audio you give it
(the avatar-session REST protocol with a WHEP downlink; no socket, no brain)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .audio import pcm_tone
    from .core.config import ScriptedConfig
    from .say import SayHandle, SayResult
    from .session import ScriptedAvatarSession

#: Public name -> the submodule that defines it (loaded on first use).
_EXPORTS: dict[str, str] = {
    "SayHandle": ".say",
    "SayResult": ".say",
    "ScriptedAvatarSession": ".session",
    "ScriptedConfig": ".core.config",
    "pcm_tone": ".audio",
}

__all__ = ["SayHandle", "SayResult", "ScriptedAvatarSession", "ScriptedConfig", "pcm_tone"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
