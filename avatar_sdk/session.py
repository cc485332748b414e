"""AvatarSession: the public facade of one live avatar conversation.

The facade owns the event bus, the control channel of the moment, and every task it starts.
All state changes go through :class:`~avatar_sdk.machine.SessionMachine`; the methods here
run the I/O the machine's decisions call for (connect steps, recovery tiers, teardown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import SessionConfig
from .connector import (
    Deadline,
    Handshake,
    HandshakeResult,
    run_handshake,
    wait_step,
)
from .conversation import ConversationView
from .dispatch import InboundDispatch
from .endings import SessionEndings
from .errors import AvatarError, ErrorCode
from .events import EventBus, EventSource
from .guards import SPIRAL_RECOVERY_PREFIX, ConversationGuards
from .journal import Journal
from .lifecycle import CompletionSignal, IdleTimer, default_hooks
from .machine import (
    SessionMachine,
    capacity_delay,
    decide_connect_failure,
)
from .redact import register_secret
from .tiers import RecoveryTiers
from .transport.asr import UplinkTrack
from .transport.control import ControlChannel
from .transport.genie import GenieClient
from .transport.ice import TurnConfig
from .transport.media import MediaLanes
from .transport.stv import FanoutTrack
from .urls import check_url
from .wire import (
    In,
    Out,
    StvNewSession,
    build_approved_permissions,
    build_barge_in_marker,
    build_check_availability,
    build_empty,
    build_stv_new_session,
    build_text_entered,
    clamp_text,
    new_room_id,
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


class AvatarSession(InboundDispatch, RecoveryTiers, SessionEndings, EventSource):
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
    ) -> None:
        if not isinstance(token, str) or not token.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "token must be a non-empty string")
        register_secret(token)
        self.__token = token
        self._url = check_url(url, allow_insecure=allow_insecure_transport, what="url")
        self._genie_url = (
            check_url(genie_url, allow_insecure=allow_insecure_transport, what="genie_url")
            if genie_url is not None
            else None
        )
        if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "thread_id must be a non-empty string")
        self._partner_id = partner_id
        self._allow_insecure = allow_insecure_transport
        self._turn = turn
        self._uplink_track = UplinkTrack(audio, on_error=self._on_source_error)
        self._outputs: dict[str, FanoutTrack] = {"audio": FanoutTrack("audio")}
        if video:
            self._outputs["video"] = FanoutTrack("video")
        self._lanes: MediaLanes | None = None
        self._probe_waiters: list[asyncio.Future[None]] = []
        self._released = False
        self._agent_ready = asyncio.Event()
        self._agent_ready.set()
        self._subscribed = False
        self._video = bool(video)
        self._media = bool(media)
        self.config = config or SessionConfig()
        self._guards = ConversationGuards(self.config, self._emit)
        self._genie = GenieClient(self._genie_url, token) if self._genie_url else None
        self._completion = CompletionSignal(
            self._genie, timeout=self.config.session_complete_timeout, thread_id=thread_id
        )
        self._idle = IdleTimer(self.config.idle_timeout, self._on_idle)
        self._unregister_signals: Callable[[], None] | None = None
        self._bus = EventBus()
        self._sticky_id = new_sticky_id()
        self._journal = Journal(journal, session_label=self._sticky_id) if journal else None
        if self._journal is not None:
            self._bus.on("*", self._journal.record)
        self._machine = SessionMachine(on_change=self._on_state_change)
        self._view = ConversationView(thread_id=thread_id)
        self._room_id: str | None = None
        self._channel: ControlChannel | None = None
        self._handshake: Handshake | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._connect_task: asyncio.Task[Any] | None = None
        self._close_requested = False
        self._held: deque[tuple[str, asyncio.Future[None]]] = deque()
        self._mic_enabled = True
        self._mute_task: asyncio.Task[Any] | None = None
        self._health_reason: str | None = None
        self._health_category: str | None = None
        self._backoff = False
        self._end_reason: str | None = None
        self._stats: dict[str, Any] = {
            "reconnects": {"socket": 0, "media": 0, "cold": 0},
            "recovery_durations": {"socket": [], "media": [], "cold": []},
            "events_in": 0,
            "events_out": 0,
            "protocol_errors": 0,
            "connect_duration": None,
        }

    # -- introspection ------------------------------------------------------------------------
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
        return self._outputs["audio"] if self._subscribed else None

    @property
    def avatar_video(self) -> FanoutTrack | None:
        """The avatar's video (an aiortc track; None until subscribed or with video=False)."""
        return self._outputs.get("video") if self._subscribed else None

    @property
    def media(self) -> MediaLanes | None:
        """The current WebRTC lanes (diagnostics and tests)."""
        return self._lanes

    async def switch_audio(self, track: Any) -> None:
        """Send from ``track`` from now on (None: silence); no renegotiation, mute kept."""
        self._uplink_track.switch(track)

    def _on_source_error(self, code: ErrorCode, exc: BaseException) -> None:
        error = AvatarError(code, type(exc).__name__)
        log.warning("audio source failed (%s); the uplink continues with silence", code)
        self._emit("error", error.as_event())

    def health(self) -> Health:
        """Upstream health: live, idle, connecting, backoff or failed, with reason and category."""
        m = self._machine
        if m.is_in("connected", "paused"):
            return Health("live")
        if m.is_in("failed"):
            return Health("failed", self._health_reason, self._health_category)
        if m.is_in("idle", "ended", "disconnecting"):
            return Health("idle", self._health_reason, self._health_category)
        if self._backoff or m.is_in("queued"):
            return Health("backoff", self._health_reason, self._health_category)
        return Health("connecting", self._health_reason, self._health_category)

    def stats(self) -> dict[str, Any]:
        """Counters: reconnects per tier, recovery durations (s), events in and out."""
        snapshot = dict(self._stats)
        snapshot["reconnects"] = dict(self._stats["reconnects"])
        snapshot["recovery_durations"] = {
            k: list(v) for k, v in self._stats["recovery_durations"].items()
        }
        snapshot["events_emitted"] = self._bus.emitted
        return snapshot

    # -- events ---------------------------------------------------------------------------------
    def _emit(self, name: str, data: dict[str, Any] | None = None) -> None:
        self._bus.emit(name, data or {})

    def _on_state_change(self, state: str, previous: str, trigger: str) -> None:
        self._emit("state_changed", {"state": state, "previous": previous, "trigger": trigger})

    # -- context manager ----------------------------------------------------------------------
    async def __aenter__(self) -> AvatarSession:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- connect ---------------------------------------------------------------------------------
    async def connect(self) -> None:
        """Run the connect sequence; raises ``AvatarError`` (state ``failed``) on failure.

        Bounded by ``config.overall_connect_timeout``. Cancelling it tears everything down
        within ``config.close_timeout``.
        """
        if not self._machine.is_in("idle"):
            raise AvatarError(ErrorCode.INVALID_STATE, f"connect() in state {self.state}")
        self._connect_task = asyncio.current_task()
        started = time.monotonic()
        await self._machine.fire("start")
        try:
            await self._connect_until_admitted()
            await self._machine.fire("approved")
        except asyncio.CancelledError:
            task = asyncio.current_task()
            await asyncio.shield(
                self._finish("cancelled" if not self._close_requested else "closed")
            )
            if self._close_requested and task is not None:
                task.uncancel()
                raise AvatarError(ErrorCode.CLOSED, "close() was called during connect()") from None
            raise
        except AvatarError as error:
            await self._fail(error, reason=f"connect failed: {error.code}")
            raise
        finally:
            self._connect_task = None
        duration = time.monotonic() - started
        self._stats["connect_duration"] = duration
        if self._media and self.config.quality_interval > 0:
            self._spawn(self._quality_loop(self.config.quality_interval), "quality")
        if self._media:
            self._spawn(self._media_watchdog(), "media-watchdog")
        if self.config.socket_probe_interval > 0:
            self._spawn(self._socket_watchdog(), "socket-watchdog")
        self._completion.hold()
        hooks = default_hooks()
        hooks.track(self._completion)
        if self.config.handle_signals:
            hooks.install()
            self._unregister_signals = hooks.register(self.close)
        self._idle.start()
        if self.config.brain_stall_timeout > 0:
            live = lambda: self._machine.is_in("connected")  # noqa: E731
            self._spawn(self._guards.run_watchdog(live), "brain-watchdog")
        self._emit("connected", {"thread_id": self.thread_id, "duration": duration})

    async def _connect_until_admitted(self) -> None:
        """The connect sequence, waiting in ``queued`` while the backend has no capacity.

        ``throwToNoAgent`` ends that socket server-side; after the capacity backoff a fresh
        socket joins again. The whole wait is bounded by ``capacity_max_wait``.
        """
        cfg = self.config
        queued_since: float | None = None
        attempt = 0
        while True:
            try:
                await self._open_and_join(
                    Deadline(cfg.overall_connect_timeout), advance=self._machine.fire
                )
                return
            except AvatarError as error:
                if decide_connect_failure(error.code) != "capacity_unavailable":
                    raise
                attempt += 1
                now = time.monotonic()
                queued_since = queued_since if queued_since is not None else now
                delay = capacity_delay(cfg.capacity_backoff, attempt)
                if now + delay - queued_since > cfg.capacity_max_wait:
                    raise AvatarError(
                        ErrorCode.CAPACITY_UNAVAILABLE,
                        f"no capacity within capacity_max_wait={cfg.capacity_max_wait:g}s",
                    ) from None
            await self._release_attempt()
            await self._machine.fire("capacity_unavailable")
            self._health_reason, self._health_category = "capacity_unavailable", "capacity"
            self._emit("queued", {"attempt": attempt, "retry_in": delay})
            self._backoff = True
            await asyncio.sleep(delay)
            self._backoff = False
            await self._machine.fire("retry")

    async def _release_attempt(self) -> None:
        """Close the socket and peers of a failed attempt (before waiting or retrying)."""
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close(self.config.close_timeout / 2)
        await self._close_media()

    async def _open_and_join(
        self, deadline: Deadline, advance: Callable[[str], Coroutine[Any, Any, bool]]
    ) -> None:
        channel = await self._open_channel(deadline)
        handshake = self._require_handshake()
        self._room_id = new_room_id()

        async def media_steps(result: HandshakeResult) -> None:
            await self._start_media(channel, handshake, deadline, result.stv, advance)

        await run_handshake(
            channel,
            handshake,
            config=self.config,
            deadline=deadline,
            token=self.__token,
            room_id=self._room_id,
            thread_id=self._view.thread_id,
            media=self._media,
            advance=advance,
            media_steps=media_steps,
        )
        if self._channel is not channel:  # replaced or closed underneath us
            raise AvatarError(ErrorCode.TRANSPORT_CLOSED, "channel replaced during connect")
        await self._apply_mic_state()

    async def _start_media(
        self,
        channel: ControlChannel,
        handshake: Handshake,
        deadline: Deadline,
        stv: StvNewSession | None,
        advance: Callable[[str], Coroutine[Any, Any, bool]],
    ) -> None:
        """Steps 9-10: the ASR uplink, then the STV downlink and its playable gate."""
        lanes = MediaLanes(
            config=self.config,
            uplink_track=self._uplink_track,
            outputs=self._outputs,
            video=self._video,
            allow_private=self._allow_insecure,
            turn=self._turn,
        )
        self._lanes = lanes
        lanes.room_id = self._room_id
        await lanes.start_asr(
            emit=channel.emit,
            wait=lambda name: wait_step(handshake, self.config, deadline, name),
            socket_id=channel.sid or "",
        )
        await advance("asr_ready")
        await lanes.start_stv(stv, deadline.remaining)
        self._subscribed = self._subscribed or lanes.stv is not None
        await advance("video_ready")

    def _require_handshake(self) -> Handshake:
        if self._handshake is None:
            raise AvatarError(ErrorCode.CLOSED, "no active handshake")
        return self._handshake

    async def _open_channel(self, deadline: Deadline) -> ControlChannel:
        channel = ControlChannel(
            self._url,
            self.__token,
            sticky_id=self._sticky_id,
            partner_id=self._partner_id,
            on_event=lambda name, args: self._on_channel_event(channel, name, args),
            on_disconnect=self._on_channel_disconnect,
            counters=self._stats,
        )
        if self._handshake is not None:
            self._handshake.close()
        self._handshake = Handshake()
        self._channel = channel
        timeout, _ = deadline.clip(self.config.server_connect_timeout, ErrorCode.CONNECT_TIMEOUT)
        await channel.open(timeout)
        return channel

    async def _apply_mic_state(self) -> None:
        if not self._mic_enabled and self._channel is not None:
            await self._channel.emit(Out.MUTE_USER, build_empty())

    # -- brain guards and tools --------------------------------------------------------------
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

    async def _recover_from_spiral(self) -> None:
        """The hard spiral limit tripped: rebuild on a brand-new socket (a re-join on the
        live one is silently ignored by the server), then resend the abandoned turn once."""
        if not await self._machine.fire("session_lost"):
            return
        text = self._guards.last_turn_text
        await self._cold_reconnect("tool_spiral_hard_limit")
        if not (self.config.recover_from_spiral and text and self._machine.is_in("connected")):
            return
        self._guards.last_turn_text = None
        resend = SPIRAL_RECOVERY_PREFIX + text
        try:
            # Exactly one emit, no barge-in marker: the new server session is idle.
            await self._send(Out.TEXT_ENTERED, build_text_entered(resend))
        except AvatarError as error:
            log.info("spiral resend failed: %s", error.code)
            return
        self._guards.on_user_turn(None)
        self._guards.last_turn_text = text
        self._emit("spiral_recovered", {"text": text})

    # -- turns -------------------------------------------------------------------------------------
    async def speak(self, text: str) -> None:
        """Send a user text turn (a barge-in marker first, as a real client does).

        During a recovery the turn is held and delivered once the session is usable again;
        if the session ends instead, this raises ``AvatarError``.
        """
        if not isinstance(text, str) or not text.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "text must be a non-empty string")
        text = clamp_text(text)
        if self._machine.is_in("connected", "recovering_media") and self._agent_ready.is_set():
            await self._send_turn(text)
            return
        if self._machine.is_in("reconnecting", "cold_reconnecting", "queued") or (
            self._machine.is_in("connected", "recovering_media") and not self._agent_ready.is_set()
        ):
            if len(self._held) >= MAX_HELD_TURNS:
                raise AvatarError(ErrorCode.INVALID_STATE, "too many turns held during recovery")
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._held.append((text, fut))
            await fut
            return
        raise AvatarError(ErrorCode.INVALID_STATE, f"speak() in state {self.state}")

    async def _send_turn(self, text: str) -> None:
        await self._send(Out.TEXT_ENTERED, build_barge_in_marker())
        await self._send(Out.TEXT_ENTERED, build_text_entered(text))
        self._guards.on_user_turn(text)
        self._idle.touch()

    async def _flush_held(self) -> None:
        while self._held and self._machine.is_in("connected") and self._agent_ready.is_set():
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
        if self._channel is not None and self._channel.connected:
            event = Out.UNMUTE_USER if enabled else Out.MUTE_USER
            previous = self._mute_task
            self._mute_task = self._spawn(self._emit_quietly(event, after=previous), "mute")

    async def _emit_quietly(self, event: str, after: asyncio.Task[Any] | None = None) -> None:
        if after is not None and not after.done():
            with contextlib.suppress(asyncio.CancelledError):
                await after
        channel = self._channel
        if channel is not None:
            with contextlib.suppress(AvatarError):
                await channel.emit(event, build_empty())

    async def pause(self) -> None:
        """Pause the conversation (the server holds the avatar)."""
        self._require_state("connected")
        await self._send(Out.PAUSE_CONVERSATION, build_empty())
        await self._machine.fire("pause")

    async def resume(self) -> None:
        """Resume a paused conversation.

        If the server released the media while paused (``session_released``), the session
        asks for a new STV session, rebuilds both peers and approves again before it counts
        as connected; a failure there ends the session (``resume_failed``).
        """
        self._require_state("paused")
        if not self._released:
            await self._send(Out.RESUME_CONVERSATION, build_empty())
            await self._machine.fire("resume")
            return
        channel = self._require_channel()
        handshake = self._handshake = Handshake()
        deadline = Deadline(self.config.overall_connect_timeout)
        try:
            await self._send(Out.RESUME_CONVERSATION, build_empty())
            await self._close_media()
            await channel.emit(Out.STV_NEW_SESSION, build_stv_new_session(self._room_id or ""))
            await channel.emit(Out.CHECK_AVAILABILITY, build_check_availability())
            stv = await wait_step(handshake, self.config, deadline, In.STV_NEW_SESSION)
            if self._media:

                async def stay(_: str) -> bool:
                    return True

                await self._start_media(
                    channel,
                    handshake,
                    deadline,
                    stv if isinstance(stv, StvNewSession) else None,
                    stay,
                )
            await channel.emit(
                Out.APPROVED_PERMISSIONS, build_approved_permissions(self._room_id or "")
            )
        except AvatarError as error:
            await self._fail(error, reason="resume_failed")
            raise
        self._released = False
        await self._machine.fire("resume")

    def _require_state(self, *states: str) -> None:
        if not self._machine.is_in(*states):
            raise AvatarError(ErrorCode.INVALID_STATE, f"not allowed in state {self.state}")

    async def _send(self, event: str, payload: Any) -> None:
        """Emit in call order: a mute toggled just before a call goes out before it."""
        pending = self._mute_task
        if pending is not None and not pending.done():
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        await self._require_channel().emit(event, payload)

    def _require_channel(self) -> ControlChannel:
        channel = self._channel
        if channel is None or not channel.connected:
            raise AvatarError(ErrorCode.TRANSPORT_CLOSED, "no connected control channel")
        return channel

    # -- task ownership ---------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(f"avatar-sdk:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("internal task %s failed: %r", task.get_name(), exc, exc_info=exc)
            self._emit(
                "error",
                {
                    "code": "internal",
                    "message": repr(exc)[:300],
                    "severity": "error",
                    "recoverable": False,
                },
            )
