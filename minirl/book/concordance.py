"""The verl <-> minirl concordance page, generated from the library itself so it cannot drift.

Three tables, each row linking to the chapters that teach the name:

    verl functions   every `verl/...::name` a minirl docstring says it mirrors -> the minirl twin
    config keys      every key of minirl/config.py, with its docstring (verl's key names)
    metric names     every verl metric name (minirl/verl_metric_names.txt) a chapter explains

A chapter "teaches" a name when its text source (chapters/NN_*.py, or index.md) mentions it. The
mkdocs hook (minirl/book/mkdocs_hooks.py) adds the page to the site at build time:

    python -m minirl.book.concordance        # print the page's Markdown
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from minirl.book import pages
from minirl.cli_help import dataclass_keys

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "minirl"
CHAPTERS = REPO / "chapters"
CITATION = re.compile(r"`(verl/[\w/.]+\.py::[\w.]+)`")


@dataclass
class Chapter:
    title: str
    link: str
    text: str


def chapters() -> list[Chapter]:
    """The chapters, in order, with their page link (relative to the concordance page) and text."""
    found = []
    for source in pages(CHAPTERS, ".py"):
        text = source.read_text()
        title = re.search(r"^# # (.+)$", text, re.M).group(1)
        found.append(Chapter(title.split(":")[0].strip(), f"{source.stem}.ipynb", text))
    return found


def taught_in(name: str, book: list[Chapter]) -> str:
    """Links to the chapters that mention `name` (as code), or a dash."""
    links = [f"[{c.title.split('·')[0].strip()}]({c.link})" for c in book if name in c.text]
    return ", ".join(links) or "—"


def verl_twins() -> list[tuple[str, str]]:
    """(verl citation, minirl twin) for every `verl/...py::name` a minirl docstring cites.

    A function's or class's docstring pairs the citation with it; a module docstring pairs it with the
    module's function of the same name, or else with the module.
    """
    pairs = set()
    for path in sorted(LIBRARY.glob("*.py")):
        tree = ast.parse(path.read_text())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
        for citation in CITATION.findall(ast.get_docstring(tree) or ""):
            name = citation.split("::")[-1].split(".")[0]
            pairs.add((citation, f"minirl/{path.name}::{name}" if name in defined else f"minirl/{path.name}"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_"):
                for citation in CITATION.findall(ast.get_docstring(node) or ""):
                    pairs.add((citation, f"minirl/{path.name}::{node.name}"))
    return sorted(pairs)


def config_keys() -> list[tuple[str, str]]:
    """(dotted key, first sentence of its docstring) for every key of minirl's Config."""
    return [(key, doc) for key, _, doc in dataclass_keys(LIBRARY / "config.py", "Config")]


def metric_names() -> list[str]:
    lines = (LIBRARY / "verl_metric_names.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def build() -> str:
    """The concordance page, as Markdown."""
    book = chapters()
    out = ["# verl ↔ minirl concordance", "",
           "Look up a verl function, config key or metric name: its minirl twin and the chapter that explains",
           "it. This page is generated from minirl's docstrings and config each time the site is built",
           "(`minirl/book/concordance.py`), so it always matches the code. Names are verl 0.9.1's; where",
           "minirl departs from verl on purpose, `minirl/README.md` says how.", "",
           "## verl functions", "", "| verl 0.9.1 | minirl | taught in |", "|---|---|---|"]
    for citation, twin in verl_twins():
        function = citation.split("::")[-1].split(".")[-1]
        out.append(f"| `{citation}` | `{twin}` | {taught_in(function, book)} |")
    out += ["", "## Config keys", "",
            "Every key minirl implements, with verl's name (verl keys minirl accepts without effect are listed",
            "when a run starts).", "", "| key | what it does | taught in |", "|---|---|---|"]
    for key, sentence in config_keys():
        out.append(f"| `{key}` | {sentence.replace('|', '/')} | {taught_in(key, book)} |")
    out += ["", "## Metric names", "",
            "The metrics verl 0.9.1's trainer logs under these names; minirl logs the same names (and its own",
            "under `minirl/`). `*` stands for a data source, variable or option, `[0-9]*` for a count.", "",
            "| metric | taught in |", "|---|---|"]
    for name in metric_names():
        if "*" in name or "[" in name:
            out.append(f"| `{name}` | — |")
        else:
            out.append(f"| `{name}` | {taught_in(name, book)} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(build(), end="")
