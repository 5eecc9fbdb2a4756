"""pytest options of the book (loaded with `-p minirl.book.pytest_plugin`, see pyproject.toml)."""

import os


def pytest_addoption(parser):
    parser.addoption(
        "--target",
        default=os.environ.get("MINIRL_TARGET", "exercises"),
        help=(
            "which implementations the graded exercise tests check: 'exercises' (yours, the default), "
            "'solutions' (the answers; what `make test` uses), or a path to a folder of chapter files."
        ),
    )
    parser.addoption(
        "--exercise",
        default=None,
        help="grade one exercise, all of its checks, by its number (e.g. --exercise 4.1; `make grade EX=4.1`), or "
        "every exercise of a chapter or lab (--exercise 7, --exercise C; `make grade EX=7`).",
    )
