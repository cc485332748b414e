"""The machine's triggers are one declared set: every :class:`Trigger` names a declared
transition and every declared transition is named by a :class:`Trigger`, so a misspelt
trigger cannot exist on either side (issue 29)."""

from __future__ import annotations

import ast
from pathlib import Path

import avatar_sdk
from avatar_sdk.errors import ErrorCode
from avatar_sdk.session.core.decisions import decide_connect_failure
from avatar_sdk.session.core.machine import TRANSITIONS, Trigger

PACKAGE = Path(avatar_sdk.__file__).parent


def test_every_trigger_is_a_declared_transition_and_vice_versa() -> None:
    declared = [spec[0] for spec in TRANSITIONS]
    assert all(isinstance(trigger, Trigger) for trigger in declared)
    assert set(declared) == set(Trigger)


def test_decisions_name_triggers() -> None:
    assert decide_connect_failure(ErrorCode.CAPACITY_UNAVAILABLE) is Trigger.CAPACITY_UNAVAILABLE
    assert decide_connect_failure(ErrorCode.JOIN_TIMEOUT) is Trigger.FAIL


def test_no_trigger_is_a_bare_string_in_the_sdk() -> None:
    """``fire``, ``try_fire``, ``can`` and the connect steps' ``advance`` take a Trigger."""
    bare = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("fire", "try_fire", "can", "advance") and isinstance(
                node.args[0], ast.Constant
            ):
                bare.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert bare == []
