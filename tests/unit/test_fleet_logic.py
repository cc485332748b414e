"""The fleet's pure parts: plan validation and the ramp, percentiles and FleetStats, the
script schema, scenario references, the report's text and HTML."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import pickle
import random
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError

from avatar_sdk.errors import AvatarError, ErrorCode
from avatar_sdk.fleet import FleetPlan, FleetReport, FleetStats, SessionSpec, assign
from avatar_sdk.fleet.context import QUIET_END_FRAMES, AudioProbe
from avatar_sdk.fleet.engines import ENGINES, get_engine
from avatar_sdk.fleet.engines.local import send_batch
from avatar_sdk.fleet.measure import measurement, percentile
from avatar_sdk.fleet.plan import AUDIO_SOURCES, audio_source, start_time
from avatar_sdk.fleet.report import html_page, progress_line, summary_rows, svg_chart
from avatar_sdk.fleet.script import load_script, parse_script
from avatar_sdk.fleet.worker import classify, load_scenario, resolve_ref
from avatar_sdk.media import EncodedSilenceSource, EncodedToneSource, SilenceSource, ToneSource

SPEC = SessionSpec("http://127.0.0.1:1", "tok-secret-123", allow_insecure_transport=True)


def invalid(excinfo: pytest.ExceptionInfo[AvatarError]) -> str:
    assert excinfo.value.code is ErrorCode.INVALID_ARGUMENT
    return str(excinfo.value)


# -- plan --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"sessions": 0}, "sessions"),
        ({"rate": 0.0}, "rate"),
        ({"rate": float("inf")}, "rate"),
        ({"iterations": -1}, "iterations"),
        ({"iterations": 0}, "iterations"),  # 0 needs a duration
        ({"duration": -1.0}, "duration"),
        ({"workers": -1}, "workers"),
        ({"turn_timeout": 0}, "turn_timeout"),
        ({"scenario": ""}, "scenario"),
    ],
)
def test_plan_validation_names_the_field(changes: dict[str, Any], field: str) -> None:
    options: dict[str, Any] = {"scenario": "m:f", "session": SPEC, **changes}
    with pytest.raises(AvatarError) as excinfo:
        FleetPlan(**options)
    assert f"FleetPlan.{field}" in invalid(excinfo)


def test_session_spec_validation_and_secrecy() -> None:
    with pytest.raises(AvatarError) as excinfo:
        SessionSpec("http://x", "tok", config={"no_such_field": 1})
    assert "SessionSpec.config" in invalid(excinfo)
    with pytest.raises(AvatarError) as excinfo:
        SessionSpec("http://x", "tok", config={"close_timeout": -1})
    assert "close_timeout" in invalid(excinfo)
    with pytest.raises(AvatarError) as excinfo:
        SessionSpec("http://x", "", media=True)
    assert "<hidden>" in invalid(excinfo)
    with pytest.raises(AvatarError):
        SessionSpec("http://x", "tok", video=True)  # video needs media
    with pytest.raises(AvatarError) as excinfo:
        SessionSpec("http://x", "tok", audio_codec="gpu")  # type: ignore[arg-type]
    assert "SessionSpec.audio_codec" in invalid(excinfo)
    plan = FleetPlan("m:f", SPEC)
    assert "tok-secret-123" not in repr(plan) and "tok-secret-123" not in repr(assign(plan, 0))
    assert pickle.loads(pickle.dumps(assign(plan, 5.0)[0])).plan.session.token == SPEC.token


def test_assign_round_robin_and_ramp() -> None:
    plan = FleetPlan("m:f", SPEC, sessions=7, rate=4.0, workers=3)
    parts = assign(plan, 100.0)
    assert [a.sessions for a in parts] == [(0, 3, 6), (1, 4), (2, 5)]
    assert [a.worker for a in parts] == [0, 1, 2]
    assert {a.t0 for a in parts} == {100.0}
    assert [start_time(plan, 100.0, i) for i in (0, 1, 6)] == [100.0, 100.25, 101.5]
    assert parts[1].start_of(4) == 101.0
    assert parts[1].with_t0(200.0).start_of(4) == 201.0
    # never more workers than sessions; 0 means one per CPU
    assert len(assign(plan.with_(workers=50), 0.0)) == 7
    assert 1 <= len(assign(plan.with_(workers=0), 0.0)) <= 7
    every = sorted(i for a in assign(plan.with_(sessions=100, workers=6), 0.0) for i in a.sessions)
    assert every == list(range(100))


# -- measurements ------------------------------------------------------------------------------
def test_percentile_matches_numpy() -> None:
    rng = random.Random(7)
    for size in (1, 2, 3, 10, 101):
        values = [rng.uniform(0, 5) for _ in range(size)]
        for q in (0, 50, 90, 99, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) is None


def m(t: float, kind: str, session: int, **fields: Any) -> dict[str, Any]:
    return {"t": t, "kind": kind, "session": session, "worker": 0, **fields}


def test_fleet_stats_counts_latencies_and_timeline() -> None:
    stats = FleetStats()
    items = [
        m(0.0, "session_started", 0),
        m(0.2, "session_started", 1),
        m(0.3, "connected", 0, seconds=0.1),
        m(0.4, "connected", 1, seconds=0.3),
        m(1.5, "turn", 0, text_s=0.2, audio_s=None, ended_s=0.5, ok=True),
        m(1.6, "turn", 1, text_s=0.4, audio_s=None, ended_s=None, ok=False, error="timeout"),
        m(1.7, "recovery", 1, tier="socket", seconds=0.25),
        m(1.8, "error", 1, code="transport_closed", recoverable=True),
        m(2.1, "completed", 0, outcome="sent", delivered=True),
        m(2.2, "session_finished", 0, status="ok", seconds=2.2),
        m(2.2, "session_started", 2),
        m(3.5, "session_finished", 1, status="failed", code="timeout", seconds=3.3),
        m(3.5, "session_finished", 1, status="ok", seconds=3.3),  # a duplicate is ignored
        m(3.6, "metric", 2, name="chars", value=12),
    ]
    for item in items:
        stats.feed(item)
    snap = stats.snapshot()
    assert (snap["started"], snap["finished"], snap["ok"], snap["failed"]) == (3, 2, 1, 1)
    assert snap["active"] == 1
    assert snap["turns"] == {"ok": 1, "failed": 1}
    assert snap["latency"]["connect"]["p50"] == pytest.approx(0.2)
    assert snap["latency"]["text"]["count"] == 2 and snap["latency"]["generated"]["count"] == 1
    assert snap["latency"]["audio"]["count"] == 0 and snap["latency"]["audio"]["p50"] is None
    assert snap["recoveries"] == {"socket": {"count": 1, "p50": 0.25, "p90": 0.25, "max": 0.25}}
    assert snap["errors"] == {"transport_closed": 1}
    assert snap["failures"] == {"timeout": 1}
    assert snap["outcomes"] == {"sent": 1}
    assert snap["metrics"]["chars"]["count"] == 1

    rows = stats.timeline()
    assert [r["t"] for r in rows] == [1.0, 2.0, 3.0, 4.0]
    assert [r["active"] for r in rows] == [2, 2, 2, 2]  # the peak within each second
    assert rows[0]["connect_p50"] == pytest.approx(0.2) and rows[0]["text_p50"] is None
    assert rows[1]["text_p50"] == pytest.approx(0.3) and rows[1]["generated_p90"] == 0.5
    assert rows[2]["text_p50"] is None
    assert FleetStats().timeline() == []


def test_timeline_active_falls_when_sessions_finish() -> None:
    stats = FleetStats(bucket=0.5)
    stats.feed_all(
        [m(0.0, "session_started", 0), m(0.1, "session_started", 1),
         m(0.6, "session_finished", 0, status="ok", seconds=0.6),
         m(1.6, "session_finished", 1, status="ok", seconds=1.5)]
    )  # fmt: skip
    # the peak: a bucket counts the sessions open at its start, then every change in it
    assert [r["active"] for r in stats.timeline()] == [2, 2, 1, 1]
    assert stats.active == 0


# -- scripts -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "'steps' is a required property"),
        ({"steps": []}, "should be non-empty"),
        ({"steps": [{"say": ""}]}, "steps[0]"),
        ({"steps": [{"say": "hi"}, {"pause": -1}]}, "steps[1].pause: -1 is less than the minimum"),
        ({"steps": [{"sing": "la"}]}, "steps[0]: a step needs exactly one of"),
        ({"steps": [{"say": "hi", "pause": 1}]}, "steps[0]: a step needs exactly one of"),
        ({"steps": [{"fault": "drop_socket", "args": [1]}]}, "steps[0].args: [1] is not of type"),
        ({"steps": [{"expect": "reconected"}]}, "steps[0]: unknown event 'reconected'"),
        ({"steps": [{"say": "hi"}], "extra": 1}, "Additional properties"),
        ({"steps": [{"say": "hi"}, {"pause": float("inf")}]}, "steps[1].pause: inf is greater"),
        ({"steps": [{"say": "hi", "timeout": 1e999}]}, "steps[0]: inf is greater"),
        ({"steps": [{"expect": "reconnected", "timeout": 1e6}]}, "steps[0]: 1000000.0 is greater"),
        ({"steps": [{"pause": float("nan")}]}, "steps[0].pause: nan is not a finite number"),
    ],
)
def test_script_schema_errors_name_the_step(data: Any, message: str) -> None:
    with pytest.raises(AvatarError) as excinfo:
        parse_script(data, source="s.yaml")
    text = invalid(excinfo)
    assert text.count("s.yaml") == 1 and message in text


def test_script_files_load(tmp_path: Path) -> None:
    good = tmp_path / "good.yml"
    good.write_text("name: hi\nsteps:\n  - say: hello\n  - pause: 0.1\n", encoding="utf-8")
    assert callable(load_script(good))
    as_json = tmp_path / "good.json"
    as_json.write_text('{"steps": [{"expect": "reconnected", "timeout": 2}]}', encoding="utf-8")
    assert callable(load_scenario(str(as_json)))
    broken = tmp_path / "broken.yaml"
    broken.write_text("steps: [say: {", encoding="utf-8")
    with pytest.raises(AvatarError) as excinfo:
        load_script(broken)
    assert "broken.yaml" in invalid(excinfo)
    with pytest.raises(AvatarError):
        load_script(tmp_path / "missing.yaml")


# -- scenario references -----------------------------------------------------------------------
def test_scenario_references(tmp_path: Path) -> None:
    file = tmp_path / "mine.py"
    file.write_text("async def scenario(s, c):\n    pass\nasync def other(s, c):\n    pass\n")
    assert load_scenario(str(file)).__name__ == "scenario"
    assert load_scenario(f"{file}:other").__name__ == "other"
    assert load_scenario("tests.fleet.scenarios:one_turn").__name__ == "one_turn"
    bad = [
        "tests.fleet.scenarios",  # no function
        "no_such_module_xyz:f",
        "tests.fleet.scenarios:nothing",
        f"{tmp_path / 'absent.py'}:f",
        f"{file}:missing",
    ]
    for ref in bad:
        with pytest.raises(AvatarError) as excinfo:
            load_scenario(ref)
        assert "scenario" in invalid(excinfo)
    assert resolve_ref("pkg.mod:f") == "pkg.mod:f"
    assert Path(resolve_ref(f"{file}:other").rpartition(":")[0]).is_absolute()


def test_classify() -> None:
    assert classify(AvatarError(ErrorCode.AUTH_FAILED)) == "auth_failed"
    ended = {"code": "server_ended"}
    assert classify(AvatarError(ErrorCode.CLOSED), ended) == "server_ended"
    assert classify(AvatarError(ErrorCode.CLOSED)) == "closed"
    assert classify(TimeoutError()) == "timeout"
    assert classify(RuntimeError("x")) == "scenario_error"


def test_engines_registry() -> None:
    assert ENGINES["ray"] == ("avatar_sdk.fleet.engines.ray", "RayEngine")
    with pytest.raises(AvatarError) as excinfo:
        get_engine("warp")
    assert "warp" in invalid(excinfo)
    assert type(get_engine("inline")).__name__ == "InlineEngine"


# -- report ------------------------------------------------------------------------------------
def report_of(stats: FleetStats) -> FleetReport:
    plan = FleetPlan("tests.fleet.scenarios:one_turn", SPEC, sessions=stats.started)
    return FleetReport(plan, stats.snapshot(), stats.timeline(), "inline", 3.0, stats.measurements)


def test_html_page_is_self_contained_with_the_chart() -> None:
    stats = FleetStats()
    for i in range(3):
        stats.feed(m(i * 0.7, "session_started", i))
        latencies = {"text_s": 0.1 * (i + 1), "audio_s": 0.2, "ended_s": 0.4}
        stats.feed(m(i * 0.7 + 0.5, "turn", i, ok=True, **latencies))
        stats.feed(m(i * 0.7 + 0.6, "session_finished", i, status="ok", seconds=0.6))
    page = html_page(report_of(stats))
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert page.count("<svg") == 1
    for series in ("text_p50", "text_p90", "audio_p50", "generated_p90"):
        assert f'data-series="{series}"' in page
    assert 'class="active"' in page  # the active-sessions area
    assert "all sessions ok" in page and "tok-secret-123" not in page
    assert "<td>reply: first text</td>" in page


def test_chart_without_data_and_text_summaries() -> None:
    assert "<polyline" not in svg_chart([])
    stats = FleetStats()
    stats.feed(m(0.0, "session_started", 0))
    stats.feed(m(0.1, "session_finished", 0, status="failed", code="auth_failed", seconds=0.1))
    snap = stats.snapshot()
    line = progress_line(snap, planned=5)
    assert "started 1/5" in line and "failed 1" in line and "reply p50 -" in line
    rows = {row[0]: row for row in summary_rows(snap)}
    assert rows["sessions ok / failed"][1] == "0 / 1"
    assert rows["failures by code"][1] == "auth_failed=1"
    assert "1 session(s) failed" in html_page(report_of(stats))


def test_named_audio_sources() -> None:
    """Each name maps to its source; anything else is a file path."""
    expected = {
        "silence": SilenceSource,
        "tone": ToneSource,
        "opus-silence": EncodedSilenceSource,
        "opus-tone": EncodedToneSource,
    }
    assert set(expected) == set(AUDIO_SOURCES)
    for name, kind in expected.items():
        source = audio_source(name)
        assert isinstance(source, kind), name
        source.stop()
    with pytest.raises(AvatarError):
        audio_source("/no/such/file.ogg")


# -- measurements ------------------------------------------------------------------------------
def test_measurement_fields_are_made_plain_and_keep_the_reserved_keys() -> None:
    item = measurement(
        "note", 3, 1, f=lambda: None, s={1}, n={"x": (1, 2.5, None)}, big=float("inf"), ok=True
    )
    assert json.loads(json.dumps(item, allow_nan=False)) == item  # strict JSON, round trips
    assert (item["kind"], item["session"], item["worker"], item["ok"]) == ("note", 3, 1, True)
    assert isinstance(item["f"], str) and item["s"] == "{1}" and item["n"] == {"x": [1, 2.5, None]}
    assert item["big"] is None  # JSON has no infinity
    pickle.dumps(item)
    for reserved in ("t", "session", "worker", "kind"):
        with pytest.raises(AvatarError) as excinfo:
            measurement("note", 0, 0, **{reserved: 1})
        assert reserved in invalid(excinfo)


def test_a_batch_with_an_item_that_cannot_be_sent_loses_only_that_item() -> None:
    parent, child = multiprocessing.Pipe()
    try:
        good, bad = {"kind": "turn", "n": 1}, {"kind": "metric", "f": lambda: None}
        assert send_batch(child, [good, bad, good]) is True
        received = []
        while parent.poll(0):
            received.extend(parent.recv()[1])
        assert received == [good, good]
        parent.close()
        assert send_batch(child, [good]) is False  # the driver is gone
    finally:
        child.close()


# -- audio probe and turn matching -------------------------------------------------------------
class _Track:
    def __init__(self, levels: list[float]) -> None:
        self.frames = [self._frame(level) for level in levels]

    @staticmethod
    def _frame(level: float) -> av.AudioFrame:
        samples = np.full((1, 960), int(level * 32767), dtype=np.int16)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = 48000
        return frame

    async def recv(self) -> av.AudioFrame:
        await asyncio.sleep(0)
        if not self.frames:
            raise MediaStreamError
        return self.frames.pop(0)


async def test_audio_probe_waits_for_silence_before_the_voice() -> None:
    """A voice still playing when the turn is armed (the previous utterance's tail) is not
    the reply: only an audible frame after a quiet one is."""
    probe = AudioProbe(_Track([0.3, 0.3, 0.0, 0.0, 0.3, 0.3]))
    heard = probe.arm()
    at_frame: list[int] = []
    heard.add_done_callback(lambda _: at_frame.append(probe.frames))
    await probe.run()
    assert heard.done() and at_frame == [5]
    never = AudioProbe(_Track([0.3, 0.3, 0.3]))
    waiter = never.arm()
    await never.run()
    assert not waiter.done()
    # a voice's end: quiet for QUIET_END_FRAMES after audible (a short pause is not one)
    ending = AudioProbe(_Track([0.0, 0.3, 0.0, 0.0, 0.3] + [0.0] * QUIET_END_FRAMES + [0.3]))
    over = ending.arm_end()
    at_frame.clear()
    over.add_done_callback(lambda _: at_frame.append(ending.frames))
    await ending.run()
    assert at_frame == [5 + QUIET_END_FRAMES]


# -- per turn index, the wait apart, the chart as points (issue 18, item 9) -------------------
def two_turn_run(sessions: int = 3) -> FleetStats:
    """Turn 0 waited 0.31 s for the greeting; turn 1 answered in 7 ms: no turn took 160."""
    stats = FleetStats()
    for s in range(sessions):
        stats.feed(m(0.0, "session_started", s))
        stats.feed(m(0.4, "turn", s, turn=0, text_s=0.006, audio_s=None, ended_s=0.008,
                     ok=True, wait_s=0.31))  # fmt: skip
        stats.feed(m(0.5, "turn", s, turn=1, text_s=0.005, audio_s=None, ended_s=0.007,
                     ok=s != 2, wait_s=0.1))  # fmt: skip
        stats.feed(m(0.6, "session_finished", s, status="ok", seconds=0.6))
    return stats


def test_turn_figures_per_turn_index_with_the_wait_apart() -> None:
    snap = two_turn_run().snapshot()
    by_turn = snap["by_turn"]
    assert list(by_turn) == ["0", "1"]
    assert (by_turn["0"]["ok"], by_turn["0"]["failed"]) == (3, 0)
    assert (by_turn["1"]["ok"], by_turn["1"]["failed"]) == (2, 1)
    assert by_turn["0"]["wait"]["p50"] == pytest.approx(0.31)
    assert by_turn["0"]["generated"]["p50"] == pytest.approx(0.008)
    assert by_turn["1"]["generated"]["max"] == pytest.approx(0.007)
    assert by_turn["0"]["audio"]["count"] == 0
    # The all-turns figures: the wait is never on a turn's clock.
    assert snap["latency"]["generated"]["count"] == 6 and snap["latency"]["generated"]["max"] < 0.01
    assert snap["latency"]["wait"]["count"] == 6
    rows = {row[0]: row for row in summary_rows(snap)}
    assert rows["reply: generated, turn 0"][1:3] == ["3", "8 ms"]
    assert rows["reply: generated, turn 1"][1:3] == ["3", "7 ms"]
    assert rows["turn: wait before sending, turn 0"][2] == "310 ms"
    assert "reply: first audio, turn 0" not in rows  # no audio samples: no row
    labels = list(rows)
    assert labels.index("reply: generated") < labels.index("reply: generated, turn 0")


def test_one_turn_index_has_no_per_turn_rows_and_odd_indexes_are_ignored() -> None:
    stats = FleetStats()
    stats.feed(m(0.1, "turn", 0, turn=0, text_s=0.1, audio_s=None, ended_s=0.2, ok=True))
    stats.feed(m(0.2, "turn", 0, turn="x", text_s=0.1, audio_s=None, ended_s=0.2, ok=True))
    snap = stats.snapshot()
    assert list(snap["by_turn"]) == ["0"] and snap["by_turn"]["0"]["wait"]["count"] == 0
    assert snap["latency"]["generated"]["count"] == 2
    assert not [row for row in summary_rows(snap) if ", turn " in row[0]]


def test_chart_draws_points_for_a_few_buckets_and_lines_for_many() -> None:
    few = svg_chart(two_turn_run().timeline())
    assert "<polyline" not in few  # one bucket: a line would invent a slope
    assert 'class="series points" data-series="generated_p50"' in few and "<circle" in few
    stats = FleetStats()
    for i in range(12):
        stats.feed(m(float(i), "turn", 0, turn=0, text_s=0.1, audio_s=None, ended_s=0.2,
                     ok=True))  # fmt: skip
    many = svg_chart(stats.timeline())
    assert 'class="series" data-series="generated_p50"' in many and "<polyline" in many
    assert stats.timeline()[0]["generated_n"] == 1
