"""A session's state machine is small: one transitions machine is shared by every session.

Issue 23: at 1,000 sessions in one process CPython's full garbage collection walked every
session's objects, and each ``SessionMachine`` built its own ``transitions`` machine (its
states, events, transitions and their callback lists: 730 tracked objects a session, most
of a control-only session's). Sharing the declaration leaves each session its model only.
"""

from __future__ import annotations

import gc
import weakref

from avatar_sdk.session.core.machine import SessionMachine

#: Tracked objects one more SessionMachine may add (its model and the bound triggers
#: transitions gives each model; 730 when each built its own machine).
FOOTPRINT = 300


def test_a_session_machine_adds_few_objects_for_the_collector() -> None:
    SessionMachine()  # the shared declaration, built once
    gc.collect()
    before = len(gc.get_objects())
    machines = [SessionMachine() for _ in range(50)]
    gc.collect()
    per_machine = (len(gc.get_objects()) - before) / len(machines)
    assert per_machine < FOOTPRINT, per_machine


def test_machines_sharing_a_declaration_keep_their_own_state_and_listener() -> None:
    seen: list[tuple[str, str, str]] = []
    one = SessionMachine(on_change=lambda *change: seen.append(change))
    two = SessionMachine()
    one.fire("start")
    assert one.state != two.state and two.state == "idle"
    assert seen and seen[0][1] == "idle" and two.history == []


def test_a_dropped_session_machine_leaves_the_shared_declaration() -> None:
    machine = SessionMachine()
    model = weakref.ref(machine._model)
    del machine
    gc.collect()
    assert model() is None  # not held by the shared machine's model list
