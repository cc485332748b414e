"""``echo``: the echo canceller (``avatar_sdk.media.EchoCanceller``) on synthetic rooms.

Each room (``avatar_sdk.testing.echo_room``) plays eight seconds of a voice through an
impulse response and a delay, with noise, the user talking over it from 5 s to 7 s; eight
seeds (voices and impulse responses) per room. Measured: the echo return loss enhancement
from 1 s to 5 s (only the avatar talks), what is left of the user's voice during double
talk (0 dB: untouched), and the CPU the canceller's processing took per second of audio
(both directions, ``thread_time`` around the APM calls), which is what it costs a session.
Needs the ``voice`` extra (livekit).
"""

from __future__ import annotations

from avatar_sdk.media import EchoCanceller
from avatar_sdk.testing.echo_room import EchoRoom, run_room

from .speaker_buffer import measure as speaker_waits
from .stats import FigureResult, Row, Summary, Target

TITLE = "echo: the echo canceller on synthetic rooms (ERLE, user kept, CPU per session)"

ROOMS: dict[str, EchoRoom] = {
    "laptop (80 ms, RT60 0.2 s, -60 dBFS noise)": EchoRoom(),
    "close, loud, noisy (20 ms, echo 0 dB, -45 dBFS)": EchoRoom(
        delay=0.02, echo_gain=1.0, noise_dbfs=-45.0
    ),
    "far, reverberant (200 ms, RT60 0.4 s)": EchoRoom(delay=0.2, decay=0.06),
}
SEEDS = range(1, 9)


def run() -> FigureResult:
    """``python -m benchmarks --only echo``."""
    result = FigureResult("echo", TITLE)
    data: dict[str, object] = {}
    cpu_per_second: list[float] = []
    for label, base in ROOMS.items():
        erle: list[float] = []
        kept: list[float] = []
        for seed in SEEDS:
            room = EchoRoom(**{**base.__dict__, "seed": seed})
            canceller = EchoCanceller()
            measured = run_room(room, canceller.far, canceller.near)
            erle.append(measured.erle_db)
            kept.append(measured.near_kept_db)
            cpu_per_second.append(canceller.stats().cpu_seconds / room.seconds)
        low = Summary.of(erle)
        result.rows.append(
            Row(f"{label}: ERLE", low.n, low.median, "dB", None, min(erle), Target(">=", 25, "dB"))
        )
        kept_summary = Summary.of(kept)
        result.rows.append(
            Row("  user kept in double talk", kept_summary.n, kept_summary.median, "dB",
                None, min(kept), Target(">=", -8, "dB"))
        )  # fmt: skip
        data[label] = {"erle_db": erle, "near_kept_db": kept}
    cpu = Summary.of(cpu_per_second)
    result.rows.append(Row("CPU per session (share of one core)", cpu.n, 100 * cpu.median, "%"))
    waits = speaker_waits()
    for label, values in (
        ("speaker: an answer's first frame waits", waits.answer_starts),
        ("speaker: any voice frame waits", waits.voice),
    ):
        summary = Summary.of(values)
        result.rows.append(
            Row(label, summary.n, summary.median, "ms", summary.p90, summary.maximum,
                Target("<=", 20, "ms"))
        )  # fmt: skip
    result.notes = [
        f"{len(SEEDS)} seeds per room; the 'maximum' column holds the worst (lowest) seed. "
        "ERLE from 1 s to 5 s; the user's level after the canceller over before, 5-7 s. "
        "The dips are AEC3's hand-over from its initial suppression to its linear filter "
        "(about 1-1.5 s in) and long reverberation tails, beyond the linear filter's length.",
        "speaker: how long a received frame waits in SpeakerSink's buffer before the device "
        "takes it (benchmarks/speaker_buffer.py: a simulated 10 ms device, 20 ms frames with "
        "3 ms jitter, 3 s answers and 1 s pauses for 20 s); the device's own latency is on "
        "top. A late frame's backlog is trimmed in the silence, so an answer starts within "
        "one output buffer; inside an answer it can wait up to one more frame.",
    ]
    result.data = {
        "rooms": data,
        "cpu_share": cpu_per_second,
        "speaker_waits_ms": {"answer_starts": waits.answer_starts, "voice": waits.voice},
    }
    return result


if __name__ == "__main__":
    for row in run().rows:
        print(f"{row.label}: {row.median:.1f} {row.unit} (worst {row.maximum})")
