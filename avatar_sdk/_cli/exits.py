"""The exit-code contract of ``avatar-sdk talk`` (and the demo): what each ending means to
a script that runs it. Pure functions of the session's ``ended`` payload or error, so the
mapping is unit-tested on its own and the same everywhere it is used."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..errors import CATALOGUE, AvatarError, ErrorCode

OK: Final = 0
USAGE: Final = 2
REFUSED: Final = 3
CAPACITY: Final = 4
GAVE_UP: Final = 5
SERVER_ENDED: Final = 6
THREAD_HELD: Final = 7
INTERRUPTED: Final = 130
TERMINATED: Final = 143

#: One line per code, for ``--help`` and the docs (the same table in both).
TABLE: Final[tuple[tuple[int, str], ...]] = (
    (OK, "the conversation ended normally (all turns sent, then closed)"),
    (USAGE, "usage error (bad option, no token, unreadable file, http URL without --insecure)"),
    (REFUSED, "authentication failed, or another error that retrying cannot fix"),
    (CAPACITY, "no capacity: the wait for a free agent (capacity_max_wait) ran out"),
    (GAVE_UP, "gave up after retries (connect attempts, or a recovery tier's budget)"),
    (SERVER_ENDED, "the server ended the conversation unexpectedly"),
    (THREAD_HELD, "the thread (--thread) is held by another live process"),
    (INTERRUPTED, "interrupted (Ctrl-C): the thread was completed and the session closed"),
)

#: Codes by which the server (or its agent) ends a conversation the client wanted to go on.
_SERVER_ENDINGS: Final = frozenset(
    {ErrorCode.SERVER_ENDED, ErrorCode.AGENT_CRASHED, ErrorCode.PEER_REMOVED}
)
#: Graceful endings the client asked for, or that end a conversation by its own rules.
_NORMAL_REASONS: Final = frozenset({"closed", "idle_timeout", "cancelled"})


def _code(value: object) -> ErrorCode | None:
    try:
        return ErrorCode(str(value)) if value is not None else None
    except ValueError:
        return None


def for_code(code: ErrorCode, *, gave_up: bool = False) -> int:
    """The exit code of a failure with ``code`` (``gave_up``: a retry budget ran out)."""
    if code is ErrorCode.CAPACITY_UNAVAILABLE:
        return CAPACITY
    if code in _SERVER_ENDINGS:
        return SERVER_ENDED
    if code is ErrorCode.INVALID_ARGUMENT:
        return USAGE
    if code is ErrorCode.GAVE_UP or gave_up:
        # A budget that ran out on a refusal (auth, TLS) is still that refusal.
        return GAVE_UP if code is ErrorCode.GAVE_UP or CATALOGUE[code].retryable else REFUSED
    return GAVE_UP if CATALOGUE[code].retryable else REFUSED


def for_error(error: AvatarError) -> int:
    """The exit code of an ``AvatarError`` raised by ``connect()`` (after its retries)."""
    return for_code(error.code)


def for_ending(ended: Mapping[str, Any]) -> int:
    """The exit code of the session's ``ended`` event payload."""
    reason = str(ended.get("reason") or "")
    code = _code(ended.get("code"))
    if code is None:
        return OK if reason in _NORMAL_REASONS else SERVER_ENDED
    return for_code(code, gave_up=reason == "gave_up")


def epilog() -> str:
    """The table as click help text (``\\b``: printed as is, not rewrapped)."""
    rows = "\n".join(f"  {code:>3}  {text}" for code, text in TABLE)
    return f"\b\nExit codes:\n{rows}"
