"""No number in prose that no cell prints: the decimal numbers a page states, checked against its notebook's outputs.

A chapter's prose may only quote what its own cells print (rounded as the prose rounds it), so a reader who runs
the notebook sees every figure the text states, and a re-run that changes a number makes the check fail until the
text is fixed. Numbers that are not results (headings, exercise ids, formulas, code, a paper's or verl's figures)
are skipped or allowed with their source in `tests/data/prose_numbers_allowed.txt`.

    unprinted(page_markdown, outputs_text, exercise_ids)   the prose numbers no output prints
"""

from __future__ import annotations

import json
import re
from pathlib import Path

NUMBER = re.compile(r"(?<![\w.])(\d+\.\d+)(%?)(?![\w]|\.\d)")
"""A decimal number (with an optional %), not part of a word, a version (2.13.0) or a longer number."""
_STRIP = [
    re.compile(r"\$\$.*?\$\$", re.S),            # display math
    re.compile(r"(?<!\\)\$[^$\n]+\$"),           # inline math
    re.compile(r"```.*?```", re.S),              # code blocks
    re.compile(r"`[^`\n]+`"),                    # code spans: keys, values, commands
    re.compile(r"\]\([^)\s]*\)"),                # link targets
    re.compile(r"<[^>\n]+>"),                    # HTML tags
    re.compile(r"^#+\s*[\d.]+", re.M),           # heading numbers ("## 2.1 The mask")
    re.compile(r"(?:[Ee]xercises?|练习|EX=|[Hh]int for|提示)\s*\d+\.\d+(?:\s*(?:,|and|or|和|与|、|/)\s*\d+\.\d+)*"),
    re.compile(r"\b(?:verl|torch|TRL|transformers|Python|Qwen|v)\s?\d+(?:\.\d+)+", re.I),  # versions, model names
]


def notebook_outputs(notebook: Path) -> str:
    """Every text a notebook's cells print or display (stdout, text/plain, text/markdown, text/html), joined."""
    texts = []
    for cell in json.loads(Path(notebook).read_text())["cells"]:
        for output in cell.get("outputs", []):
            if "text" in output:
                texts.append("".join(output["text"]))
            for kind, value in output.get("data", {}).items():
                if kind.startswith("text/"):
                    texts.append("".join(value) if isinstance(value, list) else value)
    return "\n".join(texts)


def notebook_markdown(notebook: Path) -> str:
    """The prose of a notebook: its markdown cells, joined."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


def prose_numbers(markdown: str, exercise_ids: set[str] = frozenset()) -> list[str]:
    """The decimal numbers the prose states, in order ("0.43", "2.6%"), without math, code, headings, versions and
    exercise ids (named as such: "Exercise 4.1", "EX=4.1", "Hint for 4.1", or the first cell of a table row when it
    is one of `exercise_ids`)."""
    for pattern in _STRIP:
        markdown = pattern.sub(" ", markdown)
    if exercise_ids:
        ids = "|".join(re.escape(i) for i in sorted(exercise_ids))
        markdown = re.sub(rf"^\|\s*(?:{ids})\s*\|", "| |", markdown, flags=re.M)
    return [number + percent for number, percent in NUMBER.findall(markdown)]


def printed_values(outputs: str) -> list[str]:
    """Every decimal number in the outputs, as printed (with its sign dropped)."""
    return re.findall(r"(?<![\w.])\d+\.\d+(?:e[-+]?\d+)?", outputs)


def is_printed(number: str, printed: list[str]) -> bool:
    """True if some printed value rounds to `number` at its number of decimals ("2.6%" also matches 0.026)."""
    percent = number.endswith("%")
    digits = number.rstrip("%")
    decimals = len(digits.split(".")[1])
    targets = {digits}
    for value in printed:
        x = float(value)
        if f"{x:.{decimals}f}" in targets or (percent and f"{100 * x:.{decimals}f}" in targets):
            return True
    return False


def unprinted(markdown: str, outputs: str, exercise_ids: set[str] = frozenset(),
              allowed: set[str] = frozenset()) -> list[str]:
    """The numbers of `markdown` that no output prints and that are not allowed; sorted, each once."""
    printed = printed_values(outputs)
    return sorted({number for number in prose_numbers(markdown, exercise_ids)
                   if number not in allowed and not is_printed(number, printed)})


def read_allowed(path: Path) -> dict[str, set[str]]:
    """`page | number | source` lines -> {page stem: numbers}; every line must name its source."""
    allowed: dict[str, set[str]] = {}
    for line_no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = [part.strip() for part in line.split("|")]
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{path}:{line_no}: write `page | number | source`, the source saying where the number "
                             f"comes from (a paper, verl's default, a constant): {line!r}")
        allowed.setdefault(parts[0], set()).add(parts[1])
    return allowed
