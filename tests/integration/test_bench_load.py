"""A tiny real run of the ``load`` benchmark's probes, so the figure cannot rot unnoticed:
the SDK and bare clients connect to the bench staging server (in this process here, a
child process in the benchmark), measure a short window and close without leaving a server
conversation behind; a two-session level (server in a child process, as in the benchmark)
answers both turns with nothing leaked; the ``fleet`` figure's three ways each answer two
sessions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from avatar_sdk.testing import StagingServer
from benchmarks.fleet_runs import WAYS, RunArgs, timed_run
from benchmarks.load_cpu import ProbeArgs, _probe
from benchmarks.load_turns import TurnPlan, _level
from benchmarks.media import BenchStagingServer, ChildServer

from ..conftest import until


@pytest_asyncio.fixture
async def bench_server() -> AsyncIterator[StagingServer]:
    async with BenchStagingServer() as server:
        yield server


async def test_control_probe_measures_sdk_and_bare_and_leaves_nothing(
    bench_server: StagingServer,
) -> None:
    for impl in ("sdk", "bare"):
        args = ProbeArgs(bench_server.url, bench_server.token, "control", impl, 1, 0.0, 0.2)
        result = await _probe(args)
        assert result["impl"] == impl and result["sessions"] == 1
        assert result["window_s"] >= 0.2 and result["client_cpu_s"] >= 0.0
        assert await until(lambda: not bench_server.conversations, timeout=3.0)


@pytest.mark.parametrize(
    ("key", "impl"),
    [("audio_encoded", "bare"), ("audio_encoded", "sdk"), ("audio_pcm_thread", "sdk")],
)
async def test_audio_probes_send_and_receive_audio(
    bench_server: StagingServer, key: str, impl: str
) -> None:
    # The bare client sends EncodedToneSource's packets through a stock aiortc sender,
    # which stamps RTP from their pts: the server must hear a paced stream.
    args = ProbeArgs(bench_server.url, bench_server.token, key, impl, 1, 0.1, 0.4)
    result = await _probe(args)
    assert result["uplink_packets_per_session_per_s"] > 10.0
    assert result["frames_per_session_per_s"]["audio"] > 10.0
    assert await until(lambda: not bench_server.conversations, timeout=3.0)


async def test_a_level_answers_every_session_and_leaks_nothing() -> None:
    # The server in its own process, as in the benchmark: every task left here is ours.
    plan = TurnPlan(min_turns=2, spread=0.2, batch=2, turn_timeout=5.0, idle_timeout=3.0)
    async with ChildServer() as server, aiohttp.ClientSession(base_url=server.url) as http:
        record = await _level(http, server.url, server.token, 2, plan)
    assert "error" not in record
    assert (record["sessions_answered"], record["turns_answered"]) == (2, 2)
    assert record["ended_ms"]["n"] == 2 and record["ended_ms"]["p90_ms"] > 0.0
    assert (record["server_left"], record["tasks_leaked"]) == (0, 0)


async def test_fleet_runs_measure_the_same_work_three_ways(
    bench_server: StagingServer, tmp_path: Path
) -> None:
    # One run of each way of the ``fleet`` figure: every session answered, the latencies
    # read back, the local engine's worker CPU seen as this process's children's.
    url, token = bench_server.url, bench_server.token
    async with aiohttp.ClientSession(base_url=url) as http:
        for way in WAYS:
            args = RunArgs(url, token, way, 2, 20.0, turn_timeout=5.0)
            record = await timed_run(http, args, 2, tmp_path / f"{way}.jsonl")
            assert (record["ok"], record["failed"], len(record["ended_s"])) == (2, 0, 2), record
            assert all(0.0 < x < 5.0 for x in record["ended_s"])
            assert record["cpu_s"] > 0.0 and record["server_left"] == 0
            assert (record["children_cpu_s"] > 0.0) == (way == "local")


@pytest.mark.parametrize("key", ["av_watched", "av_unwatched"])
async def test_video_probes_count_what_the_downlink_delivers(
    bench_server: StagingServer, key: str
) -> None:
    # Watched: a consumer reads the video, every frame decoded. Unwatched: the frames are
    # assembled from RTP (counted as video_assembled) but not decoded past the first.
    args = ProbeArgs(bench_server.url, bench_server.token, key, "sdk", 1, 0.5, 1.0)
    result = await _probe(args)
    rates = result["frames_per_session_per_s"]
    assert rates["audio"] > 10.0
    if key == "av_watched":
        assert rates["video"] > 10.0
    else:
        assert rates["video_assembled"] > 10.0
    assert result["loop_lag_p99_ms"] >= 0.0
    assert await until(lambda: not bench_server.conversations, timeout=3.0)
