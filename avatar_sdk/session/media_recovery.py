"""The media tier: per-channel liveness of the ASR uplink and STV downlink, and their
recovery in place, one channel at a time.

Each channel is watched and recovered on its own: a busy or flapping uplink never delays
the downlink's detection or escalation (and vice versa). Silence counts only from when a
channel was last usable. A channel that cannot be recovered in place escalates to the cold
tier through ``escalate``. Attempts are tenacity's, on the injected clock.

A peer closed by the far end is recovered only once ``socket_alive`` confirms the server
session (``decide_media_down``): a server ending its conversation closes every peer, and
the drop of its socket may be noticed a few ms later; recovering then would be work the
cold tier throws away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_none

from ..besteffort import best_effort
from ..clock import Clock, sleep_or
from ..config import SessionConfig
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from ..transport.liveness.channel_down import WATCH_TICK, DownKind
from ..transport.liveness.quality import ByteMark, summarize
from ..transport.rtc.media import MediaLanes
from .core.decisions import decide_media_down
from .core.machine import SessionMachine, Trigger
from .core.stats import SessionStats
from .link import ServerLink
from .link_slot import LinkSlot

log = sdk_logger("avatar_sdk.session")

#: Media codes after which retrying in place is pointless (the server session is gone, or
#: the socket under the signalling is down: the socket tier decides then).
_MEDIA_FINAL = frozenset({ErrorCode.SESSION_GONE, ErrorCode.TRANSPORT_CLOSED, ErrorCode.CLOSED})
#: How often the watchdog looks at both channels, seconds.
MEDIA_TICK = WATCH_TICK

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


class MediaTier:
    """Tier 2 of one session (see ``docs/resilience.md``)."""

    def __init__(
        self,
        *,
        machine: SessionMachine,
        config: SessionConfig,
        clock: Clock,
        slot: LinkSlot,
        emit: Callable[[str, dict[str, Any]], object],
        escalate: Callable[[str], Awaitable[Any]],
        socket_alive: Callable[[ServerLink], Awaitable[bool]],
        stats: SessionStats,
        on_down: Callable[[], None] = lambda: None,
        on_up: Callable[[], None] = lambda: None,
    ) -> None:
        """``on_down`` / ``on_up``: the session went from live to recovering media and back
        (the cold tier's stable period ends when media is lost, not when it escalates)."""
        self._machine = machine
        self._config = config
        self._clock = clock
        self._slot = slot
        self._emit = emit
        self._escalate = escalate
        self._socket_alive = socket_alive
        self._stats = stats
        self._on_down = on_down
        self._on_up = on_up

    async def watchdog(self) -> None:
        """Detect dead media fast, per channel: a failed/closed peer, no downlink frames,
        an uplink path that stops answering ICE consent (from the peer's first moment),
        uplink receiver reports overdue against the cadence observed on that server (never
        less than ``media_stall_timeout``), downlink video that stops while the voice flows
        (a keyframe asked for, then a re-subscribe: ``MediaLanes.judge_video``). Silence
        counts only from when that channel was last usable; a channel under recovery is not
        judged."""
        stall = self._config.media_stall_timeout
        since: dict[str, float | None] = {"asr": None, "stv": None}
        watched: MediaLanes | None = None
        tick = 0
        while not self._machine.terminal:
            await self._tick(watched)
            tick += 1
            link = self._slot.current
            lanes = link.lanes if link is not None else None
            if link is None or lanes is None or not self._machine.usable:
                since = {"asr": None, "stv": None}
                continue
            if lanes is not watched:
                watched, since = lanes, {"asr": None, "stv": None}
                await lanes.poll_asr_reports()
            elif tick % 3 == 0:
                await lanes.poll_asr_reports()
            now = self._clock.monotonic()
            tasks = self._slot.tasks(link)
            for channel in ("asr", "stv"):
                if tasks.running(channel) is not None:
                    since[channel] = None
                    continue
                start = since[channel]
                if start is None:
                    since[channel] = now
                    continue
                down = lanes.down_channels(now, stall, start).get(channel)
                if down is not None and down.kind is DownKind.NO_RECEIVER_REPORT:
                    # Never act on a stale reading: look at the peer's reports once more.
                    await lanes.poll_asr_reports()
                    down = lanes.down_channels(self._clock.monotonic(), stall, start).get(channel)
                why = down.reason if down is not None else None
                if why is None and channel == "stv":
                    # The voice keeps the downlink alive; its video may still be frozen.
                    why = await lanes.judge_video(now, start)
                if why is None:
                    continue
                peer = lanes.asr if channel == "asr" else lanes.stv
                state = peer.pc.connectionState if peer is not None else None
                if decide_media_down(state) == "check_socket":
                    tasks.spawn(
                        self._check_socket_first(link, lanes, channel, why),
                        f"media-check-{channel}",
                        key=channel,
                    )
                else:
                    self._start_media_recovery(link, lanes, channel, why)

    def network_changed(self, why: str) -> None:
        """The host's network changed: each media channel of the current link that is not
        already recovering is restarted (an ICE restart or renegotiation on the paths the
        host has now), once the control socket answers a probe; a socket that does not is
        left to the socket tiers, after which the media is judged again."""
        link = self._slot.current
        lanes = link.lanes if link is not None else None
        if link is None or lanes is None or not self._machine.usable:
            return
        tasks = self._slot.tasks(link)
        for channel in ("asr", "stv"):
            peer = lanes.asr if channel == "asr" else lanes.stv
            if peer is None or tasks.running(channel) is not None:
                continue
            tasks.spawn(
                self._check_socket_first(link, lanes, channel, f"network changed ({why})"),
                f"media-check-{channel}",
                key=channel,
            )

    async def _tick(self, lanes: MediaLanes | None) -> None:
        """One tick of the clock, cut short when a peer of ``lanes`` fails outright
        (aiortc's state event), so a dead peer is looked at at once."""
        if lanes is None:
            await self._clock.sleep(MEDIA_TICK)
            return
        await sleep_or(self._clock, MEDIA_TICK, lanes.peer_down)
        lanes.peer_down.clear()

    async def _check_socket_first(
        self, link: ServerLink | None, lanes: MediaLanes, channel: str, why: str
    ) -> None:
        """Recover ``channel`` only if the socket answers a probe; a probe cut short by a
        drop (or unanswered: the socket is then dropped) leaves it to the socket tiers,
        after which the channel is judged again."""
        alive = link is not None and await self._socket_alive(link)
        if alive and link is not None and lanes is link.lanes:
            # The link is still current, or this task would have been cancelled with its
            # scope; the recovery takes over the channel's key from this check.
            self._start_media_recovery(link, lanes, channel, why)
        elif not alive:
            log.info("%s; the control socket is down too: no media recovery", why)

    def _start_media_recovery(
        self, link: ServerLink | None, lanes: MediaLanes, channel: str, why: str
    ) -> None:
        if link is None:
            return
        if self._machine.try_fire(Trigger.MEDIA_DOWN):
            self._on_down()
        elif not self._machine.recovering_media:
            return  # media_down is declared from connected only; a running recovery is joined
        self._slot.tasks(link).spawn(
            self._recover_channel(link, lanes, channel, why),
            f"media-recovery-{channel}",
            key=channel,
        )

    async def _recover_channel(
        self, link: ServerLink, lanes: MediaLanes, channel: str, reason: str
    ) -> None:
        cfg = self._config
        started = self._clock.monotonic()
        method = "renegotiate" if channel == "asr" else "whep_resubscribe"
        retrying = AsyncRetrying(
            stop=stop_after_attempt(max(1, cfg.max_media_recoveries)),
            wait=wait_none(),
            retry=retry_if_exception(
                lambda e: isinstance(e, AvatarError) and e.code not in _MEDIA_FINAL
            ),
            sleep=self._clock.sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    started = self._clock.monotonic()
                    self._emit(
                        "media_recovering",
                        {
                            "channel": channel,
                            "method": method,
                            "attempt": attempt.retry_state.attempt_number,
                            "reason": reason,
                        },
                    )
                    recover = lanes.recover_asr if channel == "asr" else lanes.recover_stv
                    method = await recover(link.emit, cfg.media_recovery_timeout)
        except AvatarError as error:
            await self._media_failed(link, lanes, channel, error)
            return
        duration = self._clock.monotonic() - started
        if not self._machine.recovering_media or lanes is not link.lanes:
            return  # the socket tier or a cold rebuild took over meanwhile
        if not self._slot.tasks(link).others(than=asyncio.current_task()):
            if not self._machine.try_fire(Trigger.MEDIA_RECOVERED):
                return
            self._on_up()
        self._stats.record_recovery("media", duration)
        self._emit("media_recovered", {"channel": channel, "method": method, "duration": duration})

    async def _media_failed(
        self, link: ServerLink, lanes: MediaLanes, channel: str, error: AvatarError
    ) -> None:
        if not self._machine.recovering_media:
            return  # the socket dropped meanwhile: its tier decides, media is re-checked after
        if lanes is not link.lanes:
            return  # lanes rebuilt meanwhile (a resume): the new ones are judged on their own
        for task in self._slot.tasks(link).others(than=asyncio.current_task()).values():
            task.cancel()
        self._machine.note_cause(error)
        self._machine.fire(Trigger.SESSION_LOST)
        await self._escalate(f"media recovery failed ({error.code})")

    async def quality_loop(self, interval: float) -> None:
        """Opt-in ``connection_quality`` events from both peers' ``getStats()``."""
        marks: dict[str, tuple[object, ByteMark]] = {}
        while True:
            await self._clock.sleep(interval)
            link = self._slot.current
            lanes = link.lanes if link is not None else None
            if lanes is None or not self._machine.connected:
                continue
            for channel, peer in (("asr", lanes.asr), ("stv", lanes.stv)):
                if peer is None or peer.pc.connectionState != "connected":
                    continue
                report = None
                with best_effort(f"{channel} getStats", log):
                    report = await peer.pc.getStats()
                if report is None:
                    continue
                previous = marks.get(channel)
                mark = previous[1] if previous is not None and previous[0] is peer else None
                data, new_mark = summarize(channel, report.values(), mark, self._clock.monotonic())
                marks[channel] = (peer, new_mark)
                self._emit("connection_quality", data)
