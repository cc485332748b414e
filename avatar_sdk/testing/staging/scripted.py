"""The staging backend's avatar-session service: the scripted-video REST protocol over the
staging WHEP machinery (``staging.scripted``; docs/scripted.md describes the protocol).

Six routes under ``{staging.agentic_url}/avatar-session/``, with the status codes and the
problem-style error bodies (``{type, title, code, detail}``) of the service:

* ``POST create`` (``Authorization: Bearer <admin token>``, ``{visualConfig: {id}}``) →
  ``{sessionId, token}``, the token a JWT whose ``exp`` is ``token_ttl`` away. The
  conversation token (``staging.token``) is refused 403 ``wrong_token_scope``; anything
  else 401 ``unauthorized``.
* ``POST {id}/init-client`` → ``{whepUrl, turn}``; ``{id}/say-audio`` (multipart ``turnId``,
  ``duration``, ``audio``) → ``{success: true}``, queued; ``{id}/interrupt``,
  ``{id}/keep-alive``, ``{id}/end`` → ``{success: true}``; ``say-text`` → 503. Every call
  after create needs ``Authorization: Bearer <session token>``; an ended or unknown session
  is 404 ``session_not_found``.

The avatar speaks exactly the audio it was given: each upload is decoded (PyAV) to 48 kHz
mono PCM, cut or padded with silence to its ``duration``, and played in order on the
session's WHEP voice track, with ``gap`` seconds of silence between two says; the video
pattern never stops. ``interrupt`` cuts the say playing (the queue goes on, as the
service does). A session idle for ``idle_timeout`` (no call at all) is reclaimed, and so is
one whose token expired; both then answer 404 and their WHEP peers close.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import math
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import av
import numpy as np
from aiohttp import web
from aiortc.mediastreams import MediaStreamError

from ...logs import sdk_logger
from ...transport.rtc.ice import TurnConfig
from ..synthetic import AUDIO_FRAME, AUDIO_RATE, MediaGate, PacedTrack
from .state import Endpoint

__all__ = ["DEFAULT_VISUAL_ID", "Played", "ScriptedBackend", "ScriptedStagingSession"]

log = sdk_logger(__name__)

DEFAULT_VISUAL_ID: Final = "staging-visual-1"
AGENTIC_PREFIX: Final = "/agentic"
_BASE: Final = AGENTIC_PREFIX + "/avatar-session"
_TICK: Final = 0.05
#: A player more than this behind the wall clock (no viewer is reading) skips ahead.
_LAG: Final = 0.2
MAX_UPLOAD: Final = 20 * 1024 * 1024


def _problem(status: int, code: str, title: str, detail: str = "") -> web.Response:
    body = {"type": "about:blank", "title": title, "code": code, "detail": detail}
    return web.json_response(body, status=status, content_type="application/problem+json")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def make_jwt(claims: dict[str, Any]) -> str:
    """An unsigned-looking HS256-shaped JWT (the signature is random: nobody verifies it)."""
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64(json.dumps(claims).encode())
    return f"{header}.{payload}.{_b64(secrets.token_bytes(32))}"


@dataclass
class Clip:
    """One accepted say: its PCM cut or padded to ``duration``."""

    turn_id: str
    duration: float
    pcm: np.ndarray
    accepted_at: float


@dataclass(frozen=True)
class Played:
    """A say as the server played it (monotonic times of this process)."""

    turn_id: str
    duration: float
    started_at: float
    ended_at: float
    interrupted: bool


class Player:
    """The session's voice: clips in order, ``gap`` seconds of silence between them.

    Read 20 ms at a time by the viewer's track; between viewers (a peer killed, not yet
    re-subscribed) :meth:`catch_up` moves it on with the wall clock, as a live service's
    playback does."""

    def __init__(self, gap: float) -> None:
        self.gap = gap
        self.queue: deque[Clip] = deque()
        self.current: Clip | None = None
        self.pos = 0
        self.gap_left = 0
        self.cursor: float | None = None  # wall (monotonic) time of the next sample
        self.current_started: float | None = None
        self.played: list[Played] = []

    def _start_next(self, now: float) -> None:
        if self.current is None and self.gap_left <= 0 and self.queue:
            self.current = self.queue.popleft()
            self.pos = 0
            self.current_started = now

    def _end_current(self, now: float, interrupted: bool) -> None:
        clip = self.current
        if clip is None:
            return
        self.played.append(
            Played(clip.turn_id, clip.duration, self.current_started or now, now, interrupted)
        )
        self.current = None
        self.gap_left = int(self.gap * AUDIO_RATE)

    def read(self, n: int, now: float) -> tuple[np.ndarray, bool]:
        """The next ``n`` samples and whether any is voice (a clip's, not the gap's)."""
        if self.cursor is None or now - self.cursor > _LAG or self.cursor - now > 1.0:
            self.cursor = now
        out = np.zeros(n, dtype=np.int16)
        filled = 0
        voiced = False
        t = self.cursor
        while filled < n:
            self._start_next(t + filled / AUDIO_RATE)
            if self.current is not None:
                clip = self.current
                take = min(n - filled, len(clip.pcm) - self.pos)
                out[filled : filled + take] = clip.pcm[self.pos : self.pos + take]
                self.pos += take
                filled += take
                voiced = True
                if self.pos >= len(clip.pcm):
                    self._end_current(t + filled / AUDIO_RATE, interrupted=False)
            elif self.gap_left > 0:
                take = min(n - filled, self.gap_left)
                self.gap_left -= take
                filled += take
            else:
                break  # nothing queued: silence
        self.cursor = t + n / AUDIO_RATE
        return out, voiced

    def catch_up(self, now: float) -> None:
        """Nobody read for a while: play on silently up to ``now``."""
        if self.cursor is None or now - self.cursor <= _LAG:
            return
        while self.cursor is not None and now - self.cursor > 0.02:
            behind = int((now - self.cursor) * AUDIO_RATE)
            self.read(min(max(behind, 1), AUDIO_RATE), self.cursor)
        self.cursor = now

    @property
    def busy(self) -> bool:
        return self.current is not None or bool(self.queue)

    def interrupt(self, now: float) -> bool:
        """Cut the clip playing (True if one was)."""
        if self.current is None:
            return False
        self._end_current(now, interrupted=True)
        return True


class ScriptedVoiceTrack(PacedTrack):
    """The WHEP voice of a scripted session: 20 ms s16 mono frames from its player."""

    kind = "audio"

    def __init__(self, player: Player, gate: MediaGate) -> None:
        super().__init__(AUDIO_FRAME / AUDIO_RATE, gate)
        self._player = player
        self._pts = 0
        self.voiced_frames = 0

    async def recv(self) -> av.AudioFrame:
        elapsed = await self._next_slot()
        samples, voiced = self._player.read(AUDIO_FRAME, time.monotonic())
        if self.readyState != "live":
            raise MediaStreamError
        self._pts = max(self._pts, int(elapsed * AUDIO_RATE) // AUDIO_FRAME * AUDIO_FRAME)
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = AUDIO_RATE
        frame.pts = self._pts
        self._pts += AUDIO_FRAME
        self.frames_sent += 1
        self.voiced_frames += voiced
        return frame


@dataclass
class ScriptedStagingSession:
    """One avatar session on the staging backend."""

    session_id: str
    token: str = field(repr=False)
    visual_id: str
    expires_at: float  # epoch seconds (the token's exp)
    player: Player
    last_call: float = field(default_factory=time.monotonic)
    ended: bool = False
    end_reason: str | None = None
    init_clients: int = 0
    keep_alives: int = 0
    interrupts: int = 0
    says: list[str] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    @property
    def sid(self) -> str:
        """The owner key of its WHEP viewers in ``staging.media``."""
        return "scripted-" + self.session_id

    @property
    def stream(self) -> str:
        return "avs-" + self.session_id

    @property
    def played(self) -> list[Played]:
        return self.player.played

    def voice_track(self, gate: MediaGate) -> ScriptedVoiceTrack:
        return ScriptedVoiceTrack(self.player, gate)


class StreamDirectory(Protocol):
    """The media side's WHEP streams, as the avatar-session service opens and ends them."""

    def open_stream(self, stream: str, owner: ScriptedStagingSession) -> None: ...

    async def close_stream(self, stream: str, owner_sid: str) -> None: ...


class ScriptedBackend:
    """``staging.scripted``: the avatar-session service of the staging backend.

    Run-time settings: ``idle_timeout`` (seconds without any call before a session is
    reclaimed), ``token_ttl`` (seconds from create to the token's ``exp``), ``gap``
    (silence between two says), ``turn`` (the TURN relay ``init-client`` names, as the
    service does; None: an empty one, the service's answer without a relay). Faults live
    in ``staging.faults`` (``say_refused``, ``reclaim_session``, ``ice_failure("stv")``)."""

    def __init__(
        self,
        *,
        streams: StreamDirectory,
        endpoint: Endpoint,
        idle_timeout: float = 120.0,
        token_ttl: float = 24 * 3600.0,
        gap: float = 0.3,
        turn: TurnConfig | None = None,
    ) -> None:
        self._streams = streams
        self._endpoint = endpoint
        self.admin_token = "adm-" + secrets.token_urlsafe(24)
        self.visual_ids: set[str] = {DEFAULT_VISUAL_ID}
        self.idle_timeout = idle_timeout
        self.token_ttl = token_ttl
        self.gap = gap
        self.turn = turn
        self.sessions: dict[str, ScriptedStagingSession] = {}
        self.say_refusals: deque[int] = deque()
        self.requests: list[tuple[str, int]] = []  # (verb, status), in arrival order
        self._stopping = False

    # -- wiring ---------------------------------------------------------------------------
    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(_BASE + "/create", self._create)
        app.router.add_post(_BASE + "/{session_id}/{verb}", self._verb)

    def stream_owner(self, stream: str) -> ScriptedStagingSession | None:
        """The live session whose WHEP stream is ``stream`` (``staging.media`` asks)."""
        if not stream.startswith("avs-"):
            return None
        session = self.sessions.get(stream[4:])
        return session if session is not None and not session.ended else None

    def live(self) -> list[ScriptedStagingSession]:
        return [s for s in self.sessions.values() if not s.ended]

    async def stop(self) -> None:
        self._stopping = True
        for session in list(self.sessions.values()):
            await self._end(session, "server stopped")

    # -- faults ---------------------------------------------------------------------------
    def refuse_says(self, status: int = 503, times: int = 1) -> None:
        self.say_refusals.extend([status] * max(0, times))

    async def reclaim(self, session_id: str | None = None) -> int:
        """End (as the service's reclaim does) one session or every live one."""
        targets = [s for s in self.live() if session_id in (None, s.session_id)]
        for session in targets:
            await self._end(session, "reclaimed")
        return len(targets)

    # -- handlers -------------------------------------------------------------------------
    def _reply(self, verb: str, response: web.Response) -> web.Response:
        self.requests.append((verb, response.status))
        return response

    def _bearer(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        return header[7:] if header.startswith("Bearer ") else None

    async def _create(self, request: web.Request) -> web.Response:
        token = self._bearer(request)
        if token is None or token != self.admin_token:
            if token is not None and token == self._endpoint.token:
                return self._reply(
                    "create",
                    _problem(403, "wrong_token_scope", "wrong token scope",
                             "avatar-session/create needs an admin token"),
                )  # fmt: skip
            return self._reply("create", _problem(401, "unauthorized", "unauthorized"))
        try:
            body = await request.json()
        except ValueError:
            return self._reply("create", _problem(400, "bad_request", "bad json"))
        visual = body.get("visualConfig") if isinstance(body, dict) else None
        visual_id = visual.get("id") if isinstance(visual, dict) else None
        if not isinstance(visual_id, str) or not visual_id:
            return self._reply("create", _problem(400, "bad_request", "visualConfig.id required"))
        if visual_id not in self.visual_ids:
            return self._reply("create", _problem(404, "visual_not_found", "unknown visual id"))
        session_id = "avs-" + secrets.token_hex(6)
        exp = time.time() + self.token_ttl
        token = make_jwt({"sid": session_id, "exp": exp, "scope": "avatar-session"})
        session = ScriptedStagingSession(session_id, token, visual_id, exp, Player(self.gap))
        self.sessions[session_id] = session
        session.task = asyncio.ensure_future(self._watch(session))
        return self._reply("create", web.json_response({"sessionId": session_id, "token": token}))

    async def _verb(self, request: web.Request) -> web.Response:
        verb = request.match_info["verb"]
        session = self.sessions.get(request.match_info["session_id"])
        if verb == "say-text":
            return self._reply(
                verb, _problem(503, "unavailable", "Service temporarily unavailable")
            )
        handler = {
            "init-client": self._init_client,
            "say-audio": self._say_audio,
            "interrupt": self._interrupt,
            "keep-alive": self._keep_alive,
            "end": self._end_call,
        }.get(verb)
        if handler is None:
            return self._reply(verb, _problem(404, "not_found", "no such route"))
        if session is None or session.ended:
            return self._reply(verb, _problem(404, "session_not_found", "session not found"))
        if self._bearer(request) != session.token:
            return self._reply(verb, _problem(401, "unauthorized", "bad session token"))
        if time.time() >= session.expires_at:
            await self._end(session, "token expired")
            return self._reply(verb, _problem(404, "session_not_found", "session expired"))
        session.last_call = time.monotonic()
        return self._reply(verb, await handler(session, request))

    async def _init_client(
        self, session: ScriptedStagingSession, request: web.Request
    ) -> web.Response:
        session.init_clients += 1
        self._streams.open_stream(session.stream, session)
        url = f"{self._endpoint.media_url}/rtc/v1/whep/?app=avatar&stream={session.stream}"
        turn = self.turn
        named = (
            {"url": turn.host, "username": turn.username, "credential": turn.credential}
            if turn is not None
            else {"url": "", "username": "", "credential": ""}
        )
        return web.json_response({"whepUrl": url, "turn": named})

    async def _say_audio(
        self, session: ScriptedStagingSession, request: web.Request
    ) -> web.Response:
        if self.say_refusals:
            status = self.say_refusals.popleft()
            return _problem(status, "injected", "say refused (injected fault)")
        if request.content_length is not None and request.content_length > MAX_UPLOAD:
            return _problem(413, "bad_request", "audio too large")
        try:
            form = await request.post()
        except ValueError:
            return _problem(400, "bad_request", "not a multipart form")
        turn_id, duration, audio = form.get("turnId"), form.get("duration"), form.get("audio")
        try:
            seconds = float(str(duration))
        except ValueError:
            seconds = math.nan
        if (
            not isinstance(turn_id, str)
            or not turn_id
            or not (math.isfinite(seconds) and 0 < seconds <= 600)
        ):
            return _problem(400, "bad_request", "turnId and duration (seconds > 0) required")
        data = audio.file.read() if isinstance(audio, web.FileField) else None
        if not data:
            return _problem(400, "bad_request", "audio required")
        try:
            pcm = await asyncio.to_thread(_decode, data)
        except ValueError:
            return _problem(400, "bad_request", "audio not decodable")
        length = int(seconds * AUDIO_RATE)
        clip_pcm = np.zeros(length, dtype=np.int16)
        clip_pcm[: min(length, len(pcm))] = pcm[:length]
        session.says.append(turn_id)
        session.player.queue.append(Clip(turn_id, seconds, clip_pcm, time.monotonic()))
        return web.json_response({"success": True})

    async def _interrupt(
        self, session: ScriptedStagingSession, request: web.Request
    ) -> web.Response:
        session.interrupts += 1
        session.player.interrupt(time.monotonic())
        return web.json_response({"success": True})

    async def _keep_alive(
        self, session: ScriptedStagingSession, request: web.Request
    ) -> web.Response:
        session.keep_alives += 1
        return web.json_response({"success": True})

    async def _end_call(
        self, session: ScriptedStagingSession, request: web.Request
    ) -> web.Response:
        await self._end(session, "ended by the client")
        return web.json_response({"success": True})

    async def _end(self, session: ScriptedStagingSession, reason: str) -> None:
        if session.ended:
            return
        session.ended = True
        session.end_reason = reason
        await self._streams.close_stream(session.stream, session.sid)
        task = session.task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _watch(self, session: ScriptedStagingSession) -> None:
        """Playback between viewers, idle reclaim and token expiry of one session."""
        with contextlib.suppress(asyncio.CancelledError):
            while not session.ended:
                await asyncio.sleep(_TICK)
                now = time.monotonic()
                session.player.catch_up(now)
                if now - session.last_call >= self.idle_timeout:
                    session.task = None
                    await self._end(session, "idle")
                elif time.time() >= session.expires_at:
                    session.task = None
                    await self._end(session, "token expired")


def _decode(data: bytes) -> np.ndarray:
    """Encoded audio → 48 kHz mono int16 (``ValueError`` when it is not audio)."""
    chunks: list[np.ndarray] = []
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise ValueError("no audio stream")
            resampler = av.AudioResampler(format="s16", layout="mono", rate=AUDIO_RATE)
            for frame in container.decode(container.streams.audio[0]):
                chunks += [f.to_ndarray().reshape(-1).copy() for f in resampler.resample(frame)]
            chunks += [f.to_ndarray().reshape(-1).copy() for f in resampler.resample(None)]
    except (av.FFmpegError, OSError) as exc:
        raise ValueError(str(exc)) from None
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
