"""DPO: preference optimisation from fixed (chosen, rejected) pairs, with no rollout and no reward model.

The loss of Rafailov et al. 2023 (the "sigmoid" loss); names follow TRL's
`trl/trainer/dpo_trainer.py::DPOTrainer.dpo_loss`. verl has no DPO in its PPO trainer: DPO is the
offline side branch of the reading map. Chapter 6 reads it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minirl.core import check_same_shape, logprobs_from_logits, masked_sum


def sequence_log_probs(logits: torch.Tensor, labels: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """log pi(y | x) of whole responses: the sum of their token log-probs.

        log pi(y | x) = sum_t m_t * log pi(y_t | x, y_<t)

    Args:
        logits: (B, L, V) aligned with `labels` (logits[:, t] predict labels[:, t]).
        labels: (B, L) response token ids.
        response_mask: (B, L).
    Returns:
        (B,) sequence log-probs.
    """
    check_same_shape(labels=labels, response_mask=response_mask)
    return masked_sum(logprobs_from_logits(logits, labels), response_mask, axis=-1)


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    reference_chosen_logps: torch.Tensor,
    reference_rejected_logps: torch.Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DPO's per-pair loss and the implicit rewards.

        h = [log pi(y_w|x) - log pi_ref(y_w|x)] - [log pi(y_l|x) - log pi_ref(y_l|x)]
        loss = -(1 - s) * log sigmoid(beta * h) - s * log sigmoid(-beta * h)      s = label_smoothing
        chosen_rewards   = beta * (log pi(y_w|x) - log pi_ref(y_w|x))   (detached)
        rejected_rewards = beta * (log pi(y_l|x) - log pi_ref(y_l|x))   (detached)

    The policy is pushed to raise the chosen answer's probability *relative to the reference* more
    than the rejected one's. When the policy equals the reference, h = 0 and the loss is log 2.
    label_smoothing > 0 is the "conservative DPO" of noisy labels (cDPO).

    Args:
        policy_chosen_logps, policy_rejected_logps: (B,) sequence log-probs under the policy.
        reference_chosen_logps, reference_rejected_logps: (B,) under the frozen reference.
        beta: strength of the implicit KL leash (TRL's default 0.1).
        label_smoothing: probability that a label is flipped, in [0, 0.5).
    Returns:
        (losses, chosen_rewards, rejected_rewards), each (B,). Take losses.mean() for training.
    """
    check_same_shape(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                     reference_chosen_logps=reference_chosen_logps, reference_rejected_logps=reference_rejected_logps)
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}.")
    chosen_logratios = policy_chosen_logps - reference_chosen_logps
    rejected_logratios = policy_rejected_logps - reference_rejected_logps
    logits = chosen_logratios - rejected_logratios  # h
    losses = -F.logsigmoid(beta * logits) * (1 - label_smoothing) - F.logsigmoid(-beta * logits) * label_smoothing
    return losses, beta * chosen_logratios.detach(), beta * rejected_logratios.detach()
