"""The console script against the embedded staging backend: every exit code of ``talk``
produced by a real fault, the demo, the diagram, and the standalone staging backend.

Most commands run in-process (click's runner, on a worker thread with its own event loop,
while the staging backend runs on the test's loop); Ctrl-C and the lease of another process
need real processes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
import wave
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import av
import pytest
from click.testing import CliRunner, Result
from yarl import URL

from avatar_sdk import AvatarError, AvatarSession, ErrorCode
from avatar_sdk._cli.main import DIAGRAM_VIEWS, main
from avatar_sdk.session.core.diagram import VIEWS, mermaid, overview, view
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.staging.control import BRAIN_SCRIPTS, fault_names

from .conftest import FAST, until
from .core_only import core_site

ROOT = Path(__file__).resolve().parents[2]
#: Shrunk timeouts for the command line (the same as the suite's FAST config).
QUICK = ["--set", "close_timeout=1", "--set", "join_complete_timeout=2", "--reply-timeout", "10"]


async def cli(*args: str, token: str | None = None, stdin: str | None = None) -> Result:
    """``avatar-sdk ARGS`` in this process, on a worker thread (its own event loop)."""
    env = {"AVATAR_TOKEN": token}
    return await asyncio.to_thread(
        CliRunner().invoke, main, list(args), input=stdin, env=env, catch_exceptions=False
    )


def talk_args(staging: StagingServer, *more: str) -> list[str]:
    return ["talk", staging.url, "--insecure", "--genie-url", staging.genie_url, *QUICK, *more]


def one_line_error(result: Result) -> str:
    """stderr carries exactly one ``avatar-sdk:`` line and no traceback."""
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("avatar-sdk:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def user_turn_arrived(staging: StagingServer) -> Callable[[], bool]:
    return lambda: any(conv.user_turns for conv in staging.conversations.values())


# -- help, version, diagram ------------------------------------------------------------------
def test_docs_diagram_is_the_generated_one() -> None:
    # The page holds a marker that the docs build fills from the machine (tools/docgen.py).
    from tools.docgen import expand  # noqa: PLC0415 - the docs tooling, only for this test

    text = expand((ROOT / "docs" / "state-machine.md").read_text())
    assert overview() in text, "docs/state-machine.md lost its generated overview"
    for v in VIEWS:  # and one readable diagram per part of the story
        assert f"### {v.title}" in text and view(v.name) in text, v.name


def test_help_is_plain_text_with_the_exit_codes() -> None:
    runner = CliRunner()
    for args in (["--help"], ["talk", "--help"], ["demo", "--help"], ["staging", "serve", "-h"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
        assert "\x1b[" not in result.output and "[bold" not in result.output
    talk_help = runner.invoke(main, ["talk", "--help"]).output
    for code in (0, 2, 3, 4, 5, 6, 7, 130):
        assert re.search(rf"^\s+{code}\s+\w", talk_help, re.MULTILINE), code
    for option in ("--say", "--token-file", "--json", "--audio", "--record", "--no-media"):
        assert re.search(rf"{option}\b.*\w", talk_help), option
    assert "--token " not in talk_help  # the token is never a flag
    version = runner.invoke(main, ["--version"])
    assert version.exit_code == 0 and re.fullmatch(r"avatar-sdk, version \S+\n", version.output)
    assert runner.invoke(main, ["diagram"]).output == mermaid()
    assert runner.invoke(main, ["diagram", "--view", "overview"]).output == overview()
    assert runner.invoke(main, ["diagram", "--view", "media"]).output == view("media")
    assert runner.invoke(main, ["diagram", "--view", "nothing"]).exit_code == 2
    assert set(DIAGRAM_VIEWS) == {"all", "overview"} | {v.name for v in VIEWS}


# -- talk: exit codes ------------------------------------------------------------------------
async def test_talk_0_answers_each_turn_then_completes_the_thread(staging: StagingServer) -> None:
    staging.brain.tool_calls(['open_filing {"doc": "10-K"}'], then="Opened.")
    result = await cli(*talk_args(staging, "--no-media", "--say", "Open it", "--say", "Thanks"),
                       token=staging.token)  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "avatar: Hello! I am the staging avatar. How can I help?" in out
    assert "avatar: Opened.\n" in out  # what the avatar says, never the tool segments
    assert "tool open_filing" in out and "responded with size" not in out
    assert "avatar: You said: Thanks" in out
    assert out.index("you:    Open it") < out.index("avatar: Opened.")
    assert len(staging.completed_threads) == 1


async def test_talk_reads_turns_from_stdin_and_prints_json(staging: StagingServer) -> None:
    result = await cli(*talk_args(staging, "--no-media", "--json"), token=staging.token,
                       stdin="first\n\nsecond\n")  # fmt: skip
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert all(set(r) == {"event", "t", "data"} for r in records)
    names = [r["event"] for r in records]
    assert names.count("agent_turn_ended") == 3  # greeting + two turns (the blank line skipped)
    spoken = [r["data"]["content"] for r in records if r["event"] == "agent_text"]
    assert "".join(spoken).count("You said:") == 2
    assert names[-1] == "ended" and staging.token not in result.output
    # each turn's figures, named as on Reply, the spans and the fleet report (issue 30)
    timed = [r["data"] for r in records if r["event"] == "turn_latency"]
    assert [t["source"] for t in timed] == ["speak", "speak"]
    for figures in timed:
        assert 0 < figures["text_latency"] <= figures["generated_latency"]
        assert figures["audio_latency"] is None and figures["played_latency"] is None  # no media


async def test_talk_2_usage_errors(staging: StagingServer, tmp_path: Path) -> None:
    no_token = await cli(*talk_args(staging, "--say", "hi"), token=None)
    assert no_token.exit_code == 2 and "set AVATAR_TOKEN or pass --token-file" in no_token.stderr
    empty = tmp_path / "token"
    empty.write_text("\n")
    empty_file = await cli(*talk_args(staging, "--token-file", str(empty)), token=None)
    assert empty_file.exit_code == 2 and "is empty" in empty_file.stderr
    bad_field = await cli(*talk_args(staging, "--set", "close_timout=1"), token="t")
    assert (
        bad_field.exit_code == 2
        and "unknown SessionConfig field 'close_timout'" in bad_field.stderr
    )
    bad_value = await cli(*talk_args(staging, "--set", "close_timeout=-1"), token="t")
    assert bad_value.exit_code == 2 and "close_timeout must be a finite number" in bad_value.stderr
    media = await cli(*talk_args(staging, "--no-media", "--record", str(tmp_path / "x.mp4")),
                      token="t")  # fmt: skip
    assert media.exit_code == 2 and "need media" in media.stderr
    assert staging.connections == 0


async def test_talk_2_insecure_url_says_how_to_allow_it(staging: StagingServer) -> None:
    # A missing flag is a usage mistake (exit 2), told in the command's terms.
    result = await cli("talk", staging.url, "--no-media", "--say", "hi", token=staging.token)
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "pass --insecure" in line and "allow_insecure_transport" not in line
    assert staging.connections == 0


async def test_talk_token_file(staging: StagingServer, tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(staging.token + "\n")
    result = await cli(*talk_args(staging, "--no-media", "--token-file", str(path), "--say", "hi"),
                       token=None)  # fmt: skip
    assert result.exit_code == 0, result.output


async def test_talk_3_refused_token_or_tier(staging: StagingServer) -> None:
    refused = await cli(*talk_args(staging, "--no-media", "--say", "hi"), token="not-the-token")
    assert refused.exit_code == 3
    assert "[auth_failed]" in one_line_error(refused)
    assert "not-the-token" not in refused.output
    staging.faults.tier_exceeded()
    tier = await cli(*talk_args(staging, "--no-media", "--say", "hi"), token=staging.token)
    assert tier.exit_code == 3 and "[tier_exceeded]" in one_line_error(tier)
    assert staging.refused_connections == 1 and staging.connections == 1  # never retried


async def test_talk_4_capacity_wait_exhausted(staging: StagingServer) -> None:
    staging.faults.capacity_full(30)
    result = await cli(
        *talk_args(staging, "--no-media", "--say", "hi", "--set", "capacity_max_wait=0.4",
                   "--set", "capacity_backoff=0.1"),
        token=staging.token,
    )  # fmt: skip
    assert result.exit_code == 4, result.output
    assert "[capacity_unavailable]" in one_line_error(result)
    assert "no capacity: queued" in result.stdout


async def test_talk_5_gave_up_after_retries(staging: StagingServer) -> None:
    """A cold reconnect that cannot succeed (the agent never shows) exhausts its budget."""
    staging.brain.stall(10)  # the CLI is waiting for this answer when the faults hit
    running = asyncio.ensure_future(
        cli(
            *talk_args(staging, "--no-media", "--say", "hi", "--set", "agent_timeout=0.3",
                       "--set", "cold_reconnect.max_attempts=2",
                       "--set", "cold_reconnect.min_span=0", "--set", "reconnect_window=1"),
            token=staging.token,
        )
    )  # fmt: skip
    assert await until(user_turn_arrived(staging), 10)
    staging.faults.withhold("showAgent")
    await staging.faults.drop_socket(recovery=False)
    result = await running
    assert result.exit_code == 5, result.output
    assert "gave up: cold tier after 2 attempts (agent_timeout)" in result.stdout


async def test_talk_5_connect_attempts_exhausted() -> None:
    staging = StagingServer()
    await staging.start()
    url = staging.url
    await staging.stop()  # nothing listens there any more: connection refused
    started = time.monotonic()
    result = await cli("talk", url, "--insecure", "--no-media", "--say", "hi",
                       "--connect-attempts", "2", token="t")  # fmt: skip
    assert result.exit_code == 5, result.output
    assert "after 2 attempts" in one_line_error(result)  # the attempts are one line
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("fault", ["end_conversation", "agent_crash", "server_disconnect"])
async def test_talk_6_server_ended_the_conversation(staging: StagingServer, fault: str) -> None:
    staging.brain.stall(10)
    running = asyncio.ensure_future(
        cli(*talk_args(staging, "--no-media", "--say", "hi", "--say", "never sent"),
            token=staging.token)
    )  # fmt: skip
    assert await until(user_turn_arrived(staging), 10)
    if fault == "agent_crash":
        await staging.faults.agent_crash(recoverable=False)
    else:
        await getattr(staging.faults, fault)()
    result = await running
    assert result.exit_code == 6, result.output
    assert "never sent" not in result.stdout
    assert [t for c in staging.conversations.values() for t in c.user_turns] in ([], ["hi"])


async def test_talk_7_thread_held_by_another_process(staging: StagingServer) -> None:
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c",
        "import sys\n"
        "from avatar_sdk.lifecycle.leases import ThreadLeases\n"
        "lease = ThreadLeases().acquire('thr-held')\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n",
        cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert await asyncio.wait_for(holder.stdout.readline(), 20) == b"held\n"
        result = await cli(*talk_args(staging, "--no-media", "--thread", "thr-held", "--say", "x"),
                           token=staging.token)  # fmt: skip
        assert result.exit_code == 7, result.output
        assert "thread thr-held is held by 1 other live process" in one_line_error(result)
        assert staging.connections == 0
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        await asyncio.wait_for(holder.wait(), 10)
    free = await cli(*talk_args(staging, "--no-media", "--thread", "thr-held", "--say", "x"),
                     token=staging.token)  # fmt: skip
    assert free.exit_code == 0, free.output  # the holder is gone: the thread is free


async def test_talk_130_ctrl_c_completes_the_thread_within_close_timeout(
    staging: StagingServer,
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk._cli", *talk_args(staging, "--no-media"),
        cwd=ROOT, env={**os.environ, "AVATAR_TOKEN": staging.token},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    try:
        async with asyncio.timeout(30):
            while b"avatar: " not in await proc.stdout.readline():
                pass  # until the greeting: connected, thread known
        assert await until(lambda: bool(staging.live_sids), 5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(proc.wait(), 10)
        took = time.monotonic() - sent
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stderr = (await proc.stderr.read()).decode()
    assert code == 130, stderr
    assert took < 1.0 + 1.5  # close_timeout=1, plus interpreter exit
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines() == ["avatar-sdk: interrupted: closing the session"]
    assert len(staging.completed_threads) == 1  # the thread was completed


# -- talk: media -----------------------------------------------------------------------------
def write_wav(path: Path, seconds: float, rate: int = 16_000) -> None:
    count = int(seconds * rate)
    samples = array("h", (8000 if (i // 20) % 2 else -8000 for i in range(count)))
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(samples.tobytes())


async def test_talk_speaks_a_wav_and_records_the_avatar(
    staging: StagingServer, tmp_path: Path
) -> None:
    speech, recording = tmp_path / "speech.wav", tmp_path / "avatar.mp4"
    write_wav(speech, 0.6)
    result = await cli(
        *talk_args(staging, "--audio", str(speech), "--record", str(recording), "--say", "hi"),
        token=staging.token,
    )
    assert result.exit_code == 0, result.output
    assert f"recorded {recording}" in result.stdout
    with av.open(str(recording)) as container:
        kinds = sorted(stream.type for stream in container.streams)
        decoded = dict.fromkeys(kinds, 0)
        for frame in container.decode(*container.streams):
            decoded["video" if isinstance(frame, av.VideoFrame) else "audio"] += 1
    assert kinds == ["audio", "video"]
    assert decoded["audio"] > 10 and decoded["video"] > 3, decoded
    sid = staging.received_events("join")[0].sid
    assert staging.media.asr_stats(sid).frames >= 25  # the file reached the backend (0.6 s)


# -- demo ------------------------------------------------------------------------------------
async def test_demo_timeline_and_summary_without_media() -> None:
    """As ``make demo`` runs it (a process of its own: stderr shows what a user sees)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk._cli", "demo", "--no-media", "--faults", "socket,cold",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stdout.decode() + stderr.decode()
    assert stderr.decode() == ""  # no transport chatter from the libraries' loggers
    out = stdout.decode()
    assert re.search(r"^\s+[\d.]+s  reconnected: socket tier in \d+ ms", out, re.MULTILINE)
    assert re.search(r"^socket\s+a recoverable transport drop\s+socket\s+in place\s+\d+ ms\s+"
                     r"recovered$", out, re.MULTILINE)  # fmt: skip
    assert re.search(r"^cold\s+.*\s+cold\s+new server session\s+\d+ ms\s+recovered$", out,
                     re.MULTILINE)  # fmt: skip
    # The new server session greets again, on its own line, before the next question.
    assert out.count("avatar: Hello! I am the staging avatar. How can I help?\n") == 2
    assert re.search(r"you:    And after all that\?\n.*avatar: You said: And after all that\?\n",
                     out)  # fmt: skip
    assert "thread_id" not in out and "None" not in out


async def test_demo_rejects_unknown_or_media_faults() -> None:
    unknown = await cli("demo", "--faults", "socket,bogus")
    assert unknown.exit_code == 2 and "unknown fault(s): bogus" in unknown.stderr
    media = await cli("demo", "--no-media", "--faults", "stv")
    assert media.exit_code == 2 and "stv need media" in media.stderr


# -- staging serve ---------------------------------------------------------------------------
async def test_standalone_staging_serves_sessions_and_faults() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk._cli", "staging", "serve", "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        info = json.loads(line)
        session = AvatarSession(
            info["url"], info["token"], media=False, allow_insecure_transport=True, config=FAST
        )
        await session.connect()
        waiter = session.expect("reconnected", timeout=5)
        async with aiohttp.ClientSession() as http:
            url = f"{info['url']}/_control/faults/drop_socket"
            async with http.post(url, json={"recovery": True}) as resp:
                assert resp.status == 200
                assert (await resp.json())["result"] == 1
            async with http.post(f"{info['url']}/_control/faults/no_such_fault") as resp:
                assert resp.status == 404
        assert (await waiter).data["recovered"] is True
        await session.close()
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 10) == 130
        assert (await proc.stderr.read()).decode().splitlines() == ["avatar-sdk: interrupted"]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_staging_serve_on_a_busy_port_is_one_line(staging: StagingServer) -> None:
    result = await cli("staging", "serve", "--port", str(staging.port))
    assert result.exit_code == 3
    assert one_line_error(result) == (
        f"avatar-sdk: cannot serve on 127.0.0.1:{staging.port}: the port is already in use"
    )


async def _post(http: aiohttp.ClientSession, url: str, body: object = None) -> tuple[int, Any]:
    async with http.post(url, json=body) as resp:
        return resp.status, await resp.json()


async def test_standalone_staging_advertises_its_host_and_is_driven_over_http() -> None:
    """``--advertise-host``: the URLs handed out (the WHEP URL) name that host; faults and
    brain scripts are driven over the HTTP control API, as a non-Python suite would."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk._cli", "staging", "serve", "--port", "0",
        "--advertise-host", "localhost",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    sessions: list[AvatarSession] = []

    def session_for(info: dict[str, str]) -> AvatarSession:
        made = AvatarSession(
            info["url"], info["token"], media=False, allow_insecure_transport=True, config=FAST
        )
        sessions.append(made)
        return made

    try:
        assert proc.stdout is not None
        info = json.loads(await asyncio.wait_for(proc.stdout.readline(), 20))
        assert URL(info["url"]).host == "localhost"
        control = f"{info['url']}/_control"
        async with aiohttp.ClientSession() as http:
            # An admission verdict at the older join step, then at the service's step.
            for step in ("join", "stv"):
                status, body = await _post(http, f"{control}/faults/tier_exceeded", {"step": step})
                assert (status, body) == (200, {"ok": True, "result": None})
                with pytest.raises(AvatarError) as info_error:
                    await session_for(info).connect()
                assert info_error.value.code is ErrorCode.TIER_EXCEEDED
            # availability and a scripted reply, then a session that sees both.
            assert (await _post(http, f"{control}/faults/availability", {"available": False}))[
                0
            ] == 200
            reply = {"text": "Scripted over HTTP."}
            assert (await _post(http, f"{control}/brain/reply", reply))[0] == 200
            session = session_for(info)
            capacity = session.expect("capacity_changed", timeout=5)
            await session.connect()
            assert (await capacity).data["available"] is False
            stv = session._slot.current.result.stv  # type: ignore[union-attr]
            assert stv is not None and URL(stv.webrtc_url).host == "localhost"
            await session.wait_for(
                "agent_talking", timeout=3, predicate=lambda e: not e.data["talking"]
            )
            spoken: list[str] = []
            session.on(
                "agent_text",
                lambda e: spoken.append(e.data["content"]) if e.data["type"] == "avatar" else None,
            )
            answered = session.expect(
                "agent_turn_ended",
                predicate=lambda e: "hello" in (e.data["speech_id"] or ""),
                timeout=3,
            )
            await session.speak("hello")
            await answered
            assert "".join(spoken) == "Scripted over HTTP."
            # A voice turn over HTTP.
            heard = session.expect("user_transcription", timeout=5)
            status, body = await _post(http, f"{control}/brain/voice_turn", {"text": "by voice"})
            assert (status, body) == (200, {"ok": True, "result": 1})
            assert (await heard).data["text"] == "by voice"
            async with http.get(f"{control}/conversations") as resp:
                live = [c for c in await resp.json() if not c["ended"]]
            assert [c["voice_turns"] for c in live] == [["by voice"]]
            assert live[0]["debug_mode"] is True
            # Errors: unknown names, helpers that are not faults, bad arguments.
            assert (await _post(http, f"{control}/faults/no_such_fault"))[0] == 404
            assert (await _post(http, f"{control}/faults/take_admission_error"))[0] == 404
            assert (await _post(http, f"{control}/brain/next_plan"))[0] == 404
            status, body = await _post(http, f"{control}/faults/tier_exceeded", {"step": "x"})
            assert status == 400 and "step" in body["error"]
            assert (await _post(http, f"{control}/faults/latency", [1]))[0] == 400
    finally:
        for made in sessions:
            await made.close()
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


_CURL = re.compile(r"""^curl -s -X POST "\$STAGING(/_control/\S+)"(?: -d '(.*)')?$""")


def _doc_examples() -> list[tuple[str, Any]]:
    """The runnable ``curl`` examples of docs/testing.md: (path, JSON body or None)."""
    text = (ROOT / "docs" / "testing.md").read_text()
    found = []
    for line in text.splitlines():
        match = _CURL.match(line.strip())
        if match:
            found.append((match[1], json.loads(match[2]) if match[2] else None))
    return found


async def test_docs_show_a_runnable_example_for_every_fault_and_brain_script() -> None:
    """Every fault and brain script has a ``curl`` example in docs/testing.md, and each one
    is accepted by the control API of a running backend (in-process here)."""
    examples = _doc_examples()
    async with StagingServer(control_api=True) as staging:
        documented = {path for path, _ in examples}
        missing = [f for f in fault_names(staging) if f"/_control/faults/{f}" not in documented]
        missing += [b for b in BRAIN_SCRIPTS if f"/_control/brain/{b}" not in documented]
        assert missing == [], f"docs/testing.md lacks curl examples for {missing}"
        async with aiohttp.ClientSession() as http:
            for path, body in examples:
                status, answer = await _post(http, staging.url + path, body)
                assert (status, answer.get("ok")) == (200, True), (path, answer)
        assert staging.faults.injected  # they really ran


async def test_the_demo_runs_on_the_core_install(tmp_path: Path) -> None:
    """``make demo`` installs the SDK alone (its small ``.venv-demo``): the demo, media and
    faults included, needs nothing of the extras (issue 33, item 6)."""
    site = core_site(tmp_path / "site")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-S", "-m", "avatar_sdk._cli", "demo", "--faults", "socket,stv",
        cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])},
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, stdout.decode()[-2000:] + stderr.decode()[-2000:]
    assert re.search(r"^stv\s+.*\s+media\s+.*recovered$", stdout.decode(), re.MULTILINE)
