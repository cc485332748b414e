"""The staging brain's scripts, as wire events (pure): fused tool segments and voice turns
in the order the service sends them (PROTOCOL.md §3.6, §3.9)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from avatar_sdk.testing import Brain
from avatar_sdk.testing.staging.brain import ToolSegment
from avatar_sdk.testing.staging.conversation import TurnProgress
from avatar_sdk.testing.staging.vad import ListenConfig, UtteranceDetector
from avatar_sdk.wire import In, make_speech_id

SPEECH = make_speech_id("transcript", "open the filing", nonce="ab12")


def _deltas(events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [json.loads(p["delta"]) for e, p in events if e == In.AGENT_RAW_TEXT]


def _tools(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    return [(d["type"], d["content"]) for d in _deltas(events) if d["type"].startswith("tool")]


def test_fused_calls_are_one_segment_named_after_the_last_tool() -> None:
    segment = ToolSegment.fused(['highlight_chart {"id": 7}', 'open_filing {"doc": "10-K"}'])
    assert segment.content == 'open_filing {"id": 7}{"doc": "10-K"}'
    assert segment.responses == ("highlight_chart", "open_filing")
    with pytest.raises(ValueError):
        ToolSegment.fused(['{"no": "name"}'])
    with pytest.raises(ValueError):
        ToolSegment.fused(["open_filing [1, 2]"])


def test_a_fused_turn_echoes_every_name_in_call_order() -> None:
    brain = Brain()
    calls = ['highlight_chart {"id": 7}', 'note_down {"text": "a{b}"}', 'open_filing {"d": 1}']
    brain.tool_calls(calls, then="Done.", fused=True)
    plan = brain.next_plan("open the filing")
    events = brain.turn_events(
        speech_id=SPEECH, turn_id="t1", text="Done.", thread_id=None, tool_calls=plan.tool_calls
    )
    assert _tools(events) == [
        ("tool", 'open_filing {"id": 7}{"text": "a{b}"}{"d": 1}'),
        ("tool_response", "highlight_chart responded with size 2"),
        ("tool_response", "note_down responded with size 2"),
        ("tool_response", "open_filing responded with size 2"),
    ]


def test_tool_call_groups_mix_single_and_fused_segments() -> None:
    brain = Brain()
    brain.tool_calls(['a {"n": 1}', ['b {"n": 2}', 'c {"n": 3}']])
    plan = brain.next_plan("go")
    events = brain.turn_events(
        speech_id=SPEECH, turn_id="t1", text="", thread_id=None, tool_calls=plan.tool_calls
    )
    assert _tools(events) == [
        ("tool", 'a {"n": 1}'),
        ("tool_response", "a responded with size 2"),
        ("tool", 'c {"n": 2}{"n": 3}'),
        ("tool_response", "b responded with size 2"),
        ("tool_response", "c responded with size 2"),
    ]


def test_a_voice_answer_hands_off_after_generating_speech() -> None:
    brain = Brain()
    events = brain.turn_events(
        speech_id=SPEECH,
        turn_id="t1",
        text="Here is the filing you asked for.",
        thread_id=None,
        user_transcription="open the filing",
    )
    names = [e for e, _ in events]
    hand_off = names.index(In.AGENT_TURN_TO_TALK)
    assert names.index(In.AGENT_START_SPEECH) < names.index(In.GENERATING_SPEECH) < hand_off
    assert names.index(In.DEBUG_STV_TASK_GENERATED) < hand_off < names.index(In.STV_SPEECH_CHUNK)
    assert hand_off < names.index(In.STV_STARTED_TALKING) < names.index(In.AGENT_END_TURN)
    assert names[-1] == In.DEBUG_CONVERSATION_STATE_CHANGE
    assert events[-1][1] == {"state": "Idle", "preparingAnswerState": "Idle"}
    assert events[hand_off][1] == {"userTranscription": "open the filing"}


def test_a_voice_turn_without_speech_hands_off_before_its_tools() -> None:
    brain = Brain()
    events = brain.turn_events(
        speech_id=SPEECH,
        turn_id="t1",
        text="",
        thread_id=None,
        tool_calls=['open_filing {"d": 1}'],
        user_transcription="open the filing",
    )
    names = [e for e, _ in events]
    first_tool = next(
        i
        for i, (e, p) in enumerate(events)
        if e == In.AGENT_RAW_TEXT and json.loads(p["delta"])["type"] == "tool"
    )
    assert names.index(In.AGENT_TURN_TO_TALK) < first_tool


def test_typed_turns_carry_no_voice_events() -> None:
    events = Brain().turn_events(speech_id=SPEECH, turn_id="t1", text="Hi.", thread_id=None)
    names = {e for e, _ in events}
    assert In.AGENT_TURN_TO_TALK not in names
    assert not any(n.startswith("debug_") for n in names)


def test_asr_events_grow_interim_transcripts_then_finalise() -> None:
    events = Brain.asr_events("what is the weather in Paris", SPEECH)
    vad = [p for e, p in events if e == In.DEBUG_VAD_SPEECH_DETECTED]
    assert [v["isFinal"] for v in vad] == [False, False, False, True]
    assert vad[0]["isSpeechStartEvent"] is True
    assert not any(v["isSpeechStartEvent"] for v in vad[1:])
    assert all(vad[-1]["transcript"].startswith(v["transcript"]) for v in vad)
    assert vad[-1] == {
        "transcript": "what is the weather in Paris",
        "isFinal": True,
        "segmentType": "final",
        "isSpeechStartEvent": False,
    }
    tail = [e for e, _ in events[len(vad) :]]
    assert tail == [In.DEBUG_CONVERSATION_STATE_CHANGE, In.DEBUG_LLM_INPUT]
    assert events[-1][1]["speechId"] == SPEECH
    one_word = Brain.asr_events("hello", SPEECH)
    assert [p["isSpeechStartEvent"] for e, p in one_word if e == In.DEBUG_VAD_SPEECH_DETECTED] == [
        True
    ]


# -- energy-based utterance detection (brain.listen) ------------------------------------------
def _feed(detector: UtteranceDetector, level: float, seconds: float) -> list[str]:
    verdicts = [detector.feed(level, 0.02) for _ in range(round(seconds / 0.02))]
    return [v for v in verdicts if v is not None]


def test_a_burst_then_silence_is_one_utterance() -> None:
    detector = UtteranceDetector(ListenConfig(threshold=0.05, min_speech=0.2, silence=0.4))
    assert _feed(detector, 0.0, 1.0) == []
    assert _feed(detector, 0.2, 0.1) == []  # too short yet
    assert _feed(detector, 0.2, 0.2) == ["onset"]
    assert _feed(detector, 0.2, 1.0) == []
    assert _feed(detector, 0.01, 0.3) == []  # a pause shorter than the silence
    assert _feed(detector, 0.2, 0.1) == []  # talking again: the pause is forgotten
    assert _feed(detector, 0.01, 0.4) == ["utterance"]
    assert not detector.speaking


def test_a_click_is_not_speech() -> None:
    detector = UtteranceDetector(ListenConfig(threshold=0.05, min_speech=0.2, silence=0.4))
    for _ in range(10):
        assert _feed(detector, 0.5, 0.1) + _feed(detector, 0.0, 0.1) == []


def test_listen_config_is_checked_and_transcripts_run_out_gracefully() -> None:
    with pytest.raises(ValueError):
        ListenConfig(threshold=0.0)
    brain = Brain()
    brain.listen(["first"])
    assert brain.listening == ListenConfig()
    assert [brain.next_transcript(), brain.next_transcript()] == ["first", "utterance 2"]
    brain.stop_listening()
    assert brain.listening is None


def test_a_cut_turn_reports_the_whole_words_spoken_before_it() -> None:
    """``agentContent`` of a cut turn (issue 17 item 11): the words said by the cut, timed
    as the caption tracker spreads them over their chunk; nothing before the first ends."""
    one = TurnProgress(chunks=[("word0 word1 word2 word3", 400)], talking_since=10.0)
    assert one.said(1.0, now=10.0) == ""
    assert one.said(1.0, now=10.099) == ""
    assert one.said(1.0, now=10.25) == "word0 word1"
    assert one.said(1.0, now=10.4) == "word0 word1 word2 word3"
    assert one.said(0.25, now=10.05) == "word0 word1"  # the staging's sped-up speech
    two = TurnProgress(chunks=[("a b", 200), ("c d", 200)], talking_since=0.0)
    assert two.said(1.0, now=0.3) == "a b c"
    assert two.said(1.0, now=5.0) == "a b c d"
    assert TurnProgress(chunks=[("a b", 200)]).said(1.0, now=5.0) == ""  # never talked


def test_a_raw_fused_segment_echoes_one_response_per_call_in_call_order() -> None:
    """Issue 17 item 12: a raw ``tool`` content that carries several argument objects but
    names only the last tool is a fused segment: one ``tool_response`` per call, the
    unnamed calls first (named as scripted, else ``unnamed_<n>``), the named tool last."""
    brain = Brain()
    brain.tool_calls(['open_filing {"chart": "revenue"}{"doc": "10-K"}'])
    brain.tool_calls(
        [ToolSegment.raw('open_filing {"chart": "{x}"}{"doc": "10-K"}', ["highlight_chart"])]
    )
    turns = []
    for _ in range(2):
        plan = brain.next_plan("go")
        turns.append(
            _tools(
                brain.turn_events(
                    speech_id=SPEECH,
                    turn_id="t",
                    text="",
                    thread_id=None,
                    tool_calls=plan.tool_calls,
                )
            )
        )
    assert turns[0] == [
        ("tool", 'open_filing {"chart": "revenue"}{"doc": "10-K"}'),
        ("tool_response", "unnamed_1 responded with size 2"),
        ("tool_response", "open_filing responded with size 2"),
    ]
    assert turns[1][1:] == [
        ("tool_response", "highlight_chart responded with size 2"),
        ("tool_response", "open_filing responded with size 2"),
    ]
    assert ToolSegment.single('open_filing {"doc": "10-K"}').responses == ("open_filing",)
    assert ToolSegment.single("no_args").responses == ("no_args",)
    with pytest.raises(ValueError):  # one name per unnamed call, no more, no fewer
        ToolSegment.raw('open_filing {"a": 1}{"b": 2}', ["x", "y"])
    with pytest.raises(ValueError):
        ToolSegment.raw('open_filing {"a": 1}{"b": 2}', ["has space"])


def test_tool_items_as_objects_name_the_unnamed_calls() -> None:
    """The JSON form of ``ToolSegment.raw`` (what the control API passes through)."""
    brain = Brain()
    brain.tool_calls([{"content": 'open_filing {"a": 1}{"b": 2}', "unnamed": ["highlight_chart"]}])
    plan = brain.next_plan("go")
    assert plan.tool_calls == [
        ToolSegment('open_filing {"a": 1}{"b": 2}', ("highlight_chart", "open_filing"))
    ]
    for bad in ({"content": 7}, {"content": "x {}", "extra": 1}, {"content": "x", "unnamed": "y"}):
        with pytest.raises(ValueError):
            brain.tool_calls([bad])
