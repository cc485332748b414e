"""Connection quality from aiortc ``getStats()`` reports, as one flat sample per channel.

Pure: the caller polls the peer and keeps the previous byte count for the bitrate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: RTP clock rates, to turn jitter from timestamp units into seconds.
_CLOCK = {"audio": 48_000, "video": 90_000}


@dataclass(frozen=True, slots=True)
class ByteMark:
    """Bytes carried by a channel at a moment (for the next bitrate)."""

    total: int
    at: float


def summarize(
    channel: str, stats: Iterable[Any], previous: ByteMark | None, now: float
) -> tuple[dict[str, Any], ByteMark]:
    """The ``connection_quality`` payload for one channel, and the mark for the next call.

    ``rtt`` and ``jitter`` are seconds, ``packet_loss`` a fraction (0..1), ``bitrate`` bits
    per second; a value the peer does not report yet is None (the first bitrate always is).
    """
    rtt: float | None = None
    jitter: float | None = None
    lost = received = 0
    total = 0
    for item in stats:
        kind = getattr(item, "type", None)
        if kind in ("inbound-rtp", "remote-inbound-rtp"):
            lost += max(0, int(getattr(item, "packetsLost", 0) or 0))
            received += max(0, int(getattr(item, "packetsReceived", 0) or 0))
            raw_jitter = getattr(item, "jitter", None)
            clock = _CLOCK.get(str(getattr(item, "kind", "audio")), 48_000)
            if raw_jitter is not None:
                value = float(raw_jitter) / clock
                jitter = value if jitter is None else max(jitter, value)
            round_trip = getattr(item, "roundTripTime", None)
            if round_trip is not None:
                rtt = float(round_trip)
        elif kind == "transport":
            total += int(getattr(item, "bytesSent", 0) or 0) + int(
                getattr(item, "bytesReceived", 0) or 0
            )
    loss = lost / (lost + received) if lost + received else 0.0
    bitrate = None
    if previous is not None and now > previous.at and total >= previous.total:
        bitrate = (total - previous.total) * 8 / (now - previous.at)
    data = {
        "channel": channel,
        "rtt": rtt,
        "jitter": jitter,
        "packet_loss": loss,
        "bitrate": bitrate,
    }
    return data, ByteMark(total, now)
