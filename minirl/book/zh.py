"""The Chinese edition (中文版): which pages have a Chinese twin, and the build steps the i18n plugin leaves to us.

The site is built twice by mkdocs-static-i18n (mkdocs.yml, plugin `i18n`): in English at `/`, in Chinese at
`/zh/`. A Chinese page sits next to its English source with the language before the extension:
`chapters/01_ppo.zh.md` is the Chinese page of `chapters/01_ppo.ipynb`. The English book stays the source;
a Chinese page gives the chapter's five answers, its central figure, its verl <-> minirl table and how to run
and grade it, and sends the reader into the runnable English notebook.

The plugin pairs pages by name *and* extension, so `01_ppo.zh.md` and `01_ppo.ipynb` would not be paired.
minirl/book/mkdocs_hooks.py does the rest with the helpers here:

1. `pair_pages`: in the Chinese build, drop the English notebook that a Chinese page replaces, and make the two
   pages each other's alternate, so that the language switch keeps the reader on the same chapter.
2. `central_figures`: every chapter notebook tags one plotting cell `central-figure`; its image is written to
   `figures/<page>.png` (one file for both languages), and the Chinese page shows it.
3. `english_notebook_links`: in the Chinese site, a link to `01_ppo.ipynb` goes to the English notebook page
   (where the code runs); a link to `01_ppo.zh.md` goes to the Chinese page.
4. `FALLBACK_NOTE`: a page with no Chinese version is shown in English in the Chinese site, with this note.
5. `split_search_index` and `search_root`: each language searches its own pages (the plugin writes one index).

`coverage()` is the table of which English page has its Chinese page (tests/test_zh.py checks it).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

CHAPTERS = Path(__file__).resolve().parents[2] / "chapters"
LANGUAGE = "zh"
CENTRAL_FIGURE_TAG = "central-figure"
FIGURES_DIR = "figures"

PENDING: dict[str, str] = {
    "concordance.md": "generated from minirl's docstrings at build time; English only",
}
"""English pages that have no Chinese page yet, each with the reason (the coverage check allows these)."""

FALLBACK_NOTE = ('<div class="admonition note minirl-fallback"><p class="admonition-title">本页暂无中文版</p>'
                 '<p>下面是英文原文。中文版覆盖阅读地图、术语表和每一章、每个实验的要点，'
                 '见<a href="{home}">中文首页</a>。</p></div>')


def chinese_page(english: str) -> str:
    """The Chinese page's name for an English page: "01_ppo.ipynb" -> "01_ppo.zh.md"."""
    return f"{Path(english).stem}.{LANGUAGE}.md"


def english_pages() -> list[str]:
    """Every English page of the book (chapters/*.ipynb and *.md, plus the generated concordance)."""
    pages = [p.name for p in sorted(CHAPTERS.glob("*.ipynb"))]
    pages += [p.name for p in sorted(CHAPTERS.glob("*.md")) if not p.name.endswith(f".{LANGUAGE}.md")]
    return pages + ["concordance.md"]


def coverage() -> list[tuple[str, str | None, str]]:
    """(English page, its Chinese page or None, status) for every English page; status is "translated",
    "pending: <reason>" (listed in PENDING) or "missing"."""
    rows = []
    for english in english_pages():
        chinese = chinese_page(english)
        if (CHAPTERS / chinese).exists():
            rows.append((english, chinese, "translated"))
        elif english in PENDING:
            rows.append((english, None, f"pending: {PENDING[english]}"))
        else:
            rows.append((english, None, "missing"))
    return rows


# ----------------------------------------------------------------------------------------------
# Build steps (called from minirl/book/mkdocs_hooks.py)
# ----------------------------------------------------------------------------------------------

def current_language(config) -> str:
    """The language mkdocs-static-i18n is building now ("en" or "zh"); "en" without the plugin."""
    plugin = config.plugins.get("i18n")
    return getattr(plugin, "current_language", None) or "en"


def rewrap_notebooks(files, config):
    """Give mkdocs-jupyter its notebooks back after the i18n plugin has rebuilt every file.

    mkdocs-jupyter wraps each .ipynb in a NotebookFile (a documentation page) in its on_files; mkdocs-static-i18n
    runs later, copies every file into a plain File and, since .ipynb is not Markdown, treats notebooks as shared
    assets at the site's root. Wrap them again and, in the Chinese build, put them under `zh/` like its pages.
    """
    from mkdocs.structure.files import Files
    from mkdocs_jupyter.plugin import NotebookFile

    jupyter = config.plugins["mkdocs-jupyter"]
    language = current_language(config)
    wrapped = []
    for file in files:
        if file.src_uri.endswith(".ipynb") and not isinstance(file, NotebookFile) and jupyter.should_include(file):
            file = NotebookFile(file, **config)
            if language == LANGUAGE:
                _move(file, f"{LANGUAGE}/{file.dest_uri}", config.site_dir)
                file.locale = "en"  # an English page in the Chinese site (note_fallback marks it)
        wrapped.append(file)
    return Files(wrapped)


def pair_pages(files, config) -> None:
    """Link every English notebook `X.ipynb` with its page in the other language (module docstring, step 1).

    In the Chinese build a Chinese page `X.zh.md` replaces the notebook (same URL, `zh/X/`); a notebook with no
    Chinese page stays, in English. The language switch then leads from `X/` to `zh/X/` and back.
    """
    language = current_language(config)
    by_uri = {f.src_uri: f for f in files}
    for english in [uri for uri in by_uri if uri.endswith(".ipynb")]:
        notebook = by_uri[english]
        chinese = by_uri.get(chinese_page(english))
        if language == LANGUAGE:
            root = _elsewhere(notebook.url.removeprefix(f"{LANGUAGE}/"))
            if chinese is not None:
                files.remove(notebook)
                chinese.alternates["en"] = root
            else:
                notebook.alternates = {"en": root, LANGUAGE: notebook}
        else:
            notebook.alternates = {"en": notebook, LANGUAGE: _elsewhere(f"{LANGUAGE}/{notebook.url}")}


def _elsewhere(url: str):
    """The page at `url` in the other language's build, as the language switch and the sitemap read it."""
    from types import SimpleNamespace

    return SimpleNamespace(url=url, page=None)


def _move(file, dest_uri: str, site_dir: str) -> None:
    """Set a File's destination, absolute destination and URL (NotebookFile fixes all three when created)."""
    import os

    file.dest_uri = dest_uri
    file.abs_dest_path = os.path.normpath(os.path.join(site_dir, dest_uri))
    file.url = file._get_url(True)


def central_figures(config) -> dict[str, bytes]:
    """{"figures/01_ppo.png": PNG bytes} from the cell tagged `central-figure` in every chapter notebook.

    Raises:
        ValueError: a notebook has a Chinese page but no tagged cell with an image output (tag the plot's cell
            with `# %% tags=["central-figure"]` in its .py and sync, then execute the notebook).
    """
    figures = {}
    for notebook in sorted(Path(config.docs_dir).glob("*.ipynb")):
        if not (notebook.parent / chinese_page(notebook.name)).exists():
            continue
        image = central_image(notebook)
        if image is None:
            raise ValueError(f"{notebook.name} has a Chinese page but no cell tagged '{CENTRAL_FIGURE_TAG}' with a "
                             f"PNG output: add `tags=[\"{CENTRAL_FIGURE_TAG}\"]` to the `# %%` line of its central "
                             "plot in the .py, run `jupytext --sync`, and execute the notebook.")
        figures[f"{FIGURES_DIR}/{notebook.stem}.png"] = image
    return figures


def central_image(notebook: Path) -> bytes | None:
    """The first PNG output of the notebook's cell tagged `central-figure`, or None."""
    for cell in json.loads(notebook.read_text())["cells"]:
        if CENTRAL_FIGURE_TAG in cell.get("metadata", {}).get("tags", []):
            for output in cell.get("outputs", []):
                png = output.get("data", {}).get("image/png")
                if png:
                    return base64.b64decode("".join(png) if isinstance(png, list) else png)
    return None


NOTEBOOK_LINK = re.compile(r"\]\(([\w-]+)\.ipynb(#[^)]*)?\)")
CHINESE_LINK = re.compile(r"\]\(([\w-]+)\.zh\.md(#[^)]*)?\)")


def english_notebook_links(markdown: str, page_url: str) -> str:
    """In a page of the Chinese site, point `[text](01_ppo.ipynb)` at the English notebook page (`../../01_ppo/`),
    and a link to a Chinese page that does not exist yet (`02_gae.zh.md`, pending) at the English page."""
    def pending(match):
        stem, anchor = match.group(1), match.group(2) or ""
        if (CHAPTERS / f"{stem}.{LANGUAGE}.md").exists():
            return match.group(0)
        return f"]({stem}.ipynb{anchor})" if (CHAPTERS / f"{stem}.ipynb").exists() else f"]({stem}.md{anchor})"

    prefix = "../" * page_url.count("/")  # "zh/01_ppo/" -> "../../", "zh/" -> "../"
    markdown = CHINESE_LINK.sub(pending, markdown)
    return NOTEBOOK_LINK.sub(lambda m: f"]({prefix}{m.group(1)}/{m.group(2) or ''})", markdown)


# ----------------------------------------------------------------------------------------------
# Search: one index per language
# ----------------------------------------------------------------------------------------------

CONFIG_BASE = re.compile(r'(<script id="__config" type="application/json">\{.*?"base": ")([^"]*)(")')


def search_root(output: str, page_url: str) -> str:
    """Point a Chinese page's Material config at the Chinese site's root (`zh/`) instead of the site's root.

    Material loads its search index from `<base>/search/search_index.json` and resolves each hit against `base`,
    so a page of the Chinese site then searches `zh/search/search_index.json` (written by `split_search_index`).
    `page_url` is the page's URL in the site: "zh/01_ppo/" -> base "..", "zh/" -> ".".
    """
    depth = page_url.count("/") - 1
    return CONFIG_BASE.sub(lambda m: m.group(1) + ("/".join([".."] * depth) or ".") + m.group(3), output, count=1)


def split_search_index(site_dir: str | Path) -> dict[str, int] | None:
    """Split the search index that mkdocs-static-i18n writes for both languages into one per language.

    `search/search_index.json` keeps the English pages; `zh/search/search_index.json` gets the pages of the
    Chinese site (its Chinese pages and the English pages it shows with a note), with locations relative to `zh/`.
    lunr's "zh" language, which the plugin adds, needs a segmenter of its own in the browser and finds nothing
    without it; the Chinese text was already cut into words by jieba at build time, so both indexes use the
    English pipeline. Returns the number of entries per language, or None if the index holds no Chinese page
    (already split: the hook runs after each language's build).
    """
    index_path = Path(site_dir) / "search" / "search_index.json"
    index = json.loads(index_path.read_text())
    prefix = f"{LANGUAGE}/"
    english = [doc for doc in index["docs"] if not doc["location"].startswith(prefix)]
    chinese = [{**doc, "location": doc["location"].removeprefix(prefix)} for doc in index["docs"]
               if doc["location"].startswith(prefix)]
    if not chinese:
        return None
    index["config"]["lang"] = [lang for lang in index["config"].get("lang", ["en"]) if lang != LANGUAGE] or ["en"]
    index_path.write_text(json.dumps({**index, "docs": english}, ensure_ascii=False))
    chinese_path = Path(site_dir) / LANGUAGE / "search" / "search_index.json"
    chinese_path.parent.mkdir(parents=True, exist_ok=True)
    chinese_path.write_text(json.dumps({**index, "docs": chinese}, ensure_ascii=False))
    return {"en": len(english), LANGUAGE: len(chinese)}
