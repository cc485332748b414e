"""ScriptedAvatarSession: the avatar as the face of your own agent (REST + WHEP, no socket).

``create`` → ``init-client`` → WHEP subscribe on enter; ``say`` uploads audio, ``interrupt``
cuts it, ``end`` (on exit) releases it. Keep-alive runs on its own task while the session
is open, the session token's expiry is watched (``session_expiring``), and the downlink is
the SDK's own WHEP client (:class:`~avatar_sdk.transport.rtc.stv.StvDownlink`: host guard,
playable gate, liveness, re-subscribe on a dead peer). Each ``say`` returns a
:class:`SayHandle` whose ``started`` / ``finished`` are read off the avatar's voice on the
downlink (:class:`~.protocol.SayLedger`). The protocol: ``docs/scripted.md``.
"""

from __future__ import annotations

import asyncio
import os
import ssl as ssl_module
import uuid
from collections.abc import Callable
from typing import Any, Literal

import aiohttp
from aiortc.mediastreams import MediaStreamTrack

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import CATALOGUE, AvatarError, ErrorCode
from ..events.bus import EventSource
from ..logs import sdk_logger
from ..media.recorder import Recorder, record_avatar
from ..media.sinks import frame_rms
from ..redact import register_secret
from ..session.core.health import Health
from ..session.supervisor import Supervisor
from ..transport.liveness.channel_down import WATCH_TICK, ChannelDown, DownKind, downlink_down
from ..transport.net.hostguard import HostGuard
from ..transport.net.tls import client_context, connector
from ..transport.rtc.ice import TurnConfig, rtc_configuration
from ..transport.rtc.media import GATE_SETTLE
from ..transport.rtc.stv import FanoutTrack, StvDownlink, whep_http_session
from ..urls import check_url
from . import audio as audio_prep
from .core.config import HEALTHY_STRETCH, ScriptedConfig
from .core.protocol import (
    CREATE_PATH,
    ClientInit,
    Created,
    SayLedger,
    Transition,
    VoiceDetector,
    build_create,
    parse_create,
    parse_init_client,
    parse_say,
    say_form_fields,
    session_path,
)
from .core.states import UPSTREAM, ScriptedState, ScriptedStates
from .rest import idempotent_retrying, post_json
from .say import SayHandle, SayResult, settle
from .tracks import ReaderIterator, VoiceHub

__all__ = ["ScriptedAvatarSession"]

log = sdk_logger(__name__)


class ScriptedAvatarSession(EventSource):
    """A brain-free avatar that speaks exactly the audio you give it.

    ``agentic_url``: the agentic host's base URL (``https://``; plain http needs
    ``allow_insecure_transport``, which also permits a private WHEP host). ``admin_token``:
    an admin token (a conversation token is refused: ``wrong_token_scope``). ``visual_id``:
    the avatar's visual-catalog id. ``video=False`` subscribes to the voice alone.

    ``async with ScriptedAvatarSession(...) as s:`` creates the session, initialises the
    client, subscribes to the WHEP downlink and waits for its first frame; on exit it ends
    the session and releases everything. Events: ``connected``, ``session_expiring``,
    ``say_started``, ``say_finished``, ``media_recovering``, ``media_recovered``,
    ``error``, ``ended`` (``code`` ``session_gone`` when the server reclaimed it).
    """

    def __init__(
        self,
        agentic_url: str,
        admin_token: str,
        visual_id: str,
        *,
        config: ScriptedConfig | None = None,
        allow_insecure_transport: bool = False,
        video: bool = True,
        clock: Clock | None = None,
        ssl: ssl_module.SSLContext | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        host_guard: HostGuard | None = None,
    ) -> None:
        if not isinstance(admin_token, str) or not admin_token.strip():
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "admin_token must be a non-empty string")
        if not isinstance(visual_id, str) or not visual_id.strip() or len(visual_id) > 256:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "visual_id must be a non-empty string")
        if config is not None and not isinstance(config, ScriptedConfig):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "config must be a ScriptedConfig")
        register_secret(admin_token)
        self.__admin = admin_token
        self._base = check_url(
            agentic_url, allow_insecure=allow_insecure_transport, what="agentic_url"
        )
        self._allow_insecure = allow_insecure_transport
        self._tls = client_context(ssl, ca_file, allow_insecure=allow_insecure_transport)
        self._guard = None if allow_insecure_transport else host_guard or HostGuard()
        self.visual_id = visual_id
        self.config = config or ScriptedConfig()
        self._video = video
        self._clock = clock or SYSTEM_CLOCK
        super().__init__(clock=self._clock)
        self._created: Created | None = None
        self._init: ClientInit | None = None
        self._http: aiohttp.ClientSession | None = None
        self._whep_http: aiohttp.ClientSession | None = None
        self._stv: StvDownlink | None = None
        self._supervisor = Supervisor(self._on_task_failure, label="avatar-sdk:scripted")
        self._audio = VoiceHub("audio", self._on_audio_frame)
        self._video_track = VoiceHub("video")
        self._outputs: dict[str, FanoutTrack] = {"audio": self._audio, "video": self._video_track}
        c = self.config
        self._detector = VoiceDetector(threshold=c.voice_threshold, hangover=c.voice_hangover)
        self._ledger = SayLedger(onset_margin=c.onset_margin)
        self._handles: dict[str, SayHandle] = {}
        self._states = ScriptedStates()
        self._reason: str | None = None
        self._category: str | None = None
        self._end_code: ErrorCode | None = None
        self._ending: asyncio.Task[None] | None = None
        self._ended = asyncio.Event()
        self._watching_since: float | None = None
        self._says = 0
        #: Says go out one at a time, in call order: the server queues them in arrival
        #: order, and the ledger must hold them in the same order.
        self._say_lock = asyncio.Lock()
        self.resubscribes = 0
        self.keep_alives = 0

    # -- introspection ----------------------------------------------------------------------
    def __repr__(self) -> str:
        sid = self._created.session_id if self._created else None
        return (
            f"<ScriptedAvatarSession {self._states.state} session_id={sid!r} "
            f"agentic_url={self._base!r} says={self._says}>"
        )

    @property
    def session_id(self) -> str | None:
        return self._created.session_id if self._created else None

    @property
    def state(self) -> str:
        """``idle``, ``connecting``, ``live``, ``recovering`` (re-subscribing) or ``ended``."""
        return self._states.state

    @property
    def expires_at(self) -> float | None:
        """The session token's ``exp`` (epoch seconds), when the token is a readable JWT."""
        return self._created.expires_at if self._created else None

    @property
    def whep_url(self) -> str | None:
        return self._init.whep_url if self._init else None

    @property
    def avatar_audio(self) -> MediaStreamTrack:
        """The avatar's voice (bounded; kept across re-subscribes)."""
        return self._audio

    @property
    def avatar_video(self) -> MediaStreamTrack | None:
        return self._video_track if self._video else None

    def frames(
        self, kind: Literal["audio", "video"] = "audio", *, max_queue: int = 50
    ) -> ReaderIterator:
        """A fresh async iterator over the avatar's decoded ``av`` frames of ``kind``,
        independent of ``avatar_audio`` and other readers, lasting across re-subscribes.
        Close it (``async with`` / ``aclose()``) when done; the session's end ends it."""
        reader, drop = self._reader_track(kind, max_queue)
        return ReaderIterator(reader, max_queue=max_queue, on_close=drop)

    def _reader_track(self, kind: str, max_queue: int) -> tuple[FanoutTrack, Callable[[], None]]:
        """A new reader of the avatar's ``kind`` frames, and the function that detaches it."""
        if kind not in ("audio", "video"):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "kind must be 'audio' or 'video'")
        hub = self._audio if kind == "audio" else self._video_track
        reader = FanoutTrack(kind, max_queue=max_queue)
        if self._states.ended:
            reader.stop()
        hub.readers.append(reader)

        def drop() -> None:
            if reader in hub.readers:
                hub.readers.remove(reader)

        return reader, drop

    def record(self, path: str | os.PathLike[str]) -> Recorder:
        """A :class:`~avatar_sdk.media.recorder.Recorder` of the avatar's voice (and video);
        ``await rec.start()`` ... ``await rec.stop()``."""
        audio, _ = self._reader_track("audio", 50)
        video = self._reader_track("video", 30)[0] if self._video else None
        return record_avatar(audio, video, path)

    def health(self) -> Health:
        """``live`` while the session is usable, ``connecting`` while it starts or
        re-subscribes, ``failed`` once ended with an error, ``idle`` otherwise."""
        if self._states.ended:
            return Health("failed" if self._end_code else "idle", self._reason, self._category)
        return Health(UPSTREAM[self._states.state], self._reason, self._category)

    # -- REST -------------------------------------------------------------------------------
    def _http_session(self) -> aiohttp.ClientSession:
        if self._http is None:
            timeout = aiohttp.ClientTimeout(total=self.config.request_timeout)
            self._http = aiohttp.ClientSession(timeout=timeout, connector=connector(self._tls))
        return self._http

    async def _post(
        self,
        path: str,
        what: str,
        *,
        json: dict[str, Any] | None = None,
        form: aiohttp.FormData | None = None,
        token: str | None = None,
    ) -> Any:
        """One POST; its JSON answer, or the classified ``AvatarError``."""
        bearer = token if token is not None else self._session_token()
        return await post_json(
            self._http_session(),
            self._base + path,
            what,
            bearer=bearer,
            json=json,
            form=form,
            timeout=self.config.request_timeout,
        )

    async def _call(self, verb: str, *, retry: bool) -> Any:
        created = self._require_created()
        path = session_path(created.session_id, verb)
        if not retry:
            return await self._post(path, verb, json={})
        async for attempt in idempotent_retrying(self._clock.sleep):
            with attempt:
                return await self._post(path, verb, json={})
        raise AssertionError("unreachable")  # pragma: no cover

    def _session_token(self) -> str:
        return self._require_created().token

    def _require_created(self) -> Created:
        if self._created is None:
            raise AvatarError(ErrorCode.INVALID_STATE, "the avatar session is not created yet")
        return self._created

    # -- lifecycle --------------------------------------------------------------------------
    async def __aenter__(self) -> ScriptedAvatarSession:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.end()

    async def start(self) -> None:
        """Create, init-client, subscribe, and wait for the first frame (bounded by
        ``connect_timeout``). On failure everything is released and the error raised."""
        if self._states.state is not ScriptedState.IDLE:
            raise AvatarError(ErrorCode.INVALID_STATE, "start() was already called")
        self._states.move(ScriptedState.CONNECTING)
        started = self._clock.monotonic()
        try:
            async with asyncio.timeout(self.config.connect_timeout):
                await self._open()
        except TimeoutError:
            error = AvatarError(ErrorCode.CONNECT_TIMEOUT, "the avatar session did not start")
            await self._finish(error, emit=False)
            raise error from None
        except AvatarError as error:
            await self._finish(error, emit=False)
            raise
        except BaseException:
            await self._finish(AvatarError(ErrorCode.CLOSED, "start() cancelled"), emit=False)
            raise
        self._states.move(ScriptedState.LIVE)
        self._watching_since = self._clock.monotonic()
        self._supervisor.spawn(self._keep_alive_loop(), "keep-alive")
        self._supervisor.spawn(self._expiry_watch(), "expiry")
        self._supervisor.spawn(self._downlink_watch(), "downlink")
        self._bus.emit(
            "connected",
            {"thread_id": None, "duration": self._clock.monotonic() - started},
        )

    async def _open(self) -> None:
        body = await self._post(
            CREATE_PATH, "create", json=build_create(self.visual_id), token=self.__admin
        )
        created = parse_create(body)
        register_secret(created.token)
        self._created = created
        self._init = parse_init_client(await self._call("init-client", retry=False))
        check_url(self._init.whep_url, allow_insecure=self._allow_insecure, what="whepUrl")
        await self._subscribe(self.config.connect_timeout)

    def _turn(self) -> TurnConfig | None:
        init = self._init
        if init is None or not init.turn_url:
            return None
        return TurnConfig(init.turn_url, init.turn_username or "", init.turn_credential or "")

    async def _subscribe(self, timeout: float) -> None:
        """A new WHEP subscription, verified by its first frame (then the settle)."""
        assert self._init is not None
        if self._whep_http is None:
            self._whep_http = whep_http_session(guard=self._guard, ssl_context=self._tls)
        link = StvDownlink(
            http=self._whep_http,
            configuration=rtc_configuration(self._turn(), relay_only=True),
            allow_private=self._allow_insecure,
            video=self._video,
            outputs=self._outputs,
            clock=self._clock,
            guard=self._guard,
            decode_audio_on_loop=True,  # the cheaper path (every frame is levelled here)
        )
        self._stv = link
        started = self._clock.monotonic()
        await link.subscribe(self._init.whep_url, timeout)
        kind = "video" if self._video else "audio"
        # The whole budget, not the conversational gate's 6 s cap: that cap keeps a greeting
        # from waiting on a slow first frame, and nothing waits here but the caller (a
        # run of these tests at load 10 saw no first frame within 6 s).
        left = timeout - (self._clock.monotonic() - started)
        if not await link.wait_first_frame(kind, left):
            raise AvatarError(ErrorCode.MEDIA_FAILED, f"no {kind} frame after subscribing")
        await asyncio.sleep(GATE_SETTLE)

    async def end(self) -> None:
        """End the session on the server (``end``; a 404 means it was already gone) and
        release every task, peer and connection. Idempotent; never raises."""
        await self._finish(None)

    async def _finish(self, error: AvatarError | None, *, emit: bool = True) -> None:
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._teardown(error, emit))
        try:
            await asyncio.shield(self._ending)
        except Exception as exc:  # the teardown logs its own failures; end() never raises
            log.warning("scripted teardown failed: %s", type(exc).__name__)

    async def _teardown(self, error: AvatarError | None, emit: bool) -> None:
        was_live = self._states.open
        self._states.move(ScriptedState.ENDED)
        self._end_code = error.code if error is not None else None
        if error is not None:
            self._reason, self._category = error.message, str(error.category)
        grace = self.config.close_timeout
        await self._supervisor.aclose(grace, spare=asyncio.current_task())
        now = self._clock.monotonic()
        self._apply(self._ledger.end(now))
        if self._created is not None and (
            error is None or error.code is not ErrorCode.SESSION_GONE
        ):
            try:
                async with asyncio.timeout(grace):
                    await self._call("end", retry=False)
            except AvatarError as exc:
                if exc.code is not ErrorCode.SESSION_GONE:
                    log.info("avatar-session end failed: %s", exc.code)
            except TimeoutError:
                log.info("avatar-session end unanswered within %.1fs", grace)
        stv, self._stv = self._stv, None
        if stv is not None:
            await stv.close(min(1.0, grace))
        for hub in (self._audio, self._video_track):
            for reader in list(hub.readers):
                reader.stop()
            hub.stop()
        for http in (self._whep_http, self._http):
            if http is not None:
                await http.close()
        self._whep_http = self._http = None
        if emit and (was_live or error is not None):
            if error is not None:
                self._bus.emit("error", error.as_event())
            info = CATALOGUE[error.code] if error is not None else None
            self._bus.emit(
                "ended",
                {
                    "reason": error.detail or error.message if error is not None else "end",
                    "code": str(error.code) if error is not None else None,
                    "severity": str(info.severity) if info is not None else "info",
                    "recoverable": info.retryable if info is not None else False,
                    "message": error.message if error is not None else "the session ended",
                },
            )
        self._ended.set()
        await self._bus.aclose(timeout=min(0.5, grace))

    def _on_task_failure(self, name: str, exc: BaseException) -> None:
        log.error("scripted task %s died: %s", name, type(exc).__name__)
        self._fail_soon(AvatarError(ErrorCode.INTERNAL, f"task {name} died"))

    def _fail_soon(self, error: AvatarError) -> None:
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._teardown(error, True))

    # -- speaking ---------------------------------------------------------------------------
    async def say(
        self,
        audio: Any,
        duration: float | None = None,
        *,
        sample_rate: int | None = None,
        turn_id: str | None = None,
    ) -> SayHandle:
        """Queue ``audio`` for the avatar to speak; returns once the server accepted it.

        ``audio``: mp3 bytes (sent as they are), WAV bytes, int16 PCM (a numpy array, with
        ``sample_rate``) or a sequence of ``av.AudioFrame`` (encoded to mp3 with PyAV).
        ``duration`` (seconds): measured from the audio when None. Never retried (a say is
        not idempotent). Raises ``AvatarError``: ``invalid_argument``, ``closed``,
        ``server_error`` (5xx), ``session_gone`` (404: the session ends), ...
        """
        self._check_live("say")
        called = self._clock.monotonic()
        async with self._say_lock:
            return await self._say(audio, duration, sample_rate, turn_id, called)

    async def _say(
        self,
        audio: Any,
        duration: float | None,
        sample_rate: int | None,
        turn_id: str | None,
        called: float,
    ) -> SayHandle:
        prepared = await asyncio.to_thread(audio_prep.prepare, audio, duration, sample_rate)
        self._check_live("say")
        self._says += 1
        turn = turn_id or str(uuid.uuid4())
        form = aiohttp.FormData()
        for key, value in say_form_fields(turn, prepared.duration).items():
            form.add_field(key, value)
        form.add_field("audio", prepared.mp3, filename="audio.mp3", content_type="audio/mpeg")
        created = self._require_created()
        handle = SayHandle(turn, prepared.duration, called)
        sent = self._clock.monotonic()
        try:
            body = await self._post(
                session_path(created.session_id, "say-audio"), "say-audio", form=form
            )
        except AvatarError as error:
            self._on_call_error(error)
            raise
        if not parse_say(body):
            raise AvatarError(ErrorCode.SERVER_ERROR, "say-audio answered success: false")
        now = self._clock.monotonic()
        settle(handle.accepted, now)
        self._handles[turn] = handle
        self._apply(self._ledger.add(turn, prepared.duration, now, sent))
        return handle

    async def interrupt(self) -> None:
        """Cut what the avatar is saying (the say playing finishes ``interrupted``); safe
        with nothing playing. Retried on transient failures (it is idempotent)."""
        self._check_live("interrupt")
        try:
            await self._call("interrupt", retry=True)
        except AvatarError as error:
            self._on_call_error(error)
            raise
        self._apply(self._ledger.interrupt(self._clock.monotonic()))

    async def keep_alive(self) -> None:
        """One keep-alive call now (the session's own task calls it every
        ``keep_alive_interval``)."""
        self._check_live("keep_alive")
        try:
            await self._call("keep-alive", retry=True)
        except AvatarError as error:
            self._on_call_error(error)
            raise
        self.keep_alives += 1

    def _check_live(self, what: str) -> None:
        if self._states.ended or self._ending is not None:
            raise AvatarError(ErrorCode.CLOSED, f"{what}() after the session ended")
        if not self._states.open:
            raise AvatarError(ErrorCode.INVALID_STATE, f"{what}() before start()")

    def _on_call_error(self, error: AvatarError) -> None:
        if error.code is ErrorCode.SESSION_GONE:
            self._fail_soon(error)
        else:
            self._bus.emit("error", error.as_event())

    # -- the say ledger ----------------------------------------------------------------------
    def _on_audio_frame(self, frame: Any) -> None:
        now = self._clock.monotonic()
        try:
            level = frame_rms(frame)
            length = frame.samples / (frame.sample_rate or 48_000)
        except Exception as exc:  # a frame we cannot level is skipped, never fatal
            log.debug("unlevelled frame: %s", type(exc).__name__)
            return
        for kind, at in self._detector.feed(level, now, length):
            self._apply(self._ledger.on_edge(kind, at))

    def _apply(self, transitions: list[Transition]) -> None:
        for t in transitions:
            handle = self._handles.get(t.turn_id)
            if handle is None:
                continue
            if t.kind == "started":
                settle(handle.started, t.at)
                self._bus.emit("say_started", {"turn_id": t.turn_id, "at": t.at})
                continue
            settle(handle.started, None)
            assert t.reason is not None
            settle(handle.finished, SayResult(t.at, t.reason))
            self._handles.pop(t.turn_id, None)
            self._bus.emit(
                "say_finished",
                {
                    "turn_id": t.turn_id,
                    "at": t.at,
                    "reason": t.reason,
                    "interrupted": t.reason == "interrupted",
                },
            )

    # -- background tasks -------------------------------------------------------------------
    async def _keep_alive_loop(self) -> None:
        while True:
            await self._clock.sleep(self.config.keep_alive_interval)
            try:
                await self.keep_alive()
            except AvatarError as error:
                if error.code in (ErrorCode.SESSION_GONE, ErrorCode.CLOSED):
                    return
                log.info("keep-alive failed: %s", error.code)

    async def _expiry_watch(self) -> None:
        exp = self.expires_at
        if exp is None:
            return
        remaining = exp - self._clock.wall()
        lead = self.config.expiry_warning
        if remaining > lead:
            await self._clock.sleep(remaining - lead)
        self._bus.emit(
            "session_expiring",
            {"expires_at": exp, "remaining": max(0.0, exp - self._clock.wall())},
        )

    async def _downlink_watch(self) -> None:
        """Every :data:`WATCH_TICK`: the say ledger's timers, then the downlink's liveness
        (the live session's rule,
        :func:`~avatar_sdk.transport.liveness.channel_down.downlink_down`);
        a dead downlink re-subscribes, at most ``max_resubscribes`` times in a row without a
        :data:`~.config.HEALTHY_STRETCH` of life between them."""
        c = self.config
        failures = 0
        while True:
            await self._clock.sleep(WATCH_TICK)
            now = self._clock.monotonic()
            self._apply(self._ledger.tick(now))
            for kind, at in self._detector.silence(now):
                self._apply(self._ledger.on_edge(kind, at))
            down = self._downlink_down(now)
            if down is None:
                since = self._watching_since
                if failures and since is not None and now - since > HEALTHY_STRETCH:
                    failures = 0
                continue
            if failures >= c.max_resubscribes:
                self._fail_soon(AvatarError(ErrorCode.GAVE_UP, f"downlink: {down.reason}"))
                return
            failures += 1
            if not await self._resubscribe(down.reason, failures):
                return

    def _downlink_down(self, now: float) -> ChannelDown | None:
        """Why the downlink is dead now, or None while it delivers. Silence counts from the
        last frame or the subscription, never from before the last recovery: time spent
        re-subscribing is not a stall."""
        stv = self._stv
        if stv is None:
            return ChannelDown(DownKind.NO_DOWNLINK, "no downlink")
        return downlink_down(
            stv.state,
            now,
            self.config.media_stall_timeout,
            last_media_at=stv.last_media_at,
            subscribed_at=stv.subscribed_at,
            watching_since=self._watching_since,
        )

    async def _resubscribe(self, why: str, attempt: int) -> bool:
        """WHEP re-subscribe; False once the session is gone (it then ends)."""
        started = self._clock.monotonic()
        self._states.move(ScriptedState.RECOVERING)
        self._reason, self._category = why, "network"
        self._bus.emit(
            "media_recovering",
            {"channel": "stv", "method": "whep_resubscribe", "attempt": attempt, "reason": why},
        )
        old, self._stv = self._stv, None
        if old is not None:
            await old.close(1.0)
        try:
            await self._subscribe(self.config.recovery_timeout)
        except AvatarError as error:
            stv, self._stv = self._stv, None
            if stv is not None:
                await stv.close(1.0)
            if error.code in (ErrorCode.SESSION_GONE, ErrorCode.INSECURE_TRANSPORT):
                self._fail_soon(error)
                return False
            log.info("WHEP re-subscribe failed: %s", error.code)
            self._bus.emit("error", error.as_event())
            self._states.move(ScriptedState.LIVE)
            self._watching_since = self._clock.monotonic()
            return True
        self.resubscribes += 1
        self._states.move(ScriptedState.LIVE)
        self._reason = self._category = None
        self._watching_since = self._clock.monotonic()
        self._bus.emit(
            "media_recovered",
            {
                "channel": "stv",
                "method": "whep_resubscribe",
                "duration": self._clock.monotonic() - started,
            },
        )
        return True

    async def wait_ended(self, timeout: float | None = None) -> None:
        """Return once the session ended (by ``end()``, or the server reclaiming it)."""
        async with asyncio.timeout(timeout):
            await self._ended.wait()
