"""A long conversation through renewals, as a test or a benchmark drives it (issue 19).

:func:`run_long_conversation` runs one audio+video session against a staging backend whose
cap is a fraction of the conversation's length, a turn every ``turn_every`` seconds, and
reports what the user saw: every turn's reply, the renewals and their gaps, the greetings
that began, whether a ``session_completed`` came before the close, and what the server saw
(the turns each server session took). The test (``tests/integration/test_renewal_media.py``)
and the soak (``tests/soak/test_renewal_soak.py``) assert on it; ``benchmarks/renewal.py``
takes its gaps.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..config import RenewalPolicy, SessionConfig
from ..events.bus import Event
from ..session.facade import AvatarSession
from .staging.server import StagingServer


@dataclass
class LongRun:
    """What a long conversation saw (see :func:`run_long_conversation`)."""

    asked: list[str] = field(default_factory=list)
    replies: dict[str, str] = field(default_factory=dict)
    renewed: list[dict[str, Any]] = field(default_factory=list)
    greetings: int = 0
    completed_before_close: int = 0
    states: list[str] = field(default_factory=list)
    thread_ids: set[str | None] = field(default_factory=set)
    server_turns: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def gaps(self) -> list[float]:
        return [float(r["gap"]) for r in self.renewed if r.get("gap") is not None]


async def run_long_conversation(
    staging: StagingServer,
    *,
    duration: float,
    cap: float,
    warning: float,
    policy: RenewalPolicy,
    turn_every: float = 1.0,
    config: SessionConfig | None = None,
    video: bool = True,
    thread_id: str = "thr-long-conversation",
) -> LongRun:
    """One session of ``duration`` seconds against ``staging`` capped at ``cap`` (warned
    ``warning`` seconds ahead), renewing with ``policy``; closed at the end."""
    staging.max_conversation_length = cap
    staging.time_warning_before = warning
    run = LongRun()
    cfg = (config or SessionConfig()).with_(renewal=policy)
    session = AvatarSession(
        staging.url,
        staging.token,
        thread_id=thread_id,
        video=video,
        config=cfg,
        allow_insecure_transport=True,
    )
    closing = False

    def seen(event: Event) -> None:
        name, data = event.name, event.data
        if name == "session_renewed":
            run.renewed.append(dict(data))
            run.thread_ids.add(data.get("thread_id"))
        elif name == "agent_speech_started":
            if "approved-permissions" in str(data.get("speech_id")):
                run.greetings += 1
        elif name == "session_completed" and not closing:
            run.completed_before_close += 1
        elif name == "state_changed":
            run.states.append(str(data.get("state")))

    session.on("*", seen)
    loop = asyncio.get_running_loop()
    try:
        await session.connect(wait_for_greeting=True)
        run.thread_ids.add(session.thread_id)
        ends = loop.time() + duration
        n = 0
        while loop.time() < ends:
            n += 1
            text = f"turn number {n}"
            run.asked.append(text)
            started = loop.time()
            try:
                reply = await session.ask(text, timeout=max(10.0, cap))
                run.replies[text] = reply.text
            except Exception as exc:  # recorded with its type, judged by the caller
                run.errors.append(f"{text}: {type(exc).__name__}: {exc}")
            await asyncio.sleep(max(0.0, turn_every - (loop.time() - started)))
        run.thread_ids.add(session.thread_id)
    finally:
        closing = True
        await session.close()
    run.server_turns = [t for c in _all_conversations(staging) for t in c]
    return run


def _all_conversations(staging: StagingServer) -> list[list[str]]:
    """Every server session's user turns (the ended ones included), by thread memory."""
    return [list(turns) for turns in staging.thread_memory.values()]
