"""Grades exercises/lab_b_rewards.py (or solutions/ with --target solutions).

B.1's adversarial answers live here, not in the lab: a reward is tested by strings its author did not think of.
"""

import json

import pytest
from grading import call, fail, load_chapter, target_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirl.rewards import compute_gsm8k_score, format_reward


@pytest.fixture(scope="module")
def lab(request):
    return load_chapter(request.config, "lab_b_rewards")


RIGHT = [("#### 3/4", "3/4"), ("#### 6/8", "3/4"), ("so 1/2 + 1/4 = 3/4\n#### 3/4", "3/4"), ("#### 3", "3"),
         ("#### 6/2", "3"), ("#### 3", "6/2"), ("#### -1/2", "-1/2"), ("#### -2/4", "-1/2"), ("#### 0", "0/5"),
         ("#### 3/4  ", "3/4"), ("#### 3/4\n", "3/4"), ("#### 1/2 then #### 3/4", "3/4"), ("#### 3/4\nDone.", "3/4"),
         ("x" * 500 + "#### 3/4", "3/4"), ("#### 007/008", "7/8")]
WRONG = [("#### 3/5", "3/4"), ("#### 4/3", "3/4"), ("#### 1/2", "-1/2"), ("3/4", "3/4"), ("####3/4", "3/4"),
         ("#### 3/4 then #### 1/2", "3/4"), ("#### 3/4" + "x" * 300, "3/4"), ("#### 1/0", "1/0"), ("#### 0/0", "0"),
         ("#### 3/0", "3"), ("#### 3//4", "3/4"), ("#### 3/4/1", "3/4"), ("#### 0.75", "3/4"), ("#### 3 / 4", "3/4"),
         ("#### 1/-2", "-1/2"), ("#### --1/2", "1/2"), ("#### +3/4", "3/4"), ("#### 3/4.", "3/4"),
         ("#### ３/４", "3/4"), ("#### 1e2", "100"), ("#### ", "0"), ("####", "0"), ("", "0"),
         ("#### 3/4 apples", "3/4"),
         ("#### 99999999999999999999/1", "1/2"), ("#### 1/99999999999999999999", "0")]


def check(lab, cases, expected):
    for response, truth in cases:
        got = call(lab.fraction_score, response, truth)
        if not isinstance(got, float) or got not in (0.0, 1.0):
            fail(f"fraction_score({response[-50:]!r}, {truth!r}) returned {got!r}: a reward here is 1.0 or 0.0.")
        if got != expected:
            fail(f"fraction_score({response[-50:]!r}, {truth!r}) = {got}, expected {expected}. Re-read the rules in "
                 "the docstring: the last '#### ' in the last 300 characters, the rest of that line, exact integers "
                 "only.")


@pytest.mark.exercise("B.1", "fraction_score")
def test_b1_equal_values_score_one(lab):
    check(lab, RIGHT, 1.0)


@pytest.mark.exercise("B.1", "fraction_score")
def test_b1_adversarial_answers_score_zero(lab):
    check(lab, WRONG, 0.0)


FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
PIECES = ["#### ", "####", "#", "/", "-", "0", "1", "3", "4", "12", " ", "\n", "\t", ".", "x", "\x00", "٣", "１",
          "9" * 30, "/0"]
responses = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)
truths = st.sampled_from(["3/4", "1/2", "-1/2", "3", "0", "7/8"])


@pytest.mark.exercise("B.1", "fraction_score")
@FUZZ
@given(responses, truths, st.sampled_from(["", " ", "  ", "\t"]))
def test_b1_never_raises_stays_in_range_and_ignores_trailing_spaces(lab, response, truth, space):
    got = call(lab.fraction_score, response, truth)
    if got not in (0.0, 1.0):
        fail(f"fraction_score({response!r}, {truth!r}) = {got!r}: it must return 1.0 or 0.0 and never raise.")
    padded = call(lab.fraction_score, response + space, truth)
    if len(response + space) <= 300 and padded != got:
        fail(f"fraction_score changes when spaces follow the answer: {response!r} -> {got}, "
             f"with {space!r} -> {padded}.")


# B.2: a dict whose extra key becomes a metric -----------------------------------------------------------------

B2_STRINGS = ["12+7=19 #### 19", "12+7=19 #### 18", "12+7=19", "#### 19 because", "####19", "", "#### 1,900"]


@pytest.mark.exercise("B.2", "compute_score")
def test_b2_returns_the_gsm8k_score_and_the_format_flag(lab):
    for text in B2_STRINGS:
        got = call(lab.compute_score, "minirl/arithmetic", text, "19", {"index": 0})
        if not isinstance(got, dict) or "score" not in got or "formatted" not in got:
            fail(f"compute_score should return a dict with 'score' and 'formatted', got {got!r}.")
        if got["score"] != float(compute_gsm8k_score(text, "19")):
            fail(f"score of {text!r}: yours {got['score']!r}, the GSM8K rule gives {compute_gsm8k_score(text, '19')}.")
        if got["formatted"] != format_reward(text):
            fail(f"formatted of {text!r}: yours {got['formatted']!r}, expected {format_reward(text)} "
                 "(1.0 only if the response ENDS with '#### <number>').")


@pytest.mark.exercise("B.2", "compute_score")
def test_b2_takes_verls_keyword_arguments(lab):
    got = call(lab.compute_score, data_source="openai/gsm8k", solution_str="#### 72", ground_truth="72",
               extra_info=None)
    if not isinstance(got, dict) or got.get("score") != 1.0:
        fail("verl's reward loop calls compute_score(data_source=..., solution_str=..., ground_truth=..., "
             f"extra_info=...) by keyword; with extra_info=None it returned {got!r}.")


@pytest.fixture(scope="module")
def run_records(request, lab, tmp_path_factory):
    """Two training steps with the reader's compute_score as the reward (verl's keys)."""
    from minirl.plot import load_metrics
    from minirl.trainer import train

    call(lab.compute_score, "minirl/arithmetic", "#### 1", "1")  # 'not written yet' is reported as todo

    path = target_dir(request.config) / "lab_b_rewards.py"
    run_dir = tmp_path_factory.mktemp("lab_b_run")
    try:
        train([f"reward.custom_reward_function.path={path}", "reward.custom_reward_function.name=compute_score",
               "trainer.total_training_steps=2", "trainer.test_freq=2", "data.val_max_samples=20",
               "trainer.val_before_train=false", "data.train_batch_size=8",
               "actor_rollout_ref.actor.ppo_mini_batch_size=8",
               "actor_rollout_ref.rollout.n=4", f"trainer.default_local_dir={run_dir}", "trainer.logger=[]",
               "trainer.resume_mode=disable"], show_progress=False)
    except Exception as error:  # noqa: BLE001 - the learner's function runs inside the trainer
        fail(f"training with your compute_score failed: {type(error).__name__}: {error}")
    return load_metrics(run_dir)


@pytest.mark.exercise("B.2", "compute_score")
def test_b2_the_extra_key_is_logged_by_a_real_run(lab, run_records):
    last = run_records[-1]
    if "minirl/formatted/mean" not in last:
        fail(f"a run with your reward logged no minirl/formatted/mean; its reward metrics: "
             f"{json.dumps({k: v for k, v in last.items() if k.startswith('minirl/')})[:300]}")
    if not 0.0 <= last["minirl/formatted/mean"] <= 1.0 or "val-aux/minirl/arithmetic/formatted/mean@1" not in last:
        fail("the formatted metric should be a mean in [0, 1], and validation should log "
             "val-aux/minirl/arithmetic/formatted/mean@1.")
