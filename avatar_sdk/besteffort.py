"""Best-effort cleanup that never hides what it swallowed.

Closing a dead socket or a half-built peer may fail in a dozen library-specific ways, and
none of them may stop the rest of a teardown. ``contextlib.suppress(Exception)`` would hide
those failures entirely; :func:`best_effort` swallows them too, but logs each one with its
type, so a teardown that keeps failing shows up in the logs. Cancellation is never swallowed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from .logs import sdk_logger

_log = sdk_logger("avatar_sdk")


@contextmanager
def best_effort(what: str, logger: logging.Logger | None = None) -> Iterator[None]:
    """Run the block; an ``Exception`` is logged (DEBUG, with its type) and swallowed."""
    try:
        yield
    except Exception as exc:
        (logger or _log).debug("best effort: %s failed: %s: %s", what, type(exc).__name__, exc)
