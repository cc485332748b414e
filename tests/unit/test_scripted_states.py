"""The scripted session's states are declared with their moves in one place (issue 29: a
bare string assigned in seven places)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import avatar_sdk
from avatar_sdk.scripted.core.states import MOVES, OPEN, UPSTREAM, ScriptedState, ScriptedStates
from avatar_sdk.session.core.machine import InvalidTransition

SESSION = Path(avatar_sdk.__file__).parent / "scripted" / "session.py"


def test_every_state_has_its_moves_and_its_health() -> None:
    assert set(MOVES) == set(ScriptedState)
    assert set(UPSTREAM) == set(ScriptedState) - {ScriptedState.ENDED}
    assert {ScriptedState.LIVE, ScriptedState.RECOVERING} == OPEN
    # every state can end, and an ended session never moves again
    assert all(ScriptedState.ENDED in MOVES[s] for s in ScriptedState if s != "ended")
    assert MOVES[ScriptedState.ENDED] == frozenset()


def test_a_session_goes_through_its_life() -> None:
    states = ScriptedStates(strict=True)
    for to in ("connecting", "live", "recovering", "live", "ended"):
        assert states.move(ScriptedState(to))
    assert states.ended and not states.open
    assert states.state == "ended"


def test_an_undeclared_move_is_refused() -> None:
    with pytest.raises(InvalidTransition, match="idle -> live"):
        ScriptedStates(strict=True).move(ScriptedState.LIVE)
    lenient = ScriptedStates(ScriptedState.ENDED, strict=False)
    assert not lenient.move(ScriptedState.LIVE)
    assert lenient.state is ScriptedState.ENDED


def test_the_session_never_assigns_its_state_by_hand() -> None:
    tree = ast.parse(SESSION.read_text())
    assigned = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and target.attr in ("_state", "state")
    ]
    assert assigned == []
