"""Reference pages generated from the code, so the documentation cannot drift from it.

Used as an MkDocs hook (``mkdocs.yml``: ``hooks: [tools/docgen.py]``): a page that holds a
marker line ``<!-- generated: NAME -->`` gets the block :data:`GENERATORS` ``[NAME]``
builds, at build time. The sources:

* ``events``: :class:`avatar_sdk.EventName`, grouped by the comments in its body, with
  each payload ``TypedDict`` of :data:`avatar_sdk.events.names.PAYLOADS`: its docstring,
  its fields, their annotations and trailing comments;
* ``errors`` / ``troubleshooting``: :data:`avatar_sdk.errors.CATALOGUE` and
  :data:`avatar_sdk.troubleshooting.ADVICE`;
* ``config``: the fields of :class:`SessionConfig`, :class:`RetryPolicy` and
  :class:`RenewalPolicy`, their
  defaults and attribute docstrings;
* ``state-diagram``: :func:`avatar_sdk.session.core.diagram.mermaid`;
* ``changelog``: ``CHANGELOG.md``; ``benchmarks``: ``benchmarks/RESULTS.md`` and its chart.

A missing docstring, an event without a payload type or a code without advice is a
:class:`DocgenError`, which fails the build: the gap is fixed in the code, once.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import textwrap
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

from avatar_sdk.config import RenewalPolicy, RetryPolicy, SessionConfig
from avatar_sdk.errors import CATALOGUE, ErrorCode
from avatar_sdk.events.names import PAYLOADS, EventName
from avatar_sdk.session.core.diagram import VIEWS, overview, view
from avatar_sdk.troubleshooting import ADVICE, Advice

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
#: Where the benchmark chart is published in the site (``benchmarks.md`` links it).
CHART_URI = "assets/recovery-tiers.png"
CHART_SOURCE = ROOT / "benchmarks" / "recovery-tiers.png"


class DocgenError(Exception):
    """The code lacks what a reference page needs (fix the code, not the page)."""


# -- helpers -----------------------------------------------------------------------------------
def _cell(text: str) -> str:
    """One Markdown table cell: a single line, pipes escaped outside code spans (inside
    them Python-Markdown's tables already take a pipe literally, and would show the
    backslash)."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    return "".join(part if part.startswith("`") else part.replace("|", "\\|") for part in parts)


def _class_fields(cls: type) -> list[tuple[str, str, str | None, str | None]]:
    """``(name, annotation, trailing comment, attribute docstring)`` of every annotated
    field in the body of ``cls``, in source order."""
    source = textwrap.dedent(inspect.getsource(cls))  # a class nested in a function, too
    tree = ast.parse(source)
    body = tree.body[0]
    if not isinstance(body, ast.ClassDef):
        raise DocgenError(f"{cls.__qualname__}: not a class definition")
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    out: list[tuple[str, str, str | None, str | None]] = []
    statements = body.body
    for index, node in enumerate(statements):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        following = statements[index + 1] if index + 1 < len(statements) else None
        doc = None
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            doc = inspect.cleandoc(following.value.value)
        out.append((node.target.id, ast.unparse(node.annotation), comments.get(node.lineno), doc))
    return out


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj)
    if not doc:
        raise DocgenError(f"{obj.__qualname__} has no docstring")
    return doc


def _rst_to_md(text: str) -> str:
    """The docstrings' reST inline code (double backticks) as Markdown code spans."""
    return re.sub(r"``(.+?)``", r"`\1`", text)


# -- events ------------------------------------------------------------------------------------
def _event_groups() -> list[tuple[str, list[str]]]:
    """``EventName`` members grouped under the ``# Group`` comments of its body."""
    source = inspect.getsource(EventName)
    groups: list[tuple[str, list[str]]] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("# "):
            groups.append((stripped[2:], []))
            continue
        match = re.match(r"([A-Z_]+) = \"([a-z_]+)\"", stripped)
        if match:
            if not groups:
                groups.append(("Events", []))
            groups[-1][1].append(match.group(2))
    listed = {name for _, names in groups for name in names}
    missing = {str(member) for member in EventName} - listed
    if missing:
        raise DocgenError(f"EventName members outside any group: {sorted(missing)}")
    return groups


def events_reference() -> str:
    """Every event: what it means, and the fields of its ``data`` with their types."""
    lines: list[str] = []
    for group, names in _event_groups():
        lines += [f"## {group}", ""]
        for name in names:
            payload = PAYLOADS.get(EventName(name))
            if payload is None:
                raise DocgenError(f"event {name!r} has no payload type in PAYLOADS")
            lines += [f"### `{name}`", "", _rst_to_md(_doc(payload)), ""]
            fields = _class_fields(payload)
            if not fields:
                lines += [f"`data` is empty (`{payload.__name__}`).", ""]
                continue
            lines += [
                f"`data` (`{payload.__name__}`):",
                "",
                "| field | type | notes |",
                "|---|---|---|",
            ]
            for field, annotation, comment, doc in fields:
                note = _rst_to_md(comment or doc or "")
                lines.append(f"| `{field}` | {_cell(f'`{annotation}`')} | {_cell(note)} |")
            lines.append("")
    return "\n".join(lines)


# -- errors ------------------------------------------------------------------------------------
def _advice_for(code: ErrorCode) -> Advice:
    entry = ADVICE.get(code)
    if entry is None:
        raise DocgenError(f"error code {code!s} has no entry in avatar_sdk.troubleshooting")
    return entry


def errors_reference() -> str:
    """The catalogue as one table: severity, retryable, category, message."""
    lines = [
        "| code | severity | retryable | category | message |",
        "|---|---|---|---|---|",
    ]
    for code in ErrorCode:
        info = CATALOGUE[code]
        lines.append(
            f"| [`{code}`](troubleshooting.md#{code}) | {info.severity} | "
            f"{'yes' if info.retryable else 'no'} | {info.category} | {_cell(info.message)} |"
        )
    return "\n".join(lines) + "\n"


def troubleshooting_reference() -> str:
    """One section per error code: what it means, what to do."""
    lines: list[str] = []
    for code in ErrorCode:
        info = CATALOGUE[code]
        entry = _advice_for(code)
        retry = "retryable" if info.retryable else "not retryable"
        lines += [
            f"### `{code}` {{#{code}}}",
            "",
            f"*{info.severity}, {retry}, category `{info.category}`* — {info.message}",
            "",
            f"**What it means.** {entry.meaning}",
            "",
            f"**What to do.** {entry.action}",
            "",
        ]
    return "\n".join(lines)


# -- configuration -----------------------------------------------------------------------------
def _default(cls: type, name: str) -> str:
    for field in dataclasses.fields(cls):
        if field.name != name:
            continue
        if field.default is not dataclasses.MISSING:
            value: Any = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            return "required"
        if dataclasses.is_dataclass(value):
            return f"`{type(value).__name__}()`"
        if isinstance(value, tuple):
            return "`(" + ", ".join(f"{v:g}" for v in value) + ")`"
        if isinstance(value, float):
            return f"`{value:g}`"
        return f"`{value!r}`"
    raise DocgenError(f"{cls.__name__}.{name} is not a dataclass field")


def _config_table(cls: type) -> list[str]:
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, annotation, _, doc in _class_fields(cls):
        if not doc:
            raise DocgenError(f"{cls.__name__}.{name} has no docstring")
        lines.append(
            f"| `{name}` | {_cell(f'`{annotation}`')} | {_default(cls, name)} | "
            f"{_cell(_rst_to_md(doc))} |"
        )
    return lines


def config_reference() -> str:
    """``SessionConfig``, ``RetryPolicy`` and ``RenewalPolicy``: every field, its default
    and meaning."""
    return "\n".join(
        [
            "## `SessionConfig`",
            "",
            _rst_to_md(_doc(SessionConfig)),
            "",
            *_config_table(SessionConfig),
            "",
            "## `RetryPolicy`",
            "",
            _rst_to_md(_doc(RetryPolicy)),
            "",
            *_config_table(RetryPolicy),
            "",
            "## `RenewalPolicy`",
            "",
            _rst_to_md(_doc(RenewalPolicy)),
            "",
            *_config_table(RenewalPolicy),
            "",
        ]
    )


# -- the rest ----------------------------------------------------------------------------------
def state_diagram() -> str:
    """The overview of the top states, then one readable diagram per part of the story."""
    blocks = ["```mermaid\n" + overview() + "```\n"]
    for v in VIEWS:
        blocks.append(f"\n### {v.title}\n\n```mermaid\n{view(v.name)}```\n")
    return "".join(blocks)


def _strip_title(text: str) -> str:
    """A Markdown document without its first ``# `` heading (the page has its own)."""
    return re.sub(r"\A# [^\n]*\n", "", text.lstrip(), count=1)


def changelog() -> str:
    return _strip_title((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))


def _results() -> str:
    path = ROOT / "benchmarks" / "RESULTS.md"
    if not path.exists():
        raise DocgenError("benchmarks/RESULTS.md is missing: run `make bench`")
    return path.read_text(encoding="utf-8")


def benchmarks() -> str:
    text = _strip_title(_results())
    # The report links its chart beside it; in the site the chart lives under assets/.
    return text.replace(f"]({CHART_SOURCE.name})", f"]({CHART_URI})")


def tier_timings() -> str:
    """The per-tier table of ``RESULTS.md`` (between its ``tiers`` markers) and the chart."""
    text = _results()
    start, end = text.find("<!-- tiers:start -->"), text.find("<!-- tiers:end -->")
    if start < 0 or end < start:
        raise DocgenError("benchmarks/RESULTS.md has no tiers table: run `make bench`")
    table = text[start + len("<!-- tiers:start -->") : end].strip("\n")
    return table + f"\n\n![Recovery durations per tier]({CHART_URI})\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "events": events_reference,
    "errors": errors_reference,
    "troubleshooting": troubleshooting_reference,
    "config": config_reference,
    "state-diagram": state_diagram,
    "changelog": changelog,
    "benchmarks": benchmarks,
    "tier-timings": tier_timings,
}


def expand(markdown: str) -> str:
    """``markdown`` with every marker line replaced by its generated block."""

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        generator = GENERATORS.get(name)
        if generator is None:
            raise DocgenError(f"unknown generated block {name!r} (known: {sorted(GENERATORS)})")
        return generator().rstrip("\n")

    return MARKER.sub(generated, markdown)


# -- MkDocs hook entry points --------------------------------------------------------------------
def on_page_markdown(markdown: str, **_: Any) -> str:
    try:
        return expand(markdown)
    except DocgenError as error:
        raise PluginError(f"docgen: {error}") from error


_ROLE = re.compile(r":(?:class|func|meth|data|attr|mod|exc|obj):<code>(~?)([\w.]+)</code>")


def _drop_roles(html: str) -> str:
    """The docstrings' Sphinx roles (``:class:`~a.b.C```) as plain code (``C``): griffe
    leaves them as text, which reads as noise."""

    def code(match: re.Match[str]) -> str:
        short, target = match.groups()
        return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"

    return _ROLE.sub(code, html)


def on_page_content(html: str, **_: Any) -> str:
    return _drop_roles(html)


def on_files(files: Any, config: Any, **_: Any) -> Any:
    """Publish the benchmark chart (it lives beside RESULTS.md, outside ``docs/``)."""
    if CHART_SOURCE.exists():
        files.append(File.generated(config, CHART_URI, abs_src_path=str(CHART_SOURCE)))
    return files
