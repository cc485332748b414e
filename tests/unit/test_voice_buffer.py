"""transport/rtc/core/voice_buffer.py: the voice's playout rule, on arrival schedules played out
under the fake clock (calm, jittered, bursty loss, reorder, a sender's pause, a late
packet, a burst, drifting clocks, wrap-around). Bounds are asserted, never speed."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from avatar_sdk.clock import FakeClock, Timer
from avatar_sdk.transport.rtc.core.voice_buffer import (
    MAX_DELAY,
    MAX_PACKETS,
    SHRINK_RATE,
    Playout,
    VoiceBuffer,
)

RATE = 48000
TICKS = 960  # 20 ms at 48 kHz
FRAME = TICKS / RATE
START = 1000.0  # FakeClock's start


@dataclass
class Played:
    at: float
    playout: Playout


@dataclass
class Run:
    """A buffer driven as the install drives it: packets pushed at their arrival, the
    buffer polled at its ``next_due``, all on a :class:`FakeClock`."""

    buffer: VoiceBuffer = field(default_factory=VoiceBuffer)
    clock: FakeClock = field(default_factory=FakeClock)
    played: list[Played] = field(default_factory=list)
    arrived: dict[int, float] = field(default_factory=dict)
    max_held: int = 0
    _timer: Timer | None = None

    def _took(self, out: list[Playout]) -> None:
        now = self.clock.monotonic()
        self.played.extend(Played(now, p) for p in out)
        self.max_held = max(self.max_held, self.buffer.held)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        due = self.buffer.next_due()
        if due is not None:
            self._timer = self.clock.call_later(due - now, self._poll)

    def _poll(self) -> None:
        self._timer = None
        self._took(self.buffer.poll(self.clock.monotonic()))

    def schedule(self, arrival: float, seq: int, ts: int) -> None:
        def push() -> None:
            self.arrived.setdefault(seq % 65536, self.clock.monotonic())
            payload = bytes([seq % 256])
            self._took(self.buffer.push(self.clock.monotonic(), seq % 65536, ts % 2**32, payload))

        self.clock.call_later(arrival - self.clock.monotonic(), push)

    async def play(self, until: float) -> None:
        await self.clock.advance(until - self.clock.monotonic())

    # -- reading the outcome ------------------------------------------------------------------
    @property
    def sequences(self) -> list[int]:
        return [p.playout.sequence for p in self.played]

    @property
    def concealed(self) -> list[int]:
        return [p.playout.sequence for p in self.played if p.playout.payload is None]

    def held_for(self, seq: int) -> float:
        """How long packet ``seq`` waited in the buffer (s)."""
        at = next(p.at for p in self.played if p.playout.sequence == seq and p.playout.payload)
        return at - self.arrived[seq]


def _stream(run: Run, count: int, *, transit: float = 0.005, first: int = 0) -> None:
    for n in range(count):
        run.schedule(START + (first + n) * FRAME + transit, first + n, (first + n) * TICKS)


async def test_calm_network_holds_each_packet_one_frame() -> None:
    run = Run()
    _stream(run, 100)
    await run.play(START + 3.0)
    assert run.sequences == list(range(100))
    assert all(abs(run.held_for(seq) - FRAME) < 1e-9 for seq in range(100))
    counts = run.buffer.counts
    assert counts.target_delay == FRAME
    assert (counts.concealed, counts.late, counts.underruns, counts.overflow) == (0, 0, 0, 0)
    assert counts.played == counts.packets == 100
    assert run.max_held <= 2


async def test_jitter_raises_the_target_and_the_frames_stay_in_order() -> None:
    run = Run()
    rng = random.Random(7)
    for n in range(250):
        run.schedule(START + n * FRAME + rng.uniform(0.0, 0.06), n, n * TICKS)
    await run.play(START + 7.0)
    counts = run.buffer.counts
    # Reordered packets are put back in place: every frame played or concealed once, in order.
    assert run.sequences == list(range(250))
    assert counts.reordered > 0
    assert 0.04 <= counts.target_delay <= 0.07
    # With the delay adapted, few packets miss their turn (under one in ten).
    assert counts.concealed == counts.late <= 25
    assert counts.played + counts.concealed == 250


async def test_a_burst_of_loss_is_concealed_on_time_and_counted() -> None:
    run = Run()
    lost = set(range(40, 46))
    for n in range(100):
        if n not in lost:
            run.schedule(START + n * FRAME + 0.005, n, n * TICKS)
    await run.play(START + 3.0)
    assert run.sequences == list(range(100))
    assert run.concealed == sorted(lost)
    counts = run.buffer.counts
    assert (counts.concealed, counts.late, counts.underruns) == (6, 0, 0)
    # The missing packets never held the later audio longer than the target delay.
    assert all(run.held_for(seq) <= counts.target_delay + 1e-9 for seq in range(46, 100))
    # Nothing was concealed before packet 46 showed the loss, then all of it at once.
    times = {p.at for p in run.played if p.playout.payload is None}
    assert times == {run.arrived[46]}


async def test_reordered_packets_are_put_in_place_without_concealment() -> None:
    """Every tenth packet arrives 30 ms late, after the next one: the first is too late
    for a one-frame target (concealed, dropped, counted), and the target grows at once
    to hold every later one in place."""
    run = Run()
    for n in range(200):
        run.schedule(START + n * FRAME + 0.005 + (0.03 if n % 10 == 5 else 0.0), n, n * TICKS)
    await run.play(START + 5.0)
    assert run.sequences == list(range(200))
    counts = run.buffer.counts
    assert (counts.concealed, counts.late) == (1, 1)
    assert run.concealed == [5]
    assert counts.reordered == 19
    assert 0.029 <= counts.target_delay <= 0.04


async def test_a_senders_pause_is_not_loss() -> None:
    """The avatar stops sending for 3 s (RTP time goes on, sequence numbers do not jump)."""
    run = Run()
    _stream(run, 50)
    for n in range(50, 100):
        run.schedule(START + 3.0 + n * FRAME + 0.005, n, int((3.0 / FRAME + n) * TICKS))
    await run.play(START + 1.5)
    assert run.buffer.next_due() is None  # nothing is waited for while the sender is quiet
    await run.play(START + 6.0)
    assert run.sequences == list(range(100))
    counts = run.buffer.counts
    assert (counts.concealed, counts.late, counts.underruns, counts.resyncs) == (0, 0, 0, 0)
    assert all(abs(run.held_for(seq) - FRAME) < 1e-9 for seq in range(50, 100))


async def test_a_late_packet_is_dropped_counted_and_grows_the_target_at_once() -> None:
    run = Run()
    for n in range(100):
        run.schedule(START + n * FRAME + 0.005 + (0.1 if n == 30 else 0.0), n, n * TICKS)
    await run.play(START + 3.0)
    counts = run.buffer.counts
    assert run.concealed == [30]
    assert (counts.concealed, counts.late) == (1, 1)
    assert run.sequences == list(range(100))  # the late copy is not played
    assert counts.target_delay >= FRAME  # grown to 0.1 at once, then shrinking slowly


async def test_the_target_grows_at_once_and_shrinks_slowly() -> None:
    """The network stalls 200 ms, then delivers what it held at once: the buffer ran dry
    (an underrun, nothing to conceal), and the target takes in the delay at once."""
    run = Run()
    stall_end = START + 50 * FRAME + 0.2
    for n in range(400):
        arrival = START + n * FRAME + 0.005
        run.schedule(max(arrival, stall_end) if n >= 50 else arrival, n, n * TICKS)
    await run.play(stall_end + 0.001)
    counts = run.buffer.counts
    assert counts.underruns == 1
    assert (counts.concealed, counts.late) == (0, 0)
    grown = run.buffer.target_delay
    assert grown >= 0.18
    await run.play(stall_end + 1.0)
    one_second_later = run.buffer.target_delay
    assert grown - one_second_later <= SHRINK_RATE * 1.0 + 1e-9
    assert one_second_later > FRAME
    await run.play(START + 9.0)
    assert run.buffer.target_delay == FRAME  # back to one frame once the jitter is gone
    assert run.sequences == list(range(400))


async def test_a_missing_packet_with_nothing_later_conceals_nothing() -> None:
    """The last packet before a pause is lost: nothing is concealed until a later packet
    shows it was a loss, and then the lost frame is concealed without holding it."""
    run = Run()
    _stream(run, 20)
    run.schedule(START + 2.0 + 21 * FRAME, 21, int((2.0 / FRAME + 21) * TICKS))
    await run.play(START + 1.0)
    assert run.concealed == []
    await run.play(START + 3.0)
    assert run.concealed == [20]
    assert run.sequences == list(range(22))


async def test_a_senders_burst_is_bounded_and_the_delay_reconverges() -> None:
    """A sender 3 s ahead of real time: 3 s of voice sent at once, then the rest paced."""
    run = Run()
    for n in range(150):
        run.schedule(START + 0.005 + n * 1e-4, n, n * TICKS)
    for n in range(150, 600):
        run.schedule(START + (n - 150) * FRAME + 0.1, n, n * TICKS)
    await run.play(START + 12.0)
    counts = run.buffer.counts
    assert run.max_held <= MAX_PACKETS + 1
    assert counts.overflow > 0
    assert counts.target_delay <= 2 * FRAME
    assert run.sequences == sorted(run.sequences)
    # The delay came back: the last seconds of voice wait no more than the target.
    assert all(run.held_for(n) <= counts.target_delay + 1e-9 for n in range(500, 600))


async def test_drifting_clocks_never_grow_the_buffer() -> None:
    for drift in (0.01, -0.01):
        run = Run()
        for n in range(3000):  # 60 s
            run.schedule(START + n * FRAME * (1 + drift) + 0.005, n, n * TICKS)
        await run.play(START + 62.0)
        counts = run.buffer.counts
        assert run.max_held <= 4, drift
        assert counts.target_delay <= 2 * FRAME, drift
        assert (counts.overflow, counts.late, counts.resyncs) == (0, 0, 0), drift
        assert all(run.held_for(n) <= 2 * FRAME + 1e-9 for n in range(2900, 3000)), drift


async def test_sequence_and_timestamp_wrap_around() -> None:
    run = Run()
    first = 65536 - 30
    ts0 = 2**32 - 20 * TICKS
    for n in range(60):
        if n == 40:
            continue  # lost after the wrap
        run.schedule(START + n * FRAME + 0.005, first + n, ts0 + n * TICKS)
    await run.play(START + 2.0)
    assert run.sequences == [(first + n) % 65536 for n in range(60)]
    assert run.concealed == [(first + 40) % 65536]
    concealed = next(p.playout for p in run.played if p.playout.payload is None)
    assert concealed.timestamp == (ts0 + 40 * TICKS) % 2**32
    assert run.buffer.counts.resyncs == 0


async def test_a_jump_no_jitter_explains_restarts_the_timeline() -> None:
    run = Run()
    _stream(run, 20)
    # The sender restarted: sequence numbers and RTP time from elsewhere.
    for n in range(20):
        run.schedule(START + (20 + n) * FRAME + 0.005, 30000 + n, 123456 + n * TICKS)
    await run.play(START + 2.0)
    counts = run.buffer.counts
    assert counts.resyncs == 1
    assert run.sequences == list(range(20)) + [30000 + n for n in range(20)]
    assert (counts.concealed, counts.late, counts.overflow) == (0, 0, 0)


async def test_the_target_never_exceeds_its_cap() -> None:
    run = Run()
    _stream(run, 20)
    for n in range(20, 60):
        run.schedule(START + n * FRAME + 0.005 + 0.8, n, n * TICKS)  # 800 ms stall
    await run.play(START + 4.0)
    assert run.buffer.target_delay <= MAX_DELAY
    assert run.sequences == list(range(60))
