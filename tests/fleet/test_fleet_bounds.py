"""What a fleet run measures and how it ends, against a real StagingServer: the audio
latency of back-to-back turns, odd measurement fields on the local engine, ``duration``
bounding a run (pauses and the ramp), a fault argument called ``name``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from avatar_sdk.fleet import FleetPlan, run_fleet
from avatar_sdk.testing import StagingServer

from .conftest import by_kind, spec_for

SCENARIOS = "tests.fleet.scenarios"


async def test_back_to_back_turns_measure_their_own_voice(staging: StagingServer) -> None:
    """Staging sends a reply's text before its voice: a turn's first audible frame can
    never come before its first text, unless it is the previous utterance's tail."""
    seen: list[dict[str, Any]] = []
    spec = spec_for(staging, media=True, audio="silence")
    plan = FleetPlan(f"{SCENARIOS}:three_turns", spec, sessions=1)
    report = await run_fleet(plan, engine="inline", on_measurement=seen.append)

    assert report.ok
    turns = by_kind(seen, "turn")
    assert [t["turn"] for t in turns] == [0, 1, 2]
    for turn in turns:
        assert turn["ok"] is True
        assert turn["audio_s"] is not None, repr(turn)
        assert turn["audio_s"] >= turn["text_s"], turn


@pytest.mark.parametrize("engine", ["inline", "local"])
async def test_odd_measurement_fields_lose_nothing(staging: StagingServer, engine: str) -> None:
    seen: list[dict[str, Any]] = []
    plan = FleetPlan(
        f"{SCENARIOS}:odd_measurements", spec_for(staging), sessions=2, rate=50.0, workers=1
    )
    report = await asyncio.wait_for(run_fleet(plan, engine=engine, on_measurement=seen.append), 60)

    assert report.ok, report.stats["failures"]
    assert sorted(m["session"] for m in by_kind(seen, "turn")) == [0, 1]
    notes = by_kind(seen, "note")
    assert len(notes) == 2
    for note in notes:  # made plain: strings for what JSON has no type for
        assert isinstance(note["callback"], str) and isinstance(note["tags"], str)
        assert note["nested"] == {"x": [1, 2]}
    assert {type(m["value"]) for m in by_kind(seen, "metric")} == {str}


async def test_duration_ends_a_long_pause(staging: StagingServer) -> None:
    seen: list[dict[str, Any]] = []
    plan = FleetPlan(
        f"{SCENARIOS}:long_pause", spec_for(staging), sessions=2, rate=50.0,
        iterations=0, duration=4.0,
    )  # fmt: skip
    # 4 s: room for both connects and turns on a loaded machine (at 1 s, a run under load
    # ended before either session's first turn); the pause is 120 s.
    began = time.monotonic()
    report = await asyncio.wait_for(
        run_fleet(plan, engine="inline", on_measurement=seen.append), 30
    )

    assert time.monotonic() - began < 30.0  # the duration, not the 120 s pause, ended it
    assert report.ok and report.finished == 2
    assert len(by_kind(seen, "turn")) == 2  # one iteration each: the pause outlived the run


async def test_sessions_whose_slot_is_after_the_deadline_are_not_started(
    staging: StagingServer,
) -> None:
    seen: list[dict[str, Any]] = []
    plan = FleetPlan(
        f"{SCENARIOS}:long_pause",
        spec_for(staging),
        sessions=4,
        rate=2.0,
        iterations=0,
        duration=0.8,
    )  # fmt: skip  (slots at 0, 0.5, 1.0 and 1.5 s)
    began = time.monotonic()
    report = await asyncio.wait_for(run_fleet(plan, engine="inline", on_measurement=seen.append), 8)

    assert time.monotonic() - began < 5.0
    finished = {m["session"]: m for m in by_kind(seen, "session_finished")}
    assert {i: finished[i]["status"] for i in range(4)} == {
        0: "ok", 1: "ok", 2: "failed", 3: "failed"
    }  # fmt: skip
    assert finished[2]["code"] == finished[3]["code"] == "deadline"
    assert sorted(m["session"] for m in by_kind(seen, "session_started")) == [0, 1]
    assert report.stats["failures"] == {"deadline": 2}


async def test_a_fault_argument_called_name(staging: StagingServer) -> None:
    plan = FleetPlan(f"{SCENARIOS}:fault_with_name", spec_for(staging), sessions=1, rate=50.0)
    report = await run_fleet(plan, engine="inline")
    # the keyword reached the control API, which refused it: not a TypeError in the SDK
    assert report.stats["failures"] == {"invalid_argument": 1}
