"""No number in prose that no cell prints (issue 27): every decimal a chapter or lab states, in English and in
Chinese, is printed by a cell of the committed notebook (or allowed, with its source, in
tests/data/prose_numbers_allowed.txt). A re-run that moves a number fails here until the text says what it printed."""

import re
from pathlib import Path

import pytest

from minirl.book import pages
from minirl.book.prose import is_printed, notebook_markdown, notebook_outputs, prose_numbers, read_allowed, unprinted

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
ALLOWED = ROOT / "tests" / "data" / "prose_numbers_allowed.txt"
EXERCISE_IDS = {match for path in (ROOT / "tests" / "exercises").glob("test_*.py")
                for match in re.findall(r'mark\.exercise\("([\d.]+)"', path.read_text())}
PAGES = [(notebook, text) for notebook in pages(CHAPTERS, ".ipynb")
         for text in (notebook, notebook.with_suffix(".zh.md")) if text.exists()]


@pytest.mark.parametrize("notebook, text", PAGES, ids=lambda p: p.name)
def test_every_number_in_the_prose_is_printed_by_a_cell(notebook, text):
    markdown = notebook_markdown(notebook) if text.suffix == ".ipynb" else text.read_text()
    allowed = read_allowed(ALLOWED).get(notebook.stem, set())
    missing = unprinted(markdown, notebook_outputs(notebook), EXERCISE_IDS, allowed)
    assert not missing, (
        f"{text.name} states {missing}, which no output of {notebook.name} prints. Quote what the cells print "
        f"(re-executed: `jupyter nbconvert --to notebook --execute --inplace chapters/{notebook.name}`), print the "
        f"number in a cell, or, for a paper's or verl's figure, add `{notebook.stem} | number | source` to "
        f"{ALLOWED.relative_to(ROOT)}.")


def test_every_allowed_number_is_still_in_its_page():
    """An allowance whose number left the page is dead: remove it."""
    for stem, numbers in read_allowed(ALLOWED).items():
        notebook = CHAPTERS / f"{stem}.ipynb"
        texts = [notebook_markdown(notebook)] + [p.read_text() for p in [notebook.with_suffix(".zh.md")] if p.exists()]
        stated = {number for text in texts for number in prose_numbers(text, EXERCISE_IDS)}
        assert numbers <= stated, f"{stem}: allowed but no longer in the text: {sorted(numbers - stated)}"


def test_the_check_finds_what_it_should():
    markdown = ("## 2.1 A heading\nExercises 4.1 and 4.2 end at 0.43 (seeds 0.41-0.45), $\\epsilon = 0.2$, `lr=0.001`, "
                "a drop of 2.6% in verl 0.9 and torch 2.13.0.\n| 4.3 | `fn` | 0.5 |")
    assert prose_numbers(markdown, {"4.3"}) == ["0.43", "0.41", "0.45", "2.6%", "0.5"]
    assert prose_numbers("| 4.3 | 0.7 |", set()) == ["4.3", "0.7"]  # an id only where it is one
    assert is_printed("0.43", ["0.4312"]) and not is_printed("0.43", ["0.4381"])
    assert is_printed("2.6%", ["0.026"]) and is_printed("0.4", ["0.43"])
    assert unprinted(markdown, "acc 0.430, 0.41 and 0.026", {"4.3"}, allowed={"0.5"}) == ["0.45"]
