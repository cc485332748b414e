"""The README's first screen: the two commands, a runnable ten-line example, where the docs
are. The example is run as it is written, against the bundled staging backend."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST_SCREEN = 40  # lines


def _first_screen() -> str:
    return "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:FIRST_SCREEN])


def test_the_first_screen_shows_the_commands_an_example_and_the_docs() -> None:
    screen = _first_screen()
    assert "make demo" in screen and "make test" in screen
    assert "```python" in screen
    assert "make docs" in screen and "docs/" in screen


def test_the_readme_example_runs_as_written() -> None:
    example = re.search(r"```python\n(.*?)```", _first_screen(), re.DOTALL)
    assert example is not None
    result = subprocess.run(
        [sys.executable, "-c", example.group(1)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # each question's own answer, spoken words only: never the greeting's, no tool text
    assert result.stdout.splitlines() == [
        "you:    What can you do?",
        "avatar: You said: What can you do?",
        "you:    Thanks!",
        "avatar: You said: Thanks!",
    ]
    assert "responded with" not in result.stdout


def test_the_quickstart_programs_run_as_written() -> None:
    """docs/quickstart.md's complete programs against the staging backend (those that
    start one), each run as a file would be: no top-level ``await`` to paste around."""
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    programs = [b for b in blocks if "StagingServer()" in b and "asyncio.run(" in b]
    assert len(programs) >= 2
    outputs = []
    for program in programs:
        result = subprocess.run(
            [sys.executable, "-c", program],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        outputs.append(result.stdout)
    assert "avatar: You said: What can you do?" in outputs[0].splitlines()
    for block in blocks:  # every fragment is valid at module level: no top-level await
        compile(textwrap.dedent(block), "<quickstart>", "exec")
