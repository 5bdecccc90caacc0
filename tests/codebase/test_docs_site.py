"""The documentation site builds with `mkdocs build --strict` and works from a file, in a real browser.

The strict build fails on a broken link or anchor, a page missing from the nav, or a docstring mkdocstrings
cannot render (the `docs` extra installs mkdocs). The built site is then checked as a reader meets it: every
link between pages names an ``.html`` file that exists (so ``site/index.html`` browses from ``file://``
without a web server; folder links open a directory listing there), no markdown escape (``\\|``) shows as
text, no docstring text was swallowed as an HTML tag (``<D_c, D_p>``), and, where Chromium and chromedriver
are installed (`make system-deps`), a headless Chromium opens ``index.html`` from ``file://``, follows a nav
link and finds config keys unbroken in the config table's first column.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Every element name HTML5 (and the SVG Material inlines) uses; a docstring's `<D_c, D_p>` parses as a tag
# outside this set and vanishes from the page.
KNOWN_TAGS = set(
    """a abbr address article aside audio b base bdi bdo blockquote body br button canvas caption cite code col
    colgroup data datalist dd del details dfn dialog div dl dt em embed fieldset figcaption figure footer form
    h1 h2 h3 h4 h5 h6 head header hgroup hr html i iframe img input ins kbd label legend li link main map mark
    menu meta meter nav noscript object ol optgroup option output p param picture pre progress q rp rt ruby s
    samp script search section select slot small source span strong style sub summary sup table tbody td
    template textarea tfoot th thead time title tr track u ul var video wbr svg path g circle rect line polyline
    polygon defs use symbol clippath lineargradient stop""".split()
)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []
        self.nav_hrefs: list[str] = []
        self.tags: set[str] = set()
        self.text: list[str] = []
        self._nav = 0
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        a = dict(attrs)
        if tag == "nav":
            self._nav += 1
        if tag in ("script", "style"):
            self._skip += 1
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
            if self._nav:
                self.nav_hrefs.append(a["href"])

    def handle_endtag(self, tag):
        if tag == "nav" and self._nav:
            self._nav -= 1
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _local_target(page: Path, href: str) -> Path | None:
    """The file a relative link opens from ``file://``; None for external links and same-page anchors."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    return (page.parent / unquote(parts.path)).resolve()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_docs_site_builds_strict(site):
    for page in ("index.html", "config.html", "api/engine.html", "learning.html", "api/operators.html"):
        assert (site / page).is_file(), page


def test_links_open_html_files_from_a_file_url(site):
    index = _parse(site / "index.html")
    nav = [h for h in index.nav_hrefs if _local_target(site / "index.html", h) is not None]
    assert len(nav) >= 15, nav  # every page of the nav
    broken = []
    # 404.html is a web server's page (absolute links); a file:// reader never sees it
    for page in sorted(p for p in site.rglob("*.html") if p.name != "404.html"):
        for href in _parse(page).hrefs:
            target = _local_target(page, href)
            if target is None:
                continue
            # a folder link shows a directory listing from file://, and a missing file nothing at all
            if not target.is_file():
                broken.append(f"{page.relative_to(site)} -> {href}")
    assert broken == [], broken[:20]
    for href in nav:
        assert urlsplit(href).path.endswith(".html"), href


def test_no_markdown_escapes_or_swallowed_text(site):
    escapes, unknown = [], {}
    for page in sorted(site.rglob("*.html")):
        parsed = _parse(page)
        text = "".join(parsed.text)
        escapes += [
            f"{page.relative_to(site)}: ...{m.group()}..." for m in re.finditer(r".{0,30}\\\|.{0,30}", text)
        ]
        odd = parsed.tags - KNOWN_TAGS
        if odd:
            unknown[str(page.relative_to(site))] = sorted(odd)
    assert escapes == [], escapes
    assert unknown == {}, f"text parsed as HTML tags (escape it or put it in a code span): {unknown}"
    ops = "".join(_parse(site / "api" / "operators.html").text)
    assert "<D_c, D_p>" in ops and "<D_x, D_y>_F" in ops


def test_site_browses_from_file_in_chromium(site, chromium_driver):
    from selenium.webdriver.common.by import By

    chromium_driver.get((site / "index.html").as_uri())
    assert chromium_driver.title.startswith("PopuLoRA")
    link = next(
        a
        for a in chromium_driver.find_elements(By.CSS_SELECTOR, "nav a.md-nav__link")
        if a.get_attribute("href").endswith("config.html")
    )
    chromium_driver.execute_script("arguments[0].click();", link)  # the nav may be collapsed into a drawer
    assert chromium_driver.current_url == (site / "config.html").as_uri()
    assert chromium_driver.find_element(By.TAG_NAME, "h1").text.startswith("Config keys")
    # each key in the table's first column renders on one line (no mid-word wrap)
    lines = chromium_driver.execute_script(
        "return [...document.querySelectorAll('.md-typeset table td:first-child code')]"
        ".map(c => [c.textContent, c.getClientRects().length]);"
    )
    assert len(lines) >= 50, lines[:5]
    split = [key for key, n in lines if n != 1]
    assert split == [], split
