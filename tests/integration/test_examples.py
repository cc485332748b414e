"""Every example runs as is, as a user would run it: a subprocess against the embedded
staging backend (``PYTHONPATH`` pins it to this checkout)."""

from __future__ import annotations

import os
import py_compile
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run(*args: str, cwd: Path = ROOT, timeout: float = 90) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AVATAR_")} | {
        "PYTHONPATH": str(ROOT),
        "AVATAR_SDK_LEASE_DIR": os.environ["AVATAR_SDK_LEASE_DIR"],
    }
    out = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    return out.stdout


def test_every_example_is_covered_here() -> None:
    """A new example must be added to this module (and to examples/README.md)."""
    covered = {
        "qa_bot.py", "tool_handler.py", "record_avatar.py", "voice_captions.py",
        "test_qa_bot.py", "fault_tour.py", "microphone.py", "fleet_scenario.py",
        "scripted_avatar.py", "pipecat_avatar.py", "test_replay_my_app.py",
    }  # fmt: skip
    assert {p.name for p in EXAMPLES.glob("*.py")} == covered
    readme = (EXAMPLES / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in covered)


def test_fleet_scenario() -> None:
    out = run("examples/fleet_scenario.py")
    assert "sessions ok / failed   8 / 0" in out
    assert "turns ok / failed      16 / 0" in out
    assert "completion outcomes    sent=8" in out


def test_fleet_script_runs_with_the_cli() -> None:
    out = run(
        "-m", "avatar_sdk._cli", "fleet", "examples/fleet_script.yaml", "--staging",
        "-n", "2", "--rate", "10", "--engine", "inline",
    )  # fmt: skip
    # The summary's columns are as wide as its longest label (a per-turn-index row).
    assert re.search(r"^sessions ok / failed +2 / 0$", out, re.MULTILINE), out
    # Session 0 fires the drop and expects its recovery; session 1, which expects nothing,
    # may already have finished its last turn and closed when the drop lands (0.1 s behind
    # session 0, it ends about when session 0 fires: a fresh-clone run saw "socket 1").
    assert re.search(r"^recovery: socket +[12] ", out, re.MULTILINE), out


def test_qa_bot() -> None:
    out = run("examples/qa_bot.py", "What can you do?")
    assert out.splitlines() == ["you:    What can you do?", "avatar: You said: What can you do?"]


def test_tool_handler() -> None:
    out = run("examples/tool_handler.py")
    assert "[tool] open_filing {'doc': '10-K'}" in out
    assert "[tool] acknowledged call-1: ok" in out
    assert "avatar: Opened the 10-K." in out
    assert "[tool] refused:" in out and "'annual' is not one of" in out
    assert out.rstrip().endswith("the backend received 1 tool response(s)")


def test_scripted_avatar() -> None:
    lines = run("examples/scripted_avatar.py").splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "utterance 1", "utterance 2", "utterance 3", "long utterance",
    ]  # fmt: skip
    assert all("(played)" in line and "not heard" not in line for line in lines[:3])
    assert lines[3] == "long utterance: interrupted, interrupted=True"


def test_pipecat_avatar() -> None:
    lines = run("examples/pipecat_avatar.py").splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "sentence 1", "sentence 2", "sentence 3", "barge-in",
        "TTFB (first TTS frame -> avatar voice)", "at the output",
    ]  # fmt: skip
    assert all("finished (played)" in line and "unheard" not in line for line in lines[:3])
    assert lines[3] == "barge-in: the long sentence finished (interrupted); says after it: 0"
    assert len(lines[4].split(": ", 1)[1].split(", ")) == 2  # one TTFB per reply
    video, voice, raw = (int(part.split()[0]) for part in lines[5].split(": ", 1)[1].split(", "))
    assert video > 10 and voice > 50 and raw == 0


def test_record_avatar(tmp_path: Path) -> None:
    path = tmp_path / "avatar.mp4"
    out = run("examples/record_avatar.py", str(path))
    assert "audio (aac), video (h264)" in out
    assert path.stat().st_size > 1000


def test_voice_captions() -> None:
    out = run("examples/voice_captions.py")
    assert "[caption] Hello! I am the" in out
    assert "[speaking speech.wav: 1.0 s]" in out
    received = int(out.rsplit("received ", 1)[1].split(" ms")[0])
    assert received >= 1000  # the whole second of the file reached the backend


def test_fault_tour() -> None:
    out = run("examples/fault_tour.py")
    assert "transport drop         recovered: socket in" in out
    assert "unrecoverable drop     recovered: cold in" in out
    assert "agent restart          recovered: answered" in out
    assert "the conversation went on" in out


def test_the_bot_test_passes_with_the_plugin() -> None:
    out = run("-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
              "examples/test_qa_bot.py")  # fmt: skip
    assert "4 passed" in out


def test_the_replay_of_my_app_passes_with_the_plugin() -> None:
    out = run("-m", "pytest", "-q", "-s", "-p", "no:randomly", "-p", "no:cacheprovider",
              "examples/test_replay_my_app.py")  # fmt: skip
    assert "2 passed" in out
    # the bot that stopped early is caught at the second turn's first event, the close
    assert re.search(r"first divergence at record \d+ \(t=[\d.]+ s\): expected -> "
                     r"onTextEntered text=''; got socket closed", out), out  # fmt: skip


@pytest.mark.parametrize("name", ["microphone.py"])
def test_examples_not_run_here_at_least_compile(name: str, tmp_path: Path) -> None:
    py_compile.compile(str(EXAMPLES / name), cfile=str(tmp_path / "out.pyc"), doraise=True)
