"""Brain guards and client-side tools for one conversation (both transports).

Owns the pure guard state (spiral breaker, stall watchdog, pending-response signal, tool
tracker, pending acknowledgements) and turns inbound brain events into public events.
It decides nothing about connections: a tripped hard spiral limit is returned to the
session, whose state machine runs the cold reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ..clock import SYSTEM_CLOCK, Clock, sleep_or
from ..config import SessionConfig
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from ..observe import NO_OBSERVERS, Observers, Point
from ..wire import (
    AgentEndTurn,
    AgentInterrupted,
    AgentRawText,
    AgentStartSpeech,
    AgentTurnToTalk,
    BrainSegment,
    InboundEvent,
    StvFinishedGenerating,
    StvStartedTalking,
    ToolCall,
    UserStartedTalking,
    parse_tool_call,
    parse_tool_response_name,
)
from .spiral import SpiralBreaker
from .tools import ArgsSchema, PendingAck, PendingAcks, ToolTracker
from .watchdogs import PendingResponse, StallWatchdog


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
    guards keep the bookkeeping (which call waits, stale or rebuilt) and import no transport."""

    async def tool_response(
        self, *, tool_name: str, call_id: str, response: Any, timeout: float
    ) -> AckOutcome: ...


log = sdk_logger(__name__)

#: Prepended (not substituted) to the abandoned turn when it is resent after a spiral.
SPIRAL_RECOVERY_PREFIX: Final = "Please answer in words only this turn, without calling any tool. "
#: ``respond_to_tool`` gives up after this long; the call stays pending for a retry.
TOOL_ACK_TIMEOUT: Final = 15.0

Emit = Callable[[str, dict[str, Any]], object]
ToolHandler = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class HardSpiral:
    """The hard tier tripped: the session must rebuild the server session."""

    count: int
    limit: int
    last_turn_text: str | None


def call_payload(call: ToolCall, speech_id: str | None = None) -> dict[str, Any]:
    """A tool call as events carry it."""
    return {
        "name": call.name,
        "args": dict(call.args),
        "fused_args": [dict(a) for a in call.fused_args],
        "speech_id": speech_id,
        "call_id": call.call_id,
    }


class ConversationGuards:
    """Guard state and tool dispatch of one conversation."""

    def __init__(
        self,
        config: SessionConfig,
        emit: Emit,
        *,
        hard_tier: bool = True,
        clock: Clock = SYSTEM_CLOCK,
        observers: Observers = NO_OBSERVERS,
    ) -> None:
        self._emit = emit
        self._observers = observers
        self._clock = clock
        self.config = config
        hard = config.effective_hard_tool_spiral_limit if hard_tier else 0
        self.breaker = SpiralBreaker(config.tool_spiral_limit, hard)
        self.watchdog = StallWatchdog(config.brain_stall_timeout)
        self.pending = PendingResponse()
        self.tracker = ToolTracker()
        self.acks = PendingAcks()
        self.last_turn_text: str | None = None
        self._handlers: dict[str, list[tuple[ToolHandler, ArgsSchema | None]]] = {}
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- user side -------------------------------------------------------------------------
    def on_user_turn(self, text: str | None) -> None:
        """A user turn went out (speak, a transcription hand-off, the spiral resend)."""
        if text:
            self.last_turn_text = text
        self._arm_watchdog()
        if self.pending.arm():
            self._emit("response_pending", {})

    def on_rebuilt(self) -> None:
        """A cold reconnect built a new server session."""
        self.breaker.on_rebuilt()
        self.acks.rebuilt()

    # -- inbound ---------------------------------------------------------------------------
    def observe(self, event: InboundEvent) -> HardSpiral | None:
        """Update the guards with one inbound event; returns a hard-spiral verdict if any."""
        if isinstance(event, AgentRawText):
            return self._on_segment(event.segment)
        if isinstance(event, AgentStartSpeech):
            # Re-armed, not cleared: a new speech segment is not yet something the user hears.
            self._arm_watchdog()
            self.tracker.on_speech_start(event.is_new_turn)
            if event.is_new_turn:
                self.breaker.on_new_turn()
        elif isinstance(event, AgentTurnToTalk):
            self.on_user_turn(event.user_transcription)
        elif isinstance(event, StvStartedTalking):
            self._clear_watchdog()
            self._settle()
        elif isinstance(event, UserStartedTalking):
            self._clear_watchdog()
        elif isinstance(event, AgentEndTurn | StvFinishedGenerating | AgentInterrupted):
            self._settle()
        return None

    def _on_segment(self, seg: BrainSegment) -> HardSpiral | None:
        verdict = None
        if seg.is_tool:
            counted = self.breaker.on_tool_segment()
            call = parse_tool_call(seg)
            if call is not None:
                fresh = self.tracker.on_tool(call)
                if fresh is not None:
                    self._dispatch(fresh, seg.speech_id)
            if counted.soft:
                self._emit(
                    "tool_spiral_detected",
                    {"count": counted.turn_count, "limit": self.breaker.soft_limit},
                )
            if counted.hard:
                verdict = HardSpiral(
                    counted.session_count, self.breaker.hard_limit, self.last_turn_text
                )
                self._emit(
                    "tool_spiral_recovering",
                    {
                        "count": verdict.count,
                        "limit": verdict.limit,
                        "last_turn_text": verdict.last_turn_text,
                    },
                )
                self._clear_watchdog()
                self._settle()
        elif seg.is_tool_response:
            name = parse_tool_response_name(seg)
            recovered = self.tracker.on_tool_response(name) if name else None
            if recovered is not None:
                self._dispatch(recovered, seg.speech_id)
        if seg.is_perceivable:
            self._clear_watchdog()
            self.breaker.on_perceivable_output()
        if seg.type and not seg.is_think:
            self._settle()
        return verdict

    def _settle(self) -> None:
        if self.pending.settle():
            self._emit("response_settled", {})

    # -- watchdog --------------------------------------------------------------------------
    def _arm_watchdog(self) -> None:
        self.watchdog.arm(self._clock.monotonic())
        self._changed.set()

    def _clear_watchdog(self) -> None:
        if self.watchdog.armed:
            self.watchdog.clear()
            self._changed.set()

    async def run_watchdog(self, live: Callable[[], bool]) -> None:
        """Fire ``brain_stalled`` {after, count} every window while the brain stays silent
        (only while ``live()``: a stall during a reconnect is the reconnect's business)."""
        dog = self.watchdog
        while True:
            self._changed.clear()
            deadline = dog.deadline
            if deadline is None:
                await self._changed.wait()
                continue
            delay = deadline - self._clock.monotonic()
            if delay > 0:
                await sleep_or(self._clock, delay, self._changed)
                continue
            now = self._clock.monotonic()
            if dog.due(now):
                count = dog.fire(now)
                if live():
                    self._emit("brain_stalled", {"after": dog.timeout, "count": count})

    # -- tools -----------------------------------------------------------------------------
    def on_tool_call(
        self, name: str, handler: ToolHandler, schema: Mapping[str, Any] | None = None
    ) -> Callable[[], None]:
        """Run ``handler(args, call)`` for each call of tool ``name``; returns unregister.

        ``schema`` is checked and compiled here, once: an invalid one raises
        ``AvatarError(INVALID_ARGUMENT)`` now rather than failing every call later."""
        if not isinstance(name, str) or not name:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "tool name must be a non-empty string")
        if not callable(handler):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "handler must be callable")
        entry = (handler, None if schema is None else ArgsSchema(name, schema))
        self._handlers.setdefault(name, []).append(entry)

        def unregister() -> None:
            with contextlib.suppress(ValueError, KeyError):
                self._handlers[name].remove(entry)

        return unregister

    def _dispatch(self, call: ToolCall, speech_id: str | None) -> None:
        payload = call_payload(call, speech_id)
        waits = bool(call.wait_for_response and call.call_id)
        if waits and call.call_id:
            self.acks.add(call.call_id, call.name, self._clock.monotonic())
        if self._observers:
            self._observers.point(
                Point.TOOL_DISPATCHED, {"name": call.name, "call_id": call.call_id, "waits": waits}
            )
        entries = self._handlers.get(call.name, [])
        for _, schema in entries:
            if schema is not None:
                errors = schema.errors(dict(call.args))
                if errors:
                    self._emit("tool_call_invalid", {"call": payload, "errors": errors})
                    return
        self._emit("tool_call", payload)
        for handler, _ in list(entries):
            self._run_handler(handler, call, payload)

    def _run_handler(self, handler: ToolHandler, call: ToolCall, payload: dict[str, Any]) -> None:
        try:
            result = handler(dict(call.args), payload)
        except Exception as exc:
            self._emit("tool_call_result", {"call": payload, "ok": False, "error": repr(exc)[:300]})
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(self._await_handler(result, payload))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif result is not None:
            self._emit("tool_call_result", {"call": payload, "ok": True, "value": result})

    async def _await_handler(self, awaitable: Awaitable[Any], payload: dict[str, Any]) -> None:
        try:
            value = await awaitable
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._emit("tool_call_result", {"call": payload, "ok": False, "error": repr(exc)[:300]})
            return
        if value is not None:
            self._emit("tool_call_result", {"call": payload, "ok": True, "value": value})

    async def respond_to_tool(
        self, genie: ToolAckSender | None, call_id: str, result: Any
    ) -> dict[str, Any]:
        """Acknowledge a waiting tool call; the outcome, never an exception for HTTP trouble."""
        if not isinstance(call_id, str) or not call_id:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "call_id must be a non-empty string")
        if not isinstance(result, dict):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "result must be a dict")
        name: str | None = None
        try:
            ack = self.acks.take(call_id, self._clock.monotonic())
            name = ack.name if ack is not None else None
            outcome = await self._deliver_ack(genie, call_id, result, ack)
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

    async def _deliver_ack(
        self, genie: ToolAckSender | None, call_id: str, result: Any, ack: PendingAck | None
    ) -> dict[str, Any]:
        if ack is None:
            return {"ok": False, "reason": "unknown_or_stale"}
        if genie is None:
            self.acks.restore(call_id, ack)
            return {"ok": False, "reason": "no_genie_url"}
        outcome = await genie.tool_response(
            tool_name=ack.name, call_id=call_id, response=result, timeout=TOOL_ACK_TIMEOUT
        )
        if self.acks.generation != ack.generation:
            return {"ok": False, "reason": "session_rebuilt"}
        if not outcome.ok:
            self.acks.restore(call_id, ack)
            return {"ok": False, "reason": outcome.reason, "status": outcome.status}
        return {"ok": True, "reason": "ok"}

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
