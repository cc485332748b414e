"""``AvatarSession.stats()``: the typed counters behind it and the public snapshot it returns
(issue 16, item 4). The snapshot's keys are the ones ``docs/resilience.md`` documents, so a
misspelt counter can neither appear in it nor go unnoticed; no network here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.clock import FakeClock
from avatar_sdk.events.bus import EventBus
from avatar_sdk.session.assemble import assemble
from avatar_sdk.session.core.stats import KEEP_DURATIONS, STATS_KEYS, TIERS, SessionStats
from avatar_sdk.session.link import ServerLink
from avatar_sdk.session.spec import SessionSpec

DOCS = Path(__file__).resolve().parents[2] / "docs" / "resilience.md"

#: A session's snapshot before anything happened, key order included (as it always was).
FRESH: dict[str, Any] = {
    "reconnects": {"socket": 0, "media": 0, "cold": 0},
    "recovery_durations": {"socket": [], "media": [], "cold": []},
    "events_in": 0,
    "events_out": 0,
    "protocol_errors": 0,
    "connect_duration": None,
    "events_dropped": 0,
    "turns_resent": 0,
    "events_emitted": 0,
}


def _documented_keys() -> list[str]:
    """The keys of the Counters table in ``docs/resilience.md``, in order."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("**Counters**") :]
    section = section[: section.index("\n\n", section.index("| key |"))]
    return re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE)


def _session(**kwargs: Any) -> AvatarSession:
    return AvatarSession(
        "http://127.0.0.1:9", "token-x", media=False, allow_insecure_transport=True, **kwargs
    )


async def test_a_fresh_session_reports_the_snapshot_it_always_did() -> None:
    session = _session()
    snapshot = session.stats()
    assert snapshot == FRESH
    assert list(snapshot) == list(FRESH)
    assert [type(v) for v in snapshot.values()] == [type(v) for v in FRESH.values()]
    await session.close()


async def test_the_snapshot_keys_are_exactly_the_documented_ones() -> None:
    documented = _documented_keys()
    assert len(documented) == len(set(documented)) == 13
    # Every key but those that appear with their first count (documented as such).
    session = _session()
    late = {"dead_socket_detections", "renewals", "renewal_gaps", "voice_buffer"}
    assert set(session.stats()) == set(documented) - late
    await session.close()
    assert set(STATS_KEYS) == set(documented)
    counted = SessionStats(dead_socket_detections=1, renewals=1)
    snapshot = counted.snapshot(events_emitted=0, events_dropped=0, voice_buffer={})
    assert list(snapshot) == documented


async def test_drops_of_full_event_streams_are_counted_in_the_snapshot() -> None:
    session = _session(config=SessionConfig(event_queue_size=2))
    stream = session.events()  # the configured default bound
    for _ in range(5):
        session.notify_network_change()  # emits network_changed (no link: nothing else)
    assert session.stats()["events_dropped"] == 3 == stream.dropped
    assert session.stats()["events_emitted"] == 5
    await stream.aclose()
    await session.close()


def test_a_recovery_is_counted_with_its_duration_the_last_hundred_kept() -> None:
    stats = SessionStats()
    for i in range(KEEP_DURATIONS + 5):
        stats.record_recovery("media", float(i))
    stats.record_recovery("cold", 2.5)
    assert stats.reconnects == {"socket": 0, "media": KEEP_DURATIONS + 5, "cold": 1}
    assert stats.recovery_durations["media"] == [float(i) for i in range(5, KEEP_DURATIONS + 5)]
    assert stats.recovery_durations["cold"] == [2.5]
    assert stats.recovery_durations["socket"] == []
    assert TIERS == ("socket", "media", "cold")


def test_a_snapshot_is_a_copy_and_dead_socket_detections_appear_with_the_first() -> None:
    stats = SessionStats()
    before = stats.snapshot(events_emitted=7, events_dropped=1)
    assert "dead_socket_detections" not in before
    assert before["events_emitted"] == 7 and before["events_dropped"] == 1
    stats.record_recovery("socket", 0.25)
    stats.dead_socket_detections += 1
    stats.events_in += 3
    assert before["reconnects"]["socket"] == 0 and before["recovery_durations"]["socket"] == []
    after = stats.snapshot(events_emitted=7, events_dropped=1)
    assert after["dead_socket_detections"] == 1 and after["events_in"] == 3
    after["reconnects"]["socket"] = 99
    after["recovery_durations"]["socket"].append(9.0)
    assert stats.reconnects["socket"] == 1 and stats.recovery_durations["socket"] == [0.25]


def test_a_misspelt_counter_is_an_error_not_a_new_key() -> None:
    stats = SessionStats()
    with pytest.raises(AttributeError):
        stats.turns_resnt = 1  # type: ignore[attr-defined]


class _SilentChannel:
    """A control channel that looks open and never answers a probe."""

    connected = True
    last_activity = 0.0

    def __init__(self) -> None:
        self.drops: list[str] = []

    async def emit(self, event: str, payload: object) -> None:
        return None

    async def drop(self, reason: str = "ping timeout") -> None:
        self.drops.append(reason)


async def test_a_silently_dead_socket_is_counted_by_the_recovery_controller() -> None:
    """The one counter that used to be created where first touched (``.get(...) + 1``)."""
    channel = _SilentChannel()
    link = ServerLink(channel=channel, config=SessionConfig())  # type: ignore[arg-type]
    config = SessionConfig(socket_probe_timeout=0.01)
    parts = assemble(SessionSpec("http://127.0.0.1:9", "tok", config, FakeClock()), EventBus())
    parts.slot.current = link
    stats, controller = parts.stats, parts.recovery
    assert await controller.socket_alive(link) is False
    assert await controller.socket_alive(link) is False
    assert channel.drops == ["ping timeout", "ping timeout"]
    assert stats.dead_socket_detections == 2
    assert stats.snapshot(events_emitted=0, events_dropped=0)["dead_socket_detections"] == 2
