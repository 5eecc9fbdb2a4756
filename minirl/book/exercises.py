"""Exercise stubs are generated from the solutions, so the two can never drift apart.

A file in `solutions/` is the single source of truth. Inside each exercise function the answer sits
between two marker lines:

    def masked_mean(values, mask):
        \"\"\"Task, shapes, hint.\"\"\"
        # BEGIN SOLUTION
        ...the answer...
        # END SOLUTION

`python -m minirl.book.exercises sync` writes `exercises/<same name>.py` with every marked block
replaced by `raise NotImplementedError(...)`; `check` exits non-zero if `exercises/` is not exactly
what `sync` would write (the test suite runs it, so the book never ships with answers filled in).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

from minirl.book import exercise_files

REPO_ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS_DIR = REPO_ROOT / "solutions"
EXERCISES_DIR = REPO_ROOT / "exercises"

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
SOLUTIONS_HEADER = "# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.\n"
EXERCISES_HEADER = (
    "# EXERCISES FILE: fill in the functions below, then grade them with `make grade`.\n"
    "# (Maintainers: this file is generated from solutions/; edit there, then run\n"
    "#  `python -m minirl.book.exercises sync`.)\n"
)

_DEF = re.compile(r"^\s*def (\w+)\(")


def make_stubs(solution_source: str, filename: str = "<solution>") -> str:
    """Return the exercise file for one solution file: each marked block becomes a `raise`.

    Raises:
        ValueError: on an unbalanced or nested marker, or a file that does not start with the
            solutions header, naming the line.
    """
    if not solution_source.startswith(SOLUTIONS_HEADER):
        raise ValueError(f"{filename}: a solutions file must start with the line {SOLUTIONS_HEADER!r}")
    out: list[str] = [EXERCISES_HEADER]
    current_function = None
    inside = False
    for lineno, line in enumerate(solution_source[len(SOLUTIONS_HEADER) :].splitlines(keepends=True), 2):
        if (match := _DEF.match(line)) and not inside:
            current_function = match.group(1)
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ValueError(f"{filename}:{lineno}: '{BEGIN}' inside another solution block")
            if current_function is None:
                raise ValueError(f"{filename}:{lineno}: '{BEGIN}' outside a function")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.append(
                f'{indent}raise NotImplementedError("{current_function}: not written yet. '
                f'Replace this line with your code.")\n'
            )
        elif stripped == END:
            if not inside:
                raise ValueError(f"{filename}:{lineno}: '{END}' without a matching '{BEGIN}'")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{filename}: '{BEGIN}' is never closed by '{END}'")
    return "".join(out)


def chapter_files() -> list[str]:
    """Names (e.g. 'ch00_tensors.py') of the chapter files in solutions/."""
    return [p.name for p in exercise_files(SOLUTIONS_DIR)]


def sync() -> list[str]:
    """Regenerate every exercises/ file from solutions/. Returns the names written."""
    EXERCISES_DIR.mkdir(exist_ok=True)
    written = []
    for name in chapter_files():
        stubs = make_stubs((SOLUTIONS_DIR / name).read_text(), name)
        target = EXERCISES_DIR / name
        if not target.exists() or target.read_text() != stubs:
            target.write_text(stubs)
            written.append(name)
    return written


def check() -> list[str]:
    """Problems found: exercise files that differ from their generated stubs, or lack a twin."""
    problems = []
    for name in chapter_files():
        expected = make_stubs((SOLUTIONS_DIR / name).read_text(), name)
        target = EXERCISES_DIR / name
        if not target.exists():
            problems.append(f"exercises/{name} is missing")
            continue
        actual = target.read_text()
        if actual != expected:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    actual.splitlines(keepends=True),
                    f"generated from solutions/{name}",
                    f"exercises/{name}",
                    n=1,
                )
            )
            problems.append(f"exercises/{name} is not the stub generated from solutions/{name}:\n{diff}")
    for extra in sorted(set(p.name for p in exercise_files(EXERCISES_DIR)) - set(chapter_files())):
        problems.append(f"exercises/{extra} has no twin in solutions/")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minirl.book.exercises", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["sync", "check"])
    args = parser.parse_args(argv)
    if args.command == "sync":
        written = sync()
        print("wrote " + ", ".join(f"exercises/{n}" for n in written) if written else "exercises/ is up to date")
        return 0
    problems = check()
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(
            "\nIf you are a learner filling in exercises/, this is expected: grade your work with `make grade`.\n"
            "Maintainers: edit solutions/, then run `python -m minirl.book.exercises sync`.",
            file=sys.stderr,
        )
        return 1
    print("exercises/ matches solutions/: every stub is unsolved")
    return 0


def selects(wanted: str, number: str) -> bool:
    """Does `--exercise wanted` select the exercise `number`? "4.1" selects exercise 4.1; a chapter ("7", "07")
    or a lab ("C") selects every exercise of it (7.1, 7.2, ...)."""
    if "." in wanted:
        return number == wanted
    chapter = number.split(".")[0]
    return chapter == (wanted.lstrip("0") or "0" if wanted.isdigit() else wanted.upper())


if __name__ == "__main__":
    sys.exit(main())

