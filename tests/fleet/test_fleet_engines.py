"""The runner on the inline and local engines against a real StagingServer: counts,
measurements in the JSONL, failures classified, a killed worker, a cancelled run."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from avatar_sdk.fleet import FleetPlan, SessionSpec, run_fleet
from avatar_sdk.fleet.engines.local import LocalEngine
from avatar_sdk.fleet.plan import WorkerAssignment
from avatar_sdk.fleet.worker import Emit, run_worker
from avatar_sdk.testing import StagingServer

from .conftest import Collector, by_kind, read_jsonl, spec_for

SCENARIOS = "tests.fleet.scenarios"


def has_proc_entry(pid: int) -> bool:
    """A process that runs, or ended and was never reaped (a zombie)."""
    return Path(f"/proc/{pid}").exists()


def check_clean_run(items: list[dict[str, Any]], sessions: int, turns: int) -> None:
    """Every session started, connected, greeted, took its turns and finished ok."""
    for kind in ("session_started", "connected", "greeting", "session_finished"):
        assert sorted(m["session"] for m in by_kind(items, kind)) == list(range(sessions)), kind
    finished = by_kind(items, "session_finished")
    assert {m["status"] for m in finished} == {"ok"}
    turn_items = by_kind(items, "turn")
    assert len(turn_items) == sessions * turns
    for turn in turn_items:
        assert turn["ok"] is True
        assert 0 < turn["text_s"] <= turn["ended_s"]
        assert turn["audio_s"] is None  # control-only sessions
    assert {m["outcome"] for m in by_kind(items, "completed")} == {"sent"}
    assert len(by_kind(items, "completed")) == sessions
    for item in items:
        assert {"t", "kind", "session", "worker"} <= item.keys()


@pytest.mark.parametrize("engine", ["inline", "local"])
async def test_control_sessions_two_turns(
    staging: StagingServer, tmp_path: Path, engine: str
) -> None:
    plan = FleetPlan(f"{SCENARIOS}:two_turns", spec_for(staging), sessions=6, rate=50.0, workers=2)
    jsonl = tmp_path / "run.jsonl"
    report = await run_fleet(plan, engine=engine, jsonl=jsonl)

    assert report.ok
    assert (report.started, report.finished, report.failed) == (6, 6, 0)
    assert report.stats["turns"] == {"ok": 12, "failed": 0}
    assert report.stats["outcomes"] == {"sent": 6}
    assert report.stats["metrics"]["reply_chars"]["count"] == 6
    assert len(staging.completed_threads) == 6
    items = read_jsonl(jsonl)
    assert len(items) == report.measurements
    check_clean_run(items, sessions=6, turns=2)
    workers = {m["worker"] for m in items}
    assert workers == ({0} if engine == "inline" else {0, 1})
    assert staging.token not in jsonl.read_text(encoding="utf-8")


async def test_a_scenario_that_raises_fails_only_its_session(staging: StagingServer) -> None:
    seen: list[dict[str, Any]] = []
    plan = FleetPlan(f"{SCENARIOS}:raises_on_one", spec_for(staging), sessions=3, rate=50.0)
    report = await run_fleet(plan, engine="inline", on_measurement=seen.append)

    assert (report.finished, report.failed) == (3, 1)
    assert report.stats["failures"] == {"scenario_error": 1}
    finished = {m["session"]: m for m in by_kind(seen, "session_finished")}
    assert finished[1]["status"] == "failed" and finished[1]["code"] == "scenario_error"
    assert finished[0]["status"] == finished[2]["status"] == "ok"
    assert [m["session"] for m in by_kind(seen, "error")] == [1]
    assert report.stats["turns"] == {"ok": 3, "failed": 0}  # its turn was fine
    assert len(staging.completed_threads) == 3  # the failed session was closed too


async def test_a_killed_worker_reports_its_sessions_failed(staging: StagingServer) -> None:
    seen: list[dict[str, Any]] = []
    plan = FleetPlan(
        f"{SCENARIOS}:kills_worker_1", spec_for(staging), sessions=4, rate=50.0, workers=2
    )
    report = await asyncio.wait_for(run_fleet(plan, engine="local", on_measurement=seen.append), 40)

    finished = {m["session"]: m for m in by_kind(seen, "session_finished")}
    assert sorted(finished) == [0, 1, 2, 3]
    for index in (1, 3):  # worker 1's sessions: round-robin
        assert finished[index]["status"] == "failed"
        assert finished[index]["code"] == "internal"
        assert finished[index]["worker"] == 1
    assert finished[0]["status"] == finished[2]["status"] == "ok"
    assert report.stats["failures"] == {"internal": 2}
    # session 3 may die before it started: it is reported all the same
    assert report.finished == 4 and report.stats["active"] == 0


async def test_a_cancelled_local_run_stops_and_joins_its_workers(staging: StagingServer) -> None:
    watch = Collector(turns=4)
    seen, all_talked, on_measurement = watch.items, watch.turns_seen, watch.add

    engine = LocalEngine(stop_grace=10.0)
    plan = FleetPlan(f"{SCENARIOS}:long_pause", spec_for(staging), sessions=4, rate=50.0, workers=2)
    run = asyncio.create_task(run_fleet(plan, engine=engine, on_measurement=on_measurement))
    await asyncio.wait_for(all_talked.wait(), 30)
    pids = [process.pid for process in engine.processes]
    assert len(pids) == 2 and all(pid is not None for pid in pids)
    assert all(has_proc_entry(pid) for pid in pids)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run, 20)

    assert engine.processes == []
    # joined (reaped), not left running or as zombies: their /proc entries are gone
    assert not [pid for pid in pids if has_proc_entry(pid)]
    finished = by_kind(seen, "session_finished")
    assert sorted(m["session"] for m in finished) == [0, 1, 2, 3]
    assert {m["code"] for m in finished} == {"stopped"}  # closed on the stop, not killed
    assert len(staging.completed_threads) == 4


async def test_a_worker_not_ready_in_time_has_its_sessions_failed_start_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``start_timeout=0``: no spawned worker can be ready in time, whatever the machine."""
    seen: list[dict[str, Any]] = []
    spec = SessionSpec("http://127.0.0.1:9", "tok-secret", allow_insecure_transport=True)
    plan = FleetPlan(f"{SCENARIOS}:one_turn", spec, sessions=3, workers=2)
    engine = LocalEngine(start_timeout=0.0)
    with caplog.at_level(logging.WARNING, logger="avatar_sdk.fleet"):
        report = await asyncio.wait_for(
            run_fleet(plan, engine=engine, on_measurement=seen.append), 40
        )

    finished = by_kind(seen, "session_finished")
    assert sorted(m["session"] for m in finished) == [0, 1, 2]
    assert {m["code"] for m in finished} == {"start_timeout"}
    assert report.stats["failures"] == {"start_timeout": 3}
    assert by_kind(seen, "session_started") == []
    assert "not ready within 0s" in caplog.text and "start_timeout" in caplog.text
    assert engine.processes == []


async def test_a_worker_elsewhere_finds_a_relative_scenario_in_the_driver_dir(
    staging: StagingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose cwd lacks the file (a node's working_dir) loads the driver's copy."""
    driver, node = tmp_path / "driver", tmp_path / "node"
    (driver / "examples").mkdir(parents=True)
    node.mkdir()
    scenario = "async def scenario(session, ctx):\n    await ctx.turn('Hello!')\n"
    (driver / "examples" / "talk.py").write_text(scenario, encoding="utf-8")
    seen_refs: list[str] = []

    class ElsewhereEngine:
        async def run(self, assignments: Sequence[WorkerAssignment], emit: Emit) -> None:
            os.chdir(node)  # restored by monkeypatch
            for assignment in assignments:
                seen_refs.append(str(assignment.plan.scenario))
                await run_worker(assignment, emit)

    monkeypatch.chdir(driver)
    plan = FleetPlan("examples/talk.py", spec_for(staging), sessions=2, rate=50.0, workers=1)
    report = await run_fleet(plan, engine=ElsewhereEngine())

    assert seen_refs == ["examples/talk.py"]
    assert report.ok and report.stats["turns"] == {"ok": 2, "failed": 0}
