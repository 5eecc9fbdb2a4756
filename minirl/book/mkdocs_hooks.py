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


def on_files(files, config):
    """Add the concordance page, generated from minirl's docstrings and config (minirl/book/concordance.py)."""
    from mkdocs.structure.files import File

    from minirl.book import concordance

    files.append(File.generated(config, "concordance.md", content=concordance.build()))
    return files


def on_post_page(output: str, page, config) -> str:
    """Swap nbconvert's CDN loaders for the site's own MathJax, on every page."""
    output = MERMAID_LOADER.sub("", NBCONVERT_MATHJAX.sub("", output))
    prefix = "../" * page.url.count("/")  # "" -> 0, "00_tensors/" -> 1
    script = f'<script defer src="{prefix}{MATHJAX_DIR}/tex-svg.js"></script>\n'
    return output.replace("</head>", MATHJAX_CONFIG + script + "</head>", 1)


def on_post_build(config) -> None:
    """Copy MathJax's browser files into the built site."""
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
