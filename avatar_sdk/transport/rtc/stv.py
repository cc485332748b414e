"""StvDownlink: the avatar's video and voice (aiortc, receive-only, WHEP over aiohttp).

A pump task per received track reads every decoded frame (aiortc queues frames without
bound when nobody reads), records liveness, and fans frames out to :class:`FanoutTrack`
proxies. The proxies belong to the session, not to one subscription, so an application
reading ``session.avatar_video`` keeps reading across re-subscribes.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin

import aiohttp
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from ...clock import SYSTEM_CLOCK, Clock
from ...errors import AvatarError, ErrorCode
from ...logs import sdk_logger
from ...observe import HttpExchange, Observer, observers_of
from ...release_once import ReleaseOnce, mark_retrieved
from ..liveness.video_stall import VideoStallRule
from ..net.hostguard import HostGuard, host_of, refusal_in, spelled_private
from ..net.tls import connector, tls_error
from .aiortc_patches import loop_decode, video_demand, video_repair
from .aiortc_patches import voice_buffer as voice_buffer_patch
from .core.av_sync import PresentationTimeline
from .core.voice_buffer import VoiceBufferCounts
from .ice import apply_answer, close_peer, set_local_description
from .presentation import Presenter

log = sdk_logger(__name__)

#: WHEP statuses and what they mean (PROTOCOL.md §1.3).
_WHEP_HINTS = {
    404: "no active STV session (NO_ACTIVE_SESSION)",
    409: "the stream already has a viewer",
    415: "wrong content type (must be application/sdp)",
}


#: Redirect statuses: a WHEP request never follows one (its target was never checked).
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: The share of ``close(timeout)`` an in-flight WHEP POST may still take: its DELETE, one
#: request on a connection already open, needs far less than the rest.
POST_SHARE_AT_CLOSE = 0.8


def is_private_host(url: str) -> bool:
    """True when the host of ``url``, as spelled, is a local name or a non-public address
    (any numeric form: ``0x7f000001`` is 127.0.0.1). Names are not resolved here: the
    WHEP requests themselves are guarded at connect time (:class:`HostGuard`)."""
    return spelled_private(host_of(url)) is not None


def whep_http_session(
    *, guard: HostGuard | None, ssl_context: ssl.SSLContext | None
) -> aiohttp.ClientSession:
    """The HTTP session of a session's WHEP requests: TLS verified with ``ssl_context``,
    and, with a ``guard``, connections only to the addresses it checked (DNS asked once)."""
    if guard is None:
        return aiohttp.ClientSession(connector=connector(ssl_context))
    # aiohttp's DNS cache is off: a re-subscribe checks (and pins) the host afresh.
    return aiohttp.ClientSession(
        connector=connector(ssl_context, resolver=guard.resolver, use_dns_cache=False)
    )


class FanoutTrack(MediaStreamTrack):
    """A received track as the application sees it: bounded, drops the oldest frames.

    It also tells the downlink whether anybody watches it (:attr:`watched`): the video is
    decoded only while somebody does (:mod:`.video_demand`), and so is the voice when it is
    decoded on the loop (:mod:`.loop_decode`).

    With a ``timeline`` (a session's two tracks share one), each frame's ``pts`` (in its
    ``time_base``) is its presentation time on it, one timeline for both tracks, and a
    video frame is handed on with the voice of its instant (:mod:`.presentation`).
    """

    def __init__(
        self, kind: str, max_queue: int = 30, *, timeline: PresentationTimeline | None = None
    ) -> None:
        super().__init__()
        self.kind = kind
        #: The presentation timeline its frames are stamped on (shared with its sibling).
        self.timeline = timeline
        self._frames: deque[Any] = deque(maxlen=max_queue)
        self._waiter: asyncio.Future[None] | None = None
        self.dropped = 0
        self.received = 0
        self._read_ever = False
        self._unread = 0  # frames pushed since the last recv()
        self._paused = False
        #: Told of every frame pushed, before any consumer reads it (the session's reply
        #: timing: the first audible frame of an answer); must be cheap and never raise.
        self.on_frame: Callable[[Any], None] | None = None
        #: Whether ``on_frame`` wants frames right now (None: always, while it is set): the
        #: reply timing listens only while a reply is awaited, and the voice is decoded
        #: only while somebody listens (:mod:`.loop_decode`).
        self.tap_wants: Callable[[], bool] | None = None

    @property
    def watched(self) -> bool:
        """Whether a consumer reads this track: a ``recv()`` is waiting, or one was made
        fewer than ``max_queue`` frames ago (a reader that let its whole buffer fill up
        without reading is gone), or an ``on_frame`` tap is set."""
        if self.on_frame is not None and (self.tap_wants is None or self.tap_wants()):
            return True
        if self._waiter is not None and not self._waiter.done():
            return True
        return self._read_ever and self._unread < (self._frames.maxlen or 0)

    def pause(self) -> None:
        """The downlink stopped decoding this track (nobody watched it): the frames
        buffered so far are stale, and the next ``recv()`` waits for fresh ones."""
        self._paused = True

    def push(self, frame: Any) -> None:
        if self.readyState != "live":
            return
        self.received += 1
        self._unread += 1
        if self.on_frame is not None:
            self.on_frame(frame)
        if len(self._frames) == self._frames.maxlen:
            self.dropped += 1
        self._frames.append(frame)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def recv(self) -> Any:
        self._read_ever = True
        self._unread = 0
        if self._paused:
            self._paused = False
            self._frames.clear()
        while not self._frames:
            if self.readyState != "live":
                raise MediaStreamError
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._frames.popleft()

    def stop(self) -> None:
        super().stop()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class StvDownlink:
    """One WHEP subscription: a receive-only peer, its resource URL, its pumps."""

    def __init__(
        self,
        *,
        http: aiohttp.ClientSession,
        configuration: RTCConfiguration,
        allow_private: bool,
        video: bool,
        outputs: dict[str, FanoutTrack],
        clock: Clock,
        guard: HostGuard | None = None,
        decode_audio_on_loop: bool = False,
        decode_unwatched_video: bool = False,
        observer: Observer | None = None,
        video_rule: VideoStallRule | None = None,
        voice_counts: VoiceBufferCounts | None = None,
    ) -> None:
        """``voice_counts``: where the voice's receive buffer counts (:mod:`.voice_buffer`;
        shared by a session's subscriptions).
        ``observer``: told each WHEP exchange (``avatar_sdk.observe``).
        ``video_rule``: this subscription's video rule (:mod:`.video_stall`), judged by the
        media watchdog through :meth:`MediaLanes.judge_video
        <avatar_sdk.transport.rtc.media.MediaLanes.judge_video>`.
        ``guard``: the :class:`HostGuard` whose resolver ``http`` connects through (see
        :func:`whep_http_session`); without one, hosts are still resolved and checked
        before each request, but the connection is not pinned to what was checked.
        ``decode_audio_on_loop``: decode the voice on the event loop, not in aiortc's
        decoder thread (:mod:`.loop_decode`); video always keeps its thread.
        ``decode_unwatched_video``: decode every video frame, watched or not (by default
        only the first one and those a consumer of ``outputs["video"]`` reads are decoded:
        :mod:`.video_demand`). ``clock``: the
        session's; frame and subscription stamps are compared with its watchdog's times."""
        self._http = http
        self._observer = observers_of(observer)
        self._clock = clock
        self._allow_private = allow_private
        self._guard = None if allow_private else guard or HostGuard()
        self._video = video
        self._outputs = outputs
        self.pc = RTCPeerConnection(configuration)
        #: Decodes the video only while it is watched (:mod:`.video_demand`).
        self.video_gate: video_demand.DemandQueue | None = None
        self.video_rule = video_rule
        self.video_receiver: Any = None
        #: Asks again for missing video packets, and skips one lost for good
        #: (:mod:`.video_repair`).
        self.video_repair: video_repair.VideoRepair | None = None
        if video:
            receiver = self.pc.addTransceiver("video", direction="recvonly").receiver
            self.video_receiver = receiver
            self.video_repair = video_repair.repair_video_reception(
                receiver, clock=clock.monotonic, on_skip=self._video_hole_skipped
            )
            shown = outputs.get("video")
            if shown is not None and not decode_unwatched_video:
                self.video_gate = video_demand.decode_video_on_demand(
                    receiver,
                    demand=lambda: shown.watched,
                    first_decoded=lambda: self.frames["video"] > 0,
                    clock=clock.monotonic,
                )
                self.video_gate.on_pause = shown.pause
        audio = self.pc.addTransceiver("audio", direction="recvonly")
        #: Holds the voice as long as the observed jitter needs, not aiortc's fixed 80 ms,
        #: and conceals a lost packet (:mod:`.voice_buffer`). Its schedule is the packets' real
        #: arrival (media time), never the session clock: under a FakeClock the voice would
        #: otherwise wait for the test to move time (the frames are stamped on the session
        #: clock as they are handed on, like every other).
        self.voice_buffer = voice_buffer_patch.buffer_voice(
            audio.receiver, clock=SYSTEM_CLOCK, counts=voice_counts
        )
        self.audio_decoder: loop_decode.LoopDecoder | None = None
        if decode_audio_on_loop:
            heard = outputs.get("audio")
            self.audio_decoder = loop_decode.decode_audio_on_loop(
                audio.receiver,
                # The first voice frame is always decoded (what a connect waits for).
                wanted=None
                if heard is None
                else lambda: heard.watched or self.frames["audio"] == 0,
                on_skipped=self._voice_arrived,
                on_pause=None if heard is None else heard.pause,
            )
        #: Stamps frames with presentation times, holds the video to its voice.
        self.presenter = Presenter(
            {"audio": audio.receiver}
            | ({"video": self.video_receiver} if self.video_receiver is not None else {})
        )
        self.pc.on("track", self._on_track)
        self.location: str | None = None
        self._posting: asyncio.Future[tuple[int, str, str | None]] | None = None
        self._deleted = False
        self._release_once = ReleaseOnce()
        self._pumps: set[asyncio.Task[None]] = set()
        self.frames: dict[str, int] = {"audio": 0, "video": 0}
        self.first_frame_at: dict[str, float] = {}
        self.last_frame_at: float | None = None
        #: When a frame of each kind was last decoded (session clock); the voice's also when
        #: it arrived undecoded because nobody listened (:meth:`_voice_arrived`).
        self.last_decoded_at: dict[str, float] = {}
        #: When a frame was last, and first, handed to an output (session clock): a link
        #: prepared unseen decodes frames that go nowhere until it is revealed.
        self.last_out_at: float | None = None
        self.first_out_at: float | None = None
        self.shown = asyncio.Event()
        self._first = {"audio": asyncio.Event(), "video": asyncio.Event()}
        self.subscribed_at: float | None = None

    @property
    def state(self) -> str:
        return str(self.pc.connectionState)

    @property
    def last_media_at(self) -> float | None:
        """When media last arrived: a decoded frame, or a video frame assembled from RTP
        whether decoded or not (liveness must not depend on anybody watching)."""
        marks = [m for m in (self.last_frame_at, self.last_assembled_at) if m is not None]
        return max(marks) if marks else None

    @property
    def last_video_at(self) -> float | None:
        """When video last arrived: a frame assembled from RTP (decoded or not) or decoded."""
        decoded = self.last_decoded_at.get("video")
        marks = [m for m in (decoded, self.last_assembled_at) if m is not None]
        return max(marks) if marks else None

    def _video_hole_skipped(self) -> None:
        if self.video_gate is not None:
            self.video_gate.await_keyframe()

    async def request_keyframe(self) -> int:
        """Ask the sender for a keyframe now (RTCP PLI); returns how many were sent."""
        if self.video_receiver is None:
            return 0
        return await video_demand.request_keyframe(self.video_receiver)

    @property
    def last_assembled_at(self) -> float | None:
        """When the video receiver last assembled a frame (None without the gate)."""
        return self.video_gate.assembled_at if self.video_gate is not None else None

    async def _check_host(self, url: str) -> None:
        """Refuse (``INSECURE_TRANSPORT``) a URL whose host is or resolves to a non-public
        address, unless private hosts are allowed; pins the checked addresses."""
        if self._guard is not None:
            await self._guard.check(url)

    async def subscribe(self, url: str, timeout: float) -> None:
        """WHEP: POST our offer, apply the 201 answer. Raises ``AvatarError`` on failure."""
        try:
            async with asyncio.timeout(timeout):
                await self._check_host(url)
        except TimeoutError:
            raise AvatarError(
                ErrorCode.CONNECT_TIMEOUT, f"WHEP host lookup unanswered in {timeout:.3g}s"
            ) from None
        offer = await self.pc.createOffer()
        await set_local_description(self.pc, offer)
        sdp = self.pc.localDescription.sdp
        # The POST runs in a task of its own, shielded: a close() that cancels this
        # subscribe lets it finish (within its timeout) and DELETEs what it created, since
        # the server may create the resource whether or not its answer is read.
        post = asyncio.ensure_future(self._post(url, sdp, timeout))
        post.add_done_callback(mark_retrieved)  # its subscribe may be gone: nobody else reads it
        self._posting = post
        try:
            status, body, location = await asyncio.shield(post)
        except TimeoutError:
            self._exchange("POST", url, None, sent=sdp, outcome="timeout")
            raise AvatarError(
                ErrorCode.CONNECT_TIMEOUT, f"WHEP POST unanswered in {timeout:.3g}s"
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            self._exchange("POST", url, None, sent=sdp, outcome="network_error")
            raise _request_error(exc, "WHEP POST") from None
        self._exchange("POST", url, status, sent=sdp, answer=body)
        if status in _REDIRECTS:
            # The host only, cut short: the rest of a hostile Location is not worth echoing.
            target = (host_of(urljoin(url, location)) if location else "") or "nowhere"
            target = target[:100]
            raise AvatarError(
                ErrorCode.MEDIA_FAILED,
                f"WHEP {status} redirect to {target} not followed"
                " (WHEP requests never follow redirects: use the final URL)",
            )
        if status == 404:
            raise AvatarError(ErrorCode.SESSION_GONE, "WHEP 404: " + _WHEP_HINTS[404])
        if not 200 <= status < 300:
            hint = _WHEP_HINTS.get(status, f"WHEP HTTP {status}")
            raise AvatarError(ErrorCode.MEDIA_FAILED, f"WHEP {status}: {hint}")
        await apply_answer(self.pc, body, ErrorCode.MEDIA_FAILED, "WHEP answer")
        self.subscribed_at = self._clock.monotonic()

    async def _post(self, url: str, sdp: str, timeout: float) -> tuple[int, str, str | None]:
        """The WHEP POST: (status, body, Location); a created resource is remembered in
        :attr:`location` here, so it is DELETEd even when nobody reads the answer."""
        async with asyncio.timeout(timeout):
            async with self._http.post(
                url,
                data=sdp.encode(),
                headers={"Content-Type": "application/sdp"},
                allow_redirects=False,
            ) as resp:
                body = await resp.text()
                status = resp.status
                location = resp.headers.get("Location")
            if location and 200 <= resp.status < 300:
                resolved = urljoin(url, location)
                # A resource on a host we refuse to talk to is never DELETEd either.
                await self._check_host(resolved)
                self.location = resolved
        return status, body, location

    def _exchange(
        self,
        method: str,
        url: str,
        status: int | None,
        *,
        sent: str | None = None,
        answer: str | None = None,
        outcome: str = "ok",
    ) -> None:
        if self._observer:
            exchange = HttpExchange("whep", method, url, status, sent, answer, outcome)
            self._observer.http_exchange(exchange)

    def _on_track(self, track: MediaStreamTrack) -> None:
        task = asyncio.ensure_future(self._pump(track))
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)

    def _voice_arrived(self) -> None:
        """A voice frame arrived that nobody listens to (not decoded): it counts for
        liveness and in ``frames`` as a decoded one would."""
        now = self._clock.monotonic()
        self.frames["audio"] += 1
        self.last_frame_at = now
        self.last_decoded_at["audio"] = now

    async def _pump(self, track: MediaStreamTrack) -> None:
        kind = track.kind
        outputs = self._outputs  # looked up per frame: a reveal or hide takes effect at once
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            now = self._clock.monotonic()
            self.frames[kind] = self.frames.get(kind, 0) + 1
            self.last_frame_at = now
            self.last_decoded_at[kind] = now
            if kind not in self.first_frame_at:
                self.first_frame_at[kind] = now
                self._first[kind].set()
            out = outputs.get(kind)
            if out is not None:
                self.presenter.hand_on(kind, frame, out)
                self.last_out_at = now
                if self.first_out_at is None:
                    self.first_out_at = now
                    self.shown.set()

    async def wait_first_frame(self, kind: str, timeout: float) -> bool:
        """True once a frame of ``kind`` was decoded, False after ``timeout``."""
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                await self._first[kind].wait()
        except TimeoutError:
            return False
        return True

    async def close(self, timeout: float = 1.0) -> None:
        """DELETE the WHEP resource (exactly once), close the peer, stop the pumps. A POST
        still in flight is let finish first, within :data:`POST_SHARE_AT_CLOSE` of
        ``timeout`` (the DELETE it makes necessary gets the rest): the resource it creates
        is DELETEd too. A POST slower than that is cancelled and logged: the server may
        hold what it made for it until it reaps it.

        The release runs as the downlink's own task, once: a caller cancelled meanwhile (a
        re-subscribe closing the old downlink when ``close()`` of the session cancels it)
        does not cut the DELETE or the peer's close short, and every later caller (the
        lanes' close) awaits the same release."""
        await self._release_once.run(lambda: self._release(timeout))

    async def _release(self, timeout: float) -> None:
        posting = self._posting
        if posting is not None and not posting.done():
            started = asyncio.get_running_loop().time()
            done, _ = await asyncio.wait({posting}, timeout=timeout * POST_SHARE_AT_CLOSE)
            if not done:
                log.warning(
                    "WHEP POST unanswered %.2gs into close: cancelled; the server may hold"
                    " the viewer it creates until it reaps it",
                    timeout * POST_SHARE_AT_CLOSE,
                )
                posting.cancel()
                await asyncio.wait({posting})
            spent = asyncio.get_running_loop().time() - started
            timeout = max(timeout * (1 - POST_SHARE_AT_CLOSE), timeout - spent)
        if self.location is not None and not self._deleted:
            self._deleted = True
            try:
                async with asyncio.timeout(timeout):
                    async with self._http.delete(self.location, allow_redirects=False) as resp:
                        self._exchange("DELETE", self.location, resp.status)
                        if resp.status >= 300:
                            log.info("WHEP DELETE answered %s", resp.status)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                self._exchange("DELETE", self.location, None, outcome=type(exc).__name__)
                log.info("WHEP DELETE failed: %s", type(exc).__name__)
        await close_peer(self.pc, timeout)
        self.voice_buffer.close()
        self.presenter.close()
        for task in list(self._pumps):
            task.cancel()
        if self._pumps:
            await asyncio.wait(set(self._pumps), timeout=timeout)


def _request_error(exc: BaseException, what: str) -> AvatarError:
    """The classified error of a failed WHEP request (a refused host, TLS, or the network)."""
    refused = refusal_in(exc)
    if refused is not None:
        return AvatarError(ErrorCode.INSECURE_TRANSPORT, str(refused))
    tls = tls_error(exc, what)
    if tls is not None:
        return tls
    return AvatarError(ErrorCode.MEDIA_FAILED, f"{what} failed ({type(exc).__name__})")
