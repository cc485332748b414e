"""The live session: one ``AvatarSession`` and the parts it composes.

The facade (``facade``) composes the machine (``machine``: states and the rules about them),
the inbound router and handler, the server link and its slot (the outbox), the turn ledger and
sender, user state, endings, the supervisor, and the recovery tiers (``recovery``: admission,
socket and cold tiers; ``media_recovery``: the media tier). ``docs/architecture.md`` maps them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .core.health import Health
    from .core.reply_match import Reply
    from .facade import AvatarSession
    from .replies import SpeechHandle

#: Public name -> the submodule that defines it (loaded on first use).
_EXPORTS: dict[str, str] = {
    "AvatarSession": ".facade",
    "Health": ".core.health",
    "Reply": ".core.reply_match",
    "SpeechHandle": ".replies",
}

__all__ = ["AvatarSession", "Health", "Reply", "SpeechHandle"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
