"""AvatarSession: the public facade of one live avatar conversation.

The facade holds the public verbs, the event bus and the parts of the session, which
``session/assemble.py`` builds once from the checked arguments (``session/spec.py``) and
none of which calls back into it: the machine (the only state), one supervisor in which
every task lives, the link builder (connect sequence), the recovery controller (three
tiers and their watchdogs), the inbound handler (over the pure router), the turn desk
(turns until confirmed), the guards, lifecycle, renewal and endings, and the one fan-out
of observers (``avatar_sdk.observe``). ``docs/architecture.md`` draws who owns what."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from ssl import SSLContext
from typing import Any

from ..clock import Clock
from ..config import DEFAULT_AUDIO_CODEC, AudioCodec, RetryPolicy, SessionConfig
from ..errors import AvatarError, ErrorCode
from ..events.bus import EventSource
from ..lifecycle.registry import LIVE_SESSIONS
from ..logs import sdk_logger
from ..observe import Instrumentation, Observer, Observers
from ..transport.net.netwatch import NetworkWatcher
from ..transport.rtc.ice import TurnConfig
from ..transport.rtc.media import MediaLanes
from ..transport.rtc.stv import FanoutTrack
from ..wire import Out, build_barge_in_marker, build_empty
from .assemble import assemble
from .core.health import Health
from .core.latency import PlayoutClock
from .core.machine import Trigger
from .core.reply_match import Reply
from .core.stats import StatsSnapshot
from .replies import SpeechHandle
from .spec import SessionSpec

log = sdk_logger(__name__)

__all__ = ["AvatarSession", "Health", "Reply", "SpeechHandle"]


#: ``wait_until_quiet(timeout=None)``: a bound no conversation reaches (a timer needs one).
_NO_BOUND = 1e9


class AvatarSession(EventSource):
    """One live conversation with an avatar (the guide: the quick start and the recovery tiers
    in the documentation)."""

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
        observer: Observer | None = None,
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
        :param observer: an ``avatar_sdk.observe.Observer`` of your own, told every fact the
            session's observers are: each event in and out, socket, HTTP exchange and media
            state (what a cassette records), the application's calls, and the session
            points telemetry reads. Beside ``record`` and ``telemetry``, never instead; what
            it raises is logged, never reaches the session.
        :raises AvatarError: ``invalid_argument`` for a bad argument, ``insecure_transport``
            for an http URL without the opt-in.
        """
        spec = SessionSpec.checked(
            url, token, config=config, clock=clock, ssl=ssl, ca_file=ca_file,
            thread_id=thread_id, audio_codec=audio_codec, allow_insecure=allow_insecure_transport,
            genie_url=genie_url, partner_id=partner_id, audio=audio, video=video,
            media=media, turn=turn, journal=journal, record=record,
            record_content=record_content, observer=observer,
        )  # fmt: skip
        super().__init__(clock=spec.clock)
        self._url, self.config = spec.url, spec.config
        self._parts = parts = assemble(spec, self._bus, owner=self)
        # The parts the public verbs drive (named here, once).
        self._clock, self._media = spec.clock, parts.media
        self._machine, self._slot, self._stats = parts.machine, parts.slot, parts.stats
        self._desk, self._replies, self._guards = parts.desk, parts.replies, parts.guards
        self._renewal, self._completion = parts.renewal, parts.completion
        # Weakly: what test tooling asks to find a session left open (lifecycle/registry.py).
        LIVE_SESSIONS.add(self, backend=self._url)
        if telemetry is not None:
            telemetry.attach(self)  # a subscriber of the bus and an observer; nothing else

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
        return self._parts.view.thread_id

    @property
    def sticky_id(self) -> str:
        return self._parts.sticky_id

    @property
    def network_watcher(self) -> NetworkWatcher | None:
        """The host network watcher (``SessionConfig.watch_network``), once connected."""
        return self._parts.watches.network_watcher

    @property
    def taps(self) -> Observers:
        """The session's observers, which instrumentations add themselves to
        (``avatar_sdk.observe``; not a stable API)."""
        return self._parts.observers

    @property
    def avatar_audio(self) -> FanoutTrack | None:
        """The avatar's voice (an aiortc track; None until subscribed). It keeps delivering
        across reconnects: the session re-feeds it from every new subscription."""
        return self._parts.outputs["audio"] if self._machine.data.subscribed else None

    @property
    def avatar_video(self) -> FanoutTrack | None:
        """The avatar's video (an aiortc track; None until subscribed or with video=False)."""
        return self._parts.outputs.get("video") if self._machine.data.subscribed else None

    @property
    def playout_clock(self) -> PlayoutClock | None:
        """What plays the avatar's voice beyond the frames read from :attr:`avatar_audio`
        (a speaker sink with its own buffer), or None: the application reading the frames
        is the playout. Its ``playout_delay()`` is added to ``Reply.played_latency``."""
        return self._replies.playout_clock

    @playout_clock.setter
    def playout_clock(self, clock: PlayoutClock | None) -> None:
        if clock is not None and not isinstance(clock, PlayoutClock):
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, "playout_clock needs a playout_delay() method"
            )
        self._replies.playout_clock = clock

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

    def health(self) -> Health:
        """Upstream health, read from the machine: a :class:`Health` whose ``upstream`` is
        ``live``, ``idle``, ``connecting``, ``backoff`` or ``failed``, with the last failure's
        ``reason`` and ``category`` (``auth``, ``capacity``, ``network``, ``server``,
        ``client``)."""
        return self._machine.health()

    def stats(self) -> StatsSnapshot:
        """Counters: reconnects per tier, recovery durations (s), events in and out (every
        key: ``docs/resilience.md``, Counters). A copy the caller may keep."""
        voice = self._parts.voice_counts
        return self._stats.snapshot(
            events_emitted=self._bus.emitted,
            events_dropped=self._bus.dropped,
            voice_buffer=voice.snapshot() if voice.packets else None,
        )

    def notify_network_change(self, *, media: bool = True) -> None:
        """The host's network changed: probe the control socket at once and restart both
        media channels (``media=False``: only the probe). The session notices most changes
        by itself (``SessionConfig.watch_network``)."""
        self._parts.recovery.notify_network_change(media=media)

    async def switch_audio(self, track: Any) -> None:
        """Send from ``track`` from now on (None: silence); no renegotiation, mute kept."""
        self._parts.uplink_track.switch(track)

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
        gate = self._parts.greeting
        watch = gate.watch_thread()  # before the sequence: the greeting may begin meanwhile
        try:
            duration = await self._parts.connecting.run(retry)
        except BaseException:
            if watch is not None:
                watch.cancel()
            raise
        self._parts.watches.start(self.close)
        self._bus.emit("connected", {"thread_id": self.thread_id, "duration": duration})
        greet = self.config.wait_for_greeting if wait_for_greeting is None else wait_for_greeting
        await gate.after_connect(watch, greeting=greet)

    def _call(self, name: str, **args: Any) -> None:
        observers = self._parts.observers
        if observers:
            observers.session_call(name, args)

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
        return await self._guards.respond_to_tool(self._parts.genie.client, call_id, result)

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
        return self._parts.turns.speak(text, checked)

    async def ask(
        self, text: str, *, timeout: float = 30.0, wait_for_playout: bool = False
    ) -> Reply:
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
        :param wait_for_playout: return only once the avatar finished saying the reply and,
            with media, its voice finished playing here, so that ``Reply.played_latency``
            is known (``docs/latency.md``); the next ``ask()`` need not wait for it then.
        :raises AvatarError: ``invalid_argument`` (an empty text, a bad timeout),
            ``invalid_state`` (a session that takes no turns), or, when the session ends or
            fails under it, that end's code (``closed``, ``server_ended``, ``gave_up``...).
        """
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, f"timeout must be seconds > 0 ({timeout!r})"
            )
        self._desk.check(text)
        turns, clock = self._parts.turns, self._clock
        started = clock.monotonic()
        deadline = started + float(timeout)
        async with turns.one_ask(deadline):
            await turns.until_floor(deadline)
            waited = clock.monotonic() - started
            handle = self.speak(text)
            handle.waited = waited
            left = max(0.0, deadline - clock.monotonic())
            if wait_for_playout:
                return await handle.wait_for_playout(timeout=left)
            return await handle.reply(timeout=left)

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
        bound = _NO_BOUND if timeout is None else float(timeout)
        await self._parts.turns.until_quiet(self._clock.monotonic() + bound)

    async def interrupt(self) -> None:
        """Barge in: stop the avatar talking (the marker alone)."""
        self._require(self._machine.connected)
        self._call("interrupt")
        self._replies.note_user("interrupt")
        await self._slot.outbox.send(Out.TEXT_ENTERED, build_barge_in_marker())

    @property
    def mic_enabled(self) -> bool:
        """Whether the user's microphone reaches the server. Preserved across reconnects."""
        return self._parts.user.mic_enabled

    @mic_enabled.setter
    def mic_enabled(self, enabled: bool) -> None:
        self._parts.uplink_track.muted = not enabled
        self._call("set_mic", enabled=bool(enabled))
        self._parts.user.set_mic(bool(enabled))

    async def pause(self) -> None:
        """Pause the conversation (the server holds the avatar). A recovery returns to
        ``paused``; a cold reconnect pauses the new server session too."""
        self._require(self._machine.usable)
        self._call("pause")
        await self._slot.outbox.send(Out.PAUSE_CONVERSATION, build_empty())
        if not self._machine.try_fire(Trigger.PAUSE):
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
        self._parts.user.resume_sent()
        link = self._slot.current
        if self._machine.data.media_released and link is not None and self._media:
            try:
                await self._parts.builder.rebuild_media(link, self._slot.outbox.send)
            except AvatarError as error:
                await self._parts.endings.fail(error, reason="resume_failed")
                raise
        if not self._machine.try_fire(Trigger.RESUME):
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
        """End the session gracefully; returns within ``config.close_timeout`` (+ a little),
        once teardown is over: after a failure or a server end under way too, the ``ended``
        event is delivered and nothing the session owned (task, socket, HTTP session) is
        left when this returns."""
        if self._machine.terminal:  # an end happened, or is finishing: until it is over
            await self._parts.endings.wait_finished()
            return
        self._call("close")
        if await self._parts.connecting.close_requested():
            return  # the connect it cancelled ended the session
        endings = self._parts.endings
        await endings.end("closed", None)
        if self._machine.state == "disconnecting":  # an end was already under way
            await endings.wait_finished()
