"""``load`` (a): CPU per session in steady state, per mode, SDK beside a bare aiortc client.

A mode is one entry of :data:`MODES`: a name, how an SDK session of that mode is built, and
how the bare client doing the same work is built (None: no bare counterpart). Add a mode by
adding a :class:`Mode` to the tuple; nothing else changes.

Each probe is one (mode, implementation) pair in a fresh ``spawn`` child of the benchmark:
K sessions connected one after the other (connect bursts are not measured), a settle
pause, then ``time.process_time()`` (every thread: aiortc encodes and decodes off the event
loop) over a steady window. The staging server runs in its own child process
(:class:`~benchmarks.media.ChildServer`), so its encoders are not on the client's clock;
its CPU over the same window is recorded, and so is the rest of the machine's load.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import aiohttp

from avatar_sdk import AvatarSession
from avatar_sdk.media import EncodedToneSource, FrameIterator, ToneSource

from .bare import BareClient
from .harness import describe_error
from .media import CONFIG, ChildServer, LoopLag, busy_cores, delta, machine_cpu, server_stats

#: The loop-lag window after each probe's CPU window (s).
LAG_WINDOW = 3.0

#: Either kind of client a probe holds open.
Client = AvatarSession | BareClient


@dataclass(frozen=True)
class Mode:
    """One row of figure (a): what a session of this mode does, built two ways."""

    key: str
    label: str
    #: ``(url, token) -> session`` (not connected yet).
    sdk: Callable[[str, str], AvatarSession]
    #: ``(url, token) -> bare client doing the same work``; None: SDK only.
    bare: Callable[[str, str], BareClient] | None = None
    #: Issue 11's target for this mode, % of one core per session (information only).
    target_pct: float | None = None
    #: Received track kinds whose frames are counted (what the downlink must deliver).
    kinds: tuple[str, ...] = ()
    #: Said in the figure's note for this mode (e.g. how its bare client differs).
    note: str | None = None
    #: Received track kinds an SDK session's consumer reads (a ``FrameIterator`` each):
    #: watched media. The bare client reads every track it receives either way.
    watch: tuple[str, ...] = ()
    #: The floor for this work, % of one core per session (Opus encode + decode + SRTP on
    #: the loop, issue 23), where one is known; said beside the row.
    floor_pct: float | None = None


def _sdk(url: str, token: str, **options: Any) -> AvatarSession:
    return AvatarSession(url, token, allow_insecure_transport=True, config=CONFIG, **options)


def sdk_control(url: str, token: str) -> AvatarSession:
    return _sdk(url, token, media=False)


def sdk_audio_pcm(url: str, token: str) -> AvatarSession:
    return _sdk(url, token, audio=ToneSource(), video=False)


def sdk_audio_pcm_thread(url: str, token: str) -> AvatarSession:
    return _sdk(url, token, audio=ToneSource(), video=False, audio_codec="thread")


def sdk_audio_encoded(url: str, token: str) -> AvatarSession:
    return _sdk(url, token, audio=EncodedToneSource(), video=False)


def sdk_av(url: str, token: str) -> AvatarSession:
    return _sdk(url, token, audio=ToneSource(), video=True)


def bare_control(url: str, token: str) -> BareClient:
    return BareClient(url, token, audio=None, media=False)


def bare_audio_pcm(url: str, token: str) -> BareClient:
    return BareClient(url, token, audio=ToneSource(), video=False)


def bare_audio_encoded(url: str, token: str) -> BareClient:
    return BareClient(url, token, audio=EncodedToneSource(), video=False)


def bare_av(url: str, token: str) -> BareClient:
    return BareClient(url, token, audio=ToneSource(), video=True)


#: The modes, in report order: a new mode is one more entry.
MODES: tuple[Mode, ...] = (
    Mode("control", "control-only", sdk_control, bare_control),
    Mode(
        "audio_pcm",
        "audio-only, PCM tone uplink",
        sdk_audio_pcm,
        bare_audio_pcm,
        target_pct=3.0,
        kinds=("audio",),
        note=(
            "the SDK's default, audio_codec='loop'; nobody reads the SDK session's voice, so "
            "it decodes only its first frame (the voice on demand, a bot that does not listen); "
            "bare aiortc codes in its worker threads and reads every frame"
        ),
        floor_pct=1.5,
    ),
    Mode(
        "audio_pcm_heard",
        "audio-only, PCM tone uplink, voice heard",
        sdk_audio_pcm,
        bare_audio_pcm,
        target_pct=3.0,
        kinds=("audio",),
        watch=("audio",),
        note=(
            "the SDK's default with a FrameIterator per session reading the voice (a voice "
            "app): every voice frame decoded on the loop, as the bare client decodes it"
        ),
        floor_pct=1.5,
    ),
    Mode(
        "audio_pcm_thread",
        "audio-only, PCM tone uplink, audio_codec='thread'",
        sdk_audio_pcm_thread,
        bare_audio_pcm,
        target_pct=3.0,
        kinds=("audio",),
        note=(
            "the former default: encode and decode in aiortc's worker threads, as the bare "
            "client does"
        ),
        floor_pct=1.5,
    ),
    Mode(
        "audio_encoded",
        "audio-only, pre-encoded uplink",
        sdk_audio_encoded,
        bare_audio_encoded,
        target_pct=1.5,
        kinds=("audio",),
        floor_pct=0.4,
    ),
    Mode(
        "av_watched",
        "audio+video, PCM tone uplink, video watched",
        sdk_av,
        bare_av,
        target_pct=5.0,
        kinds=("audio", "video"),
        watch=("video",),
        note=(
            "a FrameIterator per SDK session reads the video; the bare client reads it too; "
            "floor: audio's 1.5% plus the staging pattern's H264 decode (0.065 ms a 320x240 "
            "frame, 0.13% of a core at 20 fps, measured), video RTP receive not counted"
        ),
        floor_pct=1.65,
    ),
    Mode(
        "av_unwatched",
        "audio+video, PCM tone uplink, nobody watching the video",
        sdk_av,
        bare_av,
        kinds=("audio", "video_assembled"),
        note=(
            "the SDK decodes only the first video frame (video_assembled: frames received "
            "from RTP, decoded or not); bare aiortc cannot skip decoding, so its client "
            "decodes and reads every frame as in av_watched"
        ),
        floor_pct=1.5,
    ),
)


def mode(key: str) -> Mode:
    for candidate in MODES:
        if candidate.key == key:
            return candidate
    raise KeyError(f"unknown load mode {key!r}")


# --------------------------------------------------------------------------- in the child


def _received(clients: Sequence[Client], kind: str) -> int:
    """Frames of ``kind`` received; ``video_assembled``: video frames assembled from RTP,
    decoded or not (the bare client decodes them all)."""
    total = 0
    for client in clients:
        if isinstance(client, BareClient):
            total += client.frames.get(kind.removesuffix("_assembled"), 0)
        elif client.media is not None and client.media.stv is not None:
            stv = client.media.stv
            if kind == "video_assembled":
                total += stv.video_gate.assembled if stv.video_gate is not None else 0
            else:
                total += stv.frames.get(kind, 0)
    return total


async def _watch(track: Any) -> None:
    """A consumer of a received track: reads every frame, as an application showing it."""
    async with FrameIterator(track, max_queue=4) as frames:
        async for _frame in frames:
            pass


async def _sent(clients: Sequence[Client]) -> int:
    total = 0
    for client in clients:
        if isinstance(client, BareClient):
            total += await client.packets_sent()
        elif client.media is not None and client.media.asr is not None:
            total += await client.media.asr.packets_sent()
    return total


async def _close(client: Client) -> None:
    await client.close()


@dataclass(frozen=True)
class ProbeArgs:
    """One probe: ``sessions`` clients of mode ``key`` built by ``impl`` ("sdk" or "bare")."""

    url: str
    token: str
    key: str
    impl: str
    sessions: int
    settle: float
    window: float


async def _probe(args: ProbeArgs) -> dict[str, Any]:
    """Open the probe's clients one after the other, then measure a steady window."""
    url, token, key, impl, count = args.url, args.token, args.key, args.impl, args.sessions
    settle, window = args.settle, args.window
    spec = mode(key)
    build = spec.sdk if impl == "sdk" else spec.bare
    if build is None:
        raise ValueError(f"mode {key} has no {impl} client")
    clients: list[Client] = []
    watchers: list[asyncio.Task[None]] = []
    async with aiohttp.ClientSession(base_url=url) as http:
        try:
            for _ in range(count):  # one after the other: connect bursts are not measured
                client = build(url, token)
                clients.append(client)
                await asyncio.wait_for(client.connect(), CONFIG.overall_connect_timeout)
                if isinstance(client, AvatarSession):
                    for kind in spec.watch:
                        track = client.avatar_video if kind == "video" else client.avatar_audio
                        watchers.append(asyncio.ensure_future(_watch(track)))
            await asyncio.sleep(settle)
            frames_before = {k: _received(clients, k) for k in spec.kinds}
            sent_before = await _sent(clients)
            server_before = await server_stats(http)
            machine_before = machine_cpu()
            cpu_before = time.process_time()
            started = time.monotonic()
            await asyncio.sleep(window)
            elapsed = time.monotonic() - started
            cpu = time.process_time() - cpu_before
            machine = busy_cores(machine_before, machine_cpu())
            server = delta(await server_stats(http), server_before)
            sent = await _sent(clients) - sent_before
            frames = {k: _received(clients, k) - frames_before[k] for k in spec.kinds}
            # The loop's lag in a window of its own: the ticker's 50 wake-ups a second cost
            # more than a session's audio on a VM (figure ``wakeups``), so they stay out of
            # the CPU window above.
            lag = LoopLag()
            lag.start()
            await asyncio.sleep(LAG_WINDOW)
            lags = await lag.stop()
        finally:
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
            await asyncio.gather(*(_close(c) for c in clients), return_exceptions=True)
    return {
        "loop_lag_ms": lags.scaled(1000.0).as_json("ms") if lags is not None else None,
        "loop_lag_p99_ms": 1000.0 * _p99(lag.lags),
        "loadavg_1m": os.getloadavg()[0],
        "mode": key,
        "impl": impl,
        "sessions": count,
        "window_s": elapsed,
        "client_cpu_s": cpu,
        "server_cpu_s": server["cpu"],
        "machine_busy_cores": machine,
        "other_processes_cores": machine - (cpu + server["cpu"]) / elapsed,
        "uplink_packets_per_session_per_s": sent / count / elapsed,
        "frames_per_session_per_s": {k: v / count / elapsed for k, v in frames.items()},
    }


def _p99(values: Sequence[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def probe_in_child(conn: Connection, args: ProbeArgs) -> None:
    """Child-process entry point of one probe; the result (or ``{"error"}``) goes to ``conn``."""
    logging.getLogger("engineio.client").setLevel(logging.ERROR)  # close chatter
    try:
        conn.send(asyncio.run(_probe(args)))
    except Exception as exc:
        conn.send({"error": describe_error(exc)})


async def run_child(
    target: Callable[..., None], args: tuple[Any, ...], timeout: float, *, daemon: bool = True
) -> Any:
    """Run ``target(conn, *args)`` in a fresh ``spawn`` process; its one message back.
    ``daemon=False`` for a child that starts processes of its own (a daemon may not)."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=target, args=(child, *args), daemon=daemon)
    process.start()
    child.close()
    loop = asyncio.get_running_loop()
    try:
        if not await loop.run_in_executor(None, parent.poll, timeout):
            raise RuntimeError(f"child {target.__name__} gave no result in {timeout:.0f} s")
        return parent.recv()
    finally:
        await loop.run_in_executor(None, process.join, 10.0)
        if process.is_alive():
            process.terminate()
            await loop.run_in_executor(None, process.join, 2.0)
        parent.close()


async def probe(
    server: ChildServer, key: str, impl: str, *, count: int, settle: float, window: float
) -> dict[str, Any]:
    """One probe in its own child process; the server is idle again when it returns."""
    args = ProbeArgs(server.url, server.token, key, impl, count, settle, window)
    timeout = 60.0 + 10.0 * count + window
    result: dict[str, Any] = await run_child(probe_in_child, (args,), timeout)
    if "error" in result:
        raise RuntimeError(f"{key}/{impl} x{count} probe failed: {result['error']}")
    result["server_left"] = await server.wait_idle()
    return result


def probe_order(modes: Sequence[Mode], rounds: int) -> list[tuple[Mode, str, int]]:
    """(mode, client, round) in ABBA order per mode: SDK then bare, then bare then SDK, so
    a drift in the machine's load weighs on both clients alike."""
    order: list[tuple[Mode, str, int]] = []
    for spec in modes:
        impls = ("sdk", "bare") if spec.bare is not None else ("sdk",)
        for index in range(rounds):
            for impl in impls if index % 2 == 0 else impls[::-1]:
                order.append((spec, impl, index))
    return order


async def probes(
    server: ChildServer, count: int, settle: float, window: float, *, rounds: int = 1
) -> list[dict[str, Any]]:
    """Every mode, both clients, ``rounds`` times; a failed probe is recorded with its
    error, not raised."""
    out: list[dict[str, Any]] = []
    for spec, impl, index in probe_order(MODES, rounds):
        try:
            result = await probe(server, spec.key, impl, count=count, settle=settle, window=window)
        except Exception as exc:
            result = {"mode": spec.key, "impl": impl, "error": describe_error(exc)}
        out.append({**result, "round": index})
    return out
