"""The recovery controller: the three tiers and the watchdogs that notice when one is needed.

* socket tier: connection-state recovery on the same link (no re-join);
* media tier: one channel recovered in place while the other keeps running; each channel is
  watched and recovered on its own, so a busy uplink never delays the downlink's escalation;
* cold tier: a brand-new link (socket, join, peers) that keeps the thread.

Inputs are explicit (the machine, the current-link slot, a link builder, a clock, an event
sink) and every recovery ends in an :class:`Outcome` handed to ``on_outcome``; the
controller never calls into the session facade. Every retry loop is tenacity's, with the
injected clock's sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from ..clock import Clock
from ..config import RetryPolicy, SessionConfig
from ..errors import AvatarError, Category, ErrorCode
from ..logs import sdk_logger
from ..transport.liveness.netchange import stranded
from ..wire.disconnect import TRANSPORT_ERROR
from .core.capacity import capacity_delay
from .core.clock_jump import ClockJumpDetector
from .core.decisions import decide_connect_failure
from .core.machine import SessionMachine, Trigger
from .core.outcome import Outcome
from .core.retry_budget import ColdStreak, socket_tier_delay
from .core.stats import SessionStats, Tier
from .handshake import Deadline
from .link import LinkBuilder, ServerLink
from .link_slot import LinkSlot
from .media_recovery import MediaTier

log = sdk_logger("avatar_sdk.session")

Emit = Callable[[str, dict[str, Any]], object]
Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


class _Escalate(Exception):
    """The socket tier cannot restore this session: go cold."""


class _TryAgain(Exception):
    """This socket-tier attempt did not verify: another one, within the window."""


class ThreadHolder(Protocol):
    """Who knows the conversation's thread (the session's view): every rebuild joins it."""

    thread_id: str | None


class RecoveryController:
    """The recovery tiers of one session (see ``docs/resilience.md``)."""

    def __init__(
        self,
        *,
        machine: SessionMachine,
        config: SessionConfig,
        clock: Clock,
        slot: LinkSlot,
        builder: LinkBuilder,
        view: ThreadHolder,
        restore: Callable[[ServerLink], Awaitable[None]],
        reassert: Callable[[ServerLink], Awaitable[None]],
        emit: Emit,
        spawn: Spawn,
        on_outcome: Callable[[Outcome], Awaitable[None]],
        stats: SessionStats,
    ) -> None:
        self._machine = machine
        self._config = config
        self._clock = clock
        self._slot = slot
        self._builder = builder
        self._view = view
        self._restore = restore
        self._reassert = reassert
        self._emit = emit
        self._spawn = spawn
        self._on_outcome = on_outcome
        self._stats = stats
        self.media = MediaTier(
            machine=machine, config=config, clock=clock, slot=slot, emit=emit,
            escalate=self.recover_cold, socket_alive=self.socket_alive, stats=stats,
            on_down=self._link_lost, on_up=self._link_restored,
        )  # fmt: skip
        self._streak = ColdStreak(config.cold_reconnect)

    def _link_lost(self) -> None:
        self._streak.lost(self._clock.monotonic())

    def _link_restored(self) -> None:
        self._streak.restored(self._clock.monotonic())

    # -- shared -----------------------------------------------------------------------------
    async def _backoff(self, seconds: float) -> None:
        self._machine.set(backing_off=True)
        try:
            await self._clock.sleep(seconds)
        finally:
            self._machine.set(backing_off=False)

    def _record(self, tier: Tier, duration: float) -> None:
        self._stats.record_recovery(tier, duration)

    def _note(self, error: AvatarError) -> None:
        self._machine.note_cause(error)

    # -- admission: the first connect, queued while there is no capacity ------------------
    async def admit(
        self, advance: Callable[[Trigger], None], retry: RetryPolicy | None = None
    ) -> None:
        """The first connect: :meth:`_admit_once`, and with a ``retry`` policy, again after
        a failed attempt whose error is retryable (``connect(retry=...)``).

        A retry waits ``retry.delay(n)`` (``initial``, then exponential with the policy's
        jitter, capped), at most ``retry.max_attempts`` attempts in all; each starts on a
        fresh link, the failed one closed first, and is announced (``connect_retrying``).
        Not retried: a non-retryable code (``auth_failed``, ``tier_exceeded``, ...) and
        ``capacity_unavailable``, which has already waited ``capacity_max_wait``."""
        if retry is None:
            await self._admit_once(advance)
            return
        clock, m = self._clock, self._machine

        def retryable(exc: BaseException) -> bool:
            return (
                isinstance(exc, AvatarError)
                and exc.retryable
                and exc.code is not ErrorCode.CAPACITY_UNAVAILABLE
            )

        async def announce(state: RetryCallState) -> None:
            await self._release_link()
            error = state.outcome.exception() if state.outcome is not None else None
            code = str(error.code) if isinstance(error, AvatarError) else "unknown"
            if isinstance(error, AvatarError):
                m.note_cause(error)
            log.info(
                "connect attempt %d of %d failed (%s); retrying in %.3gs",
                state.attempt_number,
                retry.max_attempts,
                code,
                state.upcoming_sleep,
            )
            self._emit(
                "connect_retrying",
                {
                    "attempt": state.attempt_number,
                    "max_attempts": retry.max_attempts,
                    "code": code,
                    "retry_in": state.upcoming_sleep,
                },
            )

        async def sleep(seconds: float) -> None:
            m.set(backing_off=True)
            await clock.sleep(seconds)
            m.set(backing_off=False)
            m.fire(Trigger.CONNECT_RETRY)

        retrying = AsyncRetrying(
            stop=stop_after_attempt(retry.max_attempts),
            wait=lambda state: retry.delay(state.attempt_number),
            retry=retry_if_exception(retryable),
            before_sleep=announce,
            sleep=sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                await self._admit_once(advance)

    async def _admit_once(self, advance: Callable[[Trigger], None]) -> None:
        """One connect attempt, waiting in ``queued`` while the backend has no capacity
        (``throwToNoAgent``); the whole wait is bounded by ``capacity_max_wait``. Each
        capacity attempt is a new link; ``advance`` moves the machine through the steps."""
        cfg, clock, m = self._config, self._clock, self._machine
        queued_since = clock.monotonic()

        def over_budget(state: RetryCallState) -> bool:
            waited = clock.monotonic() + (state.upcoming_sleep or 0.0) - queued_since
            return waited > cfg.capacity_max_wait

        async def queue(state: RetryCallState) -> None:
            await self._release_link()
            m.fire(Trigger.CAPACITY_UNAVAILABLE)
            m.note_cause("capacity_unavailable", Category.CAPACITY)
            self._emit(
                "queued", {"attempt": state.attempt_number, "retry_in": state.upcoming_sleep}
            )

        async def sleep(seconds: float) -> None:
            m.set(backing_off=True)
            await clock.sleep(seconds)
            m.set(backing_off=False)
            m.fire(Trigger.RETRY)

        def capacity(exc: BaseException) -> bool:
            return isinstance(exc, AvatarError) and (
                decide_connect_failure(exc.code) is Trigger.CAPACITY_UNAVAILABLE
            )

        retrying = AsyncRetrying(
            stop=over_budget,
            wait=lambda state: capacity_delay(cfg.capacity_backoff, state.attempt_number),
            retry=retry_if_exception(capacity),
            before_sleep=queue,
            sleep=sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._join_new_link(Deadline(cfg.overall_connect_timeout, clock), advance)
        except AvatarError as error:
            if capacity(error):
                raise AvatarError(
                    ErrorCode.CAPACITY_UNAVAILABLE,
                    f"no capacity within capacity_max_wait={cfg.capacity_max_wait:g}s",
                ) from None
            raise

    async def _join_new_link(self, deadline: Deadline, advance: Callable[[Trigger], None]) -> None:
        link = self._builder.create()
        self._slot.install(link)
        await self._builder.join(
            link,
            deadline,
            thread_id=self._view.thread_id,
            advance=advance,
            after_join=self._restore,
        )
        if self._slot.current is not link:  # replaced or closed underneath us
            raise AvatarError(ErrorCode.TRANSPORT_CLOSED, "link replaced during connect")

    async def _release_link(self) -> None:
        await self._slot.retire(self._config.close_timeout / 2)

    # -- tier 1: socket ---------------------------------------------------------------------
    async def recover_socket(self, link: ServerLink, reason: str) -> Outcome | None:
        """A recoverable drop of ``link``: restore it in place, or go cold. None if the
        machine refused (the session is ending, or already recovering)."""
        if not self._machine.try_fire(Trigger.TRANSPORT_LOST):
            return None
        cfg = self._config
        clock = self._clock
        started = clock.monotonic()
        self._streak.lost(started)  # a stable period ends here, not when the cold tier starts
        window_ends = started + cfg.reconnect_window
        attempts = max(1, cfg.max_reconnect_attempts)
        self._machine.note_cause(reason, Category.NETWORK)

        def stop(state: RetryCallState) -> bool:
            # Attempts spread over the window (socket_tier_delay); one that would start
            # after the window ends is not made: the cold tier takes over at once.
            next_at = clock.monotonic() + (state.upcoming_sleep or 0.0)
            return state.attempt_number >= attempts or next_at >= window_ends

        retrying = AsyncRetrying(
            stop=stop,
            wait=lambda state: socket_tier_delay(state.attempt_number),
            retry=retry_if_exception(lambda e: isinstance(e, _TryAgain)),
            sleep=self._backoff,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._socket_attempt(link, reason, attempt.retry_state, window_ends)
        except AvatarError as error:  # refused for good (auth, TLS): no other tier can help
            outcome = Outcome("socket", False, error=error, end_reason=str(error.code))
            await self._on_outcome(outcome)
            return outcome
        except (_Escalate, _TryAgain):
            if not self._machine.try_fire(Trigger.RECOVERY_FAILED):
                return None
            return await self.recover_cold(f"socket recovery failed ({reason})")
        duration = clock.monotonic() - started
        if not self._machine.try_fire(Trigger.RECOVERED):
            return None  # the session ended meanwhile: nothing to report
        self._streak.restored(clock.monotonic())
        self._record("socket", duration)
        self._emit("reconnected", {"tier": "socket", "recovered": True, "duration": duration})
        outcome = Outcome("socket", True, duration)
        await self._on_outcome(outcome)
        return outcome

    async def _socket_attempt(
        self, link: ServerLink, reason: str, state: RetryCallState, window_ends: float
    ) -> None:
        cfg = self._config
        remaining = window_ends - self._clock.monotonic()
        if remaining <= 0:
            raise _Escalate
        attempts = max(1, cfg.max_reconnect_attempts)
        self._emit(
            "reconnecting",
            {
                "tier": "socket",
                "attempt": state.attempt_number,
                "max_attempts": attempts,
                "reason": reason,
            },
        )
        try:
            result = await link.channel.reconnect(min(cfg.server_connect_timeout, remaining))
        except AvatarError as error:
            if not error.retryable and error.code is not ErrorCode.CLOSED:
                raise  # auth refused, TLS not trusted: no other tier can help
            raise _TryAgain from error
        if not result.recovered:
            raise _Escalate  # the server answered with a fresh session: nothing to resume
        if not await link.probe(cfg.socket_probe_timeout):
            raise _TryAgain  # "reconnected but silent" must not count
        try:
            # What the dying socket may have swallowed (recovery replays only the server's
            # events): the approval, mute and pause, re-sent before the session is usable.
            await self._reassert(link)
        except AvatarError as error:
            raise _TryAgain from error

    # -- tier 3: cold reconnect -------------------------------------------------------------
    async def recover_cold(self, reason: str) -> Outcome:
        """A brand-new link, same thread; backoff with jitter and a streak budget that a
        stable connected period resets (``RetryPolicy.reset_after_success``), never given
        up before ``RetryPolicy.min_span`` (the rules: :class:`ColdStreak`)."""
        policy = self._config.cold_reconnect
        clock = self._clock
        started = clock.monotonic()
        streak = self._streak
        reset = streak.begin_cold(started)
        if reset is not None:
            self._emit(
                "retry_budget_reset",
                {"tier": "cold", "spent": reset.spent, "stable_for": reset.stable_for},
            )
        attempts = 0
        tried_at = started

        retrying = AsyncRetrying(
            stop=lambda state: streak.exhausted(tried_at),
            # the first retry waits ``initial``; none overshoots the span owed to the outage
            wait=lambda state: streak.wait(policy.delay(state.attempt_number), clock.monotonic()),
            retry=retry_if_exception(lambda e: isinstance(e, AvatarError) and e.retryable),
            sleep=self._backoff,
            reraise=True,
        )
        try:
            if streak.exhausted(started):
                raise AvatarError(ErrorCode.GAVE_UP, "the cold tier's streak budget is spent")
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    tried_at = clock.monotonic()
                    self._emit(
                        "reconnecting",
                        {
                            "tier": "cold",
                            "attempt": streak.spent + 1,
                            "max_attempts": policy.max_attempts,
                            "reason": reason,
                        },
                    )
                    try:
                        await self._cold_attempt()
                    except AvatarError:
                        streak.failed()
                        raise
        except AvatarError as error:
            self._emit("gave_up", {"tier": "cold", "attempts": attempts, "code": str(error.code)})
            outcome = Outcome("cold", False, error=error, end_reason="gave_up")
            await self._on_outcome(outcome)
            return outcome
        duration = clock.monotonic() - started
        if not self._machine.try_fire(Trigger.COLD_RECONNECTED):
            # The session ended meanwhile: no event for a transition that did not happen.
            return Outcome("cold", False, error=AvatarError(ErrorCode.CLOSED, "ended"))
        streak.succeeded(clock.monotonic())
        self._record("cold", duration)
        self._emit("reconnected", {"tier": "cold", "recovered": False, "duration": duration})
        outcome = Outcome("cold", True, duration)
        await self._on_outcome(outcome)
        return outcome

    async def _cold_attempt(self) -> None:
        cfg = self._config
        await self._slot.retire(cfg.close_timeout / 2)
        link = self._builder.create()
        self._slot.install(link)
        try:
            await self._builder.join(
                link,
                Deadline(cfg.overall_connect_timeout, self._clock),
                thread_id=self._view.thread_id,
                advance=lambda _: None,
                after_join=self._restore,
            )
            if self._slot.current is not link:
                raise AvatarError(ErrorCode.TRANSPORT_CLOSED, "link replaced during the rebuild")
        except AvatarError as error:
            self._note(error)
            raise

    # -- socket liveness --------------------------------------------------------------------
    async def socket_watchdog(self) -> None:
        """Probe a quiet control socket: a silently dead one (no close, no ping answer) is
        found in ``socket_probe_interval + socket_probe_timeout`` instead of Engine.IO's
        ping timeout (up to 45 s), then dropped, which hands it to the socket tier."""
        cfg = self._config
        clock = self._clock
        step = min(0.5, cfg.socket_probe_interval / 4)
        jumps = ClockJumpDetector()
        while not self._machine.terminal:
            await clock.sleep(step)
            away = jumps.check(clock.wall(), clock.monotonic())
            if away is not None:
                # The host slept (the wall clock moved, the monotonic one did not): every
                # connection may be dead without anyone having said so. Probe now.
                log.info("host resumed after ~%.1fs asleep; probing the connection", away)
                self.notify_network_change(cause="resume", detail=f"asleep ~{away:.0f}s")
            link = self._slot.current
            if link is None or not link.connected:
                continue
            if not self._machine.link_up:
                continue
            if clock.monotonic() - link.channel.last_activity < cfg.socket_probe_interval:
                continue
            await self.socket_alive(link)

    async def socket_alive(self, link: ServerLink) -> bool:
        """Probe ``link``'s socket. A probe left unanswered on a socket that still looks
        open means a silently dead one: it is dropped, which hands it to the socket tier.
        False as soon as the socket drops (its disconnect is then being handled)."""
        if await link.probe(self._config.socket_probe_timeout):
            return True
        if link is self._slot.current and link.connected:
            log.info("control socket unresponsive; treating it as dropped")
            self._stats.dead_socket_detections += 1
            await link.channel.drop("ping timeout")
        return False

    def notify_network_change(
        self,
        *,
        cause: str = "application",
        detail: str = "",
        probe: bool = True,
        media: bool = True,
        addresses: frozenset[str] | None = None,
    ) -> None:
        """The host's network changed: probe the control socket at once and (``media``)
        restart both media channels, each once the socket has answered a probe.
        ``probe=False``: only say so (a change that took paths away and gave none).
        ``addresses``: the host's addresses now, when known: a socket bound to one that is
        gone is dead for certain and dropped at once, without waiting for a probe."""
        if self._machine.terminal:
            return
        link = self._slot.current
        if link is not None and probe:
            link.channel.last_activity = 0.0  # the next watchdog tick probes at once
            local = link.channel.local_address()
            if link.connected and stranded(local, addresses):
                log.info("the control socket's address %s is gone: dropping it", local)
                self._stats.dead_socket_detections += 1
                self._slot.tasks(link).spawn(
                    link.channel.drop(TRANSPORT_ERROR), "drop-stranded-socket"
                )
        self._emit("network_changed", {"cause": cause, "detail": detail})
        if media and probe:
            self.media.network_changed(detail or cause)
