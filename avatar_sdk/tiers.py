"""The recovery tiers of a session: socket (connection-state recovery), media (in place),
cold (a brand-new server session), and the watchdogs that notice when one is needed.

A mixin of :class:`~avatar_sdk.session.AvatarSession`, kept apart so the facade stays a
facade. Every state change still goes through the session's machine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from .config import RetryPolicy, SessionConfig
from .connector import Deadline
from .errors import AvatarError, Category, ErrorCode
from .guards import ConversationGuards
from .machine import ClockJumpDetector, SessionMachine
from .transport.control import ControlChannel
from .transport.media import MediaLanes
from .transport.quality import ByteMark, summarize
from .wire import Out, build_check_availability

log = logging.getLogger("avatar_sdk.session")

#: Socket-tier retries: the first is immediate, later ones back off quickly (loopback-fast,
#: yet gentle on a recovering server); the whole tier is bounded by ``reconnect_window``.
SOCKET_TIER_POLICY = RetryPolicy(max_attempts=1_000, initial=0.0, base=0.1, cap=2.0)


class RecoveryTiers:
    """Recovery behaviour of a session (see ``docs/resilience.md``)."""

    config: SessionConfig
    _machine: SessionMachine
    _channel: ControlChannel | None
    _lanes: MediaLanes | None
    _guards: ConversationGuards
    _stats: dict[str, Any]
    _probe_waiters: list[asyncio.Future[None]]
    _health_reason: str | None
    _health_category: str | None
    _backoff: bool

    if TYPE_CHECKING:

        def _emit(self, name: str, data: dict[str, Any] | None = None) -> None: ...
        async def _fail(self, error: AvatarError, *, reason: str) -> None: ...
        async def _flush_held(self) -> None: ...
        async def _close_media(self) -> None: ...
        def _require_channel(self) -> ControlChannel: ...
        async def _open_and_join(
            self, deadline: Deadline, advance: Callable[[str], Coroutine[Any, Any, bool]]
        ) -> None: ...

    # -- tier 1: socket ---------------------------------------------------------------------------
    async def _socket_recovery(self, channel: ControlChannel, reason: str) -> None:
        cfg = self.config
        if not await self._machine.fire("transport_lost"):
            return
        started = time.monotonic()
        window_ends = started + cfg.reconnect_window
        attempts = max(1, cfg.max_reconnect_attempts)
        self._health_reason, self._health_category = reason, str(Category.NETWORK)
        for attempt in range(1, attempts + 1):
            delay = SOCKET_TIER_POLICY.delay(attempt)
            if delay:
                self._backoff = True
                await asyncio.sleep(min(delay, max(0.0, window_ends - time.monotonic())))
                self._backoff = False
            remaining = window_ends - time.monotonic()
            if remaining <= 0 or channel is not self._channel:
                break
            self._emit(
                "reconnecting",
                {"tier": "socket", "attempt": attempt, "max_attempts": attempts, "reason": reason},
            )
            try:
                outcome = await channel.reconnect(min(cfg.server_connect_timeout, remaining))
            except AvatarError as error:
                if error.code is ErrorCode.AUTH_FAILED:
                    await self._fail(error, reason="auth_failed")
                    return
                continue
            if outcome.recovered and not await self._probe(channel, cfg.socket_probe_timeout):
                # "Reconnected but silent" must not count: try again within the window.
                continue
            if outcome.recovered:
                duration = time.monotonic() - started
                await self._machine.fire("recovered")
                self._record_recovery("socket", duration)
                self._health_reason = self._health_category = None
                self._emit(
                    "reconnected", {"tier": "socket", "recovered": True, "duration": duration}
                )
                await self._flush_held()
                return
            # The server answered with a fresh session: nothing to resume on this socket.
            break
        await self._machine.fire("recovery_failed")
        await self._cold_reconnect(f"socket recovery failed ({reason})")

    # -- tier 2: media -----------------------------------------------------------------------------
    async def _media_watchdog(self) -> None:
        """Detect dead media fast: a failed/closed peer, no downlink frames, no uplink
        receiver reports for ``media_stall_timeout``. Recovery runs right here, so there is
        one owner and never two recoveries of the same lanes at once."""
        tick = 0
        watching_since: float | None = None
        stall = self.config.media_stall_timeout
        while not self._machine.terminal:
            await asyncio.sleep(0.1)
            tick += 1
            lanes = self._lanes
            if lanes is None or not self._machine.is_in("connected"):
                watching_since = None
                continue
            if watching_since is None:
                watching_since = time.monotonic()  # usable again: silence counts from now
                await lanes.poll_asr_reports()
            elif tick % 3 == 0:
                await lanes.poll_asr_reports()
            down = lanes.down_channels(time.monotonic(), stall, watching_since)
            if "asr" in down and "receiver report" in down["asr"]:
                # Never act on a stale reading: look at the peer's reports once more first.
                await lanes.poll_asr_reports()
                down = lanes.down_channels(time.monotonic(), stall, watching_since)
            if down:
                await self._recover_media(lanes, down)
                watching_since = None

    async def _recover_media(self, lanes: MediaLanes, down: dict[str, str]) -> None:
        if not await self._machine.fire("media_down"):
            return
        cfg = self.config

        async def emit(event: str, payload: object) -> None:
            await self._require_channel().emit(event, payload)

        async def recover(channel: str, reason: str) -> tuple[str, str, float]:
            method = "renegotiate" if channel == "asr" else "whep_resubscribe"
            error: AvatarError | None = None
            for attempt in range(1, max(1, cfg.max_media_recoveries) + 1):
                started = time.monotonic()
                self._emit(
                    "media_recovering",
                    {"channel": channel, "method": method, "attempt": attempt, "reason": reason},
                )
                try:
                    if channel == "asr":
                        method = await lanes.recover_asr(emit, cfg.media_recovery_timeout)
                    else:
                        method = await lanes.recover_stv(emit, cfg.media_recovery_timeout)
                except AvatarError as exc:
                    error = exc
                    if exc.code in (ErrorCode.SESSION_GONE, ErrorCode.TRANSPORT_CLOSED):
                        break
                    continue
                return channel, method, time.monotonic() - started
            raise error or AvatarError(ErrorCode.MEDIA_FAILED, f"{channel} recovery failed")

        results = await asyncio.gather(
            *(recover(ch, why) for ch, why in down.items()), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if not failures:
            await self._machine.fire("media_recovered")
            for result in results:
                if isinstance(result, tuple):
                    channel, method, duration = result
                    self._record_recovery("media", duration)
                    self._emit(
                        "media_recovered",
                        {"channel": channel, "method": method, "duration": duration},
                    )
            return
        first = failures[0]
        if not isinstance(first, AvatarError):
            raise first
        if not self._machine.is_in("recovering_media"):
            return  # the socket dropped meanwhile: its tier decides, media is re-checked after
        self._health_reason, self._health_category = str(first.code), str(first.category)
        await self._machine.fire("session_lost")
        await self._cold_reconnect(f"media recovery failed ({first.code})")

    # -- socket liveness -----------------------------------------------------------------------
    async def _probe(self, channel: ControlChannel, timeout: float) -> bool:
        """One ``checkAvailability`` round trip: is the server really reading this socket?"""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._probe_waiters.append(waiter)
        try:
            await channel.emit(Out.CHECK_AVAILABILITY, build_check_availability())
            await asyncio.wait_for(waiter, timeout)
        except (AvatarError, TimeoutError):
            return False
        finally:
            if waiter in self._probe_waiters:
                self._probe_waiters.remove(waiter)
        return True

    async def _socket_watchdog(self) -> None:
        """Probe a quiet control socket: a silently dead one (no close, no ping answer) is
        found in ``socket_probe_interval + socket_probe_timeout`` instead of Engine.IO's
        ping timeout (up to 45 s), then handed to the socket tier like any drop."""
        cfg = self.config
        step = min(0.5, cfg.socket_probe_interval / 4)
        clocks = ClockJumpDetector()
        while not self._machine.terminal:
            await asyncio.sleep(step)
            jump = clocks.check(time.time(), time.monotonic())
            if jump is not None:
                # The host slept (the wall clock moved, the monotonic one did not): every
                # connection may be dead without anyone having said so. Probe now.
                log.info("host resumed after ~%.1fs asleep; probing the connection", jump)
                self.notify_network_change()
            channel = self._channel
            if channel is None or not channel.connected:
                continue
            if not self._machine.is_in("connected", "paused", "recovering_media"):
                continue
            if time.monotonic() - channel.last_activity < cfg.socket_probe_interval:
                continue
            if (
                not await self._probe(channel, cfg.socket_probe_timeout)
                and channel is self._channel
            ):
                log.info("control socket unresponsive; treating it as dropped")
                self._stats["dead_socket_detections"] = (
                    self._stats.get("dead_socket_detections", 0) + 1
                )
                await channel.drop("ping timeout")

    def notify_network_change(self) -> None:
        """The host's network changed: probe the control socket at once instead of waiting
        for it to go quiet (media channels are checked every 0.1 s anyway)."""
        if self._machine.terminal:
            return
        channel = self._channel
        if channel is not None:
            channel.last_activity = 0.0  # the next watchdog tick probes at once
        self._emit("network_changed", {})

    # -- tier 3: cold reconnect ---------------------------------------------------------------
    async def _cold_reconnect(self, reason: str) -> None:
        policy = self.config.cold_reconnect
        started = time.monotonic()
        attempts = 0

        def wait(state: RetryCallState) -> float:
            return policy.delay(state.attempt_number + 1)

        def before_sleep(state: RetryCallState) -> None:
            self._backoff = True

        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.max_attempts),
            wait=wait,
            retry=retry_if_exception(lambda e: isinstance(e, AvatarError) and e.retryable),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    self._backoff = False
                    attempts += 1
                    self._emit(
                        "reconnecting",
                        {
                            "tier": "cold",
                            "attempt": attempts,
                            "max_attempts": policy.max_attempts,
                            "reason": reason,
                        },
                    )
                    await self._cold_attempt()
        except AvatarError as error:
            self._emit("gave_up", {"tier": "cold", "attempts": attempts, "code": str(error.code)})
            await self._fail(error, reason="gave_up")
            return
        duration = time.monotonic() - started
        await self._machine.fire("cold_reconnected")
        self._guards.on_rebuilt()
        self._record_recovery("cold", duration)
        self._health_reason = self._health_category = None
        self._emit("reconnected", {"tier": "cold", "recovered": False, "duration": duration})
        await self._flush_held()

    async def _cold_attempt(self) -> None:
        old = self._channel
        self._channel = None
        if old is not None:
            await old.close(self.config.close_timeout / 2)
        await self._close_media()
        deadline = Deadline(self.config.overall_connect_timeout)

        async def stay(_: str) -> bool:
            return True

        try:
            await self._open_and_join(deadline, advance=stay)
        except AvatarError as error:
            self._health_reason = str(error.code)
            self._health_category = str(error.category)
            raise

    def _record_recovery(self, tier: str, duration: float) -> None:
        self._stats["reconnects"][tier] += 1
        durations = self._stats["recovery_durations"][tier]
        durations.append(duration)
        del durations[:-100]

    async def _quality_loop(self, interval: float) -> None:
        """Opt-in ``connection_quality`` events from both peers' ``getStats()``."""
        marks: dict[str, tuple[object, ByteMark]] = {}
        while True:
            await asyncio.sleep(interval)
            lanes = self._lanes
            if lanes is None or not self._machine.is_in("connected"):
                continue
            for channel, link in (("asr", lanes.asr), ("stv", lanes.stv)):
                if link is None or link.pc.connectionState != "connected":
                    continue
                try:
                    report = await link.pc.getStats()
                except Exception:
                    continue
                previous = marks.get(channel)
                mark = previous[1] if previous is not None and previous[0] is link else None
                data, new_mark = summarize(channel, report.values(), mark, time.monotonic())
                marks[channel] = (link, new_mark)
                self._emit("connection_quality", data)
