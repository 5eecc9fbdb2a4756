"""Grades exercises/ch12_v1_trainer.py (or solutions/ with --target solutions)."""

import pytest
from grading import call, fail, load_chapter, raised

from minirl.v1.replay_buffer import dapo_evictions as minirl_dapo_evictions
from minirl.v1.replay_buffer import stale_evictions as minirl_stale_evictions


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch12_v1_trainer")


def check_dapo(ch, values_by_uid, mode, why=""):
    want = minirl_dapo_evictions(values_by_uid, mode)
    got = call(ch.dapo_evictions, {uid: list(v) for uid, v in values_by_uid.items()}, mode)
    if not (isinstance(got, tuple) and len(got) == 2):
        fail(f"dapo_evictions must return a tuple (evicted uids, prompts to dispatch); yours returned {got!r}.")
    evicted, refill = got
    if list(evicted) != want[0]:
        fail(f"dapo_evictions({values_by_uid}, {mode!r}) evicted {list(evicted)}, want {want[0]}.{why}")
    if refill != want[1]:
        fail(f"dapo_evictions({values_by_uid}, {mode!r}) dispatches {refill} prompts, want {want[1]}: sync refills "
             "two per evicted group, the async modes one.")


@pytest.mark.exercise("12.1", "dapo_evictions")
def test_dapo_toy(ch):
    groups = {"0": [1.0, 1.0, 1.0, 1.0], "1": [0.0, 1.0, 0.0, 0.0], "2": [0.0, 0.0, 0.0, 0.0], "3": [1.0, 0.0]}
    for mode in ("sync", "colocate_async", "separate_async"):
        check_dapo(ch, groups, mode, " A group is evicted when every answer scored the same (all right or all wrong).")


@pytest.mark.exercise("12.1", "dapo_evictions")
def test_dapo_groups_of_one_and_exact_spread(ch):
    check_dapo(ch, {"a": [1.0], "b": [0.0], "c": [1.0, 1.0]}, "sync",
               " A group of one answer has no spread to measure: it is kept (len > 1 is part of the test).")
    check_dapo(ch, {"a": [0.1 + 0.2, 0.3, 0.3], "b": [0.5, 0.5, 0.5]}, "colocate_async",
               " No spread means np.std == 0 exactly: 0.1 + 0.2 and 0.3 differ in float64.")
    check_dapo(ch, {}, "sync", " An empty buffer evicts nothing.")


@pytest.mark.exercise("12.1", "dapo_evictions")
def test_dapo_refuses_an_unknown_mode(ch):
    error = raised(ch.dapo_evictions, {"a": [1.0, 1.0]}, "async")
    if not isinstance(error, ValueError):
        fail(f"dapo_evictions(..., mode='async') must raise ValueError naming the three modes (got {error!r}).")
    if not all(mode in str(error) for mode in ("sync", "colocate_async", "separate_async")):
        fail(f"the ValueError should name sync, colocate_async and separate_async; yours says {str(error)!r}.")


def check_stale(ch, groups, global_steps, threshold, strategy, why=""):
    want = minirl_stale_evictions(groups, global_steps, threshold, strategy)
    got = call(ch.stale_evictions, list(groups), global_steps, threshold, strategy)
    if not (isinstance(got, tuple) and len(got) == 2):
        fail(f"stale_evictions must return a tuple (evicted uids, wait); yours returned {got!r}.")
    if (list(got[0]), bool(got[1])) != want:
        fail(f"stale_evictions(groups={groups}, global_steps={global_steps}, threshold={threshold}, "
             f"strategy={strategy!r}) returned ({list(got[0])}, {got[1]}), want {want}.{why}")


BUFFER = [("a", 1, True), ("b", 2, True), ("c", 3, True), ("d", 2, False), ("e", 5, False)]  # (uid, dispatch, finished)


@pytest.mark.exercise("12.2", "stale_evictions")
def test_stale_drop(ch):
    check_stale(ch, BUFFER, 5, 3, "drop", " span = global_steps - dispatch_step + 1; drop evicts finished groups with "
                "span > threshold, never a group still in flight.")
    check_stale(ch, BUFFER, 5, 4, "drop", " A group whose span equals the threshold is still trainable (strict >).")
    check_stale(ch, BUFFER, 5, None, "drop", " threshold None switches the bound off.")


@pytest.mark.exercise("12.2", "stale_evictions")
def test_stale_wait(ch):
    check_stale(ch, BUFFER, 5, 4, "wait", " wait evicts nothing and holds sampling while a group in flight has "
                "span >= threshold (here d: 5 - 2 + 1 = 4).")
    check_stale(ch, BUFFER, 5, 5, "wait", " Only groups in flight make sampling wait; finished old groups do not.")
    check_stale(ch, BUFFER, 5, None, "wait", " threshold None switches the bound off.")


@pytest.mark.exercise("12.2", "stale_evictions")
def test_stale_first_step(ch):
    fresh = [("x", 1, False), ("y", 1, True)]
    check_stale(ch, fresh, 1, 1, "drop", " At step 1 a group dispatched at step 1 has span 1, within threshold 1.")
    check_stale(ch, fresh, 1, 1, "wait", " A group in flight with span 1 = threshold 1 makes sampling wait.")
    check_stale(ch, fresh, 2, 1, "drop", " At step 2 the finished group y has span 2 > 1: evicted.")
