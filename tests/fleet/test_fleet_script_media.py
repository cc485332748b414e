"""A scripted YAML conversation with a staging fault (a socket-tier recovery measured), and a
media session whose reply audio latency is measured from the avatar's audio track."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from avatar_sdk.fleet import FleetPlan, run_fleet
from avatar_sdk.testing import StagingServer

from .conftest import by_kind, spec_for

SCRIPT = """\
name: socket drop under load
steps:
  - say: Hello!
  - fault: drop_socket
    args: {recovery: true}
  - expect: reconnected
    where: {tier: socket}
    sessions: [0]
    timeout: 10
  - say: Still there?
"""


async def test_a_scripted_fault_measures_the_socket_recovery(
    staging: StagingServer, tmp_path: Path
) -> None:
    script = tmp_path / "drop.yaml"
    script.write_text(SCRIPT, encoding="utf-8")
    seen: list[dict[str, Any]] = []
    plan = FleetPlan(str(script), spec_for(staging), sessions=2, rate=50.0)
    report = await run_fleet(plan, engine="inline", on_measurement=seen.append)

    assert report.ok, report.stats
    assert staging.faults.injected == ["drop_socket"]  # fired by session 0 only
    recoveries = by_kind(seen, "recovery")
    assert any(r["session"] == 0 and r["tier"] == "socket" for r in recoveries)
    for recovery in recoveries:
        assert recovery["tier"] == "socket" and 0 < recovery["seconds"] < 10
    assert report.stats["recoveries"]["socket"]["count"] == len(recoveries)
    assert report.stats["turns"] == {"ok": 4, "failed": 0}


async def test_a_media_session_measures_reply_audio(staging: StagingServer) -> None:
    seen: list[dict[str, Any]] = []
    spec = spec_for(staging, media=True, video=False, audio="silence")
    plan = FleetPlan("tests.fleet.scenarios:one_turn", spec, sessions=1)
    report = await run_fleet(plan, engine="inline", on_measurement=seen.append)

    assert report.ok, report.stats
    (turn,) = by_kind(seen, "turn")
    assert turn["ok"] is True
    # the staging avatar's voice is a tone while it speaks, digital silence otherwise
    assert turn["audio_s"] is not None and 0 < turn["audio_s"] < 5
    assert report.stats["latency"]["audio"]["count"] == 1


@pytest.mark.parametrize(
    ("audio", "codec"),
    [("opus-tone", "thread"), ("tone", "loop"), ("opus-tone", "loop")],
)
async def test_fleet_uplink_sources_and_codec_are_heard(
    staging: StagingServer, audio: str, codec: str
) -> None:
    """The named pre-encoded source and the on-loop codec reach the backend as speech."""
    staging.brain.listen(threshold=0.02, min_speech=0.2)
    seen: list[dict[str, Any]] = []
    spec = spec_for(staging, media=True, audio=audio, audio_codec=codec)
    plan = FleetPlan("tests.fleet.scenarios:heard", spec, sessions=2, rate=50.0)
    report = await run_fleet(plan, engine="inline", on_measurement=seen.append)

    assert report.ok, report.stats
    assert report.stats["turns"] == {"ok": 2, "failed": 0}


@pytest.mark.parametrize(
    ("scenario", "control", "code"),
    [
        ("bad_fault", None, "invalid_argument"),  # the control API refuses the name
        ("any_fault", "http://127.0.0.1:9", "unreachable"),  # nothing listens there
    ],
)
async def test_a_fault_the_backend_cannot_take_fails_its_session_classified(
    staging: StagingServer, scenario: str, control: str | None, code: str
) -> None:
    spec = spec_for(staging)
    if control is not None:
        spec = dataclasses.replace(spec, control_url=control)
    plan = FleetPlan(f"tests.fleet.scenarios:{scenario}", spec, sessions=1)
    report = await run_fleet(plan, engine="inline")

    assert (report.finished, report.failed) == (1, 1)
    assert report.stats["failures"] == {code: 1}
