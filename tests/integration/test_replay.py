"""Record and replay (issue 20, item 2): a session recorded against the staging backend
with a socket drop, a cold reconnect and a tool call replays "same" against today's SDK;
against an SDK that never resends a turn, it reports the divergence at that turn; with
media, the replay runs real media; the cassette holds no token or registered secret; bad
cassettes are reported; the golden capture replays through the same machinery; the CLI's
exit codes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from avatar_sdk import AvatarError, AvatarSession, ErrorCode
from avatar_sdk._cli.main import main
from avatar_sdk.cassette import load
from avatar_sdk.cassette import recorder as recorder_module
from avatar_sdk.cassette.golden import LIVE, NOT_SENT, golden_cassette, golden_coverage
from avatar_sdk.redact import register_secret
from avatar_sdk.session import handshake
from avatar_sdk.session.turn_desk import TurnDesk
from avatar_sdk.testing import ReplayServer, StagingServer, replay_cassette
from avatar_sdk.wire import Out

from .conftest import FAST, until

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden-session.json"
#: Replays wait this long for each recorded client step before reporting a divergence; far
#: above a step's real latency, and short enough for the divergence test to end in time.
ANSWER = 4.0
CONFIG = FAST.with_(
    overall_connect_timeout=10.0, asr_timeout=5.0, turn_confirm_timeout=0.1, tool_spiral_limit=0
)
TOOL = 'collect_contact {"field": "email"}'
SECRET = "sk-registered-0123456789abcdef"


async def record_field_session(
    staging: StagingServer, path: Path, *, media: bool = False, **options: Any
) -> None:
    """A session with a tool call acknowledged over genie, a recoverable socket drop, then
    an unconfirmed turn and a drop the server refuses to recover (a cold reconnect, the
    turn resent on the new server session)."""
    session = AvatarSession(
        staging.url, staging.token, genie_url=staging.genie_url, media=media,
        allow_insecure_transport=True, config=CONFIG, record=path, **options,
    )  # fmt: skip
    try:
        calls: list[dict[str, Any]] = []
        session.on("tool_call", lambda e: calls.append(e.data))
        await session.connect()
        await session.wait_for(
            "agent_talking", timeout=5, predicate=lambda e: not e.data["talking"]
        )
        staging.brain.tool_calls([TOOL], then="Thanks.", wait_for_response=True)
        called = session.expect("tool_call", timeout=5)
        answered = session.expect("agent_turn_ended", timeout=5)
        await session.speak("please take my email")
        await called
        ack = await session.respond_to_tool(calls[0]["call_id"], {"email": "a@example.com"})
        assert ack == {"ok": True, "reason": "ok"}
        await answered
        assert await staging.faults.drop_socket() == 1
        await session.wait_for(
            "reconnected", timeout=5, predicate=lambda e: e.data["tier"] == "socket"
        )
        assert await until(lambda: len(staging.live_sids) == 1, 3)
        old = staging.conversations[staging.live_sids[0]]
        old.agent_down = True  # taken in, never answered: the turn stays unconfirmed
        await session.speak("did you get this?")
        assert await until(lambda: old.dropped_turns != [], 3)
        resent = session.expect("turn_resent", timeout=10)
        done = session.expect(
            "agent_turn_ended",
            predicate=lambda e: "did you get this" in (e.data["speech_id"] or ""),
            timeout=15,
        )
        assert await staging.faults.drop_socket(recovery=False) == 1
        assert (await resent).data["tier"] == "cold"
        await done
    finally:
        await session.close()


@pytest.fixture
async def field_cassette(staging: StagingServer, tmp_path: Path) -> Path:
    path = tmp_path / "field.jsonl"
    await record_field_session(staging, path)
    return path


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_the_cassette_holds_the_whole_incident(field_cassette: Path) -> None:
    lines = records(field_cassette)
    header, body = lines[0], lines[1:]
    assert header["kind"] == "cassette" and header["version"] == 1
    assert header["session"]["config"]["turn_confirm_timeout"] == 0.1
    assert body[-1]["kind"] == "end" and body[-1]["records"] == len(body) - 1
    kinds = [r["kind"] for r in body]
    assert {"call", "open", "out", "in", "drop", "http"} <= set(kinds)
    opens = [(r["link"], r["recovered"]) for r in body if r["kind"] == "open"]
    assert opens == [(0, False), (0, True), (0, False), (1, False)]  # drop, refused, cold
    drops = [r["reason"] for r in body if r["kind"] == "drop"]
    assert drops[-1] == "io client disconnect" and len(drops) >= 3
    genie = [r for r in body if r["kind"] == "http" and r["service"] == "genie"]
    assert [g["url"].rsplit("/", 1)[-1] for g in genie] == ["tool_response", "session_completed"]
    assert all(g["status"] == 200 for g in genie)
    offsets = [r["t"] for r in body]
    assert offsets == sorted(offsets)
    # user text redacted by default, consistently (the resend carries the same placeholder)
    turns = [
        r["payload"]["text"] for r in body if r["kind"] == "out" and r["name"] == Out.TEXT_ENTERED
    ]
    assert turns == ["", "user-text-1", "", "user-text-2", "", "user-text-2"]


async def test_a_field_session_replays_the_same_against_todays_sdk(field_cassette: Path) -> None:
    result = await replay_cassette(field_cassette, answer_timeout=ANSWER)
    assert result.same, str(result)
    assert result.matched == result.steps > 50
    assert result.call_errors == []


async def test_an_sdk_that_never_resends_diverges_at_the_resent_turn(
    field_cassette: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def never_resend(self: TurnDesk, through: int, tier: str) -> None:
        return None

    monkeypatch.setattr(TurnDesk, "_confirm_or_resend", never_resend)
    tape = load(field_cassette)
    resend = next(
        r for r in tape.records if r.kind == "out" and r.name == Out.TEXT_ENTERED and r.link == 1
    )
    result = await replay_cassette(tape, answer_timeout=ANSWER)
    assert not result.same
    divergence = result.divergence
    assert divergence is not None
    assert divergence.index == resend.index
    assert divergence.offset == resend.t
    assert divergence.expected.startswith(f"-> {Out.TEXT_ENTERED}")
    assert divergence.got == f"nothing within {ANSWER:g} s"
    assert f"record {resend.index}" in str(result)


async def test_a_media_session_replays_with_real_media(
    staging: StagingServer, tmp_path: Path, replayed_backend: Any
) -> None:
    path = tmp_path / "media.jsonl"
    await record_field_session(staging, path, media=True)
    tape = load(path)
    whep = [r.data["status"] for r in tape.of_kind("http") if r.data["method"] == "POST"
            and r.data["service"] == "whep"]  # fmt: skip
    assert whep == [201, 201]  # the first server session and the cold one
    samples = [r.data["counts"] for r in tape.of_kind("media_sample")]
    assert any(s.get("audio_in", 0) > 0 and s["audio_out"] > 0 for s in samples)
    assert {(r.data["lane"], r.data["state"]) for r in tape.of_kind("media")} >= {
        ("asr", "connected"), ("stv", "connected"), ("asr", "closed"), ("stv", "closed"),
    }  # fmt: skip
    backend: ReplayServer = await replayed_backend(tape, answer_timeout=ANSWER)
    result = await backend.replay()
    assert result.same, str(result)
    assert backend.media.whep_statuses == [201, 201]  # real answers from the staging's peers
    assert len(backend.received_events(Out.ASR_WEBRTC_OFFER)) == 2  # answered by real peers


async def test_a_recorded_whep_404_is_answered_again(
    staging: StagingServer, tmp_path: Path
) -> None:
    """A WHEP 404 in the recording (the cold reconnect's subscribe) is a 404 in the replay,
    and the SDK asks for a fresh STV session on the live socket again, as it did."""
    path = tmp_path / "whep404.jsonl"
    session = AvatarSession(
        staging.url, staging.token, media=True, allow_insecure_transport=True, config=CONFIG,
        record=path,
    )  # fmt: skip
    try:
        await session.connect()
        staging.faults.whep_404(times=1)
        assert await staging.faults.drop_socket(recovery=False) == 1
        await session.wait_for("reconnected", timeout=15)
    finally:
        await session.close()
    tape = load(path)
    # WHEP's POSTs (the genie's session_completed is a POST too: the thread is known at
    # connect now, so the close completes it)
    posts = [
        r.data["status"]
        for r in tape.of_kind("http")
        if r.data["method"] == "POST" and r.data.get("service") == "whep"
    ]
    assert posts == [201, 404, 201]
    stv_sessions = [r for r in tape.records if r.kind == "out" and r.name == Out.STV_NEW_SESSION]
    assert len(stv_sessions) == 3  # the first session, the cold one, the fresh one after 404
    async with ReplayServer(tape, answer_timeout=ANSWER) as backend:
        result = await backend.replay()
        assert result.same, str(result)
        assert backend.media.whep_statuses == posts


async def test_a_silent_socket_and_a_refused_token_replay_as_recorded(
    staging: StagingServer, tmp_path: Path
) -> None:
    """A socket that went silent (the SDK's probe dropped it: ``ping timeout``) goes silent
    again in the replay, so the SDK's probe finds it again; a refused CONNECT is refused
    again (the replay's own token is accepted otherwise, so only the script refuses it)."""
    silent, refused = tmp_path / "silent.jsonl", tmp_path / "refused.jsonl"
    probing = CONFIG.with_(socket_probe_interval=0.5, socket_probe_timeout=0.5)
    session = AvatarSession(
        staging.url, staging.token, media=False, allow_insecure_transport=True, config=probing,
        record=silent,
    )  # fmt: skip
    try:
        await session.connect()
        assert staging.faults.silent_socket(server_timeout=0.3) == 1
        await session.wait_for("reconnected", timeout=10)
    finally:
        await session.close()
    wrong = AvatarSession(
        staging.url, "wrong-token-0123", media=False, allow_insecure_transport=True,
        config=CONFIG, record=refused,
    )  # fmt: skip
    with pytest.raises(AvatarError):
        await wrong.connect()
    drops = [r.data["reason"] for r in load(silent).of_kind("drop")]
    assert drops == ["ping timeout", "io client disconnect"]
    result = await replay_cassette(silent, answer_timeout=ANSWER)
    assert result.same, str(result)
    assert [r.data["code"] for r in load(refused).of_kind("refused")] == ["auth_failed"]
    async with ReplayServer(refused, answer_timeout=ANSWER) as backend:
        result = await backend.replay()
        assert result.same, str(result)
        assert result.call_errors == ["connect: AvatarError"]
        assert backend.refused_connections == 1 and backend.connections == 0


async def test_no_token_no_registered_secret_and_no_user_text(
    staging: StagingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_secret(SECRET)
    kept, redacted, secret = (tmp_path / f"{n}.jsonl" for n in ("kept", "redacted", "secret"))
    await record_field_session(staging, kept, record_content=True)
    await record_field_session(staging, redacted)
    session = AvatarSession(
        staging.url, staging.token, genie_url=staging.genie_url, media=False,
        allow_insecure_transport=True, config=CONFIG, record=secret, record_content=True,
    )  # fmt: skip
    try:
        await session.connect()
        await session.speak(f"my key is {SECRET}")
        await session.wait_for("agent_turn_ended", timeout=5)
    finally:
        await session.close()
    for path in (kept, redacted, secret):
        text = path.read_text()
        assert staging.token not in text, path.name
        assert SECRET not in text, path.name
    assert "please take my email" in kept.read_text()  # record_content=True keeps it
    assert "my key is <redacted>" in secret.read_text()
    text = redacted.read_text()
    assert "please take my email" not in text and "did you get this" not in text
    assert "a@example.com" not in text  # the tool result's values are content too
    assert "a@example.com" in kept.read_text()
    # the check can fail: without the scrubbing, the token is there
    monkeypatch.setattr(recorder_module, "scrub", lambda value: value)
    leaky = tmp_path / "leaky.jsonl"
    await record_field_session(staging, leaky)
    assert staging.token in leaky.read_text()


async def test_a_cassette_cut_short_replays_its_prefix_and_bad_ones_are_refused(
    field_cassette: Path, tmp_path: Path
) -> None:
    lines = lines_of(field_cassette)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:40]) + lines[40][: len(lines[40]) // 2])  # died mid-line
    tape = load(cut)
    assert not tape.complete and tape.truncated_line == 41 and len(tape.records) == 39
    result = await replay_cassette(tape, answer_timeout=ANSWER)
    assert result.same, str(result)  # the prefix is what happened until the crash
    middle = tmp_path / "middle.jsonl"
    middle.write_text("".join(lines[:10]) + "{not json\n" + "".join(lines[10:]))
    for bad, detail in (
        (middle, "line 11 is not JSON"),
        (tmp_path / "missing.jsonl", "cannot read it"),
        (tmp_path / "empty.jsonl", "empty file"),
    ):
        if bad.name == "empty.jsonl":
            bad.write_text("")
        with pytest.raises(AvatarError) as caught:
            load(bad)
        assert caught.value.code == ErrorCode.INVALID_ARGUMENT
        assert detail in caught.value.message


async def test_the_golden_capture_replays_through_the_same_machinery() -> None:
    golden = json.loads(GOLDEN.read_text())
    tape = golden_cassette(golden)
    left_out = golden_coverage(golden, tape)
    assert set(left_out["in"]) <= LIVE  # every golden inbound event is scripted or live
    assert set(left_out["out"]) <= set(NOT_SENT)  # every outbound one expected, or said why
    result = await replay_cassette(tape, answer_timeout=ANSWER)
    assert result.same, str(result)
    assert result.matched == result.steps


async def test_a_golden_shape_the_sdk_breaks_is_a_divergence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The replay checks each golden outbound payload against its shape: an SDK whose
    ``join`` lost ``peer_audio`` diverges at the join."""
    real = handshake.build_join

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        payload = dict(real(*args, **kwargs))
        payload.pop("peer_audio", None)
        return payload

    monkeypatch.setattr(handshake, "build_join", broken)
    tape = golden_cassette(json.loads(GOLDEN.read_text()))
    result = await replay_cassette(tape, answer_timeout=ANSWER)
    assert result.divergence is not None
    assert result.divergence.expected == "-> join"
    assert result.divergence.got == "-> join whose payload.peer_audio is missing"


# -- the command line --------------------------------------------------------------------------
def run_cli(*args: str) -> Any:
    return CliRunner().invoke(main, ["replay", *args], catch_exceptions=False)


async def test_talk_cassette_records_a_session_that_replays(
    staging: StagingServer, tmp_path: Path
) -> None:
    path = tmp_path / "talk.jsonl"
    args = ["talk", staging.url, "--insecure", "--no-media", "--say", "hello there"]
    args += ["--set", "close_timeout=1", "--reply-timeout", "10", "--cassette", str(path)]
    talked = await asyncio.to_thread(
        CliRunner().invoke, main, args, env={"AVATAR_TOKEN": staging.token},
        catch_exceptions=False,
    )  # fmt: skip
    assert talked.exit_code == 0, talked.output
    tape = load(path)
    assert tape.complete
    assert [r.name for r in tape.of_kind("call")] == ["connect", "speak", "close"]
    assert staging.token not in path.read_text()
    replayed = await asyncio.to_thread(run_cli, str(path), "--answer-timeout", str(ANSWER))
    assert replayed.exit_code == 0, replayed.output


def test_a_cassette_that_cannot_be_written_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(AvatarError) as caught:
        AvatarSession(
            "http://127.0.0.1:9", "a-token", allow_insecure_transport=True,
            record=tmp_path / "no-such-dir" / "x.jsonl",
        )  # fmt: skip
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
    assert "record: cannot write" in caught.value.message


def test_cli_replay_exit_codes(tmp_path: Path) -> None:
    golden = golden_cassette(json.loads(GOLDEN.read_text()))
    path = tmp_path / "golden.jsonl"
    path.write_text(
        "".join(
            json.dumps(line) + "\n"
            for line in [
                golden.header,
                *({"t": r.t, "kind": r.kind, **r.data} for r in golden.records),
                {"t": 1.0, "kind": "end", "records": len(golden.records)},
            ]
        )
    )
    same = run_cli(str(path), "--answer-timeout", str(ANSWER))
    assert same.exit_code == 0, same.output
    assert same.output.startswith("same:")
    # a recording the SDK cannot match: a join that should have come twice
    lines = path.read_text().splitlines(keepends=True)
    join = next(i for i, line in enumerate(lines) if '"name": "join"' in line)
    diverging = tmp_path / "diverging.jsonl"
    diverging.write_text("".join(lines[: join + 1]) + lines[join] + "".join(lines[join + 1 :]))
    diverged = run_cli(str(diverging), "--answer-timeout", "1", "--json")
    assert diverged.exit_code == 1, diverged.output
    [line] = [x for x in diverged.output.splitlines() if x.startswith("{")]
    verdict = json.loads(line)
    assert verdict["same"] is False and verdict["divergence"]["expected"] == "-> join"
    assert verdict["divergence"]["index"] == join  # the duplicated record (header is line 0)
    missing = run_cli(str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 2 and "cannot read it" in missing.output
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("hello\n")
    bad = run_cli(str(garbage))
    assert bad.exit_code == 2 and "not JSON" in bad.output


async def test_a_fleet_spec_gives_each_session_its_cassette(
    staging: StagingServer, tmp_path: Path
) -> None:
    from avatar_sdk.fleet import SessionSpec  # noqa: PLC0415 - the fleet layer, only here

    folder = tmp_path / "cassettes"
    spec = SessionSpec(
        staging.url, staging.token, allow_insecure_transport=True, cassette_dir=str(folder)
    )
    assert spec.cassette_path(7) == folder / "session-7.jsonl"
    sessions = [spec.build(i) for i in (0, 1)]
    for session in sessions:
        await session.connect()
    for session in sessions:
        await session.close()
    for i in (0, 1):
        tape = load(folder / f"session-{i}.jsonl")
        assert tape.complete and tape.of_kind("open")
    assert (
        SessionSpec(staging.url, staging.token, allow_insecure_transport=True).cassette_path(0)
        is None
    )


class _WaitForWithoutATask:
    """``asyncio`` as engine.io's client sees it, with the ``wait_for`` of Python 3.12+
    (gh-96764: built on ``asyncio.timeout``, the awaitable not wrapped in a task), so that on
    3.11 too a message already read is handled without a yield, as on 3.12 and 3.13."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def wait_for(awaitable: Any, timeout: float | None) -> Any:
        async with asyncio.timeout(timeout):
            return await awaitable


async def test_the_socket_opens_before_its_first_event_whatever_the_scheduling(
    staging: StagingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 33, item 10: on 3.12+ engine.io reads the CONNECT reply and onServerConnected
    # (written together) without yielding, so the event was handled before connect()
    # returned, and the cassette said "in" before "open": its replay never sent it.
    import engineio.async_client  # noqa: PLC0415

    monkeypatch.setattr(engineio.async_client, "asyncio", _WaitForWithoutATask())
    path = tmp_path / "first-event.jsonl"
    session = AvatarSession(
        staging.url, staging.token, genie_url=staging.genie_url, media=False,
        allow_insecure_transport=True, config=CONFIG, record=path,
    )  # fmt: skip
    try:
        await session.connect()
        await session.wait_for("agent_turn_ended", timeout=5)
    finally:
        await session.close()
    kinds = [(r["kind"], r.get("name")) for r in records(path)[1:] if r["kind"] in ("open", "in")]
    assert kinds[0] == ("open", None), kinds[:3]
    result = await replay_cassette(path, answer_timeout=ANSWER)
    assert result.same, str(result)
