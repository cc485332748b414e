"""Media through a real TURN relay in the network lab: one audio+video session whose media
can reach the media server only through coturn (``NetworkLab.turn_relay``), a turn
answered, then a control-socket drop and an ICE failure of each media channel, each
followed by media flowing again and one more turn answered. Shared by the lab's tests
(``tests/netlab/test_session_relay.py``: they assert on the figures) and the
``netlab_relay`` benchmark (:mod:`.netlab_relay`: it tables them, relay against direct).

Paths: ``direct`` (no relay, nothing blocked: the baseline), ``relay-udp`` (every UDP
packet between client and server dropped but the relay's port; the client reaches the relay
over UDP), ``relay-tcp`` (every UDP packet dropped; the client reaches the relay over TCP,
``TurnConfig(transport="tcp")``). Through the relay both channels use the relay-only policy
on the downlink, as the service's client does (PROTOCOL.md §1.4); the uplink's ``all``
policy has host candidates too, but the blocked UDP leaves it nothing but the relay.

Figures on ``time.monotonic()``: ``connect``: ``connect()`` called to returned;
``first_media``: ``connect()`` called to the first frames counted on both sides (downlink
frames at the SDK, uplink frames at the staging, sampled every 0.1 s); each ``recovery``:
the fault injected to the session's event that it recovered (``reconnected`` for the
socket, ``media_recovered`` for a channel); each ``media``: the fault injected to both
counts growing again with the session ``connected``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import aiohttp

from avatar_sdk import AvatarSession
from avatar_sdk.events.bus import Event
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import NetworkLab
from avatar_sdk.testing.leaks import LeakCheck
from avatar_sdk.testing.netlab.relay import TURN_PORT
from avatar_sdk.testing.process import StagingProcess

from .netlab_scenarios import LAB_CONFIG

Path = Literal["direct", "relay-udp", "relay-tcp"]
#: The faults of a run, in order: (name, control-API fault, its JSON arguments, the event
#: that says the session recovered from it).
FAULTS: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("drop_socket", "drop_socket", {}, "reconnected:socket"),
    ("ice_failure asr", "ice_failure", {"channel": "asr"}, "media_recovered:asr"),
    ("ice_failure stv", "ice_failure", {"channel": "stv"}, "media_recovered:stv"),
)
WATCHED = ("media_recovering", "media_recovered", "reconnecting", "reconnected", "gave_up")


class NoMedia(AssertionError):
    """Media did not flow (both ways) within the bound."""


@dataclass
class RelayFigures:
    """What one relay run measured (printed as one ``NETLAB-RELAY {json}`` line)."""

    path: str
    connect: float | None = None
    first_media: float | None = None
    #: Per fault: seconds from its injection to the session's recovered event, and to
    #: media flowing both ways again.
    recovery: dict[str, float] = field(default_factory=dict)
    media: dict[str, float] = field(default_factory=dict)
    turns_sent: int = 0
    turns_answered: int = 0
    #: Relay allocations coturn granted (0 on the direct path).
    allocations: int = 0
    #: Downlink frames counted by the SDK (current lane at each check, summed), uplink
    #: frames and video frames sent counted by the staging, at the end of the run.
    sdk_frames: int = 0
    staging_uplink_frames: int = 0
    staging_video_frames: int = 0
    events: list[str] = field(default_factory=list)
    final_state: str = ""
    error: str | None = None
    leaks: list[str] = field(default_factory=list)

    def line(self) -> str:
        return "NETLAB-RELAY " + json.dumps(asdict(self), default=str)


def sdk_frames(session: AvatarSession) -> int:
    """Downlink frames the session's current STV lane received (video as assembled from
    RTP: only the first frame is decoded when nobody watches), audio frames decoded."""
    lanes = session.media
    stv = lanes.stv if lanes is not None else None
    if stv is None:
        return 0
    video = stv.video_gate.assembled if stv.video_gate is not None else stv.frames["video"]
    return int(video) + int(stv.frames["audio"])


async def staging_media(staging: StagingProcess) -> tuple[int, int]:
    """(uplink frames over every client, video frames sent), counted by the staging."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{staging.control_prefix}/media") as resp,
    ):
        resp.raise_for_status()
        counts = await resp.json()
    uplink = sum(int(c["frames"]) for c in counts["asr"].values())
    return uplink, int(counts["video_frames_sent"])


async def inject(staging: StagingProcess, fault: str, arguments: dict[str, Any]) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{staging.control_prefix}/faults/{fault}", json=arguments) as resp,
    ):
        resp.raise_for_status()


async def media_flowing(
    session: AvatarSession, staging: StagingProcess, timeout: float, *, since: float
) -> float:
    """Wait until the session is ``connected`` with frames arriving on its downlink (at the
    SDK) and on its uplink (at the staging): both counts grew since the sample before
    (every 0.1 s). When that was first seen, in seconds after ``since``; :class:`NoMedia`
    past ``timeout``."""
    deadline = time.monotonic() + timeout
    down, (up, _) = sdk_frames(session), await staging_media(staging)
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        now_down, (now_up, _) = sdk_frames(session), await staging_media(staging)
        if session.state == "connected" and now_down > down and now_up > up:
            return time.monotonic() - since
        down, up = now_down, now_up
    raise NoMedia(
        f"no media both ways within {timeout:g} s (state {session.state}, downlink "
        f"{sdk_frames(session)} frames at the SDK)"
    )


async def ask(session: AvatarSession, figures: RelayFigures, timeout: float = 20.0) -> None:
    marker = f"relay-{figures.turns_sent + 1}-{secrets.token_hex(3)}"
    figures.turns_sent += 1
    reply = await session.ask(marker, timeout=timeout)
    if marker in reply.text:
        figures.turns_answered += 1


async def run_relay(
    path: Path = "relay-udp",
    *,
    relay: bool = True,
    media_timeout: float = 15.0,
    faults: tuple[tuple[str, str, dict[str, Any], str], ...] = FAULTS,
) -> RelayFigures:
    """One session on ``path`` (see the module's docstring) through its faults.
    ``relay=False`` keeps the path's blocking but starts no relay (the session then has no
    way to its media: :class:`NoMedia` or a connect error is recorded in ``error``)."""
    figures = RelayFigures(path if relay else f"{path} (no relay)")
    async with NetworkLab() as lab, lab.staging() as staging:
        turn_server = lab.turn_relay() if path != "direct" and relay else None
        async with turn_server if turn_server is not None else contextlib.nullcontext():
            if path == "relay-udp":
                await lab.blackhole(protocol="udp", except_port=TURN_PORT)
            elif path == "relay-tcp":
                await lab.blackhole(protocol="udp")
            config = None
            if path != "direct":
                transport: Literal["udp", "tcp"] = "tcp" if path == "relay-tcp" else "udp"
                config = (turn_server or lab.turn_relay()).config(transport)
            with lab.client():  # every socket the session opens: the client namespace
                check = LeakCheck()
                session = AvatarSession(
                    staging.url,
                    staging.token,
                    audio=ToneSource(),
                    allow_insecure_transport=True,
                    config=LAB_CONFIG,
                    turn=config,
                )
                events: list[str] = []
                seen: dict[str, asyncio.Event] = {}

                def note(event: Event) -> None:
                    detail = event.data.get("channel") or event.data.get("tier") or ""
                    key = f"{event.name}:{detail}" if detail else event.name
                    events.append(key)
                    seen.setdefault(key, asyncio.Event()).set()

                for name in WATCHED:
                    session.on(name, note)
                try:
                    started = time.monotonic()
                    await session.connect()
                    figures.connect = time.monotonic() - started
                    figures.first_media = await media_flowing(
                        session, staging, media_timeout, since=started
                    )
                    await ask(session, figures)
                    for name, fault, arguments, recovered in faults:
                        seen[recovered] = asyncio.Event()
                        at = time.monotonic()
                        await inject(staging, fault, arguments)
                        try:
                            await asyncio.wait_for(seen[recovered].wait(), media_timeout)
                        except TimeoutError:
                            raise NoMedia(f"no {recovered} after {name}") from None
                        figures.recovery[name] = time.monotonic() - at
                        figures.media[name] = await media_flowing(
                            session, staging, media_timeout, since=at
                        )
                        await ask(session, figures)
                    figures.sdk_frames = sdk_frames(session)
                    up, video = await staging_media(staging)
                    figures.staging_uplink_frames, figures.staging_video_frames = up, video
                except Exception as exc:  # recorded (NoMedia, a timeout...): the test judges
                    figures.error = f"{type(exc).__name__}: {exc}"
                finally:
                    figures.final_state = session.state
                    await session.close()
                    figures.events = events
                figures.leaks = await check.settle(5.0)
            if turn_server is not None:
                figures.allocations = turn_server.allocations
    return figures
