"""Grades exercises/ch09_rollout_corr.py (or solutions/ with --target solutions)."""

import math
import numbers

import pytest
import torch
from grading import call, close, expect_tensor, fail, load_chapter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirl.rollout_correction import compute_rollout_correction_weights as minirl_is_weights
from minirl.rollout_correction import compute_rollout_rejection_mask as minirl_rejection_mask


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch09_rollout_corr")


# Every fuzz test sees the same 200 cases on every run (derandomize): a grade does not change between runs.
FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None, report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

ESS_KEY = "rollout_corr/rollout_is_eff_sample_size"
BOUND = 20.0  # verl's SAFETY_BOUND: log-ratios are clamped to [-20, 20] before exp


def rounded(values) -> list:
    return [round(float(v), 4) for v in values]


def shown(log_ratio: torch.Tensor, mask: torch.Tensor) -> str:
    """The batch, small enough to print, as the learner passed it."""
    if log_ratio.numel() > 24:
        return f"<a {log_ratio.shape[0]}x{log_ratio.shape[1]} batch>"
    rows = [[round(float(v), 4) for v in row] for row in log_ratio.tolist()]
    masks = [[int(v) for v in row] for row in mask.tolist()]
    return f"log_ratio={rows}, response_mask={masks} ({mask.dtype})"


def untouched(before: torch.Tensor, after: torch.Tensor, name: str, text: str):
    if not torch.equal(before, after):
        fail(f"{text} changed its input {name} in place (an in-place op such as clamp_ or mul_?). The trainer "
             f"uses {name} again after this call: compute on a copy, or with out-of-place ops.")


def masked_mean64(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return torch.where(m.bool(), x, 0.0).sum() / (m.sum() + 1e-8)


# ----------------------------------------------------------------------------------------------
# 9.1 truncated_is_weights
# ----------------------------------------------------------------------------------------------


def is_text(log_ratio, mask, threshold) -> str:
    return f"truncated_is_weights({shown(log_ratio, mask)}, threshold={threshold:g})"


def is_weights(ch, log_ratio: torch.Tensor, mask: torch.Tensor, threshold: float):
    """Call the reader's truncated_is_weights; check that it returned ((B, L) float weights, a float)."""
    text = is_text(log_ratio, mask, threshold)
    given_ratio, given_mask = log_ratio.clone(), mask.clone()
    out = call(ch.truncated_is_weights, given_ratio, given_mask, threshold)
    if not isinstance(out, tuple | list) or len(out) != 2:
        fail(f"{text} returned {type(out).__name__}; return a pair (weights, ess).")
    weights, ess = out
    weights = expect_tensor(weights, tuple(log_ratio.shape), f"the weights of {text}")
    if not weights.is_floating_point():
        fail(f"{text} returned {weights.dtype} weights: weights are fractions (exp of the log-ratio), return floats.")
    if isinstance(ess, torch.Tensor):
        fail(f"{text} returned ess as a torch.Tensor: return a Python float (ess.item()), the number verl logs.")
    if not isinstance(ess, numbers.Real) or isinstance(ess, bool):
        fail(f"{text} returned ess = {ess!r} ({type(ess).__name__}); return a Python float.")
    untouched(log_ratio, given_ratio.detach(), "log_ratio", text)
    untouched(mask, given_mask, "response_mask", text)
    return weights, float(ess)


def want_is(log_ratio: torch.Tensor, mask: torch.Tensor, threshold: float) -> tuple[torch.Tensor, float]:
    """minirl's weights and ESS (checked against the formula of verl's compute_rollout_correction_weights)."""
    weights, metrics = minirl_is_weights(log_ratio.detach(), mask, "token", float(threshold))
    m = mask.double()
    formula = (torch.exp(log_ratio.detach().double().clamp(-BOUND, BOUND)) * m).clamp(max=threshold)
    assert close(weights, formula, atol=1e-6, rtol=1e-5)  # the grader's own formula agrees with minirl
    return weights, metrics[ESS_KEY]


def ess_from(w: torch.Tensor, m: torch.Tensor) -> float:
    """verl's compute_is_metrics: 1 / masked_mean((w / (masked_mean(w) + 1e-8))^2)."""
    return 1.0 / masked_mean64((w / (masked_mean64(w, m) + 1e-8)).square(), m).item()


def why_weights(log_ratio, mask, threshold, got) -> str:
    """The classic mistake that gives exactly `got`, in a sentence, or ''."""
    lr, m = log_ratio.detach().double(), mask.double()
    safe = lr.clamp(-BOUND, BOUND)
    raw = torch.exp(safe)
    want = (raw * m).clamp(max=threshold)
    mistakes = [
        (raw * m, "you did not truncate: w = min(exp(l), threshold). Cap each weight at the threshold, "
                  "w.clamp(max=threshold)."),
        (raw.clamp(max=threshold), "you forgot the mask: padding tokens got a weight. Multiply by response_mask, "
                                   "so that padding weighs 0."),
        (torch.clamp(raw, min=min(1 / threshold, threshold), max=threshold) * m,
         "you clipped both sides, to [1/threshold, threshold]: TIS cuts only LARGE weights. A weight below the "
         "threshold stays as it is."),
        (raw.clamp(min=threshold) * m, "you used clamp(min=threshold): that raises the small weights. Cut the "
                                       "large ones: clamp(max=threshold)."),
        (torch.exp(-safe).clamp(max=threshold) * m, "your ratio is upside down: w = exp(log_ratio) = "
                                                    "pi_train / pi_rollout, not exp(-log_ratio)."),
        (torch.exp(lr).clamp(max=threshold) * m, "you did not clamp the log-ratio to [-20, 20] before exp: verl "
                                                 "does, so a weight never exceeds exp(20)."),
        (safe.clamp(max=threshold) * m, "you truncated the log-ratio itself: the weight is exp(log_ratio), "
                                        "then min(weight, threshold)."),
    ]
    hints = [hint for wrong, hint in mistakes if close(got, wrong, atol=1e-6) and not close(wrong, want, atol=1e-6)]
    hints = list(dict.fromkeys(hints))[:2]
    return "".join(" " + ("" if i == 0 else "Or: ") + hint[0].upper() + hint[1:] for i, hint in enumerate(hints))


def why_ess(log_ratio, mask, threshold, got: float) -> str:
    """The classic mistake that gives exactly `got` for the ESS, in a sentence, or ''."""
    lr, m = log_ratio.detach().double(), mask.double()
    raw = torch.exp(lr.clamp(-BOUND, BOUND)) * m
    w = raw.clamp(max=threshold)
    want = ess_from(w, m)
    n, positions = m.sum().item(), m.numel()
    mistakes = [
        (ess_from(raw, m), "you computed the ESS from the raw ratios, before truncation. verl computes it from the "
                           "truncated weights, the ones the loss uses."),
        (want * n, "that is a count of tokens (Kish's ESS, (sum w)^2 / sum w^2). verl reports a fraction between 0 "
                   "and 1: it divides by the number of valid tokens, ess = 1 / masked_mean((w / mean_w)^2)."),
        (want * n / positions, "you averaged over all B * L positions, padding included. Both means run over the "
                               "valid tokens only (masked means)."),
        (1.0 / masked_mean64(w.square(), m).item(), "you did not divide the weights by their mean first: "
                                                    "ess = 1 / masked_mean((w / mean_w)^2)."),
        (1.0 / want, "you returned masked_mean((w / mean_w)^2); the ESS is one over it."),
    ]
    hints = [hint for wrong, hint in mistakes
             if math.isclose(got, wrong, rel_tol=1e-4, abs_tol=1e-7) and not math.isclose(wrong, want, rel_tol=1e-4)]
    hints = list(dict.fromkeys(hints))[:2]
    return "".join(" " + ("" if i == 0 else "Or: ") + hint[0].upper() + hint[1:] for i, hint in enumerate(hints))


def expect_is(ch, log_ratio, mask, threshold, found_by: str = ""):
    """Fail, naming the first wrong token and the likely mistake, unless the reader agrees with minirl (verl)."""
    text = is_text(log_ratio, mask, threshold)
    weights, ess = is_weights(ch, log_ratio, mask, threshold)
    got = weights.detach()
    want, want_ess = want_is(log_ratio, mask, threshold)
    if not torch.isfinite(got).all():
        b, t = (~torch.isfinite(got)).nonzero()[0].tolist()
        fail(f"{text}: the weight of token ({b}, {t}) is {got[b, t].item()} (log_ratio {log_ratio[b, t].item():g}). "
             "Clamp the log-ratio to [-20, 20] BEFORE exp: exp(1000) is inf, and inf * 0 is NaN, even in padding."
             f"{found_by}")
    if not close(got, want, atol=1e-6, rtol=1e-5):
        bad = ~torch.isclose(got.double(), want.double(), atol=1e-6, rtol=1e-5)
        b, t = bad.nonzero()[0].tolist()
        where = "a valid token" if mask[b, t] else "padding (response_mask is 0 there)"
        fail(f"{text}: token ({b}, {t}), {where} with log_ratio {log_ratio[b, t].item():.6g}, got weight "
             f"{got[b, t].item():.6g}, expected {want[b, t].item():.6g} (min(exp(clamp(l, -20, 20)), "
             f"{threshold:g}) * mask).{why_weights(log_ratio, mask, threshold, got)}{found_by}")
    if not math.isclose(ess, want_ess, rel_tol=1e-4, abs_tol=1e-7):
        fail(f"{text}: the weights are right, but ess = {ess:.6g}, expected {want_ess:.6g} (verl's "
             f"rollout_is_eff_sample_size).{why_ess(log_ratio, mask, threshold, ess)}{found_by}")
    return weights, ess


@pytest.mark.exercise("9.1", "truncated_is_weights")
def test_truncated_is_toy(ch):
    log_ratio = torch.tensor([[0.0, math.log(1.5), math.log(3.0), math.log(0.5)],
                              [math.log(4.0), 0.2, 9.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    # weights: [[1, 1.5, 2 (cut from 3), 0.5], [2 (cut from 4), e^0.2, 0, 0]]
    expect_is(ch, log_ratio, mask, 2.0)


@pytest.mark.exercise("9.1", "truncated_is_weights")
def test_truncated_is_padding_weighs_zero(ch):
    # padding holds huge log-ratios: exp(1000) is inf, and inf * 0 is NaN
    log_ratio = torch.tensor([[0.3, -0.2, 50.0, 1000.0], [0.1, -1000.0, 25.0, 0.0], [2.0, 0.5, -0.4, 0.0]])
    rows = [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]]
    for dtype in (torch.float32, torch.int64, torch.bool):
        mask = torch.tensor(rows).to(dtype)
        weights, _ = expect_is(ch, log_ratio, mask, 2.0)
        padding = weights.detach()[~mask.bool()]
        if (padding != 0).any():
            fail(f"{is_text(log_ratio, mask, 2.0)}: padding tokens got weights {rounded(padding)}; each must be "
                 "exactly 0. Multiply by response_mask.")


@pytest.mark.exercise("9.1", "truncated_is_weights")
def test_truncated_is_cuts_only_large_weights(ch):
    log_ratio = torch.tensor([[-2.0, -0.5, 0.0, 0.3, 1.0, 2.5, 30.0, -30.0]])
    mask = torch.ones_like(log_ratio)
    # a threshold below 1 cuts even the weight 1 of an on-policy token; a huge one leaves only the [-20, 20] bound
    for threshold in (0.5, 0.9, 1.0, 1.5, 5.0, 1e12):
        weights, _ = expect_is(ch, log_ratio, mask, threshold)
        if (weights.detach() > threshold * (1 + 1e-6)).any():
            fail(f"{is_text(log_ratio, mask, threshold)}: a weight exceeds the threshold ({rounded(weights[0])}). "
                 "Cap each weight: w.clamp(max=threshold).")


@pytest.mark.exercise("9.1", "truncated_is_weights")
def test_truncated_is_weights_are_detached(ch):
    g = torch.Generator().manual_seed(91)
    log_ratio = (0.5 * torch.randn(3, 5, generator=g)).requires_grad_(True)
    mask = torch.tensor([[1.0] * 5, [1.0] * 3 + [0.0] * 2, [1.0] + [0.0] * 4])
    weights, _ = is_weights(ch, log_ratio, mask, 2.0)
    if weights.requires_grad:
        fail("the weights carry a gradient (requires_grad=True). IS weights rescale the loss; they are not "
             "trained through. Return weights.detach(), as verl does.")
    expect_is(ch, log_ratio, mask, 2.0)


@pytest.mark.exercise("9.1", "truncated_is_weights")
def test_eff_sample_size_toy(ch):
    # equal weights: the ESS is 1, whatever the number of tokens
    log_ratio = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    _, ess = is_weights(ch, log_ratio, mask, 2.0)
    if not math.isclose(ess, 1.0, rel_tol=1e-5):
        hint = (" That is the number of valid tokens: verl reports a fraction, 1 / masked_mean((w / mean_w)^2)."
                if math.isclose(ess, 5.0, rel_tol=1e-4) else "")
        fail(f"{is_text(log_ratio, mask, 2.0)}: every valid weight is 1, so the ESS is 1.0; got {ess:.6g}.{hint}")
    expect_is(ch, log_ratio, mask, 2.0)
    # one large ratio, cut at 2: truncated weights (2, 1, 1, 1, 1, 1) give 0.9074; the raw ones (10, 1, ...) 0.357
    log_ratio = torch.tensor([[math.log(10.0), 0.0, 0.0, 0.0], [0.0, 0.0, 5.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    _, ess = expect_is(ch, log_ratio, mask, 2.0)
    assert math.isclose(ess, (49 / 36) / 1.5, rel_tol=1e-4)


LOG_RATIOS = st.one_of(st.floats(-0.3, 0.3), st.floats(-4.0, 4.0),
                       st.sampled_from([0.0, 25.0, -25.0, 60.0, -60.0, 1000.0, -1000.0]))


@st.composite
def ragged_batches(draw, need_valid: bool, thresholds):
    rows, length = draw(st.integers(1, 5)), draw(st.integers(1, 8))
    values = draw(st.lists(LOG_RATIOS, min_size=rows * length, max_size=rows * length))
    if draw(st.booleans()):  # right padding, as a response mask
        lengths = [draw(st.integers(0, length)) for _ in range(rows)]
        mask = [[1 if t < n else 0 for t in range(length)] for n in lengths]
    else:  # any pattern: multi-turn masks have holes
        mask = [[int(draw(st.booleans())) for _ in range(length)] for _ in range(rows)]
    if need_valid and not any(map(any, mask)):
        mask[draw(st.integers(0, rows - 1))][draw(st.integers(0, length - 1))] = 1
    dtype = draw(st.sampled_from([torch.float32, torch.int64, torch.bool]))
    log_ratio = torch.tensor(values, dtype=torch.float32).reshape(rows, length)
    return log_ratio, torch.tensor(mask).to(dtype), draw(thresholds)


@pytest.mark.exercise("9.1", "truncated_is_weights")
@FUZZ
@given(batch=ragged_batches(need_valid=True, thresholds=st.one_of(
    st.sampled_from([0.2, 0.5, 1.0, 1.2, 2.0, 5.0, 1e12]), st.floats(0.1, 10.0))))
def test_truncated_is_agrees_with_minirl(ch, batch):
    log_ratio, mask, threshold = batch
    expect_is(ch, log_ratio, mask, threshold, " (a failing batch found by hypothesis, shrunk)")


# ----------------------------------------------------------------------------------------------
# 9.2 sequence_rejection_mask
# ----------------------------------------------------------------------------------------------


def rs_text(log_ratio, mask, threshold) -> str:
    return f"sequence_rejection_mask({shown(log_ratio, mask)}, threshold={threshold:g})"


def rejection(ch, log_ratio: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """Call the reader's sequence_rejection_mask; check that it returned a (B, L) mask of response_mask's dtype."""
    text = rs_text(log_ratio, mask, threshold)
    given_ratio, given_mask = log_ratio.clone(), mask.clone()
    out = call(ch.sequence_rejection_mask, given_ratio, given_mask, threshold)
    if isinstance(out, tuple | list):
        fail(f"{text} returned a {type(out).__name__}; return only the new mask, one tensor (minirl's "
             "compute_rollout_rejection_mask also returns metrics, this exercise does not).")
    out = expect_tensor(out, tuple(log_ratio.shape), f"the mask returned by {text}")
    if out.dtype != mask.dtype:
        fail(f"{text} returned a {out.dtype} mask for a {mask.dtype} response_mask: keep its dtype, "
             ".to(response_mask.dtype). The new mask replaces the old one in the batch.")
    untouched(log_ratio, given_ratio, "log_ratio", text)
    untouched(mask, given_mask, "response_mask", text)
    return out


def seq_stat(log_ratio, mask, kind="k3", agg="mean", clamp=True, masked=True) -> torch.Tensor:
    """One statistic per row, (B,), in float64: a per-token divergence summed or averaged over the row."""
    lr = log_ratio.double()
    if clamp:
        lr = lr.clamp(-BOUND, BOUND)
    per_token = {"k3": torch.exp(lr) - 1.0 - lr, "k2": 0.5 * lr**2, "k1": -lr, "l": lr}[kind]
    valid = mask.bool() if masked else torch.ones_like(mask, dtype=torch.bool)
    total = torch.where(valid, per_token, 0.0).sum(-1)
    return total if agg == "sum" else total / (valid.sum(-1) + 1e-8)


def rows_kept(stat, mask, threshold) -> torch.Tensor:
    """The new mask, in float64, when each row is kept iff its statistic is <= threshold."""
    return mask.double() * (stat <= threshold).double().unsqueeze(-1)


def want_rejection(log_ratio, mask, threshold) -> torch.Tensor:
    """minirl's mask (checked against verl's seq_mean_k3 rule)."""
    new, _ = minirl_rejection_mask(log_ratio, mask, "seq_mean_k3", float(threshold))
    stat = seq_stat(log_ratio, mask)
    formula = rows_kept(stat, mask, threshold)
    border = (stat - threshold).abs() <= 1e-5 * max(1.0, threshold)
    assert torch.equal(new.double()[~border], formula[~border])  # the grader's own rule agrees with minirl
    return new


def why_rejection(log_ratio, mask, threshold, got) -> str:
    """The classic mistake that gives exactly `got`, in a sentence, or ''."""
    got, m = got.double(), mask.double()
    want = rows_kept(seq_stat(log_ratio, mask), mask, threshold)
    lr = log_ratio.double().clamp(-BOUND, BOUND)
    k3 = torch.exp(lr) - 1.0 - lr
    mistakes = [
        (rows_kept(seq_stat(log_ratio, mask, agg="sum"), mask, threshold),
         "you used the SUM of k3 over the sequence: verl's seq_mean_k3 uses the MEAN over its valid tokens, so a "
         "long sequence is not punished for its length."),
        (m * (k3 <= threshold).double(), "you rejected single tokens: seq_mean_k3 decides per SEQUENCE. Average k3 "
                                         "over each row's valid tokens, then keep or drop the whole row."),
        (rows_kept(seq_stat(log_ratio, mask, "k1"), mask, threshold),
         "you used k1 = -log_ratio: seq_mean_k3 uses k3 = exp(l) - 1 - l, which is >= 0 and grows on both sides "
         "of l = 0."),
        (rows_kept(seq_stat(log_ratio, mask, "l"), mask, threshold),
         "you averaged the log-ratio itself: seq_mean_k3 uses k3 = exp(l) - 1 - l, which is >= 0 and grows on "
         "both sides of l = 0."),
        (rows_kept(seq_stat(log_ratio, mask, "k2"), mask, threshold),
         "you used k2 = l^2 / 2: seq_mean_k3 uses k3 = exp(l) - 1 - l."),
        (rows_kept(seq_stat(log_ratio, mask, clamp=False), mask, threshold),
         "you did not clamp the log-ratio to [-20, 20] before exp: verl does, so k3 of a token is at most "
         "exp(20) - 21 and at least 19 for l <= -20."),
        (rows_kept(seq_stat(log_ratio, mask, masked=False), mask, threshold),
         "your mean counts the padding: average k3 over the VALID tokens only, sum(m * k3) / (sum(m) + 1e-8)."),
        (m * (seq_stat(log_ratio, mask) > threshold).double().unsqueeze(-1),
         "your mask is the wrong way round: KEEP a sequence whose mean k3 is <= threshold, drop it when above."),
        ((seq_stat(log_ratio, mask) <= threshold).double().unsqueeze(-1).expand_as(m),
         "padding came back as 1: multiply the row decision by response_mask, so padding stays 0."),
    ]
    hints = [hint for wrong, hint in mistakes if torch.equal(got, wrong) and not torch.equal(wrong, want)]
    hints = list(dict.fromkeys(hints))[:2]
    return "".join(" " + ("" if i == 0 else "Or: ") + hint[0].upper() + hint[1:] for i, hint in enumerate(hints))


def expect_rejection(ch, log_ratio, mask, threshold, found_by: str = "") -> torch.Tensor:
    """Fail, naming the first wrong row and the likely mistake, unless the reader agrees with minirl (verl)."""
    text = rs_text(log_ratio, mask, threshold)
    got = rejection(ch, log_ratio, mask, threshold)
    want = want_rejection(log_ratio, mask, threshold).double()
    stat = seq_stat(log_ratio, mask)
    border = (stat - threshold).abs() <= 1e-5 * max(1.0, threshold)  # a rounding error may decide these rows
    g = got.double()
    for b in range(log_ratio.shape[0]):
        if torch.equal(g[b], want[b]):
            continue
        if border[b] and (torch.equal(g[b], mask[b].double()) or not g[b].any()):
            continue
        if g.isnan().any():
            fail(f"{text}: your mask holds NaN. Clamp the log-ratio to [-20, 20] before exp, and keep the "
                 f"padding out of the sum: exp(1000) is inf, and inf * 0 is NaN.{found_by}")
        valid = [round(v, 4) for v, keep in zip(log_ratio[b].tolist(), mask[b].bool().tolist()) if keep]
        fate = ("kept: mean k3 <= threshold" if stat[b] <= threshold else
                "dropped, all its tokens set to 0: mean k3 > threshold")
        fail(f"{text}: row {b} (valid log-ratios {valid}, mean k3 {stat[b].item():.4g}) should be {fate} "
             f"{threshold:g}. Expected {rounded(want[b])}, got {rounded(g[b])}."
             f"{why_rejection(log_ratio, mask, threshold, got)}{found_by}")
    return got


@pytest.mark.exercise("9.2", "sequence_rejection_mask")
def test_sequence_rejection_toy(ch):
    log_ratio = torch.tensor([[0.1, -0.1, 0.05, 0.0], [0.1, 2.5, 0.0, -0.2], [0.2, -0.3, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    # mean k3: row 0 about 0.004 (kept), row 1 about 2.18 (dropped), row 2 about 0.03 (kept; its padding ignored)
    got = expect_rejection(ch, log_ratio, mask, 0.5)
    assert torch.equal(got, torch.tensor([[1.0] * 4, [0.0] * 4, [1.0, 1.0, 0.0, 0.0]]))


@pytest.mark.exercise("9.2", "sequence_rejection_mask")
def test_sequence_rejection_drops_whole_sequences(ch):
    # row 0: one token has k3 = 4.39 > 1, but the mean is 0.73: keep the WHOLE row
    # row 1: the mean is 1.21 > 1, though two tokens are small: drop the WHOLE row
    log_ratio = torch.tensor([[2.0, 0.0, 0.0, 0.0, 0.0, 0.0], [1.6, 1.6, 0.5, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0] * 6, [1.0] * 4 + [0.0] * 2])
    got = expect_rejection(ch, log_ratio, mask, 1.0)
    if 0 < got[1].sum() < 4:
        fail("row 1 was only partly rejected: a rejected sequence loses ALL its tokens.")


@pytest.mark.exercise("9.2", "sequence_rejection_mask")
def test_sequence_rejection_uses_the_mean_not_the_sum(ch):
    # k3(0.8) = 0.4255 per token: the mean stays 0.4255 however long the row; the sum grows with the length
    # row 3: k3(1.2) = 1.12 over 2 valid tokens is 0.56 > 0.5 (over all 4 positions it would be 0.28)
    log_ratio = torch.tensor([[0.8] * 8, [0.8, 0.8, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0], [1.0] + [0.0] * 7,
                              [1.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0] * 8, [1.0] * 2 + [0.0] * 6, [1.0] + [0.0] * 7, [1.0] * 2 + [0.0] * 6])
    expect_rejection(ch, log_ratio, mask, 0.5)


@pytest.mark.exercise("9.2", "sequence_rejection_mask")
def test_sequence_rejection_uses_k3(ch):
    # l = 1.4: k3 = 1.655 > 1.5 (drop), but k1 = -1.4, k2 = 0.98 and l itself would keep it
    # l = -2:  k3 = 1.135 <= 1.5 (keep), but k1 = 2 and k2 = 2 would drop it
    log_ratio = torch.tensor([[1.4, 1.4, 1.4], [-2.0, -2.0, -2.0], [0.3, -0.3, 0.1]])
    mask = torch.ones_like(log_ratio, dtype=torch.int64)
    got = expect_rejection(ch, log_ratio, mask, 1.5)
    assert torch.equal(got, torch.tensor([[0, 0, 0], [1, 1, 1], [1, 1, 1]]))


@pytest.mark.exercise("9.2", "sequence_rejection_mask")
def test_sequence_rejection_clamps_the_log_ratio(ch):
    # row 0: l = -1000 clamps to -20, k3 = 19.0, mean 9.5 <= 50: kept (unclamped, k3 = 999)
    # row 1: l = 1000 clamps to 20, k3 = exp(20) - 21: dropped. Row 2: its padding holds 1000 and does not count.
    log_ratio = torch.tensor([[-1000.0, 0.0], [1000.0, 0.0], [0.1, 1000.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    got = expect_rejection(ch, log_ratio, mask, 50.0)
    assert torch.equal(got, torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]]))


@pytest.mark.exercise("9.2", "sequence_rejection_mask")
def test_sequence_rejection_empty_rows_and_dtypes(ch):
    log_ratio = torch.tensor([[0.1, 0.2, -0.1, 3.0], [5.0, -5.0, 0.0, 0.0], [3.0, 3.0, 0.2, 0.0]])
    rows = [[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
    for dtype in (torch.float32, torch.int64, torch.bool):
        mask = torch.tensor(rows).to(dtype)
        got = expect_rejection(ch, log_ratio, mask, 1.0)
        if got[1].any():
            fail(f"{rs_text(log_ratio, mask, 1.0)}: row 1 has no valid token, so it must stay all 0; got "
                 f"{got[1].tolist()}.")
    for dtype in (torch.float32, torch.int64, torch.bool):  # a batch with no valid token at all
        mask = torch.zeros(2, 3, dtype=dtype)
        got = rejection(ch, torch.tensor([[0.5, 9.0, -9.0], [0.0, 0.0, 0.0]]), mask, 1.0)
        if got.double().isnan().any() or got.any():
            fail(f"sequence_rejection_mask with a response_mask of zeros ({dtype}) returned {got.tolist()}: "
                 "it must return all zeros. A row with no valid token has mean k3 0 (sum / (0 + 1e-8)), not NaN.")


@pytest.mark.exercise("9.2", "sequence_rejection_mask")
@FUZZ
@given(batch=ragged_batches(need_valid=False, thresholds=st.one_of(
    st.sampled_from([0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 50.0]), st.floats(0.01, 10.0))))
def test_sequence_rejection_agrees_with_minirl(ch, batch):
    log_ratio, mask, threshold = batch
    expect_rejection(ch, log_ratio, mask, threshold, " (a failing batch found by hypothesis, shrunk)")
