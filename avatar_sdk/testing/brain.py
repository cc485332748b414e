"""The staging backend's scripted brain: what the agent says, and how it misbehaves.

A turn is a list of wire events the server streams after a user turn, in the order the real
conversation manager sends them (PROTOCOL.md §3.9). Tests script replies, tool calls and
stalls; anything unscripted gets a short echo reply.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..wire.names import In
from ..wire.speech import make_speech_id

WireEvent = tuple[str, dict[str, Any]]


@dataclass
class _Scripted:
    text: str | None = None
    tool_calls: list[str] = field(default_factory=list)
    stall: float | None = None
    #: Indices into ``tool_calls`` where a new agent turn (``agent_start_speech`` with
    #: ``isNewTurn``) begins; set by :meth:`Brain.tool_spiral`.
    turn_splits: tuple[int, ...] = ()
    #: Each tool segment carries ``tool_metadata`` {id, wait_for_response: true}: the agent
    #: waits for the client's ``respond_to_tool`` (PROTOCOL §3.6).
    wait_for_response: bool = False


class Brain:
    """Scripted replies. Each ``reply``/``stall``/``tool_calls`` call scripts the next turn."""

    def __init__(self) -> None:
        self._script: deque[_Scripted] = deque()
        self.greeting = "Hello! I am the staging avatar. How can I help?"
        self.chunk_words = 4
        self.turns_started = 0
        self._active: _Scripted | None = None
        self._call_ids = itertools.count(1)

    def reply(self, text: str) -> None:
        """The next turn's spoken answer."""
        self._script.append(_Scripted(text=text))

    def stall(self, seconds: float) -> None:
        """After the next user turn, stay silent for ``seconds`` before answering."""
        self._script.append(_Scripted(stall=seconds))

    def tool_calls(
        self, calls: list[str], then: str | None = None, *, wait_for_response: bool = False
    ) -> None:
        """The next turn emits these raw ``tool`` segment contents (fused ones allowed).

        ``wait_for_response=True``: each carries a call id (``call-1``, ``call-2``...) that
        the client acknowledges with ``respond_to_tool`` (``staging.tool_responses``)."""
        self._script.append(
            _Scripted(text=then, tool_calls=list(calls), wait_for_response=wait_for_response)
        )

    def tool_spiral(
        self,
        count: int,
        name: str = "navigate_to_slide",
        turn_boundaries: int = 0,
        *,
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
        calls = [
            f"{name} " + json.dumps({"slide": 1 if identical else i + 1}) for i in range(count)
        ]
        splits = tuple(sorted({(count * k) // groups for k in range(1, groups)} - {0}))
        self._script.append(_Scripted(text=None, tool_calls=calls, turn_splits=splits))

    def clear(self) -> None:
        self._script.clear()

    def next_plan(self, user_text: str) -> _Scripted:
        echo = f"You said: {user_text}" if user_text else "I am listening."
        if self._script:
            plan = self._script.popleft()
            if plan.stall is not None and plan.text is None and not plan.tool_calls:
                plan.text = echo  # a stalled brain answers normally once the stall is over
        else:
            plan = _Scripted(text=echo)
        self._active = plan
        return plan

    def turn_events(
        self,
        *,
        speech_id: str,
        turn_id: str,
        text: str,
        thread_id: str | None,
        tool_calls: list[str] | None = None,
        turn_splits: tuple[int, ...] | None = None,
    ) -> list[WireEvent]:
        """The ordered events of one spoken turn.

        ``turn_splits`` (indices into ``tool_calls``) start a new agent turn before those
        calls; by default they come from the plan whose ``tool_calls`` list this is.
        """
        self.turns_started += 1
        active = self._active
        same_plan = active is not None and tool_calls is active.tool_calls
        waits = bool(active is not None and same_plan and active.wait_for_response)
        if turn_splits is None:
            turn_splits = active.turn_splits if active is not None and same_plan else ()
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
            segment: dict[str, Any] = {"type": "tool", "content": call}
            if waits:
                call_id = f"call-{next(self._call_ids)}"
                segment["tool_metadata"] = {"id": call_id, "wait_for_response": True}
            events.append(raw(segment))
            name = call.split("{", 1)[0].strip() or "tool"
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
        return events

    @staticmethod
    def speech_id_for(trigger: str, payload: str = "") -> str:
        return make_speech_id(trigger, payload[:60])
