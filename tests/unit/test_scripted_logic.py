"""The scripted session's pure logic (voice onset/offset, the say ledger, the JWT ``exp``,
error classification) and its timers (keep-alive cadence, the expiry warning) under a
virtual clock."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from avatar_sdk import AvatarError, ErrorCode, ScriptedAvatarSession, ScriptedConfig
from avatar_sdk.clock import FakeClock
from avatar_sdk.scripted.core.protocol import (
    Created,
    SayLedger,
    VoiceDetector,
    classify_http_error,
    jwt_exp,
    parse_create,
    parse_init_client,
    session_path,
)
from avatar_sdk.scripted.core.states import ScriptedState, ScriptedStates


def jwt(claims: dict[str, Any]) -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return f"{b64(b'{}')}.{b64(json.dumps(claims).encode())}.sig"


# -- voice detector ----------------------------------------------------------------------------
def feed(
    detector: VoiceDetector, levels: list[float], start: float = 0.0
) -> list[tuple[str, float]]:
    edges = []
    for i, level in enumerate(levels):
        edges += detector.feed(level, start + i * 0.02, 0.02)
    return edges


def test_onset_after_quiet_and_offset_after_the_hangover() -> None:
    d = VoiceDetector(threshold=0.1, hangover=0.1)
    edges = feed(d, [0.0] * 5 + [0.5] * 10 + [0.0] * 10)
    assert edges[0] == ("onset", pytest.approx(0.10))
    kind, at = edges[1]
    assert kind == "offset" and at == pytest.approx(0.30)  # the end of the last voiced frame
    assert len(edges) == 2


def test_a_pause_shorter_than_the_hangover_is_no_offset() -> None:
    d = VoiceDetector(threshold=0.1, hangover=0.2)
    edges = feed(d, [0.5] * 5 + [0.0] * 4 + [0.5] * 5 + [0.0] * 20)
    assert [k for k, _ in edges] == ["onset", "offset"]


def test_silence_without_frames_ends_the_voice() -> None:
    d = VoiceDetector(threshold=0.1, hangover=0.2)
    feed(d, [0.5] * 3)
    assert d.silence(0.1) == []
    assert d.silence(1.0) == [("offset", pytest.approx(0.06))]


# -- say ledger --------------------------------------------------------------------------------
def test_a_say_starts_at_the_onset_and_finishes_at_the_offset() -> None:
    ledger = SayLedger()
    ledger.add("a", 1.0, accepted_at=10.0, sent_at=9.95)
    (start,) = ledger.on_edge("onset", 10.1)
    assert (start.turn_id, start.kind, start.at) == ("a", "started", 10.1)
    assert ledger.on_edge("offset", 10.5) == []  # a pause within it
    ledger.on_edge("onset", 10.6)
    (end,) = ledger.on_edge("offset", 11.1)
    assert (end.kind, end.reason, end.at) == ("finished", "played", 11.1)
    assert len(ledger) == 0


def test_an_onset_before_the_answer_arrived_is_the_say_start() -> None:
    ledger = SayLedger()
    ledger.on_edge("onset", 10.02)
    (start,) = ledger.add("a", 1.0, accepted_at=10.05, sent_at=10.0)
    assert start.at == 10.02


def test_queued_says_in_order_with_quiet_between() -> None:
    ledger = SayLedger()
    ledger.add("a", 0.5, 0.0)
    ledger.add("b", 0.5, 0.1)
    out = ledger.on_edge("onset", 0.1) + ledger.on_edge("offset", 0.6)
    out += ledger.on_edge("onset", 0.9) + ledger.on_edge("offset", 1.4)
    assert [(t.turn_id, t.kind) for t in out] == [
        ("a", "started"), ("a", "finished"), ("b", "started"), ("b", "finished"),
    ]  # fmt: skip


def test_back_to_back_voice_is_split_by_the_duration_bound() -> None:
    ledger = SayLedger(end_margin=0.5, end_slack=0.3)
    ledger.add("a", 1.0, 0.0)
    ledger.add("b", 1.0, 0.0)
    ledger.on_edge("onset", 0.1)
    assert ledger.tick(1.2) == []
    out = ledger.tick(1.6)  # a's voice runs past 0.1 + 1.0 + margin: a is done at 1.1
    assert [(t.turn_id, t.kind, t.reason) for t in out] == [
        ("a", "finished", "bound"), ("b", "started", None),
    ]  # fmt: skip
    assert out[0].at == pytest.approx(1.1) and out[1].at == pytest.approx(1.1)
    (end,) = ledger.on_edge("offset", 2.1)
    assert (end.turn_id, end.reason) == ("b", "played")


def test_a_lone_say_waits_longer_for_its_offset() -> None:
    """Nothing queued behind it: voice late past the duration (late media) still ends it
    as played; the bound only trips after ``onset_margin``."""
    ledger = SayLedger(end_margin=0.5, onset_margin=2.0)
    ledger.add("a", 1.0, 0.0)
    ledger.on_edge("onset", 0.1)
    assert ledger.tick(2.0) == []
    (end,) = ledger.on_edge("offset", 2.2)
    assert end.reason == "played"
    ledger.add("b", 1.0, 3.0)
    ledger.on_edge("onset", 3.1)
    (bound,) = ledger.tick(4.1 + 2.0)
    assert (bound.reason, bound.at) == ("bound", pytest.approx(4.1))


def test_no_onset_within_duration_and_margin_finishes_with_a_reason() -> None:
    ledger = SayLedger(onset_margin=2.0)
    ledger.add("a", 1.0, 5.0)
    assert ledger.tick(7.9) == []
    (end,) = ledger.tick(8.0)
    assert (end.reason, end.at) == ("no_onset", 8.0)


def test_interrupt_cuts_the_head_and_the_queue_goes_on() -> None:
    ledger = SayLedger()
    ledger.add("a", 5.0, 0.0)
    ledger.add("b", 1.0, 0.0)
    ledger.on_edge("onset", 0.1)
    (cut,) = ledger.interrupt(1.0)
    assert (cut.turn_id, cut.reason) == ("a", "interrupted")
    ledger.on_edge("offset", 1.05)
    (start,) = ledger.on_edge("onset", 1.4)
    assert start.turn_id == "b"
    assert ledger.interrupt(2.0)[0].turn_id == "b"
    assert ledger.interrupt(3.0) == []  # idempotent with nothing playing


def test_end_finishes_every_open_say() -> None:
    ledger = SayLedger()
    ledger.add("a", 1.0, 0.0)
    ledger.add("b", 1.0, 0.0)
    assert [(t.turn_id, t.reason) for t in ledger.end(0.5)] == [("a", "ended"), ("b", "ended")]


# -- wire ----------------------------------------------------------------------------------
def test_jwt_exp_is_read_and_junk_is_none() -> None:
    assert jwt_exp(jwt({"exp": 1_700_000_123})) == 1_700_000_123.0
    for junk in ("", "a.b", "a.!!!.c", jwt({"exp": "soon"}), jwt({"exp": True}), jwt([1])):  # type: ignore[list-item]
        assert jwt_exp(junk) is None


def test_answers_are_validated() -> None:
    created = parse_create({"sessionId": "s1", "token": jwt({"exp": 5})})
    assert created.expires_at == 5.0
    assert created.token not in repr(created)
    for bad in (
        None,
        [],
        {"sessionId": "s"},
        {"sessionId": 3, "token": "t"},
        {"sessionId": "", "token": "t"},
    ):
        with pytest.raises(AvatarError) as caught:
            parse_create(bad)
        assert caught.value.code is ErrorCode.PROTOCOL_VIOLATION
    turn = {"url": "turn.h", "username": "user-1", "credential": "cred-1"}
    init = parse_init_client({"whepUrl": "https://h/w", "turn": turn})
    assert init.whep_url == "https://h/w" and init.turn_url == "turn.h"
    assert "cred-1" not in repr(init) and "user-1" not in repr(init)
    with pytest.raises(AvatarError):
        parse_init_client({"whepUrl": 7})
    assert session_path("a/b", "end") == "/avatar-session/a%2Fb/end"


@pytest.mark.parametrize(
    ("status", "body", "what", "code"),
    [
        (403, {"code": "wrong_token_scope"}, "create", ErrorCode.WRONG_TOKEN_SCOPE),
        (401, {"code": "unauthorized"}, "create", ErrorCode.AUTH_FAILED),
        (404, {"code": "session_not_found"}, "keep-alive", ErrorCode.SESSION_GONE),
        (404, None, "end", ErrorCode.SESSION_GONE),
        (404, {"code": "visual_not_found"}, "create", ErrorCode.BAD_REQUEST),
        (503, {"code": "injected"}, "say-audio", ErrorCode.SERVER_ERROR),
        (429, None, "say-audio", ErrorCode.CAPACITY_UNAVAILABLE),
        (400, "<html>", "say-audio", ErrorCode.BAD_REQUEST),
    ],
)
def test_http_errors_are_classified(status: int, body: object, what: str, code: ErrorCode) -> None:
    assert classify_http_error(status, body, what).code is code


def test_a_hostile_error_code_is_not_echoed() -> None:
    error = classify_http_error(500, {"code": "x" * 30 + "<script>"}, "say-audio")
    assert "<script>" not in str(error)


# -- timers under a fake clock -------------------------------------------------------------
class _Stub:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []


async def stub_session(
    clock: FakeClock, config: ScriptedConfig, exp: float | None
) -> tuple[ScriptedAvatarSession, _Stub]:
    session = ScriptedAvatarSession(
        "https://agentic.example", "admin-token-xyz", "v1", config=config, clock=clock
    )
    stub = _Stub()

    async def fake_post(path: str, what: str, **kwargs: Any) -> Any:
        stub.calls.append((what, clock.monotonic()))
        return {"success": True}

    session._post = fake_post  # type: ignore[method-assign]
    session._created = Created("s1", "session-token-abc", exp)
    session._states = ScriptedStates(ScriptedState.LIVE)
    return session, stub


async def test_keep_alive_runs_at_its_cadence() -> None:
    clock = FakeClock()
    session, stub = await stub_session(clock, ScriptedConfig(keep_alive_interval=10), None)
    task = asyncio.ensure_future(session._keep_alive_loop())
    await clock.advance(0)
    await clock.advance(9.9)
    assert stub.calls == []
    await clock.advance(0.1)
    await clock.advance(30)
    assert [w for w, _ in stub.calls] == ["keep-alive"] * 4
    assert [t - 1000.0 for _, t in stub.calls] == [10, 20, 30, 40]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_session_expiring_fires_lead_seconds_before_exp() -> None:
    clock = FakeClock()
    exp = clock.wall() + 3600
    session, _ = await stub_session(clock, ScriptedConfig(expiry_warning=300), exp)
    seen = session.expect("session_expiring")
    task = asyncio.ensure_future(session._expiry_watch())
    await clock.advance(0)
    await clock.advance(3299)
    assert not seen.done()
    await clock.advance(1)
    event = await asyncio.wait_for(seen, 1)
    assert event.data == {"expires_at": exp, "remaining": 300.0}
    await task


async def test_config_is_checked() -> None:
    for bad in (
        {"keep_alive_interval": 0},
        {"voice_threshold": -1},
        {"expiry_warning": float("nan")},
    ):
        with pytest.raises(AvatarError) as caught:
            ScriptedConfig(**bad)  # type: ignore[arg-type]
        assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_an_encoder_failure_is_classified(monkeypatch: pytest.MonkeyPatch) -> None:
    """An FFmpeg build that cannot encode mp3: ``media_failed``, not a raw PyAV error."""
    import numpy as np  # noqa: PLC0415

    from avatar_sdk.scripted import audio  # noqa: PLC0415

    def broken(pcm: Any, rate: int, **kwargs: Any) -> bytes:
        raise ValueError("no libmp3lame")

    monkeypatch.setattr(audio, "encode_mp3", broken)
    with pytest.raises(AvatarError) as caught:
        audio.prepare(np.zeros(4800, dtype=np.int16), None, 48_000)
    assert caught.value.code is ErrorCode.MEDIA_FAILED
