"""Brain guards and client-side tools for one conversation (both transports).

Owns the pure guard state (spiral breaker, stall watchdog, pending-response signal) and the
conversation's tools (call tracker, dispatcher, pending acknowledgements: :mod:`avatar_sdk.tools`),
and turns inbound brain events into public events. It decides nothing about connections: a
tripped hard spiral limit is returned to the session, whose state machine runs the cold
reconnect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..clock import SYSTEM_CLOCK, Clock, sleep_or
from ..config import SessionConfig
from ..observe import NO_OBSERVERS, Observers
from ..tools.acks import ToolAckSender, ToolResponder
from ..tools.core.pending import PendingAcks
from ..tools.core.tracker import ToolTracker
from ..tools.dispatch import Emit, ToolDispatcher, ToolHandler
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
    UserStartedTalking,
    parse_tool_call,
    parse_tool_response_name,
)
from .core.spiral import SpiralBreaker
from .core.watchdogs import PendingResponse, StallWatchdog

#: Prepended (not substituted) to the abandoned turn when it is resent after a spiral.
SPIRAL_RECOVERY_PREFIX: Final = "Please answer in words only this turn, without calling any tool. "


@dataclass(frozen=True, slots=True)
class HardSpiral:
    """The hard tier tripped: the session must rebuild the server session."""

    count: int
    limit: int
    last_turn_text: str | None


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
        self._clock = clock
        self.config = config
        hard = config.effective_hard_tool_spiral_limit if hard_tier else 0
        self.breaker = SpiralBreaker(config.tool_spiral_limit, hard)
        self.watchdog = StallWatchdog(config.brain_stall_timeout)
        self.pending = PendingResponse()
        self.tracker = ToolTracker()
        self.acks = PendingAcks()
        self.tools = ToolDispatcher(emit, self.acks, clock=clock, observers=observers)
        self._responder = ToolResponder(self.acks, clock=clock, observers=observers)
        self.last_turn_text: str | None = None
        self._changed = asyncio.Event()

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
                    self.tools.dispatch(fresh, seg.speech_id)
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
                self.tools.dispatch(recovered, seg.speech_id)
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
        return self.tools.on_tool_call(name, handler, schema)

    async def respond_to_tool(
        self, genie: ToolAckSender | None, call_id: str, result: Any
    ) -> dict[str, Any]:
        """Acknowledge a waiting tool call; the outcome, never an exception for HTTP trouble."""
        return await self._responder.respond(genie, call_id, result)

    async def aclose(self) -> None:
        await self.tools.aclose()
