"""The session machine as a Mermaid state diagram, generated from its declared transitions
(``avatar-sdk state-diagram`` and ``tools/docgen.py`` print it; the docs embed it), so the
picture can never disagree with the code."""

from __future__ import annotations

import itertools

from .machine import CONNECT_STEPS, TRANSITIONS, Trigger, public_name

__all__ = ["mermaid"]


def mermaid() -> str:
    """The machine as a Mermaid state diagram, generated from :data:`~.machine.TRANSITIONS`."""
    lines = ["stateDiagram-v2", "  [*] --> idle"]
    lines.append("  state connecting {")
    for a, b in itertools.pairwise(CONNECT_STEPS):
        lines.append(f"    connecting_{a} --> connecting_{b}")
    lines.append("  }")
    seen: set[tuple[str, str, str]] = set()
    for trigger, sources, dest, *condition in TRANSITIONS:
        label = f"{trigger} [{condition[0]}]" if condition else str(trigger)
        for src in [sources] if isinstance(sources, str) else sources:
            a, b = public_name(src), public_name(dest)
            inner = a.startswith("connecting_") and b.startswith("connecting_")
            if inner and trigger != Trigger.MEDIA_SKIPPED:
                continue
            key = (a, b, label)
            if key in seen:
                continue
            seen.add(key)
            lines.append(f"  {a} --> {b}: {label}")
    lines += ["  ended --> [*]", "  failed --> [*]"]
    return "\n".join(lines) + "\n"
