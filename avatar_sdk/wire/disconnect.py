"""Socket.IO disconnect reasons and which of them a server can recover (pure, no I/O).

The names are Socket.IO's (JavaScript) vocabulary, which the protocol and the service's
logs use; two are this SDK's own (``IO_SERVER_REFUSED``, ``MESSAGE_TOO_BIG``). They live in
the wire layer so that the state machine can decide on a disconnect without importing the
Socket.IO transport.
"""

from __future__ import annotations

#: Disconnect reasons, in the Socket.IO (JavaScript) vocabulary the protocol uses.
TRANSPORT_CLOSE = "transport close"
TRANSPORT_ERROR = "transport error"
PING_TIMEOUT = "ping timeout"
FORCED_CLOSE = "forced close"
IO_SERVER_DISCONNECT = "io server disconnect"
IO_CLIENT_DISCONNECT = "io client disconnect"

#: The server answered CONNECT_ERROR for the namespace this client is connected to. Not in
#: Socket.IO's vocabulary (a JS client would destroy the socket): the transport is dropped and
#: the session machine treats it as a loss worth one socket-tier recovery, whose own CONNECT
#: answer then tells a glitch (recovered) from a refusal (``auth_failed``) or a lost session.
IO_SERVER_REFUSED = "io server refused"
#: A message over ``max_message_size`` killed the transport (websocket close code 1009).
#: Connection-state recovery would replay that same message: the session rebuilds instead.
MESSAGE_TOO_BIG = "message too big"

#: Reasons after which the server keeps the session for recovery.
RECOVERABLE_REASONS = frozenset({TRANSPORT_CLOSE, TRANSPORT_ERROR, PING_TIMEOUT, FORCED_CLOSE})


def is_recoverable(reason: str) -> bool:
    """Whether a disconnect reason leaves a session the server can restore."""
    return reason in RECOVERABLE_REASONS
