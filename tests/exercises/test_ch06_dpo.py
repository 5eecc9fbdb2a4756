"""Grades exercises/ch06_dpo.py (or solutions/ with --target solutions)."""

import math
import numbers

import pytest
import torch
import torch.nn.functional as F
from grading import call, close, expect_tensor, fail, load_chapter, raised

from minirl.dpo import dpo_loss as trl_dpo_loss
from minirl.dpo import dpo_metrics as trl_dpo_metrics


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch06_dpo")


def rounded(t):
    return [round(v, 4) for v in t.tolist()]


def near(a: float, b: float, tol: float = 1e-5) -> bool:
    return math.isfinite(a) and abs(a - b) <= tol * max(1.0, abs(b))


def random_logps(seed, batch=12, requires_grad=False):
    """Sequence log-probs as a model gives them: sums over tokens, tens of nats, the policy near the reference."""
    g = torch.Generator().manual_seed(seed)
    ref_chosen = -60 * torch.rand(batch, generator=g) - 5
    ref_rejected = -60 * torch.rand(batch, generator=g) - 5
    chosen = ref_chosen + 3 * torch.randn(batch, generator=g)
    rejected = ref_rejected + 3 * torch.randn(batch, generator=g)
    if requires_grad:
        chosen.requires_grad_()
        rejected.requires_grad_()
    return chosen, rejected, ref_chosen, ref_rejected


# ----------------------------------------------------------------------------------------------
# 6.1 dpo_loss
# ----------------------------------------------------------------------------------------------


def dpo(ch, pc, pr, rc, rr, **kwargs):
    """Call the reader's dpo_loss; check the triple's shapes."""
    out = call(ch.dpo_loss, pc, pr, rc, rr, **kwargs)
    if not isinstance(out, tuple) or len(out) != 3:
        fail("dpo_loss must return a triple (losses, chosen_rewards, rejected_rewards).")
    shape = tuple(pc.shape)
    if isinstance(out[0], torch.Tensor) and out[0].dim() == 0:
        fail(f"losses should be one loss per pair, shape {shape}, not their mean: the trainer takes losses.mean().")
    return (expect_tensor(out[0], shape, "losses"), expect_tensor(out[1], shape, "chosen_rewards"),
            expect_tensor(out[2], shape, "rejected_rewards"))


@pytest.mark.exercise("6.1", "dpo_loss")
def test_dpo_loss_is_log2_when_policy_is_reference(ch):
    chosen, rejected = torch.tensor([-12.3, -4.0, -30.5]), torch.tensor([-8.0, -41.2, -30.5])
    for s in (0.0, 0.3):
        losses, chosen_rewards, rejected_rewards = dpo(ch, chosen, rejected, chosen.clone(), rejected.clone(),
                                                       beta=0.1, label_smoothing=s)
        if not close(losses, torch.full((3,), math.log(2)), atol=1e-6):
            if close(losses, torch.zeros(3), atol=1e-6):
                fail("when the policy equals the reference every loss should be log 2 = -log sigmoid(0); yours are 0. "
                     "Is it -log sigmoid(beta h), with h = (pc - rc) - (pr - rr)?")
            fail(f"the policy equals the reference, so h = 0 and each loss is -log sigmoid(0) = log 2 = 0.6931 "
                 f"(label_smoothing={s}); got {rounded(losses)}. Use the log-RATIOS to the reference, not the "
                 "log-probs themselves.")
        if not close(chosen_rewards, torch.zeros(3), atol=1e-6) or not close(rejected_rewards, torch.zeros(3),
                                                                               atol=1e-6):
            fail("the policy equals the reference, so both implicit rewards beta (log pi - log pi_ref) are 0; got "
                 f"{rounded(chosen_rewards)} and {rounded(rejected_rewards)}.")


@pytest.mark.exercise("6.1", "dpo_loss")
def test_dpo_loss_toy(ch):
    # pair 1: h_w = 1, h_l = -1, h = 2;   pair 2: h_w = 0, h_l = 2, h = -2.   beta = 0.5 -> beta h = (1, -1)
    pc, pr = torch.tensor([-1.0, -5.0]), torch.tensor([-3.0, -4.0])
    rc, rr = torch.tensor([-2.0, -5.0]), torch.tensor([-2.0, -6.0])
    losses, chosen_rewards, rejected_rewards = dpo(ch, pc, pr, rc, rr, beta=0.5)
    z = torch.tensor([1.0, -1.0])
    want = -F.logsigmoid(z)
    if not close(losses, want, atol=1e-5):
        if close(losses, -F.logsigmoid(-z), atol=1e-5):
            fail("your loss prefers the REJECTED answer: it is -log sigmoid(beta h) with h = h_w - h_l, the chosen "
                 "log-ratio minus the rejected one.")
        if close(losses, -F.logsigmoid(2 * z), atol=1e-5):
            fail("beta is missing from the loss: -log sigmoid(beta * h).")
        if close(losses, -F.logsigmoid(0.5 * (pc - pr)), atol=1e-5):
            fail("you left out the reference: h = (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l)).")
        fail(f"beta = 0.5 and h = (2, -2): the losses are -log sigmoid(beta h) = {rounded(want)}, "
             f"got {rounded(losses)}.")
    want_chosen, want_rejected = torch.tensor([0.5, 0.0]), torch.tensor([-0.5, 1.0])
    if close(chosen_rewards, want_chosen, atol=1e-5) and close(rejected_rewards, want_rejected, atol=1e-5):
        return
    if close(chosen_rewards, 2 * want_chosen, atol=1e-5) and close(rejected_rewards, 2 * want_rejected, atol=1e-5):
        fail("the rewards lack beta: chosen_rewards = beta * (log pi(y_w) - log pi_ref(y_w)).")
    if close(chosen_rewards, 0.5 * pc, atol=1e-5):
        fail("the rewards are beta times the log-RATIO to the reference, beta (log pi - log pi_ref), not beta log pi.")
    fail(f"the implicit rewards are beta h_w = {want_chosen.tolist()} and beta h_l = {want_rejected.tolist()}; got "
         f"{rounded(chosen_rewards)} and {rounded(rejected_rewards)}.")


@pytest.mark.exercise("6.1", "dpo_loss")
def test_dpo_loss_matches_trl(ch):
    for seed, s in ((61, 0.0), (62, 0.1), (63, 0.3)):
        pc, pr, rc, rr = random_logps(seed, requires_grad=True)
        losses, chosen_rewards, rejected_rewards = dpo(ch, pc, pr, rc, rr, beta=0.2, label_smoothing=s)
        want, want_chosen, want_rejected = trl_dpo_loss(pc, pr, rc, rr, beta=0.2, label_smoothing=s)
        if not close(losses, want.detach(), atol=1e-5):
            plain, _, _ = trl_dpo_loss(pc, pr, rc, rr, beta=0.2)
            if s > 0 and close(losses, plain.detach(), atol=1e-5):
                fail(f"label_smoothing={s} is ignored: cDPO's loss is -(1 - s) log sigmoid(beta h) - s log "
                     "sigmoid(-beta h).")
            robust, _, _ = trl_dpo_loss(pc, pr, rc, rr, beta=0.2, label_smoothing=s, loss_type="robust")
            if s > 0 and close(losses, robust.detach(), atol=1e-5):
                fail("that is robust DPO (rDPO, divided by 1 - 2s, with + s log sigmoid(-beta h)). The exercise asks "
                     "for cDPO: -(1 - s) log sigmoid(beta h) - s log sigmoid(-beta h).")
            fail(f"label_smoothing={s}, beta=0.2, 12 random pairs: the losses differ from TRL's sigmoid loss. Pair 0: "
                 f"expected {want[0].item():.5f}, got {losses[0].item():.5f}.")
        if not (close(chosen_rewards, want_chosen, atol=1e-5) and close(rejected_rewards, want_rejected, atol=1e-5)):
            fail(f"on 12 random pairs the implicit rewards differ from TRL's: expected chosen "
                 f"{rounded(want_chosen[:3])}..., got {rounded(chosen_rewards[:3].detach())}...")
        if not losses.requires_grad:
            fail("your losses carry no gradient: the policy log-probs must reach them through differentiable torch "
                 "operations (no .item(), .detach() or torch.no_grad() on the loss).")
        mine = torch.autograd.grad(losses.mean(), (pc, pr))
        theirs = torch.autograd.grad(want.mean(), (pc, pr))
        if not all(close(a, b, atol=1e-6) for a, b in zip(mine, theirs)):
            fail(f"label_smoothing={s}: the losses are right but their gradient with respect to the policy log-probs "
                 "differs from TRL's.")


@pytest.mark.exercise("6.1", "dpo_loss")
def test_dpo_rewards_are_detached(ch):
    pc, pr, rc, rr = random_logps(64, batch=4, requires_grad=True)
    losses, chosen_rewards, rejected_rewards = dpo(ch, pc, pr, rc, rr, beta=0.1)
    if chosen_rewards.requires_grad or rejected_rewards.requires_grad:
        fail("the implicit rewards carry a gradient: they are metrics, not part of the loss. Return "
             "beta * (...).detach(), as TRL does.")
    if not losses.requires_grad:
        fail("the losses carry no gradient: only the rewards are detached, never the loss.")
    grad = torch.autograd.grad(losses.sum(), pc)[0]
    if not (grad < 0).all():
        fail("d loss / d log pi(y_w) should be < 0: a gradient step raises the chosen answer's probability. "
             f"Got {rounded(grad)}.")


@pytest.mark.exercise("6.1", "dpo_loss")
def test_dpo_loss_is_stable_for_large_log_probs(ch):
    pc, pr = torch.tensor([-1e4, -10.0]), torch.tensor([-10.0, -1e4])
    rc, rr = torch.tensor([-10.0, -10.0]), torch.tensor([-10.0, -10.0])  # beta h = (-999, 999)
    for s, want in ((0.0, [999.0, 0.0]), (0.1, [0.9 * 999, 0.1 * 999])):
        losses, _, _ = dpo(ch, pc, pr, rc, rr, beta=0.1, label_smoothing=s)
        if not torch.isfinite(losses).all():
            fail(f"a sequence log-prob of -1e4 (a sum over tokens) gave losses {losses.tolist()}: log(sigmoid(-999)) "
                 "is log(0) in float32. Use F.logsigmoid (import torch.nn.functional as F).")
        if not close(losses, torch.tensor(want), rtol=1e-4):
            fail(f"beta h = (-999, 999), label_smoothing={s}: the losses are {want}, got {losses.tolist()}. "
                 "Use F.logsigmoid(z) and F.logsigmoid(-z).")


@pytest.mark.exercise("6.1", "dpo_loss")
def test_dpo_loss_rejects_bad_label_smoothing(ch):
    pc, pr, rc, rr = random_logps(65, batch=3)
    for s in (0.5, 0.7, -0.1):
        error = raised(ch.dpo_loss, pc, pr, rc, rr, beta=0.1, label_smoothing=s)
        if error is None:
            fail(f"label_smoothing={s} was accepted. Raise a ValueError unless 0 <= label_smoothing < 0.5: at 0.5 the "
                 "labels are coin flips, above it they are read backwards.")
        if not isinstance(error, ValueError):
            fail(f"label_smoothing={s}: raise a ValueError, not {type(error).__name__} ({error}).")
    error = raised(ch.dpo_loss, pc, pr, rc, rr, beta=0.1, label_smoothing=0.49)
    if error is not None:
        fail(f"label_smoothing=0.49 is valid (it is in [0, 0.5)), but your dpo_loss raised {type(error).__name__}: "
             f"{error}.")


# ----------------------------------------------------------------------------------------------
# 6.2 implicit_reward_metrics
# ----------------------------------------------------------------------------------------------

KEYS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
        "logps/rejected")


def metrics(ch, pc, pr, rc, rr, beta):
    """Call the reader's implicit_reward_metrics; check the keys and the value types."""
    out = call(ch.implicit_reward_metrics, pc, pr, rc, rr, beta)
    if not isinstance(out, dict):
        fail(f"implicit_reward_metrics must return a dict, got {type(out).__name__}.")
    missing, extra = [k for k in KEYS if k not in out], sorted(set(out) - set(KEYS))
    if missing or extra:
        fail(f"the keys must be exactly TRL's metric names {list(KEYS)}; missing {missing}, unexpected {extra}.")
    for key in KEYS:
        if isinstance(out[key], torch.Tensor):
            fail(f"{key!r} should be a Python float, got a tensor: call .item() on the batch mean.")
        if isinstance(out[key], bool) or not isinstance(out[key], numbers.Real):
            fail(f"{key!r} should be a Python float, got {type(out[key]).__name__}.")
    return {k: float(v) for k, v in out.items()}


def compare(got: dict, want: dict, case: str):
    wrong = {k: (round(got[k], 4), round(want[k], 4)) for k in KEYS if not near(got[k], want[k])}
    if not wrong:
        return
    if "logps/chosen" in wrong:
        fail(f"{case}: 'logps/chosen' is the mean of the POLICY's log-probs of the chosen answers (log pi(y_w|x)), "
             f"not a log-ratio nor the reference's: got {got['logps/chosen']:.4f}, "
             f"expected {want['logps/chosen']:.4f}.")
    details = ", ".join(f"{k}: got {g}, expected {w}" for k, (g, w) in wrong.items())
    fail(f"{case}: {details}.")


@pytest.mark.exercise("6.2", "implicit_reward_metrics")
def test_metrics_toy(ch):
    # beta = 0.5: chosen rewards (1, 0), rejected rewards (-1, 1) -> margins (2, -1), one win in two
    pc, pr = torch.tensor([-10.0, -20.0]), torch.tensor([-14.0, -18.0])
    rc, rr = torch.tensor([-12.0, -20.0]), torch.tensor([-12.0, -20.0])
    got = metrics(ch, pc, pr, rc, rr, 0.5)
    want = {"rewards/chosen": 0.5, "rewards/rejected": 0.0, "rewards/accuracies": 0.5, "rewards/margins": 0.5,
            "logps/chosen": -15.0, "logps/rejected": -16.0}
    if near(got["rewards/chosen"], 1.0) and near(got["rewards/rejected"], 0.0) and near(got["rewards/margins"], 1.0):
        fail("the rewards lack beta: r_w = beta * (log pi(y_w) - log pi_ref(y_w)).")
    if near(got["rewards/margins"], -0.5):
        fail("rewards/margins has the wrong sign: it is mean(r_w - r_l), chosen minus rejected.")
    compare(got, want, "beta = 0.5, chosen rewards (1, 0), rejected rewards (-1, 1)")


@pytest.mark.exercise("6.2", "implicit_reward_metrics")
def test_metrics_match_trl(ch):
    for seed, beta in ((66, 0.1), (67, 0.5)):
        pc, pr, rc, rr = random_logps(seed, batch=32, requires_grad=True)  # the policy's log-probs carry a graph
        got = metrics(ch, pc, pr, rc, rr, beta)
        _, chosen_rewards, rejected_rewards = trl_dpo_loss(pc, pr, rc, rr, beta=beta)
        want = trl_dpo_metrics(chosen_rewards, rejected_rewards, pc, pr)
        compare(got, want, f"32 random pairs, beta = {beta}, compared with TRL's DPO metrics")


@pytest.mark.exercise("6.2", "implicit_reward_metrics")
def test_metrics_accuracy_is_strict(ch):
    # rewards: pair 0 (0, 0) a tie, pair 1 (0, -0.2) a win, pair 2 (0, 0) a tie
    pc, pr = torch.tensor([-5.0, -6.0, -7.0]), torch.tensor([-5.0, -8.0, -7.0])
    rc, rr = torch.tensor([-5.0, -6.0, -7.0]), torch.tensor([-5.0, -6.0, -7.0])
    got = metrics(ch, pc, pr, rc, rr, 0.1)
    if near(got["rewards/accuracies"], 1.0):
        fail("two ties and one win gave accuracy 1.0: a tie is not a win. Count r_w > r_l strictly, not >=.")
    if not near(got["rewards/accuracies"], 1 / 3):
        fail(f"two ties and one win: rewards/accuracies = 1/3, got {got['rewards/accuracies']:.4f}.")


@pytest.mark.exercise("6.2", "implicit_reward_metrics")
def test_metrics_show_likelihood_displacement(ch):
    # Both answers became LESS likely than under the reference (by 2 and by 8 nats), the rejected one faster.
    rc, rr = torch.tensor([-20.0, -35.0, -50.0]), torch.tensor([-25.0, -30.0, -45.0])
    pc, pr = rc - 2.0, rr - 8.0
    beta = 0.1
    got = metrics(ch, pc, pr, rc, rr, beta)
    if not (got["rewards/margins"] > 0 and near(got["rewards/accuracies"], 1.0)):
        fail(f"every pair's margin is beta (8 - 2) = 0.6 > 0, so rewards/margins = 0.6 and rewards/accuracies = 1.0; "
             f"got {got['rewards/margins']:.4f} and {got['rewards/accuracies']:.4f}.")
    if not (got["rewards/chosen"] < 0 and got["rewards/rejected"] < 0):
        fail(f"the policy gives both answers LESS probability than the reference, so both implicit rewards are "
             f"negative (-0.2 and -0.8); got rewards/chosen {got['rewards/chosen']:.4f} and rewards/rejected "
             f"{got['rewards/rejected']:.4f}. They are beta * (log pi - log pi_ref), signed.")
    want = {"rewards/chosen": -0.2, "rewards/rejected": -0.8, "rewards/accuracies": 1.0, "rewards/margins": 0.6,
            "logps/chosen": pc.mean().item(), "logps/rejected": pr.mean().item()}
    compare(got, want, "likelihood displacement (both log-probs fall, the rejected faster)")
