"""avatar_sdk: a resilient asyncio client for live, interactive AI-avatar conversations."""

from . import logs
from ._version import __version__
from .chat import ChatReply, ChatSession, ConverseResult, converse_once
from .config import RetryPolicy, SessionConfig
from .errors import AvatarError, Category, ErrorCode, Severity
from .event_types import EventName
from .events import Event
from .guards import SPIRAL_RECOVERY_PREFIX
from .session import AvatarSession, Health

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
    "RetryPolicy",
    "SessionConfig",
    "Severity",
    "__version__",
    "converse_once",
]
