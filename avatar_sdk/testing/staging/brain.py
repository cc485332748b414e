"""The staging backend's scripted brain: what the agent says, and how it misbehaves.

A turn is a list of wire events the server streams after a user turn, in the order the real
conversation manager sends them (PROTOCOL.md §3.9). Tests script replies, tool calls and
stalls; anything unscripted gets a short echo reply. :meth:`Brain.voice_turn` plays what
the service emits when its speech recognition finalises a user utterance.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...wire.names import In
from ...wire.segments import parse_delta, parse_tool_call
from ...wire.speech import make_speech_id
from .state import LiveConversation
from .vad import ListenConfig

WireEvent = tuple[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ToolSegment:
    """One ``tool`` segment and the tool names its ``tool_response`` segments echo after it,
    in call order (PROTOCOL.md §3.6)."""

    content: str
    responses: tuple[str, ...]

    @classmethod
    def single(cls, call: str) -> ToolSegment:
        """A raw ``tool`` segment content (``name {json}``): one ``tool_response`` per
        argument object, as :meth:`raw` with no names given."""
        return cls.raw(call)

    @classmethod
    def raw(cls, content: str, unnamed: Sequence[str] | None = None) -> ToolSegment:
        """A ``tool`` segment sent exactly as ``content``. Content carrying several argument
        objects (``open_filing {"chart": "revenue"}{"doc": "10-K"}``) is a fused segment:
        the service's brain names only the last tool, and the tool runner echoes every
        call, in call order. ``unnamed``: the names of the calls before the named one, in
        order (default ``unnamed_1``, ``unnamed_2``...); a client pairs each echo with an
        argument object, so one echo per object is what lets it recover them all."""
        name = content.split("{", 1)[0].strip() or "tool"
        objects = _argument_objects(content)
        if unnamed is None:
            earlier = tuple(f"unnamed_{n}" for n in range(1, objects))
        else:
            earlier = tuple(str(n) for n in unnamed)
            if len(earlier) != max(0, objects - 1):
                raise ValueError(
                    f"{content!r} carries {objects} argument objects: name the "
                    f"{max(0, objects - 1)} before the last, not {len(earlier)}"
                )
            if not all(n and n.split() == [n] and "{" not in n for n in earlier):
                raise ValueError(f"tool names are single words, got {list(earlier)}")
        return cls(content, (*earlier, name))

    @classmethod
    def fused(cls, calls: Sequence[str]) -> ToolSegment:
        """Several calls fused the way the brain does it: ONE segment carrying every call's
        JSON arguments back to back, named after the last tool only, then one
        ``tool_response`` per call echoing every name in call order."""
        names: list[str] = []
        blobs: list[str] = []
        for call in calls:
            name, brace, rest = call.partition("{")
            name = name.strip()
            blob = (brace + rest).strip()
            try:
                args = json.loads(blob) if blob else None
            except ValueError:
                args = None
            if not name or not isinstance(args, dict):
                raise ValueError(f"a fused call must read 'name {{json object}}', got {call!r}")
            names.append(name)
            blobs.append(blob)
        if not names:
            raise ValueError("a fused tool segment needs at least one call")
        return cls(f"{names[-1]} " + "".join(blobs), tuple(names))


def _argument_objects(content: str) -> int:
    """How many top-level JSON argument objects a ``tool`` content carries (parsed as the
    clients parse it, PROTOCOL.md §3.6)."""
    call = parse_tool_call(parse_delta(json.dumps({"type": "tool", "content": content}), None))
    if call is None:
        return 0
    return len(call.fused_args) + (1 if "{" in content else 0)


#: What ``Brain.tool_calls`` accepts per item: a raw segment content, a fused group, or
#: (the JSON form of :meth:`ToolSegment.raw`) ``{"content": ..., "unnamed": [...]}``.
ToolCallSpec = str | Sequence[str] | ToolSegment | Mapping[str, Any]


def _raw_from_mapping(spec: Mapping[str, Any]) -> ToolSegment:
    content, unnamed = spec.get("content"), spec.get("unnamed")
    if not isinstance(content, str) or set(spec) - {"content", "unnamed"}:
        raise ValueError(f"a tool item object reads {{content, unnamed?}}, got {dict(spec)!r}")
    if unnamed is not None and (
        not isinstance(unnamed, list) or not all(isinstance(n, str) for n in unnamed)
    ):
        raise ValueError(f"'unnamed' is a list of tool names, got {unnamed!r}")
    return ToolSegment.raw(content, unnamed)


def tool_segment(call: str | ToolSegment) -> ToolSegment:
    return call if isinstance(call, ToolSegment) else ToolSegment.single(call)


#: A user turn the staging brain answers from the thread's memory (``Brain.next_plan``):
#: "Before, you said: <the thread's previous user turn>", whichever server session heard it.
RECALL_PROMPT = "What did I say before?"


def _normalize(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass
class TurnPlan:
    """One scripted turn (:meth:`Brain.next_plan`): its text, tool calls and stall."""

    text: str | None = None
    tool_calls: list[str | ToolSegment] = field(default_factory=list)
    stall: float | None = None
    #: Indices into ``tool_calls`` where a new agent turn (``agent_start_speech`` with
    #: ``isNewTurn``) begins; set by :meth:`Brain.tool_spiral`.
    turn_splits: tuple[int, ...] = ()
    #: Each tool segment carries ``tool_metadata`` {id, wait_for_response: true}: the agent
    #: waits for the client's ``respond_to_tool`` (PROTOCOL §3.6).
    wait_for_response: bool = False


class Brain:
    """Scripted replies. Each ``reply``/``stall``/``tool_calls`` call scripts the next turn."""

    def __init__(self, conversations: Mapping[str, LiveConversation] | None = None) -> None:
        """``conversations``: the server's live client sessions, which :meth:`voice_turn`
        speaks to (None: a brain on its own, which scripts turns but hears nobody)."""
        self._conversations = conversations
        self._script: deque[TurnPlan] = deque()
        self.greeting = "Hello! I am the staging avatar. How can I help?"
        self.chunk_words = 4
        self.turns_started = 0
        self._active: TurnPlan | None = None
        #: Energy-based utterance detection on the uplink (None: off), see :meth:`listen`.
        self.listening: ListenConfig | None = None
        self._transcripts: deque[str] = deque()
        self._heard = 0
        self._call_ids = itertools.count(1)

    def reply(self, text: str) -> None:
        """The next turn's spoken answer."""
        self._script.append(TurnPlan(text=text))

    def stall(self, seconds: float) -> None:
        """After the next user turn, stay silent for ``seconds`` before answering."""
        self._script.append(TurnPlan(stall=seconds))

    def tool_calls(
        self,
        calls: Sequence[ToolCallSpec],
        *,
        then: str | None = None,
        fused: bool = False,
        wait_for_response: bool = False,
    ) -> None:
        """The next turn calls tools, then says ``then`` (if given).

        Each item of ``calls`` is one ``tool`` segment: a raw content ``'name {json}'``
        (followed by one ``tool_response`` per argument object: see
        :meth:`ToolSegment.raw`, whose JSON form ``{"content": ..., "unnamed": [...]}``
        is accepted too), or a list of such calls fused
        into one segment as the service's brain does when it calls several tools at once
        (every call's arguments back to back, named after the last tool only, then one
        ``tool_response`` per call echoing every name in call order; PROTOCOL.md §3.6).
        ``fused=True`` fuses the whole list into one segment. ``wait_for_response=True``:
        each segment carries a call id (``call-1``, ``call-2``...) that the client
        acknowledges with ``respond_to_tool`` (received in ``staging.tool_responses``).
        """
        if fused:
            if not all(isinstance(call, str) for call in calls):
                raise ValueError("fused=True takes a list of 'name {json}' strings")
            calls = [[str(call) for call in calls]]
        segments: list[str | ToolSegment] = []
        for spec in calls:
            if isinstance(spec, str | ToolSegment):
                segments.append(spec)
            elif isinstance(spec, Mapping):
                segments.append(_raw_from_mapping(spec))
            else:
                segments.append(ToolSegment.fused(list(spec)))
        self._script.append(
            TurnPlan(text=then, tool_calls=segments, wait_for_response=wait_for_response)
        )

    def tool_spiral(
        self,
        count: int,
        *,
        name: str = "navigate_to_slide",
        turn_boundaries: int = 0,
        identical: bool = False,
    ) -> None:
        """The next turn is a tool-call spiral: ``count`` raw ``tool`` segments named ``name``
        and no spoken text, split into ``turn_boundaries + 1`` agent turns.

        Args vary (``{"slide": 1}``, ``{"slide": 2}``, ...) unless ``identical`` (every call
        ``{"slide": 1}``: one dispatch, the rest de-duplicated; the spiral count is the same).
        On the socket each extra agent turn starts with ``agent_start_speech`` (``isNewTurn``,
        a ``wake-up`` speechId), which resets the soft tier but not the hard one. A chat
        (converse) response is one turn whatever the boundaries.
        """
        count = max(0, int(count))
        groups = max(1, int(turn_boundaries) + 1)
        calls: list[str | ToolSegment] = [
            f"{name} " + json.dumps({"slide": 1 if identical else i + 1}) for i in range(count)
        ]
        splits = tuple(sorted({(count * k) // groups for k in range(1, groups)} - {0}))
        self._script.append(TurnPlan(text=None, tool_calls=calls, turn_splits=splits))

    def listen(
        self,
        transcripts: Sequence[str] = (),
        *,
        threshold: float = 0.02,
        min_speech: float = 0.25,
        silence: float = 0.6,
    ) -> None:
        """Treat real uplink audio as speech (:mod:`.vad`): a burst whose frames reach
        ``threshold`` RMS for ``min_speech`` seconds is the user talking
        (``userStartedTalking``, barging in on a talking avatar), and ``silence`` seconds
        of quiet after it end the utterance, which becomes a voice turn (as
        :meth:`voice_turn`) whose transcription is the next of ``transcripts`` (then
        ``"utterance <n>"``)."""
        self.listening = ListenConfig(float(threshold), float(min_speech), float(silence))
        self._transcripts = deque(str(t) for t in transcripts)

    def stop_listening(self) -> None:
        """Uplink audio is ignored again (the default)."""
        self.listening = None

    def next_transcript(self) -> str:
        """What the next detected utterance "said"."""
        self._heard += 1
        return self._transcripts.popleft() if self._transcripts else f"utterance {self._heard}"

    def clear(self) -> None:
        self._script.clear()

    def next_plan(self, user_text: str, memory: Sequence[str] = ()) -> TurnPlan:
        """The next turn's plan: the scripted one, else an echo of ``user_text``; the
        :data:`RECALL_PROMPT` is answered from ``memory`` (the thread's user turns, this
        one last), across the thread's server sessions."""
        echo = f"You said: {user_text}" if user_text else "I am listening."
        if _normalize(user_text) == _normalize(RECALL_PROMPT):
            earlier = [t for t in memory[:-1] if _normalize(t) != _normalize(RECALL_PROMPT)]
            echo = f"Before, you said: {earlier[-1]}" if earlier else "You said nothing before."
        if self._script:
            plan = self._script.popleft()
            if plan.stall is not None and plan.text is None and not plan.tool_calls:
                plan.text = echo  # a stalled brain answers normally once the stall is over
        else:
            plan = TurnPlan(text=echo)
        self._active = plan
        return plan

    def turn_events(
        self,
        *,
        speech_id: str,
        turn_id: str,
        text: str,
        thread_id: str | None,
        tool_calls: Sequence[str | ToolSegment] | None = None,
        turn_splits: tuple[int, ...] | None = None,
        user_transcription: str | None = None,
    ) -> list[WireEvent]:
        """The ordered events of one spoken turn.

        ``turn_splits`` (indices into ``tool_calls``) start a new agent turn before those
        calls; by default they come from the plan whose ``tool_calls`` list this is.
        ``user_transcription``: the turn answers a voice utterance, so it carries
        ``agentTurnToTalk {userTranscription}`` and the TTS/state ``debug_*`` events where
        the service sends them (PROTOCOL.md §3.9: after ``generatingSpeech``).
        """
        self.turns_started += 1
        active = self._active
        same_plan = active is not None and tool_calls is active.tool_calls
        waits = bool(active is not None and same_plan and active.wait_for_response)
        if turn_splits is None:
            turn_splits = active.turn_splits if active is not None and same_plan else ()
        voice = user_transcription is not None
        hand_off = (In.AGENT_TURN_TO_TALK, {"userTranscription": user_transcription or ""})
        events: list[WireEvent] = [
            (In.AGENT_START_SPEECH, {"speechId": speech_id, "turnId": turn_id, "isNewTurn": True}),
        ]
        seg = 0

        def raw(delta: dict[str, Any]) -> WireEvent:
            nonlocal seg
            seg += 1
            delta = {"role": "assistant", "segmentNumber": seg, "et": round(0.05 * seg, 3), **delta}
            return (
                In.AGENT_RAW_TEXT,
                {"speechId": speech_id, "turnId": turn_id, "delta": json.dumps(delta)},
            )

        think: dict[str, Any] = {"type": "think", "content": ""}
        if thread_id is not None:
            think["threadId"] = thread_id
        events.append(raw(think))
        if voice and not text:
            events.append(hand_off)  # nothing to generate: handed off before the tools
        for index, call in enumerate(tool_calls or ()):
            if index in turn_splits:
                # A new agent turn in the middle of the spiral (e.g. an idle wake-up nudge).
                speech_id = make_speech_id("wake-up")
                turn_id = f"{turn_id}-{index}"
                events.append(
                    (
                        In.AGENT_START_SPEECH,
                        {"speechId": speech_id, "turnId": turn_id, "isNewTurn": True},
                    )
                )
            segment = tool_segment(call)
            tool: dict[str, Any] = {"type": "tool", "content": segment.content}
            if waits:
                call_id = f"call-{next(self._call_ids)}"
                tool["tool_metadata"] = {"id": call_id, "wait_for_response": True}
            events.append(raw(tool))
            for name in segment.responses:
                events.append(
                    raw({"type": "tool_response", "content": f"{name} responded with size 2"})
                )
        if text:
            words = text.split()
            chunks = [
                " ".join(words[i : i + self.chunk_words])
                for i in range(0, len(words), self.chunk_words)
            ] or [text]
            for i, chunk in enumerate(chunks):
                content = chunk if i == 0 else " " + chunk
                events.append(raw({"type": "avatar", "content": content}))
            events.append((In.GENERATING_SPEECH, {"text": text, "speechId": speech_id}))
            if voice:
                for chunk in chunks:
                    events.append(
                        (
                            In.DEBUG_STV_TASK_GENERATED,
                            {"text": chunk, "speechId": speech_id, "duration": 400},
                        )
                    )
                events.append(hand_off)
            for chunk in chunks:
                events.append(
                    (In.STV_SPEECH_CHUNK, {"text": chunk, "speechId": speech_id, "durationMs": 400})
                )
            events.append((In.STV_STARTED_TALKING, {}))
        events.append(raw({"type": "think", "content": "", "isFinal": True}))
        events.append((In.AGENT_END_TURN, {"speechId": speech_id, "turnId": turn_id}))
        events.append((In.STV_FINISHED_GENERATING, {"speechId": speech_id}))
        if text:
            events.append((In.STV_FINISHED_TALKING, {"agentContent": text}))
        if voice:
            events.append(
                (
                    In.DEBUG_CONVERSATION_STATE_CHANGE,
                    {"state": "Idle", "preparingAnswerState": "Idle"},
                )
            )
        return events

    @staticmethod
    def asr_events(text: str, speech_id: str, interim: int = 3) -> list[WireEvent]:
        """What the service's speech recognition reports about one finalised utterance
        before the answer (PROTOCOL.md §3.9 steps 1-3; all ``debug_*``, sent only to a
        socket that asked for ``debugMode``): up to ``interim`` growing interim transcripts,
        the final one, the state change to ``PreparingAudio``, and the LLM input."""
        words = text.split()
        cuts = sorted({max(1, (len(words) * k) // (interim + 1)) for k in range(1, interim + 1)})
        events: list[WireEvent] = []
        for n, cut in enumerate(c for c in cuts if c < len(words)):
            events.append(
                (
                    In.DEBUG_VAD_SPEECH_DETECTED,
                    {
                        "transcript": " ".join(words[:cut]),
                        "isFinal": False,
                        "segmentType": "new",
                        "isSpeechStartEvent": n == 0,
                    },
                )
            )
        events.append(
            (
                In.DEBUG_VAD_SPEECH_DETECTED,
                {
                    "transcript": text,
                    "isFinal": True,
                    "segmentType": "final",
                    "isSpeechStartEvent": not events,
                },
            )
        )
        events.append(
            (
                In.DEBUG_CONVERSATION_STATE_CHANGE,
                {"state": "PreparingAudio", "preparingAnswerState": "PreparingAnswer"},
            )
        )
        events.append(
            (
                In.DEBUG_LLM_INPUT,
                {
                    "userInput": text,
                    "finalSegment": text,
                    "pendingSegment": "",
                    "speechId": speech_id,
                    "segmentType": "final",
                    "isFinal": True,
                },
            )
        )
        return events

    async def voice_turn(self, text: str, sid: str | None = None) -> int:
        """The user SAYS ``text``: the server plays what the service emits when its speech
        recognition finalises an utterance, in order (PROTOCOL.md §3.9), to every approved
        client (or only ``sid``): ``userStartedTalking`` (barging in on a talking avatar
        unless the running turn is uninterruptible), the ``debug_*`` ASR events, then the
        answer turn (scripted like a typed one) with ``agentTurnToTalk {userTranscription}``
        after its ``generatingSpeech``. Returns how many clients heard it."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("voice_turn needs a non-empty text")
        conversations = self._conversations
        if conversations is None:
            raise RuntimeError("voice_turn needs the brain of a StagingServer")
        heard = 0
        for conv_sid, conv in list(conversations.items()):
            if (sid is None or conv_sid == sid) and conv.approved and not conv.ended:
                await conv.voice_turn(text.strip())
                heard += 1
        return heard

    @staticmethod
    def speech_id_for(trigger: str, payload: str = "") -> str:
        return make_speech_id(trigger, payload[:60])
