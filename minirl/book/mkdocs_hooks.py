"""mkdocs hooks: serve the math renderer from the site itself, so formulas render with no network.

MathJax 3 (TeX input, SVG output: glyphs are drawn from JavaScript data, so no font file is
fetched) comes from the npm registry: `make install` runs `npm install mathjax@3.2.2` into
build/mathjax/ (never committed). After each build its browser files are copied to
`<site>/assets/mathjax/`, and every page loads them by a path relative to the page.

Notebook pages are rendered by nbconvert's template, which carries its own MathJax 2 loader (from a
CDN, with MathJax-2-only configuration) and a Mermaid loader (also from a CDN); both are removed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from mkdocs.plugins import event_priority

REPO_ROOT = Path(__file__).resolve().parents[2]
MATHJAX_SOURCE = REPO_ROOT / "build" / "mathjax" / "node_modules" / "mathjax" / "es5"
MATHJAX_DIR = "assets/mathjax"
MATHJAX_PARTS = ("tex-svg.js", "input", "output", "ui", "a11y", "sre", "adaptors")

# $...$ and \(...\) inline, $$...$$ and \[...\] displayed. pymdownx.arithmatex (generic mode) writes
# \(...\) and \[...\] for the Markdown pages; notebooks keep the $ delimiters of their cells.
MATHJAX_CONFIG = r"""<script>
window.MathJax = {
  tex: {inlineMath: [["$", "$"], ["\\(", "\\)"]], displayMath: [["$$", "$$"], ["\\[", "\\]"]],
        processEscapes: true},
  options: {ignoreHtmlClass: "highlight|jp-CodeCell"},  // code and its outputs stay as written
  svg: {fontCache: "global"}
};
</script>
"""

NBCONVERT_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL)
MERMAID_LOADER = re.compile(r'<script type="module">\s*document\.addEventListener\("DOMContentLoaded", async \(\) => \{'
                            r'\s*const diagrams = document\.querySelectorAll\("\.jp-Mermaid.*?</script>', re.DOTALL)


def on_config(config):
    """Search in both languages with lunr's English pipeline only.

    Chinese text is cut into words at build time (Material's search runs jieba and joins the words with zero-width
    spaces, a separator in mkdocs.yml). The i18n plugin also adds lunr's "zh" language, whose browser side needs a
    jieba of its own and finds nothing without it; on_post_build takes it out again (zh.split_search_index).
    """
    try:
        import logging

        import jieba
    except ImportError:
        return config
    jieba.setLogLevel(logging.WARNING)  # no start-up lines on every build
    return config


@event_priority(-110)  # after mkdocs-static-i18n has chosen each language's files (its priority is -100)
def on_files(files, config):
    """Add the generated pages: the concordance (minirl/book/concordance.py) and the chapters' central figures;
    pair the Chinese pages with their English notebooks (minirl/book/zh.py)."""
    from mkdocs.structure.files import File

    from minirl.book import concordance, zh

    language = zh.current_language(config)
    page = File.generated(config, "concordance.md", content=concordance.build())
    if language != "en":
        page.dest_uri = f"{language}/{page.dest_uri}"
    files.append(page)
    for src_uri, image in zh.central_figures(config).items():
        files.append(File.generated(config, src_uri, content=image))  # one file, shown by both languages
    if "i18n" in config.plugins:
        files = zh.rewrap_notebooks(files, config)
        zh.pair_pages(files, config)
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    """In the Chinese site, a link to `X.ipynb` goes to the English notebook page (minirl/book/zh.py)."""
    from minirl.book import zh

    if zh.current_language(config) == zh.LANGUAGE:
        return zh.english_notebook_links(markdown, page.url)
    return markdown


NO_ALT = 'alt="No description has been provided for this image"'
HEADING = re.compile(r"<h[1-3][^>]*>(.*?)</h[1-3]>", re.DOTALL)


def describe_plots(output: str, title: str) -> str:
    """Give every notebook plot an alt text naming its chapter and section (nbconvert leaves a placeholder).

    A screen reader then says e.g. "Plot in Chapter 4 · DeepSeekMath / GRPO, section 5. The experiment:
    GRPO on the tiny task" instead of "No description has been provided for this image".
    """
    pieces, last = [], 0
    section = ""
    for match in re.finditer(re.escape(NO_ALT) + "|" + HEADING.pattern, output, re.DOTALL):
        if match.group(0).startswith("<h"):
            section = re.sub(r"<[^>]+>|¶", "", match.group(1)).strip()
            continue
        where = f", section {section}" if section and section != title else ""
        alt = f"Plot in {title}{where}".replace('"', "'")
        pieces += [output[last:match.start()], f'alt="{alt}"']
        last = match.end()
    return "".join(pieces) + output[last:]


SOURCE_LINK = re.compile(r'href="(?!https?:|/|#)([\w.-]+)\.(ipynb|md)(#[^"]*)?"')


def link_pages(output: str) -> str:
    """Point a notebook page's links to other chapters at their pages.

    mkdocs rewrites `[Chapter 1](01_ppo.ipynb)` in Markdown pages, but a notebook's cells are rendered
    by nbconvert, so their links would still name the source file: `01_ppo.ipynb` -> `../01_ppo/`,
    `index.md` -> `../`.
    """
    def page_url(match):
        name, anchor = match.group(1), match.group(3) or ""
        return f'href="../{"" if name == "index" else name + "/"}{anchor}"'

    return SOURCE_LINK.sub(page_url, output)


def on_post_page(output: str, page, config) -> str:
    """Swap nbconvert's CDN loaders for the site's own MathJax, and describe the plots, on every page."""
    output = MERMAID_LOADER.sub("", NBCONVERT_MATHJAX.sub("", output))
    output = describe_plots(output, page.title or "the book")
    if page.file.src_uri.endswith(".ipynb"):
        output = link_pages(output)
    output = drop_alternate_links(note_fallback(output, page, config))
    output = search_root(output, page, config)
    prefix = "../" * page.url.count("/")  # "" -> 0, "00_tensors/" -> 1
    script = f'<script defer src="{prefix}{MATHJAX_DIR}/tex-svg.js"></script>\n'
    return output.replace("</head>", MATHJAX_CONFIG + script + "</head>", 1)


ARTICLE = '<article class="md-content__inner md-typeset">'
ALTERNATE_LINK = re.compile(r'<link rel="alternate" href="[^"]*" hreflang="[^"]*">\s*')


def drop_alternate_links(output: str) -> str:
    """Remove the <link rel="alternate" hreflang> tags from the head (the header's language menu stays).

    Material's script fetches `sitemap.xml` next to each such link, assuming it names a language's root; the i18n
    plugin points them at the same page in the other language, so every page would log two 404s.
    """
    return ALTERNATE_LINK.sub("", output)


def search_root(output: str, page, config) -> str:
    """In the Chinese site, search the Chinese index (minirl/book/zh.py::search_root)."""
    from minirl.book import zh

    return zh.search_root(output, page.url) if zh.current_language(config) == zh.LANGUAGE else output


def note_fallback(output: str, page, config) -> str:
    """In the Chinese site, say at the top of an English page that it has no Chinese version yet."""
    from minirl.book import zh

    if zh.current_language(config) != zh.LANGUAGE or getattr(page.file, "locale", "en") == zh.LANGUAGE:
        return output
    home = "../" * (page.url.count("/") - 1)  # from zh/<page>/ to zh/
    return output.replace(ARTICLE, ARTICLE + zh.FALLBACK_NOTE.format(home=home or "./"), 1)


@event_priority(-110)  # after the i18n plugin has written the search index of both languages
def on_post_build(config) -> None:
    """Copy MathJax's browser files into the built site; one search index per language (minirl/book/zh.py)."""
    from minirl.book import zh

    if (Path(config["site_dir"]) / "search" / "search_index.json").exists() and "i18n" in config.plugins:
        zh.split_search_index(config["site_dir"])
    if not (MATHJAX_SOURCE / "tex-svg.js").exists():
        raise FileNotFoundError(
            f"MathJax is not installed in {MATHJAX_SOURCE.parent}. Run `make install` (it runs "
            "`npm install --prefix build/mathjax mathjax@3.2.2`; Node.js and npm are needed to build the book).")
    target = Path(config["site_dir"]) / MATHJAX_DIR
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for part in MATHJAX_PARTS:
        source = MATHJAX_SOURCE / part
        if source.is_dir():
            shutil.copytree(source, target / part)
        else:
            shutil.copy2(source, target / part)
