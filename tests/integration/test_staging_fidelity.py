"""The staging backend where clients disagree with it, and the SDK against each behaviour
(issue 9): admission verdicts after ``stvNewSession``, fused tool segments, the
uninterruptible greeting, voice turns, ``availabilityResult`` timing. Real sockets."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
import socketio
from yarl import URL

from avatar_sdk import AvatarError, AvatarSession, ErrorCode
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.socketio.csr import RecoveringAsyncClient
from avatar_sdk.wire import In, Out

from .conftest import FAST, SessionFactory, until

GUARDED = FAST.with_(tool_spiral_limit=3, hard_tool_spiral_limit=6, brain_stall_timeout=2.0)


class RawClient:
    """A protocol-following client with no SDK logic (what the service's reference client
    puts on the wire): it records every server event, in order."""

    def __init__(self) -> None:
        self.sio = RecoveringAsyncClient()
        self.events: list[tuple[str, Any]] = []
        self.room = "rawroom00001"

        @self.sio.on("*")
        async def _any(event: str, *args: Any) -> None:
            self.events.append((event, args[0] if args else None))

    async def open(self, staging: StagingServer) -> None:
        await self.sio.connect(
            f"{staging.url}?debugMode=true", auth={"token": staging.token}, transports=["websocket"]
        )

    def names(self) -> list[str]:
        return [e for e, _ in self.events]

    def index(self, name: str, start: int = 0) -> int:
        return self.names().index(name, start)

    async def until(self, name: str, timeout: float = 3.0, start: int = 0) -> int:
        """Index of the first ``name`` at or after ``start``, once it arrived."""
        assert await until(lambda: name in self.names()[start:], timeout), f"no {name}"
        return self.index(name, start)

    async def join_and_create(self, staging: StagingServer) -> None:
        """Steps 2-4: join, await both join answers, then stvNewSession + checkAvailability."""
        await self.sio.emit(
            Out.JOIN, {"room": self.room, "channel": self.room, "kaltura": {"ks": staging.token}}
        )
        await self.until(In.CLIENT_CONFIGURATION)
        await self.until(In.JOIN_COMPLETE)
        await self.sio.emit(Out.STV_NEW_SESSION, {"room_id": self.room})
        await self.sio.emit(Out.CHECK_AVAILABILITY, {})

    async def approve(self, staging: StagingServer) -> None:
        await self.join_and_create(staging)
        await self.until(In.ASK_PERMISSIONS)
        await self.sio.emit(Out.APPROVED_PERMISSIONS, {"room": self.room})

    async def say(self, text: str, marker: bool = True) -> None:
        if marker:
            await self.sio.emit(
                Out.TEXT_ENTERED, {"text": "", "isFinal": False, "isSpeechStart": True}
            )
        await self.sio.emit(Out.TEXT_ENTERED, {"text": text, "isFinal": True})

    async def close(self) -> None:
        await self.sio.close_gracefully(1.0)


# -- 1. admission verdicts at the service's step ------------------------------------------
async def test_a_protocol_following_client_gets_the_tier_error_after_stv_new_session(
    staging: StagingServer,
) -> None:
    """The service answers ``stvNewSession`` with the verdict, after the join was answered
    (PROTOCOL.md §2 step 5): a client that waits for both join answers first gets it."""
    staging.faults.tier_exceeded()
    client = RawClient()
    await client.open(staging)
    await client.join_and_create(staging)
    verdict = await client.until(In.THROW_TO_EXCEEDED_TIER)  # an answer, not a silence
    assert client.index(In.CLIENT_CONFIGURATION) < verdict
    assert client.index(In.JOIN_COMPLETE) < verdict
    assert In.STV_NEW_SESSION not in client.names()
    assert await until(lambda: not client.sio.connected, 2)  # then the server hangs up
    await client.close()


@pytest.mark.parametrize("step", ["stv", "join"])
@pytest.mark.parametrize(
    ("event", "code"),
    [
        (In.THROW_TO_EXCEEDED_TIER, ErrorCode.TIER_EXCEEDED),
        (In.THROW_TO_BAD_REQUEST, ErrorCode.BAD_REQUEST),
        (In.UNSUPPORTED_CLIENT, ErrorCode.UNSUPPORTED_CLIENT),
        (In.REMOVE_PEER, ErrorCode.PEER_REMOVED),
    ],
)
async def test_the_sdk_fails_connect_on_a_verdict_at_either_step(
    staging: StagingServer, make_session: SessionFactory, step: str, event: str, code: ErrorCode
) -> None:
    staging.faults.admission_error(event, step=step)
    session = make_session()
    states: list[str] = []
    session.on("state_changed", lambda e: states.append(e.data["state"]))
    with pytest.raises(AvatarError) as info:
        await session.connect()
    assert info.value.code is code  # the verdict, not a step timeout
    assert session.state == "failed"
    # Where it answered: after the join answers (the machine asked for the STV session),
    # or instead of them.
    assert ("connecting_stv_session" in states) is (step == "stv")
    assert bool(staging.received_events(Out.STV_NEW_SESSION)) is (step == "stv")


async def test_the_tier_fault_defaults_to_the_service_step(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.faults.tier_exceeded()
    session = make_session()
    with pytest.raises(AvatarError) as info:
        await session.connect()
    assert info.value.code is ErrorCode.TIER_EXCEEDED
    assert not info.value.retryable
    [stv] = staging.received_events(Out.STV_NEW_SESSION)
    assert stv.payload == {"room_id": staging.received_events(Out.JOIN)[0].payload["channel"]}


@pytest.mark.parametrize("step", ["stv", "join"])
async def test_no_capacity_at_either_step_queues_then_connects(
    staging: StagingServer, make_session: SessionFactory, step: str
) -> None:
    staging.faults.capacity_full(0.5, step=step)
    session = make_session(config=FAST.with_(capacity_backoff=(0.2, 0.3), capacity_max_wait=5.0))
    queued: list[dict[str, Any]] = []
    session.on("queued", lambda e: queued.append(e.data))
    await asyncio.wait_for(session.connect(), 10)
    assert session.state == "connected"
    assert queued
    assert len(staging.received_events(Out.JOIN)) == len(queued) + 1
    assert len(staging.live_sids) == 1


# -- 2. fused multi-tool segments ---------------------------------------------------------
async def test_fused_calls_are_each_dispatched_once_with_their_own_name_and_args(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_talking", timeout=3, predicate=lambda e: not e.data["talking"])
    calls: list[tuple[str, dict[str, Any]]] = []
    for name in ("highlight_chart", "note_down", "open_filing"):
        session.on_tool_call(name, lambda args, call: calls.append((call["name"], args)))
    segments: list[tuple[str, str]] = []
    session.on(
        "agent_text",
        lambda e: (
            segments.append((e.data["type"], e.data["content"]))
            if e.data["type"].startswith("tool")
            else None
        ),
    )
    staging.brain.tool_calls(
        ['highlight_chart {"id": 7}', 'note_down {"text": "q{3}"}', 'open_filing {"doc": "10-K"}'],
        then="Opened.",
        fused=True,
    )
    done = session.expect(
        "agent_turn_ended", predicate=lambda e: "open it" in (e.data["speech_id"] or ""), timeout=3
    )
    await session.speak("open it")
    await done
    # What the service sends: one segment carrying every blob, named after the last tool;
    # then one tool_response per call, in call order.
    assert segments == [
        ("tool", 'open_filing {"id": 7}{"text": "q{3}"}{"doc": "10-K"}'),
        ("tool_response", "highlight_chart responded with size 2"),
        ("tool_response", "note_down responded with size 2"),
        ("tool_response", "open_filing responded with size 2"),
    ]
    assert sorted(calls) == [
        ("highlight_chart", {"id": 7}),
        ("note_down", {"text": "q{3}"}),
        ("open_filing", {"doc": "10-K"}),
    ]
    assert calls[0] == ("open_filing", {"doc": "10-K"})  # the named call goes first


async def test_a_raw_fused_segment_scripted_over_http_echoes_every_call(
    make_session: SessionFactory,
) -> None:
    """Issue 17 item 12, as a client in another language scripts it (control API): a raw
    segment naming only the last tool (``open_filing {...}{...}``) is followed by one
    ``tool_response`` per call, so a client can recover the unnamed call (the staging sent
    a single ``open_filing`` echo)."""
    async with StagingServer(control_api=True) as staging:
        session = make_session(url=staging.url, token=staging.token)
        await session.connect()
        await session.wait_for(
            "agent_talking", timeout=3, predicate=lambda e: not e.data["talking"]
        )
        calls: list[tuple[str, dict[str, Any]]] = []
        for name in ("unnamed_1", "open_filing"):
            session.on_tool_call(name, lambda args, call: calls.append((call["name"], args)))
        echoes: list[str] = []

        def on_text(e: Any) -> None:
            if e.data["type"] == "tool_response":
                echoes.append(e.data["content"])

        session.on("agent_text", on_text)
        body = {"calls": ['open_filing {"chart": "revenue"}{"doc": "10-K"}'], "then": "Done."}
        url = f"{staging.url}/_control/brain/tool_calls"
        async with aiohttp.ClientSession() as http, http.post(url, json=body) as answer:
            assert answer.status == 200
        done = session.expect(
            "agent_turn_ended", predicate=lambda e: "open" in e.data["speech_id"], timeout=3
        )
        await session.speak("open it")
        await done
        assert echoes == ["unnamed_1 responded with size 2", "open_filing responded with size 2"]
        assert sorted(calls) == [
            ("open_filing", {"doc": "10-K"}),
            ("unnamed_1", {"chart": "revenue"}),
        ]
        await session.close()


# -- 3. the uninterruptible greeting -------------------------------------------------------
async def test_the_service_drops_a_turn_typed_during_the_greeting_and_finishes_it(
    staging: StagingServer,
) -> None:
    """A client that does not hold its turn loses it: the greeting is uninterruptible (the
    marker is ignored, the text dropped) and still ends with its closing events."""
    client = RawClient()
    await client.open(staging)
    await client.approve(staging)
    start = await client.until(In.AGENT_START_SPEECH)
    await client.say("typed during the greeting")
    [sid] = staging.live_sids
    conv = staging.conversations[sid]
    assert await until(lambda: conv.dropped_turns == ["typed during the greeting"], 2)
    end = await client.until(In.STV_FINISHED_TALKING, start=start)
    assert client.events[end][1] == {"agentContent": staging.brain.greeting}
    assert In.AGENT_INTERRUPTED not in client.names()
    assert conv.user_turns == []
    # Once it is over, the same client is heard again.
    await client.say("after the greeting")
    assert await until(lambda: conv.user_turns == ["after the greeting"], 2)
    await client.close()


async def test_a_cut_turn_always_gets_its_closing_events(staging: StagingServer) -> None:
    """A new turn while the avatar talks (no marker: e.g. a resend) cuts the running one
    short with agentInterrupted and a truncated stvFinishedTalking, before the new turn."""
    client = RawClient()
    await client.open(staging)
    await client.approve(staging)
    greeting_end = await client.until(In.STV_FINISHED_TALKING)
    answer = " ".join(f"word{i}" for i in range(40))
    staging.brain.reply(answer)
    await client.say("first question", marker=False)
    talking = await client.until(In.STV_STARTED_TALKING, start=greeting_end + 1)
    assert await until(lambda: spoken_words(staging) != "", 3)  # a word was said
    heard = spoken_words(staging)
    await client.say("second question", marker=False)
    cut = await client.until(In.AGENT_INTERRUPTED, start=talking)
    finished = client.index(In.STV_FINISHED_TALKING, cut)
    assert finished == cut + 1
    said = client.events[finished][1]["agentContent"]
    assert said.startswith(heard) and answer.startswith(said + " ")
    second = await client.until(In.AGENT_START_SPEECH, start=finished)
    assert "second question" in client.events[second][1]["speechId"]
    await client.until(In.STV_FINISHED_TALKING, start=second)
    assert client.names().count(In.AGENT_INTERRUPTED) == 1
    await client.close()


def spoken_words(staging: StagingServer) -> str:
    """What the avatar of the only conversation has finished saying in its running turn."""
    conv = staging.conversations[staging.live_sids[0]]
    progress = conv.turn_progress
    return progress.said(staging.speech_time_scale) if progress is not None else ""


def record_agent_content(staging: StagingServer, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``stvFinishedTalking.agentContent`` the server sends from now on, in order."""
    sent: list[str] = []
    emit = staging.sio.emit_recoverable

    async def spy(sid: str, event: str, payload: Any) -> None:
        if event == In.STV_FINISHED_TALKING:
            sent.append(payload["agentContent"])
        await emit(sid, event, payload)

    monkeypatch.setattr(staging.sio, "emit_recoverable", spy)
    return sent


async def test_a_cut_before_the_first_word_is_spoken_reports_nothing_said(
    staging: StagingServer,
) -> None:
    """Issue 17 item 11: the barge-in lands as the avatar starts talking a one-chunk answer
    (``word0 word1 word2 word3``): nothing was spoken yet, so ``agentContent`` is empty
    (the staging sent the whole text)."""
    client = RawClient()
    await client.open(staging)
    await client.approve(staging)
    greeting_end = await client.until(In.STV_FINISHED_TALKING)
    staging.speech_time_scale = 4.0  # a word lasts 0.4 s: the cut comes well before its end
    staging.brain.reply("word0 word1 word2 word3")
    await client.say("tell me", marker=False)
    talking = await client.until(In.STV_STARTED_TALKING, start=greeting_end + 1)
    await client.say("", marker=True)  # the barge-in marker alone
    cut = await client.until(In.AGENT_INTERRUPTED, start=talking)
    assert client.names()[cut + 1] == In.STV_FINISHED_TALKING
    assert client.events[cut + 1][1] == {"agentContent": ""}
    await client.close()


@pytest.mark.parametrize("words", [4, 12])
async def test_a_cut_mid_speech_reports_the_words_spoken_before_it(
    staging: StagingServer,
    make_session: SessionFactory,
    monkeypatch: pytest.MonkeyPatch,
    words: int,
) -> None:
    """Issue 17 item 11, through the SDK's ``interrupt()``: ``agentContent`` is the answer's
    words the avatar had said when the cut came, a strict prefix of the answer, whether
    the answer is one caption chunk or several."""
    session = make_session()
    await session.connect()
    await session.wait_for("agent_talking", timeout=3, predicate=lambda e: not e.data["talking"])
    staging.speech_time_scale = 4.0  # a word lasts 0.4 s
    sent = record_agent_content(staging, monkeypatch)
    answer = " ".join(f"word{i}" for i in range(words))
    staging.brain.reply(answer)
    talking = session.expect("agent_talking", predicate=lambda e: e.data["talking"], timeout=3)
    await session.speak("tell me")
    await talking
    assert await until(lambda: spoken_words(staging).count(" ") >= 1, 5)  # two words said
    heard = spoken_words(staging)
    interrupted = session.expect("agent_interrupted", timeout=3)
    await session.interrupt()
    await interrupted
    assert await until(lambda: len(sent) == 1, 2)
    [said] = sent
    assert said.startswith(heard) and said != answer
    assert answer.startswith(said + " ")  # whole words only


async def test_the_sdk_holds_a_turn_typed_during_the_greeting_until_it_ends(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    names: list[str] = []
    session.on("*", lambda e: names.append(e.name))
    staging.brain.reply("Held, then answered.")
    await session.connect()
    answered = session.expect(
        "agent_turn_ended",
        predicate=lambda e: "typed early" in (e.data["speech_id"] or ""),
        timeout=3,
    )
    await session.speak("typed early")  # the greeting has just been approved
    await answered
    conv = staging.conversations[staging.live_sids[0]]
    assert conv.dropped_turns == []
    assert conv.user_turns == ["typed early"]
    assert "agent_interrupted" not in names  # the greeting was never cut
    # The turn went out after the greeting's end: its marker found nothing to interrupt.
    said = staging.received_events(Out.TEXT_ENTERED)
    assert [r.payload.get("text") for r in said] == ["", "typed early"]


async def test_turns_typed_during_the_greeting_go_as_one(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    # Asked before connect(), which returns once the greeting has begun (its thread id).
    started = session.expect("agent_speech_started", timeout=2)
    await session.connect()
    await started  # the greeting is on
    await asyncio.wait_for(asyncio.gather(session.speak("first"), session.speak("second")), 3)
    conv = staging.conversations[staging.live_sids[0]]
    assert await until(lambda: conv.user_turns == ["first\nsecond"], 2)
    assert conv.dropped_turns == []


# -- 4. voice turns -----------------------------------------------------------------------
async def test_a_voice_turn_arrives_in_the_service_order(staging: StagingServer) -> None:
    client = RawClient()
    await client.open(staging)
    await client.approve(staging)
    greeting_end = await client.until(In.STV_FINISHED_TALKING)
    staging.brain.reply("It is sunny.")
    assert await staging.brain.voice_turn("what is the weather") == 1
    await client.until(In.STV_FINISHED_TALKING, start=greeting_end + 1)
    names = client.names()[greeting_end + 1 :]
    order = [
        In.USER_STARTED_TALKING,
        In.DEBUG_VAD_SPEECH_DETECTED,
        In.DEBUG_CONVERSATION_STATE_CHANGE,
        In.DEBUG_LLM_INPUT,
        In.AGENT_START_SPEECH,
        In.GENERATING_SPEECH,
        In.DEBUG_STV_TASK_GENERATED,
        In.AGENT_TURN_TO_TALK,
        In.STV_SPEECH_CHUNK,
        In.STV_STARTED_TALKING,
        In.AGENT_END_TURN,
        In.STV_FINISHED_GENERATING,
        In.STV_FINISHED_TALKING,
    ]
    positions = [names.index(n) for n in order]
    assert positions == sorted(positions), names
    hand_off = client.events[greeting_end + 1 + names.index(In.AGENT_TURN_TO_TALK)][1]
    assert hand_off == {"userTranscription": "what is the weather"}
    finals = [p for e, p in client.events if e == In.DEBUG_VAD_SPEECH_DETECTED and p["isFinal"]]
    assert finals == [
        {
            "transcript": "what is the weather",
            "isFinal": True,
            "segmentType": "final",
            "isSpeechStartEvent": False,
        }
    ]
    assert await until(lambda: client.names()[-1] == In.DEBUG_CONVERSATION_STATE_CHANGE, 2)
    assert client.events[-1][1] == {"state": "Idle", "preparingAnswerState": "Idle"}
    await client.close()


async def test_debug_streams_need_debug_mode(staging: StagingServer) -> None:
    client = RawClient()
    await client.sio.connect(staging.url, auth={"token": staging.token}, transports=["websocket"])
    await client.approve(staging)
    greeting_end = await client.until(In.STV_FINISHED_TALKING)
    await staging.brain.voice_turn("hello there")
    await client.until(In.STV_FINISHED_TALKING, start=greeting_end + 1)
    assert In.AGENT_TURN_TO_TALK in client.names()
    assert not any(n.startswith("debug_") for n in client.names())
    await client.close()


async def test_the_sdk_reports_the_user_transcription_of_a_voice_turn(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_talking", timeout=3, predicate=lambda e: not e.data["talking"])
    heard = session.expect("user_transcription", timeout=3)
    started = session.expect("user_started_talking", timeout=3)
    answered = session.expect(
        "agent_turn_ended",
        predicate=lambda e: "book a table" in (e.data["speech_id"] or ""),
        timeout=3,
    )
    await staging.brain.voice_turn("book a table")
    await started
    assert (await heard).data == {"text": "book a table", "final": True}
    await answered
    assert staging.conversations[staging.live_sids[0]].voice_turns == ["book a table"]


async def test_a_voice_turn_confirms_the_turns_sent_before_it(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    """agentTurnToTalk: the server handed a user turn to the brain, so every turn sent
    before it reached the server (the turn ledger will never resend them)."""
    session = make_session()
    await session.connect()
    await session.wait_for("agent_talking", timeout=3, predicate=lambda e: not e.data["talking"])
    conv = staging.conversations[staging.live_sids[0]]
    conv.agent_down = True  # the server takes the typed turn in and nothing answers it
    await session.speak("did you get this?")
    assert await until(lambda: conv.dropped_turns == ["did you get this?"], 2)
    ledger = session._desk.ledger
    assert [t.text for t in ledger.unconfirmed()] == ["did you get this?"]
    conv.agent_down = False
    heard = session.expect("user_transcription", timeout=3)
    await staging.brain.voice_turn("hello by voice")
    await heard
    assert ledger.unconfirmed() == []


async def test_a_voice_turn_barges_in_on_a_talking_avatar(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    await session.connect()
    await session.wait_for("agent_talking", timeout=3, predicate=lambda e: not e.data["talking"])
    staging.brain.reply(" ".join(f"word{i}" for i in range(60)))
    talking = session.expect("agent_talking", predicate=lambda e: e.data["talking"], timeout=3)
    await session.speak("tell me a long story")
    await talking
    interrupted = session.expect("agent_interrupted", timeout=3)
    heard = session.expect("user_transcription", timeout=3)
    await staging.brain.voice_turn("stop please")
    await interrupted
    assert (await heard).data["text"] == "stop please"


async def test_a_voice_turn_during_the_greeting_is_dropped(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session()
    # Asked before connect(), which returns once the greeting has begun (its thread id).
    started = session.expect("agent_speech_started", timeout=2)
    await session.connect()
    await started
    onset = session.expect("user_started_talking", timeout=3)
    await staging.brain.voice_turn("too early")
    await onset  # the server's VAD heard it...
    conv = staging.conversations[staging.live_sids[0]]
    assert conv.dropped_turns == ["too early"]  # ...and the uninterruptible greeting went on
    await session.wait_for("agent_talking", timeout=3, predicate=lambda e: not e.data["talking"])
    assert conv.voice_turns == []


async def test_a_spiral_started_by_a_voice_turn_resends_the_transcription(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    session = make_session(config=GUARDED)
    await session.connect()
    await session.wait_for("agent_talking", timeout=3, predicate=lambda e: not e.data["talking"])
    staging.brain.tool_calls(['navigate_to_slide {"slide": 1}'] * 7)
    recovering = session.expect("tool_spiral_recovering", timeout=3)
    recovered = session.expect("spiral_recovered", timeout=8)
    await staging.brain.voice_turn("show me the revenue widget")
    assert (await recovering).data["last_turn_text"] == "show me the revenue widget"
    assert (await recovered).data == {"text": "show me the revenue widget"}
    new_conv = staging.conversations[staging.live_sids[-1]]
    assert await until(lambda: len(new_conv.user_turns) == 1, 3)
    assert new_conv.user_turns[0].endswith("show me the revenue widget")
    assert new_conv.dropped_turns == []  # held past the rebuilt session's greeting


# -- 5. availabilityResult timing ----------------------------------------------------------
async def test_capacity_changed_fires_during_a_connect(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.faults.availability(available=False, delay=0.05)
    staging.faults.stv_session_delay(0.4)  # creating the STV session takes a while
    session = make_session()
    seen: list[tuple[bool, str]] = []
    session.on("capacity_changed", lambda e: seen.append((e.data["available"], session.state)))
    await session.connect()  # information only: a connect whose stvNewSession came succeeds
    assert seen == [(False, "connecting_stv_session")]
    assert session.state == "connected"


async def test_availability_answer_and_delay_are_scripted(
    staging: StagingServer, make_session: SessionFactory
) -> None:
    staging.faults.availability(available=True, delay=0.6, details={"activeCalls": 11})
    session = make_session()
    changed = session.expect("capacity_changed", timeout=3)
    await session.connect()
    event = await changed
    assert session.state == "connected"  # it came after the connect this time
    assert event.data["available"] is True
    assert event.data["details"]["activeCalls"] == 11
    assert event.data["details"]["maxCalls"] == 12


# -- 6. a backend for other clients --------------------------------------------------------
async def test_a_media_session_subscribes_under_the_advertised_host() -> None:
    async with StagingServer(advertise_host="localhost") as staging:
        session = AvatarSession(
            staging.url,
            staging.token,
            audio=ToneSource(),
            allow_insecure_transport=True,
            config=FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0),
        )
        try:
            await session.connect()
            link = session._slot.current
            assert link is not None and link.result is not None and link.result.stv is not None
            assert URL(link.result.stv.webrtc_url).host == "localhost"
            assert staging.media.whep_posts == 1
            assert staging.media.live_viewers() == 1
        finally:
            await session.close()


async def test_a_burst_of_real_uplink_audio_then_silence_is_a_voice_turn(
    staging: StagingServer,
) -> None:
    """``brain.listen``: the backend's energy detector turns a tone burst on the ASR uplink,
    followed by silence, into a voice turn with the scripted transcription."""
    staging.brain.listen(["hello from the microphone"], min_speech=0.2, silence=0.4)
    staging.brain.reply("I heard you.")
    session = AvatarSession(
        staging.url,
        staging.token,
        audio=ToneSource(),
        allow_insecure_transport=True,
        config=FAST.with_(overall_connect_timeout=10.0, asr_timeout=5.0),
    )
    session.mic_enabled = False  # silence until the greeting is over
    try:
        await session.connect()
        await session.wait_for(
            "agent_talking", timeout=5, predicate=lambda e: not e.data["talking"]
        )
        onset = session.expect("user_started_talking", timeout=5)
        heard = session.expect("user_transcription", timeout=8)
        answered = session.expect(
            "agent_turn_ended",
            predicate=lambda e: "microphone" in (e.data["speech_id"] or ""),
            timeout=8,
        )
        session.mic_enabled = True  # the user talks (a 0.3-amplitude tone)...
        await onset
        session.mic_enabled = False  # ...then stops
        assert (await heard).data == {"text": "hello from the microphone", "final": True}
        await answered
        assert staging.conversations[staging.live_sids[0]].voice_turns == [
            "hello from the microphone"
        ]
    finally:
        await session.close()


async def test_the_media_host_names_the_whep_url_and_the_socket_stays() -> None:
    """``media_host``: the public-looking name goes into ``webrtc_url`` only (the browser
    test resolves it with Chromium's resolver rules and subscribes under it)."""
    async with StagingServer(media_host="media.staging.test") as staging:
        client = socketio.AsyncClient(reconnection=False)
        got: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        client.on("stvNewSession", lambda data, *rest: got.done() or got.set_result(data))
        await client.connect(staging.url, auth={"token": staging.token}, transports=["websocket"])
        try:
            kaltura = {"ks": staging.token, "force_experience": "avatar_only"}
            await client.emit("join", {"room": "r1", "channel": "r1", "kaltura": kaltura})
            await client.emit("stvNewSession", {"room_id": "r1"})
            payload = await asyncio.wait_for(got, 5)
            url = URL(payload["webrtc_url"])
            assert (url.host, url.port) == ("media.staging.test", staging.port)
            assert URL(staging.public_url).host == "127.0.0.1"
        finally:
            await client.disconnect()
