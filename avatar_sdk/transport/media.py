"""MediaLanes: the two WebRTC channels of one server session, and the playable gate.

Built fresh for every server session (first connect and each cold reconnect); what must
outlive them (the uplink track with its mute state and source, the application-facing
received tracks) is passed in by the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp

from ..config import SessionConfig
from ..errors import AvatarError, ErrorCode
from ..wire import (
    AsrAnswer,
    AsrIceCandidate,
    In,
    InboundEvent,
    Out,
    StvNewSession,
    build_asr_init,
    build_asr_offer,
)
from .asr import AsrUplink, UplinkTrack
from .ice import TurnConfig, rtc_configuration
from .stv import FanoutTrack, StvDownlink

log = logging.getLogger(__name__)

#: Reference gate constants (PROTOCOL.md §1.3): settle after the first frame, hard cap.
GATE_SETTLE = 0.3
GATE_CAP = 6.0

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
        turn: TurnConfig | None = None,
    ) -> None:
        self._config = config
        self._uplink_track = uplink_track
        self._outputs = outputs
        self._video = video
        self._allow_private = allow_private
        self._turn = turn
        self._http: aiohttp.ClientSession | None = None
        self.asr: AsrUplink | None = None
        self.stv: StvDownlink | None = None
        self.audio_only = False
        self.gate_waited: float | None = None
        self.gate_capped = False

    async def start_asr(self, *, emit: Emit, wait: WaitEvent, socket_id: str) -> None:
        """PROTOCOL.md §1.2: init → ready → offer → answer, then ICE connected."""
        await emit(Out.ASR_WEBRTC_INIT, build_asr_init(socket_id))
        await wait(In.ASR_WEBRTC_READY)
        self.asr = AsrUplink(configuration=rtc_configuration(self._turn), track=self._uplink_track)
        sdp = await self.asr.create_offer()
        await emit(Out.ASR_WEBRTC_OFFER, build_asr_offer(sdp, is_reconnect=False))
        answer = await wait(In.ASR_WEBRTC_ANSWER)
        if not isinstance(answer, AsrAnswer):
            raise AvatarError(ErrorCode.ASR_FAILED, "unexpected answer event")
        await self.asr.accept_answer(answer.sdp)
        await self.asr.wait_connected(self._config.asr_timeout)

    async def start_stv(
        self, stv: StvNewSession | None, deadline_left: Callable[[], float]
    ) -> None:
        """WHEP subscribe, then the playable gate: first decoded frame + settle, capped."""
        if stv is None or stv.audio_only or not stv.webrtc_url:
            self.audio_only = True
            return
        started = time.monotonic()
        if self._http is None:
            self._http = aiohttp.ClientSession()
        self.stv = StvDownlink(
            http=self._http,
            configuration=rtc_configuration(self._turn, relay_only=True),
            allow_private=self._allow_private,
            video=self._video,
            outputs=self._outputs,
        )
        await self.stv.subscribe(stv.webrtc_url, max(0.05, deadline_left()))
        kind = "video" if self._video else "audio"
        cap = min(GATE_CAP - (time.monotonic() - started), deadline_left())
        if await self.stv.wait_first_frame(kind, cap):
            # Approving the instant a frame decodes still clips the greeting's first syllable.
            await asyncio.sleep(GATE_SETTLE)
        else:
            self.gate_capped = True
            log.info("playable gate capped after %.2fs without a %s frame", GATE_CAP, kind)
        self.gate_waited = time.monotonic() - started

    def on_event(self, event: InboundEvent) -> None:
        """Socket events that belong to the media lanes (trickled ASR candidates)."""
        if isinstance(event, AsrIceCandidate) and self.asr is not None:
            task = asyncio.ensure_future(
                self.asr.add_remote_candidate(event.candidate, event.sdp_mline_index, event.sdp_mid)
            )
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    @property
    def peer_count(self) -> int:
        return sum(
            1 for p in (self.asr, self.stv) if p is not None and p.pc.connectionState != "closed"
        )

    async def close(self, timeout: float) -> None:
        """Release both peers (WHEP DELETE first) and the HTTP session, within ``timeout``."""
        stv, asr, self.stv, self.asr = self.stv, self.asr, None, None
        jobs = []
        if stv is not None:
            jobs.append(stv.close(timeout))
        if asr is not None:
            jobs.append(asr.close())
        if jobs:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), timeout + 0.2)
        if self._http is not None:
            with contextlib.suppress(Exception):
                await self._http.close()
            self._http = None
