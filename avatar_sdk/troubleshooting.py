"""What each error code means and what to do about it.

One entry per :class:`~avatar_sdk.errors.ErrorCode`, kept beside the catalogue so that the
troubleshooting page of the documentation is generated from it (a code without advice
fails the docs build and a unit test), and so that applications can show the advice::

    except AvatarError as error:
        print(error, "->", advice(error.code).action)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .errors import ErrorCode

__all__ = ["ADVICE", "Advice", "advice"]


@dataclass(frozen=True, slots=True)
class Advice:
    """``meaning``: when the SDK reports the code; ``action``: what the user can do."""

    meaning: str
    action: str


_C = ErrorCode

ADVICE: Final[dict[ErrorCode, Advice]] = {
    _C.CONNECT_TIMEOUT: Advice(
        "The server did not answer a connect step in time: the socket's "
        "`onServerConnected` (`server_connect_timeout`, 10 s), the media session "
        "(`stvNewSession`) or a WHEP answer, all within `overall_connect_timeout` (30 s).",
        "Check that the URL is the conversation backend's and reachable from this host (a "
        "proxy or firewall that holds websockets open without forwarding them looks like "
        "this). Retry: the code is retryable. On a slow network raise "
        "`server_connect_timeout` / `overall_connect_timeout`.",
    ),
    _C.JOIN_TIMEOUT: Advice(
        "The socket is open but joining the conversation timed out: no `clientConfiguration` "
        "within `join_room_timeout` (5 s) or no `joinComplete` within "
        "`join_complete_timeout` (20 s).",
        "Usually the server is overloaded or the token belongs to another environment; "
        "retry, and check that `partner_id` and the token match the backend.",
    ),
    _C.AGENT_TIMEOUT: Advice(
        "The agent did not show up (`showAgent`) or did not ask for permissions "
        "(`askPermissions`) within `agent_timeout` (10 s).",
        "The agent is slow to start or misconfigured on the server; retry, or raise "
        "`agent_timeout`. If it always happens, check the agent's configuration.",
    ),
    _C.ASR_FAILED: Advice(
        "The microphone uplink (a WebRTC peer negotiated over the socket) could not be set "
        "up within `asr_timeout` (30 s): no `asr-webrtc-ready`, no answer, no local ICE "
        "candidate, or ICE never connected.",
        "UDP is probably blocked between you and the media server: configure a TURN relay "
        "(`AvatarSession(..., turn=TurnConfig(...))`). For text only, use `media=False`.",
    ),
    _C.CAPACITY_UNAVAILABLE: Advice(
        "All agents are busy (`throwToNoAgent`): the session is `queued` and tries again "
        "after each wait of `capacity_backoff`; raised only when `capacity_max_wait` "
        "(300 s) is spent.",
        "Nothing, while queued: `queued {attempt, retry_in}` events tell the wait. If it is "
        "raised, try later or ask for more capacity; raise `capacity_max_wait` to wait longer.",
    ),
    _C.TIER_EXCEEDED: Advice(
        "The account's plan limit was reached (`throwToExceededTier`); never retried.",
        "Upgrade the plan or end other conversations of the account; retrying does not help.",
    ),
    _C.BAD_REQUEST: Advice(
        "The server rejected the request (`throwToBadRequest`, or an HTTP 4xx from the chat "
        "API); or the URL answered the Socket.IO websocket upgrade with a plain HTTP status "
        "(`GET /socket.io/?EIO=4&transport=websocket answered 404 Not Found: not a Socket.IO "
        "server`): it points at some other HTTP server. Never retried.",
        "Check the arguments you passed (`thread_id`, `partner_id`, the text); the detail in "
        "the message says what the server objected to. For `not a Socket.IO server`, check "
        "the URL: it must be the avatar service's address (its host, port and path).",
    ),
    _C.AUTH_FAILED: Advice(
        "The server refused the token: the socket's CONNECT was rejected, or an HTTP 401/403.",
        "Mint a fresh token (it may have expired) for the right partner and environment. "
        "Never retried: the same token will be refused again.",
    ),
    _C.PEER_REMOVED: Advice(
        "The server removed this participant from the conversation (`removePeer`).",
        "Another client may have taken the conversation over, or an operator removed it; "
        "start a new session if appropriate.",
    ),
    _C.UNSUPPORTED_CLIENT: Advice(
        "The server does not support this client (`unsupportedClient`).",
        "Upgrade avatar-sdk; if it persists, the backend may have changed its protocol: "
        "report it with the server's detail.",
    ),
    _C.SESSION_GONE: Advice(
        "The server-side media session is gone (a WHEP 404 NO_ACTIVE_SESSION), even after "
        "asking for a fresh one: the media tier escalates to a cold reconnect.",
        "Nothing: recovery handles it. If every recovery ends here, the media server is "
        "dropping sessions; report it.",
    ),
    _C.WRONG_TOKEN_SCOPE: Advice(
        "`ScriptedAvatarSession` was given a token the agentic host refuses for this call: "
        "`avatar-session/create` needs an admin token, and a conversation token is refused.",
        "Mint an admin token on your server (never in a browser) and pass it as "
        "`admin_token`; the conversation token belongs to `AvatarSession`.",
    ),
    _C.SERVER_ERROR: Advice(
        "The server answered a request with HTTP 5xx (a `say` it could not take, a "
        "keep-alive it failed). Retryable; requests that are not idempotent (`say`) are "
        "not retried by the SDK.",
        "Retry the call later; if it persists, the service is degraded: report it.",
    ),
    _C.UNREACHABLE: Advice(
        "The connection never opened: the host name did not resolve, or nothing accepted "
        "the connection at that host and port (the message names which). Retryable.",
        "Check the URL's host and port, that the backend is running and listening there, "
        "and your DNS; during a session the recovery tiers retry it.",
    ),
    _C.TRANSPORT_CLOSED: Advice(
        "The connection to the server closed (reset, dropped), or the chat API answered "
        "5xx. Retryable: the recovery tiers try again.",
        "Check the host and port in the message, your network, and that the backend is "
        "up; during a session the socket and cold tiers handle it without you.",
    ),
    _C.SERVER_ENDED: Advice(
        "The server ended the conversation on purpose (`conversationEnded`, a time limit, "
        "or a Socket.IO disconnect from the server side); never reconnected.",
        "Start a new session (with the same `thread_id` to keep the conversation's memory). "
        "`complete_on_server_end=True` also sends `session_completed` in this case.",
    ),
    _C.AGENT_CRASHED: Advice(
        "The agent process crashed and cannot continue (`AGENT_CHILD_CRASHED`, "
        "`AGENT_HANDLER_FAILED`); the session fails.",
        "Start a new session; if it keeps crashing, the agent itself is broken: report it "
        "with the thread id.",
    ),
    _C.AGENT_RESTARTED: Advice(
        "The agent process restarted (`AGENT_CHILD_CRASHED_RESTARTED`); the session goes on "
        "and turns are held until the agent is back (at most `agent_timeout`).",
        "Nothing: held turns are delivered once it is back. The answer in flight may be lost.",
    ),
    _C.DEVICE_NOT_FOUND: Advice(
        "The audio source's device does not exist (FileNotFoundError, ENODEV, ENOENT); the "
        "session goes on without uplink audio.",
        "Pick another device (`MicrophoneSource(device=...)`) and `await "
        "session.switch_audio(track)`; list devices with `python -m sounddevice`.",
    ),
    _C.DEVICE_BUSY: Advice(
        "The audio device is held by another program (EBUSY or another OSError); the "
        "session goes on without uplink audio.",
        "Close the other program, or switch to another source with `switch_audio()`.",
    ),
    _C.PERMISSION_DENIED: Advice(
        "The operating system denied access to the audio device (PermissionError); the "
        "session goes on without uplink audio.",
        "Grant microphone access to the Python process (on macOS: System Settings > Privacy "
        "> Microphone for your terminal), then `switch_audio()`.",
    ),
    _C.PROTOCOL_VIOLATION: Advice(
        "The server sent a message of the wrong shape; it was ignored (`protocol_error` "
        "event) and the session goes on.",
        "Nothing in your code. If it repeats, upgrade avatar-sdk or report the event name "
        "and detail from `protocol_error`.",
    ),
    _C.INSECURE_TRANSPORT: Advice(
        "Refused before connecting: an `http://` URL, a TLS context that does not verify, "
        "or a media (WHEP) host that is private or loopback.",
        "Use `https://` in production. Against a local backend (the staging server) pass "
        "`allow_insecure_transport=True`; never in production.",
    ),
    _C.TLS_FAILED: Advice(
        "The server's certificate was not trusted, did not match the host name, or the TLS "
        "handshake failed (for example `https://` to a plain-HTTP port); never retried.",
        "Pass your CA with `ca_file=` (or a full `ssl=` context), fix the server's "
        "certificate chain, or check the port. See the security page.",
    ),
    _C.GAVE_UP: Advice(
        "A recovery tier spent its budget (the cold tier's `RetryPolicy.max_attempts` "
        "failed attempts, or rebuilt links that did not stay up `stable_after`, after at "
        "least `min_span` seconds of trying); `gave_up` then `failed`.",
        "The backend stayed unreachable for the whole budget: check it, then start a new "
        "session (same `thread_id` to continue). Tune `SessionConfig.cold_reconnect`.",
    ),
    _C.MEDIA_FAILED: Advice(
        "A media channel could not be set up or recovered: a WHEP status other than 404, "
        "a redirect, an unusable answer, or no frame after re-subscribing.",
        "Retryable: the tiers try again. If it persists, the message names the WHEP status; "
        "a relay-only network needs `turn=`.",
    ),
    _C.INVALID_STATE: Advice(
        "The call is not allowed in the current state (`connect()` twice, `speak()` before "
        "`connect()` or after the end, more than 32 turns held during a recovery).",
        "Check `session.state` first, or wait for `connected`; create a new session after "
        "`ended`/`failed`.",
    ),
    _C.INVALID_ARGUMENT: Advice(
        "An argument or a configuration value was invalid; the message names it and the "
        "rule (e.g. `SessionConfig.idle_timeout must be a finite number >= 0`).",
        "Fix the value named in the message. Nothing was sent to the server.",
    ),
    _C.CLOSED: Advice(
        "The session is closed or ended: a waiter (`wait_for`, `expect`) that could never be "
        "satisfied, or a call after `close()`.",
        "Create a new session; register waiters before the events you expect.",
    ),
    _C.INTERNAL: Advice(
        "A background task of the SDK died unexpectedly; the session fails instead of "
        "pretending to be connected.",
        "A bug: please report it with the `avatar_sdk` log lines (they never contain the token).",
    ),
}


def advice(code: ErrorCode) -> Advice:
    """What ``code`` means and what to do about it."""
    return ADVICE[code]
