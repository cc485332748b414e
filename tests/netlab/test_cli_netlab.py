"""``avatar-sdk netlab``: the command runs in the client namespace against the staging
backend across the lab, its exit code is the CLI's, and the lab is gone afterwards (also on
Ctrl-C)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from avatar_sdk.testing.netlab.netns import NETNS_DIR

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
CLI = [sys.executable, "-m", "avatar_sdk._cli", "netlab"]

PROBE = """
import os, socket, urllib.request
addr = socket.gethostbyname(socket.gethostname())
body = urllib.request.urlopen(os.environ["AVATAR_URL"] + "/healthz", timeout=5).read()
print("healthz", body.decode().strip()[:40])
print("token set", bool(os.environ["AVATAR_TOKEN"]))
print("interfaces", sorted(name for _, name in socket.if_nameindex()))
raise SystemExit(7)
"""


def lab_line(stderr: str) -> dict[str, object]:
    line = next(x for x in stderr.splitlines() if x.startswith("avatar-sdk netlab: {"))
    info: dict[str, object] = json.loads(line.split(": ", 1)[1])
    return info


def test_the_command_runs_on_the_client_side_and_its_code_is_kept() -> None:
    done = subprocess.run(
        [*CLI, "--loss", "1", "--", sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 7, done.stderr
    info = lab_line(done.stderr)
    assert info["faults"] == ["loss 1% udp both"]
    assert str(info["url"]).startswith("http://10.231.0.1:")
    assert "healthz" in done.stdout and "token set True" in done.stdout
    assert "'lab0'" in done.stdout  # the client namespace's interfaces: lo and the veth
    assert not os.path.exists(f"{NETNS_DIR}/{info['client_netns']}")
    assert not os.path.exists(f"{NETNS_DIR}/{info['server_netns']}")


def test_ctrl_c_removes_the_lab() -> None:
    with subprocess.Popen(
        [*CLI, "--blackhole", "udp"], cwd=ROOT, env=ENV, stderr=subprocess.PIPE, text=True
    ) as child:
        assert child.stderr is not None
        info = lab_line(child.stderr.readline())
        names = [str(info["client_netns"]), str(info["server_netns"])]
        assert all(os.path.exists(f"{NETNS_DIR}/{n}") for n in names)
        child.send_signal(signal.SIGINT)
        assert child.wait(20) == 130
        assert not any(os.path.exists(f"{NETNS_DIR}/{n}") for n in names)
