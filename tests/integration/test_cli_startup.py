"""``avatar-sdk --help`` (and every subcommand's ``--help``) starts without loading the
session stack: no WebRTC, no media codecs, no Socket.IO, no HTTP client, no staging server.

Each case runs in a fresh interpreter (a module imported by an earlier test in this process
would hide an eager import) and reports the ``sys.modules`` it ended with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from avatar_sdk._cli.main import main

ROOT = Path(__file__).resolve().parents[2]

#: Top-level packages (and SDK modules) a ``--help`` must not load: each costs tens to
#: hundreds of milliseconds at start.
HEAVY = ("aiortc", "av", "socketio", "engineio", "aiohttp", "aioice", "numpy")
HEAVY_SDK = ("avatar_sdk.testing.staging.server", "avatar_sdk.session", "avatar_sdk.transport")

_CHILD = """
import json, runpy, sys
sys.argv = ["avatar-sdk", *json.loads(sys.argv[1])]
try:
    runpy.run_module("avatar_sdk._cli", run_name="__main__")
except SystemExit as exit:
    code = exit.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the CLI (``()`` is the top level), from click's own tree."""
    paths = [prefix]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            paths += _command_paths(command, (*prefix, name))
        else:
            paths.append((*prefix, name))
    return paths


PATHS = _command_paths(main)


def test_every_command_is_covered() -> None:
    # the tree the cases below are built from (a renamed command still shows up here)
    assert {"talk", "demo", "fleet", "diagram", "staging"} <= {p[0] for p in PATHS if p}
    assert ("staging", "serve") in PATHS


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "top")
def test_help_loads_nothing_heavy(path: tuple[str, ...]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([*path, "--help"])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, proc.stderr
    assert "Usage:" in proc.stdout
    modules: list[str] = report["modules"]
    heavy = sorted(
        {m.split(".")[0] for m in modules if m.split(".")[0] in HEAVY}
        | {m for m in modules if m.startswith(HEAVY_SDK)}
    )
    assert heavy == [], f"`avatar-sdk {' '.join(path)} --help` imported {heavy}"
