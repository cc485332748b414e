"""What the driver checks before any worker starts, and how a worker finds a scenario:
relative paths (the worker's cwd, then the driver's), scenarios that fail to import or to
pickle, ``SessionSpec`` URLs and audio sources; the ledger's codes; shared constants."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from avatar_sdk import logs
from avatar_sdk.errors import AvatarError, ErrorCode
from avatar_sdk.fleet import FleetPlan, SessionSpec, run_fleet
from avatar_sdk.fleet.engines import local, ray
from avatar_sdk.fleet.engines.ledger import SessionLedger
from avatar_sdk.fleet.plan import WorkerAssignment, assign
from avatar_sdk.fleet.worker import load_scenario, run_worker
from avatar_sdk.media import opus
from avatar_sdk.testing import process
from avatar_sdk.transport.rtc import asr

TOKEN = "tok-secret-123"
SPEC = SessionSpec("http://127.0.0.1:1", TOKEN, allow_insecure_transport=True)


def write_scenario(root: Path, where: str) -> None:
    """``examples/s.py`` under ``root``, whose module says where it was found."""
    (root / "examples").mkdir(parents=True)
    (root / "examples" / "s.py").write_text(
        f"WHERE = {where!r}\nasync def scenario(session, ctx):\n    ctx.record({where!r}, 1)\n",
        encoding="utf-8",
    )


class RecordingEngine:
    """A non-inline engine that only records what it was asked to run."""

    def __init__(self) -> None:
        self.assignments: list[WorkerAssignment] = []

    async def run(self, assignments: Sequence[WorkerAssignment], emit: Any) -> None:
        self.assignments.extend(assignments)


# -- relative scenario paths -------------------------------------------------------------------
def test_a_relative_path_is_found_in_the_cwd_first_then_in_the_driver_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver, node, elsewhere = tmp_path / "driver", tmp_path / "node", tmp_path / "elsewhere"
    write_scenario(driver, "driver")
    write_scenario(node, "node")
    elsewhere.mkdir()

    monkeypatch.chdir(node)  # a node whose working_dir holds the scenario: its own copy
    found = load_scenario("examples/s.py", base_dir=str(driver))
    assert found.__globals__["WHERE"] == "node"
    monkeypatch.chdir(elsewhere)  # not here: the driver's directory, as the plan carries it
    found = load_scenario("examples/s.py:scenario", base_dir=str(driver))
    assert found.__globals__["WHERE"] == "driver"
    with pytest.raises(AvatarError) as excinfo:
        load_scenario("examples/s.py")  # nowhere to look
    assert excinfo.value.code is ErrorCode.INVALID_ARGUMENT
    assert "no such file" in str(excinfo.value)


async def test_the_plan_keeps_the_reference_as_given_and_carries_the_driver_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_scenario(tmp_path, "driver")
    monkeypatch.chdir(tmp_path)
    engine = RecordingEngine()
    await run_fleet(FleetPlan("examples/s.py", SPEC, sessions=2, workers=2), engine=engine)

    assert [a.plan.scenario for a in engine.assignments] == ["examples/s.py"] * 2
    assert {a.plan.base_dir for a in engine.assignments} == {str(tmp_path)}


# -- scenarios that cannot be imported ---------------------------------------------------------
BROKEN = {
    "syntax.py": ("async def scenario(s, c):\n    return (\n", "SyntaxError"),
    "raises.py": ("raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
    "exits.py": ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_scenario_that_fails_to_import_is_invalid_argument(tmp_path: Path, name: str) -> None:
    body, said = BROKEN[name]
    (tmp_path / name).write_text(body, encoding="utf-8")
    with pytest.raises(AvatarError) as excinfo:
        load_scenario(str(tmp_path / name))
    assert excinfo.value.code is ErrorCode.INVALID_ARGUMENT
    assert said in str(excinfo.value)


def test_a_module_that_fails_to_import_is_invalid_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fleet_broken_mod_xyz.py").write_text("1 / 0\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AvatarError) as excinfo:
        load_scenario("fleet_broken_mod_xyz:scenario")
    assert excinfo.value.code is ErrorCode.INVALID_ARGUMENT
    assert "ZeroDivisionError" in str(excinfo.value)


async def test_run_fleet_refuses_a_broken_scenario_before_any_worker(tmp_path: Path) -> None:
    (tmp_path / "raises.py").write_text(BROKEN["raises.py"][0], encoding="utf-8")
    engine = RecordingEngine()
    with pytest.raises(AvatarError) as excinfo:
        await run_fleet(FleetPlan(str(tmp_path / "raises.py"), SPEC), engine=engine)
    assert excinfo.value.code is ErrorCode.INVALID_ARGUMENT
    assert engine.assignments == []


async def test_a_worker_reports_its_sessions_when_the_scenario_fails_to_import(
    tmp_path: Path,
) -> None:
    """A file that broke after the driver's check: the worker reports, it does not crash."""
    (tmp_path / "raises.py").write_text(BROKEN["raises.py"][0], encoding="utf-8")
    plan = FleetPlan(str(tmp_path / "raises.py"), SPEC, sessions=2, workers=1)
    seen: list[dict[str, Any]] = []
    await run_worker(assign(plan, 0.0)[0], seen.append)

    finished = [m for m in seen if m["kind"] == "session_finished"]
    assert [(m["session"], m["code"]) for m in finished] == [
        (0, "invalid_argument"),
        (1, "invalid_argument"),
    ]


# -- scenarios that cannot be pickled ----------------------------------------------------------
async def test_an_unpicklable_scenario_is_refused_for_process_engines() -> None:
    async def local_scenario(session: Any, ctx: Any) -> None:
        pass

    plan = FleetPlan(local_scenario, SPEC, sessions=2, workers=2)
    recording = RecordingEngine()
    for engine in ("local", recording):
        with pytest.raises(AvatarError) as excinfo:
            await run_fleet(plan, engine=engine)
        assert excinfo.value.code is ErrorCode.INVALID_ARGUMENT
        assert "module-level function" in str(excinfo.value)
    assert recording.assignments == []  # no worker was asked to start


# -- SessionSpec -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "field", "code"),
    [
        ({"url": "not a url"}, "url", ErrorCode.INVALID_ARGUMENT),
        ({"url": "ftp://host"}, "url", ErrorCode.INVALID_ARGUMENT),
        ({"url": f"http://host:99999999/{TOKEN}"}, "url", ErrorCode.INVALID_ARGUMENT),
        ({"url": "http://host", "allow_insecure_transport": False}, "url", "insecure_transport"),
        ({"genie_url": "ftp://host"}, "genie_url", ErrorCode.INVALID_ARGUMENT),
        ({"control_url": "nope"}, "control_url", ErrorCode.INVALID_ARGUMENT),
        ({"media": True, "audio": "opus_tone"}, "audio", ErrorCode.INVALID_ARGUMENT),
        ({"media": True, "audio": "/no/such/file.ogg"}, "audio", ErrorCode.INVALID_ARGUMENT),
    ],
)
def test_session_spec_refuses_bad_urls_and_audio(
    options: dict[str, Any], field: str, code: Any
) -> None:
    values: dict[str, Any] = {"url": "https://host", "allow_insecure_transport": True}
    values.update(options)
    url = values.pop("url")
    with pytest.raises(AvatarError) as excinfo:
        SessionSpec(url, TOKEN, **values)
    assert str(excinfo.value.code) == str(code)
    assert f"SessionSpec.{field}" in str(excinfo.value)
    assert TOKEN not in str(excinfo.value) and TOKEN not in repr(excinfo.value)


def test_session_spec_audio_names_the_choices_and_accepts_files_and_urls(tmp_path: Path) -> None:
    with pytest.raises(AvatarError) as excinfo:
        SessionSpec("https://host", TOKEN, media=True, audio="opus_tone")
    message = str(excinfo.value)
    assert "opus-tone" in message and "'opus_tone'" in message and "driver" in message
    audio = tmp_path / "voice.ogg"
    audio.write_bytes(b"")
    for ok in ("opus-tone", str(audio), "https://host/voice.ogg"):
        assert SessionSpec("https://host", TOKEN, media=True, audio=ok).audio == ok
    assert SessionSpec("https://host", TOKEN, audio="opus_tone").audio == "opus_tone"  # no media


# -- the ledger --------------------------------------------------------------------------------
def test_the_ledger_reports_lost_sessions_with_the_code_given(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plan = FleetPlan("m:f", SPEC, sessions=4, workers=2)
    ledger = SessionLedger(assign(plan, 0.0)[1])
    ledger.observe({"kind": "session_finished", "session": 1})
    with caplog.at_level(logging.ERROR, logger="avatar_sdk.fleet"):
        items = ledger.lost("not ready in 0s", code="start_timeout")
    assert [(m["kind"], m["session"], m["code"]) for m in items] == [
        ("error", 3, "start_timeout"),
        ("session_finished", 3, "start_timeout"),
    ]
    assert "not ready in 0s" in caplog.text
    assert ledger.lost("again") == []
    fresh = SessionLedger(assign(plan, 0.0)[0])
    assert {m["code"] for m in fresh.lost("exited")} == {"internal"}  # the default


# -- one definition of what is shared ----------------------------------------------------------
def test_child_processes_mirror_one_list_of_loggers() -> None:
    for module in (local, ray, process):
        assert not hasattr(module, "_MIRRORED_LOGGERS"), module.__name__
    aiohttp = logging.getLogger("aiohttp")
    before = aiohttp.level
    try:
        aiohttp.setLevel(logging.ERROR)
        levels = logs.logger_levels()
        assert levels["aiohttp"] == logging.ERROR and "aiortc" in levels
        aiohttp.setLevel(logging.NOTSET)
        logs.set_logger_levels(levels)
        assert aiohttp.level == logging.ERROR
    finally:
        aiohttp.setLevel(before)


def test_the_uplink_uses_the_opus_module_constants() -> None:
    assert asr.OPUS_TIME_BASE is opus.TIME_BASE
    assert asr.SAMPLE_RATE is opus.SAMPLE_RATE and asr.FRAME_SAMPLES is opus.FRAME_SAMPLES
