"""Grades exercises/ch01_ppo.py (or solutions/ with --target solutions)."""

import pytest
import torch
from grading import call, close, expect_tensor, fail, load_chapter

from minirl.core import agg_loss
from minirl.ppo import compute_policy_loss


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch01_ppo")


def ragged(seed, batch=5, length=6):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    return torch.randn(batch, length, generator=g), mask, g


# ----------------------------------------------------------------------------------------------
# 1.1 clipped_policy_loss
# ----------------------------------------------------------------------------------------------

# One token per case (eps = 0.2): A=+1, r=1.5 -> clipped; A=+1, r=0.5 -> not; A=-1, r=0.5 -> clipped;
# A=-1, r=1.5 -> not (the unclipped -A r is the larger loss).
TOY_RATIO = torch.tensor([[1.5, 0.5, 0.5, 1.5]])
TOY_ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0]])


@pytest.mark.exercise("1.1", "clipped_policy_loss")
def test_clipped_policy_loss_toy(ch):
    out = call(ch.clipped_policy_loss, torch.zeros(1, 4), TOY_RATIO.log(), TOY_ADV, torch.ones(1, 4))
    if not isinstance(out, tuple) or len(out) != 2:
        fail("clipped_policy_loss must return a pair (loss, clipfrac).")
    loss, clipfrac = out
    expect_tensor(loss, (), "loss")
    expected = (-1.2 - 0.5 + 0.8 + 1.5) / 4
    if close(loss, (-1.5 - 0.5 + 0.5 + 1.5) / 4):
        fail("your loss ignores the clip: it is the plain -A * r. Take max(-A r, -A clip(r, 1-eps, 1+eps)).")
    if close(loss, (-1.2 - 0.5 + 0.5 + 1.2) / 4):
        fail("you took the min of the two losses. The loss is the MAX of -A r and -A clip(r) (the pessimistic "
             "bound); the objective, its negative, is the min.")
    if close(loss, (-1.2 - 0.8 + 0.8 + 1.2) / 4):
        fail("you used only the clipped term -A clip(r). PPO takes the max with the unclipped -A r: a token that "
             "got worse is never clipped.")
    if not close(loss, expected):
        fail(f"for ratios {TOY_RATIO.tolist()} and advantages {TOY_ADV.tolist()} the loss is {expected:.3f}, "
             f"got {loss.item():.4f}.")
    if not close(clipfrac, 0.5):
        fail(f"two of the four tokens are clipped (A>0 with r>1.2, A<0 with r<0.8): clipfrac 0.5, got "
             f"{float(clipfrac):.3f}. Count tokens where the clipped loss is strictly larger.")


@pytest.mark.exercise("1.1", "clipped_policy_loss")
def test_clipped_policy_loss_matches_verl_values_and_gradient(ch):
    adv, mask, g = ragged(0)
    old = -torch.rand(adv.shape, generator=g) * 2
    new = (old + torch.randn(adv.shape, generator=g) * 0.3).requires_grad_(True)
    loss, clipfrac = call(ch.clipped_policy_loss, old, new, adv, mask, 0.2)
    (grad,) = torch.autograd.grad(loss, new)
    ref_new = new.detach().clone().requires_grad_(True)
    ref_loss, metrics = compute_policy_loss(old, ref_new, adv, mask, clip_ratio_c=1e9)
    (ref_grad,) = torch.autograd.grad(ref_loss, ref_new)
    if not close(loss, ref_loss):
        if close(loss, ref_loss * mask.sum() / mask.numel()):
            fail("your mean divides by every position, padding included; divide by the number of valid tokens.")
        fail(f"loss {loss.item():.5f} differs from verl's {ref_loss.item():.5f} on a random ragged batch.")
    if not close(grad, ref_grad):
        fail("the loss value is right but its gradient is not: compute the ratio from log_prob with torch "
             "operations (no .item(), no .detach()) so the gradient flows.")
    if not close(clipfrac, metrics["actor/pg_clipfrac"]):
        fail(f"clipfrac {float(clipfrac):.4f} differs from verl's actor/pg_clipfrac "
             f"{metrics['actor/pg_clipfrac']:.4f}.")


@pytest.mark.exercise("1.1", "clipped_policy_loss")
def test_ratio_is_one_on_policy(ch):
    adv, mask, g = ragged(1)
    old = -torch.rand(adv.shape, generator=g)
    log_prob = old.clone().requires_grad_(True)
    loss, clipfrac = call(ch.clipped_policy_loss, old, log_prob, adv, mask)
    (grad,) = torch.autograd.grad(loss, log_prob)
    if float(clipfrac) != 0:
        fail("with log_prob == old_log_prob every ratio is 1, so nothing can be clipped; your clipfrac is not 0.")
    if not close(grad, -adv * mask / mask.sum()):
        fail("on policy (ratio 1) the gradient of the token-mean loss is -A / (number of valid tokens).")


# ----------------------------------------------------------------------------------------------
# 1.2 aggregate_loss
# ----------------------------------------------------------------------------------------------

MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")


@pytest.mark.exercise("1.2", "aggregate_loss")
def test_aggregate_loss_toy(ch):
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    expected = {"token-mean": 15 / 5, "seq-mean-token-sum": (6 + 9) / 2, "seq-mean-token-mean": (2.0 + 4.5) / 2}
    results = {mode: call(ch.aggregate_loss, loss, mask, mode) for mode in MODES}
    if close(results["token-mean"], loss.mean()):
        fail("token-mean averaged the padding too (21/6 = 3.5); average over valid tokens only (15/5 = 3).")
    for mode, value in expected.items():
        if not close(results[mode], value):
            if mode == "seq-mean-token-mean" and close(results[mode], expected["token-mean"]):
                fail("seq-mean-token-mean gave the token-mean: average within each sequence first, then over "
                     "sequences (a short sequence then weighs as much as a long one).")
            fail(f"{mode} of {loss.tolist()} under mask {mask.tolist()} should be {value}, got {float(results[mode])}.")


@pytest.mark.exercise("1.2", "aggregate_loss")
def test_aggregate_loss_matches_verl_and_skips_empty_rows(ch):
    for seed in range(3):
        loss, mask, _ = ragged(seed + 10)
        mask[2] = 0  # a fully masked row
        for mode in MODES:
            out = call(ch.aggregate_loss, loss, mask, mode)
            if not torch.isfinite(torch.as_tensor(out)):
                fail(f"{mode} is not finite with a fully masked row: leave such rows out of the sequence count.")
            if not close(out, agg_loss(loss, mask, mode)):
                fail(f"{mode} differs from minirl.core.agg_loss on a batch with a fully masked row (seed {seed}): "
                     "fully masked rows must not count as sequences.")


@pytest.mark.exercise("1.2", "aggregate_loss")
def test_aggregate_loss_rejects_unknown_modes(ch):
    try:
        call(ch.aggregate_loss, torch.ones(2, 2), torch.ones(2, 2), "mean")
    except pytest.fail.Exception as raised:  # call() turns the learner's exception into a failure message
        message = str(raised)
        if "raised ValueError" not in message:
            fail(f"an unknown mode should raise ValueError; {message.splitlines()[0]}")
        if not all(mode in message for mode in MODES):
            fail(f"the ValueError should name the three valid modes; {message.splitlines()[0]}")
        return
    fail("aggregate_loss(..., 'mean') returned a value; an unknown mode must raise ValueError.")
