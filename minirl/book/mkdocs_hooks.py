"""mkdocs hooks: serve the math renderer from the site itself, so formulas render with no network.

MathJax 2.7 comes from the PyPI package `jupyter_server_mathjax` (installed with the `dev` extra,
never committed). After each build its files are copied to `<site>/assets/mathjax/`; every page
gets a `<script>` pointing there by a path relative to the page. Notebook pages already load the
same file through mkdocs-jupyter's `custom_mathjax_url` (see mkdocs.yml).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import jupyter_server_mathjax

MATHJAX_DIR = "assets/mathjax"
MATHJAX_QUERY = "MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"

# The package ships STIX web fonts only (not MathJax's default TeX fonts): tell MathJax to use them
# and not to fall back to image fonts it does not have.
MATHJAX_CONFIG = """<script type="text/x-mathjax-config">
MathJax.Hub.Config({
  "HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null},
  tex2jax: {inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]], processEscapes: true},
  messageStyle: "none"
});
</script>
"""


def _mathjax_source() -> Path:
    return Path(jupyter_server_mathjax.__file__).parent / "static"


def on_post_page(output: str, page, config) -> str:
    """Add the MathJax config (and, for Markdown pages, the MathJax script) to each page's <head>."""
    depth = page.url.count("/")  # "" -> 0, "00_tensors/" -> 1
    prefix = "../" * depth
    head = MATHJAX_CONFIG
    if MATHJAX_DIR + "/MathJax.js" not in output:
        head += f'<script src="{prefix}{MATHJAX_DIR}/{MATHJAX_QUERY}"></script>\n'
    return output.replace("</head>", head + "</head>", 1)


def on_post_build(config) -> None:
    """Copy MathJax into the built site."""
    target = Path(config["site_dir"]) / MATHJAX_DIR
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(_mathjax_source(), target)
