"""AvatarSession: the public facade of one live avatar conversation.

The facade owns the machine (the only state), the event bus, the link of the moment, one
supervisor in which every task lives, and the parts it composes, none of which calls back
into it: the link builder (connect sequence), the recovery controller (three tiers and
their watchdogs), the inbound handler (over the pure router), the turn desk (turns until
confirmed), the guards, lifecycle and endings. ``docs/architecture.md`` draws who owns what.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from ssl import SSLContext
from typing import Any
from urllib.parse import urlsplit

from ..cassette.recorder import CassetteRecorder
from ..clock import SYSTEM_CLOCK, Clock, sleep_or
from ..config import AUDIO_CODECS, DEFAULT_AUDIO_CODEC, AudioCodec, RetryPolicy, SessionConfig
from ..errors import AvatarError, ErrorCode
from ..events.bus import EventSource
from ..events.journal import Journal
from ..guards.brain import ConversationGuards
from ..lifecycle.completion import CompletionSignal, IdleTimer, default_hooks
from ..lifecycle.registry import LIVE_SESSIONS
from ..logs import sdk_logger
from ..redact import register_secret
from ..taps import Instrumentation, Point, Taps
from ..transport.asr import UplinkTrack
from ..transport.ice import TurnConfig
from ..transport.media import MediaLanes
from ..transport.netchange import brings_a_path
from ..transport.netwatch import NetworkWatcher
from ..transport.observe import FanoutObserver, WireObserver, notify
from ..transport.stv import FanoutTrack
from ..transport.tls import client_context
from ..transport.voice_buffer import VoiceBufferCounts
from ..urls import check_url
from ..wire import Out, build_barge_in_marker, build_empty, new_sticky_id
from .conversation import ConversationView
from .endings import Endings
from .genie_host import GenieHost
from .inbound import InboundHandler
from .link import LinkBuilder, LinkListener, MediaSpec
from .machine import Health, SessionMachine
from .recovery import RecoveryController
from .renewal import RenewalController, RenewalParts
from .renewal_plan import Boundary
from .replies import Reply
from .slot import LinkSlot
from .speech import Replies, SpeechHandle
from .stats import SessionStats, StatsSnapshot
from .supervisor import Supervisor
from .turn_sender import TurnDesk
from .user_state import UserState

log = sdk_logger(__name__)

__all__ = ["AvatarSession", "Health", "Reply", "SpeechHandle"]


#: ``wait_until_quiet(timeout=None)``: a bound no conversation reaches (a timer needs one).
_NO_BOUND = 1e9


class AvatarSession(EventSource):
    """One live conversation with an avatar. See ``docs/`` for the full guide."""

    #: The host network watcher (``SessionConfig.watch_network``), once connected.
    network_watcher: NetworkWatcher | None = None

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
        audio_codec: AudioCodec = DEFAULT_AUDIO_CODEC,
        config: SessionConfig | None = None,
        allow_insecure_transport: bool = False,
        turn: TurnConfig | None = None,
        journal: str | Path | None = None,
        clock: Clock | None = None,
        ssl: SSLContext | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        telemetry: Instrumentation | None = None,
        record: str | os.PathLike[str] | None = None,
        record_content: bool = False,
        observer: WireObserver | None = None,
    ) -> None:
        """Prepare a session; nothing is opened until ``connect()`` (or ``async with``).

        :param url: the conversation backend's base URL, ``https://host[:port]`` (or
            ``wss://``: a Socket.IO server is reached from either).
        :param token: its auth token; sent only in the Socket.IO CONNECT, the ``join`` and
            genie calls, never logged or shown in a repr.
        :param genie_url: HTTP API base for tool acknowledgements and ``session_completed``
            (None: the genie host paired with a known conversation host, or the one the
            backend names in its join answer; without either, neither is sent and one INFO
            line at connect says so: ``docs/lifecycle.md``).
        :param partner_id: the partner id the backend expects in the connection query.
        :param thread_id: continue an earlier conversation's memory; replayed on every join.
        :param audio: an aiortc audio track for the uplink (``avatar_sdk.media``: tone,
            silence, file, Opus file sent undecoded, microphone); None sends silence.
        :param video: False subscribes to the avatar's voice only.
        :param media: False opens the control channel only (text turns, no WebRTC).
        :param audio_codec: where audio is encoded (uplink) and decoded (the avatar's
            voice): ``"loop"`` (default) on the event loop with a mono 32 kb/s voice
            encoder, the cheaper path, at a few tens of microseconds of loop time per 20 ms
            frame; ``"thread"`` in aiortc's worker threads (``docs/media.md``).
        :param config: a ``SessionConfig`` (timeouts, budgets, guards; seconds).
        :param allow_insecure_transport: permit http/ws and private media hosts (a local
            backend such as ``StagingServer``; never in production).
        :param turn: a ``TurnConfig`` for a TURN relay on restrictive networks.
        :param journal: a path to append one JSON line per event (never the token).
        :param clock: an injected clock for tests (``avatar_sdk.testing.FakeClock``).
        :param ssl: an ``ssl.SSLContext`` for every connection; or
        :param ca_file: a PEM file of a private CA trusted besides the system's (not both).
        :param telemetry: an instrumentation to attach, ``avatar_sdk.telemetry.Telemetry(...)``
            (OpenTelemetry traces and metrics, the ``otel`` extra; ``docs/observability.md``).
            None (default): no instrumentation, nothing observed.
        :param record: a path to write a cassette to: every event in and out, every HTTP
            exchange, every disconnect, media states and a per-second media sample, never
            the token (``docs/replay.md``; replay it with ``avatar-sdk replay PATH``).
        :param record_content: keep the user's text in the cassette (default False: each
            user text is replaced by a stable placeholder, as the GenAI conventions' content
            capture is off by default).
        :param observer: a ``WireObserver`` told the same facts a cassette records (for
            telemetry; ``avatar_sdk.transport.observe``).
        :raises AvatarError: ``invalid_argument`` for a bad argument, ``insecure_transport``
            for an http URL without the opt-in.
        """
        if not isinstance(token, str) or not token.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "token must be a non-empty string")
        register_secret(token)
        insecure = allow_insecure_transport
        self._url = check_url(url, allow_insecure=insecure, what="url", kind="socket")
        tls = client_context(ssl, ca_file, allow_insecure=insecure)
        if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "thread_id must be a non-empty string")
        self._clock = clock or SYSTEM_CLOCK
        super().__init__(clock=self._clock)
        if config is not None and not isinstance(config, SessionConfig):
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT,
                f"config must be a SessionConfig, not {type(config).__name__}"
                " (build one: SessionConfig(**fields))",
            )
        self.config = cfg = config or SessionConfig()
        self._media = bool(media)
        self._sticky_id = new_sticky_id()
        self._taps = Taps(_describe(self._url, media=self._media, video=bool(video)))
        self._machine = machine = SessionMachine(on_change=self._on_state_change)
        # Its failure handler is the endings' (set once they exist, below).
        self._supervisor = Supervisor()
        self._slot = LinkSlot(self._supervisor)
        self._view = ConversationView(thread_id=thread_id)
        self._connect_task: asyncio.Task[Any] | None = None
        self._close_requested = False
        self._stats = SessionStats()
        # events() buffers: their default bound (their drops: the bus counts them).
        self._bus.configure(queue_size=cfg.event_queue_size)
        if audio_codec not in AUDIO_CODECS:
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT,
                f"audio_codec must be one of {', '.join(map(repr, AUDIO_CODECS))}",
            )
        self._uplink_track = UplinkTrack(audio, on_error=self._on_source_error)
        self._outputs: dict[str, FanoutTrack] = {"audio": FanoutTrack("audio")}
        if video:
            self._outputs["video"] = FanoutTrack("video")
        self._cassette: CassetteRecorder | None = None
        if record is not None:
            try:
                self._cassette = CassetteRecorder(
                    Path(record), clock=self._clock, url=self._url, config=cfg,
                    media=self._media, video=bool(video), thread_id=thread_id,
                    record_content=record_content,
                )  # fmt: skip
            except OSError as exc:
                raise AvatarError(
                    ErrorCode.INVALID_ARGUMENT, f"record: cannot write {record} ({exc.strerror})"
                ) from None
        self._observer: WireObserver | None = _one_observer(self._cassette, observer)
        self._voice_counts = VoiceBufferCounts()
        spec = MediaSpec(
            self._uplink_track, self._outputs, bool(video), insecure, turn, audio_codec,
            voice_counts=self._voice_counts,
        )  # fmt: skip
        self._builder = LinkBuilder(
            self._url,
            token,
            config=cfg,
            sticky_id=self._sticky_id,
            partner_id=partner_id,
            media=spec if self._media else None,
            counters=self._stats,
            clock=self._clock,
            ssl_context=tls,
            observer=self._observer,
        )
        self._guards = ConversationGuards(cfg, self._bus.emit, clock=self._clock, taps=self._taps)
        self._user = UserState(machine=machine, slot=self._slot, spawn=self._supervisor.spawn)
        self._genie_host = GenieHost(
            self._url,
            genie_url,
            token=token,
            ssl_context=tls,
            allow_insecure=insecure,
            observer=self._observer,
        )
        self._genie = self._genie_host.client
        self._completion = CompletionSignal(
            self._genie, timeout=cfg.session_complete_timeout, thread_id=thread_id
        )
        self._idle = IdleTimer(cfg.idle_timeout, clock=self._clock)  # fires into the endings
        self._journal = (
            Journal(journal, session_label=self._sticky_id, clock=self._clock) if journal else None
        )
        if self._journal is not None:
            self._bus.on("*", self._journal.record)
        # Fed synchronously by every event: whether the avatar is still answering or talking.
        self._desk = TurnDesk(
            config=cfg, machine=machine, clock=self._clock, outbox=self._slot.outbox,
            guards=self._guards, idle=self._idle, emit=self._bus.emit, stats=self._stats,
            taps=self._taps,
        )  # fmt: skip
        self._replies = Replies(
            clock=self._clock, on=self._bus.on, audio=self._outputs["audio"] if media else None
        )
        self._asking = False
        self._ask_free = asyncio.Event()
        self._endings = Endings(
            config=cfg, machine=machine, bus=self._bus, slot=self._slot,
            supervisor=self._supervisor, guards=self._guards, genie=self._genie,
            completion=self._completion, idle=self._idle, journal=self._journal,
            outputs=self._outputs, uplink_track=self._uplink_track,
            fail_waiters=self._fail_waiters, deliver_after_recovery=self._desk.after_recovery,
        )  # fmt: skip
        if self._cassette is not None:
            self._endings.after_end.append(self._cassette.aclose)
        self._supervisor.on_failure = self._endings.on_task_failure
        self._idle.on_idle = self._endings.on_idle
        self._recovery = RecoveryController(
            machine=machine, config=cfg, clock=self._clock, slot=self._slot,
            builder=self._builder, view=self._view,
            restore=self._restore_session, reassert=self._user.on_same_session,
            emit=self._bus.emit, spawn=self._supervisor.spawn,
            on_outcome=self._endings.settle, stats=self._stats,
        )  # fmt: skip
        self._renewal = RenewalController(
            machine=machine, config=cfg, clock=self._clock, slot=self._slot,
            builder=self._builder,
            parts=RenewalParts(
                boundary=self._boundary, restore=self._user.on_new_session,
                deliver=self._after_renewal,
                abandon_tool_calls=self._abandon_tool_calls, outputs=self._outputs,
                uplink=self._uplink_track, thread_id=lambda: self._view.thread_id,
                recover_cold=self._recovery.recover_cold,
                end=lambda: self._endings.end("conversation_ended", ErrorCode.SERVER_ENDED),
            ),
            emit=self._bus.emit, spawn=self._supervisor.spawn, stats=self._stats,
            media=self._media,
        )  # fmt: skip
        self._inbound = InboundHandler(
            config=cfg, machine=machine, slot=self._slot, spawn=self._supervisor.spawn,
            endings=self._endings, recovery=self._recovery, desk=self._desk, user=self._user,
            view=self._view,
            guards=self._guards, completion=self._completion, idle=self._idle,
            emit=self._bus.emit, stats=self._stats, renewal=self._renewal,
        )  # fmt: skip
        self._bus.on("time_warning", lambda e: self._renewal.warned(e.data.get("remaining")))
        # Wired last: links report to the handler, which needs every part above.
        self._builder.listener = LinkListener(
            self._inbound.on_inbound, self._inbound.on_protocol_error, self._inbound.on_disconnect
        )
        # Weakly: what test tooling asks to find a session left open (lifecycle/registry.py).
        LIVE_SESSIONS.add(self, backend=self._url)
        if telemetry is not None:
            telemetry.attach(self)  # a subscriber of the bus and the taps; nothing else

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
    def taps(self) -> Taps:
        """The session's internal observation points, for instrumentations
        (``avatar_sdk.taps``; not a stable API)."""
        return self._taps

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

    @property
    def time_left(self) -> float | None:
        """Seconds until the server's time cap ends the current server session, counting
        down on the session's clock: from the last ``time_warning``, or, before any, from
        ``config.max_conversation_length`` counted from that server session's approval.
        None when neither is known. A renewal (``config.renewal``) starts a new count."""
        return self._renewal.time_left

    async def renew(self) -> None:
        """Renew the server session now, on the same thread, as a renewal at the cap does
        (``session_renewing`` {reason: "manual"}, then ``session_renewed``), whether or not
        ``config.renewal`` is set (its policy, or the defaults). Returns once the renewal
        is over: renewed, or given up with the current link kept (logged). A renewal
        already running is awaited instead. ``invalid_state`` unless connected."""
        self._require(self._machine.connected or self._renewal.renewing)
        self._call("renew")
        await self._renewal.renew("manual")

    def _boundary(self) -> Boundary:
        desk = self._desk
        return Boundary(
            usable=self._machine.connected,
            floor_busy=self._replies.floor.busy(self._clock.monotonic()),
            gate_open=desk.gate.phase == "open",
            unconfirmed_turns=len(desk.ledger.unconfirmed()),
            held_turns=desk.held,
            awaiting_replies=self._replies.awaiting(),
            pending_tool_calls=len(self._guards.acks),
        )

    async def _after_renewal(self, cut: bool) -> None:
        """After a renewal's swap: turns held or unconfirmed go out on the new server
        session; with a cut turn, the turns whose answer had not ended are asked again."""
        deliver = self._desk.after_recovery("renewal")  # its cut-off is taken now
        if cut:
            texts = self._replies.cut()
            self._desk.reset_gate()
            await self._desk.resend_cut(texts)
        await deliver

    def _abandon_tool_calls(self) -> list[str]:
        """A forced swap: the old server session's pending tool calls can no longer be
        answered; their ids are reported (``session_renewed``) and forgotten."""
        ids = self._guards.acks.ids()
        self._guards.on_rebuilt()
        return ids

    async def _restore_session(self, link: Any) -> None:
        """A new current server session (connect, cold reconnect): its cap's own count,
        and the user's mute and pause there."""
        self._renewal.started(link)
        await self._user.on_new_session(link)

    def health(self) -> Health:
        """Upstream health, read from the machine: live, idle, connecting, backoff, failed."""
        return self._machine.health()

    def stats(self) -> StatsSnapshot:
        """Counters: reconnects per tier, recovery durations (s), events in and out (every
        key: ``docs/resilience.md``, Counters). A copy the caller may keep."""
        voice = self._voice_counts
        return self._stats.snapshot(
            events_emitted=self._bus.emitted,
            events_dropped=self._bus.dropped,
            voice_buffer=voice.snapshot() if voice.packets else None,
        )

    def notify_network_change(self, *, media: bool = True) -> None:
        """The host's network changed: probe the control socket at once and restart both
        media channels (``media=False``: only the probe). The session notices most changes
        by itself (``SessionConfig.watch_network``)."""
        self._recovery.notify_network_change(media=media)

    def _network_changed(self, what: str) -> None:
        # Only a change that brings a new path is acted on (netchange.brings_a_path).
        act = brings_a_path(what)
        watcher = self.network_watcher
        self._recovery.notify_network_change(
            cause="detected",
            detail=what,
            probe=act,
            media=act,
            addresses=watcher.addresses() if watcher is not None else None,
        )

    async def switch_audio(self, track: Any) -> None:
        """Send from ``track`` from now on (None: silence); no renegotiation, mute kept."""
        self._uplink_track.switch(track)

    # -- internals shared by the parts ------------------------------------------------------
    def _emit(self, name: str, data: dict[str, Any] | None = None) -> None:
        self._bus.emit(name, data or {})

    def _on_state_change(self, state: str, previous: str, trigger: str) -> None:
        self._emit("state_changed", {"state": state, "previous": previous, "trigger": trigger})

    def _fail_waiters(self, error: AvatarError) -> None:
        """The session ends: held turns, speech handles and asks fail with ``error``."""
        self._desk.fail_held(error)
        self._replies.fail_all(error)

    def _on_source_error(self, code: ErrorCode, exc: BaseException) -> None:
        log.warning("audio source failed (%s); the uplink continues with silence", code)
        self._emit("error", AvatarError(code, type(exc).__name__).as_event())

    # -- context manager ------------------------------------------------------------------
    async def __aenter__(self) -> AvatarSession:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- connect --------------------------------------------------------------------------
    async def connect(
        self, *, retry: RetryPolicy | None = None, wait_for_greeting: bool | None = None
    ) -> None:
        """Run the connect sequence; raises ``AvatarError`` (state ``failed``) on failure.

        Each attempt is bounded by ``config.overall_connect_timeout``. Cancelling it tears
        everything down within ``config.close_timeout``.

        :param retry: a ``RetryPolicy`` for the first connect (default None: one attempt).
            An attempt that fails with a retryable error (``unreachable``,
            ``transport_closed``, a step's timeout) is tried again on a fresh socket after
            the policy's backoff, at most ``retry.max_attempts`` attempts in all, each
            announced by a ``connect_retrying`` event; a non-retryable one
            (``auth_failed``, ``tier_exceeded``, ...) or the last attempt's error is raised.
            Only ``max_attempts`` and the backoff fields (``initial``, ``base``, ``cap``,
            ``jitter``) apply here.
        :param wait_for_greeting: also wait until the opening greeting is over (its turn
            ended and was said), at most ``config.greeting_timeout``; None: as
            ``config.wait_for_greeting`` (which ``async with`` uses). An agent that does
            not greet is known by no greeting beginning within ``agent_timeout``.
        """
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy or None, not {type(retry).__name__}")
        if wait_for_greeting is not None and not isinstance(wait_for_greeting, bool):
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, "wait_for_greeting must be a bool or None"
            )
        if not self._machine.idle:
            raise AvatarError(ErrorCode.INVALID_STATE, f"connect() in state {self.state}")
        self._call("connect")
        self._connect_task = asyncio.current_task()
        started = self._clock.monotonic()
        self._machine.fire("start")
        try:
            await self._recovery.admit(self._machine.fire, retry)
            self._adopt_genie()
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
        self._stats.connect_duration = duration
        self._start_watch()
        self._emit("connected", {"thread_id": self.thread_id, "duration": duration})
        greet = self.config.wait_for_greeting if wait_for_greeting is None else wait_for_greeting
        if greet:
            limit = self.config.greeting_timeout
            try:
                await self._until_floor(self._clock.monotonic() + limit)
            except TimeoutError:
                log.info("the greeting was not over within %.3gs; connect() returns", limit)

    def _adopt_genie(self) -> None:
        """A genie host the backend named at join, when none was given (genie_host.py)."""
        link = self._slot.current
        result = link.result if link is not None else None
        genie = self._genie_host.after_join(result.client_configuration if result else None)
        if genie is not None:
            self._genie = self._completion.genie = self._endings.genie = genie

    def _start_watch(self) -> None:
        cfg, spawn = self.config, self._supervisor.spawn
        if self._media and cfg.quality_interval > 0:
            spawn(self._recovery.media.quality_loop(cfg.quality_interval), "quality")
        if self._media:
            spawn(self._recovery.media.watchdog(), "media-watchdog")
        if cfg.socket_probe_interval > 0:
            spawn(self._recovery.socket_watchdog(), "socket-watchdog")
        if cfg.watch_network:
            self.network_watcher = NetworkWatcher(
                self._network_changed,
                clock=self._clock,
                poll_interval=cfg.network_poll_interval,
            )
            spawn(self.network_watcher.run(), "network-watch")
        if cfg.renewal is not None:
            spawn(self._renewal.watch(), "renewal-watch")
        self._completion.hold()
        hooks = default_hooks()
        hooks.track(self._completion)
        if cfg.handle_signals:
            hooks.install()
            self._endings.unregister_signals = hooks.register(self.close)
        self._idle.start()
        if cfg.brain_stall_timeout > 0:
            spawn(self._guards.run_watchdog(lambda: self._machine.connected), "brain-watchdog")
        if self._observer is not None and self._media:
            spawn(self._media_samples(), "media-samples")

    async def _media_samples(self) -> None:
        """Once a second, the media counters to the observer (a cassette's summary)."""
        while not self._machine.terminal:
            await self._clock.sleep(1.0)
            counts = {"audio_out": self._uplink_track.frames_sent}
            lanes = self.media
            if lanes is not None and lanes.stv is not None:
                counts["audio_in"] = lanes.stv.frames.get("audio", 0)
                gate = lanes.stv.video_gate  # frames received, decoded or not (nobody watching)
                video = gate.assembled if gate is not None else lanes.stv.frames.get("video", 0)
                counts["video_in"] = video
            self._sample(counts)

    def _sample(self, counts: dict[str, int]) -> None:
        notify(self._observer, lambda o: o.media_sample(counts))

    def _call(self, name: str, **args: Any) -> None:
        if self._observer is not None:
            notify(self._observer, lambda o: o.session_call(name, args))

    # -- tools ----------------------------------------------------------------------------
    def on_tool_call(
        self, name: str, handler: Callable[..., Any], schema: dict[str, Any] | None = None
    ) -> Callable[[], None]:
        """Run ``handler(args, call)`` (sync or async) for each call of the client-side tool
        ``name``; with a ``schema`` (JSON Schema, checked here: an invalid one raises
        ``invalid_argument``), invalid arguments emit ``tool_call_invalid`` instead.
        A non-None return value is reported as ``tool_call_result``. Returns unregister."""
        return self._guards.on_tool_call(name, handler, schema)

    async def respond_to_tool(self, call_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """Acknowledge a tool call that waits for a response (POST to the genie host).

        Returns ``{ok, reason}``: ``ok``, ``unknown_or_stale``, ``session_rebuilt``,
        ``timeout``, ``http_error`` or ``network_error`` (a failed one can be retried);
        ``closed`` once the session has ended (nothing is sent).
        """
        self._call("respond_to_tool", call_id=call_id, result=result)
        if self._machine.terminal:
            # Its HTTP session is closed: a POST now would open one nobody closes.
            return {"ok": False, "reason": "closed"}
        return await self._guards.respond_to_tool(self._genie, call_id, result)

    # -- conversation ---------------------------------------------------------------------
    def speak(self, text: str) -> SpeechHandle:
        """Send a user text turn (a barge-in marker first, as a real client does) and
        return its :class:`SpeechHandle`.

        ``await session.speak(text)`` returns once the turn was written (it returns the
        handle); ``await handle.reply()`` is the avatar's answer to this turn, matched by
        its own ids. The turn goes out whether or not the handle is awaited, in call order.
        A text typed now interrupts the avatar if it is talking: :meth:`ask` waits first.

        Control characters are stripped; a text longer than 8,000 characters
        (``avatar_sdk.wire.MAX_TEXT``) is refused with ``invalid_argument`` before anything
        is sent, never cut (split it into several turns), as is an empty one.
        A session that takes no turns (not connected, ended) raises ``invalid_state``,
        at once.

        During a recovery the turn is held and delivered once the session is usable again;
        if the session ends instead, awaiting the handle raises ``AvatarError``. A turn the
        server has not confirmed when a recovery happens is resent once (``turn_resent``).
        """
        checked = self._desk.check(text)
        self._call("speak", text=text)
        self._replies.note_user("speak")
        handle = self._replies.register(checked, media=self._media)
        task = self._supervisor.spawn(self._speak(text, handle), "speak")
        task.add_done_callback(lambda t: self._speak_done(t, handle))
        return handle

    async def _speak(self, text: str, handle: SpeechHandle) -> None:
        try:
            await self._desk.speak(text, on_sent=handle._on_sent)
        except AvatarError as error:
            handle._fail(error)
            return
        except Exception as exc:  # a bug of ours: that turn fails, the session goes on
            log.error("speak() failed: %r", exc, exc_info=exc)
            handle._fail(AvatarError(ErrorCode.INTERNAL, f"speak: {type(exc).__name__}"))
            return
        handle._resolve_sent(None)

    def _speak_done(self, task: asyncio.Task[Any], handle: SpeechHandle) -> None:
        if task.cancelled():  # the session closed under it
            handle._fail(self._replies.ended or AvatarError(ErrorCode.CLOSED, "closed"))

    async def ask(self, text: str, *, timeout: float = 30.0) -> Reply:
        """Speak ``text`` and return the avatar's :class:`Reply` to that turn.

        It first waits out the greeting and any reply still generating or being said (so
        the question is not a barge-in), and waits for an earlier ``ask()`` of this session
        to finish; then it speaks and waits for the reply matched by the turn's own ids
        (``docs/events.md``, Replies): the greeting or a late answer to an earlier turn is
        never taken for it, and after a recovery that resent the turn, the resent turn's
        reply is the reply (``Reply.resent``). Returns once the reply's agent turn ended
        (with media, also once its voice was heard, or a second after it was said).

        :param timeout: seconds for the whole call, waiting included (session clock):
            ``TimeoutError`` when it passes (the turn, if sent, stays sent).
        :raises AvatarError: ``invalid_argument`` (an empty text, a bad timeout),
            ``invalid_state`` (a session that takes no turns), or, when the session ends or
            fails under it, that end's code (``closed``, ``server_ended``, ``gave_up``...).
        """
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, f"timeout must be seconds > 0 ({timeout!r})"
            )
        self._desk.check(text)
        clock = self._clock
        started = clock.monotonic()
        deadline = started + float(timeout)
        while self._asking:  # one ask at a time: each waits for the one before
            left = deadline - clock.monotonic()
            if left <= 0:
                raise TimeoutError("an earlier ask() of this session did not finish in time")
            self._ask_free.clear()
            await sleep_or(clock, left, self._ask_free)
        self._asking = True
        try:
            await self._until_floor(deadline)
            waited = clock.monotonic() - started
            handle = self.speak(text)
            handle.waited = waited
            return await handle.reply(timeout=max(0.0, deadline - clock.monotonic()))
        finally:
            self._asking = False
            self._ask_free.set()

    async def _until_floor(self, deadline: float) -> None:
        """Until a question would not cut an agent turn short: past the greeting due after
        approval (it begins within ``agent_timeout``, or never will), then until no agent
        turn is generating or being said (with media, and its voice quiet here: at most a
        second more). ``TimeoutError`` at ``deadline``."""
        desk = self._desk
        await desk.past_expected(limit=max(0.0, deadline - self._clock.monotonic()))
        await self._replies.until_free(deadline, lambda: desk.gate.phase == "open")
        await self._replies.until_quiet(deadline)  # media: its last audio arrived here too

    async def wait_until_quiet(self, *, timeout: float | None = None) -> None:
        """Return once the avatar is quiet: no agent turn in progress and nothing it is
        still saying (its answer's captions came, and ``agent_talking`` went back to false,
        or it was interrupted). At once when it already is, or when the session is over.

        ``agent_turn_ended`` marks the end of an answer's *generation*; the avatar goes on
        speaking it for as long as its audio lasts, and a turn sent meanwhile interrupts it.
        Wait for this before the next turn, or before ``close()`` to let the last answer be
        heard (and recorded) to its end. It does not wait for an answer that has not begun.
        ``TimeoutError`` after ``timeout`` seconds (None: no bound).
        """
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not timeout >= 0
            or timeout == float("inf")
        ):
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, f"timeout must be a finite number >= 0, not {timeout!r}"
            )
        if self._replies.ended is not None:
            return  # an ended session is quiet
        clock = self._clock
        deadline = clock.monotonic() + (_NO_BOUND if timeout is None else float(timeout))
        try:  # the same floor ask() waits for (session/replies.py: Floor)
            await self._replies.until_free(deadline, lambda: True)
            await self._replies.until_quiet(deadline)
        except AvatarError:
            return  # the session ended meanwhile: nothing more will be said

    async def interrupt(self) -> None:
        """Barge in: stop the avatar talking (the marker alone)."""
        self._require(self._machine.connected)
        self._call("interrupt")
        self._replies.note_user("interrupt")
        await self._slot.outbox.send(Out.TEXT_ENTERED, build_barge_in_marker())
        if self._taps:
            self._taps.emit(Point.INTERRUPT_SENT, {})

    @property
    def mic_enabled(self) -> bool:
        """Whether the user's microphone reaches the server. Preserved across reconnects."""
        return self._user.mic_enabled

    @mic_enabled.setter
    def mic_enabled(self, enabled: bool) -> None:
        self._uplink_track.muted = not enabled
        self._call("set_mic", enabled=bool(enabled))
        self._user.set_mic(bool(enabled))

    async def pause(self) -> None:
        """Pause the conversation (the server holds the avatar). A recovery returns to
        ``paused``; a cold reconnect pauses the new server session too."""
        self._require(self._machine.usable)
        self._call("pause")
        await self._slot.outbox.send(Out.PAUSE_CONVERSATION, build_empty())
        if not self._machine.try_fire("pause"):
            # A recovery started while the pause went out: it returns to paused.
            self._require(self._machine.recovering)
            self._machine.set(user_paused=True)

    async def resume(self) -> None:
        """Resume a paused conversation.

        If the server released the media while paused (``session_released``), the session
        asks for a new STV session, rebuilds both peers and approves again before it counts
        as connected; a failure there ends the session (``resume_failed``).
        """
        self._require(self._machine.paused)
        self._call("resume")
        await self._slot.outbox.send(Out.RESUME_CONVERSATION, build_empty())
        self._user.resume_sent()
        link = self._slot.current
        if self._machine.data.media_released and link is not None and self._media:
            try:
                await self._builder.rebuild_media(link, self._slot.outbox.send)
            except AvatarError as error:
                await self._endings.fail(error, reason="resume_failed")
                raise
        if not self._machine.try_fire("resume"):
            # A recovery started meanwhile: it returns to connected, not paused.
            self._require(self._machine.link_recovering)
            self._machine.set(user_paused=False)
        await self._desk.flush()

    def _require(self, allowed: bool) -> None:
        """``allowed`` is a machine predicate: the call is refused in any other state."""
        if not allowed:
            raise AvatarError(ErrorCode.INVALID_STATE, f"not allowed in state {self.state}")

    # -- endings --------------------------------------------------------------------------
    async def close(self) -> None:
        """End the session gracefully; returns within ``config.close_timeout`` (+ a little)."""
        if self._machine.terminal:
            return
        self._call("close")
        self._close_requested = True
        connect_task = self._connect_task
        if connect_task is not None and connect_task is not asyncio.current_task():
            connect_task.cancel()
            await asyncio.wait({connect_task}, timeout=self.config.close_timeout)
            if self._machine.terminal:
                return
        await self._endings.end("closed", None)
        if self._machine.state == "disconnecting":  # an end was already under way
            await self._endings.wait_finished()


def _describe(url: str, *, media: bool, video: bool) -> dict[str, Any]:
    """What an instrumentation may say about the session: host, port and media mode (never
    the path, query or credentials of the URL)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    mode = "control" if not media else "audio_video" if video else "audio"
    return {"server_address": parts.hostname or "", "server_port": port, "media": mode}


def _one_observer(*observers: WireObserver | None) -> WireObserver | None:
    """The observers given, as one (None when there is none: the channels then pay nothing)."""
    present = [o for o in observers if o is not None]
    if len(present) <= 1:
        return present[0] if present else None
    return FanoutObserver(present)
