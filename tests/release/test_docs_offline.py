"""The README says: ``make docs``, then open ``site/index.html``. This opens it that way, from
disk (``file://``), in a real headless Chromium (Debian's ``chromium``, driven by Playwright;
`make test` installs Chromium when it is missing) with the network out of reach, and checks
what a reader gets: every nav link, followed from every page, lands on a real page (its
``<h1>``, not a directory listing); the search box exists and finds a known word; the state
diagram is drawn as an ``<svg>`` (not Mermaid source); and no request left ``file://``."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urldefrag

import pytest
import yaml
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from avatar_sdk.session.core.diagram import VIEWS
from avatar_sdk.session.core.machine import STATES

from ..chromium import launch_options

ROOT = Path(__file__).resolve().parents[2]
# ~30 s on an idle machine (the strict build, ~10 s, then 24 pages in the browser); the suite's
# 60 s per test is a hang guard that a loaded 2-core machine can push this past.
pytestmark = [pytest.mark.docs, pytest.mark.timeout(180)]

WAIT_MS = 15_000


def _nav_pages() -> set[str]:
    """The Markdown pages of ``mkdocs.yml``'s nav (its python tags read as nothing)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)
    pages: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, str):
            pages.add(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)

    walk(config["nav"])
    return pages


def _walk(node: dict[str, Any]) -> Any:
    """Every node of a CDP ``DOM.getDocument(pierce=True)`` tree, shadow roots included
    (Material draws the diagram into a *closed* shadow root, out of reach of page scripts
    and selectors)."""
    yield node
    for key in ("children", "shadowRoots"):
        for child in node.get(key, []):
            yield from _walk(child)
    if "contentDocument" in node:
        yield from _walk(node["contentDocument"])


def _text(node: dict[str, Any]) -> str:
    return " ".join(n.get("nodeValue", "") for n in _walk(node) if n.get("nodeType") == 3)


def _state_names() -> set[str]:
    names: set[str] = set()
    for state in STATES:
        if isinstance(state, str):
            names.add(state)
        else:
            names.update(f"{state['name']}_{child}" for child in state["children"])
    return names


def test_the_site_works_from_disk_in_a_browser(site: Path, tmp_path: Path) -> None:
    requests: list[str] = []
    errors: list[str] = []
    failures: list[str] = []  # every check runs; the test reports all that failed
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            **launch_options(tmp_path / "profile")
        )
        try:
            context.on("request", lambda request: requests.append(request.url))
            page = context.new_page()
            page.on("pageerror", lambda error: errors.append(f"{page.url}: {error}"))

            # -- every nav link, followed from every page it appears on ----------------------
            index = (site / "index.html").as_uri()
            to_visit, visited = [index], set[str]()
            while to_visit:
                url = to_visit.pop()
                if url in visited:
                    continue
                visited.add(url)
                # the parsed page is enough here (what loads after it is the same template's:
                # the index and the diagram's page below are loaded in full, and waited on)
                page.goto(url, wait_until="domcontentloaded")
                title = page.title()
                if not url.endswith(".html") or page.locator("article h1").count() != 1:
                    failures.append(f"nav link {url}: lands on {title!r}, no article <h1>")
                    continue
                links = page.eval_on_selector_all(
                    "nav.md-nav--primary a.md-nav__link[href]", "els => els.map(e => e.href)"
                )
                to_visit.extend(urldefrag(link).url for link in links)
            prefix = site.as_uri() + "/"
            landed = {
                Path(url.removeprefix(prefix)).with_suffix(".md").as_posix()
                for url in visited
                if url.endswith(".html")
            }
            if landed != _nav_pages():
                failures.append(f"nav pages not reached: {sorted(_nav_pages() - landed)}")

            # -- search, offline --------------------------------------------------------------
            page.goto(index)
            # Material hides the search box (its dialog ``hidden``) when its worker cannot start
            search = page.locator("input.md-search__input")
            if search.count() != 1 or not search.is_visible():
                failures.append("search: no search box on the index (hidden or absent)")
            else:
                search.fill("WHEP")
                result = page.locator(".md-search-result__item a").first
                try:
                    result.wait_for(timeout=WAIT_MS)
                except PlaywrightTimeout:
                    shown = page.locator(".md-search-result__meta").inner_text()
                    failures.append(f"search: no result for 'WHEP'; it shows {shown!r}")
                else:
                    target = urldefrag(result.evaluate("a => a.href")).url
                    page.goto(target)
                    if page.locator("article h1").count() != 1:
                        failures.append(f"search: its first result {target} is no page")

            # -- the state diagram, drawn -----------------------------------------------------
            # reached the way a reader does: by its nav link
            diagram_page = next(url for url in sorted(visited) if "state-machine" in url)
            page.goto(diagram_page)
            cdp = context.new_cdp_session(page)
            # the overview and one diagram per part of the story, every one drawn
            expected = 1 + len(VIEWS)
            svgs: list[dict[str, Any]] = []
            for _ in range(WAIT_MS // 250):  # Mermaid renders asynchronously after load
                root = cdp.send("DOM.getDocument", {"depth": -1, "pierce": True})["root"]
                svgs = [n for n in _walk(root) if _is_mermaid_svg(n)]
                if len(svgs) >= expected:
                    break
                page.wait_for_timeout(250)
            article = page.locator("article").inner_text() if page.url.endswith(".html") else ""
            if len(svgs) < expected:
                failures.append(
                    f"diagram: {len(svgs)} Mermaid <svg> of {expected} on {diagram_page}"
                )
            else:
                drawn = " ".join(_text(svg) for svg in svgs)
                missing = sorted(name for name in _state_names() if name not in drawn)
                if missing:
                    failures.append(f"diagram: states missing from the drawn <svg>: {missing}")
            if "stateDiagram" in article:
                failures.append("diagram: its Mermaid source shows as text")
        finally:
            context.close()

    outside = sorted({url for url in requests if not url.startswith(("file:", "data:", "blob:"))})
    failures += [f"request left file://: {url}" for url in outside]
    failures += [f"script error: {error}" for error in errors]
    assert not failures, "the site opened from disk:\n" + "\n".join(failures)


def _is_mermaid_svg(node: dict[str, Any]) -> bool:
    attributes = node.get("attributes", [])
    return node.get("localName") == "svg" and any("mermaid" in value for value in attributes)
