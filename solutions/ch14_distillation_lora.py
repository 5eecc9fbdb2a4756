# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Chapter 14 exercises: the on-policy distillation loss per token, the top-k forward KL, and what LoRA saves.

Read chapters/14_distillation_lora.ipynb first. The twins are minirl/distillation.py (verl 0.9.1's
verl/trainer/distillation/losses.py::distillation_loss with loss_mode=k3, and
verl/trainer/distillation/fsdp/losses.py::compute_forward_kl_topk) and minirl/lora.py::count_parameters,
optimizer_state_bytes (what PEFT's adapter leaves to train and to AdamW).

Grade all:   make grade
Grade one:   make grade EX=14.1   (or .venv/bin/python -m pytest tests/exercises/test_ch14_distillation_lora.py -k k3)
"""

import torch


def k3_distillation_loss(student_log_probs: torch.Tensor, teacher_log_probs: torch.Tensor,
                         response_mask: torch.Tensor) -> torch.Tensor:
    """Exercise 14.1: verl's default on-policy distillation loss (loss_mode=k3, supervised, token-mean).

    On the student's own sampled tokens, with s_t = log q(y_t) (student) and p_t = log p(y_t) (teacher):

        x_t = clamp(p_t - s_t, -20, 20)                        the log-ratio teacher / student
        l_t = clamp(exp(x_t) - x_t - 1, -10, 10)               k3, >= 0, 0 where the two agree
        loss = sum_t m_t l_t / sum_t m_t                         masked token-mean over the whole batch

    Args:
        student_log_probs: (B, R) the student's log-probs of its sampled tokens (carries the gradient).
        teacher_log_probs: (B, R) the teacher's log-probs of the same tokens.
        response_mask: (B, R) 1 on the tokens the student wrote, 0 on padding (and on tool tokens).
    Returns:
        A scalar tensor that gradients flow through (only through student_log_probs).
    Details: the clamps are verl's (core_algos.py::kl_penalty); a batch with no valid token cannot be averaged:
        raise ValueError.
    """
    # BEGIN SOLUTION
    mask = response_mask.to(student_log_probs.dtype)
    if mask.sum() == 0:
        raise ValueError("no valid token in the batch")
    x = torch.clamp(teacher_log_probs - student_log_probs, min=-20, max=20)
    losses = torch.clamp(torch.exp(x) - x - 1, min=-10, max=10)
    return (losses * mask).sum() / mask.sum()
    # END SOLUTION


def forward_kl_topk(student_logits: torch.Tensor, teacher_topk_log_probs: torch.Tensor,
                    teacher_topk_ids: torch.Tensor) -> torch.Tensor:
    """Exercise 14.2: the forward KL from the teacher over its top-k tokens, per position (loss_mode=forward_kl_topk).

    At each position the teacher sends its K most likely tokens v_1..v_K and their log-probs log p(v_k). Then

        log q(v_k) = log_softmax(student_logits)[v_k]                      the student's log-probs of those tokens
        L_t = sum_k p(v_k) (log p(v_k) - log q(v_k)),  then max(L_t, 0)    p(v_k) = exp(log p(v_k))

    (The K tokens hold less than all of either distribution, so L_t can dip below 0; verl clamps it at 0.)

    Args:
        student_logits: (B, R, V) the student's logits at each response position (carry the gradient).
        teacher_topk_log_probs: (B, R, K) the teacher's log-probs of its top-k tokens.
        teacher_topk_ids: (B, R, K) those tokens' ids (long).
    Returns:
        (B, R) per-position losses; the caller masks and averages them.
    """
    # BEGIN SOLUTION
    student_log_probs = torch.log_softmax(student_logits, dim=-1).gather(-1, teacher_topk_ids)
    teacher_probs = teacher_topk_log_probs.exp()
    return (teacher_probs * (teacher_topk_log_probs - student_log_probs)).sum(-1).clamp_min(0.0)
    # END SOLUTION


def lora_cost(linear_shapes: list[tuple[int, int]], rank: int) -> tuple[int, int]:
    """Exercise 14.3: what a rank-r LoRA adapter trains, and what AdamW keeps for it.

    Each targeted linear layer has a weight W of shape (d_out, d_in) (torch's nn.Linear layout). LoRA freezes W
    and trains A (r x d_in) and B (d_out x r). AdamW keeps two float32 moments (exp_avg, exp_avg_sq) for every
    trained number. (Its per-tensor step counters are left out here.)

    Args:
        linear_shapes: [(d_out, d_in), ...], one per targeted layer.
        rank: r >= 1.
    Returns:
        (trainable parameters, AdamW moment bytes).
    Details: full fine-tuning of the same layers would train sum d_out * d_in; compare them in the chapter.
    """
    # BEGIN SOLUTION
    trainable = sum(rank * (d_in + d_out) for d_out, d_in in linear_shapes)
    return trainable, trainable * 2 * 4
    # END SOLUTION
