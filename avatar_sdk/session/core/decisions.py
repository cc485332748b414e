"""The session's pure decisions: what a fact reported by a channel means for the machine.

Channels and guards report facts (a dropped socket and its reason, a dead media peer, a
failed connect attempt); the session runtime asks these functions what to do, then fires
the machine's :class:`~.machine.Trigger` they name. No state is kept here, and nothing is
done: the rules are tested on their own, the doing stays with the tiers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ErrorCode
from ...wire.disconnect import IO_SERVER_REFUSED, MESSAGE_TOO_BIG, is_recoverable
from .machine import LINK_UP, Trigger

__all__ = [
    "DisconnectDecision",
    "decide_connect_failure",
    "decide_disconnect",
    "decide_media_down",
]


@dataclass(frozen=True, slots=True)
class DisconnectDecision:
    """What a socket disconnect means in a given state."""

    action: str  # "recover_socket" | "recover_cold" | "end" | "abort_connect" | "ignore"
    reason: str


def decide_disconnect(state: str, reason: str) -> DisconnectDecision:
    """The machine's rule for a dropped control socket.

    A recoverable reason while live goes to the socket tier, and so does a CONNECT_ERROR
    for the connected namespace (``io server refused``: the reconnect's own answer then
    tells a glitch from a refusal). A message over ``max_message_size`` goes straight to
    the cold tier: connection-state recovery would replay it first. Any other reason ends
    the session with that reason (the server ended it on purpose). During the connect
    sequence a drop fails the attempt at once instead of waiting for a step timeout.
    """
    if state.startswith("connecting"):
        return DisconnectDecision("abort_connect", reason)
    if state in LINK_UP:
        if reason == MESSAGE_TOO_BIG:
            return DisconnectDecision("recover_cold", reason)
        if is_recoverable(reason) or reason == IO_SERVER_REFUSED:
            return DisconnectDecision("recover_socket", reason)
        return DisconnectDecision("end", reason)
    return DisconnectDecision("ignore", reason)


def decide_media_down(peer_state: str | None) -> str:
    """What a dead media channel calls for: ``"recover"`` it in place at once, or
    ``"check_socket"`` first. A peer *closed* by the far end is what a server does to every
    peer when its conversation ends, which is also when it drops the socket for good (the
    peers may close a few ms before the drop is noticed): a socket probe, cut short by the
    drop, tells a lost server session (the socket tiers decide) from one dead peer. A stall
    or an ICE failure is the path's, not the server's: no probe on that path."""
    return "check_socket" if peer_state == "closed" else "recover"


def decide_connect_failure(code: ErrorCode) -> Trigger:
    """Trigger for a failed connect attempt: capacity waits in ``queued``, the rest fail."""
    return Trigger.CAPACITY_UNAVAILABLE if code is ErrorCode.CAPACITY_UNAVAILABLE else Trigger.FAIL
