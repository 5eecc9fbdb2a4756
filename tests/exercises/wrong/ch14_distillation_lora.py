# A plausible wrong answer to Chapter 14 (tests/test_exercise_harness.py grades it: every exercise must fail).
import torch


def k3_distillation_loss(student_log_probs, teacher_log_probs, response_mask):
    # mistakes: the log-ratio the wrong way round (student / teacher), a mean over padding too, no clamp
    x = student_log_probs - teacher_log_probs
    return (torch.exp(x) - x - 1).mean()


def forward_kl_topk(student_logits, teacher_topk_log_probs, teacher_topk_ids):
    # mistakes: the student's log-softmax over the k tokens only (renormalised), and no clamp at 0
    student = torch.log_softmax(student_logits.gather(-1, teacher_topk_ids), dim=-1)
    return (teacher_topk_log_probs.exp() * (teacher_topk_log_probs - student)).sum(-1)


def lora_cost(linear_shapes, rank):
    # mistakes: A and B both r x r-sized guesses (rank squared per layer), bytes for one moment in bfloat16
    trainable = sum(rank * rank + rank * d_in for d_out, d_in in linear_shapes)
    return trainable, trainable * 2
