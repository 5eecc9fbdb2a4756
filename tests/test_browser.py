"""Every chapter in a real browser: headless Chromium over the DevTools protocol.

For each chapter page of the built site: no console errors, formulas typeset by MathJax (no raw TeX
left), plots loaded as images, and the site search finds "clip_ratio". Screenshots are saved to
runs/screenshots/ for a human to look at.

Needs Debian's `chromium` (.ci/run installs it). Without it the tests are skipped, unless
MINIRL_REQUIRE_BROWSER=1 (set by .ci/run), which turns a missing browser into a failure.
"""

import functools
import http.server
import json
import os
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO / "runs" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHAPTERS = sorted(p.stem for p in (REPO / "chapters").glob("*.ipynb"))

if CHROMIUM is None:
    if os.environ.get("MINIRL_REQUIRE_BROWSER") == "1":
        pytest.fail("MINIRL_REQUIRE_BROWSER=1 but no chromium on PATH: apt-get install chromium", pytrace=False)
    pytest.skip("no chromium on PATH (apt-get install chromium to run the browser checks)", allow_module_level=True)

websocket = pytest.importorskip("websocket")


class Page:
    """A minimal DevTools-protocol client for one tab: navigate, evaluate, screenshot, collect console errors."""

    def __init__(self, ws_url: str):
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.errors: list[str] = []
        for method in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(method)

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def _event(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            self.errors.append(params["exceptionDetails"].get("exception", {}).get("description", "exception"))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(f"{params['entry'].get('url', '')}: {params['entry']['text']}")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for: {expression}")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'")

    def screenshot(self, path: Path) -> None:
        import base64

        height = self.evaluate("Math.min(document.documentElement.scrollHeight, 12000)")
        self.call("Emulation.setDeviceMetricsOverride", width=1200, height=int(height), deviceScaleFactor=1,
                  mobile=False)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))


@pytest.fixture(scope="module")
def site_url(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = socketserver.TCPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    profile = tempfile.mkdtemp(prefix="minirl-chromium-")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--remote-debugging-port=0", f"--user-data-dir={profile}"]
    proc = subprocess.Popen([CHROMIUM, *flags, "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    deadline = time.time() + 60
    while port is None and time.time() < deadline:
        line = proc.stderr.readline()
        if "DevTools listening on ws://" in line:
            port = int(line.split("ws://127.0.0.1:")[1].split("/")[0])
    assert port, "chromium did not start its DevTools endpoint"
    yield port
    proc.kill()
    proc.wait()
    shutil.rmtree(profile, ignore_errors=True)


def open_page(port: int) -> Page:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?about:blank", method="PUT")
    with urllib.request.urlopen(request, timeout=30) as response:
        return Page(json.loads(response.read())["webSocketDebuggerUrl"])


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_renders_in_a_browser(site_url, browser, chapter):
    page = open_page(browser)
    page.goto(f"{site_url}/{chapter}/")
    # MathJax 3 resolves startup.promise once the first typesetting pass is done.
    page.wait_for("window.MathJax && MathJax.startup && MathJax.startup.promise && true")
    page.evaluate("MathJax.startup.promise.then(() => true)")
    rendered = page.evaluate("document.querySelectorAll('mjx-container svg').length")
    raw_tex = page.evaluate(r"""[...document.querySelectorAll('.jp-MarkdownOutput, .jp-RenderedMarkdown, article p')]
        .map(e => e.innerText).filter(t => /\$[^$\s][^$]*\$/.test(t)).length""")
    images = page.evaluate("""[...document.querySelectorAll('img')].filter(i => i.src.startsWith('data:image/png'))
        .map(i => [i.complete, i.naturalWidth])""")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(SCREENSHOTS / f"{chapter}.png")
    assert rendered > 5, f"{chapter}: only {rendered} formulas typeset"
    assert raw_tex == 0, f"{chapter}: {raw_tex} paragraphs still show raw $...$"
    assert len(images) >= 2 and all(done and width > 100 for done, width in images), f"{chapter}: plots {images}"
    assert not page.errors, f"{chapter}: console errors {page.errors}"


def test_reading_map_math_and_search(site_url, browser):
    page = open_page(browser)
    page.goto(f"{site_url}/")
    page.wait_for("window.MathJax && MathJax.startup && MathJax.startup.promise && true")
    page.evaluate("MathJax.startup.promise.then(() => true)")
    assert page.evaluate("document.querySelectorAll('mjx-container[display=true] svg').length") >= 3
    # Material's search: open the box, type once its index is built (a web worker), read the results.
    page.evaluate("document.querySelector('label.md-search__icon, label[for=__search]').click()")
    typing = """(() => { const input = document.querySelector('input.md-search__input');
        input.focus(); input.value = 'clip_ratio';
        for (const type of ['input', 'keyup']) input.dispatchEvent(new Event(type, {bubbles: true}));
        return [...document.querySelectorAll('.md-search-result__item a')].map(a => a.href); })()"""
    hits, deadline = [], time.time() + 60
    while not hits and time.time() < deadline:  # typing before the index is ready shows nothing: retry
        hits = page.evaluate(typing)
        time.sleep(0.5)
    assert any("04_grpo" in href for href in hits), f"search for clip_ratio found {hits}"
    assert not page.errors, page.errors


@pytest.mark.parametrize("reference, rows", [("concordance", 200), ("glossary", 20)])
def test_concordance_and_glossary_render_and_their_links_resolve(site_url, browser, reference, rows):
    page = open_page(browser)
    page.goto(f"{site_url}/{reference}/")
    page.wait_for("document.readyState === 'complete'")
    table_rows = page.evaluate("document.querySelectorAll('article table tbody tr').length")
    in_nav = page.evaluate(f"""[...document.querySelectorAll('nav a')].some(a => a.href.includes('/{reference}/'))""")
    links = page.evaluate("""[...new Set([...document.querySelectorAll('article a')]
        .map(a => a.href.split('#')[0]).filter(h => h.startsWith(location.origin)))]""")
    page.screenshot(SCREENSHOTS / f"{reference}.png")
    assert table_rows > rows, f"{reference}: {table_rows} table rows"
    assert in_nav, f"{reference} is not in the site's navigation"
    for link in links:  # every link to a chapter or page lands on a page
        with urllib.request.urlopen(link, timeout=10) as response:
            assert response.status == 200, link
    if reference == "concordance":
        text = page.evaluate("document.querySelector('article').innerText")
        for row in ("actor/pg_clipfrac", "compute_grpo_outcome_advantage", "actor_rollout_ref.rollout.n"):
            assert row in text, row
        assert any(link.endswith("/01_ppo/") for link in links)
    assert not page.errors, f"{reference}: console errors {page.errors}"
