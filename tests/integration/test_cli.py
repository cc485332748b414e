"""The console script: diagram in sync with the docs, standalone staging with its fault API."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from avatar_sdk import AvatarError, AvatarSession, ErrorCode
from avatar_sdk.machine import mermaid
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.control import BRAIN_SCRIPTS, fault_names

from .conftest import FAST

ROOT = Path(__file__).resolve().parents[2]


def test_docs_diagram_is_the_generated_one() -> None:
    # The page holds a marker that the docs build fills from the machine (tools/docgen.py).
    from tools.docgen import expand  # noqa: PLC0415 - the docs tooling, only for this test

    text = expand((ROOT / "docs" / "state-machine.md").read_text())
    assert mermaid() in text, "docs/state-machine.md lost its generated state diagram"


async def test_standalone_staging_serves_sessions_and_faults() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk.cli", "staging", "serve", "--port", "0",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
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
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


async def _post(http: aiohttp.ClientSession, url: str, body: object = None) -> tuple[int, Any]:
    async with http.post(url, json=body) as resp:
        return resp.status, await resp.json()


async def test_standalone_staging_advertises_its_host_and_is_driven_over_http() -> None:
    """``--advertise-host``: the URLs handed out (the WHEP URL) name that host; faults and
    brain scripts are driven over the HTTP control API, as a non-Python suite would."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk.cli", "staging", "serve", "--port", "0",
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
            await session.wait_for("agent_talking", 3, lambda e: not e.data["talking"])
            spoken: list[str] = []
            session.on(
                "agent_text",
                lambda e: spoken.append(e.data["content"]) if e.data["type"] == "avatar" else None,
            )
            answered = session.expect(
                "agent_turn_ended", lambda e: "hello" in (e.data["speech_id"] or ""), 3
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
