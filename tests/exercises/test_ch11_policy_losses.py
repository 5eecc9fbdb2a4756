"""Grades exercises/ch11_policy_losses.py (or solutions/ with --target solutions)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from grading import call, close, expect_tensor, fail, load_chapter
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from minirl.entropy_cov import clip_cov_selection as minirl_clip_cov_selection
from minirl.opo import compute_opo_outcome_advantage
from minirl.sequence_ratio import compute_policy_loss_gspo


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch11_policy_losses")


# Every fuzz test sees the same cases on every run (derandomize): a grade does not change between runs.
FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None, report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
FOUND = " (a failing batch found by hypothesis, shrunk)"

LOG_CLAMP = 10.0  # verl clamps log s_it at 10 "for numerical stability": s <= e^10 = 22026


def rounded(values, digits: int = 4) -> list:
    return [round(float(v), digits) for v in values]


def table(x: torch.Tensor) -> list:
    return [rounded(row) for row in x.tolist()]


def masks(mask: torch.Tensor) -> list:
    return [[int(v) for v in row] for row in mask.tolist()]


def untouched(before: torch.Tensor, after: torch.Tensor, name: str, text: str):
    if not torch.equal(before, after.detach()):
        fail(f"{text} changed its input {name} in place (an in-place op such as mul_ or masked_fill_?). The trainer "
             f"uses {name} again after this call: compute on a copy, or with out-of-place ops.")


def same(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5) -> bool:
    """True if a and b have the same shape and values, NaN matching NaN (OPO's all-empty groups)."""
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    return a.shape == b.shape and bool(torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))


def first_hints(mistakes, got, want, match) -> str:
    """The first two sentences of `mistakes` ([(wrong output, sentence)]) whose wrong output is `got` and not `want`."""
    hints = [hint for wrong, hint in mistakes if match(got, wrong) and not match(wrong, want)]
    hints = list(dict.fromkeys(hints))[:2]
    return "".join(" " + ("" if i == 0 else "Or: ") + hint[0].upper() + hint[1:] for i, hint in enumerate(hints))


# ----------------------------------------------------------------------------------------------
# 11.1 gspo_token_ratios
# ----------------------------------------------------------------------------------------------


def gspo_text(log_prob, old_log_prob, mask) -> str:
    if log_prob.numel() > 12:  # a message's first 500 characters must reach its hint (the junit report cuts there)
        return f"gspo_token_ratios(<a {log_prob.shape[0]}x{log_prob.shape[1]} batch>)"
    return (f"gspo_token_ratios(log_prob - old_log_prob = {table(log_prob.detach() - old_log_prob)}, "
            f"response_mask={masks(mask)})")


def gspo_formula(log_prob, old_log_prob, mask) -> torch.Tensor:
    """The value of minirl's s_it: the lines of minirl/sequence_ratio.py::compute_policy_loss_gspo (verl's)."""
    log_ratio = log_prob.detach() - old_log_prob
    lengths = mask.sum(dim=-1).clamp(min=1)
    log_seq_ratio = (log_ratio * mask).sum(dim=-1) / lengths
    return torch.exp(torch.clamp(log_seq_ratio.unsqueeze(-1).expand_as(log_ratio), max=LOG_CLAMP))


def want_ratios(log_prob, old_log_prob, mask) -> torch.Tensor:
    """s_it as minirl computes it; checked against minirl's GSPO loss itself on the valid tokens.

    With A = -w, eps_low = 1 and a huge eps_high, the loss is token-sum of w * s_it, so its gradient w.r.t. w is
    the mask times s_it."""
    want = gspo_formula(log_prob, old_log_prob, mask)
    if mask.bool().any():
        w = torch.ones_like(want, requires_grad=True)
        config = SimpleNamespace(clip_ratio=0.2, clip_ratio_low=1.0, clip_ratio_high=1e30, global_batch_info={})
        loss, _ = compute_policy_loss_gspo(old_log_prob, log_prob.detach(), -w, mask, "token-sum", config)
        (from_loss,) = torch.autograd.grad(loss, w)
        valid = mask.bool()
        assert close(from_loss[valid], want[valid], atol=1e-6, rtol=1e-5)  # the grader's formula is minirl's loss's
    return want


def ratios(ch, log_prob, old_log_prob, mask, grad: bool = False):
    """Call the reader's gspo_token_ratios; check that it returned a (B, L) float tensor of log_prob's dtype.

    Returns (s, the log_prob leaf it was given)."""
    text = gspo_text(log_prob, old_log_prob, mask)
    given_lp, given_old, given_mask = log_prob.clone(), old_log_prob.clone(), mask.clone()
    if grad:
        given_lp.requires_grad_(True)
    out = call(ch.gspo_token_ratios, given_lp, given_old, given_mask)
    if isinstance(out, tuple | list):
        fail(f"{text} returned a {type(out).__name__}: return only s_it, one (B, L) tensor.")
    out = expect_tensor(out, tuple(log_prob.shape), f"the ratios returned by {text}")
    if out.dtype != log_prob.dtype:
        fail(f"{text} returned {out.dtype} ratios for {log_prob.dtype} log-probs: keep log_prob's dtype.")
    untouched(log_prob, given_lp, "log_prob", text)
    untouched(old_log_prob, given_old, "old_log_prob", text)
    untouched(mask, given_mask, "response_mask", text)
    return out, given_lp


def why_ratios(log_prob, old_log_prob, mask, got) -> str:
    """The classic mistake that gives exactly `got`, in a sentence, or ''."""
    lr = (log_prob.detach() - old_log_prob).double()
    m = mask.double()
    total = (lr * m).sum(-1)
    mean = total / m.sum(-1).clamp(min=1)

    def spread(log_seq, clamp=True):
        wide = log_seq.unsqueeze(-1).expand_as(lr)
        return torch.exp(wide.clamp(max=LOG_CLAMP) if clamp else wide)

    arithmetic = (torch.exp(lr) * m).sum(-1) / m.sum(-1).clamp(min=1)
    mistakes = [
        (spread(total), "you used exp(sum of log-ratios): GSPO normalises by the answer's length (mean, not sum), "
                        "so that a long answer's ratio does not explode."),
        (spread(total / lr.shape[-1]), "the means must be over valid tokens only (masked_mean): divide the masked "
                                       "sum by the answer's length sum_t m_t, not by L."),
        (spread(lr.mean(-1)), "the padding's log-ratios leaked into the mean: average over the valid tokens only "
                              "(masked_mean), multiplying by response_mask before the sum."),
        (torch.exp(lr.clamp(max=LOG_CLAMP)), "you returned PPO's token ratio r_t = exp(log_prob - old_log_prob): "
                                             "GSPO's value is the sequence ratio s_i, the same on every token."),
        (torch.exp(lr), "you returned PPO's token ratio r_t = exp(log_prob - old_log_prob): GSPO's value is the "
                        "sequence ratio s_i, the same on every token."),
        (spread(mean) * m, "padding holds 0: verl's s_it is s_i on every position, padding included (the loss's "
                           "mask drops the padding later), so do not multiply by response_mask."),
        (spread(-mean), "your ratio is upside down: log s_i is the mean of log_prob - old_log_prob, not of "
                        "old_log_prob - log_prob."),
        (spread(mean, clamp=False), "you did not clamp: verl clamps log s_it at 10, torch.clamp(log_s, max=10.0), "
                                    "so that s <= e^10 = 22026."),
        (spread(mean, clamp=False).clamp(max=LOG_CLAMP), "you clamped s itself at 10: verl clamps its LOG at 10, "
                                                         "so s <= e^10 = 22026."),
        (arithmetic.unsqueeze(-1).expand_as(lr), "you averaged the ratios r_t: s_i is their GEOMETRIC mean, "
                                                 "exp(mean of the log-ratios)."),
    ]
    return first_hints(mistakes, got.detach(), spread(mean), lambda a, b: close(a, b, atol=1e-6, rtol=1e-5))


def expect_ratios(ch, log_prob, old_log_prob, mask, found_by: str = "") -> torch.Tensor:
    """Fail, naming the first wrong row and the likely mistake, unless the reader's values agree with minirl's."""
    text = gspo_text(log_prob, old_log_prob, mask)
    got, _ = ratios(ch, log_prob, old_log_prob, mask)
    want = want_ratios(log_prob, old_log_prob, mask)
    if close(got.detach(), want, atol=1e-6, rtol=3e-5):
        return got
    g = got.detach()
    empty = ~mask.bool().any(-1)
    if g.isnan().any():
        if g[empty].isnan().any() and not g[~empty].isnan().any():
            fail(f"{text}: a row with no valid token came back NaN (0 / 0). Divide by max(|y_i|, 1), "
                 f"response_mask.sum(-1).clamp(min=1): its s is then exp(0) = 1.{found_by}")
        fail(f"{text}: your ratios hold NaN. Keep the padding out of the sum (multiply by response_mask) and divide "
             f"by max(|y_i|, 1).{found_by}")
    for b in range(len(want)):
        if close(g[b], want[b], atol=1e-6, rtol=3e-5):
            continue
        valid = [round(v, 4) for v, keep in zip((log_prob.detach() - old_log_prob)[b].tolist(),
                                                mask[b].bool().tolist()) if keep]
        fail(f"{text}: row {b} (valid log-ratios {valid}) should hold s = {want[b, 0].item():.6g} on every "
             f"position; got {rounded(g[b], 6)}.{why_ratios(log_prob, old_log_prob, mask, got)}{found_by}")
    return got


def gradient(ch, log_prob, old_log_prob, mask, upstream):
    """(the reader's s detached, the gradient of sum(s * upstream) w.r.t. log_prob)."""
    text = gspo_text(log_prob, old_log_prob, mask)
    out, leaf = ratios(ch, log_prob, old_log_prob, mask, grad=True)
    no_gradient = (f"{text}: s_it carries no gradient to log_prob. Detach only the sequence ratio: "
                   "log s_it = sg[log s_i] + log_prob - sg[log_prob], so that the loss trains log_prob through s.")
    if not out.requires_grad:
        fail(no_gradient)
    (grad,) = torch.autograd.grad((out * upstream).sum(), leaf, allow_unused=True)
    if grad is None:
        fail(no_gradient)
    return out.detach(), grad


def why_gradient(mask, want_s, got_s, grad, upstream) -> str:
    """A sentence for a wrong gradient; '' if none fits."""
    valid = mask.bool()
    m = mask.to(upstream.dtype)
    n = m.sum(-1, keepdim=True).clamp(min=1)
    whole_all = want_s * m / n * upstream.sum(-1, keepdim=True)        # exp(mean log r) differentiated through
    whole_valid = want_s * m / n * (upstream * m).sum(-1, keepdim=True)  # the same, padding's s masked out
    mistakes = [
        (whole_all, "the gradient at token t includes the whole answer's: detach the sequence ratio and add "
                    "log_prob - sg[log_prob] (log s_it = sg[log s_i] + log_prob - sg[log_prob])."),
        (whole_valid, "the gradient at token t includes the whole answer's: detach the sequence ratio and add "
                      "log_prob - sg[log_prob] (log s_it = sg[log s_i] + log_prob - sg[log_prob])."),
        (want_s * upstream + whole_all, "the gradient at token t includes the whole answer's: the sequence ratio "
                                        "must be DETACHED before you add log_prob - sg[log_prob]."),
        (upstream, "the derivative of s_it w.r.t. log_prob_it is 1, not s_i: you added log_prob - sg[log_prob] to "
                   "s_i itself. The trick works in log space: s_it = exp(sg[log s_i] + log_prob - sg[log_prob])."),
        (torch.zeros_like(upstream), "the gradient is 0: you detached log_prob too. Keep log_prob - sg[log_prob] "
                                     "live, so that d s_it / d log_prob_it = s_i."),
        (got_s * upstream, "the gradient has the right form (s_it times the upstream gradient), but the values of s "
                           "are wrong: see this exercise's value checks."),
    ]
    mistakes = [(wrong[valid], sentence) for wrong, sentence in mistakes]
    hints = first_hints(mistakes, grad[valid], (want_s * upstream)[valid],
                        lambda a, b: close(a, b, atol=1e-5, rtol=1e-4))
    if hints:
        return hints
    # the same gradient on every valid token of a row, whatever its upstream: it came through the whole answer's s
    rows = [b for b in range(len(mask)) if valid[b].sum() >= 2]
    if rows and all(close(grad[b][valid[b]], grad[b][valid[b]][:1].expand(int(valid[b].sum())), atol=1e-6)
                    and grad[b][valid[b]].abs().max() > 1e-6 for b in rows):
        return (" The gradient at token t includes the whole answer's: detach the sequence ratio and add "
                "log_prob - sg[log_prob] (log s_it = sg[log s_i] + log_prob - sg[log_prob]).")
    return ""


@pytest.mark.exercise("11.1", "gspo_token_ratios")
def test_gspo_toy(ch):
    # row 0: log-ratios 0.2, 0.4 (padding 3.0 ignored): s = exp(0.3) = 1.3499; their sum would give exp(0.6)
    # row 1: -0.6, 0.0, 0.3: s = exp(-0.1) = 0.9048 on every position
    # row 2: log-ratio 0.8 over 1 valid token of 3: s = exp(0.8); dividing by L = 3 would give exp(0.267)
    old_log_prob = torch.tensor([[-1.0, -2.0, -4.0], [-0.4, -1.5, -2.3], [-1.2, -0.7, -0.9]])
    log_prob = old_log_prob + torch.tensor([[0.2, 0.4, 3.0], [-0.6, 0.0, 0.3], [0.8, -1.0, 2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    got = expect_ratios(ch, log_prob, old_log_prob, mask)
    want = torch.tensor([[math.exp(0.3)] * 3, [math.exp(-0.1)] * 3, [math.exp(0.8)] * 3])
    assert close(got.detach(), want, atol=1e-5)


@pytest.mark.exercise("11.1", "gspo_token_ratios")
def test_gspo_gradient_is_the_sequence_ratio(ch):
    # d/d log_prob[i, t] of sum(s * upstream) must be s_i * upstream[i, t]: each token's own gradient, weighted
    g = torch.Generator().manual_seed(111)
    old_log_prob = -3.0 * torch.rand(4, 6, generator=g)
    log_prob = old_log_prob + 0.4 * torch.randn(4, 6, generator=g)
    mask = torch.tensor([[1.0] * 6, [1.0] * 4 + [0.0] * 2, [1.0] + [0.0] * 5, [1.0] * 3 + [0.0] * 3])
    upstream = torch.randn(4, 6, generator=g)
    got_s, grad = gradient(ch, log_prob, old_log_prob, mask, upstream)
    want_s = want_ratios(log_prob, old_log_prob, mask)
    valid = mask.bool()
    if close(grad[valid], (want_s * upstream)[valid], atol=1e-5, rtol=1e-4):
        expect_ratios(ch, log_prob, old_log_prob, mask)
        return
    b = next(b for b in range(len(mask)) if not close(grad[b][valid[b]], (want_s * upstream)[b][valid[b]],
                                                          atol=1e-5, rtol=1e-4))
    fail(f"{gspo_text(log_prob, old_log_prob, mask)}: the gradient of sum(s * upstream) w.r.t. log_prob must be "
         f"s_i * upstream at each valid token. Row {b} (s_i = {want_s[b, 0].item():.5g}): expected "
         f"{rounded((want_s * upstream)[b][valid[b]])}, got {rounded(grad[b][valid[b]])}."
         f"{why_gradient(mask, want_s, got_s, grad, upstream)}")


@pytest.mark.exercise("11.1", "gspo_token_ratios")
def test_gspo_clamps_log_s_at_10(ch):
    # row 0: mean log-ratio 12 > 10: s = e^10 = 22026 (not e^12, not 10), and no gradient (torch.clamp passes none)
    # row 1: mean 8 is below the clamp: s = e^8; row 2: mean -50, a tiny s = e^-50 (there is no lower clamp)
    old_log_prob = torch.tensor([[-20.0, -20.0, -20.0], [-40.0, -3.0, -1.0], [-0.1, -0.2, -0.3]])
    log_prob = old_log_prob + torch.tensor([[12.0, 12.0, 12.0], [30.0, 0.0, -6.0], [-50.0, -60.0, -40.0]])
    mask = torch.ones_like(log_prob)
    got = expect_ratios(ch, log_prob, old_log_prob, mask)
    assert close(got.detach()[0], torch.full((3,), math.exp(10.0)), rtol=1e-5)
    upstream = torch.tensor([[1.0, -2.0, 0.5], [1.0, -1.0, 2.0], [1.0, 1.0, 1.0]])
    got_s, grad = gradient(ch, log_prob, old_log_prob, mask, upstream)
    if close(grad[0], math.exp(10.0) * upstream[0], rtol=1e-4):
        fail(f"{gspo_text(log_prob, old_log_prob, mask)}: row 0's log s = 12 is clamped to 10, so its gradient "
             "must be 0, as verl's: you clamped the sequence's log-ratio BEFORE adding log_prob - sg[log_prob]. verl "
             "clamps log s_it after the trick, and torch.clamp passes no gradient above its bound.")
    if not close(grad[0], torch.zeros(3), atol=1e-6):
        fail(f"{gspo_text(log_prob, old_log_prob, mask)}: row 0 is clamped (log s = 12 > 10), so verl's gradient "
             f"there is 0 (torch.clamp passes none above its bound); got {rounded(grad[0])}.")
    if not close(grad[1], math.exp(8.0) * upstream[1], rtol=1e-4):
        why = why_gradient(mask[1:2], got[1:2].detach(), got_s[1:2], grad[1:2], upstream[1:2])
        fail(f"{gspo_text(log_prob, old_log_prob, mask)}: row 1 (log s = 8, below the clamp) must have gradient "
             f"s_1 * upstream = {rounded(math.exp(8.0) * upstream[1])}; got {rounded(grad[1])}.{why}")


@pytest.mark.exercise("11.1", "gspo_token_ratios")
def test_gspo_padding_and_empty_rows(ch):
    # padding holds junk (log-ratio -1030) that must not count; row 2 has no valid token: s = exp(0 / 1) = 1
    old_log_prob = torch.tensor([[-1.0, -2.0, 1000.0, 1000.0], [-0.5, -0.5, -0.5, -0.5], [1000.0, 7.0, -3.0, 0.0]])
    log_prob = torch.tensor([[-0.8, -2.4, -30.0, -30.0], [-0.4, -0.7, -0.1, -0.6], [-30.0, -7.0, -1.0, 0.0]])
    rows = [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    want = torch.tensor([[math.exp(-0.1)] * 4, [math.exp(0.05)] * 4, [1.0] * 4])
    for dtype in (torch.float32, torch.int64, torch.bool):
        got = expect_ratios(ch, log_prob, old_log_prob, torch.tensor(rows).to(dtype))
        assert close(got.detach(), want, atol=1e-5)
    # float64 log-probs keep their dtype (checked by `ratios`)
    expect_ratios(ch, log_prob.double(), old_log_prob.double(), torch.tensor(rows, dtype=torch.float64))
    # a batch with no valid token at all: every s is 1
    got = expect_ratios(ch, log_prob[2:], old_log_prob[2:], torch.zeros(1, 4))
    assert close(got.detach(), torch.ones(1, 4))


LOG_RATIOS = st.one_of(st.floats(-0.5, 0.5), st.floats(-5.0, 5.0), st.sampled_from([0.0, 12.0, -12.0, 30.0, -30.0]))


@st.composite
def gspo_batches(draw):
    rows, length = draw(st.integers(1, 5)), draw(st.integers(1, 8))
    old = draw(st.lists(st.floats(-10.0, 0.0), min_size=rows * length, max_size=rows * length))
    delta = draw(st.lists(LOG_RATIOS, min_size=rows * length, max_size=rows * length))
    if draw(st.booleans()):  # right padding, as a response mask
        lengths = [draw(st.integers(0, length)) for _ in range(rows)]
        mask = [[1 if t < n else 0 for t in range(length)] for n in lengths]
    else:  # any pattern: multi-turn masks have holes
        mask = [[int(draw(st.booleans())) for _ in range(length)] for _ in range(rows)]
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    mask_dtype = draw(st.sampled_from([dtype, torch.int64, torch.bool]))
    old_log_prob = torch.tensor(old, dtype=dtype).reshape(rows, length)
    log_prob = old_log_prob + torch.tensor(delta, dtype=dtype).reshape(rows, length)
    return log_prob, old_log_prob, torch.tensor(mask).to(mask_dtype)


@pytest.mark.exercise("11.1", "gspo_token_ratios")
@FUZZ
@given(batch=gspo_batches())
def test_gspo_agrees_with_minirl(ch, batch):
    log_prob, old_log_prob, mask = batch
    expect_ratios(ch, log_prob, old_log_prob, mask, FOUND)


# ----------------------------------------------------------------------------------------------
# 11.2 clip_cov_selection
# ----------------------------------------------------------------------------------------------


def cov_text(advantages, mask, ratio, lb, ub) -> str:
    return (f"clip_cov_selection(<a {advantages.shape[0]}x{advantages.shape[1]} batch, {int(mask.bool().sum())} "
            f"valid tokens>, clip_cov_ratio={ratio:g}, clip_cov_lb={lb:g}, clip_cov_ub={ub:g})")


def covariances(advantages, log_prob, mask, masked=True, per_row=False) -> torch.Tensor:
    """cov_t in float64; masked=False takes the means over every position, per_row=True over each row."""
    a, lp = advantages.detach().double(), log_prob.detach().double()
    m = mask.double() if masked else torch.ones_like(a)
    dim = {"dim": -1, "keepdim": True} if per_row else {}
    mean_a = (a * m).sum(**dim) / (m.sum(**dim) + 1e-8)
    mean_lp = (lp * m).sum(**dim) / (m.sum(**dim) + 1e-8)
    return (a - mean_a) * (lp - mean_lp)


def candidates(advantages, log_prob, mask, clipped, lb, ub, masked=True, per_row=False, skip_clipped=True,
               only_valid=True) -> torch.Tensor:
    """The (B, L) bool mask of Clip-Cov's candidates (or of a classic mistake's)."""
    cov = covariances(advantages, log_prob, mask, masked, per_row)
    out = (cov > lb) & (cov < ub)
    if only_valid:
        out &= mask.bool()
    if skip_clipped:
        out &= ~clipped
    return out


def budget(ratio, mask) -> int:
    return max(int(ratio * mask.bool().sum().item()), 1)


def pick(ch, args, seed: int) -> torch.Tensor:
    """Seed torch, call the reader's clip_cov_selection; check that it returned a (B, L) bool tensor."""
    advantages, log_prob, mask, clipped, ratio, lb, ub = args
    text = cov_text(advantages, mask, ratio, lb, ub)
    given = [advantages.clone(), log_prob.clone(), mask.clone(), clipped.clone()]
    torch.manual_seed(seed)
    out = call(ch.clip_cov_selection, *given, ratio, lb, ub)
    out = expect_tensor(out, tuple(advantages.shape), f"the mask returned by {text}")
    if out.dtype != torch.bool:
        fail(f"{text} returned a {out.dtype} tensor: return a bool mask, True on the picked tokens "
             "(torch.zeros_like(response_mask > 0) starts one).")
    for before, after, name in zip((advantages, log_prob, mask, clipped), given,
                                   ("advantages", "log_prob", "response_mask", "already_clipped")):
        untouched(before, after, name, text)
    return out


def want_pick(args, seed: int) -> torch.Tensor:
    """minirl's pick with this seed (checked against the grader's own candidates and budget)."""
    advantages, log_prob, mask, clipped, ratio, lb, ub = args
    torch.manual_seed(seed)
    want = minirl_clip_cov_selection(advantages, log_prob, mask, clipped, ratio, lb, ub)
    cand = candidates(advantages, log_prob, mask, clipped, lb, ub)
    assert not (want & ~cand).any() and want.sum() == min(budget(ratio, mask), int(cand.sum()))
    return want


def where(mask: torch.Tensor) -> list:
    return [tuple(p) for p in torch.nonzero(mask).tolist()]


def positions(mask: torch.Tensor) -> str:
    """The picked (row, column) pairs, the first 8 of them."""
    picked = where(mask)
    return str(picked) if len(picked) <= 8 else f"{str(picked[:8])[:-1]}, ... ({len(picked)} in all)]"


def why_pick(args, got, want) -> str:
    """What is wrong with the reader's pick, in a sentence."""
    advantages, log_prob, mask, clipped, ratio, lb, ub = args
    cand = candidates(advantages, log_prob, mask, clipped, lb, ub)
    k, count = budget(ratio, mask), int(cand.sum())
    picked = int(got.sum())
    variants = [
        (candidates(advantages, log_prob, mask, clipped, lb, ub, skip_clipped=False),
         "You selected among tokens PPO already clipped: a token of already_clipped is never a candidate (verl "
         "sets its cov to -inf)."),
        (candidates(advantages, log_prob, mask, clipped, lb, ub, masked=False),
         "The means must be over valid tokens only (masked_mean): the padding counted in mean(A) or mean(log_prob)."),
        (candidates(advantages, log_prob, mask, clipped, lb, ub, per_row=True),
         "The means run over the valid tokens of the whole BATCH, not of each row."),
        (candidates(advantages, log_prob, mask, clipped, lb, ub, only_valid=False),
         "You picked padding: only valid tokens (response_mask > 0) are candidates."),
    ]
    right_form = not (got & ~cand).any() and picked == min(k, count)  # the right number, among the candidates
    fits = [sentence for variant, sentence in variants  # or a right pick among a wrong set of candidates
            if not right_form and not torch.equal(variant, cand) and not (got & ~variant).any()
            and picked == min(k, int(variant.sum()))]
    if fits:
        return " Or: ".join(fits[:2])
    outside = got & ~cand
    if outside.any():
        cov = covariances(advantages, log_prob, mask)
        b, t = where(outside)[0]
        state = ("padding" if not mask[b, t] else "already clipped by PPO" if clipped[b, t] else
                 f"cov = {cov[b, t].item():.4g}, outside ({lb:g}, {ub:g})")
        return (f"Token {(b, t)} is not a candidate ({state}): pick only valid, not already clipped tokens with "
                f"clip_cov_lb < cov_t < clip_cov_ub.")
    expected = min(k, count)
    if picked != expected:
        valid = int(mask.bool().sum())
        if picked == 0:
            return (f"You picked nothing among {count} candidates: verl picks k = max(int(clip_cov_ratio * valid "
                    f"tokens), 1) = {k}, at least one.")
        if picked == count and count > k:
            return (f"You picked every candidate ({count}): keep only k = max(int(clip_cov_ratio * valid tokens), "
                    f"1) = {k} of them, drawn at random.")
        if picked == min(max(int(ratio * mask.numel()), 1), count):
            return (f"Your k counts all B * L = {mask.numel()} positions: verl's counts the {valid} valid tokens, "
                    f"k = max(int(clip_cov_ratio * response_mask.sum()), 1) = {k}.")
        if picked in (min(max(round(ratio * valid), 1), count), min(max(math.ceil(ratio * valid), 1), count)):
            return (f"k rounds DOWN: int(clip_cov_ratio * valid tokens) = int({ratio * valid:g}), then at least 1: "
                    f"k = {k}.")
        return (f"You picked {picked} tokens; expected min(k, candidates) = {expected} (k = max(int({ratio:g} * "
                f"{valid}), 1) = {k}, {count} candidates).")
    cov = covariances(advantages, log_prob, mask)
    top = torch.zeros_like(cand)
    if count:
        flat = torch.nonzero(cand.reshape(-1)).squeeze(-1)
        top.view(-1)[flat[torch.topk(cov.reshape(-1)[flat], min(k, count)).indices]] = True
    if torch.equal(got, top) and not torch.equal(want, top):
        return ("You took the top-k covariances: Clip-Cov draws at random among the candidates (KL-Cov takes the "
                "top-k).")
    return ("Your pick is a valid one, but not the draw verl makes with this seed: list the candidates with "
            "torch.nonzero (row-major order), draw ONE torch.randperm(number of candidates) from torch's global "
            "generator, and keep candidates[perm[:k]] (no generator of your own, no other random call).")


def expect_pick(ch, args, seed: int = 0, found_by: str = "") -> torch.Tensor:
    """Fail, saying what is wrong, unless the reader's pick is minirl's (verl's) with the same seed."""
    got = pick(ch, args, seed)
    want = want_pick(args, seed)
    if torch.equal(got, want):
        return got
    advantages, _, mask, _, ratio, lb, ub = args
    fail(f"{cov_text(advantages, mask, ratio, lb, ub)} with torch.manual_seed({seed}): expected the tokens "
         f"{positions(want)}, got {positions(got)}. {why_pick(args, got, want)}{found_by}")


# The toy batch. Valid tokens: A = (2, 2, 2 | -3, -3), mean 0; log_prob = (-0.5, -1, -3 | -1, -4.5), mean -2;
# cov = (3, 2, -2 | -3, 7.5). Padding holds junk (A = 9, log_prob = -9) that must not move the means.
TOY_A = torch.tensor([[2.0, 2.0, 2.0, 9.0], [-3.0, -3.0, 9.0, 9.0]])
TOY_LP = torch.tensor([[-0.5, -1.0, -3.0, -9.0], [-1.0, -4.5, -9.0, -9.0]])
TOY_MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])


@pytest.mark.exercise("11.2", "clip_cov_selection")
def test_clip_cov_toy(ch):
    none = torch.zeros(2, 4, dtype=torch.bool)
    # bounds (1, 5): candidates cov 3 and 2 (7.5 is above 5); k = max(int(0.5 * 5), 1) = 2: both are picked
    got = expect_pick(ch, (TOY_A, TOY_LP, TOY_MASK, none, 0.5, 1.0, 5.0))
    assert where(got) == [(0, 0), (0, 1)]
    # PPO already clipped (0, 1) and the padding (0, 3): only (0, 0) remains
    clipped = torch.tensor([[False, True, False, True], [False, False, False, False]])
    got = expect_pick(ch, (TOY_A, TOY_LP, TOY_MASK, clipped, 0.5, 1.0, 5.0))
    assert where(got) == [(0, 0)]
    # bounds (2.5, 8): cov 3 and 7.5
    got = expect_pick(ch, (TOY_A, TOY_LP, TOY_MASK, none, 0.5, 2.5, 8.0))
    assert where(got) == [(0, 0), (1, 1)]


def random_batch(seed: int, rows: int, length: int, ragged: bool = True, clipped_fraction: float = 0.2):
    g = torch.Generator().manual_seed(seed)
    advantages = 2.0 * torch.randn(rows, length, generator=g)
    log_prob = -4.0 * torch.rand(rows, length, generator=g)
    if ragged:
        lengths = torch.randint(0, length + 1, (rows,), generator=g)
        mask = (torch.arange(length)[None] < lengths[:, None]).float()
    else:
        mask = torch.ones(rows, length)
    clipped = (torch.rand(rows, length, generator=g) < clipped_fraction) & mask.bool()
    advantages = torch.where(mask.bool(), advantages, 7.0)  # junk on padding
    log_prob = torch.where(mask.bool(), log_prob, -11.0)
    return advantages, log_prob, mask, clipped


@pytest.mark.exercise("11.2", "clip_cov_selection")
def test_clip_cov_draws_at_random(ch):
    advantages, log_prob, mask, clipped = random_batch(112, 8, 10, ragged=False)
    args = (advantages, log_prob, mask, clipped, 0.05, 0.5, 6.0)  # k = int(0.05 * 80) = 4 of many candidates
    assert int(candidates(*args[:4], 0.5, 6.0).sum()) > 8
    for seed in range(4):
        expect_pick(ch, args, seed)


@pytest.mark.exercise("11.2", "clip_cov_selection")
def test_clip_cov_budget_counts_valid_tokens(ch):
    # 40 valid tokens of 100 positions, every valid token a candidate (bounds (-1e9, 1e9), nothing clipped)
    g = torch.Generator().manual_seed(113)
    advantages, log_prob = torch.randn(4, 25, generator=g), -torch.rand(4, 25, generator=g)
    mask = (torch.arange(25)[None] < torch.tensor([25, 10, 5, 0])[:, None]).float()
    none = torch.zeros(4, 25, dtype=torch.bool)
    # k = int(0.1 * 40) = 4 (all positions would give 10); int(0.07 * 40) = int(2.8) = 2; 0.001 * 40 = 0.04: k = 1
    for ratio in (0.1, 0.07, 0.001):
        got = expect_pick(ch, (advantages, log_prob, mask, none, ratio, -1e9, 1e9), seed=7)
        assert int(got.sum()) == budget(ratio, mask)


@pytest.mark.exercise("11.2", "clip_cov_selection")
def test_clip_cov_edge_cases(ch):
    none = torch.zeros(2, 4, dtype=torch.bool)
    # no candidate (bounds (10, 20) hold no cov): nothing is picked, and nothing crashes
    got = expect_pick(ch, (TOY_A, TOY_LP, TOY_MASK, none, 0.5, 10.0, 20.0))
    assert not got.any()
    # every candidate already clipped: nothing is picked
    expect_pick(ch, (TOY_A, TOY_LP, TOY_MASK, TOY_MASK.bool(), 0.5, 1.0, 5.0))
    # no valid token at all: nothing is picked (the means are 0 / (0 + 1e-8) = 0, not NaN)
    expect_pick(ch, (TOY_A, TOY_LP, torch.zeros(2, 4), none, 0.5, -1e9, 1e9))
    # the mask as int64 or bool; log_prob carrying a gradient (the pick carries none)
    for dtype in (torch.int64, torch.bool):
        expect_pick(ch, (TOY_A, TOY_LP, TOY_MASK.to(dtype), none, 0.5, 1.0, 5.0))
    expect_pick(ch, (TOY_A, TOY_LP.clone().requires_grad_(True), TOY_MASK, none, 0.5, 1.0, 5.0))


BOUNDS = [(1.0, 5.0), (0.0, 2.0), (-1.0, 1.0), (0.5, 50.0), (2.0, 3.0)]


@pytest.mark.exercise("11.2", "clip_cov_selection")
@FUZZ
@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 6), length=st.integers(1, 12), ragged=st.booleans(),
       clipped_fraction=st.sampled_from([0.0, 0.2, 0.6]), ratio=st.sampled_from([0.0002, 0.05, 0.1, 0.3, 1.0]),
       bounds=st.sampled_from(BOUNDS), dtype=st.sampled_from([torch.float32, torch.int64, torch.bool]))
def test_clip_cov_agrees_with_minirl(ch, seed, rows, length, ragged, clipped_fraction, ratio, bounds, dtype):
    advantages, log_prob, mask, clipped = random_batch(seed, rows, length, ragged, clipped_fraction)
    lb, ub = bounds
    cov = covariances(advantages, log_prob, mask)[mask.bool()]
    assume(not ((cov - lb).abs() < 1e-4).any() and not ((cov - ub).abs() < 1e-4).any())  # rounding decides those
    expect_pick(ch, (advantages, log_prob, mask.to(dtype), clipped, ratio, lb, ub), seed % 1000, FOUND)


# ----------------------------------------------------------------------------------------------
# 11.3 opo_advantages
# ----------------------------------------------------------------------------------------------


def opo_batch(scores, lengths, length=5, dtype=torch.float32):
    """Rewards on each row's last valid token (none on an empty row), right-padded masks."""
    mask = (torch.arange(length)[None] < torch.tensor(lengths)[:, None]).to(dtype)
    rewards = torch.zeros(len(scores), length, dtype=dtype)
    for i, (score, n) in enumerate(zip(scores, lengths)):
        if n:
            rewards[i, n - 1] = score
    return rewards, mask


def opo_text(rewards, mask, index) -> str:
    labels = list(index)
    if len(labels) > 8:
        return f"opo_advantages(<a batch of {len(labels)} answers>)"
    return (f"opo_advantages(scores {rounded(rewards.sum(-1), 3)}, lengths {[int(v) for v in mask.sum(-1)]}, "
            f"index={labels})")


def per_row(advantages, mask) -> torch.Tensor:
    """The scalar each row was given (constant over its valid tokens; NaN for a row with no valid token)."""
    m = mask.double()
    return (advantages.double() * m).sum(-1) / m.sum(-1)


def opo(ch, rewards, mask, index) -> torch.Tensor:
    """Call the reader's opo_advantages; check that it returned (B, L) floats of the rewards' dtype."""
    text = opo_text(rewards, mask, index)
    given_rewards, given_mask = rewards.clone(), mask.clone()
    out = call(ch.opo_advantages, given_rewards, given_mask, index)
    if isinstance(out, tuple | list):
        fail(f"{text} returned a {type(out).__name__}: return only the advantages, one (B, L) tensor (verl's "
             "function returns the same tensor twice, as advantages and returns).")
    out = expect_tensor(out, tuple(rewards.shape), f"the advantages returned by {text}")
    if out.dtype != rewards.dtype:
        fail(f"{text} returned {out.dtype} advantages for {rewards.dtype} rewards: keep the rewards' dtype.")
    untouched(rewards, given_rewards, "token_level_rewards", text)
    untouched(mask, given_mask, "response_mask", text)
    return out


def group_rows(index) -> list:
    labels = list(index)
    return [torch.tensor([other == label for other in labels]) for label in dict.fromkeys(labels)]


def baselines(scores, lengths, index, rule: str) -> torch.Tensor:
    """Per-row advantages under a rule: 'opo' (the right one) or a classic mistake's."""
    out = torch.empty_like(scores)
    groups = group_rows(index) if rule != "batch" else [torch.ones(len(scores), dtype=torch.bool)]
    for rows in groups:
        r, n = scores[rows], lengths[rows]
        weighted = (n * r).sum() / n.sum()
        if len(r) == 1 and rule != "zero_singleton":
            a = r.clone()
        elif rule == "mean":
            a = r - r.mean()
        elif rule == "leave_one_out":
            a = r - ((n * r).sum() - n * r) / (n.sum() - n)
        elif rule in ("std", "biased_std"):
            a = (r - weighted) / (r.std(unbiased=rule == "std") + 1e-6)
        else:  # opo, batch, zero_singleton
            a = r - weighted
        out[rows] = a
    return out


def why_opo(rewards, mask, index, got) -> str:
    """The classic mistake that gives exactly `got`, in a sentence, or ''."""
    scores, m = rewards.double().sum(-1), mask.double()
    lengths = m.sum(-1)
    want = baselines(scores, lengths, index, "opo").unsqueeze(-1) * m

    def spread(rule):
        return baselines(scores, lengths, index, rule).unsqueeze(-1) * m

    mistakes = [
        (spread("mean"), "you used the plain group mean: OPO weights each answer's reward by its length, "
                         "b = sum_j L_j R_j / sum_j L_j."),
        (spread("leave_one_out"), "you left answer i out of its own baseline (RLOO's rule): OPO's weighted mean "
                                  "includes it."),
        (spread("std"), "you divided by the group's std: OPO only subtracts the baseline (no std, no whitening)."),
        (spread("biased_std"), "you divided by the group's std: OPO only subtracts the baseline (no std, no "
                               "whitening)."),
        (spread("zero_singleton"), "a group of one got advantage 0 (or NaN): OPO gives it no baseline, A = R "
                                   "(verl sets b = 0)."),
        (spread("batch"), "you took the weighted mean of the whole batch: the baseline is per group, over the rows "
                          "sharing index[i]."),
        (baselines(scores, lengths, index, "opo").unsqueeze(-1).expand_as(m),
         "padding is not 0: multiply the advantages by response_mask."),
    ]
    return first_hints(mistakes, got.double(), want, lambda a, b: same(a, b, atol=1e-5, rtol=1e-4))


def want_opo(rewards, mask, index) -> torch.Tensor:
    """minirl's advantages (checked against the grader's own rule)."""
    want, _ = compute_opo_outcome_advantage(rewards, mask, index)
    scores, lengths = rewards.double().sum(-1), mask.double().sum(-1)
    assert same(want, baselines(scores, lengths, index, "opo").unsqueeze(-1) * mask.double(), atol=1e-5, rtol=1e-4)
    return want


def expect_opo(ch, rewards, mask, index, found_by: str = "") -> torch.Tensor:
    """Fail, naming the first wrong row and the likely mistake, unless the reader agrees with minirl (verl)."""
    text = opo_text(rewards, mask, index)
    got = opo(ch, rewards, mask, index)
    want = want_opo(rewards, mask, index)
    if same(got, want, atol=1e-5, rtol=1e-4):
        return got
    labels = list(index)
    for b in range(len(want)):
        if same(got[b], want[b], atol=1e-5, rtol=1e-4):
            continue
        row = f"row {b} (group {labels[b]!r}, score {rewards[b].sum().item():.4g}, length {int(mask[b].sum())})"
        fail(f"{text}: {row} expected {rounded(want[b])}, got {rounded(got[b])}."
             f"{why_opo(rewards, mask, index, got)}{found_by}")
    return got


@pytest.mark.exercise("11.3", "opo_advantages")
def test_opo_toy(ch):
    # group a: scores (1, 0, 1), lengths (2, 4, 2): b = (2 + 0 + 2) / 8 = 0.5 (the plain mean would be 2/3)
    # group c: scores (0.8, 0.2), lengths (1, 3): b = (0.8 + 0.6) / 4 = 0.35; solo: A = R = 0.3
    index = ["a", "c", "a", "solo", "a", "c"]
    rewards, mask = opo_batch([1.0, 0.8, 0.0, 0.3, 1.0, 0.2], [2, 1, 4, 3, 2, 3])
    got = expect_opo(ch, rewards, mask, index)
    assert close(per_row(got, mask), torch.tensor([0.5, 0.45, -0.5, 0.3, 0.5, -0.15]), atol=1e-5)


@pytest.mark.exercise("11.3", "opo_advantages")
def test_opo_equal_lengths_is_grpo_without_std(ch):
    # equal lengths: b is the plain group mean, and there is no std: scores (0, 1, 1, 1) give (-0.75, 0.25, ...)
    index = np.array(["x", "y"] * 4, dtype=object)  # verl's uids: a numpy object array, the groups interleaved
    rewards, mask = opo_batch([0.0, 0.5, 1.0, 0.1, 1.0, 0.6, 1.0, 0.2], [3] * 8, length=4)
    got = expect_opo(ch, rewards, mask, index)
    assert close(per_row(got, mask), torch.tensor([-0.75, 0.15, 0.25, -0.25, 0.25, 0.25, 0.25, -0.15]), atol=1e-5)


@pytest.mark.exercise("11.3", "opo_advantages")
def test_opo_singletons_and_empty_answers(ch):
    # solo: a group of one keeps its score; empty_solo: a group of one with no token, a row of 0
    # g: the empty answer (length 0) weighs nothing: b = (2 * 1 + 3 * 0) / 5 = 0.4 (the plain mean: 1/3); its row is 0
    # void: a group whose answers are all empty has b = 0 / 0 = NaN, and NaN rows, as in verl
    index = ["solo", "g", "g", "g", "empty_solo", "void", "void"]
    rewards, mask = opo_batch([0.7, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0], [3, 2, 3, 0, 0, 0, 0])
    got = opo(ch, rewards, mask, index)
    g = got.double()
    if not close(per_row(got, mask)[:1], torch.tensor([0.7])):
        fail(f"{opo_text(rewards, mask, index)}: the group of one 'solo' (score 0.7) must keep its score, A = R = 0.7; "
             f"got {rounded(got[0])}. OPO gives a group of one no baseline (verl sets b = 0).")
    if g[4].isnan().any() or g[4].any():
        fail(f"{opo_text(rewards, mask, index)}: the group of one 'empty_solo' has no valid token, so its row must be "
             f"0 (A = R, times a mask of zeros); got {rounded(got[4])}. A group of one has no baseline: do not "
             "compute the weighted mean 0 / 0 for it.")
    if g[3].isnan().any() or g[3].any():
        fail(f"{opo_text(rewards, mask, index)}: row 3 is an empty answer (length 0): its advantages are 0 "
             f"(times the mask); got {rounded(got[3])}.")
    expect_opo(ch, rewards[:5], mask[:5], index[:5])  # the answers outside 'void' first
    if not g[5:].isnan().all():
        fail(f"{opo_text(rewards, mask, index)}: group 'void' has only empty answers: verl's baseline is 0 / 0 = NaN "
             f"and so are its rows (NaN * 0 is NaN); got {table(got[5:])}. Do not add an epsilon to sum_j L_j.")
    expect_opo(ch, rewards, mask, index)


@st.composite
def opo_batches(draw):
    rows, length = draw(st.integers(1, 10)), draw(st.integers(1, 6))
    labels = draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=rows, max_size=rows))
    scores = draw(st.lists(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(-2.0, 2.0)), min_size=rows,
                           max_size=rows))
    lengths = draw(st.lists(st.integers(0, length), min_size=rows, max_size=rows))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    rewards, mask = opo_batch(scores, lengths, length, dtype)
    if draw(st.booleans()):  # a small reward on every valid token too: the score is the sum over the row
        rewards = rewards + 0.01 * mask
    if draw(st.booleans()):
        mask = mask.long()
    index = np.array(labels, dtype=object) if draw(st.booleans()) else labels
    return rewards, mask, index


@pytest.mark.exercise("11.3", "opo_advantages")
@FUZZ
@given(batch=opo_batches())
def test_opo_agrees_with_minirl(ch, batch):
    rewards, mask, index = batch
    expect_opo(ch, rewards, mask, index, FOUND)
