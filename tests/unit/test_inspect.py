"""``avatar-sdk inspect``: records (a journal's public events, a cassette's wire) turned into
the timeline model, the page drawn from it (escaped, nothing fetched), the journal's cut of
content-bearing events, and the command's exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from avatar_sdk._cli.main import main
from avatar_sdk.cassette.format import parse_lines
from avatar_sdk.errors import AvatarError
from avatar_sdk.events.bus import Event
from avatar_sdk.events.journal import Journal, journaled_data
from avatar_sdk.inspect.core.from_cassette import timeline_from_cassette
from avatar_sdk.inspect.core.from_journal import timeline_from_journal, timelines_from_journal
from avatar_sdk.inspect.core.timeline import Mark, Span, Timeline, Turn, seconds
from avatar_sdk.inspect.files import read_timelines
from avatar_sdk.inspect.render import CSP, render_page

SCRIPT = "<script>alert('x')</script>"


def line(t: float, event: str, **data: Any) -> dict[str, Any]:
    return {"t": t, "session": "s1", "event": event, "data": data}


def state(t: float, to: str, previous: str, trigger: str) -> dict[str, Any]:
    return line(t, "state_changed", state=to, previous=previous, trigger=trigger)


#: A journal of a session with a socket drop, a cold reconnect, a tool call and a renewal.
JOURNAL = [
    state(0.0, "connecting_socket", "idle", "start"),
    state(0.01, "connected", "connecting_socket", "approved"),
    line(0.011, "connected", thread_id="thr", duration=0.01),
    line(0.5, "turn_latency", source="speak", text_latency=0.1, audio_latency=None,
         generated_latency=0.3, played_latency=None, voice_to_voice=None, interrupted=False),
    state(1.0, "reconnecting", "connected", "transport_lost"),
    line(1.0, "reconnecting", tier="socket", attempt=1, max_attempts=5, reason="transport error"),
    state(1.2, "connected", "reconnecting", "recovered"),
    line(1.2, "reconnected", tier="socket", recovered=True, duration=0.2),
    line(1.5, "tool_call", name="open_filing", call_id="c1"),
    state(2.0, "reconnecting", "connected", "transport_lost"),
    line(2.0, "reconnecting", tier="socket", attempt=1, max_attempts=5, reason="transport error"),
    state(2.1, "cold_reconnecting", "reconnecting", "recovery_failed"),
    line(2.1, "reconnecting", tier="cold", attempt=1, max_attempts=6, reason="socket failed"),
    line(2.3, "reconnecting", tier="cold", attempt=2, max_attempts=6, reason="socket failed"),
    state(2.6, "connected", "cold_reconnecting", "cold_reconnected"),
    line(2.6, "reconnected", tier="cold", recovered=False, duration=0.6),
    line(3.0, "media_recovering", channel="stv", method="whep_resubscribe", attempt=1,
         reason="no frames for 3 s"),
    line(3.4, "media_recovered", channel="stv", method="whep_resubscribe", duration=0.4),
    line(4.0, "session_renewing", reason="manual", time_left=600.0),
    line(4.5, "session_renewed", renewals=1, gap=0.25, thread_id="thr",
         strategy="make_before_break", cut_turn=False, abandoned_tool_calls=[]),
    line(4.7, "brain_stalled", after=5.0, count=1),
    line(4.8, "error", code="protocol_error", message="bad frame", severity="warning",
         recoverable=True),
    state(5.0, "disconnecting", "connected", "end"),
    state(5.1, "ended", "disconnecting", "finished"),
    line(5.1, "ended", reason="closed", code=None, severity="info", recoverable=False,
         message="closed"),
]  # fmt: skip


def only(items: list[Any]) -> Any:
    assert len(items) == 1, items
    return items[0]


# -- the journal's timeline -------------------------------------------------------------------
def test_a_journal_draws_states_as_bands_end_to_end() -> None:
    timeline = timeline_from_journal(JOURNAL, "s1")
    assert timeline.source == "journal" and timeline.duration == 5.1
    labels = [s.label for s in timeline.states]
    assert labels == [
        "connecting_socket", "connected", "reconnecting", "connected", "reconnecting",
        "cold_reconnecting", "connected", "disconnecting", "ended",
    ]  # fmt: skip
    for before, after in zip(timeline.states, timeline.states[1:], strict=False):
        assert before.end == after.start  # contiguous: one state at a time
    assert dict(timeline.states[2].details) == {"trigger": "transport_lost"}


def test_a_journal_draws_each_recovery_by_tier_with_its_duration() -> None:
    timeline = timeline_from_journal(JOURNAL, "s1")
    recoveries = [s for s in timeline.spans if s.kind == "recovery"]
    assert [(s.tier, s.label) for s in recoveries] == [
        ("socket", "socket recovery (recovered)"),
        ("socket", "socket recovery (failed)"),  # escalated to the cold tier
        ("cold", "cold recovery (recovered)"),
        ("media", "media recovery (stv)"),
    ]
    socket, failed, cold, media = recoveries
    assert (socket.start, socket.end) == (1.0, 1.2)
    assert (failed.start, failed.end) == (2.0, 2.1)
    assert (cold.start, cold.end) == (2.1, 2.6)
    assert dict(cold.details)["attempts"] == "2"
    assert dict(cold.details)["duration"] == "0.6"  # the SDK's own figure
    assert dict(media.details)["reason"] == "no frames for 3 s"
    assert media.duration == pytest.approx(0.4)


def test_a_journal_draws_turns_renewals_tool_calls_stalls_and_errors() -> None:
    timeline = timeline_from_journal(JOURNAL, "s1")
    turn = only(timeline.turns)
    assert turn.start == pytest.approx(0.2)  # the line's time minus its largest figure
    assert turn.figure("text_latency") == 0.1 and turn.figure("generated_latency") == 0.3
    assert turn.figure("audio_latency") is None and turn.end == pytest.approx(0.5)
    renewal = only([s for s in timeline.spans if s.kind == "renewal"])
    assert (renewal.start, renewal.end) == (4.0, 4.5)
    assert dict(renewal.details)["strategy"] == "make_before_break"
    gap = only([s for s in timeline.spans if s.kind == "media_gap"])
    assert (gap.start, gap.end) == (4.25, 4.5)
    kinds = [(m.kind, m.label) for m in timeline.marks]
    assert kinds == [
        ("tool_call", "tool open_filing"),
        ("swap", "renewed (swap)"),
        ("stall", "brain stalled"),
        ("error", "error: protocol_error"),
    ]
    assert [m.t for m in timeline.of_kind("swap") if isinstance(m, Mark)] == [4.5]


def test_a_journal_cut_short_leaves_its_open_spans_open() -> None:
    cut = [e for e in JOURNAL if e["t"] <= 2.2]
    timeline = timeline_from_journal(cut, "s1")
    cold = only([s for s in timeline.spans if s.tier == "cold"])
    assert cold.label == "cold recovery (unfinished)" and cold.end == 2.1 + 0.0
    assert timeline.states[-1].label == "cold_reconnecting"


def test_a_journal_with_two_sessions_draws_each() -> None:
    other = [{**e, "session": "s2"} for e in JOURNAL[:3]]
    timelines = timelines_from_journal([*JOURNAL[:3], *other, {"junk": True}])
    assert [t.title for t in timelines] == ["s1", "s2"]


# -- the cassette's timeline ------------------------------------------------------------------
def rec(t: float, kind: str, **data: Any) -> str:
    return json.dumps({"t": t, "kind": kind, **data}) + "\n"


def raw_text(t: float, link: int, kind: str, content: str) -> str:
    delta = json.dumps({"type": kind, "content": content})
    return rec(t, "in", link=link, name="agent_raw_text", args=[{"speechId": "s", "delta": delta}])


HEADER = json.dumps({"kind": "cassette", "version": 1, "session": {"media": True}}) + "\n"
#: The wire of a session with a socket drop, a cold reconnect, a tool call and a renewal
#: (the shape a real recording has: tests/browser/test_inspect_page.py records one).
CASSETTE = [
    HEADER,
    rec(0.0, "call", name="connect", args={}),
    rec(0.01, "open", link=0, sid="a", recovered=False),
    rec(0.02, "out", link=0, name="approvedPermissions", payload={}),
    rec(0.03, "media", lane="stv", state="connected"),
    rec(0.5, "out", link=0, name="onTextEntered", payload={"text": "user-text-1", "isFinal": True}),
    raw_text(0.6, 0, "avatar", f"You said {SCRIPT}"),
    rec(0.8, "in", link=0, name="agent_end_turn", args=[{"speechId": "s"}]),
    rec(1.0, "drop", link=0, reason="transport error"),
    rec(1.2, "open", link=0, sid="a", recovered=True),
    raw_text(1.5, 0, "tool", 'open_filing {"doc": "' + SCRIPT + '"}'),
    rec(2.0, "drop", link=0, reason="transport error"),
    rec(2.05, "open", link=0, sid="b", recovered=False),
    rec(2.06, "drop", link=0, reason="io client disconnect"),
    rec(2.1, "open", link=1, sid="c", recovered=False),
    rec(2.3, "out", link=1, name="approvedPermissions", payload={}),
    rec(3.0, "media", lane="stv", state="disconnected"),
    rec(3.4, "media", lane="stv", state="connected"),
    rec(3.5, "media_sample", counts={"audio_in": 100, "audio_out": 5}),
    rec(4.5, "media_sample", counts={"audio_in": 100, "audio_out": 9}),  # no audio in
    rec(3.9, "call", name="renew", args={}),
    rec(4.0, "open", link=2, sid="d", recovered=False),
    rec(4.1, "out", link=2, name="approvedPermissions", payload={}),
    rec(4.6, "drop", link=1, reason="io client disconnect"),
    rec(4.7, "in", link=2, name="session_error", args=[{"code": "agent_crashed"}]),
    rec(4.8, "http", service="genie", method="POST", url="http://h/x", status=500),
    rec(5.0, "call", name="close", args={}),
    rec(5.1, "drop", link=2, reason="io client disconnect"),
    rec(5.2, "end", records=27),
]


def cassette_timeline() -> Timeline:
    return timeline_from_cassette(parse_lines(CASSETTE, "c.jsonl"), "c")


def test_a_cassette_draws_the_phases_the_wire_shows() -> None:
    timeline = cassette_timeline()
    assert timeline.source == "cassette" and timeline.duration == 5.1
    assert [(s.label, s.start) for s in timeline.states] == [
        ("connecting", 0.0),
        ("connected", 0.02),
        ("reconnecting", 1.0),
        ("connected", 1.2),
        ("reconnecting", 2.0),
        ("cold_reconnecting", 2.1),
        ("connected", 2.3),
        ("disconnecting", 5.0),
        ("ended", 5.1),
    ]
    assert "text_latency" in timeline.notes[0]


def test_a_cassette_draws_socket_and_cold_recoveries_and_a_renewal() -> None:
    timeline = cassette_timeline()
    recoveries = [(s.tier, s.label, s.start, s.end) for s in timeline.spans if s.kind == "recovery"]
    assert recoveries == [
        ("socket", "socket recovery (recovered)", 1.0, 1.2),
        ("socket", "socket recovery (failed)", 2.0, 2.1),
        ("cold", "cold recovery (recovered)", 2.1, 2.3),
    ]
    renewal = only([s for s in timeline.spans if s.kind == "renewal"])
    assert (renewal.start, renewal.end) == (4.0, 4.6)  # opened unseen, swapped at the close
    assert dict(renewal.details)["strategy"] == "make before break"
    assert [m.t for m in timeline.marks if m.kind == "swap"] == [4.6]
    assert [m.t for m in timeline.marks if m.kind == "drop"] == [1.0, 2.0]


def test_a_cassette_draws_turns_tool_calls_media_gaps_and_errors() -> None:
    timeline = cassette_timeline()
    turn = only(timeline.turns)
    assert turn.start == 0.5
    assert turn.figure("text_latency") == pytest.approx(0.1)
    assert turn.figure("generated_latency") == pytest.approx(0.3)
    assert turn.said == f"You said {SCRIPT}"
    tool = only([m for m in timeline.marks if m.kind == "tool_call"])
    assert tool.label == "tool open_filing" and SCRIPT in dict(tool.details)["args"]
    gaps = [(s.label, s.start, s.end) for s in timeline.spans if s.kind == "media_gap"]
    assert gaps == [
        ("media gap (stv)", 3.0, 3.4),
        ("media stalled (audio_in)", 3.5, 4.5),
    ]
    errors = [m.label for m in timeline.marks if m.kind == "error"]
    assert errors == ["session_error", "genie POST 500"]


def test_a_break_before_make_renewal_swaps_at_the_new_links_approval() -> None:
    lines = [
        HEADER,
        rec(0.0, "open", link=0, sid="a", recovered=False),
        rec(0.1, "out", link=0, name="approvedPermissions", payload={}),
        rec(1.0, "drop", link=0, reason="io client disconnect"),
        rec(1.1, "open", link=1, sid="b", recovered=False),
        rec(1.5, "out", link=1, name="approvedPermissions", payload={}),
    ]
    timeline = timeline_from_cassette(parse_lines(lines))
    renewal = only([s for s in timeline.spans if s.kind == "renewal"])
    assert (renewal.start, renewal.end) == (1.1, 1.5)
    assert dict(renewal.details)["strategy"] == "break before make"
    assert not [s for s in timeline.spans if s.kind == "recovery"]
    assert "no end record" in timeline.notes[-1]


# -- the page --------------------------------------------------------------------------------
def test_the_page_escapes_every_text_from_the_records() -> None:
    timeline = cassette_timeline()
    timeline.title = f"title {SCRIPT}"
    page = render_page([timeline], f"page {SCRIPT}")
    assert "<script" not in page.lower()
    assert "&lt;script&gt;" in page  # shown, not run
    assert page.count("<title>") == page.count("</title>")


def test_the_page_fetches_nothing_and_marks_every_element() -> None:
    page = render_page([timeline_from_journal(JOURNAL, "s1"), cassette_timeline()], "two")
    assert f'content="{CSP}"' in page and "default-src 'none'" in CSP
    urls = re.findall(r"""(?:src|href|url)\s*[=(]\s*["']?([^"' )>]+)""", page, flags=re.I)
    assert urls == []  # no script, stylesheet, image or font to load
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert page.count('data-kind="recovery" data-tier="cold"') == 2
    assert page.count('data-kind="turn"') == 2
    assert 'data-text-latency="0.1000"' in page and 'data-figure="generated_latency"' in page
    for kind in ("state", "renewal", "swap", "tool_call", "media_gap", "error", "drop"):
        assert f'data-kind="{kind}"' in page, kind


def test_a_hover_title_says_what_when_and_how_long() -> None:
    page = render_page([timeline_from_journal(JOURNAL, "s1")], "one")
    cold = re.search(r'data-tier="cold"[^>]*><title>([^<]*)</title>', page)
    assert cold is not None
    assert cold.group(1).splitlines()[:3] == [
        "cold recovery (recovered)",
        "at 2.100 s",
        "to 2.600 s (500 ms)",
    ]
    assert "attempts: 2" in cold.group(1)


def test_an_empty_record_still_draws_a_page() -> None:
    page = render_page([Timeline("t", "journal", 0.0)], "empty")
    assert "<svg" in page and "No turn." in page
    assert render_page([], "none").count("No session") == 1


def test_seconds_reads_for_a_human() -> None:
    assert [seconds(None), seconds(0.0123), seconds(1.256)] == ["-", "12 ms", "1.26 s"]
    assert Span("state", "x", 1.0).duration is None
    assert Turn(1, 2.0, "speak").end == 2.0


# -- the journal keeps no content -------------------------------------------------------------
def test_the_journal_keeps_only_the_operational_fields_of_content_bearing_events(
    tmp_path: Path,
) -> None:
    latency = {
        "source": "speak", "speech_id": "ab-transcript-my secret words", "text_latency": 0.1,
        "audio_latency": None, "generated_latency": 0.2, "played_latency": None,
        "voice_to_voice": None, "interrupted": False,
    }  # fmt: skip
    tool = {"name": "open", "args": {"q": "my words"}, "fused_args": [], "call_id": "c1",
            "speech_id": "ab-transcript-my words"}  # fmt: skip
    assert "speech_id" not in journaled_data("turn_latency", latency)
    assert journaled_data("tool_call", tool) == {"name": "open", "call_id": "c1"}
    assert journaled_data("turn_resent", {"text": "my words", "tier": "cold"}) == {"tier": "cold"}
    assert journaled_data("error", {"code": "x"}) == {"code": "x"}
    path = tmp_path / "j.jsonl"
    journal = Journal(path, session_label="s")
    for name, data in (("turn_latency", latency), ("tool_call", tool), ("session_renewed", {})):
        journal.record(Event(name, data))
    journal.close()
    text = path.read_text(encoding="utf-8")
    assert "my words" not in text and "secret" not in text
    assert [json.loads(x)["event"] for x in text.splitlines()] == [
        "turn_latency", "tool_call", "session_renewed",
    ]  # fmt: skip


# -- the file and the command -----------------------------------------------------------------
def test_read_timelines_tells_a_cassette_from_a_journal(tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    cassette.write_text("".join(CASSETTE), encoding="utf-8")
    journal = tmp_path / "j.jsonl"
    journal.write_text("".join(json.dumps(e) + "\n" for e in JOURNAL) + '{"t": 9', "utf-8")
    assert [t.source for t in read_timelines(cassette)] == ["cassette"]
    (drawn,) = read_timelines(journal)  # the partial last line is left out
    assert drawn.source == "journal" and drawn.duration == 5.1
    for text, why in (("[1]\n", "not a JSON object"), ('{"a": 1}\n', "neither"), ("", "JSON")):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(AvatarError, match=why):
            read_timelines(bad)
    with pytest.raises(AvatarError, match="cannot read it"):
        read_timelines(tmp_path / "missing.jsonl")


def test_the_command_writes_the_page_and_exits_2_on_a_bad_file(tmp_path: Path) -> None:
    journal = tmp_path / "session.jsonl"
    journal.write_text("".join(json.dumps(e) + "\n" for e in JOURNAL), encoding="utf-8")
    runner = CliRunner()
    done = runner.invoke(main, ["inspect", str(journal)])
    assert done.exit_code == 0, done.output
    page = tmp_path / "session.html"
    assert done.output.strip() == f"{page} (1 session)"
    assert 'data-tier="cold"' in page.read_text(encoding="utf-8")
    out = tmp_path / "other.html"
    assert runner.invoke(main, ["inspect", str(journal), "-o", str(out)]).exit_code == 0
    assert out.is_file()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n", encoding="utf-8")
    failed = runner.invoke(main, ["inspect", str(bad)])
    assert failed.exit_code == 2 and "not a cassette or a journal" in failed.output
    same = runner.invoke(main, ["inspect", str(journal), "-o", str(journal)])
    assert same.exit_code == 2 and "overwrite" in same.output
