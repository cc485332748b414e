"""The ``load`` and ``fleet`` benchmarks' pure parts: per-session CPU, SDK/bare ratios, the
p90 ratio to one session, sessions per process, the send schedule, the runner's marginal
CPU overhead per session, and the figures rendered from saved measurements (no measuring
here)."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest

from avatar_sdk import SessionConfig
from benchmarks import fleet, load
from benchmarks.fleet_runs import CONFIG_FIELDS, RunArgs, fleet_plan, turn_latencies
from benchmarks.fleet_scenario import one_turn
from benchmarks.load_cpu import MODES, mode, probe_order
from benchmarks.load_turns import TurnPlan, offsets_for, saturation, turns_per_session


def _probe(key: str, impl: str, cpu_s: float, *, sessions: int = 4) -> dict[str, Any]:
    return {
        "mode": key,
        "impl": impl,
        "sessions": sessions,
        "window_s": 5.0,
        "client_cpu_s": cpu_s,
        "server_cpu_s": 1.0,
        "machine_busy_cores": 0.5,
        "other_processes_cores": 0.05,
        "uplink_packets_per_session_per_s": 50.0,
        "frames_per_session_per_s": {"audio": 50.0},
    }


def _level(level: int, p90_ms: float, *, answered: int | None = None) -> dict[str, Any]:
    summary = {"n": level, "median_ms": p90_ms - 1, "p90_ms": p90_ms, "max_ms": p90_ms + 5}
    return {
        "level": level,
        "connect_s": 0.1,
        "connected": level,
        "connect_ms": summary,
        "sessions_answered": level if answered is None else answered,
        "turns_answered": level if answered is None else answered,
        "ended_ms": summary,
        "first_text_ms": {**summary, "p90_ms": p90_ms / 4},
        "window_s": 4.0,
        "client_core_share": 0.2,
        "server_core_share": 0.1,
        "other_processes_cores": 0.0,
        "loop_lag_ms": {"p90_ms": 1.0},
        "server_left": 0,
        "tasks_leaked": 0,
        "fds_leaked": 0,
    }


def test_core_share_per_session_is_cpu_over_window_over_sessions() -> None:
    # 1 s of CPU in a 5 s window shared by 4 sessions: 5% of a core each.
    assert load.core_pct_per_session(_probe("audio_pcm", "sdk", 1.0)) == pytest.approx(5.0)


def test_ratio_is_sdk_over_bare_and_unknown_without_a_positive_denominator() -> None:
    sdk = [_probe("audio_pcm", "sdk", 1.0), _probe("audio_pcm", "sdk", 1.4)]  # 5% and 7%
    item = load.ModeCpu(mode("audio_pcm"), sdk, [_probe("audio_pcm", "bare", 1.0)])
    assert item.pct("sdk") == pytest.approx(6.0)  # the mean of the rounds
    assert item.ratio == pytest.approx(1.2)
    assert item.added_points == pytest.approx(1.0)
    assert load.ratio_of(1.0, 0.0) is None
    assert load.ratio_of(None, 1.0) is None
    failed = load.ModeCpu(
        mode("av_watched"), [{"mode": "av_watched", "impl": "sdk", "error": "boom"}], []
    )
    assert failed.pct("sdk") is None and failed.ratio is None and failed.added_points is None


def test_probes_alternate_abba_so_drift_weighs_on_both_clients() -> None:
    order = [(m.key, impl, r) for m, impl, r in probe_order(MODES[:1], 3)]
    assert order == [
        ("control", "sdk", 0),
        ("control", "bare", 0),
        ("control", "bare", 1),
        ("control", "sdk", 1),
        ("control", "sdk", 2),
        ("control", "bare", 2),
    ]


def test_cpu_rows_carry_the_issue_targets_on_the_sdk_rows_only() -> None:
    results = [
        _probe("audio_pcm", "sdk", 0.8),  # 4% > 3%
        _probe("audio_pcm", "bare", 1.6),
        _probe("audio_encoded", "sdk", 0.2),  # 1% <= 1.5%
        _probe("audio_encoded", "bare", 0.5),
    ]
    rows = {row.label: row for row in load.cpu_rows(load.by_mode(results), 4)}
    pcm = rows["SDK CPU/session, audio-only, PCM tone uplink"]
    assert pcm.median == pytest.approx(4.0)
    assert pcm.verdict == "FAIL"
    assert rows["  floor, audio-only, PCM tone uplink"].median == pytest.approx(1.5)
    encoded = rows["SDK CPU/session, audio-only, pre-encoded uplink"]
    assert encoded.median == pytest.approx(1.0)
    assert encoded.verdict == "PASS"
    assert rows["  SDK/bare, audio-only, pre-encoded uplink"].median == pytest.approx(0.4)
    assert rows["  bare aiortc CPU/session, audio-only, PCM tone uplink"].target is None
    # Modes that were not measured still get their rows, as not-a-number.
    label = "SDK CPU/session, audio+video, PCM tone uplink, video watched"
    assert math.isnan(rows[label].median)


def test_modes_are_a_table_each_with_an_sdk_builder() -> None:
    keys = [m.key for m in MODES]
    assert keys == [
        "control", "audio_pcm", "audio_pcm_heard", "audio_pcm_thread", "audio_encoded",
        "av_watched", "av_unwatched",
    ]  # fmt: skip
    assert len(set(keys)) == len(keys)
    assert all(m.bare is not None for m in MODES)
    assert mode("av_watched").watch == ("video",) and mode("av_unwatched").watch == ()
    assert mode("audio_pcm_heard").watch == ("audio",) and mode("audio_pcm").watch == ()
    with pytest.raises(KeyError):
        mode("nope")


def test_the_thread_mode_is_compared_with_the_bare_pcm_client_and_says_so() -> None:
    thread, pcm = mode("audio_pcm_thread"), mode("audio_pcm")
    assert thread.bare is pcm.bare  # both against bare aiortc's worker threads
    assert thread.target_pct == 3.0
    assert thread.label == "audio-only, PCM tone uplink, audio_codec='thread'"
    results = [_probe("audio_pcm_thread", "sdk", 0.9), _probe("audio_pcm_thread", "bare", 1.6)]
    result = load.render({"cpu": results, "turns": {"levels": []}}, load.QUICK)
    note = next(n for n in result.notes if n.startswith(thread.label + ":"))
    assert "former default" in note and "SDK adds -3.50 points" in note
    row = next(r for r in result.rows if r.label == f"SDK CPU/session, {thread.label}")
    assert (row.median, row.verdict) == (pytest.approx(4.5), "FAIL")


def test_the_loop_lag_of_each_mode_is_a_row() -> None:
    probe = {**_probe("audio_pcm", "sdk", 0.5), "loop_lag_p99_ms": 3.0}
    rows = {r.label: r for r in load.cpu_rows(load.by_mode([probe]), 4)}
    assert rows["  SDK loop lag p99, audio-only, PCM tone uplink"].median == pytest.approx(3.0)


def test_p90_ratios_are_against_the_lowest_level() -> None:
    levels = load.levels_with_ratios([_level(1, 20.0), _level(100, 30.0), _level(1000, 50.0)])
    assert [lv.ended_ratio for lv in levels] == [1.0, 1.5, 2.5]
    assert [lv.text_ratio for lv in levels] == [1.0, 1.5, 2.5]
    assert load.sessions_per_process(levels) == 100  # 1000 is over 2x


def test_a_level_with_an_unanswered_session_fails_and_stops_the_count() -> None:
    levels = load.levels_with_ratios(
        [_level(1, 20.0), _level(100, 21.0, answered=99), _level(1000, 22.0)]
    )
    assert [lv.passed() for lv in levels] == [True, False, True]
    assert load.sessions_per_process(levels) == 1
    assert load.sessions_per_process([]) == 0


def test_sends_are_spread_evenly_and_a_session_turns_in_order() -> None:
    offsets = offsets_for(3, 2, 3.0)
    flat = sorted(x for session in offsets for x in session)
    assert flat == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
    assert all(a < b for session in offsets for a, b in itertools.pairwise(session))
    plan = TurnPlan(min_turns=20)
    assert [turns_per_session(n, plan) for n in (1, 3, 20, 1000)] == [20, 7, 1, 1]


def test_the_figure_renders_from_saved_measurements() -> None:
    measured = {
        "cpu": [
            _probe("control", "sdk", 0.001),
            _probe("control", "bare", 0.001),
            _probe("audio_pcm", "sdk", 1.2),
            {"mode": "audio_pcm", "impl": "bare", "error": "RuntimeError: no"},
        ],
        "turns": {"levels": [_level(1, 20.0), _level(1000, 30.0)]},
    }
    result = load.render(measured, load.FULL)
    labels = [row.label for row in result.rows]
    assert "speak -> agent_turn_ended, 1000 sessions" in labels
    ratio = next(r for r in result.rows if r.label == "  p90 / 1 session's, 1000 sessions")
    assert ratio.median == pytest.approx(1.5)
    assert ratio.verdict == "PASS"
    per_process = result.rows[-1]
    assert (per_process.median, per_process.verdict) == (1000.0, "PASS")
    assert any("bare rounds ERROR RuntimeError: no" in note for note in result.notes)
    assert result.data["turns"]["sessions_per_process"] == 1000
    assert result.data["cpu"][1]["ratio"] is None


def test_the_quick_plan_is_one_environment_variable_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(load.QUICK_ENV, raising=False)
    assert load.current_plan() is load.FULL
    monkeypatch.setenv(load.QUICK_ENV, "1")
    assert load.current_plan() is load.QUICK
    monkeypatch.setenv(load.QUICK_ENV, "0")
    assert load.current_plan() is load.FULL


# --------------------------------------------------------------------------- fleet figure


def _run(sessions: int, cpu_s: float, kids_s: float = 0.0, **extra: Any) -> dict[str, Any]:
    return {
        "sessions": sessions,
        "ok": sessions,
        "failed": 0,
        "ended_s": [0.1] * sessions,
        "errors": [],
        "cpu_s": cpu_s,
        "children_cpu_s": kids_s,
        "wall_s": 2.0,
        "server_cpu_s": 0.2,
        "machine_busy_cores": 0.5,
        "other_processes_cores": 0.1,
        "server_left": 0,
        **extra,
    }


def _way(way: str, run_cpu: float, base_cpu: float, *, kids: tuple[float, float] = (0.0, 0.0),
         sessions: int = 11, round_: int = 0) -> dict[str, Any]:  # fmt: skip
    return {
        "way": way,
        "round": round_,
        "warmup": _run(1, 0.05),
        "baseline": _run(1, base_cpu, kids[1]),
        "run": _run(sessions, run_cpu, kids[0], jsonl_lines=6 * sessions),
    }


def test_fleet_cpu_per_session_is_marginal_so_fixed_costs_drop_out() -> None:
    # 10 more sessions cost 0.1 s more: 10 ms each, whatever the 1-session run cost.
    assert fleet.marginal_ms(_way("hand", 0.12, 0.02)) == pytest.approx(10.0)
    local = _way("local", 0.03, 0.01, kids=(0.9, 0.7))  # driver 2 ms, worker 20 ms/session
    assert fleet.marginal_ms(local, "driver") == pytest.approx(2.0)
    assert fleet.marginal_ms(local, "worker") == pytest.approx(20.0)
    assert fleet.marginal_ms(local) == pytest.approx(22.0)
    assert fleet.marginal_ms({"way": "hand", "error": "boom"}) is None
    assert fleet.marginal_ms(_way("hand", 0.1, 0.1, sessions=1)) is None  # no extra session


def test_fleet_overhead_is_against_the_hand_written_way_in_ms_and_percent() -> None:
    hand = fleet.WayCpu("hand", [_way("hand", 0.12, 0.02), _way("hand", 0.14, 0.02)])  # 10, 12
    inline = fleet.WayCpu("inline", [_way("inline", 0.135, 0.01)])  # 12.5 ms
    assert hand.ms() == pytest.approx(11.0)  # the mean of the rounds
    extra, pct = fleet.overhead(inline, hand)
    assert extra == pytest.approx(1.5) and pct == pytest.approx(100.0 * 1.5 / 11.0)
    failed = fleet.WayCpu("local", [{"way": "local", "error": "boom"}])
    assert fleet.overhead(failed, hand) == (None, None)
    assert (hand.sent, hand.answered, len(hand.ended_s)) == (22, 22, 22)


def test_fleet_ways_alternate_abc_cba() -> None:
    assert fleet.probe_order(("a", "b", "c"), 2) == [
        ("a", 0), ("b", 0), ("c", 0), ("c", 1), ("b", 1), ("a", 1),
    ]  # fmt: skip


def test_the_fleet_figure_renders_from_saved_measurements() -> None:
    records = [
        _way("hand", 0.12, 0.02),  # 10 ms
        _way("inline", 0.13, 0.02),  # 11 ms
        _way("local", 0.04, 0.02, kids=(1.0, 0.9)),  # driver 2 + worker 10 ms
        {"way": "local", "round": 1, "error": "RuntimeError: no"},
    ]
    result = fleet.render({"records": records, "loadavg": [0.5, 0.7]}, fleet.QUICK)
    rows = {row.label: row for row in result.rows}
    assert rows["CPU/session, hand-written AvatarSessions"].median == pytest.approx(10.0)
    assert rows["  runner overhead/session, inline"].median == pytest.approx(1.0)
    assert rows["  runner overhead, inline, of hand-written"].median == pytest.approx(10.0)
    assert rows["  driver's CPU/session"].median == pytest.approx(2.0)
    assert rows["  driver's share"].median == pytest.approx(100.0 / 6.0)
    assert rows["  runner overhead, local, of hand-written"].median == pytest.approx(20.0)
    answered = rows["sessions answered, run_fleet local, 1 worker"]
    assert (answered.median, answered.verdict) == (11.0, "PASS")
    ended = rows["speak -> agent_turn_ended, run_fleet inline"]
    assert (ended.n, ended.median) == (11, pytest.approx(100.0))
    assert any("local round 1: ERROR RuntimeError: no" in note for note in result.notes)
    local = next(note for note in result.notes if note.startswith("local round 0:"))
    assert "marginal ms CPU/session total 12.00, driver 2.00, worker 10.00" in local
    assert any("0.50 / 0.70" in note for note in result.notes)
    ways = {w["way"]: w for w in result.data["ways"]}
    assert ways["local"]["overhead_ms_per_session"] == pytest.approx(2.0)


def test_fleet_runs_the_same_sessions_as_the_hand_written_way() -> None:
    args = RunArgs("http://127.0.0.1:1", "secret-token", "inline", 20, 5.0, turn_timeout=7.0)
    plan = fleet_plan(args, 20)
    assert (plan.sessions, plan.rate, plan.workers, plan.turn_timeout) == (20, 5.0, 1, 7.0)
    assert plan.scenario is one_turn
    assert not plan.session.media and plan.session.allow_insecure_transport
    assert plan.session.session_config() == SessionConfig(**CONFIG_FIELDS)
    assert "secret-token" not in repr(plan)


def test_turn_latencies_come_from_the_answered_turns_of_the_json_lines() -> None:
    lines = [
        json.dumps({"kind": "turn", "ok": True, "ended_s": 0.25}),
        json.dumps({"kind": "turn", "ok": False, "ended_s": None, "error": "timeout"}),
        json.dumps({"kind": "greeting", "seconds": 0.1}),
    ]
    assert turn_latencies(lines) == [0.25]


def test_fleet_quick_plan_shares_the_load_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(load.QUICK_ENV, "1")
    assert fleet.current_plan() is fleet.QUICK
    monkeypatch.delenv(load.QUICK_ENV)
    assert fleet.current_plan() is fleet.FULL


def test_a_level_says_whose_saturation_it_measured() -> None:
    calm = {**_level(1000, 30.0), "machine_busy_cores": 0.5}
    assert saturation(calm) == []
    server = {**calm, "server_loop_lag_ms": {"p90_ms": 45.0}}
    assert saturation(server) == ["server"]
    client = {**calm, "client_core_share": 0.97, "machine_busy_cores": 2.0 * 0.96}
    assert saturation(client)[0] == "client"
    rendered = load._level_note(load.levels_with_ratios([_level(1, 20.0), server])[1])
    assert "saturated: server" in rendered and "server 45.0 ms" in rendered


def test_a_level_names_a_long_garbage_collection_as_its_cause() -> None:
    calm = {**_level(1000, 30.0), "machine_busy_cores": 0.5}
    short = {**calm, "client_gc": {"longest_ms": 20.0}, "server_gc": {"longest_ms": 5.0}}
    assert saturation(short) == []
    paused = {**calm, "client_gc": {"longest_ms": 643.4}, "server_gc": {"longest_ms": 251.2}}
    assert saturation(paused) == ["client GC (643 ms pause)", "server GC (251 ms pause)"]
    rendered = load._level_note(load.levels_with_ratios([_level(1, 20.0), paused])[1])
    assert "longest GC pause client 643 ms / server 251 ms" in rendered


def test_the_frozen_ramp_gives_its_own_ratio_row() -> None:
    measured = {
        "cpu": [],
        "turns": {"levels": [_level(1, 20.0), _level(1000, 400.0)]},
        "frozen_turns": {"levels": [_level(1, 20.0), _level(1000, 30.0)]},
    }
    result = load.render(measured, load.FULL)
    rows = {row.label: row for row in result.rows}
    frozen = rows["  p90 / 1 session's, 1000 sessions, gc.freeze() once connected"]
    assert frozen.median == pytest.approx(1.5) and frozen.verdict == "PASS"
    assert rows["  p90 / 1 session's, 1000 sessions"].verdict == "FAIL"
    assert result.data["frozen_turns"]["levels"][1]["p90_ratio"] == pytest.approx(1.5)


def test_the_loop_lag_figure_is_medians_per_level_and_codec_with_the_50_session_target() -> None:
    from benchmarks import loop_lag  # noqa: PLC0415 (only this test needs it)

    def probe(codec: str, sessions: int, p99: float, index: int) -> dict[str, Any]:
        return {
            "codec": codec, "sessions": sessions, "round": index, "lag_p50_ms": 1.0,
            "lag_p99_ms": p99, "client_cpu_pct_per_session": 2.0, "server_cpu_pct": 10.0,
            "machine_busy_cores": 1.0, "loadavg_1m_before": 0.5,
        }  # fmt: skip

    results = [
        probe("loop", 50, 6.0, 0), probe("thread", 50, 9.0, 0),
        probe("thread", 50, 11.0, 1), probe("loop", 50, 8.0, 1),
        {"codec": "loop", "sessions": 10, "round": 0, "error": "TimeoutError"},
    ]  # fmt: skip
    assert [(c, s) for s, c, _ in loop_lag.order((1, 50), 2)][:4] == [
        ("loop", 1), ("thread", 1), ("thread", 1), ("loop", 1)
    ]  # fmt: skip
    figure = loop_lag.figure(results, 2)
    rows = {r.label: r for r in figure.rows}
    on_loop = rows["loop lag p99, 50 sessions, audio_codec='loop'"]
    assert (on_loop.median, on_loop.verdict) == (pytest.approx(7.0), "PASS")
    assert rows["loop lag p99, 50 sessions, audio_codec='thread'"].target is None
    assert any("ERROR TimeoutError" in note for note in figure.notes)
