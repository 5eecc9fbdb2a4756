"""The teacher of on-policy distillation: a frozen, larger model that scores the student's tokens.

verl 0.9.1 serves teachers as inference servers (`verl/experimental/teacher_loop/teacher_model.py::TeacherModelManager`
on their own GPU pool); each agent-loop sample sends its prompt + response ids and gets back, per token, the
teacher's log-prob of that token, or its top-k tokens and their log-probs
(`teacher_manager.py::AsyncTeacherLLMServerManager.compute_teacher_logprobs_single`, vLLM's prompt_logprobs at
temperature 1). Here the teacher is a model in the trainer's process that runs one forward pass over the same ids:

    Teacher.compute_teacher_logprobs   teacher_logprobs (B, R, 1): log p(y_t | prompt, y_<t), the sampled tokens
                                       or, for a top-k loss, teacher_logprobs and teacher_ids (B, R, K)

The student's ids go in unchanged, so teacher and student must share a tokenizer (`check_same_tokenizer`).
"""

from __future__ import annotations

import sys

import torch

from minirl import models
from minirl.core import logprobs_from_logits
from minirl.parallel import dp_compute
from minirl.protocol import DataProto
from minirl.workers import MODEL_INPUTS, forward_in_micro_batches, make_micro_batches


def check_same_tokenizer(student_tokenizer, teacher_tokenizer, teacher_path: str) -> None:
    """Refuse a teacher whose vocabulary differs from the student's; warn if only the chat template differs.

    The teacher reads the student's token ids: with another vocabulary an id means another string, and every
    log-prob it returns is about text nobody wrote. A different chat template still tokenises the same way, but
    the teacher then reads a conversation format it was not trained on.
    """
    if student_tokenizer.get_vocab() != teacher_tokenizer.get_vocab():
        raise ValueError(f"the teacher {teacher_path} has another tokenizer than the student ({len(teacher_tokenizer)} "
                         f"vs {len(student_tokenizer)} tokens, or the same size with other ids): it would score token "
                         "ids that mean other strings to it. Distil from a teacher of the student's model family "
                         "(the same tokenizer), e.g. Qwen2.5-7B-Instruct for Qwen2.5-0.5B-Instruct.")
    if student_tokenizer.chat_template != teacher_tokenizer.chat_template:
        print(f"minirl distillation: the teacher {teacher_path} has another chat template than the student; it scores "
              "the student's prompts rendered with the student's template, a format it may not know.", file=sys.stderr)


class Teacher:
    """A frozen model that returns its log-probs of the student's response tokens (temperature 1, as verl).

    Its forward passes are cut into micro-batches as the old-log-prob pass is (`rollout.log_prob_*` settings).
    """

    def __init__(self, model, topk: int | None, accelerator, micro_batch_size: int | None = None,
                 use_dynamic_bsz: bool = False, max_token_len: int = 16384):
        self.model = model.to(accelerator.device).eval().requires_grad_(False)
        self.topk = topk
        self.accelerator = accelerator
        self.micro_batches = (micro_batch_size, use_dynamic_bsz, max_token_len)  # make_micro_batches' settings

    @torch.no_grad()
    def compute_teacher_logprobs(self, data: DataProto) -> DataProto:
        """The teacher's view of each response token of `data` (input_ids, attention_mask, position_ids, responses).

        Returns teacher_logprobs (B, R, 1), the log-prob of each sampled token; with topk: teacher_logprobs and
        teacher_ids (B, R, K), the teacher's K most likely tokens at each position and their log-probs.
        Padding positions hold whatever the model says there; the response mask leaves them out of every loss.
        """
        return dp_compute(self.compute_teacher_logprobs_on_rows, data, self.accelerator)

    @torch.no_grad()
    def compute_teacher_logprobs_on_rows(self, chunk: DataProto) -> DataProto:
        """`compute_teacher_logprobs` on the rows this process was given, in micro-batches."""
        def forward(micro: DataProto) -> DataProto:
            inputs = {k: micro[k].to(self.accelerator.device) for k in MODEL_INPUTS}
            responses = micro["responses"].to(self.accelerator.device)
            logits = models.response_logits(self.model, **inputs, response_length=responses.shape[1])  # temperature 1
            if self.topk is None:
                sampled = logprobs_from_logits(logits, responses).unsqueeze(-1)
                return DataProto(batch={"teacher_logprobs": sampled.cpu()})
            top = torch.log_softmax(logits, dim=-1).topk(self.topk, dim=-1)
            return DataProto(batch={"teacher_logprobs": top.values.cpu(), "teacher_ids": top.indices.cpu()})

        return forward_in_micro_batches(forward, chunk, make_micro_batches(chunk, *self.micro_batches))


def build_teacher(config, student_tokenizer, accelerator) -> Teacher:
    """The teacher of `distillation.teacher_models.teacher_model`, checked against the student's tokenizer; it
    returns top-k log-probs when the loss needs them (`distillation_loss.topk`)."""
    from minirl.distillation import uses_topk  # deferred: distillation imports the policy losses

    distillation = config.distillation
    path = distillation.teacher_models["teacher_model"].model_path
    check_same_tokenizer(student_tokenizer, models.load_tokenizer(path), path)
    loss = distillation.distillation_loss
    rollout = config.actor_rollout_ref.rollout
    return Teacher(models.load_policy(path), loss.topk if uses_topk(loss.loss_mode) else None, accelerator,
                   rollout.log_prob_micro_batch_size_per_gpu, rollout.log_prob_use_dynamic_bsz,
                   rollout.log_prob_max_token_len_per_gpu)
