"""TurnDesk: every user turn of a session, from ``speak()`` until the server shows it has it.

It sends turns when the session is usable, holds them while it is not (a recovery, a
restarting agent) and delivers them in order afterwards, records each sent turn in the pure
:class:`~avatar_sdk.session.core.turns.TurnLedger`, and after a recovery resends, exactly once, the
turns
the server never confirmed. It decides nothing about connections: it reads the machine and
sends through the ``send`` function it is given.

The server drops a typed turn sent during an uninterruptible agent turn (the opening
greeting, PROTOCOL.md §4.13), so a turn spoken then is held by the desk's
:class:`~avatar_sdk.session.core.turns.TurnGate` and sent when that turn's closing events arrive,
every
held text joined into one turn as the reference client does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from ..clock import Clock, sleep_or
from ..config import SessionConfig
from ..errors import AvatarError, ErrorCode
from ..guards.brain import SPIRAL_RECOVERY_PREFIX, ConversationGuards
from ..lifecycle.completion import IdleTimer
from ..logs import sdk_logger
from ..observe import NO_OBSERVERS, Observers, Point
from ..wire import (
    MAX_TEXT,
    InboundEvent,
    Out,
    build_barge_in_marker,
    build_text_entered,
    clamp_text,
)
from .core.machine import SessionMachine
from .core.stats import SessionStats
from .core.turns import TurnGate, TurnLedger


def turn_text(text: str) -> str:
    """``text`` as a user turn goes out: control characters stripped, and refused
    (``invalid_argument``) if longer than :data:`~avatar_sdk.wire.MAX_TEXT` characters,
    never cut: a question cut at 8,000 characters is answered as if it were whole."""
    cleaned = clamp_text(text, len(text))  # strips only: the limit is checked, not applied
    if len(cleaned) > MAX_TEXT:
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT,
            f"text is {len(cleaned)} characters; a turn carries at most {MAX_TEXT}"
            " (split it into several speak() calls)",
        )
    return cleaned


#: Told the text of a turn right before it is written (``speak(on_sent=...)``).
OnSent = Callable[[str], None]
#: A held turn: its text, the future its ``speak()`` awaits, who is told when it is written.
_Held = tuple[str, "asyncio.Future[None]", "OnSent | None"]


def _joinable(held: list[_Held]) -> list[list[_Held]]:
    """Held turns in spoken order, grouped so that each group joined by newlines fits in
    one turn."""
    groups: list[list[_Held]] = []
    size = 0
    for item in held:
        if groups and size + 1 + len(item[0]) <= MAX_TEXT:
            groups[-1].append(item)
            size += 1 + len(item[0])
        else:
            groups.append([item])
            size = len(item[0])
    return groups


class Sends(Protocol):
    """Where turns go out: the link slot's :class:`~avatar_sdk.session.link_slot.Outbox`."""

    async def send(self, event: str, payload: Any) -> None: ...


log = sdk_logger("avatar_sdk.session")


#: Turns held while recovering, at most; older callers get a clear failure, not silence.
MAX_HELD_TURNS = 32
#: Longest an uninterruptible agent turn (the greeting) may hold user turns, seconds: a
#: spoken greeting lasts seconds; past this its closing events are taken as lost.
UNINTERRUPTIBLE_CAP = 60.0


class TurnDesk:
    """User turns: send, hold, confirm, resend once (see the module docstring)."""

    def __init__(
        self,
        *,
        config: SessionConfig,
        machine: SessionMachine,
        clock: Clock,
        outbox: Sends,
        guards: ConversationGuards,
        idle: IdleTimer,
        emit: Callable[[str, dict[str, Any]], object],
        stats: SessionStats,
        observers: Observers = NO_OBSERVERS,
    ) -> None:
        self._config = config
        self._observers = observers
        self._machine = machine
        self._clock = clock
        self._send = outbox.send
        self._guards = guards
        self._idle = idle
        self._emit = emit
        self._stats = stats
        self.ledger = TurnLedger()
        self.gate = TurnGate()
        #: Set while the gate is past ``expected`` / while it is ``open``.
        self._gate_started = asyncio.Event()
        self._gate_open = asyncio.Event()
        self._sync_gate()
        self._held: deque[tuple[str, asyncio.Future[None], OnSent | None]] = deque()
        self._evidence = asyncio.Event()

    @property
    def held(self) -> int:
        """Turns held now (waiting for the session or the gate)."""
        return len(self._held)

    def check(self, text: object) -> str:
        """``text`` as it would be sent, or the ``AvatarError`` ``speak()`` raises now (an
        empty text, a state that takes no turns)."""
        if not isinstance(text, str) or not text.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "text must be a non-empty string")
        m = self._machine
        if not (self._usable() and self.gate.phase == "open") and not m.takes_turns:
            raise AvatarError(ErrorCode.INVALID_STATE, f"speak() in state {m.state}")
        return clamp_text(text)

    async def speak(self, text: str, on_sent: OnSent | None = None) -> None:
        """A user turn: sent now, or held until the session is usable again. ``on_sent``
        is told the text as written, right before it is written (joined with others when
        held through an uninterruptible turn)."""
        if not isinstance(text, str) or not text.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "text must be a non-empty string")
        text = turn_text(text)
        if self._observers:
            self._observers.point(Point.TURN_REQUESTED, {"text": text})
        m = self._machine
        if self._usable() and self.gate.phase == "open":
            try:
                await self._send_turn(text, on_sent=(on_sent,))
                return
            except AvatarError as error:
                # The socket died under us and its recovery has not started yet: hold.
                if error.code is not ErrorCode.TRANSPORT_CLOSED or m.terminal:
                    raise
        elif not m.takes_turns:
            raise AvatarError(ErrorCode.INVALID_STATE, f"speak() in state {m.state}")
        if len(self._held) >= MAX_HELD_TURNS:
            raise AvatarError(ErrorCode.INVALID_STATE, "too many turns held during recovery")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held.append((text, fut, on_sent))  # in spoken order, whatever releases it
        if self._usable() and (await self._past_expected() or not await self._gate_opens()):
            await self.flush(join=True)  # nothing else will release it
        await fut

    def _usable(self) -> bool:
        return self._machine.may_send_turn

    async def _send_turn(
        self, text: str, *, resend: bool = False, on_sent: tuple[OnSent | None, ...] = ()
    ) -> None:
        await self._send(Out.TEXT_ENTERED, build_barge_in_marker())
        # Recorded before the send: the server's answer may be handled before it returns.
        turn = self.ledger.sent(text, resent=resend)
        for told in on_sent:
            if told is not None:
                told(text)
        try:
            await self._send(Out.TEXT_ENTERED, build_text_entered(text))
        except AvatarError:
            self.ledger.forget(turn)  # never written: the caller holds or fails it
            raise
        if self._observers:
            self._observers.point(Point.TURN_SENT, {"text": text, "resent": resend})
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

    # -- uninterruptible agent turns --------------------------------------------------------
    def observe_turn(self, event: InboundEvent) -> bool:
        """Feed the gate one inbound event. True when it just opened with turns held: the
        caller sends them now (``flush(join=True)``)."""
        opened = self.gate.feed(event)
        if opened is None:
            return False
        self._sync_gate()
        return opened and bool(self._held)

    def reset_gate(self) -> None:
        """The agent turn in flight is gone (the agent restarted, the session ended): no
        uninterruptible turn holds user turns any more."""
        self.gate.reset()
        self._sync_gate()

    def _sync_gate(self) -> None:
        phase = self.gate.phase
        for event, is_set in (
            (self._gate_started, phase != "expected"),
            (self._gate_open, phase == "open"),
        ):
            if is_set:
                event.set()
            else:
                event.clear()

    async def past_expected(self, *, limit: float) -> None:
        """Wait, at most ``limit`` seconds, until the greeting due after approval began or
        is known never to (``agent_timeout``); the gate may still be running after it."""
        if self.gate.phase != "expected":
            return
        if limit >= self._config.agent_timeout:
            await self._past_expected()
        else:
            await sleep_or(self._clock, limit, self._gate_started)

    async def _past_expected(self) -> bool:
        """The session was just approved and its greeting has not begun: wait for it to
        begin, at most ``agent_timeout`` (a server with no greeting takes turns at once).
        True if it never began (this call opened the gate)."""
        if self.gate.phase != "expected":
            return False
        await sleep_or(self._clock, self._config.agent_timeout, self._gate_started)
        if not self.gate.give_up_waiting():
            return False
        log.info(
            "no opening turn within %.3gs of approval; sending turns", self._config.agent_timeout
        )
        self._sync_gate()
        return True

    async def _gate_opens(self) -> bool:
        """Wait for a running uninterruptible turn to end, at most
        :data:`UNINTERRUPTIBLE_CAP`; False (and the gate forced open) when it never closed:
        a server that loses the closing events must not hold the user's turns forever."""
        if self._gate_open.is_set():
            return True
        await sleep_or(self._clock, UNINTERRUPTIBLE_CAP, self._gate_open)
        if self._gate_open.is_set():
            return True
        log.warning(
            "an uninterruptible turn did not end within %gs; sending turns", UNINTERRUPTIBLE_CAP
        )
        self.reset_gate()
        return False

    async def _until_interruptible(self) -> None:
        """Until the server would take a typed turn: past the expected greeting, then until
        the uninterruptible turn's closing events (bounded, see :meth:`_gate_opens`)."""
        await self._past_expected()
        await self._gate_opens()

    # -- after a recovery -------------------------------------------------------------------
    def after_recovery(self, tier: str) -> Coroutine[Any, Any, None]:
        """What to run once a recovery of ``tier`` succeeded: unconfirmed turns sent before
        now are resent once when no evidence comes within ``turn_confirm_timeout``, then
        held turns go out, in the order they were spoken. The cut-off is taken now, so a
        turn spoken after the recovery is never mistaken for a lost one."""
        through = self.ledger.new_epoch() if tier in ("socket", "cold", "renewal") else 0
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
        await self._until_interruptible()  # a rebuilt session is greeting: it would drop them
        for turn in ledger.take_resends(through):
            if not self._machine.usable:
                break
            await self._send_turn(turn.text, resend=True)
            self._stats.turns_resent += 1
            self._emit("turn_resent", {"text": turn.text, "tier": tier})

    async def resend_cut(self, texts: list[str]) -> None:
        """A renewal's swap cut these turns' answers short (their server session is gone):
        each is sent once more on the new one (``turn_resent`` {tier: "renewal"}), except
        one still unconfirmed, which :meth:`after_recovery` resends anyway."""
        unconfirmed = {t.text for t in self.ledger.unconfirmed()}
        for text in dict.fromkeys(texts):
            if text in unconfirmed or not self._machine.may_send_turn:
                continue
            try:
                await self._send_turn(text, resend=True)
            except AvatarError as error:
                log.info("a cut turn was not resent (%s)", error.code)
                return
            self._stats.turns_resent += 1
            self._emit("turn_resent", {"text": text, "tier": "renewal"})

    async def resend_after_spiral(self, text: str) -> bool:
        """The hard spiral tier rebuilt the server session: resend the abandoned turn once,
        prefixed, with no barge-in marker (the new server session is idle)."""
        self.ledger.clear()  # the old server session had them; this resend replaces them
        # The rebuilt session opens with its greeting, which would drop the resend: held
        # until it ends (PROTOCOL.md §4.6 [newer]).
        await self._until_interruptible()
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
    async def flush(self, *, join: bool = False) -> None:
        """Send held turns, in order, while the session is usable and the server takes
        them; ``join``: as one turn, the texts joined by newlines (after an uninterruptible
        turn, as the reference client does: one answer instead of one barge-in per text)."""
        m = self._machine
        if self._held:
            await self._past_expected()
        if self.gate.phase != "open":
            return  # the uninterruptible turn's closing events flush them (observe_turn)
        if join and len(self._held) > 1 and m.may_send_turn:
            # Joined only as far as the turn limit allows, never cut: the rest go as
            # further turns (each text is within the limit, speak() refused longer ones).
            batches = _joinable(list(self._held))
            self._held.clear()
            for batch in batches:
                error: AvatarError | None = None
                if m.may_send_turn:
                    try:
                        await self._send_turn(
                            "\n".join(text for text, _, _ in batch),
                            on_sent=tuple(told for _, _, told in batch),
                        )
                    except AvatarError as failed:
                        error = failed
                else:
                    error = AvatarError(ErrorCode.INVALID_STATE, f"speak() in state {m.state}")
                for _, fut, _ in batch:
                    if not fut.done():
                        if error is None:
                            fut.set_result(None)
                        else:
                            fut.set_exception(error)
            return
        while self._held and m.may_send_turn:
            text, fut, told = self._held.popleft()
            try:
                await self._send_turn(text, on_sent=(told,))
            except AvatarError as error:
                if not fut.done():
                    fut.set_exception(error)
                continue
            if not fut.done():
                fut.set_result(None)

    def fail_held(self, error: AvatarError) -> None:
        """The session ended: every held ``speak()`` raises ``error``."""
        self.reset_gate()
        while self._held:
            _, fut, _ = self._held.popleft()
            if not fut.done():
                fut.set_exception(error)
