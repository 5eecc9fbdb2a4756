# EXERCISES FILE: fill in the functions below, then grade them with `make grade`.
# (Maintainers: this file is generated from solutions/; edit there, then run
#  `python -m minirl.book.exercises sync`.)
"""Chapter 6 exercises: DPO's loss on (chosen, rejected) pairs, and the implicit rewards TRL logs.

Read chapters/06_dpo.ipynb first. The twins are minirl/dpo.py::dpo_loss with loss_type="sigmoid" (TRL 1.16's
trl/trainer/dpo_trainer.py::DPOTrainer._compute_loss, its "sigmoid" loss; cDPO's label smoothing as in TRL 0.x)
and minirl/dpo.py::dpo_metrics (the rewards/* and logps/* metrics that DPOTrainer logs).

Grade all:   make grade
Grade one:   make grade EX=6.1   (or .venv/bin/python -m pytest tests/exercises/test_ch06_dpo.py -k dpo_loss)
"""

import torch


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    reference_chosen_logps: torch.Tensor,
    reference_rejected_logps: torch.Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exercise 6.1: DPO's per-pair loss (and cDPO's, with label smoothing), and the implicit rewards.

        h_w = log pi(y_w|x) - log pi_ref(y_w|x)         chosen log-ratio
        h_l = log pi(y_l|x) - log pi_ref(y_l|x)         rejected log-ratio
        h   = h_w - h_l
        losses = -(1 - s) log sigmoid(beta h) - s log sigmoid(-beta h)      s = label_smoothing
        chosen_rewards = beta h_w,   rejected_rewards = beta h_l            detached (no gradient)

    With s = 0 this is DPO (Rafailov et al. 2023): the Bradley-Terry loss of Chapter 3's reward model
    (exercise 3.1), -log sigmoid(r_w - r_l), with the implicit reward r = beta log(pi / pi_ref). With s > 0
    (cDPO) each label is taken to be wrong with probability s, so the loss no longer pushes the margin to
    infinity.

    Args:
        policy_chosen_logps, policy_rejected_logps: (B,) sequence log-probs (sums over the answer's
            tokens) under the policy being trained, with gradient.
        reference_chosen_logps, reference_rejected_logps: (B,) the same under the frozen reference.
        beta: strength of the implicit KL leash (TRL's default 0.1).
        label_smoothing: s, the assumed probability that a pair's label is flipped, in [0, 0.5).
    Returns:
        (losses, chosen_rewards, rejected_rewards), each (B,): one loss per pair (the trainer takes
        losses.mean()), and the implicit rewards, detached.
    Raises:
        ValueError: if label_smoothing is not in [0, 0.5). At s = 0.5 every label is a coin flip and
            the loss has no preferred direction; above it, the labels are read backwards.

    Details TRL is precise about:
      - -log sigmoid(z) is -F.logsigmoid(z): sequence log-probs are sums over tokens, so h is easily
        in the hundreds or thousands, and log(sigmoid(-1000)) = log(0) = -inf;
      - when the policy equals the reference (the start of training) h = 0 and every loss is log 2;
      - the rewards are metrics, not part of the loss: .detach() them, so logging them keeps no graph
        and no gradient flows through them.

    Hint: `import torch.nn.functional as F`; F.logsigmoid(-z) is log(1 - sigmoid(z)).
    """
    raise NotImplementedError("dpo_loss: not written yet. Replace this line with your code.")


def implicit_reward_metrics(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    reference_chosen_logps: torch.Tensor,
    reference_rejected_logps: torch.Tensor,
    beta: float,
) -> dict[str, float]:
    """Exercise 6.2: the numbers TRL's DPOTrainer logs each step, under TRL's names.

    With the implicit rewards r_w = beta (log pi(y_w|x) - log pi_ref(y_w|x)), r_l likewise:

        "rewards/chosen"      mean r_w
        "rewards/rejected"    mean r_l
        "rewards/accuracies"  share of pairs with r_w > r_l        (strictly: a tie is not a win)
        "rewards/margins"     mean (r_w - r_l)
        "logps/chosen"        mean log pi(y_w|x)                   the POLICY's log-probs, not the ratios
        "logps/rejected"      mean log pi(y_l|x)

    Args:
        policy_chosen_logps, policy_rejected_logps: (B,) sequence log-probs under the policy.
        reference_chosen_logps, reference_rejected_logps: (B,) under the reference.
        beta: the DPO beta.
    Returns:
        a dict with exactly those six keys, each a Python float (a batch mean).

    Why both families: a growing margin says the policy separates the pairs, but not HOW. DPO often
    lowers BOTH log-probs, the rejected one faster ("likelihood displacement"): margins > 0 and
    accuracies near 1, while rewards/chosen < 0 and logps/chosen falls. The probability went to
    answers that are in neither column. Only the logps/* and rewards/chosen lines show it.

    Hint: compute the rewards without gradient (torch.no_grad() or .detach()); .item() gives a float.
    """
    raise NotImplementedError("implicit_reward_metrics: not written yet. Replace this line with your code.")
