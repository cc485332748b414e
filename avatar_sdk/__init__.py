"""avatar_sdk: a resilient asyncio client for live, interactive AI-avatar conversations.

The public names are loaded on first use (PEP 562): ``import avatar_sdk`` and the pytest
plugin stay cheap for projects that only have the SDK installed (the WebRTC and Socket.IO
stacks load with the first ``AvatarSession``, not with the package).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import logs
from ._lazy import lazy_exports
from ._version import __version__

if TYPE_CHECKING:
    from .chat.session import ChatReply, ChatSession, ConverseResult, converse_once
    from .config import RenewalPolicy, RetryPolicy, SessionConfig
    from .errors import AvatarError, Category, ErrorCode, Severity
    from .events.bus import Event
    from .events.names import EventName
    from .guards.brain import SPIRAL_RECOVERY_PREFIX
    from .scripted.core.config import ScriptedConfig
    from .scripted.say import SayHandle, SayResult
    from .scripted.session import ScriptedAvatarSession
    from .session.core.health import Health
    from .session.core.reply_match import Reply
    from .session.facade import AvatarSession
    from .session.replies import SpeechHandle

#: Public name -> the submodule that defines it.
_EXPORTS: dict[str, str] = {
    "SPIRAL_RECOVERY_PREFIX": ".guards",
    "AvatarError": ".errors",
    "AvatarSession": ".session",
    "Category": ".errors",
    "ChatReply": ".chat",
    "ChatSession": ".chat",
    "ConverseResult": ".chat",
    "ErrorCode": ".errors",
    "Event": ".events",
    "EventName": ".events",
    "Health": ".session",
    "Reply": ".session",
    "RenewalPolicy": ".config",
    "RetryPolicy": ".config",
    "SayHandle": ".scripted",
    "SayResult": ".scripted",
    "ScriptedAvatarSession": ".scripted",
    "ScriptedConfig": ".scripted",
    "SessionConfig": ".config",
    "Severity": ".errors",
    "SpeechHandle": ".session",
    "converse_once": ".chat",
}

# No handler, no level: only the filter that keeps the state-machine library's
# per-callback INFO lines about the SDK's own machines out of the application's logs.
logs.install()

__all__ = [
    "SPIRAL_RECOVERY_PREFIX",
    "AvatarError",
    "AvatarSession",
    "Category",
    "ChatReply",
    "ChatSession",
    "ConverseResult",
    "ErrorCode",
    "Event",
    "EventName",
    "Health",
    "RenewalPolicy",
    "Reply",
    "RetryPolicy",
    "SayHandle",
    "SayResult",
    "ScriptedAvatarSession",
    "ScriptedConfig",
    "SessionConfig",
    "Severity",
    "SpeechHandle",
    "__version__",
    "converse_once",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
