"""The book's time budget on this machine: every notebook in fast mode, every chapter's full run, the suite.

    .venv/bin/python bench/book_times.py            # notebooks in fast mode (seconds each)
    .venv/bin/python bench/book_times.py --full     # also each chapter's full run (minutes each)
    .venv/bin/python bench/book_times.py --suite    # also the book's test suite as make test runs it

Budgets (README): fast mode within 30 s per notebook, a full run within 5 minutes per chapter,
`make test` within 15 minutes. Notebooks are executed into a temporary copy, so the committed
outputs are untouched. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from minirl.book import pages

REPO = Path(__file__).resolve().parents[1]
BUDGET = {"fast": 30, "full": 300, "suite": 900}


def execute(notebook: Path, fast: bool) -> float:
    """Seconds to execute `notebook` (in fast mode or fully) into a temporary file."""
    env = {**os.environ, "MINIRL_FAST": "1" if fast else "0"}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                        "--ExecutePreprocessor.timeout=1800", "--output-dir", tmp, notebook.name],
                       cwd=notebook.parent, env=env, check=True, capture_output=True)
        return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="also time each chapter's full run")
    parser.add_argument("--suite", action="store_true", help="also time the test suite (pytest -n 2, no parity)")
    args = parser.parse_args()
    rows = []
    for notebook in pages(REPO / "chapters", ".ipynb"):
        rows.append((notebook.stem, "fast mode", execute(notebook, fast=True), BUDGET["fast"]))
        if args.full:
            rows.append((notebook.stem, "full run", execute(notebook, fast=False), BUDGET["full"]))
    if args.suite:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "--target", "solutions",
                        "--ignore=tests/parity"], cwd=REPO, check=False, capture_output=True)
        rows.append(("tests", "suite (pytest -n 2)", time.perf_counter() - start, BUDGET["suite"]))
    print("| what | how | seconds | budget | within |\n|---|---|---:|---:|---|")
    for name, how, seconds, budget in rows:
        print(f"| {name} | {how} | {seconds:.1f} | {budget} | {'yes' if seconds <= budget else 'NO'} |")


if __name__ == "__main__":
    main()
