"""Graded exercises: record each exercise's result and print the progress table at the end."""

from __future__ import annotations

from collections import defaultdict

import pytest
from grading import NotStarted, target_dir

from minirl.book.exercises import selects

# (chapter, number, name) -> list of outcomes: "passed", "failed" or "todo"
_RESULTS: dict[tuple[str, str, str], list[str]] = defaultdict(list)
# (chapter, number, name) -> the first failure message, shown under the table
_WHY: dict[tuple[str, str, str], str] = {}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "exercise(number, name): the graded exercise a test belongs to, e.g. exercise('0.1', 'masked_mean')"
    )


def pytest_collection_modifyitems(config, items):
    """Record each check's exercise number; --exercise N keeps exactly the checks marked exercise("N", ...) (an
    explicit identity, not a name match); --exercise 7 keeps every exercise of Chapter 7."""
    for item in items:  # the exercise number in the junit report too (the harness tests group checks by it)
        for marker in item.iter_markers("exercise"):
            item.user_properties.append(("exercise", marker.args[0]))
    wanted = config.getoption("--exercise")
    if wanted is None:
        return
    numbers = sorted({m.args[0] for item in items for m in item.iter_markers("exercise")})
    if not any(selects(wanted, number) for number in numbers):
        raise pytest.UsageError(f"no exercise {wanted!r}; the exercises are {', '.join(numbers)} (make grade EX=4.1 "
                                "grades one, make grade EX=4 all of Chapter 4).")
    keep = [item for item in items if any(selects(wanted, m.args[0]) for m in item.iter_markers("exercise"))]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


def grade_command(number: str) -> str:
    """The command that grades one exercise, all of its checks (what chapters and the table print)."""
    return f"make grade EX={number}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    marker = item.get_closest_marker("exercise")
    if marker is None or report.when != "call" and not (report.when == "setup" and report.failed):
        return report
    chapter = item.path.stem.removeprefix("test_")
    if report.passed:
        outcome = "passed"
    elif call.excinfo is not None and call.excinfo.errisinstance(NotStarted):
        outcome = "todo"
        report.longrepr = f"todo: {call.excinfo.value}"  # one line, not a traceback
    else:
        outcome = "failed"
        message = str(call.excinfo.value) if call.excinfo is not None else str(report.longrepr)
        _WHY.setdefault((chapter, *marker.args), message.strip().splitlines()[0] if message.strip() else item.name)
    _RESULTS[(chapter, *marker.args)].append(outcome)
    return report


def pytest_terminal_summary(terminalreporter, config):
    if not _RESULTS:
        return
    write = terminalreporter.write_line
    graded = target_dir(config)
    write("")
    terminalreporter.section(f"exercise progress (grading {graded.name}/)", sep="=")
    rows = [("chapter", "exercise", "status", "checks", "rerun one")]
    for (chapter, number, name), outcomes in sorted(_RESULTS.items()):
        if all(o == "passed" for o in outcomes):
            status = "passed"
        elif all(o == "todo" for o in outcomes):
            status = "todo"
        else:
            status = "FAILED"
        passed = sum(o == "passed" for o in outcomes)
        rerun = grade_command(number)
        rows.append((chapter, f"{number} {name}", status, f"{passed}/{len(outcomes)}", rerun))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[4])
    if _WHY:
        write("\nwhy the failed ones failed (first failing check):")
        for (_chapter, number, name), message in sorted(_WHY.items()):
            write(f"  {number} {name}: {message}")
    done = sum(1 for r in rows[1:] if r[2] == "passed")
    write(f"\n{done} of {len(rows) - 1} exercises passed.")
