"""Every page of the book in a real browser: Playwright driving Debian's headless Chromium.

For every page in the site's navigation: no console errors, and every link inside the page that
points into the site (including the footer's "next" link) lands on a page. For each chapter:
formulas typeset by MathJax (no raw TeX left) and plots loaded as images with a meaningful alt text.
The reading map's display math and the site search ("clip_ratio" finds Chapter 4), and the
concordance and glossary tables. The Chinese edition (/zh/, minirl/book/zh.py): every page of its nav
loads the same way; Chinese text is drawn with a CJK font (not as empty boxes), formulas typeset, the
central figure loads, the language switch leads from a chapter to its Chinese page and back, and search for a
Chinese term finds Chinese pages. Screenshots are saved to
runs/screenshots/ for a human to look at.

Playwright's Python package drives the system's `chromium` through `executable_path`: nothing is
downloaded at run time. Without chromium the tests are skipped, unless MINIRL_REQUIRE_BROWSER=1 (set
by .ci/run), which turns a missing browser into a failure.
"""

import functools
import http.server
import os
import shutil
import socketserver
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from minirl.book import zh

REPO = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO / "runs" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHAPTERS = sorted(p.stem for p in (REPO / "chapters").glob("*.ipynb"))
CHINESE_CHAPTERS = [Path(english).stem for english, _, status in zh.coverage()
                    if status == "translated" and english.endswith(".ipynb")]

if CHROMIUM is None:
    if os.environ.get("MINIRL_REQUIRE_BROWSER") == "1":
        pytest.fail("MINIRL_REQUIRE_BROWSER=1 but no chromium on PATH: apt-get install chromium", pytrace=False)
    pytest.skip("no chromium on PATH (apt-get install chromium to run the browser checks)", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")


def nav_pages(language: str = "en") -> list[str]:
    """The URL path of every page in mkdocs.yml's nav for `language` ("" for the reading map, "zh/" in Chinese)."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text().replace("!!python", "#"))
    nav, prefix = config["nav"], ""
    if language != "en":
        i18n = next(p["i18n"] for p in config["plugins"] if isinstance(p, dict) and "i18n" in p)
        nav, prefix = next(lang["nav"] for lang in i18n["languages"] if lang["locale"] == language), f"{language}/"

    def files_of(entries):  # a section ("Labs") holds a list of entries of its own
        for entry in entries:
            value = next(iter(entry.values()))
            yield from files_of(value) if isinstance(value, list) else [value]

    stems = [f.rsplit(".", 1)[0].removesuffix(f".{language}") for f in files_of(nav)]
    return [prefix + ("" if stem == "index" else stem + "/") for stem in stems]


@pytest.fixture(scope="session")  # session: built once per worker, even when xdist interleaves files
def site_url(built_site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(built_site))
    handler.log_message = lambda *args: None
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


def open_page(browser, url: str):
    """A new page at `url`, with its console errors collected in page.errors."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.errors = []
    page.on("console", lambda message: page.errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(url, wait_until="load")
    return page


def typeset(page) -> None:
    """Wait until MathJax 3 has finished its first typesetting pass."""
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise && true")
    page.evaluate("MathJax.startup.promise.then(() => true)")


def test_the_nav_lists_every_chapter_and_reference_page():
    pages = nav_pages()
    assert {f"{chapter}/" for chapter in CHAPTERS} <= set(pages)
    assert {"", "concordance/", "glossary/"} <= set(pages)


@pytest.mark.parametrize("path", nav_pages() + nav_pages("zh"))
def test_every_page_loads_cleanly_and_its_links_resolve(site_url, browser, path, request):
    """Every page of both languages loads without console errors, its links resolve and it links the next page; a
    chapter page (English or Chinese) also passes its chapter checks, on the same page load."""
    page = open_page(browser, f"{site_url}/{path}")
    request.addfinalizer(page.close)
    links = page.evaluate("""[...new Set([...document.querySelectorAll('article a, a.md-footer__link')]
        .map(a => a.href.split('#')[0]).filter(h => h.startsWith(location.origin)))]""")
    for link in links:
        with urllib.request.urlopen(link, timeout=10) as response:
            assert response.status == 200, f"{path}: {link}"
    if path not in (nav_pages()[-1], nav_pages("zh")[-1]):
        assert page.locator("a.md-footer__link--next").count() == 1, f"{path}: no 'next' link"
    stem = path.removeprefix("zh/").rstrip("/")
    if path.startswith("zh/") and stem in CHINESE_CHAPTERS:
        check_chinese_chapter_page(page, stem)
    elif not path.startswith("zh/") and stem in CHAPTERS:
        check_chapter_math_and_plots(page, stem)
    assert not page.errors, f"{path}: console errors {page.errors}"


def test_every_chapter_page_is_checked():
    """The chapter checks run inside the page-load test: every chapter and every Chinese chapter page is in the nav."""
    english, chinese = set(nav_pages()), set(nav_pages("zh"))
    assert {f"{chapter}/" for chapter in CHAPTERS} <= english
    assert {f"zh/{chapter}/" for chapter in CHINESE_CHAPTERS} <= chinese, sorted(
        f"zh/{chapter}/" for chapter in CHINESE_CHAPTERS if f"zh/{chapter}/" not in chinese)


def check_chapter_math_and_plots(page, chapter):
    """A chapter's formulas are typeset (none left as raw $...$) and its plots drawn, each with a description."""
    typeset(page)
    rendered = page.locator("mjx-container svg").count()
    raw_tex = page.evaluate(r"""[...document.querySelectorAll('.jp-MarkdownOutput, .jp-RenderedMarkdown, article p')]
        .map(e => e.innerText).filter(t => /\$[^$\s][^$]*\$/.test(t)).length""")
    images = page.evaluate("""[...document.querySelectorAll('img')].filter(i => i.src.startsWith('data:image/png'))
        .map(i => [i.complete, i.naturalWidth, i.alt])""")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{chapter}.png"))
    # A chapter teaches a paper's maths; a lab is about doing, so it needs only the few formulas it explains.
    assert rendered > (5 if chapter[0].isdigit() else 1), f"{chapter}: only {rendered} formulas typeset"
    assert raw_tex == 0, f"{chapter}: {raw_tex} paragraphs still show raw $...$"
    enough = len(images) >= (2 if chapter[0].isdigit() else 1)  # a lab may show a single curve
    assert enough and all(done and width > 100 for done, width, _ in images), f"{chapter}: plots {images}"
    for _, _, alt in images:
        described = alt.startswith(("Plot in Chapter", "Plot in Lab")) and "No description" not in alt
        assert described, f"{chapter}: alt text {alt!r}"


def test_reading_map_math_and_search(site_url, browser):
    page = open_page(browser, f"{site_url}/")
    typeset(page)
    assert page.locator("mjx-container[display=true] svg").count() >= 3
    # Material's search box (visible in the header at this width); results appear once its index (a web
    # worker) is built.
    box = page.locator("input.md-search__input")
    box.click()
    hits, deadline = [], time.time() + 60
    while not hits and time.time() < deadline:  # typing before the index is ready shows nothing: type again
        box.fill("")
        box.press_sequentially("clip_ratio")
        page.wait_for_timeout(500)
        hits = page.evaluate("[...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)")
    assert any("04_grpo" in href for href in hits), f"search for clip_ratio found {hits}"
    assert not any("/zh/" in href for href in hits), "the English site searches the English pages only"
    assert not page.errors, page.errors


@pytest.mark.parametrize("reference, rows", [("concordance", 200), ("glossary", 20), ("zh/glossary", 20)])
def test_concordance_and_glossary_tables(site_url, browser, reference, rows):
    page = open_page(browser, f"{site_url}/{reference}/")
    table_rows = page.locator("article table tbody tr").count()
    page.screenshot(path=str(SCREENSHOTS / f"{reference.replace('/', '-')}.png"), full_page=True)
    assert table_rows > rows, f"{reference}: {table_rows} table rows"
    if reference == "concordance":
        text = page.inner_text("article")
        for row in ("actor/pg_clipfrac", "compute_grpo_outcome_advantage", "actor_rollout_ref.rollout.n"):
            assert row in text, row
        links = page.evaluate("[...document.querySelectorAll('article a')].map(a => a.href)")
        assert any(link.rstrip("/").endswith("/01_ppo") for link in links)
    assert not page.errors, f"{reference}: console errors {page.errors}"


CJK_DRAWN = """() => {  // two different characters give two different pictures only if a CJK font draws them
    const draw = text => { const c = document.createElement('canvas'); c.width = 64; c.height = 32;
        const g = c.getContext('2d'); g.font = '24px ' + getComputedStyle(document.body).fontFamily;
        g.fillText(text, 0, 24); return c.toDataURL(); };
    return draw('优') !== draw('势') && draw('优') !== draw('');
}"""


def check_chinese_chapter_page(page, chapter):
    """A Chinese chapter page is Chinese, drawn with a CJK font, its formulas typeset and its central figure shown."""
    typeset(page)
    assert page.evaluate("document.documentElement.lang") == "zh"
    assert page.evaluate(CJK_DRAWN), "Chinese characters are not drawn by a CJK font (apt-get install fonts-noto-cjk)"
    assert page.locator("mjx-container svg").count() >= 1, f"{chapter}: no formula typeset"
    raw_tex = page.evaluate(r"""[...document.querySelectorAll('article p, article td')].map(e => e.innerText)
        .filter(t => /\$[^$\s][^$]*\$/.test(t)).length""")
    assert raw_tex == 0, f"{chapter}: {raw_tex} paragraphs still show raw $...$"
    figure = page.evaluate(f"""[...document.querySelectorAll('article img')]
        .filter(i => i.src.endsWith('figures/{chapter}.png')).map(i => [i.complete, i.naturalWidth, i.alt])""")
    assert figure and all(done and width > 100 and alt for done, width, alt in figure), f"{chapter}: figure {figure}"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"zh-{chapter}.png"), full_page=True)


def test_the_language_switch_keeps_the_reader_on_the_same_chapter(site_url, browser):
    chapter = CHINESE_CHAPTERS[0]
    page = open_page(browser, f"{site_url}/{chapter}/")
    page.locator(".md-header__option .md-select").hover()
    page.locator('a.md-select__link[hreflang="zh"]').click()
    page.wait_for_url(f"**/zh/{chapter}/")
    assert page.evaluate("document.documentElement.lang") == "zh" and "章" in page.title()
    page.locator(".md-header__option .md-select").hover()
    page.locator('a.md-select__link[hreflang="en"]').click()
    page.wait_for_url(f"{site_url}/{chapter}/")
    # a page with no Chinese version is shown in English, with a note saying so
    page = open_page(browser, f"{site_url}/zh/concordance/")
    assert "本页暂无中文版" in page.inner_text("article")
    assert not page.errors, page.errors


@pytest.mark.parametrize("term", ["优势", "基线", "参考模型"])
def test_chinese_search_finds_chinese_pages(site_url, browser, term):
    page = open_page(browser, f"{site_url}/zh/")
    box = page.locator("input.md-search__input")
    box.click()
    hits, deadline = [], time.time() + 60
    while not any("/zh/" in href for href in hits) and time.time() < deadline:  # the index loads in a worker
        box.fill("")
        box.press_sequentially(term)  # jieba cut the pages' text into words at build time (mkdocs.yml, search)
        # Playwright types characters outside the keyboard layout as inserted text, with no key events; Material
        # reads the query on keyup. A reader's input method confirms the word with a key, as End does here.
        box.press("End")
        page.wait_for_timeout(500)
        hits = page.evaluate("[...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)")
    assert any("/zh/" in href for href in hits), f"search for {term} found {hits}"
    assert all("/zh/" in href for href in hits), "the Chinese site searches its own pages (zh.split_search_index)"
    if term == "优势":
        page.screenshot(path=str(SCREENSHOTS / "zh-search.png"))
    assert not page.errors, page.errors


def test_chinese_reading_map(site_url, browser):
    page = open_page(browser, f"{site_url}/zh/")
    typeset(page)
    assert page.locator("mjx-container[display=true] svg").count() >= 3
    assert page.evaluate(CJK_DRAWN)
    page.screenshot(path=str(SCREENSHOTS / "zh-index.png"), full_page=True)
    assert not page.errors, page.errors
