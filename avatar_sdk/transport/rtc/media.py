"""MediaLanes: the two WebRTC channels of one server session, and the playable gate.

Built fresh for every server session (first connect and each cold reconnect); what must
outlive them (the uplink track with its mute state and source, the application-facing
received tracks) is passed in by the session.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from datetime import datetime

import aiohttp
from aiortc import RTCPeerConnection

from ...besteffort import best_effort
from ...clock import Clock
from ...config import DEFAULT_AUDIO_CODEC, AudioCodec, SessionConfig
from ...errors import AvatarError, ErrorCode
from ...logs import sdk_logger
from ...observe import Observer, observers_of
from ...wire import (
    AsrAnswer,
    AsrIceCandidate,
    In,
    InboundEvent,
    Out,
    StvNewSession,
    build_asr_init,
    build_asr_offer,
    build_stv_new_session,
)
from ..liveness.cadence import ReportCadence
from ..liveness.channel_down import ChannelDown, DownKind, downlink_down, peer_down
from ..liveness.video_stall import VideoAction, VideoStallRule
from ..net.hostguard import HostGuard
from .asr import AsrUplink, UplinkTrack
from .core.voice_buffer import VoiceBufferCounts
from .ice import TurnConfig, rtc_configuration
from .stv import FanoutTrack, StvDownlink, whep_http_session

log = sdk_logger(__name__)

#: Reference gate constants (PROTOCOL.md §1.3): settle after the first frame, hard cap.
GATE_SETTLE = 0.3
GATE_CAP = 6.0

#: A report's arrival is read from its stats timestamp (wall clock) and mapped onto the
#: session clock's monotonic line; an apparent age outside [0, this] means the wall clock
#: jumped (or the session runs on a fake clock): the report counts as arriving now.
MAX_REPORT_AGE = 1.0


Emit = Callable[[str, object], Awaitable[None]]
WaitEvent = Callable[[str], Awaitable[InboundEvent]]


class MediaLanes:
    """The ASR uplink and STV downlink of one server session."""

    def __init__(
        self,
        *,
        config: SessionConfig,
        uplink_track: UplinkTrack,
        outputs: dict[str, FanoutTrack],
        video: bool,
        allow_private: bool,
        clock: Clock,
        turn: TurnConfig | None = None,
        ssl_context: ssl.SSLContext | None = None,
        host_guard: HostGuard | None = None,
        audio_codec: AudioCodec = DEFAULT_AUDIO_CODEC,
        observer: Observer | None = None,
        voice_counts: VoiceBufferCounts | None = None,
    ) -> None:
        """``voice_counts``: where the downlinks' voice buffers count (the session's).
        ``observer``: told each peer's state changes and each WHEP exchange
        (``avatar_sdk.observe``). ``ssl_context``: how WHEP over https verifies the server (None:
        system CAs).
        ``host_guard``: checks and pins WHEP hosts when private hosts are not allowed
        (default: one on the system resolver; injectable for tests). ``audio_codec``:
        ``"loop"`` encodes and decodes audio on the event loop (see ``AvatarSession``).
        ``clock``: the session's. Every stamp the lanes keep (a peer's connection, a frame,
        a receiver report) is on its time line, because the media watchdog compares them
        with its own readings of that clock (:meth:`down_channels`)."""
        self._config = config
        self._observer = observers_of(observer)
        self._clock = clock
        self._uplink_track = uplink_track
        self._outputs = outputs
        self._video = video
        self._allow_private = allow_private
        self._turn = turn
        self._on_loop = audio_codec == "loop"
        self._voice_counts = voice_counts
        self._ssl = ssl_context
        self._guard = None if allow_private else host_guard or HostGuard()
        self.room_id: str | None = None
        self._closed = False
        self._candidate_tasks: set[asyncio.Task[None]] = set()
        self._http: aiohttp.ClientSession | None = None
        self.asr: AsrUplink | None = None
        self.stv: StvDownlink | None = None
        #: Peers a recovery took out of :attr:`stv` / :attr:`asr` whose close may still run
        #: (its recovery cancelled by close()): :meth:`close` awaits them, before it closes
        #: the HTTP session a downlink's DELETE uses.
        self._detached: set[StvDownlink | AsrUplink] = set()
        self.audio_only = False
        self.gate_waited: float | None = None
        self.gate_capped = False
        self.stv_url: str | None = None
        self._expect: dict[str, asyncio.Future[InboundEvent]] = {}
        #: The uplink's receiver reports: last arrival on the current peer, and the deadline
        #: that follows the cadence observed on this server (see transport.cadence).
        self.asr_cadence = ReportCadence(config.media_stall_timeout, clock=clock.monotonic)
        self.asr_reports = 0  # receiver reports seen on the uplink, all peers together
        self._asr_report_key: object = None
        self.peer_down = asyncio.Event()
        #: Keyframes the downlink's video rule asked for (all subscriptions together).
        self.video_keyframe_requests = 0

    @property
    def asr_report_at(self) -> float | None:
        """When the current uplink peer's last RTCP receiver report arrived (monotonic)."""
        return self.asr_cadence.last_report

    async def start_asr(self, *, emit: Emit, wait: WaitEvent, socket_id: str) -> None:
        """PROTOCOL.md §1.2: init → ready → offer → answer, then ICE connected."""
        await emit(Out.ASR_WEBRTC_INIT, build_asr_init(socket_id))
        await wait(In.ASR_WEBRTC_READY)
        self.asr = self._new_uplink()
        self._watch(self.asr.pc, "asr")
        sdp = await self.asr.create_offer()
        await emit(Out.ASR_WEBRTC_OFFER, build_asr_offer(sdp, is_reconnect=False))
        answer = await wait(In.ASR_WEBRTC_ANSWER)
        if not isinstance(answer, AsrAnswer):
            raise AvatarError(ErrorCode.ASR_FAILED, "unexpected answer event")
        await self.asr.accept_answer(answer.sdp)
        await self.asr.wait_connected(self._config.asr_timeout)
        self.asr_cadence.start(self.asr.connected_at)

    async def start_stv(
        self, stv: StvNewSession | None, deadline_left: Callable[[], float]
    ) -> None:
        """WHEP subscribe, then the playable gate: first decoded frame + settle, capped."""
        if stv is None or stv.audio_only or not stv.webrtc_url:
            self.audio_only = True
            return
        started = self._clock.monotonic()
        if self._http is None:
            self._http = whep_http_session(guard=self._guard, ssl_context=self._ssl)
        self.stv_url = stv.webrtc_url
        self.stv = self._new_downlink()
        await self.stv.subscribe(stv.webrtc_url, max(0.05, deadline_left()))
        kind = "video" if self._video else "audio"
        cap = min(GATE_CAP - (self._clock.monotonic() - started), deadline_left())
        if await self.stv.wait_first_frame(kind, cap):
            # Approving the instant a frame decodes still clips the greeting's first syllable.
            await asyncio.sleep(GATE_SETTLE)
        else:
            self.gate_capped = True
            log.info("playable gate capped after %.2fs without a %s frame", GATE_CAP, kind)
        self.gate_waited = self._clock.monotonic() - started

    # -- a link prepared unseen (renewal) -----------------------------------------------------
    def reveal(self, outputs: dict[str, FanoutTrack], uplink: UplinkTrack) -> None:
        """From the next frame on, the downlink feeds ``outputs`` and the uplink sends
        ``uplink`` (the session's): synchronous, so a swap of links is one step."""
        self._outputs.clear()
        self._outputs.update(outputs)
        self._uplink_track = uplink
        if self.stv is not None:
            self.stv.first_out_at = None
            self.stv.shown.clear()
        if self.asr is not None:
            self.asr.rebind(uplink)

    def hide(self, silent: UplinkTrack) -> None:
        """From the next frame on, the downlink's frames go nowhere and the uplink sends
        ``silent`` (the link being replaced, until it is closed)."""
        self._outputs.clear()
        self._uplink_track = silent
        if self.asr is not None:
            self.asr.rebind(silent)

    def _check_open(self) -> None:
        # A recovery still running on lanes that a cold reconnect or close() already
        # replaced must not build peers or HTTP sessions nobody will ever close.
        if self._closed:
            raise AvatarError(ErrorCode.CLOSED, "these media lanes were closed")

    def _new_uplink(self) -> AsrUplink:
        return AsrUplink(
            configuration=rtc_configuration(self._turn),
            track=self._uplink_track,
            clock=self._clock,
            encode_on_loop=self._on_loop,
            consent_deadline=self._config.media_stall_timeout,
        )

    def _new_downlink(self) -> StvDownlink:
        self._check_open()
        if self._http is None:
            self._http = whep_http_session(guard=self._guard, ssl_context=self._ssl)
        link = StvDownlink(
            http=self._http,
            configuration=rtc_configuration(self._turn, relay_only=True),
            allow_private=self._allow_private,
            video=self._video,
            outputs=self._outputs,
            clock=self._clock,
            guard=self._guard,
            decode_audio_on_loop=self._on_loop,
            observer=self._observer,
            voice_counts=self._voice_counts,
            video_rule=VideoStallRule(
                stall=self._config.video_stall_timeout,
                keyframe_wait=self._config.video_keyframe_wait,
                audio_stall=self._config.media_stall_timeout,
            ),
        )
        self._watch(link.pc, "stv")
        return link

    def _watch(self, pc: RTCPeerConnection, lane: str) -> None:
        def on_state() -> None:
            state = str(pc.connectionState)
            self._observer.media_state(lane, state)
            if state in ("failed", "closed"):
                self.peer_down.set()

        pc.on("connectionstatechange", on_state)

    # -- liveness (facts for the machine) ------------------------------------------------------
    async def wait_peer_down(self, timeout: float) -> bool:
        """Sleep up to ``timeout``; return early (True) once a peer of these lanes went
        ``failed`` or ``closed`` since the last call (aiortc's ``connectionstatechange``).

        For a watchdog that would otherwise sleep a fixed tick: a peer that fails outright
        is then looked at at once instead of up to one tick later. Closing a peer on
        purpose (a recovery replacing it, ``close()``) wakes it too: harmless, the caller
        re-reads :meth:`down_channels`.
        """
        try:
            async with asyncio.timeout(timeout):
                await self.peer_down.wait()
        except TimeoutError:
            return False
        self.peer_down.clear()
        return True

    async def poll_asr_reports(self) -> None:
        """Note when the server last sent an RTCP receiver report for our audio.

        Reports are the ongoing proof that our RTP reaches the server (ICE consent,
        :mod:`.consent`, proves only that the path answers); their age is judged against
        the cadence observed on this server (:mod:`.cadence`). The arrival time is the
        report's own stats timestamp, not the time of this poll, so the observed gaps are
        not blurred by the polling period.
        """
        asr = self.asr
        if asr is None or asr.pc.connectionState != "connected":
            return
        try:
            report = await asr.pc.getStats()
        except Exception as exc:
            log.debug("uplink stats unavailable: %s: %s", type(exc).__name__, exc)
            return
        for item in report.values():
            if getattr(item, "type", None) == "remote-inbound-rtp":
                stamp = getattr(item, "timestamp", None)
                key = (stamp, getattr(item, "packetsReceived", None))
                if key != self._asr_report_key:
                    self._asr_report_key = key
                    self.asr_cadence.observe(_arrival(stamp, self._clock))
                    self.asr_reports += 1

    def down_channels(
        self, now: float, stall_timeout: float, watching_since: float | None = None
    ) -> dict[str, ChannelDown]:
        """Channels that are dead now, with the verdict (empty when all is well).

        The uplink is judged by its state, by ICE consent from its first moment (its path
        stops answering: :mod:`.consent`) and, once the server has reported twice, by its
        receiver reports against their cadence (:mod:`.cadence`); the downlink by its state
        and its silence (:func:`.channel_down.downlink_down`).

        Silence is only counted from ``watching_since`` (when the session last became
        usable), never from before it: time spent connecting or recovering is not a stall.
        """
        down: dict[str, ChannelDown] = {}
        asr = self.asr
        if asr is not None:
            state = asr.pc.connectionState
            cadence = self.asr_cadence
            cadence.floor = stall_timeout
            consent = asr.consent
            consent.deadline = stall_timeout
            dead = peer_down("asr", state)
            if dead is not None:
                down["asr"] = dead
            elif state == "connected" and consent.is_overdue(now, since=watching_since):
                # From the peer's first moment, whether or not the server reports at all.
                quiet = consent.silence(now, since=watching_since) or 0.0
                down["asr"] = ChannelDown(
                    DownKind.NO_CONSENT,
                    f"no ICE consent answer for {quiet:.1f}s (deadline {consent.deadline:.1f}s)",
                )
            elif state == "connected" and cadence.is_overdue(now, since=watching_since):
                # The path answers but the server's reports stopped (RTP lost on the way).
                quiet = cadence.silence(now, since=watching_since) or 0.0
                down["asr"] = ChannelDown(
                    DownKind.NO_RECEIVER_REPORT,
                    f"no receiver report for {quiet:.1f}s "
                    f"(deadline {cadence.deadline() or 0.0:.1f}s)",
                )
        stv = self.stv
        if stv is not None:
            # A downlink that never delivered a frame counts from its subscription.
            verdict = downlink_down(
                stv.pc.connectionState,
                now,
                stall_timeout,
                last_media_at=stv.last_media_at,
                subscribed_at=stv.subscribed_at,
                watching_since=watching_since,
            )
            if verdict is not None:
                down["stv"] = verdict
        return down

    async def judge_video(self, now: float, watching_since: float | None) -> str | None:
        """The downlink's video rule (:mod:`.video_stall`), looked at once: no video frame
        for ``video_stall_timeout`` while the voice flows asks for a keyframe (a PLI, sent
        here); still none ``video_keyframe_wait`` later returns the reason to re-subscribe
        (None otherwise). Only for a connected downlink that receives video; silence counts
        from ``watching_since`` as in :meth:`down_channels`."""
        stv = self.stv
        if stv is None or stv.video_rule is None or stv.pc.connectionState != "connected":
            return None
        rule = stv.video_rule
        action = rule.judge(
            now,
            video=self._video,
            last_video=stv.last_video_at,
            last_audio=stv.last_decoded_at.get("audio"),
            since=watching_since,
        )
        if action is VideoAction.KEYFRAME:
            self.video_keyframe_requests += 1
            sent = await stv.request_keyframe()
            log.info(
                "no video for %.1fs while the voice flows: keyframe asked for (%d PLI)",
                rule.silence or 0.0,
                sent,
            )
            return None
        if action is VideoAction.RESUBSCRIBE:
            return rule.reason(now)
        return None

    # -- in-place recovery (tier 2) -------------------------------------------------------------
    def _expect_event(self, name: str) -> asyncio.Future[InboundEvent]:
        fut: asyncio.Future[InboundEvent] = asyncio.get_running_loop().create_future()
        old = self._expect.pop(name, None)
        if old is not None and not old.done():
            old.cancel()
        self._expect[name] = fut
        return fut

    async def _await_expected(
        self, fut: asyncio.Future[InboundEvent], timeout: float, what: str, code: ErrorCode
    ) -> InboundEvent:
        try:
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            raise AvatarError(code, f"no {what} within {timeout:.3g}s") from None

    async def recover_stv(self, emit: Emit, timeout: float) -> str:
        """WHEP re-subscribe: DELETE the old resource, POST again, verified by a new frame.

        A 404 means the server's STV session is gone: ask for one fresh ``stvNewSession``
        on the live socket and try its URL once; a second failure is ``session_gone``.
        """
        if self.stv_url is None:
            raise AvatarError(ErrorCode.SESSION_GONE, "no STV session to re-subscribe to")
        started = self._clock.monotonic()
        old, self.stv = self.stv, None
        if old is not None:
            # Still the lanes' until closed: a cancel of this recovery (close() of the
            # session) must not leave its DELETE unsent and its peer open, nobody's.
            self._detached.add(old)
            await old.close(min(1.0, timeout))
            self._detached.discard(old)
        url = self.stv_url
        for attempt in (1, 2):
            left = max(0.05, timeout - (self._clock.monotonic() - started))
            link = self._new_downlink()
            self.stv = link
            try:
                await link.subscribe(url, left)
            except AvatarError as error:
                await link.close(min(1.0, left))
                self.stv = None
                if error.code is not ErrorCode.SESSION_GONE or attempt == 2:
                    raise
                fresh = self._expect_event(In.STV_NEW_SESSION)
                await emit(Out.STV_NEW_SESSION, build_stv_new_session(self.room_id or ""))
                event = await self._await_expected(
                    fresh, left, "stvNewSession", ErrorCode.SESSION_GONE
                )
                if not isinstance(event, StvNewSession) or not event.webrtc_url:
                    raise AvatarError(
                        ErrorCode.SESSION_GONE, "the new STV session has no URL"
                    ) from None
                url = self.stv_url = event.webrtc_url
                continue
            kind = "video" if self._video else "audio"
            if not await link.wait_first_frame(
                kind, max(0.05, timeout - (self._clock.monotonic() - started))
            ):
                raise AvatarError(ErrorCode.MEDIA_FAILED, "re-subscribed but no frame arrived")
            return "whep_resubscribe"
        raise AvatarError(ErrorCode.SESSION_GONE, "STV session gone")  # pragma: no cover

    async def recover_asr(self, emit: Emit, timeout: float) -> str:
        """A fresh uplink peer renegotiated over the live socket (``is_reconnect: true``),
        same track and mute state.

        Recovered once the new peer's ICE and DTLS are connected and its sender has sent
        RTP: the server's first receiver report would come 0.5-1.5 s later (aiortc) or
        several seconds later (other servers) and prove nothing more about the transport.
        The new peer is watched by ICE consent from its first moment and by its receiver
        reports once the server reports on it (``down_channels``).
        """
        started = self._clock.monotonic()
        old, self.asr = self.asr, None
        if old is not None:
            self._detached.add(old)  # still the lanes' until closed, as in recover_stv
            await old.close()
            self._detached.discard(old)
        self.asr_cadence.start()  # no report-based verdict until the new peer reports
        self._asr_report_key = None
        self._check_open()
        asr = self._new_uplink()
        self._watch(asr.pc, "asr")
        self.asr = asr
        sdp = await asr.create_offer()
        if "a=candidate:" not in sdp:
            # aiortc gathers inside setLocalDescription: nothing now means nothing ever.
            raise AvatarError(ErrorCode.ASR_FAILED, "no local ICE candidate to offer")
        answer_fut = self._expect_event(In.ASR_WEBRTC_ANSWER)
        await emit(Out.ASR_WEBRTC_OFFER, build_asr_offer(sdp, is_reconnect=True))
        left = max(0.05, timeout - (self._clock.monotonic() - started))
        answer = await self._await_expected(
            answer_fut, left, "asr-webrtc-answer", ErrorCode.ASR_FAILED
        )
        if not isinstance(answer, AsrAnswer):
            raise AvatarError(ErrorCode.ASR_FAILED, "unexpected answer event")
        await asr.accept_answer(answer.sdp)
        # A peer stuck in new/checking is given up after ice_stuck_timeout, not the whole budget.
        left = max(0.05, timeout - (self._clock.monotonic() - started))
        await asr.wait_connected(min(left, self._config.ice_stuck_timeout))
        self.asr_cadence.start(asr.connected_at)
        await asr.wait_sending(max(0.05, timeout - (self._clock.monotonic() - started)))
        return "renegotiate"

    def on_event(self, event: InboundEvent) -> None:
        """Socket events that belong to the media lanes: answers a recovery waits for, and
        trickled ASR candidates."""
        name = (
            In.ASR_WEBRTC_ANSWER
            if isinstance(event, AsrAnswer)
            else In.STV_NEW_SESSION
            if isinstance(event, StvNewSession)
            else None
        )
        if name is not None:
            fut = self._expect.pop(name, None)
            if fut is not None and not fut.done():
                fut.set_result(event)
            return
        if isinstance(event, AsrIceCandidate) and self.asr is not None and not self._closed:
            task = asyncio.ensure_future(
                self.asr.add_remote_candidate(event.candidate, event.sdp_mline_index, event.sdp_mid)
            )
            self._candidate_tasks.add(task)  # owned: cancelled by close()
            task.add_done_callback(self._candidate_tasks.discard)

    @property
    def peer_count(self) -> int:
        return sum(
            1 for p in (self.asr, self.stv) if p is not None and p.pc.connectionState != "closed"
        )

    async def close(self, timeout: float) -> None:
        """Release both peers (WHEP DELETE first) and the HTTP session, within ``timeout``."""
        self._closed = True
        pending = list(self._candidate_tasks)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        for fut in self._expect.values():
            if not fut.done():
                fut.cancel()
        self._expect.clear()
        stv, asr, self.stv, self.asr = self.stv, self.asr, None, None
        detached, self._detached = self._detached, set()
        # A detached peer's close is already under way: this awaits the same one.
        jobs = [peer.close(timeout) for peer in detached]
        if stv is not None:
            jobs.append(stv.close(timeout))
        if asr is not None:
            jobs.append(asr.close(timeout))
        if jobs:
            # Each close is bounded and leaves no socket; this bound only caps the total.
            with best_effort("closing the media peers", log):
                async with asyncio.timeout(timeout + 0.2):
                    await asyncio.gather(*jobs, return_exceptions=True)
        if self._http is not None:
            with best_effort("closing the WHEP HTTP session", log):
                await self._http.close()
            self._http = None


def _arrival(stamp: object, clock: Clock) -> float:
    """The time on ``clock``'s monotonic line a stats entry was made, from its wall-clock
    ``timestamp`` (aiortc stamps ``remote-inbound-rtp`` when the report arrives); now if
    unknown. Its age is read on ``clock``'s wall line, so the system clock gives exactly the
    report's age and a fake one (whose wall is not aiortc's) an age clamped to now."""
    now = clock.monotonic()
    if not isinstance(stamp, datetime):
        return now
    age = clock.wall() - stamp.timestamp()
    return now - min(max(age, 0.0), MAX_REPORT_AGE)
