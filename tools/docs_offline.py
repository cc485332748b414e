"""The documentation site works offline, opened from disk (``file://``), as the README says.

Used as an MkDocs hook (``mkdocs.yml``: ``hooks``), beside mkdocs-material's ``offline``
plugin (search without a server) and ``use_directory_urls: false`` (links to ``.html`` files,
not to directories):

* :func:`on_files` publishes the browser scripts that mkdocs-material would otherwise fetch
  from a CDN at view time, from the project's own npm lock (``tools/docs-assets``, installed by
  `make docs` and `make test`): Mermaid, which draws the state diagram, and iframe-worker's
  shim, which runs the search worker where ``file://`` forbids workers;
* :func:`on_post_page` loads Mermaid (3.5 MB) on the pages that have a diagram, and only
  there: Material draws a page's diagrams with the ``mermaid`` already loaded, and would
  fetch one from a CDN if it were not;
* :func:`on_post_build` fails the build when a page still loads a script, a stylesheet, a
  font or an image from the network (a link a reader follows is fine).

A real browser checks the result end to end: ``tests/release/test_docs_offline.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File
from mkdocs.utils import get_relative_url

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "tools" / "docs-assets"
MODULES = ASSETS / "node_modules"
MERMAID_URI = "assets/javascripts/mermaid.min.js"
#: site path -> the file of the npm package it is published from (``mkdocs.yml``'s
#: ``extra.polyfills`` names the shim's).
BUNDLED = {
    MERMAID_URI: MODULES / "mermaid" / "dist" / "mermaid.min.js",
    "assets/javascripts/iframe-worker/shim.js": MODULES / "iframe-worker" / "shim" / "index.js",
}
INSTALL = "cd tools/docs-assets && npm install (or `make docs`, which does it)"

#: What a browser fetches by itself when it loads a page (an ``<a href>`` is followed only on
#: a click, so it is left alone).
_FETCHED = re.compile(
    r"<(?:script|img|iframe|source|audio|video)\b[^>]*\bsrc=[\"']?(?P<src>https?://[^\"'\s>]+)"
    r"|<link\b(?=[^>]*\brel=[\"']?(?:stylesheet|preconnect|preload|modulepreload|icon|"
    r"prefetch|dns-prefetch|manifest))[^>]*\bhref=[\"']?(?P<href>(?:https?:)?//[^\"'\s>]+)"
    r"|@import\s+(?:url\()?[\"']?(?P<imp>https?://[^\"')\s]+)",
    re.IGNORECASE,
)


def network_fetches(html: str) -> list[str]:
    """The network URLs a browser would fetch on its own when loading ``html``."""
    return [next(url for url in match.groups() if url) for match in _FETCHED.finditer(html)]


def on_files(files: Any, config: Any, **_: Any) -> Any:
    """Publish the bundled scripts into the site (from ``tools/docs-assets/node_modules``)."""
    missing = [str(source.relative_to(ROOT)) for source in BUNDLED.values() if not source.exists()]
    if missing:
        raise PluginError(f"the docs' browser assets are not installed ({missing}): {INSTALL}")
    for uri, source in BUNDLED.items():
        files.append(File.generated(config, uri, abs_src_path=str(source)))
    return files


def on_post_page(output: str, page: Any, **_: Any) -> str:
    """Load the bundled Mermaid on a page that has a diagram (``pymdownx.superfences``'
    ``mermaid`` fence), after Material's bundle and before the page is parsed to its end."""
    if 'class="mermaid"' not in output:
        return output
    src = get_relative_url(MERMAID_URI, page.url)
    head, body_end, tail = output.rpartition("</body>")
    if not body_end:
        raise PluginError(f"{page.file.src_uri}: no </body> to load Mermaid before")
    return f'{head}<script src="{src}"></script>\n{body_end}{tail}'


def on_post_build(config: Any, **_: Any) -> None:
    """Fail the build when a built page would still fetch something from the network."""
    site = Path(config["site_dir"])
    found = [
        f"{page.relative_to(site)}: {url}"
        for page in sorted(site.rglob("*.html"))
        for url in network_fetches(page.read_text(encoding="utf-8"))
    ]
    if found:
        shown = "\n  ".join(found[:20])
        raise PluginError(f"pages load from the network and would not work offline:\n  {shown}")
