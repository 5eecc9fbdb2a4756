"""The graded-exercise mechanism itself: stubs generated from solutions, shipped unsolved,
and graders that catch the classic mistakes with a message a learner can act on."""

import ast
import os
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

import pytest
from cli import pytest_cli  # tests/cli.py: `python -m pytest ...`, forked from a process that imported it

from minirl.book import exercise_files, exercises

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------
# Stub generation
# ----------------------------------------------------------------------------------------------


def test_make_stubs_replaces_each_solution_block():
    solution = exercises.SOLUTIONS_HEADER + textwrap.dedent(
        '''
        def f(x):
            """Doc."""
            # BEGIN SOLUTION
            y = x + 1
            return y
            # END SOLUTION
        '''
    )
    stub = exercises.make_stubs(solution)
    assert stub.startswith(exercises.EXERCISES_HEADER)
    assert "x + 1" not in stub and '"""Doc."""' in stub
    assert '    raise NotImplementedError("f: not written yet.' in stub
    namespace = {}
    exec(stub, namespace)
    with pytest.raises(NotImplementedError):
        namespace["f"](1)


@pytest.mark.parametrize(
    "body, error",
    [
        ("def f():\n    # BEGIN SOLUTION\n    pass\n", "never closed"),
        ("def f():\n    pass\n    # END SOLUTION\n", "without a matching"),
        ("# BEGIN SOLUTION\nx = 1\n# END SOLUTION\n", "outside a function"),
        ("def f():\n    # BEGIN SOLUTION\n    # BEGIN SOLUTION\n", "inside another"),
    ],
)
def test_make_stubs_rejects_broken_markers(body, error):
    with pytest.raises(ValueError, match=error):
        exercises.make_stubs(exercises.SOLUTIONS_HEADER + body)


def test_exercises_are_the_generated_stubs():
    problems = exercises.check()
    assert not problems, "\n".join(problems) + "\nRun `python -m minirl.book.exercises sync`."


def test_every_exercise_function_is_an_unsolved_stub():
    files = exercise_files(REPO / "exercises")
    assert files, "exercises/ holds no chapter file"
    for path in files:
        tree = ast.parse(path.read_text())
        functions = [n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
        assert functions, f"{path.name} defines no exercise"
        for fn in functions:
            body = fn.body[1:] if ast.get_docstring(fn) else fn.body
            assert len(body) == 1 and isinstance(body[0], ast.Raise), f"{path.name}::{fn.name} is not a bare stub"
            assert "NotImplementedError" in ast.unparse(body[0]), f"{path.name}::{fn.name}: raise NotImplementedError"


# ----------------------------------------------------------------------------------------------
# Graders: run them as a learner would, on the stubs and on known-wrong answers
# ----------------------------------------------------------------------------------------------


class Graded(NamedTuple):
    results: dict[str, str]
    """test name -> "passed" or its failure message (an error or a skip is never "passed")"""
    exercise: dict[str, str]
    """test name -> the exercise number it grades (the `exercise` property the graded tests' conftest records)"""
    stdout: str


def grade(target: Path, tmp_path: Path, *extra: str) -> Graded:
    """Run the graded tests against `target` in one pytest process, as `make grade` does (forked, tests/cli.py);
    read back its junit."""
    junit = tmp_path / "junit.xml"
    paths = [a for a in extra if a.startswith("tests/")] or ["tests/exercises"]
    options = [a for a in extra if not a.startswith("tests/")]
    proc = pytest_cli(*paths, "-q", "-p", "no:cacheprovider", f"--target={target}", f"--junitxml={junit}", *options,
                      env={**os.environ, "MINIRL_GRADING_TIMEOUT_S": "2"})  # the hanging answer's timeouts, shortened
    results, exercise = {}, {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        problem = next((case.find(tag) for tag in ("failure", "error", "skipped") if case.find(tag) is not None), None)
        results[case.get("name")] = "passed" if problem is None else (problem.get("message") or problem.tag)
        for prop in case.iter("property"):
            if prop.get("name") == "exercise":
                exercise[case.get("name")] = prop.get("value")
    return Graded(results, exercise, proc.stdout)


def write_answers(directory: Path, files: dict[str, str]) -> Path:
    """A learner's answer directory: {exercise file stem: source} written as <stem>.py."""
    directory.mkdir()
    for stem, source in files.items():
        (directory / f"{stem}.py").write_text(source)
    return directory


def test_stubs_are_graded_as_todo_not_as_passed(tmp_path):
    results, _, stdout = grade(REPO / "exercises", tmp_path)
    assert results, "no graded test ran"
    not_todo = {name: msg for name, msg in results.items() if "not written yet" not in msg}
    assert not not_todo, f"these graded tests do not report an unsolved stub as todo: {not_todo}"
    assert "exercise progress" in stdout and "0 of" in stdout


# Classic mistakes, each written the way a learner would, and what the grader must say about it.
WRONG_CH00 = '''
import torch

def masked_mean(values, mask, axis=None):
    return (values * mask).sum(dim=axis) / mask.sum(dim=axis)          # NaN leaks, empty row -> NaN

def masked_whiten(values, mask):
    m = mask.float()
    mean = (values * m).sum() / m.sum()
    var = (((values - mean) * m) ** 2).sum() / m.sum()                  # biased variance
    return (values - mean) / torch.sqrt(var + 1e-8)

def logprobs_from_logits(logits, labels):
    probs = torch.softmax(logits, dim=-1)                               # underflows for large logits
    return torch.gather(probs, -1, labels.unsqueeze(-1)).squeeze(-1).log()

def get_response_mask(response_id, eos_token):
    return (response_id != eos_token).long()                            # the pad == eos bug

def place_scores_on_last_token(scores, response_mask):
    import time
    while True:                                                         # hangs
        time.sleep(0.1)
'''

# Each exercise file's classic mistakes: [(a wrong file, {graded test: what its message must contain, or "passed"
# for a correct part that must still pass})]. All are graded in as few pytest runs as there are variants per file.
CLASSIC_MISTAKES: dict[str, list[tuple[str, dict[str, str]]]] = {}
CLASSIC_MISTAKES["ch00_tensors"] = [
    (WRONG_CH00, {"test_masked_mean_ignores_nan_in_padding": "NaN sitting in a padded position leaked",
                  "test_masked_mean_empty_row_is_zero": "add 1e-8 to the denominator",
                  "test_masked_whiten_matches_verl": "biased variance",
                  "test_logprobs_from_logits_is_stable_for_large_logits": "softmax underflowed",
                  "test_get_response_mask_keeps_the_eos_when_pad_is_eos": "pad == eos bug",
                  "test_place_scores_on_last_token_toy": "did not return within",
                  # one hanging or wrong exercise does not stop the others being graded
                  "test_masked_mean_toy": "passed"}),
]


def test_wrong_shape_is_reported_as_such(tmp_path):
    wrong = tmp_path / "shape"
    wrong.mkdir()
    source = (REPO / "solutions" / "ch00_tensors.py").read_text()
    source += "\n\ndef masked_mean(values, mask, axis=None):\n    return values.sum(dim=0)\n"
    (wrong / "ch00_tensors.py").write_text(source)
    results = grade(wrong, tmp_path, "tests/exercises/test_ch00_tensors.py", "-k", "masked_mean_toy").results
    assert "should have shape ()" in results["test_masked_mean_toy"]


WRONG_CH04_NO_MASK = '''
import torch

def group_advantages(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    scores = token_level_rewards.sum(-1)
    out = torch.zeros_like(scores)
    for label in set(index):
        rows = torch.tensor([l == label for l in index])
        g = scores[rows]
        out[rows] = (g - g.mean()) / (g.std() + epsilon) if len(g) > 1 else g / (1 + epsilon)
    return out.unsqueeze(-1).expand_as(token_level_rewards).clone()          # forgot the mask

def repeat_with_uids(prompts, n):
    import uuid
    uids = [str(uuid.uuid4()) for _ in prompts]
    return prompts * n, uids * n                                           # tiled, not interleaved
'''

WRONG_CH04_BIASED = '''
import torch

def group_advantages(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    scores = token_level_rewards.sum(-1)
    out = torch.zeros_like(scores)
    for label in set(index):
        rows = torch.tensor([l == label for l in index])
        g = scores[rows]
        out[rows] = (g - g.mean()) / (g.std(unbiased=False) + epsilon)      # biased std
    return out.unsqueeze(-1) * response_mask

def repeat_with_uids(prompts, n):
    return [p for p in prompts for _ in range(n)], [p for p in prompts for _ in range(n)]   # uid = text
'''


CLASSIC_MISTAKES["ch04_grpo"] = [
    (WRONG_CH04_NO_MASK, {"test_group_advantages_match_verl": "multiply by response_mask",
                          "test_repeat_is_interleaved": "tiled"}),
    (WRONG_CH04_BIASED, {"test_group_advantages_match_verl": "biased std",
                         "test_uid_is_per_prompt_not_per_text": "same uid"}),
]


WRONG_CH02_FORWARD = '''
import torch

def gae_scan(token_level_rewards, values, response_mask, gamma, lam):
    mask = response_mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    last_gae = torch.zeros_like(values[:, 0])
    columns = []
    for t in range(values.shape[1]):                                        # forwards, not backwards
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        gae = delta + gamma * lam * last_gae
        next_value = mask[:, t] * values[:, t] + (1 - mask[:, t]) * next_value
        last_gae = mask[:, t] * gae + (1 - mask[:, t]) * last_gae
        columns.append(last_gae)
    advantages = torch.stack(columns, dim=1)
    return advantages, advantages + values

def whiten_advantages(advantages_raw, response_mask):
    m = response_mask.to(advantages_raw.dtype)
    n = m.sum(-1, keepdim=True)                                             # per row, not the whole batch
    mean = (advantages_raw * m).sum(-1, keepdim=True) / n
    var = ((advantages_raw - mean) ** 2 * m).sum(-1, keepdim=True) / (n - 1)
    return (advantages_raw - mean) / torch.sqrt(var + 1e-8) * m
'''

WRONG_CH02_NO_CARRY = '''
import torch

def gae_scan(token_level_rewards, values, response_mask, gamma, lam):
    mask = response_mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    last_gae = torch.zeros_like(values[:, 0])
    columns = []
    for t in reversed(range(values.shape[1])):
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        gae = delta + gamma * lam * last_gae
        next_value = values[:, t] * mask[:, t]                              # reset at masked tokens, not carried
        last_gae = gae * mask[:, t]
        columns.append(last_gae)
    advantages = torch.stack(columns[::-1], dim=1)
    return advantages, advantages + values

def whiten_advantages(advantages_raw, response_mask):
    m = response_mask.to(advantages_raw.dtype)
    n = m.sum()
    mean = (advantages_raw * m).sum() / n
    var = ((advantages_raw - mean) ** 2 * m).sum() / n                      # biased variance
    return (advantages_raw - mean) / torch.sqrt(var + 1e-8) * m
'''


CLASSIC_MISTAKES["ch02_gae"] = [
    (WRONG_CH02_FORWARD, {"test_gae_scan_toy": "scanned FORWARDS",
                          "test_whiten_advantages_match_minirl": "whitened each row separately",
                          "test_whiten_advantages_statistics_are_batch_wide": "whitened each row separately"}),
    (WRONG_CH02_NO_CARRY, {"test_gae_scan_toy": "passed",
                           "test_gae_scan_skips_masked_tokens": "carries them over the token unchanged",
                           "test_whiten_advantages_match_minirl": "biased variance",
                           "test_whiten_advantages_needs_two_valid_tokens": "Raise a ValueError"}),
]


WRONG_CH07_GRPO_LIKE = '''
import torch

def rloo_advantages(token_level_rewards, response_mask, index):
    scores = token_level_rewards.sum(-1)
    out = torch.zeros_like(scores)
    for label in set(index):
        rows = torch.tensor([l == label for l in index])
        out[rows] = scores[rows] - scores[rows].mean()                      # the sample is in its own baseline
    return out.unsqueeze(-1) * response_mask

def remax_advantages(token_level_rewards, reward_baselines, response_mask):
    returns = (token_level_rewards * response_mask).cumsum(-1) * response_mask   # forwards, not reward-to-go
    return returns - reward_baselines.unsqueeze(-1) * response_mask, returns

def register_my_estimator():
    from minirl.advantage import register_adv_est

    @register_adv_est("reinforce_median")
    def reinforce_median(token_level_rewards, response_mask, index=None, config=None, **kwargs):
        scores = token_level_rewards.sum(-1)
        labels = [0] * len(scores) if index is None else list(index)
        out = torch.zeros_like(scores)
        for label in set(labels):
            rows = torch.tensor([l == label for l in labels])
            out[rows] = scores[rows] - torch.median(scores[rows])           # lower middle value for even groups
        out = out.unsqueeze(-1) * response_mask
        return out, out

    return reinforce_median
'''

WRONG_CH07_SIGNATURES = '''
import torch

def rloo_advantages(token_level_rewards, response_mask, index):
    scores = token_level_rewards.sum(-1)
    out = torch.zeros_like(scores)
    for label in set(index):
        rows = torch.tensor([l == label for l in index])
        g = scores[rows]
        out[rows] = 0 * g if len(g) == 1 else g - (g.sum() - g) / (len(g) - 1)   # a group of one gets 0
    return out.unsqueeze(-1) * response_mask

def remax_advantages(token_level_rewards, reward_baselines, response_mask):
    returns = (token_level_rewards * response_mask).flip(-1).cumsum(-1).flip(-1)
    return returns - reward_baselines.unsqueeze(-1), returns                # no shape check, baseline on padding

def register_my_estimator():
    from minirl.advantage import register_adv_est

    @register_adv_est("reinforce_median")
    def reinforce_median(token_level_rewards, response_mask, index=None, config=None):   # no **kwargs
        scores = token_level_rewards.sum(-1)
        out = (scores - torch.quantile(scores, 0.5)).unsqueeze(-1) * response_mask
        return out, out

    return reinforce_median
'''


CLASSIC_MISTAKES["ch07_baselines"] = [
    (WRONG_CH07_GRPO_LIKE, {"test_rloo_matches_verl": "GRPO without the std",
                            "test_remax_toy": "runs forwards",
                            "test_estimator_values_through_the_registry": "torch.median returns the LOWER",
                            "test_estimator_is_registered": "passed"}),
    (WRONG_CH07_SIGNATURES, {"test_rloo_singleton_keeps_its_score": "got advantage 0",
                             "test_remax_toy": "padding is not 0",
                             "test_remax_checks_the_baseline_shape": "was accepted",
                             "test_estimator_values_through_the_registry": "**kwargs"}),
]


WRONG_CH03_NAIVE = '''
import torch

def bradley_terry_loss(chosen_rewards, rejected_rewards, margin=None):
    d = chosen_rewards - rejected_rewards - (0 if margin is None else margin)
    loss = -torch.log(torch.sigmoid(d)).mean()                              # underflows for d < -104
    diff = chosen_rewards - rejected_rewards
    return loss, (diff >= 0).float().mean().item(), diff.mean().item()     # a tie counted as a win

def apply_kl_penalty(token_level_scores, old_log_probs, ref_log_probs, response_mask, beta, kl_penalty="kl"):
    from minirl.kl import kl_penalty as kl_estimate
    kld = kl_estimate(old_log_probs, ref_log_probs, kl_penalty) * response_mask
    current_kl = (kld.sum() / response_mask.sum()).item()                   # token mean over the whole batch
    return token_level_scores - beta * kld, current_kl

def kl_estimators(logprob, ref_logprob):
    x = logprob - ref_logprob
    return {"k1": x, "k2": 0.5 * x**2, "k3": torch.exp(x) - x - 1}         # ratio the wrong way round, no clamps
'''

WRONG_CH03_UNMASKED = '''
import torch
import torch.nn.functional as F

def bradley_terry_loss(chosen_rewards, rejected_rewards, margin=None):
    d = chosen_rewards - rejected_rewards
    loss = -F.logsigmoid(d if margin is None else d + margin).mean()        # margin added, not subtracted
    return loss, (d > 0).float().mean().item(), d.mean().item()

def apply_kl_penalty(token_level_scores, old_log_probs, ref_log_probs, response_mask, beta, kl_penalty="kl"):
    from minirl.kl import kl_penalty as kl_estimate
    kld = kl_estimate(old_log_probs, ref_log_probs, kl_penalty)             # not masked: padding pays junk
    per_sequence = (kld * response_mask).sum(-1) / response_mask.sum(-1)
    return token_level_scores - beta * kld, per_sequence.mean().item()

def kl_estimators(logprob, ref_logprob):
    x = logprob - ref_logprob
    r = torch.clamp(ref_logprob - logprob, -20, 20)
    return {"k1": x, "k2": x**2, "k3": torch.exp(r) - r - 1}                # k2 not halved, k3 not clamped
'''


CLASSIC_MISTAKES["ch03_rlhf"] = [
    (WRONG_CH03_NAIVE, {"test_bradley_terry_toy": "passed",
                        "test_bradley_terry_is_stable_for_large_differences": "underflows to log(0)",
                        "test_bradley_terry_tie_is_not_accurate": "a tie is not a correct ranking",
                        "test_kl_penalty_leaves_padding_alone": "passed",
                        "test_kl_penalty_current_kl_is_a_mean_over_sequences": "mean over all valid tokens",
                        "test_kl_estimators_toy": "the wrong way round",
                        "test_kl_estimators_k3_is_clamped": "overflows",
                        "test_kl_estimators_k1_k3_unbiased_k2_not": "UNBIASED"}),
    (WRONG_CH03_UNMASKED, {"test_bradley_terry_toy": "passed",
                           "test_bradley_terry_margin": "you ADDED the margin",
                           "test_kl_penalty_toy": "multiply the KL estimate by response_mask",
                           "test_kl_penalty_leaves_padding_alone": "exactly its score",
                           "test_kl_penalty_current_kl_is_a_mean_over_sequences": "passed",
                           "test_kl_estimators_toy": "HALF the squared log-ratio",
                           "test_kl_estimators_k3_is_clamped": "but not the result"}),
]


WRONG_CH06_NAIVE = '''
import torch

def dpo_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
             beta=0.1, label_smoothing=0.0):
    chosen = policy_chosen_logps - reference_chosen_logps
    rejected = policy_rejected_logps - reference_rejected_logps
    losses = -torch.log(torch.sigmoid(beta * (chosen - rejected)))         # underflows; label_smoothing ignored
    return losses, beta * chosen, beta * rejected                           # rewards not detached

def implicit_reward_metrics(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                            reference_rejected_logps, beta):
    chosen = beta * (policy_chosen_logps - reference_chosen_logps)
    rejected = beta * (policy_rejected_logps - reference_rejected_logps)
    return {"rewards/chosen": chosen.mean().item(), "rewards/rejected": rejected.mean().item(),
            "rewards/accuracies": (chosen >= rejected).float().mean().item(),             # a tie counted as a win
            "rewards/margins": (chosen - rejected).mean().item(),
            "logps/chosen": (policy_chosen_logps - reference_chosen_logps).mean().item(),   # the log-ratio
            "logps/rejected": (policy_rejected_logps - reference_rejected_logps).mean().item()}
'''

WRONG_CH06_ROBUST = '''
import torch
import torch.nn.functional as F

def dpo_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
             beta=0.1, label_smoothing=0.0):
    if not 0 <= label_smoothing < 0.5:
        raise ValueError(label_smoothing)
    chosen = policy_chosen_logps - reference_chosen_logps
    rejected = policy_rejected_logps - reference_rejected_logps
    z, s = beta * (chosen - rejected), label_smoothing
    losses = (-(1 - s) * F.logsigmoid(z) + s * F.logsigmoid(-z)) / (1 - 2 * s)   # robust DPO, not cDPO
    return losses, beta * chosen.detach(), beta * rejected.detach()

def implicit_reward_metrics(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                            reference_rejected_logps, beta):
    chosen = beta * (policy_chosen_logps - reference_chosen_logps).detach()
    rejected = beta * (policy_rejected_logps - reference_rejected_logps).detach()
    return {"rewards/chosen": chosen.mean(), "rewards/rejected": rejected.mean(),     # tensors, not floats
            "rewards/accuracies": (chosen > rejected).float().mean(), "rewards/margins": (chosen - rejected).mean(),
            "logps/chosen": policy_chosen_logps.mean(), "logps/rejected": policy_rejected_logps.mean()}
'''


CLASSIC_MISTAKES["ch06_dpo"] = [
    (WRONG_CH06_NAIVE, {"test_dpo_loss_toy": "passed",
                        "test_dpo_loss_matches_trl": "is ignored",
                        "test_dpo_rewards_are_detached": "carry a gradient",
                        "test_dpo_loss_is_stable_for_large_log_probs": "log(0)",
                        "test_dpo_loss_rejects_bad_label_smoothing": "was accepted",
                        "test_metrics_accuracy_is_strict": "a tie is not a win",
                        "test_metrics_show_likelihood_displacement": "the POLICY's log-probs"}),
    (WRONG_CH06_ROBUST, {"test_dpo_loss_is_log2_when_policy_is_reference": "passed",
                         "test_dpo_loss_matches_trl": "robust DPO",
                         "test_dpo_loss_rejects_bad_label_smoothing": "passed",
                         "test_metrics_toy": "should be a Python float"}),
]


WRONG_CH09_NO_TRUNCATION = '''
import torch

def truncated_is_weights(log_ratio, response_mask, threshold):
    mask = response_mask.float()
    weights = (torch.exp(torch.clamp(log_ratio, -20, 20)) * mask).detach()      # no truncation at threshold
    mean = (weights * mask).sum() / mask.sum()
    return weights, (1 / (((weights / mean) ** 2 * mask).sum() / mask.sum())).item()

def sequence_rejection_mask(log_ratio, response_mask, threshold):
    l = torch.clamp(log_ratio, -20, 20)
    k3 = (torch.exp(l) - 1 - l) * response_mask
    keep = k3.sum(-1, keepdim=True) <= threshold                                # the sum, not the mean
    return (response_mask * keep).to(response_mask.dtype)
'''

WRONG_CH09_NO_MASK = '''
import torch

def truncated_is_weights(log_ratio, response_mask, threshold):
    mask = response_mask.float()
    weights = torch.exp(torch.clamp(log_ratio, -20, 20)).clamp(max=threshold).detach()   # forgot the mask
    mean = (weights * mask).sum() / mask.sum()
    return weights, (1 / (((weights / mean) ** 2 * mask).sum() / mask.sum())).item()

def sequence_rejection_mask(log_ratio, response_mask, threshold):
    l = torch.clamp(log_ratio, -20, 20)
    k3 = torch.exp(l) - 1 - l
    return (response_mask * (k3 <= threshold)).to(response_mask.dtype)         # tokens, not sequences
'''

WRONG_CH09_RAW_ESS = '''
import torch

def truncated_is_weights(log_ratio, response_mask, threshold):
    mask = response_mask.float()
    raw = torch.exp(torch.clamp(log_ratio, -20, 20)) * mask
    weights = raw.clamp(max=threshold).detach()
    mean = (raw * mask).sum() / mask.sum()                                      # ESS of the untruncated ratios
    return weights, (1 / (((raw / mean) ** 2 * mask).sum() / mask.sum())).item()

def sequence_rejection_mask(log_ratio, response_mask, threshold):
    k1 = -torch.clamp(log_ratio, -20, 20)                                       # k1, not k3
    m = response_mask.float()
    keep = (k1 * m).sum(-1, keepdim=True) / (m.sum(-1, keepdim=True) + 1e-8) <= threshold
    return (response_mask * keep).to(response_mask.dtype)
'''


CLASSIC_MISTAKES["ch09_rollout_corr"] = [
    (WRONG_CH09_NO_TRUNCATION, {"test_truncated_is_toy": "You did not truncate",
                                "test_truncated_is_cuts_only_large_weights": "You did not truncate",
                                "test_sequence_rejection_toy": "passed",
                                "test_sequence_rejection_uses_the_mean_not_the_sum": "the SUM of k3",
                                "test_sequence_rejection_drops_whole_sequences": "the SUM of k3"}),
    (WRONG_CH09_NO_MASK, {"test_truncated_is_toy": "You forgot the mask",
                          "test_truncated_is_padding_weighs_zero": "You forgot the mask",
                          "test_truncated_is_cuts_only_large_weights": "passed",
                          "test_sequence_rejection_uses_k3": "passed",
                          "test_sequence_rejection_toy": "You rejected single tokens",
                          "test_sequence_rejection_drops_whole_sequences": "You rejected single tokens"}),
    (WRONG_CH09_RAW_ESS, {"test_truncated_is_toy": "from the raw ratios, before truncation",
                          "test_eff_sample_size_toy": "from the raw ratios, before truncation",
                          "test_sequence_rejection_toy": "You used k1",
                          "test_sequence_rejection_uses_k3": "You used k1"}),
]


WRONG_CH10_INTERLEAVED = '''
from minirl.protocol import DataProto

def dp_dispatch(data, world_size):
    if len(data) < world_size:
        raise ValueError(f"{len(data)} rows for {world_size} ranks")
    return [data.select_idxs(list(range(rank, len(data), world_size))) for rank in range(world_size)]  # round-robin

def dp_collect(outputs):
    return DataProto.concat(outputs)

def step_stages(config, step=1):
    algo = config.algorithm
    use_critic = config.critic.enable if config.critic.enable is not None else algo.adv_estimator == "gae"
    stages = [("gen", "rollout"), ("reward", "driver")]
    if not algo.rollout_correction.bypass_mode:
        stages.append(("old_log_prob", "actor"))
    stages.append(("ref", "reference"))                                     # the reference, always
    if use_critic:
        stages.append(("values", "critic"))
    stages.append(("adv", "driver"))
    if use_critic:
        stages.append(("update_critic", "critic"))
    if config.trainer.critic_warmup <= step:
        stages += [("update_actor", "actor"), ("update_weights", "rollout")]
    return stages
'''

WRONG_CH10_FLOOR = '''
from minirl.protocol import DataProto

def dp_dispatch(data, world_size):
    size = len(data) // world_size                                          # the remainder is dropped
    return [data.slice(rank * size, (rank + 1) * size) for rank in range(world_size)]

def dp_collect(outputs):
    return DataProto.concat(outputs)

def step_stages(config, step=1):
    algo = config.algorithm
    use_critic = config.critic.enable if config.critic.enable is not None else algo.adv_estimator == "gae"
    stages = [("gen", "rollout"), ("reward", "driver"), ("old_log_prob", "actor")]   # even in bypass mode
    if algo.use_kl_in_reward or config.actor_rollout_ref.actor.use_kl_loss:
        stages.append(("ref", "reference"))
    if use_critic:
        stages.append(("values", "critic"))
    stages.append(("adv", "driver"))
    if config.trainer.critic_warmup <= step:
        stages += [("update_actor", "actor"), ("update_weights", "rollout")]
    if use_critic:
        stages.append(("update_critic", "critic"))                          # after the actor
    return stages
'''

WRONG_CH10_REMAINDER_LAST = '''
from minirl.protocol import DataProto

def dp_dispatch(data, world_size):
    if len(data) < world_size:
        raise ValueError("not enough rows")                                 # how many ranks?
    base, extra = divmod(len(data), world_size)
    sizes = [base + (rank >= world_size - extra) for rank in range(world_size)]   # the remainder to the LAST chunks
    starts = [sum(sizes[:rank]) for rank in range(world_size)]
    return [data.slice(start, start + size) for start, size in zip(starts, sizes)]

def dp_collect(outputs):
    return DataProto.concat(outputs[::-1])                                  # last rank first

def step_stages(config, step=1):
    algo = config.algorithm
    use_critic = config.critic.enable if config.critic.enable is not None else algo.adv_estimator == "gae"
    stages = [("gen", "rollout"), ("reward", "driver")]
    if not algo.rollout_correction.bypass_mode:
        stages.append(("old_log_prob", "actor"))
    if algo.use_kl_in_reward or config.actor_rollout_ref.actor.use_kl_loss:
        stages.append(("ref", "reference"))
    if use_critic:
        stages += [("values", "critic"), ("adv", "driver"), ("update_critic", "critic")]
    else:
        stages.append(("adv", "driver"))
    return stages + [("update_actor", "actor"), ("update_weights", "rollout")]   # critic_warmup forgotten
'''


CLASSIC_MISTAKES["ch10_hybridflow"] = [
    (WRONG_CH10_INTERLEAVED, {"test_dp_dispatch_toy": "You dealt the rows round-robin",
                              "test_dp_dispatch_round_trip": "You dealt the rows round-robin",
                              "test_dp_dispatch_refuses_fewer_rows_than_ranks": "passed",
                              "test_dp_collect_gives_back_the_rows_in_order": "passed",
                              "test_step_stages_grpo": "You always ran the reference",
                              "test_step_stages_bypass_mode": "You always ran the reference",
                              "test_step_stages_match_the_real_trainer": "You always ran the reference"}),
    (WRONG_CH10_FLOOR, {"test_dp_dispatch_toy": "You dropped the last 1 row(s)",
                        "test_dp_dispatch_refuses_fewer_rows_than_ranks": "returned without an error",
                        "test_dp_dispatch_one_rank_gets_everything": "passed",
                        "test_step_stages_grpo": "passed",
                        "test_step_stages_gae_updates_the_critic_first": "You updated the actor before the critic",
                        "test_step_stages_bypass_mode": "does not compute old_log_prob again"}),
    (WRONG_CH10_REMAINDER_LAST, {"test_dp_dispatch_toy": "The extra rows went to the LAST chunks",
                                 "test_dp_dispatch_refuses_fewer_rows_than_ranks": "does not say how many ranks",
                                 "test_dp_collect_gives_back_the_rows_in_order": "from the last rank to the first",
                                 "test_step_stages_gae_updates_the_critic_first": "passed",
                                 "test_step_stages_critic_warmup": "You forgot trainer.critic_warmup",
                                 "test_step_stages_match_the_real_trainer": "You forgot trainer.critic_warmup"}),
]


# ----------------------------------------------------------------------------------------------
# One exercise, all of its checks: `make grade EX=N` (pytest --exercise N)
# ----------------------------------------------------------------------------------------------

WRONG_CH01 = '''
import torch

def clipped_policy_loss(old_log_prob, log_prob, advantages, response_mask, clip_ratio=0.2):
    ratio = torch.exp(log_prob - old_log_prob)
    per_token = torch.minimum(-advantages * ratio,                          # min instead of max
                              -advantages * torch.clamp(ratio, 1 - clip_ratio, 1 + clip_ratio))
    return (per_token * response_mask).sum() / response_mask.sum(), torch.zeros(())

def aggregate_loss(loss_mat, loss_mask, loss_agg_mode):
    return (loss_mat * loss_mask).sum() / loss_mask.sum()                  # token-mean for every mode
'''

WRONG_CH08 = '''
import re

def think_format(solution_str):
    pattern = r"<think>.*</think>\\s*#### -?\\d[\\d,.]*"                      # greedy .*, \\d
    return 1.0 if re.fullmatch(pattern, solution_str.strip(), re.S) else 0.0

def extract_answer(solution_str):
    m = re.search(r"#### (\\-?[0-9\\.\\,]+)", solution_str)            # first match, whole string
    return m.group(1).replace(",", "") if m else None

def pass_at_k(num_samples, num_correct, k):
    return 1 - (1 - num_correct / num_samples) ** k                    # with replacement, no checks
'''

WRONG_CH05 = '''
import torch

def compute_overlong_penalty(response_lengths, max_response_length, overlong_buffer_len, penalty_factor):
    expected = max_response_length - overlong_buffer_len
    exceed = response_lengths.float() - expected
    return -exceed.abs() / overlong_buffer_len * penalty_factor          # abs, not min(..., 0); no checks

def filter_groups(metric_values, index):
    values = torch.as_tensor(metric_values, dtype=torch.float32)
    kept, dropped = [], 0
    for label in dict.fromkeys(index):
        rows = [i for i, other in enumerate(index) if other == label]
        if 0 < values[rows].mean() < 1:                                  # only right for 0/1 rewards; drops singletons
            kept += rows                                                 # grouped by label, not in row order
        else:
            dropped += 1
    return torch.tensor(kept, dtype=torch.long), dropped
'''

WRONG_CH11_SUM = '''
import torch

def gspo_token_ratios(log_prob, old_log_prob, response_mask):
    log_ratio = (log_prob - old_log_prob) * response_mask
    log_s = log_ratio.sum(-1, keepdim=True).clamp(max=10.0)                # the SUM, not the mean; not detached
    return torch.exp(log_s).expand_as(log_prob)

def clip_cov_selection(advantages, log_prob, response_mask, already_clipped, clip_cov_ratio, clip_cov_lb,
                       clip_cov_ub):
    valid = response_mask > 0
    m = response_mask.float()
    with torch.no_grad():
        mean_a, mean_lp = (advantages * m).sum() / (m.sum() + 1e-8), (log_prob * m).sum() / (m.sum() + 1e-8)
        cov = (advantages - mean_a) * (log_prob - mean_lp)
    cov = cov.masked_fill(~valid | already_clipped | (cov <= clip_cov_lb) | (cov >= clip_cov_ub), -torch.inf)
    k = min(max(int(clip_cov_ratio * valid.sum().item()), 1), int(torch.isfinite(cov).sum()))
    picked = torch.zeros_like(valid)
    picked.view(-1)[torch.topk(cov.reshape(-1), k).indices] = True          # the top-k, not a random draw
    return picked

def opo_advantages(token_level_rewards, response_mask, index):
    scores = token_level_rewards.sum(-1)
    advantages = scores.clone()
    for label in set(index):
        rows = torch.tensor([other == label for other in index])
        if rows.sum() > 1:
            advantages[rows] = scores[rows] - scores[rows].mean()          # the plain mean, not length-weighted
    return advantages.unsqueeze(-1) * response_mask
'''

WRONG_CH11_UNMASKED = '''
import torch

def gspo_token_ratios(log_prob, old_log_prob, response_mask):
    L = response_mask.shape[-1]
    log_seq = ((log_prob - old_log_prob) * response_mask).sum(-1) / L      # divided by L, not by the length
    log_s = log_seq.detach().unsqueeze(-1) + log_prob - log_prob.detach()
    return torch.exp(torch.clamp(log_s, max=10.0))

def clip_cov_selection(advantages, log_prob, response_mask, already_clipped, clip_cov_ratio, clip_cov_lb,
                       clip_cov_ub):
    valid = response_mask > 0
    with torch.no_grad():
        cov = (advantages - advantages.mean()) * (log_prob - log_prob.mean())   # means over every position
    candidates = torch.nonzero((cov > clip_cov_lb) & (cov < clip_cov_ub) & valid & ~already_clipped)
    picked = torch.zeros_like(valid)
    if len(candidates) > 0:
        k = max(int(clip_cov_ratio * valid.sum().item()), 1)
        chosen = candidates[torch.randperm(len(candidates))[:k]]
        picked[chosen[:, 0], chosen[:, 1]] = True
    return picked

def opo_advantages(token_level_rewards, response_mask, index):
    scores = token_level_rewards.sum(-1)
    lengths = response_mask.sum(-1).to(scores.dtype)
    advantages = scores.clone()
    for label in set(index):
        rows = torch.tensor([other == label for other in index])
        baseline = (lengths[rows] * scores[rows]).sum() / lengths[rows].sum()   # for groups of one too
        advantages[rows] = scores[rows] - baseline
    return advantages.unsqueeze(-1) * response_mask
'''

WRONG_CH11_NO_STOP_GRADIENT = '''
import torch

def gspo_token_ratios(log_prob, old_log_prob, response_mask):
    lengths = response_mask.sum(-1).clamp(min=1)
    log_seq = ((log_prob - old_log_prob) * response_mask).sum(-1) / lengths
    s = torch.exp(torch.clamp(log_seq, max=10.0))                          # no stop-gradient trick
    return s.unsqueeze(-1).expand_as(log_prob)

def clip_cov_selection(advantages, log_prob, response_mask, already_clipped, clip_cov_ratio, clip_cov_lb,
                       clip_cov_ub):
    valid = response_mask > 0
    m = response_mask.float()
    with torch.no_grad():
        cov = (advantages - (advantages * m).sum() / m.sum()) * (log_prob - (log_prob * m).sum() / m.sum())
    candidates = torch.nonzero((cov > clip_cov_lb) & (cov < clip_cov_ub) & valid)   # already_clipped ignored
    picked = torch.zeros_like(valid)
    if len(candidates) > 0:
        k = max(int(clip_cov_ratio * response_mask.numel()), 1)                # B * L, not the valid tokens
        chosen = candidates[torch.randperm(len(candidates))[:k]]
        picked[chosen[:, 0], chosen[:, 1]] = True
    return picked

def opo_advantages(token_level_rewards, response_mask, index):
    scores = token_level_rewards.sum(-1)
    lengths = response_mask.sum(-1).to(scores.dtype)
    advantages = scores.clone()
    for label in set(index):
        rows = torch.tensor([other == label for other in index])
        if rows.sum() > 1:
            r, n = scores[rows], lengths[rows]
            advantages[rows] = (r - (n * r).sum() / n.sum()) / (r.std() + 1e-6)    # divided by the std
    return advantages.unsqueeze(-1) * response_mask
'''

CLASSIC_MISTAKES["ch11_policy_losses"] = [
    (WRONG_CH11_SUM, {"test_gspo_toy": "You used exp(sum of log-ratios)",
                      "test_gspo_gradient_is_the_sequence_ratio": "The gradient at token t includes the whole answer's",
                      "test_clip_cov_toy": "passed",
                      "test_clip_cov_draws_at_random": "You took the top-k covariances",
                      "test_clip_cov_edge_cases": "passed",
                      "test_opo_toy": "You used the plain group mean",
                      "test_opo_singletons_and_empty_answers": "You used the plain group mean",
                      "test_opo_equal_lengths_is_grpo_without_std": "passed"}),
    (WRONG_CH11_UNMASKED, {"test_gspo_toy": "The means must be over valid tokens only (masked_mean)",
                           "test_gspo_gradient_is_the_sequence_ratio": "The gradient has the right form",
                           "test_gspo_clamps_log_s_at_10": "passed",
                           "test_clip_cov_toy": "The means must be over valid tokens only (masked_mean)",
                           "test_clip_cov_draws_at_random": "passed",
                           "test_clip_cov_budget_counts_valid_tokens": "passed",
                           "test_opo_toy": "A group of one got advantage 0",
                           "test_opo_singletons_and_empty_answers": "must keep its score",
                           "test_opo_equal_lengths_is_grpo_without_std": "passed"}),
    (WRONG_CH11_NO_STOP_GRADIENT, {"test_gspo_toy": "passed",
                                   "test_gspo_padding_and_empty_rows": "passed",
                                   "test_gspo_gradient_is_the_sequence_ratio": "includes the whole answer's",
                                   "test_gspo_clamps_log_s_at_10": "includes the whole answer's",
                                   "test_clip_cov_toy": "You selected among tokens PPO already clipped",
                                   "test_clip_cov_budget_counts_valid_tokens": "Your k counts all B * L",
                                   "test_opo_toy": "You divided by the group's std",
                                   "test_opo_equal_lengths_is_grpo_without_std": "You divided by the group's std"}),
]


# Every exercise's wrong answer, graded in one run (the first run of classic_mistakes_graded below, which also grades
# the classic mistakes among them; Chapter 0's is the hanging one, so its 2-second timeouts are waited for once).
WRONG = {"ch00_tensors": WRONG_CH00, "ch01_ppo": WRONG_CH01, "ch02_gae": WRONG_CH02_FORWARD,
         "ch03_rlhf": WRONG_CH03_NAIVE, "ch04_grpo": WRONG_CH04_BIASED, "ch05_dapo": WRONG_CH05,
         "ch06_dpo": WRONG_CH06_NAIVE, "ch07_baselines": WRONG_CH07_GRPO_LIKE, "ch08_r1": WRONG_CH08,
         "ch09_rollout_corr": WRONG_CH09_NO_MASK, "ch10_hybridflow": WRONG_CH10_INTERLEAVED,
         "ch11_policy_losses": WRONG_CH11_SUM}
# A lab keeps its wrong answer next to its graded tests: tests/exercises/wrong/<exercise file>.py
WRONG.update({path.stem: path.read_text() for path in sorted((REPO / "tests" / "exercises" / "wrong").glob("*.py"))})


def marked_checks() -> dict[str, int]:
    """Exercise number -> how many graded tests carry its marker, read from the test files' source."""
    counts: dict[str, int] = {}
    for path in [REPO / "tests" / "exercises" / f"test_{name.name}" for name in exercise_files(REPO / "solutions")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for decorator in node.decorator_list:
                    if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pytest.mark.exercise":
                        number = decorator.args[0].value
                        counts[number] = counts.get(number, 0) + 1
    return counts


def test_make_grade_passes_one_exercise_to_pytest():
    makefile = (REPO / "Makefile").read_text()
    assert "$(if $(EX),--exercise $(EX))" in makefile
    for chapter in ("00_tensors", "01_ppo", "02_gae", "03_rlhf", "04_grpo", "05_dapo", "06_dpo", "07_baselines",
                    "08_r1", "09_rollout_corr", "10_hybridflow", "11_policy_losses", "12_v1_trainer",
                    "13_agentic_tools", "lab_a_gsm8k", "lab_b_rewards", "lab_c_metrics",
                    "lab_d_grpo_config"):  # same command
        assert "make grade EX=" in (REPO / "chapters" / f"{chapter}.ipynb").read_text(), chapter


CASES = [(stem, variant) for stem, variants in CLASSIC_MISTAKES.items() for variant in range(len(variants))]


def grading_runs() -> list[dict[str, tuple[str, int | None]]]:
    """The answer files of each grading run: {exercise file stem: (source, its index among CLASSIC_MISTAKES[stem] or
    None)}. Run 0 holds WRONG (every file's wrong answer, some of them classic mistakes); run k > 0 the classic
    mistakes not graded yet, at most one per file."""
    first = {stem: (source, next((i for i, (wrong, _) in enumerate(CLASSIC_MISTAKES.get(stem, [])) if wrong == source),
                                 None)) for stem, source in WRONG.items()}
    left = {stem: [(wrong, i) for i, (wrong, _) in enumerate(variants) if first[stem][1] != i]
            for stem, variants in CLASSIC_MISTAKES.items()}
    runs = [first]
    while any(left.values()):
        runs.append({stem: variants.pop(0) for stem, variants in left.items() if variants})
    return runs


@pytest.fixture(scope="session")  # session: built once per worker, even when xdist interleaves files
def graded_runs(tmp_path_factory) -> list[Graded]:
    """Grade every run of grading_runs(), each in one pytest process over its files' graded tests."""
    results = []
    for k, files in enumerate(grading_runs()):
        tmp = tmp_path_factory.mktemp(f"graded{k}")
        answers = write_answers(tmp / "wrong", {stem: source for stem, (source, _) in files.items()})
        results.append(grade(answers, tmp, *[f"tests/exercises/test_{stem}.py" for stem in files]))
    return results


@pytest.fixture(scope="session")
def classic_mistakes_graded(graded_runs) -> dict[tuple[str, int], Graded]:
    """(exercise file stem, classic-mistake index) -> the grading run that graded it."""
    return {(stem, variant): run for run, files in zip(graded_runs, grading_runs())
            for stem, (_, variant) in files.items() if variant is not None}


def test_every_classic_mistake_and_every_wrong_answer_is_graded_once():
    runs = grading_runs()
    graded = sorted((stem, variant) for files in runs for stem, (_, variant) in files.items() if variant is not None)
    assert graded == sorted(CASES)
    assert {stem: source for stem, (source, _) in runs[0].items()} == WRONG


@pytest.mark.parametrize("stem, variant", CASES, ids=[f"{stem}-{variant}" for stem, variant in CASES])
def test_graders_explain_the_classic_mistakes(classic_mistakes_graded, stem, variant):
    run = classic_mistakes_graded[(stem, variant)]
    for test, message in CLASSIC_MISTAKES[stem][variant][1].items():
        got = run.results[test]
        assert got == "passed" if message == "passed" else message in got, f"{test}: expected {message!r}, got {got!r}"
    assert "FAILED" in run.stdout


def test_every_exercise_has_three_checks_and_each_catches_a_wrong_answer(graded_runs):
    """One grading run over every exercise's wrong answer: each exercise has at least 3 checks, at least one of
    them fails, and the table tells the learner the command that regrades that exercise alone."""
    counts = marked_checks()
    run = graded_runs[0]
    for number, count in sorted(counts.items()):
        assert count >= 3, f"exercise {number} has only {count} checks; write at least 3"
        outcomes = [run.results[name] for name, of in run.exercise.items() if of == number]
        assert len(outcomes) == count, f"exercise {number}: {len(outcomes)} graded checks, {count} marked"
        assert any(outcome != "passed" for outcome in outcomes), f"a wrong answer to {number} passed"
        assert f"make grade EX={number}" in run.stdout, number


def test_one_exercise_command_runs_all_its_checks_and_fails_a_wrong_answer(tmp_path):
    number = "5.2"  # the exercise with the most checks
    run = grade(write_answers(tmp_path / "wrong", WRONG), tmp_path, f"--exercise={number}")
    assert set(run.exercise.values()) == {number} and len(run.results) == marked_checks()[number]
    assert any(message != "passed" for message in run.results.values()), f"a wrong answer to {number} passed"
    assert f"make grade EX={number}" in run.stdout and "FAILED" in run.stdout


@pytest.mark.parametrize("chapter", ["7", "C"])
def test_a_chapter_command_grades_every_exercise_of_the_chapter(tmp_path, chapter):
    """`make grade EX=7` grades 7.1, 7.2, ... with all their checks, and prints the per-exercise table."""
    counts = marked_checks()
    numbers = [number for number in counts if number.split(".")[0] == chapter]
    assert numbers and (chapter == "C" or len(numbers) >= 2), numbers
    run = grade(write_answers(tmp_path / "wrong", WRONG), tmp_path, f"--exercise={chapter}")
    assert sorted(set(run.exercise.values())) == sorted(numbers)
    assert len(run.results) == sum(counts[number] for number in numbers)
    for number in numbers:
        assert f"make grade EX={number}" in run.stdout, number


def test_the_exercise_option_selects_by_identity_or_by_chapter():
    selects = exercises.selects
    assert selects("4.1", "4.1") and not selects("4.1", "4.10") and not selects("4", "14.1")
    assert selects("7", "7.3") and selects("07", "7.3") and selects("0", "0.2") and selects("c", "C.1")
    assert not selects("7", "C.1") and not selects("1", "10.1")
