"""Tooling for the book itself (site build, exercises), not for RL. The RL code is in minirl/*.py.

The book has two kinds of pages, found by name: chapters (`chapters/NN_name.py`, one per paper) and labs
(`chapters/lab_X_name.py`, organised around doing). Each has its exercise file in `solutions/` and
`exercises/` (named `chNN_name` and `lab_X_name`) and its graded tests in `tests/exercises/test_<file>`.
"""

from __future__ import annotations

from pathlib import Path

PAGE_PATTERNS = ("[0-9][0-9]_*", "lab_*")
"""Stems of the book's notebook pages: chapters, then labs (the order of the site's navigation)."""
EXERCISE_PATTERNS = ("ch[0-9][0-9]_*.py", "lab_*.py")
"""Names of the exercise files in solutions/ and exercises/."""


def pages(folder: Path, suffix: str) -> list[Path]:
    """The chapter and lab files in `folder` with this suffix (".py", ".ipynb"): chapters first, then labs."""
    return [path for pattern in PAGE_PATTERNS for path in sorted(folder.glob(pattern + suffix))]


def exercise_files(folder: Path) -> list[Path]:
    """The exercise files (chapters', then labs') in `folder`."""
    return [path for pattern in EXERCISE_PATTERNS for path in sorted(folder.glob(pattern))]
