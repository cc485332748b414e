"""Measurements of a fleet run and their aggregation.

A measurement is one JSON-able dict, what every worker emits and the runner writes as one
JSON line: always ``{"t": <epoch s>, "kind": str, "session": int, "worker": int}`` plus the
fields of its kind (the ``TypedDict`` s below; ``docs/fleet.md`` has the table). Durations
are seconds. :class:`FleetStats` folds them into live figures and a per-second timeline.

Pure: no I/O, no clock (times come from the measurements), so the aggregation is
unit-tested on hand-made records.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict

from ..errors import AvatarError, ErrorCode

__all__ = [
    "KINDS",
    "LATENCIES",
    "TURN_FIGURES",
    "FleetStats",
    "Measurement",
    "measurement",
    "percentile",
    "plain",
]

#: Every measurement kind, in the order a session emits them.
KINDS: tuple[str, ...] = (
    "session_started",
    "connected",
    "greeting",
    "turn",
    "voice_turn",
    "recovery",
    "renewal",
    "error",
    "completed",
    "metric",
    "session_finished",
)
#: The latencies ``FleetStats`` summarises: connect, greeting, a typed turn's figures (from
#: when it was sent: ``text``, ``audio``, ``generated``, ``played``, the
#: :mod:`avatar_sdk.session.core.latency` vocabulary without ``_latency``), a spoken turn's
#: ``voice_to_voice``, and the turn's wait before it was sent (``wait``: the greeting or the
#: last reply still being said; never on the turn's clock).
LATENCIES: tuple[str, ...] = (
    "connect",
    "greeting",
    "text",
    "audio",
    "generated",
    "played",
    "voice_to_voice",
    "wait",
)
#: A typed turn's figures, summarised for all turns and per turn index (``by_turn``).
TURN_FIGURES: tuple[str, ...] = ("text", "audio", "generated", "played", "wait")
#: Before 0.x: ``ended_s`` was ``generated_s`` (still read from old measurement files).
LEGACY_FIELDS: dict[str, str] = {"generated": "ended_s"}

Measurement = dict[str, Any]


class Base(TypedDict):
    t: float
    kind: str
    session: int
    worker: int


class Connected(Base):
    seconds: float  # connect() call -> connected


class Greeting(Base):
    seconds: float  # connect() call -> the greeting's agent_turn_ended


class Turn(Base):
    iteration: int
    turn: int  # the turn's number within the iteration, from 0
    text_s: float | None  # turn sent -> first spoken agent_text
    audio_s: float | None  # turn sent -> first audible avatar audio frame (None: media off)
    generated_s: float | None  # turn sent -> the answer generated (agent_turn_ended)
    played_s: float | None  # turn sent -> its last audible frame handed to the app
    ended_s: NotRequired[float | None]  # deprecated: generated_s, written for old readers
    ok: bool
    wait_s: NotRequired[float]  # turn() called -> sent: the greeting / last reply being said
    error: NotRequired[str]


class VoiceTurn(Base):
    """A spoken turn (the user talked into the uplink): from the end of their speech."""

    voice_to_voice_s: float | None  # -> the first audible avatar frame
    text_s: float | None
    generated_s: float | None
    played_s: float | None


class Recovery(Base):
    tier: str  # socket | cold | media
    channel: NotRequired[str]
    method: NotRequired[str]
    seconds: float


class Error(Base):
    code: str
    recoverable: bool


class Completed(Base):
    outcome: str
    delivered: bool


class Metric(Base):
    name: str
    value: float


class SessionFinished(Base):
    status: Literal["ok", "failed"]
    code: NotRequired[str]
    seconds: float


#: The keys every measurement has, which no field may replace.
RESERVED: frozenset[str] = frozenset({"t", "kind", "session", "worker"})
_PLAIN = (str, int, bool, type(None))


def plain(value: Any) -> Any:
    """``value`` as strict JSON data: mappings (string keys) and sequences kept, a float
    that is not finite becomes None (JSON has no infinity), anything else its ``str``. A
    measurement crosses a process pipe (pickle) and is written as JSON: a scenario's odd
    field must not lose it, nor the measurements batched with it."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return str(value)


def measurement(kind: str, session: int, worker: int, /, **fields: Any) -> Measurement:
    """A measurement of ``kind`` stamped now (epoch seconds), its fields made
    :func:`plain`. ``AvatarError(INVALID_ARGUMENT)`` for a field named like a reserved key
    (``t``, ``kind``, ``session``, ``worker``): refused rather than dropped, since a
    measurement filed under another session or time would corrupt the figures silently."""
    clash = RESERVED.intersection(fields)
    if clash:
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT,
            f"measurement {kind!r}: reserved field names {sorted(clash)}",
        )
    item: Measurement = {"t": time.time(), "kind": str(kind), "session": session, "worker": worker}
    for name, value in fields.items():
        item[name] = value if isinstance(value, _PLAIN) else plain(value)
    return item


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values`` by linear interpolation between
    closest ranks (numpy's default), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * min(100.0, max(0.0, q)) / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _summary(values: Sequence[float]) -> dict[str, Any]:
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "max": max(values) if values else None,
    }


class FleetStats:
    """Live and final figures of a run, fed one measurement at a time.

    ``snapshot()`` is cheap enough for a progress display a few times a second (it sorts
    the latencies it summarises); ``timeline()`` buckets the run into ``bucket``-second
    slices from the first measurement: the peak of active sessions in each slice and the
    latencies measured in it.
    """

    def __init__(self, *, bucket: float = 1.0) -> None:
        self.bucket = bucket
        self.start: float | None = None
        self.last: float | None = None
        self.measurements = 0
        self._started: set[int] = set()
        self._finished: dict[int, str] = {}
        self._latency: dict[str, list[float]] = {name: [] for name in LATENCIES}
        self._turns = Counter[str]()
        #: Per turn index: its figures (TURN_FIGURES), and ok / failed counts.
        self._by_turn: dict[int, dict[str, list[float]]] = {}
        self._by_turn_count: dict[int, Counter[str]] = {}
        self._errors = Counter[str]()
        self._failures = Counter[str]()
        self._outcomes = Counter[str]()
        self._recoveries: dict[str, list[float]] = defaultdict(list)
        #: Renewals past the server's cap: their gaps, and how many of each strategy.
        self._renewal_gaps: list[float] = []
        self._renewals = Counter[str]()
        self._metrics: dict[str, list[float]] = defaultdict(list)
        # timeline material: (t, +1/-1) for sessions, (t, name, seconds) for latencies
        self._activity: list[tuple[float, int]] = []
        self._samples: list[tuple[float, str, float]] = []

    def feed_all(self, items: Iterable[Mapping[str, Any]]) -> None:
        for item in items:
            self.feed(item)

    def feed(self, m: Mapping[str, Any]) -> None:
        """Fold one measurement in; unknown kinds are counted and otherwise ignored."""
        t = float(m.get("t", 0.0))
        self.measurements += 1
        self.start = t if self.start is None else min(self.start, t)
        self.last = t if self.last is None else max(self.last, t)
        kind, session = m.get("kind"), int(m.get("session", -1))
        if kind == "session_started":
            if session not in self._started:
                self._started.add(session)
                self._activity.append((t, 1))
        elif kind == "session_finished":
            if session in self._finished:
                return
            status = str(m.get("status", "failed"))
            self._finished[session] = status
            if session in self._started:
                self._activity.append((t, -1))
            if status != "ok":
                self._failures[str(m.get("code") or "unknown")] += 1
        elif kind in ("connected", "greeting"):
            self._sample(t, "connect" if kind == "connected" else "greeting", m.get("seconds"))
        elif kind == "turn":
            outcome = "ok" if m.get("ok") else "failed"
            self._turns[outcome] += 1
            index = m.get("turn")
            figures: dict[str, list[float]] | None = None
            if isinstance(index, int) and not isinstance(index, bool) and index >= 0:
                figures = self._by_turn.setdefault(index, {n: [] for n in TURN_FIGURES})
                self._by_turn_count.setdefault(index, Counter())[outcome] += 1
            for name in TURN_FIGURES:
                value = m.get(f"{name}_s")
                if value is None and name in LEGACY_FIELDS:
                    value = m.get(LEGACY_FIELDS[name])
                if self._sample(t, name, value) and figures is not None:
                    figures[name].append(self._samples[-1][2])
        elif kind == "voice_turn":
            self._sample(t, "voice_to_voice", m.get("voice_to_voice_s"))
        elif kind == "recovery":
            seconds = m.get("seconds")
            if isinstance(seconds, int | float):
                self._recoveries[str(m.get("tier", "?"))].append(float(seconds))
        elif kind == "renewal":
            self._renewals[str(m.get("strategy", "?"))] += 1
            gap = m.get("gap")
            if isinstance(gap, int | float) and not isinstance(gap, bool):
                self._renewal_gaps.append(float(gap))
        elif kind == "error":
            self._errors[str(m.get("code", "unknown"))] += 1
        elif kind == "completed":
            self._outcomes[str(m.get("outcome", "unknown"))] += 1
        elif kind == "metric":
            value = m.get("value")
            if isinstance(value, int | float):
                self._metrics[str(m.get("name", "?"))].append(float(value))

    def _sample(self, t: float, name: str, value: object) -> bool:
        if isinstance(value, int | float) and not isinstance(value, bool):
            self._latency[name].append(float(value))
            self._samples.append((t, name, float(value)))
            return True
        return False

    # -- read-outs ----------------------------------------------------------------------------
    @property
    def started(self) -> int:
        return len(self._started)

    @property
    def finished(self) -> int:
        return len(self._finished)

    @property
    def failed(self) -> int:
        return sum(1 for status in self._finished.values() if status != "ok")

    @property
    def active(self) -> int:
        return len(self._started - self._finished.keys())

    def snapshot(self) -> dict[str, Any]:
        """The figures so far, JSON-able."""
        return {
            "active": self.active,
            "started": self.started,
            "finished": self.finished,
            "ok": self.finished - self.failed,
            "failed": self.failed,
            "turns": {"ok": self._turns["ok"], "failed": self._turns["failed"]},
            "latency": {name: _summary(values) for name, values in self._latency.items()},
            "by_turn": self._by_turn_snapshot(),
            "errors": dict(self._errors),
            "failures": dict(self._failures),
            "recoveries": {tier: _summary(v) for tier, v in sorted(self._recoveries.items())},
            "renewals": {
                "count": sum(self._renewals.values()),
                "strategies": dict(self._renewals),
                "gap": _summary(self._renewal_gaps),
            },
            "outcomes": dict(self._outcomes),
            "metrics": {name: _summary(v) for name, v in sorted(self._metrics.items())},
            "measurements": self.measurements,
            "elapsed": (self.last - self.start) if self.start is not None and self.last else 0.0,
        }

    def _by_turn_snapshot(self) -> dict[str, dict[str, Any]]:
        """Per turn index (a string key, in order): ``ok``, ``failed`` and a summary of
        each of :data:`TURN_FIGURES`, like a load tool's row per request name."""
        rows: dict[str, dict[str, Any]] = {}
        for index in sorted(self._by_turn):
            counts = self._by_turn_count[index]
            row: dict[str, Any] = {"ok": counts["ok"], "failed": counts["failed"]}
            row.update({name: _summary(v) for name, v in self._by_turn[index].items()})
            rows[str(index)] = row
        return rows

    def timeline(self) -> list[dict[str, Any]]:
        """Per bucket: ``{"t": bucket end (s from the start), "active": the most sessions open
        at once during the bucket, "<latency>_p50"/"_p90": of the samples stamped in the
        bucket (None if none), "<latency>_n": how many samples}``."""
        if self.start is None or self.last is None:
            return []
        start, width = self.start, self.bucket
        count = max(1, math.ceil((self.last - start) / width + 1e-9))
        activity = sorted(self._activity)
        per_bucket: list[dict[str, list[float]]] = [defaultdict(list) for _ in range(count)]
        for t, name, value in self._samples:
            index = min(count - 1, int((t - start) / width))
            per_bucket[index][name].append(value)
        rows: list[dict[str, Any]] = []
        active, cursor = 0, 0
        for index in range(count):
            end = start + (index + 1) * width
            peak = active
            while cursor < len(activity) and activity[cursor][0] <= end + 1e-9:
                active += activity[cursor][1]
                peak = max(peak, active)
                cursor += 1
            row: dict[str, Any] = {"t": round((index + 1) * width, 6), "active": peak}
            for name in LATENCIES:
                values = per_bucket[index].get(name, [])
                row[f"{name}_p50"] = percentile(values, 50)
                row[f"{name}_p90"] = percentile(values, 90)
                row[f"{name}_n"] = len(values)
            rows.append(row)
        return rows
