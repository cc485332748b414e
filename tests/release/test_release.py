"""The release: ``python -m build`` makes a wheel and an sdist that install into a fresh
virtualenv and import; the version lives in one place; the changelog covers the public API.

Quick and offline: the build runs without isolation (hatchling comes from the dev extra),
and the fresh virtualenvs see this interpreter's site-packages through a ``.pth`` line
(not its ``.pth`` files, so the editable install of the checkout is not visible), so
``pip install --no-deps --no-index`` needs nothing from a package index.
"""

from __future__ import annotations

import dataclasses
import re
import site
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

import avatar_sdk
from avatar_sdk import ErrorCode, EventName, RetryPolicy, SessionConfig

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.release


def _run(*args: str | Path, cwd: Path) -> str:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=180, check=False
    )
    assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result.stdout


def _fresh_venv(path: Path) -> Path:
    """A virtualenv without pip that sees this interpreter's packages (not the checkout)."""
    _run(sys.executable, "-m", "venv", "--without-pip", path, cwd=path.parent)
    python = path / "bin" / "python"
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=path)
    (Path(purelib.strip()) / "_host_site.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n", encoding="utf-8"
    )
    return python


def _installed_version(python: Path, cwd: Path) -> tuple[str, str]:
    out = _run(
        python,
        "-c",
        "import avatar_sdk; print(avatar_sdk.__version__); print(avatar_sdk.__file__)",
        cwd=cwd,
    )
    version, location = out.split()
    return version, location


def _declared_version() -> str:
    text = (ROOT / "avatar_sdk" / "_version.py").read_text(encoding="utf-8")
    match = re.fullmatch(r'__version__ = "([^"]+)"\n', text)
    assert match, "avatar_sdk/_version.py holds exactly one line: __version__ = '...'"
    return match.group(1)


def test_the_version_lives_in_one_place() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" in project.get("dynamic", []) and "version" not in project
    assert avatar_sdk.__version__ == _declared_version()
    offenders = [
        path.relative_to(ROOT)
        for folder in ("avatar_sdk", "docs")
        for path in (ROOT / folder).rglob("*")
        if path.is_file()
        and path.suffix in (".py", ".md")
        and path.name != "_version.py"
        and _declared_version() in path.read_text(encoding="utf-8")
    ]
    assert offenders == [], f"the version is repeated in {offenders}"


def test_wheel_and_sdist_install_into_a_fresh_venv_and_import(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # No --sdist/--wheel: the wheel is built from the sdist, which proves the sdist complete.
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, ROOT, cwd=ROOT)
    version = _declared_version()
    wheels = list(dist.glob("*.whl"))
    sdists = list(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())

    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
    assert "avatar_sdk/py.typed" in names
    assert not [n for n in names if n.startswith("tests/")]
    with tarfile.open(sdists[0]) as sdist:
        members = sdist.getnames()
    root = f"avatar_sdk-{version}"
    assert f"{root}/avatar_sdk/py.typed" in members and f"{root}/README.md" in members
    junk = [m for m in members if re.search(r"/(node_modules|\.venv|site|dist)/", m)]
    assert junk == [], junk[:5]

    for artifact in (wheels[0], sdists[0]):
        venv = tmp_path / f"venv-{artifact.suffix.strip('.')}"
        python = _fresh_venv(venv)
        install = ["-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
        if artifact in sdists:
            install.append("--no-build-isolation")  # hatchling from the host packages
        _run(python, *install, artifact, cwd=tmp_path)
        installed, location = _installed_version(python, cwd=tmp_path)
        assert installed == version
        assert Path(location).is_relative_to(venv), f"imported {location}, not the install"
        assert "usage" in _run(venv / "bin" / "avatar-sdk", "--help", cwd=tmp_path).lower()


_KEEP_A_CHANGELOG = re.compile(r"### (Added|Changed|Deprecated|Removed|Fixed|Security)( \(.+\))?")


def public_names() -> list[str]:
    """What users program against: top-level exports, error codes, event names, config."""
    names = [n for n in avatar_sdk.__all__ if n != "__version__"]
    names += [str(code) for code in ErrorCode]
    names += [str(name) for name in EventName]
    names += [f.name for cls in (SessionConfig, RetryPolicy) for f in dataclasses.fields(cls)]
    return names


def unannounced(changelog: str) -> list[str]:
    """Public names no code span of ``changelog`` mentions (a word in prose does not count:
    ``cap`` or ``internal`` would match anything)."""
    code = " ".join(re.findall(r"`([^`]+)`", changelog))
    return [n for n in public_names() if not re.search(rf"(?<!\w){re.escape(n)}(?!\w)", code)]


def test_changelog_is_complete() -> None:
    """Keep a Changelog structure, an entry for the version, and every public name of the
    API announced, so a new event, code or setting cannot ship unannounced."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    version = _declared_version()
    if re.search(r"(\.dev|a|b|rc)\d+$", version):
        assert "## [Unreleased]" in text
    else:
        assert re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d\d-\d\d$", text, re.M)
    for heading in re.findall(r"^###.*$", text, re.M):
        assert _KEEP_A_CHANGELOG.fullmatch(heading), f"not a Keep a Changelog section: {heading}"
    assert unannounced(text) == [], "CHANGELOG.md never mentions these in a code span"
