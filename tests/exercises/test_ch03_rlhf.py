"""Grades exercises/ch03_rlhf.py (or solutions/ with --target solutions)."""

import math
import numbers

import pytest
import torch
import torch.nn.functional as F
from grading import call, close, expect_tensor, fail, load_chapter

from minirl.kl import FixedKLController, kl_penalty_forward
from minirl.kl import apply_kl_penalty as verl_apply_kl_penalty
from minirl.reward_model import bradley_terry_loss as trl_bradley_terry_loss


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch03_rlhf")


def number(value, what: str) -> float:
    """Fail unless `value` is a plain Python number (what TRL and verl log); return it as a float."""
    if isinstance(value, torch.Tensor):
        fail(f"{what} should be a Python float, got a tensor {value!r}: call .item() on the 0-dim tensor.")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        fail(f"{what} should be a Python float, got {type(value).__name__} {value!r}.")
    return float(value)


def near(a: float, b: float, tol: float = 1e-5) -> bool:
    return math.isfinite(a) and abs(a - b) <= tol * max(1.0, abs(b))


def rounded(t):
    return [round(v, 4) for v in t.tolist()]


def ragged_mask(lengths, length):
    return (torch.arange(length)[None] < torch.tensor(lengths)[:, None]).long()


# ----------------------------------------------------------------------------------------------
# 3.1 bradley_terry_loss
# ----------------------------------------------------------------------------------------------


def bt(ch, chosen, rejected, margin=None):
    """Call the reader's bradley_terry_loss; check the triple's types."""
    kwargs = {} if margin is None else {"margin": margin}
    out = call(ch.bradley_terry_loss, chosen, rejected, **kwargs)
    if not isinstance(out, tuple) or len(out) != 3:
        fail("bradley_terry_loss must return a triple (loss, accuracy, mean_margin).")
    loss = expect_tensor(out[0], (), "loss")
    return loss, number(out[1], "accuracy"), number(out[2], "mean_margin")


def per_pair(differences):
    """-log sigmoid(d), computed stably."""
    return -F.logsigmoid(torch.as_tensor(differences, dtype=torch.float64))


@pytest.mark.exercise("3.1", "bradley_terry_loss")
def test_bradley_terry_toy(ch):
    chosen, rejected = torch.tensor([2.0, 1.0, -1.0]), torch.tensor([0.0, 1.5, 1.0])  # r_w - r_l = 2, -0.5, -2
    loss, accuracy, mean_margin = bt(ch, chosen, rejected)
    d = torch.tensor([2.0, -0.5, -2.0])
    want = per_pair(d).mean().item()
    got = loss.item()
    if not near(got, want):
        if near(got, per_pair(-d).mean().item()):
            fail("your loss rewards the REJECTED answer: it is -log sigmoid(r_w - r_l), chosen minus rejected. "
                 "Yours decreases when the rejected answer scores higher.")
        if near(got, -want):
            fail(f"your loss is negative ({got:.4f}): the loss is MINUS the log-likelihood, -log sigmoid(r_w - r_l), "
                 "which is >= 0.")
        if near(got, per_pair(d).sum().item()):
            fail("you summed the per-pair losses: take their MEAN over the batch, as TRL does.")
        if near(got, -torch.sigmoid(d).mean().item()) or near(got, (1 - torch.sigmoid(d)).mean().item()):
            fail("the loss is -log sigmoid(r_w - r_l): you left out the log.")
        fail(f"scores r_w = {chosen.tolist()}, r_l = {rejected.tolist()}: the loss is mean(-log sigmoid(r_w - r_l)) "
             f"= {want:.4f}, got {got:.4f}.")
    if not near(accuracy, 1 / 3):
        if near(accuracy, 2 / 3):
            fail("accuracy counted the pairs the reward model gets WRONG: it is the share with r_w > r_l "
                 "(1 of 3 here).")
        fail(f"one of the three pairs has r_w > r_l, so accuracy is 1/3; got {accuracy:.4f}.")
    if not near(mean_margin, -0.5 / 3):
        if near(mean_margin, 0.5 / 3):
            fail("mean_margin has the wrong sign: it is mean(r_w - r_l), chosen minus rejected.")
        fail(f"mean_margin is mean(r_w - r_l) = mean(2, -0.5, -2) = {-0.5 / 3:.4f}; got {mean_margin:.4f}.")


@pytest.mark.exercise("3.1", "bradley_terry_loss")
def test_bradley_terry_matches_trl(ch):
    g = torch.Generator().manual_seed(31)
    for use_margin in (False, True):
        chosen = (2 * torch.randn(16, generator=g)).requires_grad_()
        rejected = (2 * torch.randn(16, generator=g)).requires_grad_()
        margin = torch.rand(16, generator=g) if use_margin else None
        loss, accuracy, mean_margin = bt(ch, chosen, rejected, margin)
        want, metrics = trl_bradley_terry_loss(chosen, rejected, margin)
        with_margin = " with a margin" if use_margin else ""
        if not close(loss, want.detach(), atol=1e-5):
            fail(f"on 16 random pairs{with_margin} the loss differs from TRL's RewardTrainer: expected "
                 f"{want.item():.5f}, got {loss.item():.5f}.")
        if not near(accuracy, metrics["accuracy"]) or not near(mean_margin, metrics["margin"]):
            fail(f"on 16 random pairs{with_margin}, TRL logs accuracy {metrics['accuracy']:.4f} and margin "
                 f"{metrics['margin']:.4f}; you returned {accuracy:.4f} and {mean_margin:.4f}.")
        if not loss.requires_grad:
            fail("your loss carries no gradient: the reward model cannot be trained with it. Do not .item(), "
                 ".detach() or compute it under torch.no_grad() (only the metrics).")
        mine = torch.autograd.grad(loss, (chosen, rejected))
        theirs = torch.autograd.grad(want, (chosen, rejected))
        if not all(close(a, b, atol=1e-6) for a, b in zip(mine, theirs)):
            fail(f"the loss value is right but its gradient{with_margin} differs from TRL's: build it from the "
                 "scores with differentiable torch operations only.")


@pytest.mark.exercise("3.1", "bradley_terry_loss")
def test_bradley_terry_gradient_direction(ch):
    chosen = torch.tensor([0.3, -1.2, 2.0], requires_grad=True)
    rejected = torch.tensor([0.5, 0.1, 1.0], requires_grad=True)
    loss, _, _ = bt(ch, chosen, rejected)
    if not loss.requires_grad:
        fail("your loss carries no gradient: do not .item(), .detach() or compute it under torch.no_grad().")
    grad_chosen, grad_rejected = torch.autograd.grad(loss, (chosen, rejected))
    if not (grad_chosen < 0).all():
        fail(f"d loss / d r_w should be < 0 (a gradient step raises the chosen answer's score); got "
             f"{rounded(grad_chosen)}. Is the difference r_w - r_l, with the minus sign in front of the log?")
    if not (grad_rejected > 0).all():
        fail(f"d loss / d r_l should be > 0 (a gradient step lowers the rejected answer's score); got "
             f"{rounded(grad_rejected)}.")
    want = -torch.sigmoid(-(chosen - rejected)).detach() / 3  # d/dd of mean(-log sigmoid(d)) = -sigmoid(-d) / B
    if not close(grad_chosen, want, atol=1e-6):
        fail(f"d loss / d r_w should be -sigmoid(r_l - r_w) / B = {rounded(want)}; got {rounded(grad_chosen)}.")
    if not close(grad_rejected, -want, atol=1e-6):
        fail("d loss / d r_l should be the opposite of d loss / d r_w: only the difference r_w - r_l matters.")


@pytest.mark.exercise("3.1", "bradley_terry_loss")
def test_bradley_terry_is_stable_for_large_differences(ch):
    chosen, rejected = torch.tensor([1e4, -1e4, 0.0]), torch.tensor([0.0, 0.0, 0.0])
    loss, _, _ = bt(ch, chosen, rejected)
    want = (1e4 + math.log(2)) / 3  # per pair: 0, 1e4, log 2
    if not torch.isfinite(loss):
        fail(f"with r_w - r_l = -1e4 your loss is {loss.item()}: torch.log(torch.sigmoid(d)) underflows to log(0). "
             "Use -F.logsigmoid(d) (import torch.nn.functional as F), which is exact for any d.")
    if not near(loss.item(), want, 1e-4):
        fail(f"r_w - r_l = (1e4, -1e4, 0) gives per-pair losses (0, 1e4, log 2), mean {want:.3f}; got "
             f"{loss.item():.3f}. Use -F.logsigmoid(d).")


@pytest.mark.exercise("3.1", "bradley_terry_loss")
def test_bradley_terry_margin(ch):
    chosen, rejected, margin = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0]), torch.tensor([0.5, 3.0])
    loss, accuracy, mean_margin = bt(ch, chosen, rejected, margin)
    d = torch.tensor([1.0, 2.0])
    want = per_pair(d - margin).mean().item()
    got = loss.item()
    if not near(got, want):
        if near(got, per_pair(d).mean().item()):
            fail("the margin argument is ignored: the loss is mean(-log sigmoid(r_w - r_l - margin)).")
        if near(got, per_pair(d + margin).mean().item()):
            fail("you ADDED the margin: subtract it, -log sigmoid(r_w - r_l - margin), so the pair must be won by at "
                 "least the margin.")
        fail(f"r_w - r_l = (1, 2) with margins (0.5, 3): the loss is mean(-log sigmoid(d - m)) = {want:.4f}, got "
             f"{got:.4f}.")
    if not near(mean_margin, 1.5):
        fail(f"mean_margin is mean(r_w - r_l) = 1.5, whatever the margin argument (TRL logs the raw gap); got "
             f"{mean_margin:.4f}.")
    if not near(accuracy, 1.0):
        fail(f"both pairs have r_w > r_l, so accuracy is 1.0 (the margin enters only the loss); got {accuracy:.4f}.")


@pytest.mark.exercise("3.1", "bradley_terry_loss")
def test_bradley_terry_tie_is_not_accurate(ch):
    chosen, rejected = torch.tensor([0.5, 1.0, 2.0, -1.0]), torch.tensor([0.5, 0.0, 2.0, -3.0])  # two ties
    loss, accuracy, _ = bt(ch, chosen, rejected)
    if near(accuracy, 1.0):
        fail("with two ties among four pairs, accuracy came out 1.0: a tie is not a correct ranking. Count r_w > r_l "
             "(strictly), not r_w >= r_l.")
    if not near(accuracy, 0.5):
        fail(f"two of the four pairs have r_w > r_l, two are ties: accuracy 0.5, got {accuracy:.4f}.")
    want = per_pair(torch.tensor([0.0, 1.0, 0.0, 2.0])).mean().item()
    if not near(loss.item(), want):
        fail(f"a tie costs -log sigmoid(0) = log 2; the loss here is {want:.4f}, got {loss.item():.4f}.")


# ----------------------------------------------------------------------------------------------
# 3.2 apply_kl_penalty
# ----------------------------------------------------------------------------------------------


def kl_reward(ch, scores, old, ref, mask, beta, mode=None):
    """Call the reader's apply_kl_penalty; check the pair's types."""
    kwargs = {} if mode is None else {"kl_penalty": mode}
    out = call(ch.apply_kl_penalty, scores, old, ref, mask, beta, **kwargs)
    if not isinstance(out, tuple) or len(out) != 2:
        fail("apply_kl_penalty must return a pair (token_level_rewards, current_kl).")
    return expect_tensor(out[0], scores.shape, "token_level_rewards"), number(out[1], "current_kl")


# Two responses of 3 and 2 tokens; k1 = old - ref = (0.5, 0.25, -0.3) and (0.8, 0.4); junk on the padding.
TOY_MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
TOY_OLD = torch.tensor([[-1.0, -0.5, -2.0], [-0.2, -1.0, -7.0]])
TOY_REF = torch.tensor([[-1.5, -0.75, -1.7], [-1.0, -1.4, 3.0]])
TOY_SCORES = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 0.0]])


@pytest.mark.exercise("3.2", "apply_kl_penalty")
def test_kl_penalty_toy(ch):
    rewards, current_kl = kl_reward(ch, TOY_SCORES, TOY_OLD, TOY_REF, TOY_MASK, 0.1)
    kld = (TOY_OLD - TOY_REF) * TOY_MASK
    want = TOY_SCORES - 0.1 * kld
    if not close(rewards, want, atol=1e-6):
        if close(rewards, TOY_SCORES + 0.1 * kld, atol=1e-6):
            fail("the KL is ADDED to the score: the reward is score - beta * KL, a penalty for moving away from "
                 "the reference.")
        if close(rewards[TOY_MASK.bool()], want[TOY_MASK.bool()], atol=1e-6):
            fail(f"right on the response tokens, but the padded position got {rewards[1, 2].item():.3f} instead of "
                 "its score 0: multiply the KL estimate by response_mask (the log-probs there are junk).")
        if close(rewards, TOY_SCORES - 0.1 * (TOY_REF - TOY_OLD) * TOY_MASK, atol=1e-6):
            fail("your k1 has the wrong sign: it is old_log_probs - ref_log_probs (log pi / pi_ref).")
        if close(rewards, TOY_SCORES - kld, atol=1e-6):
            fail("beta is missing: the reward is score - beta * KL.")
        fail(f"beta = 0.1, scores {TOY_SCORES.tolist()}, k1 = old - ref = {rounded(kld)}: expected rewards "
             f"{rounded(want)}, got {rounded(rewards)}.")
    check_current_kl(current_kl, kld, TOY_MASK, beta=0.1)


def check_current_kl(current_kl, kld, mask, beta):
    """Compare current_kl with verl's per-sequence mean, naming the usual wrong averages."""
    per_sequence = (kld.sum(-1) / mask.sum(-1)).mean().item()
    if near(current_kl, per_sequence):
        return
    lengths = mask.sum(-1).tolist()
    token_mean = (kld.sum() / mask.sum()).item()
    if near(current_kl, token_mean):
        fail(f"current_kl = {current_kl:.4f} is the mean over all valid tokens of the batch. verl averages within "
             f"each sequence first, then over the sequences ({per_sequence:.4f} here, lengths {lengths}): a long "
             "response must not weigh more than a short one.")
    if near(current_kl, (kld.sum() / mask.numel()).item()):
        fail("current_kl divides by every position, padding included: divide each sequence's KL sum by its number "
             "of valid tokens, then average over sequences.")
    if near(current_kl, kld.mean(-1).mean().item()):
        fail("each sequence's KL is divided by the full length L, padding included: divide it by that sequence's "
             "number of valid tokens (response_mask.sum(-1)), then average over sequences.")
    if near(current_kl, kld.sum(-1).mean().item()):
        fail("current_kl is the mean of each sequence's KL SUM: verl takes each sequence's MEAN over its valid "
             f"tokens, then the mean over sequences ({per_sequence:.4f} here).")
    if near(current_kl, beta * per_sequence):
        fail("current_kl is the KL itself, not beta times it: average kld, not the penalty.")
    fail(f"current_kl should be the mean over sequences of each sequence's mean KL = {per_sequence:.4f}; got "
         f"{current_kl:.4f}.")


def random_batch(seed, lengths=(7, 2, 5, 1, 6, 3), length=7):
    g = torch.Generator().manual_seed(seed)
    mask = ragged_mask(list(lengths), length)
    old = -3 * torch.rand(len(lengths), length, generator=g)
    ref = old + 0.8 * torch.randn(len(lengths), length, generator=g)
    old = torch.where(mask.bool(), old, torch.full_like(old, 30.0))  # junk on padding: must not leak
    ref = torch.where(mask.bool(), ref, torch.full_like(ref, -30.0))
    scores = torch.zeros(len(lengths), length)
    scores[torch.arange(len(lengths)), torch.tensor(lengths) - 1] = torch.rand(len(lengths), generator=g)
    return scores, old, ref, mask


@pytest.mark.exercise("3.2", "apply_kl_penalty")
def test_kl_penalty_matches_verl(ch):
    scores, old, ref, mask = random_batch(32)
    beta = 0.05
    results = {}
    for mode in ("kl", "mse", "low_var_kl"):
        results[mode] = kl_reward(ch, scores, old, ref, mask, beta, mode)
    for mode, (rewards, current_kl) in results.items():
        want, metrics = verl_apply_kl_penalty(scores, old, ref, mask, FixedKLController(beta), mode)
        if close(rewards, want, atol=1e-5) and near(current_kl, metrics["actor/reward_kl_penalty"]):
            continue
        if mode != "kl" and close(rewards, results["kl"][0], atol=1e-6):
            fail(f"kl_penalty={mode!r} gave the same rewards as 'kl': use the estimator the argument names "
                 "('kl' = k1, 'mse' = k2, 'low_var_kl' = k3).")
        if not close(rewards, want, atol=1e-5):
            valid = mask.bool()
            if close(rewards[valid], want[valid], atol=1e-5):
                fail(f"kl_penalty={mode!r}: right on the response tokens, but not on padding. Multiply the KL "
                     "estimate by response_mask: padded log-probs are junk.")
            fail(f"kl_penalty={mode!r}: rewards differ from verl's apply_kl_penalty on a random ragged batch; row 1 "
                 f"(2 tokens) expected {rounded(want[1, :2])}, got {rounded(rewards[1, :2])}.")
        check_current_kl(current_kl, (kl_penalty_forward(old, ref, mode) * mask), mask, beta)


@pytest.mark.exercise("3.2", "apply_kl_penalty")
def test_kl_penalty_leaves_padding_alone(ch):
    scores, old, ref, mask = random_batch(33)
    g = torch.Generator().manual_seed(34)
    scores = scores + torch.randn(scores.shape, generator=g) * (1 - mask)  # something on padding, to keep as is
    pad = ~mask.bool()
    for mode in ("kl", "low_var_kl"):
        rewards, _ = kl_reward(ch, scores, old, ref, mask, 0.1, mode)
        if not torch.isfinite(rewards).all():
            fail(f"kl_penalty={mode!r}: your rewards hold inf or NaN where the log-probs are junk (padding). "
                 "Multiply the KL estimate by response_mask.")
        if not torch.equal(rewards[pad], scores[pad]):
            worst = (rewards[pad] - scores[pad]).abs().max().item()
            fail(f"kl_penalty={mode!r}: a padded position must get exactly its score (0 penalty), yours differ by up "
                 f"to {worst:.3g}. Multiply the KL estimate by response_mask before subtracting beta * KL.")


@pytest.mark.exercise("3.2", "apply_kl_penalty")
def test_kl_penalty_current_kl_is_a_mean_over_sequences(ch):
    mask = ragged_mask([1, 6], 6)  # a one-token answer with a large KL, a six-token one with a small KL
    old = torch.tensor([[-0.5, 0, 0, 0, 0, 0], [-1.0] * 6])
    ref = torch.tensor([[-2.5, 0, 0, 0, 0, 0], [-1.1] * 6])
    scores = torch.zeros(2, 6)
    _, current_kl = kl_reward(ch, scores, old, ref, mask, 0.2)
    check_current_kl(current_kl, (old - ref) * mask, mask, beta=0.2)  # (2.0 + 0.1) / 2 = 1.05, not 2.6 / 7


# ----------------------------------------------------------------------------------------------
# 3.3 kl_estimators
# ----------------------------------------------------------------------------------------------

MODES = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}


def estimators(ch, logprob, ref_logprob):
    out = call(ch.kl_estimators, logprob, ref_logprob)
    if not isinstance(out, dict):
        fail(f"kl_estimators must return a dict {{'k1': ..., 'k2': ..., 'k3': ...}}, got {type(out).__name__}.")
    missing = [k for k in MODES if k not in out]
    if missing:
        fail(f"the dict returned by kl_estimators lacks {missing}; it has {sorted(out)}.")
    return {k: expect_tensor(out[k], logprob.shape, k) for k in MODES}


@pytest.mark.exercise("3.3", "kl_estimators")
def test_kl_estimators_toy(ch):
    logprob, ref = torch.tensor([[-1.0, -2.0, -0.5]]), torch.tensor([[-1.5, -1.0, -0.5]])  # x = (0.5, -1, 0)
    out = estimators(ch, logprob, ref)
    x = logprob - ref
    if not close(out["k1"], x, atol=1e-6):
        if close(out["k1"], -x, atol=1e-6):
            fail("k1 has the wrong sign: it is logprob - ref_logprob, log pi / pi_ref for a token sampled from pi.")
        fail(f"k1 = logprob - ref_logprob = {rounded(x[0])}, got {rounded(out['k1'][0])}.")
    if not close(out["k2"], 0.5 * x**2, atol=1e-6):
        if close(out["k2"], x**2, atol=1e-6):
            fail("k2 is HALF the squared log-ratio: 0.5 * (logprob - ref_logprob)^2.")
        fail(f"k2 = 0.5 * (logprob - ref_logprob)^2 = {rounded(0.5 * x[0] ** 2)}, got {rounded(out['k2'][0])}.")
    want = torch.exp(-x) + x - 1
    if not close(out["k3"], want, atol=1e-5):
        if close(out["k3"], torch.exp(x) - x - 1, atol=1e-5):
            fail("k3 uses the log-ratio the wrong way round: r = ref_logprob - logprob (pi_ref / pi), "
                 "k3 = e^r - r - 1. With pi / pi_ref its mean under pi is not the KL.")
        fail(f"k3 = e^r - r - 1 with r = ref_logprob - logprob: {rounded(want[0])}, got {rounded(out['k3'][0])}.")


@pytest.mark.exercise("3.3", "kl_estimators")
def test_kl_estimators_match_verl(ch):
    g = torch.Generator().manual_seed(35)
    logprob = -4 * torch.rand(4, 9, generator=g)
    ref = logprob + 2 * torch.randn(4, 9, generator=g)
    out = estimators(ch, logprob, ref)
    for key, mode in MODES.items():
        want = kl_penalty_forward(logprob, ref, mode)
        if not close(out[key], want, atol=1e-5):
            fail(f"{key} differs from verl's kl_penalty_forward(..., {mode!r}) on random log-probs: row 0 expected "
                 f"{rounded(want[0])}, got {rounded(out[key][0])}.")


@pytest.mark.exercise("3.3", "kl_estimators")
def test_kl_estimators_k2_k3_are_never_negative(ch):
    g = torch.Generator().manual_seed(36)
    logprob = -10 * torch.rand(8, 50, generator=g)
    ref = -10 * torch.rand(8, 50, generator=g)
    out = estimators(ch, logprob, ref)
    for key in ("k2", "k3"):
        if not torch.isfinite(out[key]).all():
            fail(f"{key} holds inf or NaN for log-ratios within [-10, 10].")
        if (out[key] < 0).any():
            fail(f"{key} is negative somewhere (min {out[key].min().item():.4f}); it must be >= 0 for every token "
                 f"({'x^2 / 2' if key == 'k2' else 'e^r - r - 1 >= 0 since e^r >= 1 + r'}).")
    if not (out["k1"] < 0).any():
        fail("k1 = logprob - ref_logprob should be negative where the reference likes the token more than the "
             "policy; yours never is.")


@pytest.mark.exercise("3.3", "kl_estimators")
def test_kl_estimators_k3_is_clamped(ch):
    logprob = torch.tensor([[-100.0, 0.0, -1e4, -1.0]])
    ref = torch.tensor([[0.0, -100.0, 0.0, -1.0]])  # r = ref - logprob = 100, -100, 1e4, 0
    k3 = estimators(ch, logprob, ref)["k3"][0]
    if not torch.isfinite(k3).all():
        fail(f"k3 for log-ratios r = (100, -100, 1e4, 0) is {k3.tolist()}: e^100 overflows. Clamp r to [-20, 20] "
             "before the exp (and the result to [-10, 10]), as verl does.")
    want = torch.tensor([10.0, 10.0, 10.0, 0.0])
    if close(k3, want, atol=1e-5):
        return
    if close(k3, torch.tensor([math.exp(20) - 21, math.exp(-20) + 19, math.exp(20) - 21, 0.0]), rtol=1e-4):
        fail("you clamped the log-ratio to [-20, 20] but not the result: clamp k3 itself to [-10, 10] too, so one "
             "token costs at most 10.")
    fail(f"with r = (100, -100, 1e4, 0) verl's k3 is (10, 10, 10, 0): r clamped to [-20, 20], then e^r - r - 1 "
         f"clamped to [-10, 10]. Got {k3.tolist()}.")


@pytest.mark.exercise("3.3", "kl_estimators")
def test_kl_estimators_k1_k3_unbiased_k2_not(ch):
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    q = torch.tensor([0.1, 0.2, 0.3, 0.4])
    exact = (p * (p / q).log()).sum().item()  # KL(p || q) = 0.718; E_p[k2] = 0.816
    g = torch.Generator().manual_seed(37)
    tokens = torch.multinomial(p, 200_000, replacement=True, generator=g).view(400, 500)  # a ~ p, one per "token"
    out = estimators(ch, p.log()[tokens], q.log()[tokens])
    means = {k: out[k].double().mean().item() for k in MODES}
    tolerance = 0.02  # about 8 standard errors of the means with 200k samples; the bias of k2 is 0.098
    for key in ("k1", "k3"):
        if not abs(means[key] - exact) < tolerance:
            fail(f"over 200k tokens sampled from p, mean {key} = {means[key]:.4f} but KL(p || q) = {exact:.4f}: "
                 f"{key} is an UNBIASED estimator, its mean must match the KL: check its formula.")
    if abs(means["k2"] - exact) < tolerance:
        fail(f"mean k2 = {means['k2']:.4f} is within {tolerance} of KL(p || q) = {exact:.4f}, but k2 = x^2 / 2 is "
             "biased (its mean is 0.816 here): check its formula.")
