"""Keep secrets out of logs, reprs and exceptions.

Tokens are registered when a session is created; a logging filter installed on the SDK's
and the Socket.IO libraries' loggers replaces any registered secret in a record's message
and arguments. Defence in depth: the SDK itself never formats a token into a message.
"""

from __future__ import annotations

import logging
import re
import threading
import weakref
from typing import Any, Final

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
REDACTED: Final = "<redacted>"
#: Loggers whose records may carry wire frames (python-socketio and engineio log packets).
GUARDED_LOGGERS: Final = (
    "avatar_sdk",
    "socketio",
    "socketio.client",
    "socketio.server",
    "engineio",
    "engineio.client",
    "engineio.server",
    "aiohttp.access",
)
_installed: weakref.WeakSet[logging.Logger] = weakref.WeakSet()


def register_secret(secret: str) -> None:
    """Remember a secret so that it is scrubbed from every guarded log record."""
    global _pattern  # noqa: PLW0603 - one process-wide registry, swapped atomically
    if not secret or len(secret) < 4:
        return
    with _lock:
        if secret in _secrets:
            return
        _secrets.add(secret)
        _pattern = re.compile(
            "|".join(re.escape(s) for s in sorted(_secrets, key=len, reverse=True))
        )
    install_log_filter()


def redact(text: str) -> str:
    """``text`` with every registered secret replaced."""
    pattern = _pattern
    if pattern is None:
        return text
    return pattern.sub(REDACTED, text)


class RedactingFilter(logging.Filter):
    """Rewrites a record's message so no registered secret survives formatting."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _pattern is None:
            return True
        try:
            message = record.getMessage()
        except Exception:
            return True
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg = cleaned
            record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


#: The one filter instance: on every SDK module's logger (``logs.sdk_logger``) and, once a
#: secret is registered, on the third-party loggers of :data:`GUARDED_LOGGERS`.
REDACTING_FILTER: Final = RedactingFilter()


def install_log_filter() -> None:
    """Attach the redacting filter to every guarded logger (idempotent)."""
    for name in GUARDED_LOGGERS:
        logger = logging.getLogger(name)
        if logger not in _installed:
            logger.addFilter(REDACTING_FILTER)
            _installed.add(logger)


def scrub(value: Any) -> Any:
    """A copy of a JSON-like value with secrets redacted (for journals and events)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value
