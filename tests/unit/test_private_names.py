"""What is private stays in its module: no module of the package imports an underscore name
from another of its modules (``from .stream import _key``), nor reaches one through an
imported module (``stream._key``). A name another module needs is promoted to a public name,
or the code moves to where it is used. Checked on the real tree, and shown to catch a planted
violation so it cannot pass vacuously.
"""

from __future__ import annotations

import ast
from pathlib import Path

import avatar_sdk

PACKAGE = Path(avatar_sdk.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def private_uses(source: str, module: str, is_package: bool, modules: set[str]) -> list[str]:
    """``"<line>: <module>.<name>"`` for each underscore name ``module`` takes from another
    package module: imported by name, or read as an attribute of an imported module.
    ``modules``: every module of the package (a private *module* such as ``_lazy`` is not
    a private name: importing it is allowed)."""
    tree = ast.parse(source)
    package = module.split(".") if is_package else module.split(".")[:-1]
    bound: dict[str, str] = {}  # local name -> the package module it stands for
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != "avatar_sdk":
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if full in modules:
                    bound[alias.asname or alias.name] = full
                elif is_private(alias.name) and target != module:
                    found.append(f"{node.lineno}: {full}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "avatar_sdk":
                    # ``import a.b.c`` binds ``a``; ``import a.b.c as m`` binds ``m`` to a.b.c
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else local
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        chain = dotted(node.value)
        if chain is None:
            continue
        head, _, rest = chain.partition(".")
        if head not in bound:
            continue
        owner = bound[head] + (f".{rest}" if rest else "")
        if owner in modules and owner != module:
            found.append(f"{node.lineno}: {owner}.{node.attr}")
    return sorted(set(found), key=lambda s: (int(s.split(":")[0]), s))


def package_sources() -> dict[str, tuple[str, bool, str]]:
    """Module name -> (path relative to the package, is a package, source)."""
    return {
        module_name(p): (p.relative_to(PACKAGE).as_posix(), p.name == "__init__.py", p.read_text())
        for p in PACKAGE.rglob("*.py")
    }


def violations(sources: dict[str, tuple[str, bool, str]]) -> dict[str, list[str]]:
    """Path -> its cross-module private names."""
    modules = set(sources)
    out: dict[str, list[str]] = {}
    for module, (path, is_package, source) in sorted(sources.items()):
        found = private_uses(source, module, is_package, modules)
        if found:
            out[path] = found
    return out


def test_no_module_takes_a_private_name_from_another() -> None:
    assert violations(package_sources()) == {}


def test_a_planted_private_import_is_caught() -> None:
    sources = package_sources()
    planted = (
        "import avatar_sdk.events.stream\n"
        "import avatar_sdk.events.stream as st\n"
        "from avatar_sdk.events import stream\n"
        "from .._lazy import lazy_exports\n"  # a private module, public name: allowed
        "from ..events.journal import _EXIT_TIMEOUT, JOURNALED\n"
        "from .core.spiral import _hidden as shown\n"
        "from json import _default_decoder\n"  # not the package's: not this check's business
        "def f():\n"
        "    from avatar_sdk.events.bus import _key\n"
        "    return stream._unsubscribe, st._unsubscribe, avatar_sdk.events.stream.Subscriber\n"
        "x = avatar_sdk.events.stream._unsubscribe\n"
        "y = _local = 1\n"
        "z = stream.Subscriber._wake\n"  # a class's private member: not a module's name
    )
    sources["avatar_sdk.guards.planted"] = ("guards/planted.py", False, planted)
    assert violations(sources) == {
        "guards/planted.py": [
            "5: avatar_sdk.events.journal._EXIT_TIMEOUT",
            "6: avatar_sdk.guards.core.spiral._hidden",
            "9: avatar_sdk.events.bus._key",
            "10: avatar_sdk.events.stream._unsubscribe",
            "11: avatar_sdk.events.stream._unsubscribe",
        ]
    }
