"""The package's layering, read from its import graph (static, from the source text).

The folder tree is the code map: a module imports only from its own layer or below, no import
cycle crosses a folder, and the pure modules (the wire protocol, the machine, the router, the
guard and cadence arithmetic) reach no asyncio, socket or transport code, directly or through
what they import. Each rule is checked on the real tree, and each check is shown to catch a
planted violation, so none of them can pass vacuously.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

import avatar_sdk

PACKAGE = Path(avatar_sdk.__file__).parent

#: Layer of each top-level room (a folder, or a root module), lowest first.
LAYERS: dict[str, int] = {
    # the basics every layer shares, and the pure wire protocol
    **dict.fromkeys(
        [
            "__init__", "_lazy", "_version", "besteffort", "clock", "config", "errors",
            "release_once",
            "logs", "observe", "redact", "troubleshooting", "urls", "wire",
        ],
        0,
    ),
    "media": 1,
    "transport": 2,
    **dict.fromkeys(["events", "guards", "tools", "lifecycle", "cassette"], 3),
    "session": 4,
    **dict.fromkeys(["chat", "scripted", "integrations", "telemetry", "testing"], 5),
    # the fleet runner drives the staging backend's fault API (ScenarioContext.fault)
    "fleet": 6,
    # inspect draws cassettes and journals (later a fleet run's sessions)
    "inspect": 6,
    "_cli": 7,
}  # fmt: skip

#: A folder with one of these names holds pure code only (no asyncio, no sockets, no
#: transport, however indirect): the protocol (``wire/``), a room's rules (``core/``) and the
#: liveness rules (``transport/liveness/``). The tree says which code is pure; this test reads
#: it from the tree, so a module placed in such a folder is checked without being listed.
PURE_FOLDER_NAMES = frozenset({"wire", "core", "liveness"})


def is_pure_path(path: Path) -> bool:
    return any(part in PURE_FOLDER_NAMES for part in path.relative_to(PACKAGE).parts[:-1])


FORBIDDEN_LIBS = ("asyncio", "socket", "socketio", "engineio", "aiohttp", "aiortc", "aioice")
#: At run time ``asyncio`` and ``socket`` are loaded by the state-machine library itself
#: (``transitions.extensions`` imports its asyncio machine), so the run-time check looks for
#: the network stacks; the static check above holds the SDK's own imports to the full list.
NETWORK_LIBS = ("socketio", "engineio", "aiohttp", "aiortc", "aioice")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


#: Every pure module, as the tree says.
PURE = sorted(module_name(p) for p in PACKAGE.rglob("*.py") if is_pure_path(p))


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(
    source: str,
    module: str,
    is_package: bool,
    *,
    top_level_only: bool,
    type_checking: bool = False,
) -> set[str]:
    """Absolute names imported by one module. ``top_level_only``: only module-level
    statements, the graph of import cycles and of purity: what runs at import time, plus the
    ``if TYPE_CHECKING`` imports with ``type_checking`` (a type-only import still ties two
    modules together); otherwise every import, type-only and function-level ones included."""
    tree = ast.parse(source)
    found: set[str] = set()
    package = module.split(".") if is_package else module.split(".")[:-1]

    def visit(nodes: Iterable[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                if not top_level_only or type_checking:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(node, field, []):
                        visit([child] if isinstance(child, ast.stmt) else child.body)
            elif not top_level_only:
                visit([n for n in ast.walk(node) if isinstance(n, ast.stmt) and n is not node])

    visit(tree.body)
    return found


def graph(*, top_level_only: bool, type_checking: bool = False) -> dict[str, set[str]]:
    """SDK module -> the SDK modules (and third-party top names) it imports."""
    sources = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in sources.items():
        door = path.name == "__init__.py"
        raw = imports_of(
            path.read_text(),
            name,
            door,
            top_level_only=top_level_only,
            # A package door's type-only imports are its lazy public exports, loaded on
            # first use by name: they tie no module to the door.
            type_checking=type_checking and not door,
        )
        edges = {n for n in raw if n in sources}
        edges |= {n.split(".")[0] for n in raw if not n.startswith("avatar_sdk")}
        edges.discard(name)
        out[name] = edges
    return out


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in edges.items():
        if module == "avatar_sdk":
            continue  # the package door: its type-only imports are the lazy public exports
        for target in targets:
            if not target.startswith("avatar_sdk"):
                continue
            if LAYERS[room(target)] > LAYERS[room(module)]:
                bad.append(f"{module} -> {target}")
    return sorted(bad)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of two modules or more: modules that import each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan, recursion depth = the package's size
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            strongconnect(v)
    return groups


def folder_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles (import-time edges) that span two rooms."""
    return [group for group in cycles(edges) if len({room(m) for m in group}) > 1]


def reach(edges: dict[str, set[str]], start: str) -> set[str]:
    """Everything ``start`` loads at import time, its parent packages' ``__init__`` included."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        parts = m.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]))
        todo.extend(edges.get(m, ()))
    return seen


def is_door(module: str) -> bool:
    """A package's ``__init__`` (its docstring and lazy exports: nothing it loads)."""
    return (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists()


def impurities(edges: dict[str, set[str]], start: str) -> list[str]:
    loaded = reach(edges, start)
    return sorted(
        m
        for m in loaded
        if m in FORBIDDEN_LIBS
        or (
            m.startswith("avatar_sdk.transport") and m != start and m not in PURE and not is_door(m)
        )
    )


def test_every_room_has_a_layer() -> None:
    rooms = {room(module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert rooms <= set(LAYERS), sorted(rooms - set(LAYERS))


def test_no_import_climbs_a_layer() -> None:
    assert layer_violations(graph(top_level_only=False)) == []


def test_no_import_cycle_crosses_a_folder() -> None:
    assert folder_cycles(graph(top_level_only=True)) == []


def test_no_two_modules_import_each_other() -> None:
    """No import cycle anywhere, inside a folder included, and a ``TYPE_CHECKING`` import
    counts: two modules that need each other are one module, or share a third."""
    assert cycles(graph(top_level_only=True, type_checking=True)) == []


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_reach_no_io(module: str) -> None:
    assert impurities(graph(top_level_only=True), module) == []


def test_pure_modules_load_no_io_when_imported() -> None:
    """The same rule at run time: a fresh interpreter that imports every pure module has
    loaded none of the network stacks (catches what a static reading could miss)."""
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in PURE)
        + f"print(sorted(m for m in {NETWORK_LIBS!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_the_root_holds_only_the_basics() -> None:
    root = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert root == sorted(name for name, layer in LAYERS.items() if layer == 0 and name != "wire")


# -- each check can fail -------------------------------------------------------------------
def test_a_planted_upward_import_is_caught() -> None:
    edges = graph(top_level_only=False)
    edges["avatar_sdk.wire.names"] = {*edges["avatar_sdk.wire.names"], "avatar_sdk.session.facade"}
    assert layer_violations(edges) == ["avatar_sdk.wire.names -> avatar_sdk.session.facade"]


def test_a_planted_cross_folder_cycle_is_caught() -> None:
    edges = graph(top_level_only=True)
    edges["avatar_sdk.transport.net.genie"] = {
        *edges["avatar_sdk.transport.net.genie"],
        "avatar_sdk.lifecycle.completion",
    }
    cycles = folder_cycles(edges)
    assert any("avatar_sdk.transport.net.genie" in group for group in cycles)


def test_a_planted_cycle_inside_a_folder_is_caught_type_only_included() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .bus import EventBus\n"
    edges = graph(top_level_only=True, type_checking=True)
    planted = imports_of(source, "avatar_sdk.events.stream", False, top_level_only=True)
    assert "avatar_sdk.events.bus" not in planted  # not at import time...
    typed = imports_of(
        source, "avatar_sdk.events.stream", False, top_level_only=True, type_checking=True
    )
    edges["avatar_sdk.events.stream"] |= typed & set(edges)  # ...but a tie all the same
    assert ["avatar_sdk.events.bus", "avatar_sdk.events.stream"] in cycles(edges)
    assert folder_cycles(edges) == []  # one folder: only the new check sees it


def test_purity_is_read_from_the_folder() -> None:
    assert is_pure_path(PACKAGE / "session" / "core" / "new_rule.py")
    assert is_pure_path(PACKAGE / "transport" / "liveness" / "new_rule.py")
    assert is_pure_path(PACKAGE / "wire" / "new.py")
    assert not is_pure_path(PACKAGE / "session" / "link.py")
    assert not is_pure_path(PACKAGE / "core.py")
    # every room with rules has them checked, and none of it vacuously
    assert {"avatar_sdk.session.core.machine", "avatar_sdk.wire.inbound"} <= set(PURE)
    assert len(PURE) > 30


def test_a_planted_impurity_is_caught_through_an_intermediate() -> None:
    edges = graph(top_level_only=True)
    edges["avatar_sdk.errors"] = {
        *edges["avatar_sdk.errors"],
        "avatar_sdk.transport.socketio.control",
    }
    found = impurities(edges, "avatar_sdk.session.core.machine")
    assert "avatar_sdk.transport.socketio.control" in found
    assert "asyncio" in found


def test_type_only_and_function_level_imports_are_told_apart() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "if TYPE_CHECKING:\n    from .session.facade import AvatarSession\n"
        "def f():\n    import asyncio\n"
    )
    runtime = imports_of(source, "avatar_sdk.x", False, top_level_only=True)
    every = imports_of(source, "avatar_sdk.x", False, top_level_only=False)
    assert "json" in runtime
    assert "asyncio" not in runtime
    assert "avatar_sdk.session.facade" not in runtime
    assert {"asyncio", "avatar_sdk.session.facade", "json"} <= every


# -- the machine holds its rules -----------------------------------------------------------
def state_group_calls(source: str) -> list[int]:
    """Lines that ask the machine about a hand-written list of states (``is_in(...)``) or
    write a failure's bookkeeping by hand (``set(reason=...)``): the machine's own
    predicates and ``note_cause`` are the one place for both."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        attr, keywords = node.func.attr, {k.arg for k in node.keywords}
        if attr == "is_in" or (attr == "set" and "reason" in keywords):
            lines.append(node.lineno)
    return lines


def test_no_state_list_outside_the_machine() -> None:
    machine = PACKAGE / "session" / "core" / "machine.py"
    found = {
        str(p.relative_to(PACKAGE)): state_group_calls(p.read_text())
        for p in PACKAGE.rglob("*.py")
        if p != machine
    }
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_a_planted_state_list_is_caught() -> None:
    source = "def f(m):\n    if m.is_in('connected', 'paused'):\n        m.set(reason='x')\n"
    assert state_group_calls(source) == [2, 3]
