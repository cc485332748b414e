"""What the CLI prints: the conversation as it streams, and what the session went through.

On a terminal the lines are styled with rich; anywhere else (a pipe, a file, CI) they are
plain text, never wrapped or marked up, one status line per event. ``--json`` prints each
event as one JSON object per line instead, for scripts.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from ..events.bus import Event
from ..wire.segments import SPOKEN_TYPES


def is_spoken(data: Mapping[str, Any]) -> bool:
    """Whether an ``agent_text`` segment is what the avatar says (not a tool call, a tool
    response or its thinking): the ``spoken`` flag when the SDK sets it, else the type."""
    flag = data.get("spoken")
    if isinstance(flag, bool):
        return flag
    return data.get("type") in SPOKEN_TYPES


def seconds(value: object) -> str:
    """A duration for people: ``152 ms`` or ``2.31 s``."""
    if not isinstance(value, int | float):
        return "?"
    return f"{1000 * value:.0f} ms" if value < 1 else f"{value:.2f} s"


class Screen:
    """Lines to a stream: styled with rich on a terminal, plain text otherwise."""

    def __init__(self, stream: IO[str] | None = None, *, styled: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        isatty = getattr(self.stream, "isatty", None)
        self.styled = styled if styled is not None else bool(isatty and isatty())
        self._console: Any = None
        if self.styled:
            from rich.console import Console  # noqa: PLC0415 - only on a terminal

            self._console = Console(file=self.stream, highlight=False, soft_wrap=True)

    def write(self, text: str, style: str | None = None) -> None:
        """Part of a line (no newline)."""
        if self._console is not None:
            from rich.text import Text  # noqa: PLC0415

            self._console.print(Text(text, style=style or ""), end="")
        else:
            self.stream.write(text)
        self.stream.flush()

    def line(self, text: str = "", style: str | None = None) -> None:
        self.write(text + "\n", style)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """A table: rich's on a terminal, aligned plain columns otherwise."""
        if self._console is not None:
            from rich.table import Table  # noqa: PLC0415

            table = Table(title=title, title_justify="left")
            for column in columns:
                table.add_column(column)
            for row in rows:
                table.add_row(*row)
            self._console.print(table)
            self.stream.flush()
            return
        widths = [max(len(str(c)) for c in col) for col in zip(columns, *rows, strict=False)]
        self.line(title)
        for row in (columns, ["-" * w for w in widths], *rows):
            self.line(
                "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip()
            )


def _args(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


#: Event name -> (style, how its line reads). Events not listed print nothing.
_LINES: dict[str, tuple[str, Callable[[dict[str, Any]], str | None]]] = {
    "connected": ("green", lambda d: f"connected in {seconds(d.get('duration'))}"),
    "reconnecting": (
        "yellow",
        lambda d: (
            f"reconnecting: {d.get('tier')} tier, attempt {d.get('attempt')}"
            f"/{d.get('max_attempts')} ({d.get('reason')})"
        ),
    ),
    "reconnected": (
        "green",
        lambda d: (
            f"reconnected: {d.get('tier')} tier in {seconds(d.get('duration'))}"
            + (" (same server session)" if d.get("recovered") else " (new server session)")
        ),
    ),
    "media_recovering": (
        "yellow",
        lambda d: f"recovering media: {d.get('channel')} by {d.get('method')}",
    ),
    "media_recovered": (
        "green",
        lambda d: (
            f"media recovered: {d.get('channel')} by {d.get('method')}"
            f" in {seconds(d.get('duration'))}"
        ),
    ),
    "queued": (
        "yellow",
        lambda d: f"no capacity: queued, next try in {seconds(d.get('retry_in'))}",
    ),
    "gave_up": (
        "red",
        lambda d: (
            f"gave up: {d.get('tier')} tier after {d.get('attempts')} attempts ({d.get('code')})"
        ),
    ),
    "error": ("red", lambda d: f"error [{d.get('code')}] {d.get('message')}"),
    "session_error": (
        "yellow",
        lambda d: f"server: {d.get('code')} {d.get('message') or ''}".rstrip(),
    ),
    "tool_call": ("magenta", lambda d: f"tool {d.get('name')} {_args(d.get('args'))}"),
    "tool_call_invalid": (
        "red",
        lambda d: (
            f"tool {(d.get('call') or {}).get('name')}: invalid arguments"
            f" {'; '.join(map(str, d.get('errors') or []))}"
        ),
    ),
    "brain_stalled": ("yellow", lambda d: f"the agent is silent ({seconds(d.get('after'))})"),
    "tool_spiral_detected": (
        "yellow",
        lambda d: f"tool-call spiral: {d.get('count')} calls (limit {d.get('limit')})",
    ),
    "turn_resent": ("yellow", lambda d: f"turn resent after the {d.get('tier')} recovery"),
    "time_warning": (
        "yellow",
        lambda d: f"the conversation ends in {seconds(d.get('remaining'))}",
    ),
    "session_renewing": (
        "yellow",
        lambda d: (
            f"renewing the server session ({d.get('reason')}, {seconds(d.get('time_left'))} left)"
        ),
    ),
    "session_renewed": (
        "green",
        lambda d: (
            f"renewed #{d.get('renewals')} ({d.get('strategy')}, gap"
            f" {seconds(d.get('gap'))}{', turn cut' if d.get('cut_turn') else ''})"
        ),
    ),
    "agent_interrupted": ("dim", lambda d: "avatar interrupted"),
    "user_transcription": (
        "cyan",
        lambda d: f"you (heard): {d.get('text')}" if d.get("final") else None,
    ),
    "session_completed": (
        "dim",
        lambda d: f"thread {d.get('thread_id')} completed ({d.get('outcome')})",
    ),
    "ended": ("bold", lambda d: f"ended: {d.get('message') or d.get('reason')}"),
}


def _top(state: object) -> str:
    text = str(state)
    return "connecting" if text.startswith("connecting_") else text


class ConversationPrinter:
    """The human view of a session: the avatar's words streamed on ``avatar:`` lines, the
    user's turns, and one line for each thing the session went through.

    ``stamps``: prefix each line with the time since ``start`` (the demo's timeline);
    ``states``: also show the top-level state changes.
    """

    def __init__(
        self,
        screen: Screen,
        start: float,
        *,
        stamps: bool = False,
        states: bool = False,
        thread_of: Callable[[], str | None] | None = None,
    ) -> None:
        self.screen = screen
        self.start = start
        self.stamps = stamps
        self.states = states
        self.thread_of = thread_of
        self._thread: str | None = None
        self._speaking = False
        #: The avatar's words of the turn being streamed, and of every turn so far.
        self.current: list[str] = []
        self.turns: list[str] = []

    def _stamp(self, at: float) -> None:
        if self.stamps:
            self.screen.write(f"{at - self.start:8.3f}s  ", "dim")

    def end_line(self) -> None:
        """Close the avatar's line being streamed, if any."""
        if self._speaking:
            self.screen.line()
            self._speaking = False
            self.turns.append("".join(self.current).strip())
            self.current = []

    def status(self, text: str, style: str | None = None, at: float | None = None) -> None:
        self.end_line()
        self._stamp(at if at is not None else self.start)
        self.screen.line(text if self.stamps else f"[{text}]", style)

    def user(self, text: str, at: float) -> None:
        self.end_line()
        self._stamp(at)
        self.screen.write("you:    ", "bold cyan")
        self.screen.line(text)

    def on_event(self, event: Event) -> None:
        data, name = event.data, event.name
        self._track_thread(event.at)
        if name == "agent_text":
            if is_spoken(data) and data.get("content"):
                self._say(str(data["content"]), event.at)
            return
        if name == "agent_speech_started" and data.get("is_new_turn"):
            self.end_line()  # a new turn (a greeting after a rebuild) gets its own line
            return
        if name == "agent_turn_ended":
            self.end_line()
            return
        if name == "state_changed":
            # Top-level states only: the connect sequence's steps show as "connecting".
            state, previous = _top(data.get("state")), _top(data.get("previous"))
            if self.states and state != previous:
                self.status(f"state    {previous} -> {state}", "blue", event.at)
            return
        line = _LINES.get(name)
        if line is not None:
            text = line[1](data)
            if text is not None:
                self.status(text, line[0], event.at)

    def _say(self, content: str, at: float) -> None:
        if not self._speaking:
            self._stamp(at)
            self.screen.write("avatar: ", "bold green")
            content = content.lstrip()
            self._speaking = True
        self.current.append(content)
        self.screen.write(content)

    def _track_thread(self, at: float) -> None:
        thread = self.thread_of() if self.thread_of is not None else None
        if thread and thread != self._thread:
            self._thread = thread
            self.status(f"thread   {thread}", "dim", at)


class JsonPrinter:
    """``--json``: one JSON object per event, ``{"event", "t", "data"}``; ``t`` is seconds
    since the command started."""

    def __init__(self, start: float, stream: IO[str] | None = None) -> None:
        self.start = start
        self.stream = stream or sys.stdout

    def on_event(self, event: Event) -> None:
        record = {"event": event.name, "t": round(event.at - self.start, 4), "data": event.data}
        self.stream.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self.stream.flush()
