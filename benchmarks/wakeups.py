"""``wakeups``: what one wake-up from an idle sleep costs this machine, in CPU.

Why this figure: on a virtual machine the first instructions after a sleep run on cold
caches (and the hypervisor's entry path), so a wake-up costs the process far more CPU
than the work it wakes up for. A 20 ms audio frame's Opus encode is a few tens of
microseconds; the wake-up for it, on the benchmark VM, several times that. This is the
share of an audio session's CPU that no codec choice removes, and the reason the uplink
sources of a process share one 20 ms grid (:mod:`avatar_sdk.media.grid`): K sessions on one
grid wake the loop 50 times a second instead of 50 x K.

Measured in this process, nothing else running in it (a fresh interpreter is not needed:
nothing here allocates per iteration):

* ``time.sleep(20 ms)`` and ``asyncio.sleep(20 ms)``: process CPU per iteration of a loop
  that does nothing else;
* the same ``asyncio.sleep`` with 4 sleepers due at the same instant, per sleeper: what
  sharing a grid saves;
* a UDP ``sendto`` on loopback to a receiver blocked in ``recv`` (in a child process), every
  20 ms: the sender's CPU for the send, which includes waking the receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import socket
import time
from multiprocessing.connection import Connection

from .stats import FigureResult, Row

TITLE = "wakeups: CPU of one wake-up from an idle sleep (what pacing costs this machine)"

PERIOD = 0.020
ITERATIONS = 250


def _sleep_cost() -> float:
    """CPU seconds per ``time.sleep(PERIOD)``."""
    started = time.process_time()
    for _ in range(ITERATIONS):
        time.sleep(PERIOD)
    return (time.process_time() - started) / ITERATIONS


async def _async_sleep_cost(sleepers: int) -> float:
    """CPU seconds per sleeper per wake-up, ``sleepers`` tasks due at the same instants."""
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def one() -> None:
        for n in range(1, ITERATIONS + 1):
            await asyncio.sleep(max(0.0, start + n * PERIOD - loop.time()))

    began = time.process_time()
    await asyncio.gather(*(one() for _ in range(sleepers)))
    return (time.process_time() - began) / ITERATIONS / sleepers


def _receive_forever(conn: Connection, port_out: Connection) -> None:
    """Child: a receiver blocked in ``recv`` (asleep between datagrams)."""
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    port_out.send(receiver.getsockname()[1])
    receiver.settimeout(0.5)
    while not conn.poll():
        with contextlib.suppress(TimeoutError):
            receiver.recv(2048)
    receiver.close()


def _send_cost() -> float:
    """Sender CPU seconds per datagram to a sleeping receiver (one every PERIOD)."""
    context = multiprocessing.get_context("spawn")
    stop_parent, stop_child = context.Pipe()
    port_parent, port_child = context.Pipe()
    child = context.Process(target=_receive_forever, args=(stop_child, port_child), daemon=True)
    child.start()
    try:
        port = port_parent.recv()
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        payload = bytes(160)  # an Opus voice packet with its RTP and SRTP overhead
        spent = 0.0
        for _ in range(ITERATIONS):
            time.sleep(PERIOD)
            began = time.thread_time()
            sender.sendto(payload, ("127.0.0.1", port))
            spent += time.thread_time() - began
        sender.close()
        return spent / ITERATIONS
    finally:
        stop_parent.send("stop")
        child.join(5.0)
        if child.is_alive():
            child.terminate()


def run() -> FigureResult:
    """``python -m benchmarks --only wakeups``."""
    result = FigureResult("wakeups", TITLE)
    sleep = _sleep_cost()
    alone = asyncio.run(_async_sleep_cost(1))
    shared = asyncio.run(_async_sleep_cost(4))
    send = _send_cost()
    us = 1e6
    result.rows = [
        Row("time.sleep(20 ms): CPU per wake-up", ITERATIONS, sleep * us, "us"),
        Row("asyncio.sleep(20 ms): CPU per wake-up", ITERATIONS, alone * us, "us"),
        Row("  4 sleepers on one grid: CPU per sleeper", ITERATIONS * 4, shared * us, "us"),
        Row("UDP sendto to a sleeping receiver: sender CPU", ITERATIONS, send * us, "us"),
    ]
    per_second = 50 * alone
    result.notes = [
        f"{ITERATIONS} iterations each, {PERIOD * 1000:g} ms apart; process_time (sendto: "
        f"thread_time around the call). A 20 ms pacer alone costs {100 * per_second:.2f}% of a "
        f"core in wake-ups; on one grid, 4 pacers cost {100 * 50 * shared:.2f}% each "
        f"({alone / shared:.1f}x less).",
    ]
    result.data = {
        "sleep_s": sleep,
        "asyncio_sleep_s": alone,
        "asyncio_sleep_shared4_s": shared,
        "sendto_s": send,
    }
    return result


if __name__ == "__main__":
    for row in run().rows:
        print(f"{row.label}: {row.median:.1f} {row.unit}")
