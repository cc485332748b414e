"""The docs build's offline guard (``tools/docs_offline.py``): what a browser would fetch
from the network by itself when it loads a page is found; a link a reader may follow is not."""

from __future__ import annotations

from tools.docs_offline import network_fetches


def test_what_a_page_fetches_by_itself_is_found() -> None:
    html = """
    <link rel="preconnect" href="https://fonts.gstatic.com" crossorigin>
    <link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">
    <link href="//cdn.example/x.css" rel="stylesheet">
    <script src="https://unpkg.com/iframe-worker/shim"></script>
    <img alt="badge" src='http://img.example/b.svg'>
    <style>@import url("https://css.example/a.css");</style>
    """
    assert network_fetches(html) == [
        "https://fonts.gstatic.com",
        "https://fonts.googleapis.com/css?family=Roboto",
        "//cdn.example/x.css",
        "https://unpkg.com/iframe-worker/shim",
        "http://img.example/b.svg",
        "https://css.example/a.css",
    ]


def test_links_and_local_files_are_not_fetches() -> None:
    html = """
    <a href="https://squidfunk.github.io/mkdocs-material/">Material</a>
    <link rel="canonical" href="https://example.org/page.html">
    <link rel="stylesheet" href="assets/stylesheets/main.css">
    <script src="assets/javascripts/mermaid.min.js"></script>
    <img src="assets/recovery-tiers.png">
    """
    assert network_fetches(html) == []
