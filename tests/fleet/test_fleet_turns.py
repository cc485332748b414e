"""Fleet figures that describe real turns (issue 18, item 9), with the inline engine against
a real StagingServer: a turn's clock starts when the turn is sent (the wait for the greeting
or the previous answer still being said is reported apart, ``wait_s``), and the report has
a row per turn index besides the all-turns row."""

from __future__ import annotations

from pathlib import Path

from avatar_sdk.fleet import FleetPlan, run_fleet
from avatar_sdk.fleet.report import summary_rows
from avatar_sdk.testing import StagingServer

from .conftest import by_kind, read_jsonl, spec_for

SCENARIOS = "tests.fleet.scenarios"
#: Sixty words: fifteen caption chunks of 400 ms at the staging scale (0.25): 1.5 s of talk.
GREETING = "Hello! " + " ".join(f"word{i}" for i in range(59))


def talk_seconds(staging: StagingServer, text: str) -> float:
    chunks = -(-len(text.split()) // staging.brain.chunk_words)
    return chunks * 0.4 * staging.speech_time_scale


async def test_text_turns_exclude_the_greeting_wait_and_report_per_turn_index(
    staging: StagingServer, tmp_path: Path
) -> None:
    staging.brain.greeting = GREETING
    greeting_talk = talk_seconds(staging, GREETING)  # 1.5 s
    plan = FleetPlan(f"{SCENARIOS}:two_turns", spec_for(staging), sessions=3, rate=50.0)
    jsonl = tmp_path / "run.jsonl"
    report = await run_fleet(plan, engine="inline", jsonl=jsonl)
    assert report.ok, report.stats

    turns = by_kind(read_jsonl(jsonl), "turn")
    assert len(turns) == 6
    first = [t for t in turns if t["turn"] == 0]
    second = [t for t in turns if t["turn"] == 1]
    for turn in first:
        # The greeting was still being said when the scenario's first turn came: the turn
        # waited for it, and that wait is reported apart ...
        assert turn["wait_s"] >= 0.5 * greeting_talk, turn
        # ... not on the turn's clock, which starts when the turn is sent (a text turn's
        # answer on loopback: milliseconds; a clock that waited would read >= 0.75 s).
        assert turn["ended_s"] < 0.5 * greeting_talk, turn
        assert 0 < turn["text_s"] <= turn["ended_s"]
    for turn in second:
        assert turn["wait_s"] >= 0 and 0 < turn["text_s"] <= turn["ended_s"]

    by_turn = report.stats["by_turn"]
    assert sorted(by_turn) == ["0", "1"]
    for index, items in (("0", first), ("1", second)):
        row = by_turn[index]
        assert (row["ok"], row["failed"]) == (3, 0)
        assert row["generated"]["count"] == 3 and row["wait"]["count"] == 3
        assert row["generated"]["max"] == max(t["ended_s"] for t in items)
    assert by_turn["0"]["wait"]["p50"] >= 0.5 * greeting_talk
    assert report.stats["latency"]["generated"]["count"] == 6  # the all-turns figure stays

    labels = [row[0] for row in summary_rows(report.stats)]
    for label in ("reply: generated", "reply: generated, turn 0", "reply: generated, turn 1",
                  "turn: wait before sending, turn 0"):  # fmt: skip
        assert label in labels, labels
