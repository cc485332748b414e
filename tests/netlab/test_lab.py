"""The network lab itself, with plain sockets: each fault is a real kernel-level one, and
the lab leaves nothing behind (on exit, on error, on Ctrl-C, after a SIGKILL)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from avatar_sdk.errors import AvatarError
from avatar_sdk.testing.netlab import NetworkLab, leftover_labs
from avatar_sdk.testing.netlab.netns import NETNS_DIR

ROOT = Path(__file__).resolve().parents[2]


def udp_echo(lab: NetworkLab) -> tuple[socket.socket, int]:
    """A UDP echo socket in the server namespace (served by a thread)."""
    import threading  # noqa: PLC0415

    with lab.server():
        server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind((lab.server_address, 0))

    def echo() -> None:
        while True:
            try:
                data, peer = server.recvfrom(2048)
            except OSError:
                return
            server.sendto(data, peer)

    threading.Thread(target=echo, daemon=True).start()
    return server, server.getsockname()[1]


def tcp_listener(lab: NetworkLab) -> tuple[socket.socket, int]:
    with lab.server():
        listener = socket.socket()
    listener.bind((lab.server_address, 0))
    listener.listen()
    return listener, listener.getsockname()[1]


def echoed(lab: NetworkLab, port: int, count: int) -> int:
    """How many of ``count`` datagrams come back from the echo port (client namespace)."""
    with lab.client():
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    got: set[bytes] = set()

    def drain(wait: float) -> None:
        client.settimeout(wait)
        try:
            while len(got) < count:
                got.add(client.recv(2048))
        except (TimeoutError, BlockingIOError):
            pass

    with client:
        for i in range(count):
            try:
                client.sendto(b"%d" % i, (lab.server_address, port))
            except OSError:  # the link is down: no route
                continue
            if i % 20 == 19:
                drain(0.002)  # read as we go: a full receive buffer would drop the rest
        drain(0.2)
        return len(got)


def ip_out(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def exists(name: str) -> bool:
    return os.path.exists(f"{NETNS_DIR}/{name}")


def start_lab_child() -> tuple[subprocess.Popen[str], list[str]]:
    """A child process that opens a lab; its two namespace names."""
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_lab_child.py"))],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None
    return child, child.stdout.readline().split()


def tcp_connect(lab: NetworkLab, port: int) -> str:
    with lab.client():
        client = socket.socket()
    with client:
        client.settimeout(0.5)
        try:
            client.connect((lab.server_address, port))
        except OSError as exc:
            return type(exc).__name__
        return "connected"


async def test_the_two_sides_reach_each_other_only_over_the_veth(lab: NetworkLab) -> None:
    server, port = udp_echo(lab)
    with server:
        assert echoed(lab, port, 20) == 20
    assert lab.client_address in ip_out("-n", lab.client_netns, "-o", "-4", "addr")
    assert "lab0" not in ip_out("-o", "link")  # nothing in the caller's namespace


async def test_loss_drops_about_the_asked_share_each_way(lab: NetworkLab) -> None:
    server, port = udp_echo(lab)
    with server:
        fault = await lab.loss(20, direction="up")
        back = echoed(lab, port, 1000)
        # One way at 20 %: ~800 back; a binomial's 6 sigma is +-76.
        print(f"loss 20% up: {back}/1000 echoed")
        assert 700 < back < 900
        await fault.off()
        assert not fault.on
        assert echoed(lab, port, 200) == 200


async def test_blackholes_by_protocol_and_port(lab: NetworkLab) -> None:
    server, udp_port = udp_echo(lab)
    listener, tcp_port = tcp_listener(lab)
    with server, listener:
        async with await lab.blackhole(protocol="udp"):
            assert echoed(lab, udp_port, 10) == 0
            assert tcp_connect(lab, tcp_port) == "connected"
        async with await lab.blackhole(protocol="tcp"):
            assert echoed(lab, udp_port, 10) == 10
            assert tcp_connect(lab, tcp_port) == "TimeoutError"
        async with await lab.blackhole(port=tcp_port):
            assert echoed(lab, udp_port, 10) == 10
            assert tcp_connect(lab, tcp_port) == "TimeoutError"
        async with await lab.blackhole(direction="down"):
            assert echoed(lab, udp_port, 10) == 0
        assert lab.faults == []
        assert tcp_connect(lab, tcp_port) == "connected"


async def test_reject_resets_tcp_and_answers_udp_with_icmp(lab: NetworkLab) -> None:
    server, udp_port = udp_echo(lab)
    listener, tcp_port = tcp_listener(lab)
    with server, listener:
        async with await lab.reject("tcp"):
            assert tcp_connect(lab, tcp_port) == "ConnectionRefusedError"
        async with await lab.reject("udp", port=udp_port):
            with lab.client():
                client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            with client:
                client.connect((lab.server_address, udp_port))
                client.settimeout(1)
                client.send(b"x")
                with pytest.raises(ConnectionRefusedError):
                    client.recv(16)


async def test_rate_limit_caps_the_downlink(lab: NetworkLab) -> None:
    listener, port = tcp_listener(lab)
    with listener:
        async with await lab.rate_limit(400, direction="down"):
            with lab.client():
                client = socket.socket()
            with client:
                client.connect((lab.server_address, port))
                peer, _ = listener.accept()
                with peer:
                    peer.setblocking(False)
                    payload = b"x" * 65536
                    received = 0
                    client.settimeout(0.1)
                    start = time.monotonic()
                    while time.monotonic() - start < 1.5:
                        with contextlib.suppress(BlockingIOError):
                            peer.send(payload)
                        with contextlib.suppress(TimeoutError):
                            received += len(client.recv(65536))
                    kbit = received * 8 / 1000 / (time.monotonic() - start)
        print(f"rate limit 400 kbit/s: {kbit:.0f} kbit/s received")
        assert kbit < 600  # the burst adds a little; unlimited veth is Gbit/s


async def test_flap_and_address_change(lab: NetworkLab) -> None:
    server, port = udp_echo(lab)
    with server:
        await lab.link_down()
        assert echoed(lab, port, 5) == 0
        await lab.link_up()
        # The carrier comes back at once on a veth; the first datagrams may meet ARP.
        assert await _eventually(lambda: echoed(lab, port, 5) == 5)
        old = lab.client_address
        new = await lab.change_address()
        assert new != old and lab.client_address == new
        out = ip_out("-n", lab.client_netns, "-o", "-4", "addr", "show", "lab0")
        assert new in out and old not in out
        assert echoed(lab, port, 5) == 5  # a new socket uses the new address


async def _eventually(check: object, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.05)
    return False


# -- clean-up -------------------------------------------------------------------------------
def mine() -> list[str]:
    return leftover_labs(os.getpid())


async def test_nothing_is_left_after_the_lab_closes() -> None:
    async with NetworkLab() as lab:
        names = {lab.client_netns, lab.server_netns}
        assert names <= set(mine())
    assert names.isdisjoint(mine())


async def test_nothing_is_left_after_an_error_inside() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with NetworkLab() as lab:
            names = {lab.client_netns, lab.server_netns}
            raise RuntimeError("boom")
    assert names.isdisjoint(mine())
    with pytest.raises(AvatarError, match="not open"):
        await lab.blackhole()


async def test_the_clean_up_check_sees_a_lab_left_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check the tests above rely on fails when the clean-up is skipped."""

    async def skipped(self: NetworkLab) -> None:
        return None

    monkeypatch.setattr(NetworkLab, "close", skipped)
    async with NetworkLab() as lab:
        names = {lab.client_netns, lab.server_netns}
    try:
        assert names <= set(mine())  # the check fails here: the lab is left behind
    finally:
        monkeypatch.undo()
        await lab.close()
    assert names.isdisjoint(mine())


def test_ctrl_c_removes_the_lab() -> None:
    child, names = start_lab_child()
    try:
        assert len(names) == 2 and all(exists(n) for n in names)
        child.send_signal(signal.SIGINT)
        assert child.wait(10) == 130
        assert not any(exists(n) for n in names)
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()


def test_a_killed_labs_namespaces_are_removed_by_the_next_lab() -> None:
    child, names = start_lab_child()
    child.kill()
    child.wait()
    assert child.stdout is not None
    child.stdout.close()
    assert len(names) == 2 and all(exists(n) for n in names)  # SIGKILL: left behind

    async def open_one() -> None:
        async with NetworkLab():
            pass

    asyncio.run(open_one())
    assert not any(exists(n) for n in names)
