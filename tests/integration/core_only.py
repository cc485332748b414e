"""The SDK's core install, for a test: ``pip install avatar-sdk`` with no extra, as
``make demo`` builds it in its own small ``.venv-demo``.

:func:`core_site` links, into a directory, the top-level packages of exactly the
distributions the SDK's core requirements pull in (their closure, read from the installed
metadata), so ``python -S`` with that directory on ``PYTHONPATH`` sees those and the
standard library, nothing of the development extras beside them in this venv."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def core_closure(root: str = "avatar-sdk") -> set[str]:
    """The distributions ``root`` needs with no extra asked for (names canonicalized)."""
    wanted: list[tuple[str, frozenset[str]]] = [(root, frozenset())]
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    while wanted:
        name, extras = wanted.pop()
        key = (canonicalize_name(name), extras)
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        names.add(key[0])
        environments = [{"extra": e} for e in extras] or [{"extra": ""}]
        for line in requires:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate(env) for env in environments):
                wanted.append((req.name, frozenset(req.extras)))
    return names


def core_site(into: Path, root: str = "avatar-sdk") -> Path:
    """A directory holding the core closure's installed files (links), not ``root``'s own
    (the checkout is put on the path instead)."""
    into.mkdir(parents=True, exist_ok=True)
    for name in core_closure(root) - {canonicalize_name(root)}:
        dist = md.distribution(name)
        for top in {Path(str(f)).parts[0] for f in dist.files or () if ".." not in str(f)}:
            source = Path(str(dist.locate_file(top)))
            link = into / top
            if source.exists() and not link.exists():
                link.symlink_to(source)
    return into
