"""Grades exercises/lab_c_metrics.py (or solutions/ with --target solutions) on real runs with hidden causes.

The runs are trained once by minirl/book/broken_runs.py::graded_runs (eight 12-step runs, seed 3, under a minute on
2 cores) and cached; their order here is shuffled, so a run's position says nothing about its cause, and
broken_runs.hide_config leaves every run the same metric keys and no config metric (tests/test_lab_c.py checks it),
so only the runs' behaviour names the cause.
"""

import random

import pytest
from grading import call, fail, load_chapter, raised

from minirl.book.broken_runs import GRADED, graded_runs


@pytest.fixture(scope="module")
def lab(request):
    return load_chapter(request.config, "lab_c_metrics")


@pytest.fixture(scope="module")
def hidden():
    runs = graded_runs()
    random.Random(0).shuffle(runs)
    return runs


def check_all(lab, runs, what):
    for number, (cause, records) in enumerate(runs, start=1):
        got = call(lab.diagnose, records)
        if got not in GRADED:
            fail(f"diagnose returned {got!r} for hidden run #{number}; it must return one of {GRADED}.")
        if got != cause:
            fail(f"hidden run #{number} ({what}): yours {got!r}, its cause is {cause!r}. Compare its metrics with the "
                 f"gallery's {cause!r} run (Lab C, section 3) and read the whole run, not only its last record.")


@pytest.mark.exercise("C.1", "diagnose")
def test_c1_names_the_cause_of_every_hidden_run(lab, hidden):
    check_all(lab, hidden, "12 steps")


@pytest.mark.exercise("C.1", "diagnose")
def test_c1_the_first_eight_steps_are_enough(lab, hidden):
    # the validation record before step 1, then steps 1-8: a rule on the final value or a fixed step fails here
    check_all(lab, [(cause, records[:9]) for cause, records in hidden], "its first 8 steps")


@pytest.mark.exercise("C.1", "diagnose")
def test_c1_a_run_without_training_steps_is_an_error(lab, hidden):
    _, records = hidden[0]
    for case, name in (([], "an empty list"), (records[:1], "only the validation record before step 1")):
        error = raised(lab.diagnose, case)
        if not isinstance(error, ValueError):
            fail(f"diagnose({name}) should raise ValueError (there is no training step to read), "
                 f"got {'no error' if error is None else type(error).__name__}.")
        if len(str(error)) < 20:
            fail(f"diagnose({name}) raised ValueError({str(error)!r}): say what is missing and what to pass instead.")
