"""AvatarSession: the public facade of one live avatar conversation.

The facade owns the machine (the only state), the event bus, the link of the moment, one
supervisor in which every task lives, and the parts it composes: the link builder (connect
sequence), the recovery controller (three tiers, watchdogs), the guards, the turn ledger
and the endings. Inbound events are routed by the pure :func:`~avatar_sdk.router.route`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from .clock import SYSTEM_CLOCK, Clock
from .config import SessionConfig
from .connector import Deadline
from .conversation import ConversationView
from .endings import Endings
from .errors import AvatarError, ErrorCode
from .events import EventBus, EventSource
from .guards import SPIRAL_RECOVERY_PREFIX, ConversationGuards
from .journal import Journal
from .lifecycle import CompletionSignal, IdleTimer, default_hooks
from .link import LinkBuilder, LinkListener, MediaSpec, ServerLink
from .machine import SessionMachine, capacity_delay, decide_connect_failure, decide_disconnect
from .redact import register_secret
from .router import route
from .supervisor import Supervisor
from .tiers import LinkSlot, Outcome, RecoveryController
from .transport.asr import UplinkTrack
from .transport.csr import IO_SERVER_DISCONNECT
from .transport.genie import GenieClient
from .transport.ice import TurnConfig
from .transport.media import MediaLanes
from .transport.stv import FanoutTrack
from .turns import TurnLedger
from .urls import check_url
from .wire import (
    InboundEvent,
    Out,
    build_barge_in_marker,
    build_empty,
    build_text_entered,
    clamp_text,
    new_sticky_id,
)

log = logging.getLogger(__name__)

#: Turns held while recovering, at most; older callers get a clear failure, not silence.
MAX_HELD_TURNS = 32


@dataclass(frozen=True, slots=True)
class Health:
    """Is the upstream usable right now, and if not, why."""

    upstream: str  # "live" | "idle" | "connecting" | "backoff" | "failed"
    reason: str | None = None
    category: str | None = None


class AvatarSession(EventSource):
    """One live conversation with an avatar. See ``docs/`` for the full guide."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        genie_url: str | None = None,
        partner_id: str | None = None,
        thread_id: str | None = None,
        audio: Any = None,
        video: bool = True,
        media: bool = True,
        config: SessionConfig | None = None,
        allow_insecure_transport: bool = False,
        turn: TurnConfig | None = None,
        journal: str | Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(token, str) or not token.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "token must be a non-empty string")
        register_secret(token)
        self._url = check_url(url, allow_insecure=allow_insecure_transport, what="url")
        genie = genie_url and check_url(
            genie_url, allow_insecure=allow_insecure_transport, what="genie_url"
        )
        if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "thread_id must be a non-empty string")
        self.config = cfg = config or SessionConfig()
        self._clock = clock or SYSTEM_CLOCK
        self._media = bool(media)
        self._sticky_id = new_sticky_id()
        self._bus = EventBus()
        self._machine = SessionMachine(on_change=self._on_state_change)
        self._supervisor = Supervisor(self._on_task_failure)
        self._slot = LinkSlot()
        self._view = ConversationView(thread_id=thread_id)
        self._ledger = TurnLedger()
        self._held: deque[tuple[str, asyncio.Future[None]]] = deque()
        self._evidence = asyncio.Event()
        self._agent_back: asyncio.Future[None] | None = None
        self._mic_enabled = True
        self._mute_task: asyncio.Task[Any] | None = None
        self._connect_task: asyncio.Task[Any] | None = None
        self._close_requested = False
        self._stats: dict[str, Any] = {
            "reconnects": {"socket": 0, "media": 0, "cold": 0},
            "recovery_durations": {"socket": [], "media": [], "cold": []},
            "events_in": 0,
            "events_out": 0,
            "protocol_errors": 0,
            "turns_resent": 0,
            "connect_duration": None,
        }
        self._uplink_track = UplinkTrack(audio, on_error=self._on_source_error)
        self._outputs: dict[str, FanoutTrack] = {"audio": FanoutTrack("audio")}
        if video:
            self._outputs["video"] = FanoutTrack("video")
        spec = MediaSpec(
            self._uplink_track, self._outputs, bool(video), allow_insecure_transport, turn
        )
        listener = LinkListener(self._on_inbound, self._on_protocol_error, self._on_disconnect)
        self._builder = LinkBuilder(
            self._url,
            token,
            config=cfg,
            sticky_id=self._sticky_id,
            partner_id=partner_id,
            media=spec if self._media else None,
            counters=self._stats,
            listener=listener,
        )
        self._guards = ConversationGuards(cfg, self._emit)
        self._genie = GenieClient(genie, token) if genie else None
        self._completion = CompletionSignal(
            self._genie, timeout=cfg.session_complete_timeout, thread_id=thread_id
        )
        self._idle = IdleTimer(cfg.idle_timeout, self._on_idle)
        self._journal = Journal(journal, session_label=self._sticky_id) if journal else None
        if self._journal is not None:
            self._bus.on("*", self._journal.record)
        self._recovery = RecoveryController(
            machine=self._machine,
            config=cfg,
            clock=self._clock,
            slot=self._slot,
            builder=self._builder,
            thread_id=lambda: self._view.thread_id,
            restore=self._restore_user_state,
            emit=self._emit,
            spawn=self._supervisor.spawn,
            on_outcome=self._after_recovery,
            stats=self._stats,
        )
        self._endings = Endings(
            config=cfg,
            machine=self._machine,
            bus=self._bus,
            slot=self._slot,
            supervisor=self._supervisor,
            guards=self._guards,
            genie=self._genie,
            completion=self._completion,
            idle=self._idle,
            journal=self._journal,
            outputs=self._outputs,
            uplink_track=self._uplink_track,
            fail_waiters=self._fail_held,
        )

    # -- introspection --------------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"<AvatarSession state={self.state} thread={self.thread_id!r} url={self._url!r}"
            f" media={self._media}>"
        )

    @property
    def state(self) -> str:
        """Current state name (see the state list in ``docs/state-machine.md``)."""
        return self._machine.state

    @property
    def thread_id(self) -> str | None:
        """The conversation thread, once known (given at construction or learned)."""
        return self._view.thread_id

    @property
    def sticky_id(self) -> str:
        return self._sticky_id

    @property
    def avatar_audio(self) -> FanoutTrack | None:
        """The avatar's voice (an aiortc track; None until subscribed). It keeps delivering
        across reconnects: the session re-feeds it from every new subscription."""
        return self._outputs["audio"] if self._machine.data.subscribed else None

    @property
    def avatar_video(self) -> FanoutTrack | None:
        """The avatar's video (an aiortc track; None until subscribed or with video=False)."""
        return self._outputs.get("video") if self._machine.data.subscribed else None

    @property
    def media(self) -> MediaLanes | None:
        """The current WebRTC lanes (diagnostics and tests)."""
        link = self._slot.current
        return link.lanes if link is not None else None

    def health(self) -> Health:
        """Upstream health, read from the machine: live, idle, connecting, backoff, failed."""
        m, data = self._machine, self._machine.data
        if m.is_in("connected", "paused"):
            return Health("live")
        upstream = (
            "failed"
            if m.is_in("failed")
            else "idle"
            if m.is_in("idle", "ended", "disconnecting")
            else "backoff"
            if data.backing_off or m.is_in("queued")
            else "connecting"
        )
        return Health(upstream, data.reason, data.category)

    def stats(self) -> dict[str, Any]:
        """Counters: reconnects per tier, recovery durations (s), events in and out."""
        snapshot = dict(self._stats)
        snapshot["reconnects"] = dict(self._stats["reconnects"])
        snapshot["recovery_durations"] = {
            k: list(v) for k, v in self._stats["recovery_durations"].items()
        }
        snapshot["events_emitted"] = self._bus.emitted
        return snapshot

    def notify_network_change(self) -> None:
        """The host's network changed: probe the control socket at once."""
        self._recovery.notify_network_change()

    async def switch_audio(self, track: Any) -> None:
        """Send from ``track`` from now on (None: silence); no renegotiation, mute kept."""
        self._uplink_track.switch(track)

    # -- internals shared by the parts ------------------------------------------------------
    def _emit(self, name: str, data: dict[str, Any] | None = None) -> None:
        self._bus.emit(name, data or {})

    def _on_state_change(self, state: str, previous: str, trigger: str) -> None:
        self._emit("state_changed", {"state": state, "previous": previous, "trigger": trigger})

    def _on_source_error(self, code: ErrorCode, exc: BaseException) -> None:
        log.warning("audio source failed (%s); the uplink continues with silence", code)
        self._emit("error", AvatarError(code, type(exc).__name__).as_event())

    def _on_task_failure(self, name: str, exc: BaseException) -> None:
        """A supervised task died: the session fails loudly, never limps on."""
        error = AvatarError(ErrorCode.INTERNAL, f"{name}: {type(exc).__name__}")
        if not self._machine.terminal:
            self._supervisor.spawn(self._endings.fail(error, reason="internal"), "fail")

    # -- context manager ------------------------------------------------------------------
    async def __aenter__(self) -> AvatarSession:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- connect --------------------------------------------------------------------------
    async def connect(self) -> None:
        """Run the connect sequence; raises ``AvatarError`` (state ``failed``) on failure.

        Bounded by ``config.overall_connect_timeout``. Cancelling it tears everything down
        within ``config.close_timeout``.
        """
        if not self._machine.is_in("idle"):
            raise AvatarError(ErrorCode.INVALID_STATE, f"connect() in state {self.state}")
        self._connect_task = asyncio.current_task()
        started = self._clock.monotonic()
        self._machine.fire("start")
        try:
            await self._connect_until_admitted()
            self._machine.fire("approved")
        except asyncio.CancelledError:
            task = asyncio.current_task()
            reason = "closed" if self._close_requested else "cancelled"
            await asyncio.shield(self._endings.end(reason, None))
            if self._close_requested and task is not None:
                task.uncancel()
                raise AvatarError(ErrorCode.CLOSED, "close() was called during connect()") from None
            raise
        except AvatarError as error:
            await self._endings.fail(error, reason=f"connect failed: {error.code}")
            raise
        finally:
            self._connect_task = None
        duration = self._clock.monotonic() - started
        self._stats["connect_duration"] = duration
        self._start_watch()
        self._emit("connected", {"thread_id": self.thread_id, "duration": duration})

    def _start_watch(self) -> None:
        cfg, spawn = self.config, self._supervisor.spawn
        if self._media and cfg.quality_interval > 0:
            spawn(self._recovery.quality_loop(cfg.quality_interval), "quality")
        if self._media:
            spawn(self._recovery.media_watchdog(), "media-watchdog")
        if cfg.socket_probe_interval > 0:
            spawn(self._recovery.socket_watchdog(), "socket-watchdog")
        self._completion.hold()
        hooks = default_hooks()
        hooks.track(self._completion)
        if cfg.handle_signals:
            hooks.install()
            self._endings.unregister_signals = hooks.register(self.close)
        self._idle.start()
        if cfg.brain_stall_timeout > 0:
            live = lambda: self._machine.is_in("connected")  # noqa: E731
            spawn(self._guards.run_watchdog(live), "brain-watchdog")

    async def _connect_until_admitted(self) -> None:
        """The connect sequence, waiting in ``queued`` while the backend has no capacity
        (``throwToNoAgent``); the whole wait is bounded by ``capacity_max_wait``."""
        cfg, clock = self.config, self._clock
        queued_since = clock.monotonic()

        def wait(state: RetryCallState) -> float:
            return capacity_delay(cfg.capacity_backoff, state.attempt_number)

        def over_budget(state: RetryCallState) -> bool:
            return clock.monotonic() + (state.upcoming_sleep or 0.0) - queued_since > (
                cfg.capacity_max_wait
            )

        async def queue(state: RetryCallState) -> None:
            await self._release_link()
            self._machine.fire("capacity_unavailable")
            self._machine.set(reason="capacity_unavailable", category="capacity")
            self._emit(
                "queued", {"attempt": state.attempt_number, "retry_in": state.upcoming_sleep}
            )

        async def sleep(seconds: float) -> None:
            self._machine.set(backing_off=True)
            await clock.sleep(seconds)
            self._machine.set(backing_off=False)
            self._machine.fire("retry")

        def capacity(exc: BaseException) -> bool:
            return isinstance(exc, AvatarError) and (
                decide_connect_failure(exc.code) == "capacity_unavailable"
            )

        retrying = AsyncRetrying(
            stop=over_budget,
            wait=wait,
            retry=retry_if_exception(capacity),
            before_sleep=queue,
            sleep=sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._join_new_link(Deadline(cfg.overall_connect_timeout))
        except AvatarError as error:
            if capacity(error):
                raise AvatarError(
                    ErrorCode.CAPACITY_UNAVAILABLE,
                    f"no capacity within capacity_max_wait={cfg.capacity_max_wait:g}s",
                ) from None
            raise

    async def _join_new_link(self, deadline: Deadline) -> None:
        link = self._builder.create()
        self._slot.current = link
        await self._builder.join(
            link,
            deadline,
            thread_id=self._view.thread_id,
            advance=self._machine.fire,
            after_join=self._restore_user_state,
        )
        if self._slot.current is not link:  # replaced or closed underneath us
            raise AvatarError(ErrorCode.TRANSPORT_CLOSED, "link replaced during connect")

    async def _release_link(self) -> None:
        link, self._slot.current = self._slot.current, None
        if link is not None:
            await link.close(self.config.close_timeout / 2)

    async def _restore_user_state(self, link: ServerLink) -> None:
        """On every new server session: the user's mute and pause hold there too."""
        if link.lanes is not None and link.lanes.stv is not None:
            self._machine.set(subscribed=True)
        self._machine.set(media_released=False, agent_restarting=False)
        if not self._mic_enabled:
            await link.emit(Out.MUTE_USER, build_empty())
        if self._machine.data.user_paused:
            await link.emit(Out.PAUSE_CONVERSATION, build_empty())

    # -- inbound --------------------------------------------------------------------------
    def _on_protocol_error(self, link: ServerLink, event: str, detail: str) -> None:
        if link is self._slot.current:
            self._stats["protocol_errors"] += 1
            self._emit("protocol_error", {"event": event, "detail": detail})

    def _on_inbound(self, link: ServerLink, name: str, event: InboundEvent) -> None:
        if link is not self._slot.current:
            return  # a late event from a link we already replaced
        try:
            self._apply(name, event)
        except Exception as exc:
            # A bug of ours must not take the socket's read loop down with it: report it
            # like a malformed event and keep the session going.
            log.error("handling %r failed: %r", name, exc, exc_info=exc)
            self._on_protocol_error(link, name, f"internal: {type(exc).__name__}")

    def _apply(self, name: str, event: InboundEvent) -> None:
        m, spawn = self._machine, self._supervisor.spawn
        routing = route(name, event, connecting=m.is_in("connecting", "cold_reconnecting"))
        if routing.fatal is not None:
            if m.is_in("connected", "paused", "reconnecting", "recovering_media"):
                spawn(self._endings.fail(routing.fatal, reason=str(routing.fatal.code)), "fail")
            return
        if routing.session_error is not None:
            self._emit("session_error", routing.session_error)
        if routing.agent_error is not None:
            if routing.agent_restarting:
                self._emit("error", routing.agent_error.as_event())
                self._agent_restarting()
            else:
                spawn(self._endings.fail(routing.agent_error, reason="agent_crashed"), "fail")
            return
        if routing.released is not None:
            m.set(media_released=True)
            self._emit("session_released", {"reason": routing.released})
        if routing.agent_back and self._agent_back is not None and not self._agent_back.done():
            self._agent_back.set_result(None)
        if (routing.turn_to_talk and self._ledger.unconfirmed()) or (
            self._ledger.observe_speech_id(routing.speech_id)
        ):
            if routing.turn_to_talk:
                self._ledger.confirm_all()
            self._evidence.set()
        for public_name, data in self._view.apply(event):
            self._emit(public_name, data)
        if self._view.thread_id and self._completion.thread_id != self._view.thread_id:
            self._completion.hold(self._view.thread_id)
        if routing.activity:
            self._idle.touch()
        spiral = self._guards.observe(event)
        if spiral is not None and m.is_in("connected", "recovering_media"):
            spawn(self._recover_from_spiral(), "spiral-recovery")
        if routing.conversation_ended:
            spawn(self._endings.end("conversation_ended", ErrorCode.SERVER_ENDED), "end")

    def _on_disconnect(self, link: ServerLink, reason: str) -> None:
        if link is not self._slot.current:
            return
        decision = decide_disconnect(self.state, reason)
        log.info("socket disconnected (%s) in %s: %s", reason, self.state, decision.action)
        code = (
            ErrorCode.SERVER_ENDED if reason == IO_SERVER_DISCONNECT else ErrorCode.TRANSPORT_CLOSED
        )
        if decision.action == "abort_connect" or self._machine.is_in("cold_reconnecting"):
            link.handshake.fail(AvatarError(code, reason))
        elif decision.action == "recover_socket":
            self._supervisor.spawn(self._recovery.recover_socket(link, reason), "socket-recovery")
        elif decision.action == "end":
            self._supervisor.spawn(self._endings.end(reason, code), "end")

    def _agent_restarting(self) -> None:
        # A restarting agent drops user turns: hold them until it is back (showAgent), or
        # for agent_timeout at most, then deliver them in order.
        self._machine.set(agent_restarting=True)
        self._agent_back = asyncio.get_running_loop().create_future()
        self._supervisor.spawn(self._await_agent(self._agent_back), "agent-restart")

    async def _await_agent(self, back: asyncio.Future[None]) -> None:
        await asyncio.wait({back}, timeout=self.config.agent_timeout)
        self._machine.set(agent_restarting=False)
        await self._flush_held()

    # -- recoveries -----------------------------------------------------------------------
    async def _after_recovery(self, outcome: Outcome) -> None:
        """Every recovery ends here: fail, or deliver what waited (held and unconfirmed turns)."""
        if not outcome.ok:
            assert outcome.error is not None
            await self._endings.fail(outcome.error, reason=outcome.end_reason)
            return
        if outcome.tier == "cold":
            self._guards.on_rebuilt()
        if outcome.tier in ("socket", "cold") and self._ledger.unconfirmed():
            through = self._ledger.last_seq
            self._supervisor.spawn(self._confirm_or_resend(through, outcome.tier), "turn-confirm")
            return
        await self._flush_held()

    async def _confirm_or_resend(self, through: int, tier: str) -> None:
        """Wait ``turn_confirm_timeout`` for evidence that turns up to ``through`` arrived;
        resend the rest exactly once (``turn_resent``), then deliver held turns."""
        clock, ledger = self._clock, self._ledger
        deadline = clock.monotonic() + self.config.turn_confirm_timeout
        while any(t.seq <= through for t in ledger.unconfirmed()):
            left = deadline - clock.monotonic()
            if left <= 0:
                break
            self._evidence.clear()
            evidence = asyncio.ensure_future(self._evidence.wait())
            timer = asyncio.ensure_future(clock.sleep(left))
            try:
                await asyncio.wait({evidence, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                evidence.cancel()
                timer.cancel()
        for turn in ledger.take_resends(through):
            if not self._machine.is_in("connected", "recovering_media"):
                break
            await self._send_turn(turn.text, resend=True)
            self._stats["turns_resent"] += 1
            self._emit("turn_resent", {"text": turn.text, "tier": tier})
        await self._flush_held()

    async def _recover_from_spiral(self) -> None:
        """The hard spiral limit tripped: rebuild on a brand-new socket (a re-join on the
        live one is silently ignored by the server), then resend the abandoned turn once."""
        if not self._machine.try_fire("session_lost"):
            return
        text = self._guards.last_turn_text
        outcome = await self._recovery.recover_cold("tool_spiral_hard_limit")
        if not (outcome.ok and self.config.recover_from_spiral and text):
            return
        if not self._machine.is_in("connected"):
            return
        self._guards.last_turn_text = None
        self._ledger.confirm_all()  # the old server session had them; the resend replaces them
        try:
            # Exactly one emit, no barge-in marker: the new server session is idle.
            await self._send(Out.TEXT_ENTERED, build_text_entered(SPIRAL_RECOVERY_PREFIX + text))
        except AvatarError as error:
            log.info("spiral resend failed: %s", error.code)
            return
        self._ledger.sent(SPIRAL_RECOVERY_PREFIX + text, resent=True)
        self._guards.on_user_turn(None)
        self._guards.last_turn_text = text
        self._emit("spiral_recovered", {"text": text})

    # -- brain guards and tools -----------------------------------------------------------
    def on_tool_call(
        self, name: str, handler: Callable[..., Any], schema: dict[str, Any] | None = None
    ) -> Callable[[], None]:
        """Run ``handler(args, call)`` (sync or async) for each call of the client-side tool
        ``name``; with a ``schema``, invalid arguments emit ``tool_call_invalid`` instead.
        A non-None return value is reported as ``tool_call_result``. Returns unregister."""
        return self._guards.on_tool_call(name, handler, schema)

    async def respond_to_tool(self, call_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """Acknowledge a tool call that waits for a response (POST to the genie host).

        Returns ``{ok, reason}``: ``ok``, ``unknown_or_stale``, ``session_rebuilt``,
        ``timeout``, ``http_error`` or ``network_error`` (a failed one can be retried).
        """
        return await self._guards.respond_to_tool(self._genie, call_id, result)

    # -- turns ----------------------------------------------------------------------------
    async def speak(self, text: str) -> None:
        """Send a user text turn (a barge-in marker first, as a real client does).

        During a recovery the turn is held and delivered once the session is usable again;
        if the session ends instead, this raises ``AvatarError``. A turn the server has not
        confirmed when a recovery happens is resent once (``turn_resent``).
        """
        if not isinstance(text, str) or not text.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "text must be a non-empty string")
        text = clamp_text(text)
        m = self._machine
        usable = m.is_in("connected", "recovering_media") and not m.data.agent_restarting
        if usable:
            try:
                await self._send_turn(text)
                return
            except AvatarError as error:
                # The socket died under us and its recovery has not started yet: hold.
                if error.code is not ErrorCode.TRANSPORT_CLOSED or m.terminal:
                    raise
        elif not m.is_in(
            "reconnecting", "cold_reconnecting", "queued", "connected", "recovering_media"
        ):
            raise AvatarError(ErrorCode.INVALID_STATE, f"speak() in state {self.state}")
        if len(self._held) >= MAX_HELD_TURNS:
            raise AvatarError(ErrorCode.INVALID_STATE, "too many turns held during recovery")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held.append((text, fut))
        await fut

    async def _send_turn(self, text: str, *, resend: bool = False) -> None:
        await self._send(Out.TEXT_ENTERED, build_barge_in_marker())
        # Recorded before the send: the server's answer may be handled before it returns.
        turn = self._ledger.sent(text, resent=resend)
        try:
            await self._send(Out.TEXT_ENTERED, build_text_entered(text))
        except AvatarError:
            self._ledger.forget(turn)  # never written: the caller holds or fails it
            raise
        self._guards.on_user_turn(text)
        self._idle.touch()

    async def _flush_held(self) -> None:
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

    def _fail_held(self, error: AvatarError) -> None:
        while self._held:
            _, fut = self._held.popleft()
            if not fut.done():
                fut.set_exception(error)

    async def interrupt(self) -> None:
        """Barge in: stop the avatar talking (the marker alone)."""
        self._require_state("connected")
        await self._send(Out.TEXT_ENTERED, build_barge_in_marker())

    @property
    def mic_enabled(self) -> bool:
        """Whether the user's microphone reaches the server. Preserved across reconnects."""
        return self._mic_enabled

    @mic_enabled.setter
    def mic_enabled(self, enabled: bool) -> None:
        enabled = bool(enabled)
        if enabled == self._mic_enabled:
            return
        self._mic_enabled = enabled
        self._uplink_track.muted = not enabled
        link = self._slot.current
        if link is not None and link.connected and not self._machine.terminal:
            event = Out.UNMUTE_USER if enabled else Out.MUTE_USER
            previous = self._mute_task
            self._mute_task = self._supervisor.spawn(self._emit_in_order(event, previous), "mute")

    async def _emit_in_order(self, event: str, after: asyncio.Task[Any] | None) -> None:
        if after is not None and not after.done():
            await asyncio.wait({after})
        link = self._slot.current
        if link is not None:
            try:
                await link.emit(event, build_empty())
            except AvatarError as error:
                # Re-applied by every recovery tier from mic_enabled: nothing is lost.
                log.info("%s not sent (%s); the next recovery re-applies it", event, error.code)

    async def pause(self) -> None:
        """Pause the conversation (the server holds the avatar). A recovery returns to
        ``paused``; a cold reconnect pauses the new server session too."""
        self._require_state("connected")
        await self._send(Out.PAUSE_CONVERSATION, build_empty())
        self._machine.fire("pause")

    async def resume(self) -> None:
        """Resume a paused conversation.

        If the server released the media while paused (``session_released``), the session
        asks for a new STV session, rebuilds both peers and approves again before it counts
        as connected; a failure there ends the session (``resume_failed``).
        """
        self._require_state("paused")
        await self._send(Out.RESUME_CONVERSATION, build_empty())
        link = self._slot.current
        if self._machine.data.media_released and link is not None and self._media:
            try:
                await self._builder.rebuild_media(link)
            except AvatarError as error:
                await self._endings.fail(error, reason="resume_failed")
                raise
        self._machine.fire("resume")
        await self._flush_held()

    def _require_state(self, *states: str) -> None:
        if not self._machine.is_in(*states):
            raise AvatarError(ErrorCode.INVALID_STATE, f"not allowed in state {self.state}")

    async def _send(self, event: str, payload: Any) -> None:
        """Emit in call order: a mute toggled just before a call goes out before it."""
        pending = self._mute_task
        if pending is not None and not pending.done():
            await asyncio.wait({pending})
        link = self._slot.current
        if link is None or not link.connected:
            raise AvatarError(ErrorCode.TRANSPORT_CLOSED, "no connected control channel")
        await link.emit(event, payload)

    # -- endings --------------------------------------------------------------------------
    async def close(self) -> None:
        """End the session gracefully; returns within ``config.close_timeout`` (+ a little)."""
        if self._machine.terminal:
            return
        self._close_requested = True
        connect_task = self._connect_task
        if connect_task is not None and connect_task is not asyncio.current_task():
            connect_task.cancel()
            await asyncio.wait({connect_task}, timeout=self.config.close_timeout)
            if self._machine.terminal:
                return
        await self._endings.end("closed", None)

    def _on_idle(self) -> None:
        if self._machine.is_in("connected", "paused"):
            self._emit("idle_timeout", {"after": self.config.idle_timeout})
            self._supervisor.spawn(self._endings.end("idle_timeout", None), "idle-end")
