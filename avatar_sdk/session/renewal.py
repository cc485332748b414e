"""Renewal past the server's time cap: a new server session on the same thread, swapped in at
a turn boundary without the user noticing (``docs/lifecycle.md``, Long conversations).

Make-before-break: a second link is built on a new socket with the same thread id (the
cold tier's join, ``stvNewSession``, both peers, the playable gate) while the current one
stays the user's. Its opening greeting plays there unseen and unheard: the link reports to
this controller, not to the session's inbound handler (no event, nothing in the
conversation view), its downlink feeds no output and its uplink sends silence. Once the
greeting is over and the conversation is at a turn boundary, the swap is one synchronous
step: the new link becomes the slot's current one, its lanes feed the session's outputs
and send the user's microphone, the old link's lanes stop doing either; the old link is
then closed (its WHEP resource deleted, its peers and socket closed), with no
``session_completed``: the thread goes on.

Break-before-make, when the service refuses a second live session on the thread (an
admission verdict, ``capacity_unavailable``) or ``RenewalPolicy.make_before_break`` is
off: the machine goes ``renewing`` (turns held), the old link is closed first, then the
new one is joined the same way, unseen until its greeting is over.

A new link that fails (its socket drops, WHEP 404, never playable) is closed and tried
again with the policy's backoff (tenacity, on the session's clock) while the current link
is kept; a break-before-make that cannot join hands over to the cold tier.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from ..besteffort import best_effort
from ..clock import Clock, sleep_or
from ..config import RenewalPolicy, SessionConfig
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from ..transport.rtc.asr import UplinkTrack
from ..wire import In, InboundEvent, TimeWarning
from .core.machine import SessionMachine, Trigger
from .core.renewal_plan import TimeLeft, renewal_due, swap_deadline
from .core.stats import SessionStats
from .core.turns import TurnGate
from .handshake import Deadline
from .link import LinkBuilder, LinkListener, ServerLink
from .link_slot import LinkSlot
from .renewal_parts import RenewalParts

log = sdk_logger("avatar_sdk.session")

Emit = Callable[[str, dict[str, Any]], object]
Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]

#: How often the watch looks at the time left, seconds (session clock).
WATCH_TICK = 0.25
#: How long, at most, the gap waits for the new link's first frame after the swap.
GAP_WAIT = 2.0
#: An old link that handed no frame on for this long was idle at the swap (see _gap_start).
IDLE_BEFORE_SWAP = 0.5
#: Longest an opening greeting on a prepared link may run before it counts as over.
OPENING_CAP = 60.0


class _Refused(Exception):
    """The service refused a second live session on the thread: break before make."""


@dataclass(eq=False)
class _Prepared:
    """A link being prepared unseen, and what its socket said so far."""

    link: ServerLink
    silent: UplinkTrack | None
    gate: TurnGate = field(default_factory=TurnGate)
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    lost_reason: str | None = None
    warned: tuple[float, float] | None = None


class RenewalController:
    """Renewals of one session (module docstring)."""

    def __init__(
        self,
        *,
        machine: SessionMachine,
        config: SessionConfig,
        clock: Clock,
        slot: LinkSlot,
        builder: LinkBuilder,
        parts: RenewalParts,
        emit: Emit,
        spawn: Spawn,
        stats: SessionStats,
        media: bool,
    ) -> None:
        self._machine = machine
        self._config = config
        self._policy: RenewalPolicy | None = config.renewal
        self._clock = clock
        self._slot = slot
        self._builder = builder
        self._parts = parts
        self._emit = emit
        self._spawn = spawn
        self._stats = stats
        self._media = media
        self.time = TimeLeft(cap=config.max_conversation_length)
        self._prepared: dict[ServerLink, _Prepared] = {}
        self._running: asyncio.Task[None] | None = None
        self._connected_at: float | None = None
        #: The current server session reached its cap (``conversationTimeExpired``), and
        #: then ended (``conversationEnded``) with a renewal to take over.
        self._expired = False
        self._ended_current = False
        #: The link a renewal at the cap gave up on: the watch does not try again on it (it
        #: serves until its cap, whose end is then taken over, see :meth:`take_over`).
        self._given_up: ServerLink | None = None
        self.listener = LinkListener(self._on_inbound, self._on_protocol_error, self._on_disconnect)

    # -- facts ------------------------------------------------------------------------------
    def started(self, link: ServerLink) -> None:
        """``link`` became the session's current server session (connect, cold reconnect,
        or a swap): its own cap counts from its approval."""
        at = link.approved_at if link.approved_at is not None else self._clock.monotonic()
        self.time.start(at)
        self._expired = self._ended_current = False
        if self._connected_at is None:
            self._connected_at = at

    def warned(self, remaining: float | None) -> None:
        """The current server session's ``time_warning``."""
        self.time.warn(remaining, self._clock.monotonic())

    def expired(self) -> None:
        """The current server session's ``conversationTimeExpired``: its cap is reached."""
        self._expired = True

    def take_over(self) -> bool:
        """The current server session ended (``conversationEnded``). True when that was its
        cap and a renewal carries the conversation on (the one running swaps at once, or a
        break-before-make starts now); False: the session ends as the server said."""
        if not self._expired:
            return False  # ended on purpose (hung up), not by the cap
        due = renewal_due(
            self._policy,
            0.0,
            renewals=self._stats.renewals,
            running_for=self._clock.monotonic() - (self._connected_at or 0.0),
        )
        if due != "now" and not self.renewing:
            return False
        self._ended_current = True
        if not self.renewing and self._machine.connected:
            log.info("the server session reached its cap before a renewal: renewing now")
            self._running = self._spawn(self._renew("time_cap"), "renewal")
        return self.renewing

    @property
    def time_left(self) -> float | None:
        return self.time.left(self._clock.monotonic())

    @property
    def renewing(self) -> bool:
        return self._running is not None and not self._running.done()

    # -- the watch --------------------------------------------------------------------------
    async def watch(self) -> None:
        """Start a renewal when the cap comes within the policy's lead time."""
        while not self._machine.terminal:
            await self._clock.sleep(WATCH_TICK)
            if self.renewing or not self._machine.connected:
                continue
            if self._given_up is not None and self._slot.current is self._given_up:
                continue
            due = renewal_due(
                self._policy,
                self.time_left,
                renewals=self._stats.renewals,
                running_for=self._clock.monotonic() - (self._connected_at or 0.0),
                cap=self.time.known_cap,
            )
            if due == "now":
                link, before = self._slot.current, self._stats.renewals
                await self.renew("time_cap")
                if self._stats.renewals == before and self._slot.current is link:
                    self._given_up = link

    async def renew(self, reason: str) -> None:
        """One renewal, to its end (``session_renewed``, or given up with the current link
        kept). ``session.renew()`` and the watch both come here; one runs at a time."""
        if self.renewing:
            assert self._running is not None
            await asyncio.shield(self._running)
            return
        self._running = self._spawn(self._renew(reason), "renewal")
        await asyncio.shield(self._running)

    async def _renew(self, reason: str) -> None:
        policy = self._policy or RenewalPolicy()
        self._emit("session_renewing", {"reason": reason, "time_left": self.time_left})
        log.info("renewing the server session (%s; %.3gs left)", reason, self.time_left or -1)
        retry = policy.retry
        strategy = "make_before_break" if policy.make_before_break else "break_before_make"

        async def announce(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            code = error.code if isinstance(error, AvatarError) else type(error).__name__
            log.info(
                "renewal attempt %d failed (%s); the current link is kept, retrying in %.3gs",
                state.attempt_number, code, state.upcoming_sleep,
            )  # fmt: skip

        def retryable(exc: BaseException) -> bool:
            return isinstance(exc, AvatarError) and exc.retryable

        if self._ended_current:
            strategy = "break_before_make"  # nothing left to keep: the old one has ended
        try:
            if strategy == "make_before_break":
                async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(retry.max_attempts),
                    wait=lambda state: retry.delay(state.attempt_number + 1),
                    retry=retry_if_exception(retryable),
                    before_sleep=announce,
                    sleep=self._clock.sleep,
                    reraise=True,
                ):
                    with attempt:
                        await self._make_before_break()
                return
        except _Refused:
            strategy = "break_before_make"
        except AvatarError as error:
            if self._ended_current:
                log.warning("renewal gave up (%s) after the cap ended the session", error.code)
                self._spawn(self._parts.end(), "end")
                return
            log.warning("renewal gave up (%s); the current link is kept until the cap", error.code)
            return
        await self._break_before_make()

    # -- make before break ------------------------------------------------------------------
    async def _make_before_break(self) -> None:
        prepared = await self._prepare()
        try:
            deadline = swap_deadline(
                self._policy or RenewalPolicy(),
                ready_at=self._clock.monotonic(),
                now=self._clock.monotonic(),
                left=self.time_left,
                cap=self.time.known_cap,
            )
            cut = not await self._until_boundary(prepared, deadline)
            if prepared.lost.is_set():
                raise AvatarError(ErrorCode.TRANSPORT_CLOSED, "the new link dropped before swap")
            if self._machine.paused or self._machine.terminal:
                # Paused by the user (or ending): not renewed, the cap decides.
                raise AvatarError(ErrorCode.INVALID_STATE, f"no renewal in {self._machine.state}")
            if not self._machine.connected:
                # The current link is recovering: no swap onto it now; tried again.
                raise AvatarError(ErrorCode.TRANSPORT_CLOSED, f"no swap in {self._machine.state}")
        except BaseException:
            await self._discard(prepared)
            raise
        old = self._slot.current
        last_frame = _gap_start(old, self._clock.monotonic())
        abandoned = self._parts.abandon_tool_calls() if cut else []
        self._swap(prepared, old)
        if old is not None:
            self._spawn(self._close_old(old), "renewal-close-old")
        # A cut turn's answer will never end on the old link: the new one answers it.
        self._spawn(self._parts.deliver(cut), "turn-delivery")
        await self._renewed("make_before_break", prepared.link, last_frame, cut, abandoned)

    # -- break before make ------------------------------------------------------------------
    async def _break_before_make(self) -> None:
        m = self._machine
        policy = self._policy or RenewalPolicy()
        # The old link is closed at a turn boundary too (or at the last safe moment).
        deadline = swap_deadline(
            policy,
            ready_at=self._clock.monotonic(),
            now=self._clock.monotonic(),
            left=self.time_left,
            cap=self.time.known_cap,
        )
        cut = not await self._until_boundary(None, deadline)
        if not m.try_fire(Trigger.RENEW_BREAK):
            log.info("break-before-make renewal not started in %s", m.state)
            return
        old = self._slot.current
        last_frame = _gap_start(old, self._clock.monotonic())
        abandoned = self._parts.abandon_tool_calls() if cut else []
        await self._slot.retire(self._config.close_timeout / 2)
        retry = policy.retry
        prepared: _Prepared | None = None
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(retry.max_attempts),
                wait=lambda state: retry.delay(state.attempt_number + 1),
                retry=retry_if_exception(
                    lambda e: (
                        isinstance(e, _Refused | AvatarError)
                        and (isinstance(e, _Refused) or e.retryable)
                    )
                ),
                sleep=self._clock.sleep,
                reraise=True,
            ):
                with attempt:
                    prepared = await self._prepare()
                    if prepared.lost.is_set():
                        await self._discard(prepared)
                        raise AvatarError(ErrorCode.TRANSPORT_CLOSED, "the new link dropped")
        except (AvatarError, _Refused) as error:
            code = error.code if isinstance(error, AvatarError) else "refused"
            log.warning("break-before-make renewal failed (%s); the cold tier takes over", code)
            if m.try_fire(Trigger.RENEWAL_FAILED):
                await self._parts.recover_cold("renewal failed")
            return
        assert prepared is not None
        self._swap(prepared, None)
        if not m.try_fire(Trigger.RENEWED):
            return  # the session ended meanwhile: its endings close the slot
        self._spawn(self._parts.deliver(cut), "turn-delivery")
        await self._renewed("break_before_make", prepared.link, last_frame, cut, abandoned)

    # -- the parts --------------------------------------------------------------------------
    async def _prepare(self) -> _Prepared:
        """A new link on the same thread, joined and playable, its greeting over, unseen."""
        thread = self._parts.thread_id()
        if thread is None:
            raise AvatarError(ErrorCode.INVALID_STATE, "no thread id known yet: nothing to renew")
        cfg = self._config
        silent = UplinkTrack(None) if self._media else None
        link = self._builder.create(self.listener)
        prepared = _Prepared(link, silent)
        self._prepared[link] = prepared
        self._slot.preparing.add(link)
        try:
            await self._builder.join(
                link,
                Deadline(cfg.overall_connect_timeout, self._clock),
                thread_id=thread,
                advance=lambda _: None,
                after_join=self._parts.restore,
                hidden=silent,
            )
            if prepared.lost.is_set():
                raise AvatarError(ErrorCode.TRANSPORT_CLOSED, "the new link dropped")
            if link.lanes is not None and link.lanes.gate_capped:
                # A first connect goes on with such a downlink; a renewal keeps the link
                # that plays instead, and tries again.
                raise AvatarError(ErrorCode.MEDIA_FAILED, "the new link never became playable")
            await self._opening_over(prepared)
        except AvatarError as error:
            await self._discard(prepared)
            if error.code is ErrorCode.CAPACITY_UNAVAILABLE:
                raise _Refused from error
            raise
        except BaseException:
            await self._discard(prepared)
            raise
        return prepared

    async def _opening_over(self, prepared: _Prepared) -> None:
        """Until the prepared link's opening greeting is over (or never began within
        ``agent_timeout``), bounded; ``TRANSPORT_CLOSED`` if its socket drops."""
        clock, gate = self._clock, prepared.gate
        if gate.phase == "expected":
            await _until_began(clock, self._config.agent_timeout, prepared)
            if gate.phase == "expected":
                gate.give_up_waiting()
        deadline = clock.monotonic() + OPENING_CAP
        while gate.phase != "open" and not prepared.lost.is_set():
            left = deadline - clock.monotonic()
            if left <= 0:
                gate.reset()
                break
            prepared.opened.clear()
            await sleep_or(clock, min(left, 0.5), prepared.opened)
        if prepared.lost.is_set():
            raise AvatarError(ErrorCode.TRANSPORT_CLOSED, prepared.lost_reason or "dropped")

    async def _until_boundary(self, prepared: _Prepared | None, deadline: float) -> bool:
        """Until the session is at a turn boundary (True) or ``deadline`` (False); False at
        once when the prepared link drops or the current server session has ended."""
        clock = self._clock
        while prepared is None or not prepared.lost.is_set():
            if self._parts.boundary().reached:
                return True
            if self._ended_current:
                return False  # the old server session is gone: swap now, cut or not
            if clock.monotonic() >= deadline or self._machine.terminal:
                return self._parts.boundary().reached
            await clock.sleep(min(0.05, max(0.0, deadline - clock.monotonic())))
        return False

    def _swap(self, prepared: _Prepared, old: ServerLink | None) -> None:
        """The swap, in one synchronous step (nothing else runs in between)."""
        new = prepared.link
        self._prepared.pop(new, None)
        self._slot.preparing.discard(new)
        new.listener = self._builder.listener
        self._slot.swap(new)
        if old is not None and old.lanes is not None and prepared.silent is not None:
            old.lanes.hide(prepared.silent)
        if new.lanes is not None:
            new.lanes.reveal(self._parts.outputs, self._parts.uplink)
        self.started(new)
        if prepared.warned is not None:
            self.time.warned = prepared.warned

    async def _close_old(self, old: ServerLink) -> None:
        with best_effort("closing the renewed link", log):
            await self._slot.close_retired(old, self._config.close_timeout)

    async def _discard(self, prepared: _Prepared) -> None:
        self._prepared.pop(prepared.link, None)
        with best_effort("closing a renewal's link", log):
            await prepared.link.close(self._config.close_timeout / 2)
        self._slot.preparing.discard(prepared.link)
        if prepared.silent is not None:
            prepared.silent.stop()

    async def _renewed(
        self,
        strategy: str,
        new: ServerLink,
        last_frame: float | None,
        cut: bool,
        abandoned: list[str],
    ) -> None:
        gap = await self._gap(new, last_frame)
        self._stats.record_renewal(gap)
        self._emit(
            "session_renewed",
            {
                "renewals": self._stats.renewals,
                "gap": gap,
                "thread_id": self._parts.thread_id(),
                "strategy": strategy,
                "cut_turn": cut,
                "abandoned_tool_calls": abandoned,
            },
        )

    async def _gap(self, new: ServerLink, last_frame: float | None) -> float | None:
        """From the old link's last frame handed to the outputs to the new link's first
        (None without media: no frames to measure)."""
        stv = new.lanes.stv if new.lanes is not None else None
        if stv is None or last_frame is None:
            return None
        if stv.first_out_at is None:
            with best_effort("waiting for the new link's first frame", log):
                await asyncio.wait_for(stv.shown.wait(), GAP_WAIT)
        if stv.first_out_at is None:
            return None
        return max(0.0, stv.first_out_at - last_frame)

    # -- what a prepared link's socket says ------------------------------------------------
    def _on_inbound(self, link: ServerLink, name: str, event: InboundEvent) -> None:
        prepared = self._prepared.get(link)
        if prepared is None:
            return
        if prepared.gate.feed(event):
            prepared.opened.set()
        elif isinstance(event, TimeWarning) and event.remaining is not None:
            prepared.warned = (event.remaining, self._clock.monotonic())
        if name == In.CONVERSATION_ENDED:
            self._lose(prepared, "the new server session ended")

    def _on_protocol_error(self, link: ServerLink, event: str, detail: str) -> None:
        log.info("renewal link: protocol error on %s (%s)", event, detail)

    def _on_disconnect(self, link: ServerLink, reason: str) -> None:
        prepared = self._prepared.get(link)
        link.handshake.fail(AvatarError(ErrorCode.TRANSPORT_CLOSED, reason))
        if prepared is not None:
            self._lose(prepared, f"socket dropped ({reason})")

    def _lose(self, prepared: _Prepared, reason: str) -> None:
        prepared.lost_reason = reason
        prepared.lost.set()
        prepared.opened.set()

    async def aclose(self) -> None:
        """The session ends: every link still being prepared is closed."""
        for prepared in list(self._prepared.values()):
            await self._discard(prepared)


def _gap_start(link: ServerLink | None, now: float) -> float | None:
    """Where the swap's gap begins: the old link's last frame handed to the outputs, or
    ``now`` (the swap, or the break) when it has handed none on for
    :data:`IDLE_BEFORE_SWAP` (the avatar silent, no video: no frame was due, and the
    silence before the swap is not its gap). None without a downlink."""
    stv = link.lanes.stv if link is not None and link.lanes is not None else None
    if stv is None:
        return None
    last = stv.last_out_at
    return now if last is None or now - last > IDLE_BEFORE_SWAP else last


async def _until_began(clock: Clock, limit: float, prepared: _Prepared) -> None:
    """Until the prepared link's greeting began (its gate left ``expected``), it dropped,
    or ``limit`` seconds passed."""
    deadline = clock.monotonic() + limit
    while prepared.gate.phase == "expected" and not prepared.lost.is_set():
        left = deadline - clock.monotonic()
        if left <= 0:
            return
        prepared.opened.clear()
        await sleep_or(clock, min(left, 0.1), prepared.opened)
