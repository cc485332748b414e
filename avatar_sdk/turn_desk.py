"""TurnDesk: every user turn of a session, from ``speak()`` until the server shows it has it.

It sends turns when the session is usable, holds them while it is not (a recovery, a
restarting agent) and delivers them in order afterwards, records each sent turn in the pure
:class:`~avatar_sdk.turns.TurnLedger`, and after a recovery resends, exactly once, the turns
the server never confirmed. It decides nothing about connections: it reads the machine and
sends through the ``send`` function it is given.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from .clock import Clock, sleep_or
from .config import SessionConfig
from .errors import AvatarError, ErrorCode
from .guards import SPIRAL_RECOVERY_PREFIX, ConversationGuards
from .lifecycle import IdleTimer
from .machine import SessionMachine
from .turns import TurnLedger
from .wire import Out, build_barge_in_marker, build_text_entered, clamp_text

log = logging.getLogger("avatar_sdk.session")

#: Turns held while recovering, at most; older callers get a clear failure, not silence.
MAX_HELD_TURNS = 32
#: States in which a turn can go out now (with the agent there).
_USABLE = ("connected", "recovering_media")
#: States in which a turn waits for the session to be usable again.
_WAITING = ("reconnecting", "cold_reconnecting", "queued", *_USABLE)

Send = Callable[[str, Any], Awaitable[None]]


class TurnDesk:
    """User turns: send, hold, confirm, resend once (see the module docstring)."""

    def __init__(
        self,
        *,
        config: SessionConfig,
        machine: SessionMachine,
        clock: Clock,
        send: Send,
        guards: ConversationGuards,
        idle: IdleTimer,
        emit: Callable[[str, dict[str, Any]], None],
        stats: dict[str, Any],
    ) -> None:
        self._config = config
        self._machine = machine
        self._clock = clock
        self._send = send
        self._guards = guards
        self._idle = idle
        self._emit = emit
        self._stats = stats
        self.ledger = TurnLedger()
        self._held: deque[tuple[str, asyncio.Future[None]]] = deque()
        self._evidence = asyncio.Event()
        stats.setdefault("turns_resent", 0)

    async def speak(self, text: str) -> None:
        """A user turn: sent now, or held until the session is usable again."""
        if not isinstance(text, str) or not text.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "text must be a non-empty string")
        text = clamp_text(text)
        m = self._machine
        if m.is_in(*_USABLE) and not m.data.agent_restarting:
            try:
                await self._send_turn(text)
                return
            except AvatarError as error:
                # The socket died under us and its recovery has not started yet: hold.
                if error.code is not ErrorCode.TRANSPORT_CLOSED or m.terminal:
                    raise
        elif not m.is_in(*_WAITING):
            raise AvatarError(ErrorCode.INVALID_STATE, f"speak() in state {m.state}")
        if len(self._held) >= MAX_HELD_TURNS:
            raise AvatarError(ErrorCode.INVALID_STATE, "too many turns held during recovery")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held.append((text, fut))
        await fut

    async def _send_turn(self, text: str, *, resend: bool = False) -> None:
        await self._send(Out.TEXT_ENTERED, build_barge_in_marker())
        # Recorded before the send: the server's answer may be handled before it returns.
        turn = self.ledger.sent(text, resent=resend)
        try:
            await self._send(Out.TEXT_ENTERED, build_text_entered(text))
        except AvatarError:
            self.ledger.forget(turn)  # never written: the caller holds or fails it
            raise
        self._guards.on_user_turn(text)
        self._idle.touch()

    # -- evidence ---------------------------------------------------------------------------
    def observe(self, speech_id: str | None, turn_to_talk: bool) -> None:
        """Evidence from one inbound event: its speechId, or a user-turn hand-off."""
        confirmed = self.ledger.observe_speech_id(speech_id)
        if turn_to_talk and self.ledger.unconfirmed():
            self.ledger.confirm_current()
            confirmed = True
        if confirmed:
            self._evidence.set()

    # -- after a recovery -------------------------------------------------------------------
    def after_recovery(self, tier: str) -> Coroutine[Any, Any, None]:
        """What to run once a recovery of ``tier`` succeeded: unconfirmed turns sent before
        now are resent once when no evidence comes within ``turn_confirm_timeout``, then
        held turns go out, in the order they were spoken. The cut-off is taken now, so a
        turn spoken after the recovery is never mistaken for a lost one."""
        through = self.ledger.new_epoch() if tier in ("socket", "cold") else 0
        return self._deliver(tier, through)

    async def _deliver(self, tier: str, through: int) -> None:
        if any(t.seq <= through for t in self.ledger.unconfirmed()):
            await self._confirm_or_resend(through, tier)
        await self.flush()

    async def _confirm_or_resend(self, through: int, tier: str) -> None:
        clock, ledger = self._clock, self.ledger
        deadline = clock.monotonic() + self._config.turn_confirm_timeout
        while any(t.seq <= through for t in ledger.unconfirmed()):
            left = deadline - clock.monotonic()
            if left <= 0:
                break
            self._evidence.clear()
            await sleep_or(clock, left, self._evidence)
        for turn in ledger.take_resends(through):
            if not self._machine.is_in(*_USABLE):
                break
            await self._send_turn(turn.text, resend=True)
            self._stats["turns_resent"] += 1
            self._emit("turn_resent", {"text": turn.text, "tier": tier})

    async def resend_after_spiral(self, text: str) -> bool:
        """The hard spiral tier rebuilt the server session: resend the abandoned turn once,
        prefixed, with no barge-in marker (the new server session is idle)."""
        self.ledger.clear()  # the old server session had them; this resend replaces them
        resend = SPIRAL_RECOVERY_PREFIX + text
        try:
            await self._send(Out.TEXT_ENTERED, build_text_entered(resend))
        except AvatarError as error:
            log.info("spiral resend failed: %s", error.code)
            return False
        self.ledger.sent(resend, resent=True)
        self._guards.on_user_turn(None)
        return True

    # -- held turns -------------------------------------------------------------------------
    async def flush(self) -> None:
        """Send held turns, in order, while the session is usable."""
        m = self._machine
        while self._held and m.is_in("connected") and not m.data.agent_restarting:
            text, fut = self._held.popleft()
            try:
                await self._send_turn(text)
            except AvatarError as error:
                if not fut.done():
                    fut.set_exception(error)
                continue
            if not fut.done():
                fut.set_result(None)

    def fail_held(self, error: AvatarError) -> None:
        """The session ended: every held ``speak()`` raises ``error``."""
        while self._held:
            _, fut = self._held.popleft()
            if not fut.done():
                fut.set_exception(error)
