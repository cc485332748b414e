"""The classified error catalogue.

Every failure the SDK reports is an :class:`AvatarError` carrying one :class:`ErrorCode`.
Each code has a fixed severity, a retryable flag (may a cold reconnect try again?) and a
health category, declared once in :data:`CATALOGUE`, so classification is a table lookup
rather than scattered judgement calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Severity(StrEnum):
    """How bad an error is for the conversation."""

    INFO = "info"
    WARNING = "warning"  # the session goes on (degraded or recovering)
    ERROR = "error"  # this attempt failed; a retry may succeed
    FATAL = "fatal"  # the session cannot go on


class ErrorCode(StrEnum):
    """Stable error codes (see docs/errors.md)."""

    CONNECT_TIMEOUT = "connect_timeout"
    JOIN_TIMEOUT = "join_timeout"
    AGENT_TIMEOUT = "agent_timeout"
    ASR_FAILED = "asr_failed"
    CAPACITY_UNAVAILABLE = "capacity_unavailable"
    TIER_EXCEEDED = "tier_exceeded"
    BAD_REQUEST = "bad_request"
    AUTH_FAILED = "auth_failed"
    PEER_REMOVED = "peer_removed"
    UNSUPPORTED_CLIENT = "unsupported_client"
    SESSION_GONE = "session_gone"
    TRANSPORT_CLOSED = "transport_closed"
    SERVER_ENDED = "server_ended"
    AGENT_CRASHED = "agent_crashed"
    AGENT_RESTARTED = "agent_restarted"
    DEVICE_NOT_FOUND = "device_not_found"
    DEVICE_BUSY = "device_busy"
    PERMISSION_DENIED = "permission_denied"
    PROTOCOL_VIOLATION = "protocol_violation"
    INSECURE_TRANSPORT = "insecure_transport"
    TLS_FAILED = "tls_failed"
    GAVE_UP = "gave_up"
    MEDIA_FAILED = "media_failed"
    INVALID_STATE = "invalid_state"
    INVALID_ARGUMENT = "invalid_argument"
    CLOSED = "closed"
    INTERNAL = "internal"
    UNREACHABLE = "unreachable"
    WRONG_TOKEN_SCOPE = "wrong_token_scope"
    SERVER_ERROR = "server_error"


class Category(StrEnum):
    """Coarse cause, reported by ``health()`` so apps can word their UI."""

    AUTH = "auth"
    CAPACITY = "capacity"
    NETWORK = "network"
    SERVER = "server"
    CLIENT = "client"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class CodeInfo:
    """Catalogue entry: what a code means for recovery and for users."""

    severity: Severity
    retryable: bool
    category: Category
    message: str


_E, _F, _W = Severity.ERROR, Severity.FATAL, Severity.WARNING

CATALOGUE: Final[dict[ErrorCode, CodeInfo]] = {
    ErrorCode.CONNECT_TIMEOUT: CodeInfo(
        _E, True, Category.NETWORK, "The server did not answer in time."
    ),
    ErrorCode.JOIN_TIMEOUT: CodeInfo(
        _E, True, Category.SERVER, "Joining the conversation timed out."
    ),
    ErrorCode.AGENT_TIMEOUT: CodeInfo(
        _E, True, Category.SERVER, "The agent did not become ready in time."
    ),
    ErrorCode.ASR_FAILED: CodeInfo(
        _E, True, Category.NETWORK, "The microphone uplink could not be set up."
    ),
    ErrorCode.CAPACITY_UNAVAILABLE: CodeInfo(
        _W, True, Category.CAPACITY, "All agents are busy; waiting for capacity."
    ),
    ErrorCode.TIER_EXCEEDED: CodeInfo(
        _F, False, Category.CAPACITY, "The account's plan limit was reached."
    ),
    ErrorCode.BAD_REQUEST: CodeInfo(_F, False, Category.CLIENT, "The server rejected the request."),
    ErrorCode.AUTH_FAILED: CodeInfo(_F, False, Category.AUTH, "The server refused the token."),
    ErrorCode.PEER_REMOVED: CodeInfo(
        _F, False, Category.SERVER, "The server removed this participant."
    ),
    ErrorCode.UNSUPPORTED_CLIENT: CodeInfo(
        _F, False, Category.CLIENT, "The server does not support this client."
    ),
    ErrorCode.SESSION_GONE: CodeInfo(
        _E, True, Category.SERVER, "The server-side media session is gone."
    ),
    ErrorCode.TRANSPORT_CLOSED: CodeInfo(
        _E, True, Category.NETWORK, "The connection to the server was lost."
    ),
    ErrorCode.SERVER_ENDED: CodeInfo(
        _F, False, Category.SERVER, "The server ended the conversation."
    ),
    ErrorCode.AGENT_CRASHED: CodeInfo(
        _F, False, Category.SERVER, "The agent crashed and cannot continue."
    ),
    ErrorCode.AGENT_RESTARTED: CodeInfo(
        _W, True, Category.SERVER, "The agent restarted; the session continues."
    ),
    ErrorCode.DEVICE_NOT_FOUND: CodeInfo(
        _W, False, Category.CLIENT, "The audio device was not found."
    ),
    ErrorCode.DEVICE_BUSY: CodeInfo(_W, False, Category.CLIENT, "The audio device is busy."),
    ErrorCode.PERMISSION_DENIED: CodeInfo(
        _W, False, Category.CLIENT, "Access to the audio device was denied."
    ),
    ErrorCode.PROTOCOL_VIOLATION: CodeInfo(
        _W, True, Category.SERVER, "The server sent a malformed message."
    ),
    ErrorCode.INSECURE_TRANSPORT: CodeInfo(
        _F,
        False,
        Category.CLIENT,
        "Refused an insecure connection or a private host"
        " (allow_insecure_transport=True permits it, for development).",
    ),
    # Not retryable: an untrusted certificate is a configuration fault (or an interception),
    # and a retry would only repeat it; never reported as a lost connection.
    ErrorCode.TLS_FAILED: CodeInfo(
        _F,
        False,
        Category.NETWORK,
        "The server's TLS certificate was not trusted or the TLS handshake failed."
        " Pass ssl= (an ssl.SSLContext) or ca_file= with your CA, or fix the server"
        " certificate.",
    ),
    ErrorCode.GAVE_UP: CodeInfo(_F, False, Category.NETWORK, "Recovery attempts were exhausted."),
    ErrorCode.MEDIA_FAILED: CodeInfo(
        _E, True, Category.NETWORK, "A media channel could not be set up."
    ),
    ErrorCode.INVALID_STATE: CodeInfo(
        _E, False, Category.CLIENT, "That call is not valid in the current state."
    ),
    ErrorCode.INVALID_ARGUMENT: CodeInfo(_E, False, Category.CLIENT, "An argument was invalid."),
    ErrorCode.CLOSED: CodeInfo(_E, False, Category.CLIENT, "The session is closed."),
    ErrorCode.UNREACHABLE: CodeInfo(
        _E, True, Category.NETWORK, "The server could not be reached (the connection never opened)."
    ),
    ErrorCode.WRONG_TOKEN_SCOPE: CodeInfo(
        _F,
        False,
        Category.AUTH,
        "The token has the wrong scope for this call (an avatar session is created with an"
        " admin token, not a conversation token).",
    ),
    ErrorCode.SERVER_ERROR: CodeInfo(
        _E, True, Category.SERVER, "The server answered with an error (HTTP 5xx)."
    ),
    ErrorCode.INTERNAL: CodeInfo(
        _F, False, Category.CLIENT, "An internal task of the SDK failed (a bug: please report)."
    ),
}


class AvatarError(Exception):
    """The one exception type the SDK raises.

    ``str(err)`` is safe to log: messages are built by the SDK from codes and short,
    redacted details, never from tokens or raw payloads.
    """

    def __init__(self, code: ErrorCode, detail: str | None = None) -> None:
        self.code = code
        self.detail = detail
        info = CATALOGUE[code]
        self.severity: Severity = info.severity
        self.retryable: bool = info.retryable
        self.category: Category = info.category
        self.message = info.message if not detail else f"{info.message} ({detail})"
        super().__init__(f"[{code}] {self.message}")

    @property
    def recoverable(self) -> bool:
        """True when a later attempt may succeed (``retryable`` under the contract's name)."""
        return self.retryable

    def as_event(self) -> dict[str, object]:
        """Payload of the ``error`` event."""
        return {
            "code": str(self.code),
            "message": self.message,
            "severity": str(self.severity),
            "recoverable": self.retryable,
        }

    def __repr__(self) -> str:
        return f"AvatarError({self.code!s}, {self.detail!r})"


def info(code: ErrorCode) -> CodeInfo:
    """Catalogue entry of a code."""
    return CATALOGUE[code]


# -- HTTP status -> code: one table for the SDK's two REST surfaces ---------------------------
# Both agree on the client's errors (401/403 auth_failed, 429 capacity_unavailable, any other
# 4xx bad_request) and differ, pinned by their tests, where the server failed:
# * converse (avatar_sdk.chat): a 5xx, or a status outside 4xx/5xx, is transport_closed
#   (retryable, category network), as the chat session has always reported it. server_error
#   (category server) would say it better; changing it is a user-visible change of its own.
# * avatar_session (avatar_sdk.scripted): a 5xx is server_error (retried by the idempotent
#   calls), a status outside 4xx/5xx bad_request. A per-session 404 (session_gone) and the
#   body's own code are read by scripted.protocol.classify_http_error before this table.
# * socket (the Socket.IO websocket upgrade, transport.net.upgrade): a URL that answers HTTP
#   but does not switch protocols is not a Socket.IO server: bad_request (a wrong URL, never
#   retried), a 5xx server_error (a proxy in front of a server that is starting: retried).


class Surface(StrEnum):
    """An HTTP surface the SDK calls (its REST APIs, the websocket upgrade)."""

    CONVERSE = "converse"
    AVATAR_SESSION = "avatar_session"
    SOCKET = "socket"  # the Socket.IO websocket upgrade (not REST: its refusal is HTTP)


#: Statuses that mean the same on every surface.
CLIENT_CODES: Final[dict[int, ErrorCode]] = {
    401: ErrorCode.AUTH_FAILED,
    403: ErrorCode.AUTH_FAILED,
    429: ErrorCode.CAPACITY_UNAVAILABLE,
}


@dataclass(frozen=True, slots=True)
class SurfaceCodes:
    """One surface's row: what it calls each class of status not in :data:`CLIENT_CODES`."""

    client_error: ErrorCode  # any other 4xx
    server_error: ErrorCode  # 5xx
    other: ErrorCode  # outside 4xx/5xx (a redirect not followed, a 1xx/2xx misuse)


#: The per-surface rows (see the comment above for why they differ).
SURFACES: Final[dict[Surface, SurfaceCodes]] = {
    Surface.CONVERSE: SurfaceCodes(
        client_error=ErrorCode.BAD_REQUEST,
        server_error=ErrorCode.TRANSPORT_CLOSED,
        other=ErrorCode.TRANSPORT_CLOSED,
    ),
    Surface.AVATAR_SESSION: SurfaceCodes(
        client_error=ErrorCode.BAD_REQUEST,
        server_error=ErrorCode.SERVER_ERROR,
        other=ErrorCode.BAD_REQUEST,
    ),
    Surface.SOCKET: SurfaceCodes(
        client_error=ErrorCode.BAD_REQUEST,
        server_error=ErrorCode.SERVER_ERROR,
        other=ErrorCode.BAD_REQUEST,
    ),
}


#: What a websocket upgrade refused with a client error (or a 2xx) means, in its error's detail
#: (``transport.net.upgrade``); the command line's hint keys on it.
NOT_SOCKETIO: Final = "not a Socket.IO server"


def code_for_status(status: int, surface: Surface) -> ErrorCode:
    """The error code of a non-2xx ``status`` answered on ``surface``."""
    shared = CLIENT_CODES.get(status)
    if shared is not None:
        return shared
    row = SURFACES[surface]
    if 400 <= status < 500:
        return row.client_error
    if 500 <= status < 600:
        return row.server_error
    return row.other
