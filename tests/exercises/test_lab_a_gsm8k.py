"""Grades exercises/lab_a_gsm8k.py (or solutions/ with --target solutions) on GSM8K's real rows."""

import json
import random

import pytest
from grading import call, fail, load_chapter, raised
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirl.data import GSM8K_LOCAL_DIR, gsm8k_rows


@pytest.fixture(scope="module")
def lab(request):
    return load_chapter(request.config, "lab_a_gsm8k")


def raw_examples(split: str) -> list[dict]:
    with (GSM8K_LOCAL_DIR / f"{split}.jsonl").open() as handle:
        return [json.loads(line) for line in handle]


@pytest.fixture(scope="module")
def real_rows():
    """(split, index, raw example) for 150 random real rows of each split, plus every row whose answer has a comma."""
    picked = []
    for split in ("train", "test"):
        examples = raw_examples(split)
        indices = set(random.Random(split).sample(range(len(examples)), 150))
        indices |= {i for i, e in enumerate(examples) if "," in e["answer"].split("####")[-1]}
        picked += [(split, i, examples[i]) for i in sorted(indices)]
    return picked


def describe(mine, expected, field):
    return f"{field}: yours {mine!r:.120}, verl's {expected!r:.120}"


@pytest.mark.exercise("A.1", "gsm8k_row")
def test_a1_prompt_and_schema_match_verl_on_real_rows(lab, real_rows):
    for split, index, example in real_rows:
        expected = gsm8k_rows([example], split)[0]
        row = call(lab.gsm8k_row, dict(example), index, split)
        if not isinstance(row, dict):
            fail(f"gsm8k_row should return a dict (one parquet row), got {type(row).__name__}.")
        missing = {"data_source", "prompt", "ability", "reward_model", "extra_info"} - set(row)
        if missing:
            fail(f"the row lacks verl's column(s) {sorted(missing)}.")
        for field in ("data_source", "ability"):
            if row[field] != expected[field]:
                fail(describe(row[field], expected[field], field))
        if row["prompt"] != expected["prompt"]:
            fail("the prompt differs from verl's on a real row: it is [{'role': 'user', 'content': question + ' ' + "
                 f"INSTRUCTION}}] (note the one space). {describe(row['prompt'], expected['prompt'], 'prompt')}")


@pytest.mark.exercise("A.1", "gsm8k_row")
def test_a1_ground_truth_is_the_string_after_hashes_without_commas(lab, real_rows):
    for split, index, example in real_rows:
        expected = gsm8k_rows([example], split)[0]["reward_model"]
        row = call(lab.gsm8k_row, dict(example), index, split)
        truth = row.get("reward_model", {}).get("ground_truth") if isinstance(row.get("reward_model"), dict) else None
        if not isinstance(truth, str):
            fail(f"reward_model.ground_truth must be a string (verl's scorers compare text), got {truth!r}.")
        if "," in truth:
            fail(f"ground_truth {truth!r} still has its thousands comma: the GSM8K rule strips commas from the "
                 "model's answer, so '1,600' would never match.")
        if truth != expected["ground_truth"]:
            fail(f"ground_truth of {split} row {index}: yours {truth!r}, verl's {expected['ground_truth']!r}. It is "
                 "the number right after '#### ', not the last number of the worked solution.")
        if row["reward_model"] != expected:
            fail(describe(row["reward_model"], expected, "reward_model"))


@pytest.mark.exercise("A.1", "gsm8k_row")
def test_a1_extra_info_keeps_the_raw_text_and_position(lab, real_rows):
    for split, index, example in real_rows[::25]:
        expected = gsm8k_rows([example], split)[0]["extra_info"] | {"index": index}
        row = call(lab.gsm8k_row, dict(example), index, split)
        if row.get("extra_info") != expected:
            fail(describe(row.get("extra_info"), expected, "extra_info") + " (the RAW question, without the "
                 "instruction, and the raw answer)")


@pytest.mark.exercise("A.1", "gsm8k_row")
def test_a1_an_answer_without_hashes_is_an_error(lab):
    for answer in ("The answer is 72.", "#### ", "####72", "72"):
        error = raised(lab.gsm8k_row, {"question": "How many?", "answer": answer}, 0, "train")
        if not isinstance(error, ValueError):
            fail(f"an answer without '#### <number>' ({answer!r}) must raise ValueError (verl's script asserts), "
                 f"got {'no error' if error is None else type(error).__name__}.")


# A.2: numeric comparison, strict format -------------------------------------------------------------------

A2_CASES = [  # (response, ground truth, expected, what it tests)
    ("18+0=18 #### 18", "18", 1.0, "a plain right answer"),
    ("#### 18.0", "18", 1.0, "18.0 is the number 18"),
    ("#### 18.00", "18", 1.0, "18.00 is the number 18"),
    ("#### 1,600", "1600", 1.0, "thousands commas are removed"),
    ("#### 0.5", ".5", 1.0, "the ground truth is a number too"),
    ("#### .5", "0.5", 1.0, ".5 is a number"),
    ("#### -3", "-3", 1.0, "a negative answer"),
    ("#### 18.5", "18", 0.0, "18.5 is not 18"),
    ("#### 5 and later #### 18", "18", 1.0, "the LAST answer counts"),
    ("#### 18 and later #### 5", "18", 0.0, "the LAST answer counts"),
    ("####18", "18", 0.0, "the format still needs one space after ####"),
    ("The answer is 18.", "18", 0.0, "no #### means no answer"),
    ("#### 18" + " " + "x" * 300, "18", 0.0, "only the last 300 characters are read"),
    ("x" * 400 + "#### 18", "18", 1.0, "a long response whose answer is in the window"),
    ("#### 1.2.3", "1.2", 0.0, "1.2.3 is not a number"),
    ("#### .", "0", 0.0, "a lone dot is not a number"),
    ("#### -", "0", 0.0, "a lone minus is not a number"),
    ("#### ,", "0", 0.0, "a lone comma is not a number"),
    ("#### 1e3", "1000", 0.0, "'1e3' is read by the regex as '1' (the format has no exponents)"),
]


def check_cases(lab, cases):
    for response, truth, expected, what in cases:
        got = call(lab.numeric_gsm8k_score, response, truth)
        if not isinstance(got, float):
            fail(f"numeric_gsm8k_score should return a float (1.0 or 0.0), got {type(got).__name__} {got!r}.")
        if got != expected:
            fail(f"{what}: numeric_gsm8k_score({response[-60:]!r}, {truth!r}) = {got}, expected {expected}.")


@pytest.mark.exercise("A.2", "numeric_gsm8k_score")
def test_a2_the_same_number_written_differently_scores(lab):
    check_cases(lab, [case for case in A2_CASES if case[2] == 1.0])


@pytest.mark.exercise("A.2", "numeric_gsm8k_score")
def test_a2_wrong_malformed_and_missing_answers_score_zero(lab):
    check_cases(lab, [case for case in A2_CASES if case[2] == 0.0])


FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
PIECES = ["#### ", "####", "#", "1", "8", "18", ".", ",", "-", " ", "\n", "x", "1,000", "0.0", "e", "\x00", "٣"]


@pytest.mark.exercise("A.2", "numeric_gsm8k_score")
@FUZZ
@given(st.lists(st.sampled_from(PIECES), max_size=30).map("".join), st.sampled_from(["18", "1000", "0", "-3", "0.5"]))
def test_a2_never_raises_and_agrees_with_verl_where_verl_says_right(lab, response, truth):
    from minirl.rewards import compute_gsm8k_score

    got = call(lab.numeric_gsm8k_score, response, truth)
    if got not in (0.0, 1.0):
        fail(f"numeric_gsm8k_score({response!r}, {truth!r}) = {got!r}: a reward here is 1.0 or 0.0.")
    if compute_gsm8k_score(response, truth) == 1 and got != 1.0:
        fail(f"verl's strict rule scores {response!r} right against {truth!r}, yours does not: a numeric comparison "
             "must accept everything the string comparison accepts.")
