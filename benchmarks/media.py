"""Figure 4: WebRTC media - first decoded avatar frame, client CPU and RSS, concurrency.

Every part runs against one staging server in a *child* process (a ``StagingServer`` with
a bench-only ``/bench/stats`` route: its CPU time and the frames its synthetic tracks
produced), so the server's H264/Opus encoders are not counted in the client's CPU clock.
Sessions send a ``ToneSource`` uplink, as a bot would. The machine's other load (``/proc/stat``
minus client and server) is recorded for every window: the numbers are only as clean as
the machine was quiet.

(a) first frame: N sequential audio+video sessions (one warm-up not counted). Wall times
    from a ``time.monotonic()`` taken just before ``connect()`` to the first decoded video
    frame (``session.media.stv.first_frame_at["video"]``) and to the ``connected`` event
    (``Event.at``). ``connected`` comes after the playable gate: first decoded frame, then
    a 0.3 s settle (``GATE_SETTLE``), then ``approvedPermissions``.
(b) CPU and RSS per session: audio-only (``video=False``) and audio+video, K = 1 and 4
    sessions, each (mode, K) in a fresh ``spawn`` subprocess of the benchmark so its memory
    figures start clean. CPU is ``time.process_time()`` (every thread: aiortc decodes and
    encodes off the event loop) over a steady-state window with all K sessions open;
    nobody reads the received tracks (the SDK's pumps still decode every frame). Peak RSS
    is the process's ``VmHWM`` (``/proc/self/status``): ``ru_maxrss`` survives ``exec`` on
    Linux, so a spawned child reports at least its parent's peak (it is recorded too).
(c) concurrent sessions per process: K audio+video (then audio-only) sessions in this
    process, K = 1, 2, 4, 8, 12, 16, 20, 24, connected in small concurrent batches. With
    all K connected, one consumer task per session reads ``avatar_video.recv()``
    (``avatar_audio`` for audio-only) for a window; a session is on time when it got at
    least 80% of the nominal frames (20 fps video, 50 frames/s Opus) and no gap between
    frames (window edges included) reached 0.5 s. The ramp stops at the first level where a
    session fails (or cannot connect) or when its time budget runs out; everything is
    closed between levels. The server's encoders share the same cores, so the level found
    is a lower bound for the client alone; the frames the server produced per session in
    the window tell whether the server or the client fell behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import multiprocessing
import os
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import aiohttp
from aiohttp import web

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.rtc.media import GATE_SETTLE

from .harness import describe_error, ms
from .stats import FigureResult, Row, Summary

TITLE = "media: first frame, CPU/RSS, concurrent sessions"

FIRST_FRAME_SESSIONS = 10
FIRST_FRAME_WARMUP = 1
CONNECT_TIMEOUT = 20.0
CONFIG = SessionConfig(overall_connect_timeout=CONNECT_TIMEOUT, close_timeout=2.0)

PROBE_MODES = ("audio", "av")
PROBE_SESSIONS = (1, 4)
PROBE_SETTLE = 1.0
PROBE_WINDOW = 5.0
PROBE_TIMEOUT = 60.0

RAMP_LEVELS = (1, 2, 4, 8, 12, 16, 20, 24)
RAMP_BATCH = 4
RAMP_SETTLE = 0.5
RAMP_WINDOW = 4.0
RAMP_BUDGET = 90.0  # both modes together
RAMP_AV_SHARE = 0.55  # of the budget the audio+video ramp may use before audio-only starts
ON_TIME_SHARE = 0.8
MAX_GAP = 0.5
NOMINAL_RATE = {"video": 20.0, "audio": 50.0}  # 320x240@20fps H264, 20 ms Opus frames
MODE_LABEL = {"av": "A/V", "audio": "audio-only"}
LAG_PERIOD = 0.02
OTHER_NOTICE = 0.1  # cores used by other processes worth a mention in a level's note
SERVER_START_TIMEOUT = 90.0  # a loaded machine imports aiortc slowly
IDLE_TIMEOUT = 5.0


# --------------------------------------------------------------------------- helpers


class BenchStagingServer(StagingServer):
    """The staging server plus one bench-only read-out: CPU time and media frames sent."""

    _lag: LoopLag | None = None
    _gc: GcPauses | None = None

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/bench/stats", self._bench_stats)
        app.router.add_post("/bench/lag", self._lag_start)
        app.router.add_delete("/bench/lag", self._lag_stop)

    async def _lag_start(self, request: web.Request) -> web.Response:
        """Start measuring this (the server's) event loop's lag, afresh."""
        if self._lag is not None:
            await self._lag.stop()
        self._lag = LoopLag(float(request.query.get("period", LAG_PERIOD)))
        self._lag.start()
        if self._gc is not None:
            self._gc.stop()
        self._gc = GcPauses()
        self._gc.start()
        if request.query.get("freeze") == "1":  # the live conversations' graphs, as the client
            gc.collect()
            gc.freeze()
        return web.json_response({})

    async def _lag_stop(self, request: web.Request) -> web.Response:
        """Stop measuring; the server loop's lag since the start (ms), ``{}`` if none."""
        lag, self._lag = self._lag, None
        pauses, self._gc = self._gc, None
        gc.unfreeze()
        summary = await lag.stop() if lag is not None else None
        out: dict[str, Any] = summary.scaled(1000.0).as_json("ms") if summary else {}
        if pauses is not None:
            out["gc"] = pauses.stop()
        return web.json_response(out)

    async def _bench_stats(self, request: web.Request) -> web.Response:
        viewers = list(self.media.viewers.values())
        return web.json_response(
            {
                "cpu": time.process_time(),
                "video_sent": sum(v.video.frames_sent for v in viewers),
                "audio_sent": sum(v.audio.frames_sent for v in viewers),
                "conversations": len(self.conversations),
            }
        )


async def _serve(conn: Connection, options: dict[str, Any]) -> None:
    async with BenchStagingServer(**options) as staging:
        conn.send((staging.url, staging.token))
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)


def serve_in_child(conn: Connection, options: dict[str, Any] | None = None) -> None:
    """Child-process entry point: run the bench staging server (``StagingServer`` keyword
    arguments in ``options``) until the parent says stop."""
    asyncio.run(_serve(conn, options or {}))


async def server_stats(http: aiohttp.ClientSession) -> dict[str, float]:
    """The child server's CPU time (s, every thread), frames sent and live conversations."""
    async with http.get("/bench/stats") as response:
        response.raise_for_status()
        return {key: float(value) for key, value in (await response.json()).items()}


async def server_lag_start(
    http: aiohttp.ClientSession, period: float = LAG_PERIOD, *, freeze_gc: bool = False
) -> None:
    """Start the bench staging server's own loop-lag ticker (see ``BenchStagingServer``);
    ``freeze_gc``: ``gc.freeze()`` the server's live objects until the stop."""
    params = {"period": str(period), "freeze": "1" if freeze_gc else "0"}
    async with http.post("/bench/lag", params=params) as response:
        response.raise_for_status()


async def server_lag_stop(http: aiohttp.ClientSession) -> dict[str, Any]:
    """Stop it: the server loop's lag summary since the start (ms; ``{}``: no sample)."""
    async with http.delete("/bench/lag") as response:
        response.raise_for_status()
        result: dict[str, Any] = await response.json()
        return result


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before[key] for key in after}


def memory_kb() -> dict[str, int]:
    """This process's memory in kB: ``VmHWM``/``VmRSS`` (Linux ``/proc``) and ``ru_maxrss``."""
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    found = {"ru_maxrss": usage // 1024 if sys.platform == "darwin" else usage}
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                found[key] = int(value.split()[0])
    return found


def machine_cpu() -> tuple[float, float] | None:
    """Busy and total CPU seconds of the whole machine so far (Linux ``/proc/stat``)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [float(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    ticks = float(os.sysconf("SC_CLK_TCK"))
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


def busy_cores(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float:
    """Cores the whole machine kept busy between two :func:`machine_cpu` readings (nan if
    unknown)."""
    if before is None or after is None or after[1] <= before[1]:
        return float("nan")
    cpus = os.cpu_count() or 1
    return (after[0] - before[0]) / (after[1] - before[1]) * cpus


def peak_kb(memory: dict[str, int]) -> int:
    """The peak RSS to use: ``VmHWM`` when known (clean across exec), else ``ru_maxrss``."""
    return memory.get("VmHWM", memory["ru_maxrss"])


def media_session(url: str, token: str, *, video: bool) -> AvatarSession:
    """A media session (``ToneSource`` uplink) against the local staging server."""
    return AvatarSession(
        url,
        token,
        audio=ToneSource(),
        video=video,
        allow_insecure_transport=True,
        config=CONFIG,
    )


def _median(values: Sequence[float]) -> float:
    return Summary.of(values).median if values else float("nan")


class ChildServer:
    """The staging server in a spawned child process (its CPU off this process's clock)."""

    def __init__(self, **options: Any) -> None:
        """``options``: ``StagingServer`` keyword arguments (e.g. ``event_spacing``)."""
        self.url = ""
        self.token = ""
        self._options = options
        self._context = multiprocessing.get_context("spawn")
        self._conn: Connection | None = None
        self._process: BaseProcess | None = None
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ChildServer:
        parent, child = self._context.Pipe()
        self._conn = parent
        self._process = self._context.Process(
            target=serve_in_child, args=(child, self._options), daemon=True
        )
        self._process.start()
        loop = asyncio.get_running_loop()
        try:
            if not await loop.run_in_executor(None, parent.poll, SERVER_START_TIMEOUT):
                raise RuntimeError(
                    f"the child staging server did not start in {SERVER_START_TIMEOUT} s"
                )
            self.url, self.token = parent.recv()
        except BaseException:
            await self.__aexit__()
            raise
        self._http = aiohttp.ClientSession(base_url=self.url)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send("stop")
        loop = asyncio.get_running_loop()
        if self._process is not None:
            await loop.run_in_executor(None, self._process.join, 5.0)
            if self._process.is_alive():
                self._process.terminate()
                await loop.run_in_executor(None, self._process.join, 2.0)

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            raise RuntimeError("the child server is not running")
        return self._http

    async def stats(self) -> dict[str, float]:
        return await server_stats(self._client())

    async def wait_idle(self, timeout: float = IDLE_TIMEOUT) -> int:
        """Wait until the server holds no conversation; return how many are left."""
        deadline = time.monotonic() + timeout
        left = int((await self.stats())["conversations"])
        while left and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            left = int((await self.stats())["conversations"])
        return left


async def close_all(sessions: Sequence[AvatarSession]) -> float:
    """Close every session concurrently; return the wall time it took."""
    started = time.monotonic()
    await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
    return time.monotonic() - started


# --------------------------------------------------------------------------- (a) first frame


@dataclass(frozen=True)
class FirstFrame:
    """One A/V connect, every time in seconds after the ``connect()`` call."""

    first_frame: float
    connected: float
    whep_answered: float
    gate_waited: float
    gate_capped: bool


async def _first_frame_once(server: ChildServer) -> FirstFrame:
    session = media_session(server.url, server.token, video=True)
    connected: list[float] = []
    session.on("connected", lambda event: connected.append(event.at))
    started = time.monotonic()
    try:
        await asyncio.wait_for(session.connect(), CONNECT_TIMEOUT)
        returned = time.monotonic()
        lanes = session.media
        if lanes is None or lanes.stv is None or lanes.stv.subscribed_at is None:
            raise RuntimeError("connect() returned without an STV downlink")
        first = lanes.stv.first_frame_at.get("video")
        if first is None:
            raise RuntimeError("connected without a decoded video frame (gate capped)")
        return FirstFrame(
            first_frame=first - started,
            connected=(connected[0] if connected else returned) - started,
            whep_answered=lanes.stv.subscribed_at - started,
            gate_waited=lanes.gate_waited or 0.0,
            gate_capped=lanes.gate_capped,
        )
    finally:
        await session.close()


async def _first_frame(server: ChildServer) -> tuple[list[FirstFrame], float]:
    """The samples, and the cores other processes kept busy meanwhile."""
    samples: list[FirstFrame] = []
    server_before = await server.stats()
    machine_before = machine_cpu()
    cpu_before = time.process_time()
    started = time.monotonic()
    for index in range(FIRST_FRAME_WARMUP + FIRST_FRAME_SESSIONS):
        sample = await _first_frame_once(server)
        await server.wait_idle()
        if index >= FIRST_FRAME_WARMUP:
            samples.append(sample)
    elapsed = time.monotonic() - started
    own = time.process_time() - cpu_before
    machine = busy_cores(machine_before, machine_cpu())
    served = delta(await server.stats(), server_before)
    return samples, machine - (own + served["cpu"]) / elapsed


# --------------------------------------------------------------------------- (b) CPU and RSS


async def _probe(url: str, token: str, mode: str, count: int) -> dict[str, Any]:
    """In a fresh process: open ``count`` sessions of ``mode``, measure a steady window."""
    video = mode == "av"
    gc.collect()
    baseline = memory_kb()
    sessions: list[AvatarSession] = []
    async with aiohttp.ClientSession(base_url=url) as http:
        try:
            for _ in range(count):  # one after the other: connect bursts are not measured
                session = media_session(url, token, video=video)
                sessions.append(session)
                await asyncio.wait_for(session.connect(), CONNECT_TIMEOUT)
            await asyncio.sleep(PROBE_SETTLE)
            kinds = ("audio", "video") if video else ("audio",)
            frames_before = {k: _frames(sessions, k) for k in kinds}
            server_before = await server_stats(http)
            usage_before = resource.getrusage(resource.RUSAGE_SELF)
            machine_before = machine_cpu()
            cpu_before = time.process_time()
            started = time.monotonic()
            await asyncio.sleep(PROBE_WINDOW)
            window = time.monotonic() - started
            cpu = time.process_time() - cpu_before
            machine = busy_cores(machine_before, machine_cpu())
            usage_after = resource.getrusage(resource.RUSAGE_SELF)
            server = delta(await server_stats(http), server_before)
            frames = {k: _frames(sessions, k) - frames_before[k] for k in kinds}
            peak = memory_kb()
        finally:
            await close_all(sessions)
    return {
        "mode": mode,
        "sessions": count,
        "window_s": window,
        "client_cpu_s": cpu,
        "client_user_s": usage_after.ru_utime - usage_before.ru_utime,
        "client_sys_s": usage_after.ru_stime - usage_before.ru_stime,
        "server_cpu_s": server["cpu"],
        "machine_busy_cores": machine,
        "other_processes_cores": machine - (cpu + server["cpu"]) / window,
        "frames_per_session_per_s": {k: v / count / window for k, v in frames.items()},
        "memory_baseline_kb": baseline,
        "memory_open_kb": peak,
    }


def _frames(sessions: Sequence[AvatarSession], kind: str) -> int:
    total = 0
    for session in sessions:
        lanes = session.media
        if lanes is not None and lanes.stv is not None:
            total += lanes.stv.frames.get(kind, 0)
    return total


def probe_in_child(conn: Connection, url: str, token: str, mode: str, count: int) -> None:
    """Child-process entry point of one (mode, K) CPU/RSS probe; the result goes to ``conn``."""
    try:
        conn.send(asyncio.run(_probe(url, token, mode, count)))
    except Exception as exc:
        conn.send({"error": describe_error(exc)})


async def _run_probe(server: ChildServer, mode: str, count: int) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    args = (child, server.url, server.token, mode, count)
    process = context.Process(target=probe_in_child, args=args, daemon=True)
    process.start()
    loop = asyncio.get_running_loop()
    try:
        if not await loop.run_in_executor(None, parent.poll, PROBE_TIMEOUT):
            raise RuntimeError(f"{mode} x{count} probe gave no result in {PROBE_TIMEOUT} s")
        result: dict[str, Any] = parent.recv()
    finally:
        await loop.run_in_executor(None, process.join, 5.0)
        if process.is_alive():
            process.terminate()
            await loop.run_in_executor(None, process.join, 2.0)
    if "error" in result:
        raise RuntimeError(f"{mode} x{count} probe failed: {result['error']}")
    await server.wait_idle()
    return result


async def _probes(server: ChildServer) -> dict[str, dict[int, dict[str, Any]]]:
    results: dict[str, dict[int, dict[str, Any]]] = {}
    for mode in PROBE_MODES:
        results[mode] = {}
        for count in PROBE_SESSIONS:
            results[mode][count] = await _run_probe(server, mode, count)
    return results


def _probe_figures(probe: dict[str, Any]) -> dict[str, float]:
    """Derived per-session numbers of one probe."""
    count, window = probe["sessions"], probe["window_s"]
    growth = peak_kb(probe["memory_open_kb"]) - peak_kb(probe["memory_baseline_kb"])
    return {
        "cpu_core_share_per_session": probe["client_cpu_s"] / window / count,
        "cpu_core_share_total": probe["client_cpu_s"] / window,
        "server_core_share": probe["server_cpu_s"] / window,
        "peak_rss_growth_kb": growth,
        "peak_rss_growth_per_session_kb": growth / count,
    }


# --------------------------------------------------------------------------- (c) concurrency


@dataclass
class Consumer:
    """Reads one received track like an application would, stamping every frame."""

    session: AvatarSession
    kind: str
    stamps: list[float] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        track = self.session.avatar_video if self.kind == "video" else self.session.avatar_audio
        if track is None:
            raise RuntimeError(f"no avatar {self.kind} track after connect()")
        with contextlib.suppress(Exception):  # MediaStreamError once the session closes
            while True:
                await track.recv()
                self.stamps.append(time.monotonic())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    def judge(self, start: float, end: float) -> tuple[int, float]:
        """Frames inside ``[start, end]`` and the longest gap, edges of the window included."""
        inside = [t for t in self.stamps if start <= t <= end]
        edges = [start, *inside, end]
        return len(inside), max(b - a for a, b in itertools.pairwise(edges))


class GcPauses:
    """The garbage collector's pauses in this process while started: count and seconds per
    generation, and the longest (a collection of the oldest generation walks every live
    object: with a thousand sessions it can hold the loop for tens of milliseconds)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = 0.0
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        took = time.perf_counter() - self._began
        generation = int(info.get("generation", 0))
        self.count[generation] += 1
        self.seconds[generation] += took
        self.longest = max(self.longest, took)

    def start(self) -> None:
        gc.callbacks.append(self._callback)

    def stop(self) -> dict[str, Any]:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        return {
            "collections": list(self.count),
            "ms": [round(x * 1000.0, 2) for x in self.seconds],
            "longest_ms": round(self.longest * 1000.0, 2),
        }


class LoopLag:
    """How late this event loop wakes up: a task sleeping ``period`` s, stamping overshoots."""

    def __init__(self, period: float = LAG_PERIOD) -> None:
        self.period = period
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.period)
            self.lags.append(max(0.0, time.monotonic() - before - self.period))

    async def stop(self) -> Summary | None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        return Summary.of(self.lags) if self.lags else None


async def _connect_batch(
    server: ChildServer,
    kind: str,
    count: int,
    consumers: list[Consumer],
    recoveries: list[str],
) -> list[float]:
    """Connect ``count`` more sessions concurrently; each gets its consumer (appended to
    ``consumers``) as soon as its ``connect()`` returns. Returns the connect times; the
    reason of every media recovery the sessions start is appended to ``recoveries``."""
    video = kind == "video"
    batch = [
        Consumer(media_session(server.url, server.token, video=video), kind) for _ in range(count)
    ]
    for consumer in batch:
        consumer.session.on(
            "media_recovering",
            lambda event: recoveries.append(
                f"{event.data.get('channel')}: {event.data.get('reason')}"
            ),
        )
    consumers.extend(batch)

    async def one(consumer: Consumer) -> float:
        started = time.monotonic()
        await asyncio.wait_for(consumer.session.connect(), CONNECT_TIMEOUT)
        consumer.start()
        return time.monotonic() - started

    return list(await asyncio.gather(*(one(c) for c in batch)))


async def _level(server: ChildServer, mode: str, level: int) -> dict[str, Any]:
    """Open ``level`` sessions, judge every one over the window, close them all."""
    kind = "video" if mode == "av" else "audio"
    consumers: list[Consumer] = []
    recoveries: list[str] = []  # media_recovering reasons, any session, any time
    record: dict[str, Any] = {"level": level, "mode": mode}
    started = time.monotonic()
    try:
        connects: list[float] = []
        try:
            for first in range(0, level, RAMP_BATCH):
                count = min(RAMP_BATCH, level - first)
                connects += await _connect_batch(server, kind, count, consumers, recoveries)
        except Exception as exc:
            record.update(passed=False, reason=f"connect failed: {describe_error(exc)}")
            return record
        sessions = [c.session for c in consumers]
        record["connect_s"] = {"median": _median(connects), "max": max(connects)}
        record["gate_capped"] = sum(
            1 for s in sessions if s.media is not None and s.media.gate_capped
        )
        await asyncio.sleep(RAMP_SETTLE)
        lag = LoopLag()
        dropped_before = sum(_dropped(s, kind) for s in sessions)
        server_before = await server.stats()
        machine_before = machine_cpu()
        cpu_before = time.process_time()
        window_start = time.monotonic()
        lag.start()
        await asyncio.sleep(RAMP_WINDOW)
        window_end = time.monotonic()
        cpu = time.process_time() - cpu_before
        machine = busy_cores(machine_before, machine_cpu())
        lags = await lag.stop()
        served = delta(await server.stats(), server_before)
        window = window_end - window_start
        needed = ON_TIME_SHARE * NOMINAL_RATE[kind] * window
        judged = [c.judge(window_start, window_end) for c in consumers]
        late = [i for i, (frames, gap) in enumerate(judged) if frames < needed or gap >= MAX_GAP]
        not_connected = [s.state for s in sessions if s.state != "connected"]
        reason = None
        if late:
            reason = f"{len(late)}/{level} sessions late"
        elif not_connected:
            reason = f"sessions not connected at the end: {', '.join(sorted(not_connected))}"
        record.update(
            passed=reason is None,
            reason=reason,
            window_s=window,
            frames_needed=needed,
            frames_min=min(f for f, _ in judged),
            frames_median=_median([float(f) for f, _ in judged]),
            rate_min=min(f for f, _ in judged) / window,
            rate_median=_median([f / window for f, _ in judged]),
            gap_max_s=max(g for _, g in judged),
            late_sessions=len(late),
            server_rate_per_session=served[f"{kind}_sent"] / window / level,
            dropped_by_fanout=sum(_dropped(s, kind) for s in sessions) - dropped_before,
            loop_lag_ms=lags.scaled(1000.0).as_json("ms") if lags is not None else None,
            client_core_share=cpu / window,
            server_core_share=served["cpu"] / window,
            other_processes_cores=machine - (cpu + served["cpu"]) / window,
        )
        return record
    finally:
        record["media_recoveries"] = len(recoveries)
        record["media_recovery_reasons"] = recoveries[:5]
        for consumer in consumers:
            await consumer.stop()
        record["close_s"] = await close_all([c.session for c in consumers])
        record["server_left"] = await server.wait_idle()
        record["seconds"] = time.monotonic() - started


def _dropped(session: AvatarSession, kind: str) -> int:
    track = session.avatar_video if kind == "video" else session.avatar_audio
    return track.dropped if track is not None else 0


async def _ramp(server: ChildServer, mode: str, budget: float) -> dict[str, Any]:
    """Levels of ``mode`` until a failure, the last level, or the time budget."""
    started = time.monotonic()
    levels: list[dict[str, Any]] = []
    best = 0
    stop = "every level passed"
    for level in RAMP_LEVELS:
        elapsed = time.monotonic() - started
        if levels:
            # Next level's cost, from the last one's (connects scale with the level).
            last = levels[-1]
            estimate = last["seconds"] * max(1.0, level / last["level"]) * 0.8
            if elapsed + estimate > budget:
                stop = f"time budget ({budget:.0f} s) before level {level}"
                break
        record = await _level(server, mode, level)
        levels.append(record)
        if not record["passed"]:
            stop = f"level {level} failed: {record['reason']}"
            break
        best = level
    return {
        "mode": mode,
        "max_on_time": best,
        "stopped": stop,
        "seconds": time.monotonic() - started,
        "budget_s": budget,
        "levels": levels,
    }


# --------------------------------------------------------------------------- figure


async def _measure() -> dict[str, Any]:
    async with ChildServer() as server:
        first, first_other = await _first_frame(server)
        probes = await _probes(server)
        ramp_started = time.monotonic()
        ramps = {"av": await _ramp(server, "av", RAMP_BUDGET * RAMP_AV_SHARE)}
        left = RAMP_BUDGET - (time.monotonic() - ramp_started)
        ramps["audio"] = await _ramp(server, "audio", max(left, RAMP_BUDGET * 0.3))
    return {"first": first, "first_other_cores": first_other, "probes": probes, "ramps": ramps}


def _cells(summary: Summary) -> tuple[float, str, float, float]:
    return summary.median, "ms", summary.p90, summary.maximum


def _first_rows(samples: list[FirstFrame]) -> tuple[list[Row], dict[str, Any]]:
    def summary(values: list[float]) -> Summary:
        return Summary.of(values).scaled(1000.0)

    first = summary([s.first_frame for s in samples])
    connected = summary([s.connected for s in samples])
    gate = summary([s.connected - s.first_frame for s in samples])
    whep = summary([s.whep_answered for s in samples])
    n = len(samples)
    rows = [
        Row("A/V connect() -> first decoded video frame", n, *_cells(first)),
        Row("A/V connect() -> connected (gate incl.)", n, *_cells(connected)),
        Row("  first video frame -> connected", n, *_cells(gate)),
        Row("  connect() -> WHEP answer applied", n, *_cells(whep)),
    ]
    data = {
        "sessions": n,
        "warmup": FIRST_FRAME_WARMUP,
        "gate_settle_s": GATE_SETTLE,
        "first_video_frame": first.as_json("ms"),
        "connected": connected.as_json("ms"),
        "first_frame_to_connected": gate.as_json("ms"),
        "whep_answered": whep.as_json("ms"),
        "sdk_gate_waited": summary([s.gate_waited for s in samples]).as_json("ms"),
        "gate_capped": sum(1 for s in samples if s.gate_capped),
        "samples_first_frame_ms": [ms(s.first_frame) for s in samples],
        "samples_connected_ms": [ms(s.connected) for s in samples],
    }
    return rows, data


def _probe_rows(probes: dict[str, dict[int, dict[str, Any]]]) -> tuple[list[Row], dict[str, Any]]:
    cpu_rows: list[Row] = []
    rss_rows: list[Row] = []
    data: dict[str, Any] = {}
    for mode in PROBE_MODES:
        label = MODE_LABEL[mode]
        derived = {k: _probe_figures(p) for k, p in probes[mode].items()}
        for count, figures in derived.items():
            cpu_rows.append(
                Row(
                    f"client CPU/session, {label}, K={count}",
                    count,
                    100.0 * figures["cpu_core_share_per_session"],
                    "% core",
                )
            )
        for count, figures in derived.items():
            rss_rows.append(
                Row(
                    f"peak RSS growth/session, {label}, K={count}",
                    count,
                    figures["peak_rss_growth_per_session_kb"] / 1024.0,
                    "MB",
                )
            )
        low, high = min(derived), max(derived)
        marginal = (
            peak_kb(probes[mode][high]["memory_open_kb"])
            - peak_kb(probes[mode][low]["memory_open_kb"])
        ) / (high - low)
        rss_rows.append(
            Row(f"  {label} marginal, K={low}->{high}", high - low, marginal / 1024.0, "MB")
        )
        data[mode] = {
            "marginal_peak_rss_per_session_kb": marginal,
            "by_sessions": {
                str(count): {**probes[mode][count], **derived[count]} for count in derived
            },
        }
    return cpu_rows + rss_rows, data


def _maxrss_remark(probes: dict[str, dict[int, dict[str, Any]]]) -> str:
    """Why VmHWM and not ru_maxrss: what ru_maxrss said in the same probe."""
    probe = probes["av"][max(PROBE_SESSIONS)]
    base, peak = probe["memory_baseline_kb"], probe["memory_open_kb"]
    if "VmHWM" not in base:
        return "RSS from ru_maxrss (no /proc)."
    return (
        f"ru_maxrss, A/V K={probe['sessions']}: {base['ru_maxrss'] / 1024:.0f} MB before any "
        f"session (VmHWM {base['VmHWM'] / 1024:.0f} MB; ru_maxrss keeps the spawning parent's "
        f"peak across exec), {peak['ru_maxrss'] / 1024:.0f} MB with the sessions open."
    )


def _ramp_rows(ramps: dict[str, dict[str, Any]]) -> list[Row]:
    rows = []
    for mode in ("av", "audio"):
        ramp = ramps[mode]
        failed = any(not r["passed"] for r in ramp["levels"])
        # No failing level (time budget, or the last level passed): a lower bound.
        bound = "" if failed else " (>=)"
        rows.append(
            Row(
                f"concurrent {MODE_LABEL[mode]} sessions on time{bound}",
                len(ramp["levels"]),
                float(ramp["max_on_time"]),
                "sessions",
            )
        )
    return rows


def _level_note(record: dict[str, Any]) -> str:
    if "window_s" not in record:
        return f"{record['level']}: FAIL ({record['reason']})"
    verdict = "ok" if record["passed"] else "FAIL"
    recoveries = record["media_recoveries"]
    other = record["other_processes_cores"]
    return (
        f"{record['level']}: {verdict} (min {record['rate_min']:.1f}/s, gap "
        f"{ms(record['gap_max_s']):.0f} ms, server sent {record['server_rate_per_session']:.1f}"
        f"/s each; client {record['client_core_share']:.0%} / server "
        f"{record['server_core_share']:.0%} core"
        + (f"; {recoveries} media recoveries" if recoveries else "")
        + (f"; other processes {other:.0%}" if other > OTHER_NOTICE else "")
        + ")"
    )


def _limit_note(mode: str, ramp: dict[str, Any]) -> str | None:
    """Where the frames went missing at the failing level: before or after the server's
    synthetic tracks produced them."""
    failed = next((r for r in ramp["levels"] if not r["passed"]), None)
    if failed is None or "window_s" not in failed:
        return None
    kind = "video" if mode == "av" else "audio"
    nominal = NOMINAL_RATE[kind]
    sent = failed["server_rate_per_session"]
    lag = (failed["loop_lag_ms"] or {}).get("p90_ms", float("nan"))
    where = (
        "the server's tracks already produced too few frames: the staging server is the limit"
        if sent < ON_TIME_SHARE * nominal
        else "the server's tracks kept up, so frames were lost or late downstream (server "
        "encode/send or client receive/decode/loop, on the same cores)"
    )
    return (
        f"{MODE_LABEL[mode]} at {failed['level']} sessions: the server's tracks produced "
        f"{sent:.1f} of {nominal:g} {kind} frames/s per session, the app received a median "
        f"{failed['rate_median']:.1f}/s; server {failed['server_core_share']:.0%} of a core, "
        f"client {failed['client_core_share']:.0%} (client event-loop lag p90 {lag:.0f} ms): "
        f"{where}."
    )


def _run() -> FigureResult:
    result = FigureResult("media", TITLE)
    measured = asyncio.run(_measure())
    first_rows, first_data = _first_rows(measured["first"])
    probe_rows, probe_data = _probe_rows(measured["probes"])
    ramps: dict[str, dict[str, Any]] = measured["ramps"]
    result.rows = first_rows + probe_rows + _ramp_rows(ramps)
    server_shares = ", ".join(
        f"{MODE_LABEL[mode]} K={count} {figures['server_core_share']:.0%}"
        for mode in PROBE_MODES
        for count, figures in probe_data[mode]["by_sessions"].items()
    )
    video_fps = [
        probe_data["av"]["by_sessions"][str(count)]["frames_per_session_per_s"]["video"]
        for count in PROBE_SESSIONS
    ]
    result.notes = [
        f"(a) {FIRST_FRAME_SESSIONS} sequential A/V sessions after {FIRST_FRAME_WARMUP} "
        f"warm-up, staging server in a child process; 'connected' includes the playable gate: "
        f"first decoded frame + {GATE_SETTLE:g} s settle + approval (SDK gate_waited median "
        f"{first_data['sdk_gate_waited']['median_ms']:.0f} ms, capped "
        f"{first_data['gate_capped']}x).",
        f"(b) client CPU as % of one core per session (process_time, all threads, "
        f"{PROBE_WINDOW:g} s steady window, tracks not read by the app); each (mode, K) in a "
        f"fresh subprocess. Peak RSS = VmHWM growth over the pre-session baseline (K=1 includes "
        f"first-use costs; 'marginal' is the per-session slope). Server CPU in the same "
        f"windows (other process): {server_shares}. Video decoded per session: "
        + ", ".join(f"{fps:.1f} fps" for fps in video_fps)
        + f". {_maxrss_remark(measured['probes'])}",
        f"(c) on time = >= {ON_TIME_SHARE:.0%} of nominal frames ({NOMINAL_RATE['video']:g} "
        f"video fps, {NOMINAL_RATE['audio']:g} audio frames/s) over {RAMP_WINDOW:g} s and no "
        f"gap >= {ms(MAX_GAP):.0f} ms, for EVERY session; the {os.cpu_count() or 1} CPUs are "
        f"shared with the server's H264/Opus encoders, so this is a lower bound for the "
        f"client alone.",
    ]
    for mode in ("av", "audio"):
        ramp = ramps[mode]
        result.notes.append(
            f"{MODE_LABEL[mode]} ramp ({ramp['seconds']:.0f} s, stop: {ramp['stopped']}): "
            + "; ".join(_level_note(r) for r in ramp["levels"])
            + "."
        )
        limit = _limit_note(mode, ramp)
        if limit is not None:
            result.notes.append(limit)
    others = {
        "(a)": measured["first_other_cores"],
        "(b)": max(
            p["other_processes_cores"]
            for m in probe_data.values()
            for p in m["by_sessions"].values()
        ),
        "(c)": max(
            (
                r["other_processes_cores"]
                for ramp in ramps.values()
                for r in ramp["levels"]
                if "other_processes_cores" in r
            ),
            default=float("nan"),
        ),
    }
    result.notes.append(
        "other processes on the machine (not client, not server) kept busy: "
        + ", ".join(f"{part} {cores:.0%} of a core" for part, cores in others.items())
        + " (max over the windows; anything well above 0 makes these numbers pessimistic)."
    )
    reasons = [
        reason
        for ramp in ramps.values()
        for record in ramp["levels"]
        for reason in record["media_recovery_reasons"]
    ]
    total = sum(r["media_recoveries"] for ramp in ramps.values() for r in ramp["levels"])
    if total:
        result.notes.append(
            f"{total} media recoveries started during the ramps with no fault injected "
            f"(e.g. {reasons[0]!r}). SDK issue: the media watchdog, started at 'connected', "
            f"ages the uplink's receiver reports from the ASR peer's connected time, checks from "
            f"its first 0.1 s tick but polls reports only on every third one (none during "
            f"connect), so a connect that spent > media_stall_timeout (2 s) after ASR "
            f"connected renegotiates a healthy uplink right after 'connected'."
        )
    result.data = {
        "other_processes_cores_max": others,
        "first_frame": first_data,
        "cpu_rss": {
            "window_s": PROBE_WINDOW,
            "settle_s": PROBE_SETTLE,
            "rss_source": "VmHWM" if "VmHWM" in memory_kb() else "ru_maxrss",
            **probe_data,
        },
        "concurrency": {
            "levels": list(RAMP_LEVELS),
            "batch": RAMP_BATCH,
            "window_s": RAMP_WINDOW,
            "on_time_share": ON_TIME_SHARE,
            "max_gap_s": MAX_GAP,
            "nominal_rate": NOMINAL_RATE,
            "budget_s": RAMP_BUDGET,
            **ramps,
        },
    }
    return result


def run() -> FigureResult:
    """Run figure 4 (server in a child process, probes in their own subprocesses)."""
    return _run()
