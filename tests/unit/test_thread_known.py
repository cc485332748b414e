"""The thread id is announced the moment it is adopted (issue 33, item 4): ``thread_known``,
once, before the segment that carried it; never for a session seeded with a thread."""

from __future__ import annotations

import json

from avatar_sdk.events.names import PAYLOADS, EventName
from avatar_sdk.session.conversation import ConversationView
from avatar_sdk.wire.inbound import parse_event


def _delta(**fields: object) -> object:
    delta = {"type": "think", "content": "", "role": "assistant", "segmentNumber": 1, **fields}
    return parse_event(
        "agent_raw_text", [{"speechId": "s-1", "turnId": "t-1", "delta": json.dumps(delta)}]
    )


def test_the_first_delta_with_a_thread_announces_it_once() -> None:
    view = ConversationView()
    assert [name for name, _ in view.apply(_delta())] == ["agent_text"]  # no thread yet
    first = view.apply(_delta(threadId="thr-1"))
    assert first[0] == ("thread_known", {"thread_id": "thr-1"})
    assert [name for name, _ in first] == ["thread_known", "agent_text"]
    again = view.apply(_delta(threadId="thr-1"))
    assert [name for name, _ in again] == ["agent_text"]
    assert view.thread_id == "thr-1"


def test_a_seeded_thread_is_not_announced_again() -> None:
    view = ConversationView(thread_id="thr-seed")
    assert [name for name, _ in view.apply(_delta(threadId="thr-other"))] == ["agent_text"]
    assert view.thread_id == "thr-seed"


def test_the_event_has_a_name_and_a_payload_type() -> None:
    assert EventName("thread_known") in PAYLOADS
    assert set(PAYLOADS[EventName("thread_known")].__annotations__) == {"thread_id"}
