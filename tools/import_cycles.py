"""Import cycles among the modules under one folder of the package, type-only imports included.

Every ``import``/``from ... import`` in the source counts as an edge, wherever it sits
(module level, inside a function, under ``if TYPE_CHECKING:``): a cycle kept alive by a
type-only import is still a cycle to read. Strongly connected components are found with
Tarjan's algorithm; any group of more than one module (or a module importing itself) is a
cycle. Also lists every underscore name imported from another module of the folder.

    python tools/import_cycles.py [avatar_sdk/testing]

Exit status 1 when a cycle or a cross-module underscore import is found.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(current: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module a ``from`` import at ``level`` dots names."""
    if level == 0:
        return target or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def imports(path: Path, known: set[str]) -> Iterable[tuple[str, str | None]]:
    """(imported module, imported name or None) for every import of ``path``."""
    current = module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            source = resolve(current, path.name == "__init__.py", node.level, node.module)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in known:  # ``from . import x``: the module x itself
                    yield submodule, None
                else:
                    yield source, alias.name


def graph(folder: Path) -> tuple[dict[str, set[str]], list[str]]:
    files = sorted(folder.rglob("*.py"))
    known = {module_name(f) for f in files}
    edges: dict[str, set[str]] = {m: set() for m in known}
    private: list[str] = []
    for f in files:
        here = module_name(f)
        for imported, name in imports(f, known):
            # an import of a.b.c also depends on the innermost known module it names
            target = imported
            while target and target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != here:
                edges[here].add(target)
                if name is not None and name.startswith("_") and not name.startswith("__"):
                    private.append(f"{here} imports {name} from {target}")
    return edges, private


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the strongly connected components."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                found.append(sorted(group))
    return found


def main(argv: list[str]) -> int:
    folder = (ROOT / (argv[1] if len(argv) > 1 else "avatar_sdk/testing")).resolve()
    edges, private = graph(folder)
    cycles = [g for g in strongly_connected(edges) if len(g) > 1]
    print(f"{len(edges)} modules under {folder.relative_to(ROOT)}, {len(cycles)} cycle(s)")
    for group in cycles:
        print("cycle:", ", ".join(group))
    for line in private:
        print("private import:", line)
    return 1 if cycles or private else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
