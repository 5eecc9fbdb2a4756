"""Spreading the suite over `make test`'s two workers (pytest-xdist, `--dist loadgroup`).

A test that uses a module- or session-scoped fixture of its own file (a built site, a trained model, graded runs)
joins its file's group, so the fixture is built once, on one worker (the expensive ones are session-scoped: a
worker may run other files between two tests of the group, and a module-scoped fixture would be built again);
every other test goes to whichever worker is free. With `--dist loadfile` a whole file ran on one worker, and the
files of long tests (every notebook, every estimator's 60-step run) kept one worker busy while the other idled. The
files of SERIAL_FILES stay on one worker whole.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SHARED_SCOPES = ("module", "package", "session")
# Files whose tests should not run at the same time on two workers: each of their tests launches two or more
# processes (accelerate's ranks, Ray's workers), which share the two cores with the other worker's test anyway;
# their launches take a free port each. Both files share one group (below), so a Ray run never overlaps a
# two-process run on the other worker (four busy processes on two cores).
SERIAL_FILES = ("test_distributed", "test_ray_workers")
# Files whose groups share one worker: test_book and test_browser both build the site with mkdocs in the
# repository, whose notebook cache (.cache/mkdocs-jupyter) two builds at once evict from under each other (a build
# then fails on a missing file); the several-process files, as above.
SHARED_GROUPS = {"test_book": "mkdocs_build", "test_browser": "mkdocs_build",
                 "test_distributed": "several_processes", "test_ray_workers": "several_processes"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        module = getattr(item, "module", None)
        if info is None or module is None:
            continue
        shared = [name for name, definitions in info.name2fixturedefs.items()
                  if definitions[-1].scope in SHARED_SCOPES
                  and getattr(definitions[-1].func, "__module__", None) == module.__name__]
        if shared or item.path.stem in SERIAL_FILES:
            item.add_marker(pytest.mark.xdist_group(SHARED_GROUPS.get(item.path.stem, item.path.stem)))


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """`mkdocs build --strict` of the book into a temporary directory, once per worker: test_book reads its files and
    test_browser serves it (both files' tests share one worker, the mkdocs_build group, so the site is built once)."""
    site_dir = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-3000:]}"
    return site_dir
