"""avatar_sdk: a resilient asyncio client for live, interactive AI-avatar conversations."""

from ._version import __version__
from .config import RetryPolicy, SessionConfig
from .errors import AvatarError, Category, ErrorCode, Severity
from .events import Event
from .session import AvatarSession, Health

__all__ = [
    "AvatarError",
    "AvatarSession",
    "Category",
    "ErrorCode",
    "Event",
    "Health",
    "RetryPolicy",
    "SessionConfig",
    "Severity",
    "__version__",
]
