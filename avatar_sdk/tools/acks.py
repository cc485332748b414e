"""Acknowledging a tool call that waits for its result (``respond_to_tool``, PROTOCOL.md
§3.6): delivered through the session's genie client, an I/O port handed in, so the tools
import no transport. Which calls wait is :class:`~.pending.PendingAcks`' bookkeeping."""

from __future__ import annotations

from typing import Any, Final, Protocol

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import AvatarError, ErrorCode
from ..observe import NO_OBSERVERS, Observers, Point
from .core.pending import PendingAck, PendingAcks

#: ``respond_to_tool`` gives up after this long; the call stays pending for a retry.
TOOL_ACK_TIMEOUT: Final = 15.0


class AckOutcome(Protocol):
    """How one acknowledgement request went (the transport's answer, read-only here)."""

    @property
    def ok(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def status(self) -> int | None: ...


class ToolAckSender(Protocol):
    """The I/O port for tool acknowledgements: the session hands in its genie client, so the
    tools keep the bookkeeping (which call waits, stale or rebuilt) and import no transport."""

    async def tool_response(
        self, *, tool_name: str, call_id: str, response: Any, timeout: float
    ) -> AckOutcome: ...


class ToolResponder:
    """Answers the waiting tool calls of one conversation (``respond_to_tool``)."""

    def __init__(
        self, acks: PendingAcks, *, clock: Clock = SYSTEM_CLOCK, observers: Observers = NO_OBSERVERS
    ) -> None:
        self._acks = acks
        self._clock = clock
        self._observers = observers

    async def respond(
        self, genie: ToolAckSender | None, call_id: str, result: Any
    ) -> dict[str, Any]:
        """Acknowledge a waiting tool call; the outcome, never an exception for HTTP trouble."""
        if not isinstance(call_id, str) or not call_id:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "call_id must be a non-empty string")
        if not isinstance(result, dict):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "result must be a dict")
        name: str | None = None
        try:
            ack = self._acks.take(call_id, self._clock.monotonic())
            name = ack.name if ack is not None else None
            outcome = await self._deliver(genie, call_id, result, ack)
        except BaseException:
            outcome = {"ok": False, "reason": "cancelled"}
            raise
        finally:
            if self._observers:
                self._observers.point(
                    Point.TOOL_ACKED,
                    {
                        "call_id": call_id,
                        "name": name,
                        "ok": outcome["ok"],
                        "reason": outcome["reason"],
                        "status": outcome.get("status"),
                    },
                )
        return outcome

    async def _deliver(
        self, genie: ToolAckSender | None, call_id: str, result: Any, ack: PendingAck | None
    ) -> dict[str, Any]:
        if ack is None:
            return {"ok": False, "reason": "unknown_or_stale"}
        if genie is None:
            self._acks.restore(call_id, ack)
            return {"ok": False, "reason": "no_genie_url"}
        outcome = await genie.tool_response(
            tool_name=ack.name, call_id=call_id, response=result, timeout=TOOL_ACK_TIMEOUT
        )
        if self._acks.generation != ack.generation:
            return {"ok": False, "reason": "session_rebuilt"}
        if not outcome.ok:
            self._acks.restore(call_id, ack)
            return {"ok": False, "reason": outcome.reason, "status": outcome.status}
        return {"ok": True, "reason": "ok"}
