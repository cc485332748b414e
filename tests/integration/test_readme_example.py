"""The README's first screen: the two commands, a runnable ten-line example, where the docs
are. The example is run as it is written, against the bundled staging backend."""

from __future__ import annotations

import re
import subprocess
import sys
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
    # the greeting and the answer, spoken words only: no tool call or tool response text
    assert "Hello" in result.stdout
    assert "responded with" not in result.stdout
