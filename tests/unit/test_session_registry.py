"""The registry of live sessions (``avatar_sdk.lifecycle.registry``): weak, ordered, and
filled by every ``AvatarSession`` as it is built."""

from __future__ import annotations

import gc

from avatar_sdk import AvatarSession
from avatar_sdk.lifecycle.registry import LIVE_SESSIONS, SessionRegistry


class _Thing:
    pass


def test_it_holds_sessions_weakly_in_creation_order() -> None:
    registry = SessionRegistry()
    a, b = _Thing(), _Thing()
    registry.add(b, backend="https://b.example")
    registry.add(a, backend="https://a.example")
    assert [(s, e.backend) for s, e in registry.sessions()] == [
        (b, "https://b.example"),
        (a, "https://a.example"),
    ]
    del b
    gc.collect()
    assert [s for s, _ in registry.sessions()] == [a]  # never kept alive by the registry


def test_every_avatar_session_registers_with_its_backend() -> None:
    session = AvatarSession("https://backend.example/", "tok", media=False)
    entries = {id(s): e for s, e in LIVE_SESSIONS.sessions()}
    assert entries[id(session)].backend == "https://backend.example"
