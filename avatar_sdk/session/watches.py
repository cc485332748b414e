"""Watches: the loops a connected session runs beside the conversation.

Once ``connect()`` succeeds, a live session watches its media (quality, liveness), its
control socket (a probe when quiet), the host network, the server's time cap, the brain's
silence and the idle timer, holds its ``session_completed`` lease, and samples its media
counters for its observers (a cassette's summary). Every loop is a task of the session's
supervisor; each one's rule lives in its own part, this only starts them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from ..clock import Clock
from ..config import SessionConfig
from ..guards.brain import ConversationGuards
from ..lifecycle.completion import CompletionSignal, IdleTimer, default_hooks
from ..observe import Observers
from ..transport.liveness.netchange import brings_a_path
from ..transport.net.netwatch import NetworkWatcher
from ..transport.net.shared_watch import NETWORK_WATCHERS
from ..transport.rtc.asr import UplinkTrack
from .core.machine import SessionMachine
from .endings import Endings
from .link_slot import LinkSlot
from .recovery import RecoveryController
from .renewal import RenewalController
from .supervisor import Supervisor

__all__ = ["Watches"]


@dataclass(eq=False)
class Watches:
    """The watch loops of one connected session (module docstring)."""

    config: SessionConfig
    clock: Clock
    media: bool
    machine: SessionMachine
    supervisor: Supervisor
    slot: LinkSlot
    recovery: RecoveryController
    renewal: RenewalController
    completion: CompletionSignal
    endings: Endings
    idle: IdleTimer
    guards: ConversationGuards
    observers: Observers
    uplink_track: UplinkTrack
    #: The host network watcher (``SessionConfig.watch_network``), once connected.
    network_watcher: NetworkWatcher | None = field(default=None, init=False)

    def start(self, close: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start every watch the config asks for (``close``: what a signal runs)."""
        cfg, spawn = self.config, self.supervisor.spawn
        if self.media and cfg.quality_interval > 0:
            spawn(self.recovery.media.quality_loop(cfg.quality_interval), "quality")
        if self.media:
            spawn(self.recovery.media.watchdog(), "media-watchdog")
        if cfg.socket_probe_interval > 0:
            spawn(self.recovery.socket_watchdog(), "socket-watchdog")
        if cfg.watch_network:
            spawn(self.watch_network(), "network-watch")
        if cfg.renewal is not None:
            spawn(self.renewal.watch(), "renewal-watch")
        self.completion.hold()
        hooks = default_hooks()
        hooks.track(self.completion)
        if cfg.handle_signals:
            hooks.install()
            self.endings.unregister_signals = hooks.register(close)
        self.idle.start()
        if cfg.brain_stall_timeout > 0:
            spawn(self.guards.run_watchdog(lambda: self.machine.connected), "brain-watchdog")
        if self.observers and self.media:
            spawn(self.media_samples(), "media-samples")

    async def watch_network(self) -> None:
        """Subscribed to the process's one host network watcher (shared by every session:
        :mod:`~avatar_sdk.transport.net.shared_watch`) until cancelled."""
        async with NETWORK_WATCHERS.subscribe(
            self.network_changed, clock=self.clock, poll_interval=self.config.network_poll_interval
        ) as watcher:
            self.network_watcher = watcher
            await asyncio.Event().wait()  # until the session's supervisor cancels it

    def network_changed(self, what: str) -> None:
        """The host network changed (``what``): only a change that brings a new path is
        acted on (``netchange.brings_a_path``)."""
        act = brings_a_path(what)
        watcher = self.network_watcher
        self.recovery.notify_network_change(
            cause="detected",
            detail=what,
            probe=act,
            media=act,
            addresses=watcher.addresses() if watcher is not None else None,
        )

    async def media_samples(self) -> None:
        """Once a second, the media counters to the observers (a cassette's summary)."""
        while not self.machine.terminal:
            await self.clock.sleep(1.0)
            counts = {"audio_out": self.uplink_track.frames_sent}
            link = self.slot.current
            lanes = link.lanes if link is not None else None
            if lanes is not None and lanes.stv is not None:
                counts["audio_in"] = lanes.stv.frames.get("audio", 0)
                gate = lanes.stv.video_gate  # frames received, decoded or not (nobody watching)
                video = gate.assembled if gate is not None else lanes.stv.frames.get("video", 0)
                counts["video_in"] = video
            self.observers.media_sample(counts)
