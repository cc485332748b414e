"""The session machine as Mermaid state diagrams, generated from its declared transitions
(``avatar-sdk diagram`` and ``tools/docgen.py`` print them; the docs embed them), so the
pictures can never disagree with the code.

The whole machine in one graph is unreadable at page width, so the docs draw an overview of
the top states (the connect steps folded into ``connecting``, one arrow per pair of states)
and then one diagram per part of the story: the connect sequence, each recovery tier,
renewal and pause, each holding every declared transition into or out of its states.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from .machine import CONNECT_STEPS, TRANSITIONS, Trigger, public_name

__all__ = ["VIEWS", "View", "mermaid", "overview", "view"]

#: Triggers an overview arrow names before it says "..." (the tier diagrams name them all).
OVERVIEW_LABELS: Final = 2
#: ``paused`` is ``connected`` with the conversation held: every recovery runs from it and
#: returns to it as it does for ``connected``, so the overview draws only pause and resume.
PAUSE_ONLY: Final = frozenset({"pause", "resume"})
#: A trigger declared from this many top states or more is drawn in the overview from
#: ``connected`` alone, with a note (``end`` and ``fail`` leave almost every state).
EVERYWHERE: Final = 5


@dataclass(frozen=True, slots=True)
class View:
    """One diagram of the docs: the transitions into or out of ``states`` (top states)."""

    name: str
    title: str
    states: frozenset[str]


VIEWS: Final[tuple[View, ...]] = (
    View("connect", "The connect sequence", frozenset({"idle", "connecting", "queued"})),
    View("socket", "Tier 1: socket recovery", frozenset({"reconnecting"})),
    View("media", "Tier 2: media recovery", frozenset({"recovering_media"})),
    View("cold", "Tier 3: cold reconnect", frozenset({"cold_reconnecting"})),
    View("renewal", "Renewal past the time cap", frozenset({"renewing"})),
    View("pause", "Pause and the end", frozenset({"paused", "disconnecting"})),
)


def _edges() -> Iterator[tuple[str, str, str]]:
    """Every declared transition as (source, destination, label), public names, in table
    order, each once."""
    seen: set[tuple[str, str, str]] = set()
    for trigger, sources, dest, *condition in TRANSITIONS:
        label = f"{trigger} [{condition[0]}]" if condition else str(trigger)
        for src in [sources] if isinstance(sources, str) else sources:
            edge = (public_name(src), public_name(dest), label)
            if edge not in seen:
                seen.add(edge)
                yield edge


def _top(state: str) -> str:
    return "connecting" if state.startswith("connecting_") else state


def _inner_step(a: str, b: str, label: str) -> bool:
    """A step of the connect sequence drawn by the sequence itself (not as an arrow)."""
    return (
        a.startswith("connecting_")
        and b.startswith("connecting_")
        and label != str(Trigger.MEDIA_SKIPPED)
    )


def _connect_block() -> list[str]:
    lines = ["  state connecting {"]
    lines += [
        f"    connecting_{a} --> connecting_{b}" for a, b in itertools.pairwise(CONNECT_STEPS)
    ]
    return [*lines, "  }"]


def mermaid() -> str:
    """The whole machine as one Mermaid state diagram (``avatar-sdk diagram``)."""
    lines = ["stateDiagram-v2", "  [*] --> idle", *_connect_block()]
    lines += [f"  {a} --> {b}: {label}" for a, b, label in _edges() if not _inner_step(a, b, label)]
    lines += ["  ended --> [*]", "  failed --> [*]"]
    return "\n".join(lines) + "\n"


def overview() -> str:
    """The top states only: the connect steps folded into ``connecting``, one arrow per pair
    of states naming at most :data:`OVERVIEW_LABELS` triggers, ``end`` and ``fail`` drawn
    from ``connected`` alone (:data:`EVERYWHERE`), ``paused`` by pause and resume alone
    (:data:`PAUSE_ONLY`)."""
    sources: dict[str, set[str]] = {}
    for a, _, label in _edges():
        sources.setdefault(label.split(" [", 1)[0], set()).add(_top(a))
    everywhere = sorted(t for t, s in sources.items() if len(s) >= EVERYWHERE)
    labels: dict[tuple[str, str], list[str]] = {}
    for a, b, label in _edges():
        pair = (_top(a), _top(b))
        trigger = label.split(" [", 1)[0]
        if trigger in everywhere and pair[0] != "connected":
            continue
        if "paused" in pair and trigger not in PAUSE_ONLY:
            continue
        if pair[0] != pair[1]:
            labels.setdefault(pair, [])
            if trigger not in labels[pair]:
                labels[pair].append(trigger)
    lines = ["stateDiagram-v2", "  [*] --> idle"]
    for (a, b), names in labels.items():
        shown = ", ".join(names[:OVERVIEW_LABELS]) + (
            ", ..." if len(names) > OVERVIEW_LABELS else ""
        )
        lines.append(f"  {a} --> {b}: {shown}")
    if everywhere:
        common = " and ".join(everywhere)
        lines.append(f"  note right of connected : {common} leave (almost) every state, as here")
    lines += ["  ended --> [*]", "  failed --> [*]"]
    return "\n".join(lines) + "\n"


def view(name: str) -> str:
    """One part of the story (:data:`VIEWS`): every transition into or out of its states,
    with its trigger and condition; the connect view draws the steps inside ``connecting``."""
    chosen = next((v for v in VIEWS if v.name == name), None)
    if chosen is None:
        raise ValueError(f"no view {name!r} (known: {', '.join(v.name for v in VIEWS)})")
    lines = ["stateDiagram-v2"]
    if "connecting" in chosen.states:
        lines += ["  [*] --> idle", *_connect_block()]
    for a, b, label in _edges():
        if _inner_step(a, b, label):
            continue
        if _top(a) in chosen.states or _top(b) in chosen.states:
            lines.append(f"  {a} --> {b}: {label}")
    return "\n".join(lines) + "\n"
