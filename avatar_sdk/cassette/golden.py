"""The golden capture (``tests/fixtures/golden-session.json``) as a cassette.

The golden capture is no recording in time order: it lists the event names a real session
carried each way and each payload's shape (field -> type). :func:`golden_cassette` lays
them out as one control-plane session in protocol order (PROTOCOL.md §2 and §3: connect,
greeting, a typed turn, barge-in, pause and resume, mute and unmute, close), each inbound
payload built from its golden shape (typed placeholder values, with the few values the
protocol gives a meaning to: speech ids, brain segments), and each outbound record carrying
its golden shape, which a replay checks the SDK's payload against. The media signalling
(``asr-webrtc-*``) is live in a replay and is left out, as are the client events this SDK
never sends (``tapToTalk*``, ``debug_text_entered``: see ``docs/replay.md``).
"""

from __future__ import annotations

import json
from typing import Any, Final

from ..wire.speech import make_speech_id
from .format import FORMAT_VERSION, HEADER_KIND, Cassette, Record

#: Golden outbound events a replay does not expect from this SDK, and why.
NOT_SENT: Final = {
    "asr-webrtc-init": "media signalling: live in a replay",
    "asr-webrtc-offer": "media signalling: live in a replay",
    "asr-webrtc-ice-candidate": "media signalling: live in a replay",
    "checkAvailability": "a probe: answered live in a replay",
    "debug_text_entered": "the reference client's debug mirror; this SDK does not send it",
    "tapToTalkStart": "tap-to-talk is not part of this SDK's API",
    "tapToTalkEnd": "tap-to-talk is not part of this SDK's API",
}
#: Golden inbound events not scripted (answered live by the replay's real peers).
LIVE: Final = frozenset(
    {"asr-webrtc-ready", "asr-webrtc-answer", "asr-ice-candidate", "availabilityResult"}
)

#: Golden shape fields this SDK leaves out on purpose (PROTOCOL.md §1.3: ``cast_mode`` is
#: never sent; the service then answers a public WHEP URL).
LEFT_OUT: Final = {"out stvNewSession": ("cast_mode",)}

_TYPES: Final = {"str": "golden", "int": 1, "bool": True, "NoneType": None, "float": 0.5}


def from_shape(shape: Any) -> Any:
    """A value of ``shape`` (a golden field -> type map) with placeholder values."""
    if isinstance(shape, dict):
        return {key: from_shape(value) for key, value in shape.items()}
    if isinstance(shape, list):
        return [from_shape(shape[0])] if shape else []
    return _TYPES.get(str(shape), "golden")


def _segment(n: int, kind: str, content: str) -> str:
    return json.dumps(
        {"role": "assistant", "segmentNumber": n, "et": 0.05 * n, "type": kind, "content": content}
    )


def golden_cassette(golden: dict[str, Any], *, source: str = "golden-session.json") -> Cassette:
    """The golden capture laid out as a replayable cassette (control plane)."""
    shapes: dict[str, Any] = golden.get("shapes", {})
    steps: list[tuple[str, dict[str, Any]]] = []

    def add(kind: str, data: dict[str, Any]) -> None:
        steps.append((kind, data))

    def inbound(name: str, **values: Any) -> None:
        payload = from_shape(shapes.get(f"in {name}", {}))
        if isinstance(payload, dict):
            payload.update(values)
        add("in", {"link": 0, "name": name, "args": [payload]})

    def outbound(name: str, **values: Any) -> None:
        data: dict[str, Any] = {"link": 0, "name": name, "payload": values}
        shape = shapes.get(f"out {name}")
        if isinstance(shape, dict):
            left_out = LEFT_OUT.get(f"out {name}", ())
            data["shape"] = {k: v for k, v in shape.items() if k not in left_out}
        add("out", data)

    def call(name: str, **args: Any) -> None:
        add("call", {"name": name, "args": args})

    def agent_turn(speech: str, text: str, turn: str) -> None:
        ids = {"speechId": speech}
        inbound("agent_start_speech", **ids, turnId=turn, isNewTurn=True)
        inbound("agent_raw_text", **ids, turnId=turn, delta=_segment(1, "text", text))
        inbound("generatingSpeech", **ids, text=text)
        inbound("debug_stvTaskGenerated", **ids, text=text, duration=400)
        inbound("stvSpeechChunk", **ids, text=text, durationMs=400)
        inbound("stvStartedTalking")
        inbound("agent_end_turn", **ids, turnId=turn)
        inbound("stvFinishedGenerating", **ids)
        inbound("stvFinishedTalking", agentContent=text)
        inbound("debug_conversationStateChange", state="listening", preparingAnswerState="idle")

    user_text = "What can you do?"
    greeting = make_speech_id("approved-permissions", nonce="GLDN")
    answer = make_speech_id("transcript", user_text, nonce="GLDA")
    call("connect")
    add("open", {"link": 0, "sid": "golden", "recovered": False})
    inbound("onServerConnected", finalUrl="http://golden", agentName="Golden", hostName="pod")
    outbound("join")
    inbound("clientConfiguration")
    inbound("joinComplete")
    outbound("stvNewSession")
    inbound("stvNewSession", session_id="golden-stv", status="session started", webrtc_url="")
    inbound("showAgent")
    inbound("askPermissions", constraints={"audio": True, "video": False})
    outbound("approvedPermissions")
    agent_turn(greeting, "Hello! I am the golden avatar.", "turn-1")
    call("speak", text=user_text)
    outbound("onTextEntered", text="", isFinal=False, isSpeechStart=True)
    outbound("onTextEntered", text=user_text, isFinal=True)
    inbound("agentTurnToTalk", userTranscription=user_text)
    inbound("userStartedTalking")
    inbound("debug_vad_speech_detected", transcript=user_text, isFinal=True)
    inbound(
        "debug_llm_input", userInput=user_text, finalSegment=user_text, pendingSegment="",
        speechId=answer, segmentType="final", isFinal=True,
    )  # fmt: skip
    agent_turn(answer, "I can answer questions.", "turn-2")
    call("interrupt")
    outbound("onTextEntered", text="", isFinal=False, isSpeechStart=True)
    inbound("agentInterrupted")
    call("pause")
    outbound("pauseConversation")
    call("resume")
    outbound("resumeConversation")
    inbound("conversationResumed")
    call("set_mic", enabled=False)
    outbound("muteUser")
    call("set_mic", enabled=True)
    outbound("unmuteUser")
    inbound("hideTapToTalkButton")
    call("close")
    add("drop", {"link": 0, "reason": "io client disconnect"})

    records = [Record(i, round(0.01 * i, 3), kind, data) for i, (kind, data) in enumerate(steps)]
    header = {
        "kind": HEADER_KIND,
        "version": FORMAT_VERSION,
        "sdk": "golden",
        "record_content": True,
        "session": {"media": False, "video": False, "thread_id": None, "config": {}},
        "golden": {"source": golden.get("_source", "")},
    }
    return Cassette(header, records, complete=True, source=source)


def golden_coverage(golden: dict[str, Any], cassette: Cassette) -> dict[str, list[str]]:
    """Golden event names the cassette leaves out, each way (for a test to hold at the
    documented exceptions: :data:`NOT_SENT` and :data:`LIVE`)."""
    scripted_in = {r.name for r in cassette.records if r.kind == "in"}
    scripted_out = {r.name for r in cassette.records if r.kind == "out"}
    return {
        "in": sorted(set(golden.get("inboundEvents", [])) - scripted_in),
        "out": sorted(set(golden.get("outboundEvents", [])) - scripted_out),
    }


__all__ = ["LEFT_OUT", "LIVE", "NOT_SENT", "from_shape", "golden_cassette", "golden_coverage"]
