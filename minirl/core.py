"""The tensors every RL-for-LLM algorithm shares: masks, masked statistics, log-probs, entropy.

This file mirrors `verl/utils/torch_functional.py` (verl 0.9.1). Same names, same arguments, same
epsilons, so that a reader can put the two side by side. Chapter 0 of the book walks through it.

Vocabulary (verl's, used everywhere in minirl):

    B  batch size (number of sequences = prompts x rollout.n)
    L  response length (padded); P prompt length (padded); V vocabulary size
    responses       (B, L) token ids the policy generated
    attention_mask  (B, P + L) 1 on real prompt/response tokens, 0 on padding
    response_mask   (B, L) 1 on response tokens that count for the loss: up to and
                    including the first EOS, 0 after it
    log_probs       (B, L) log pi(token_t | prefix) of each response token
    token_level_scores (B, L) the reward, a sequence-level score sitting on the last valid
                    response token, 0 elsewhere
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------
# Masked statistics
# ----------------------------------------------------------------------------------------------


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Sum of `values` where `mask` is 1.

    Mirrors `verl/utils/torch_functional.py::masked_sum`. Positions outside the mask are replaced
    by 0 *before* multiplying, so a NaN or inf sitting in padding cannot leak into the sum
    (NaN * 0 is still NaN).

    Args:
        values: any shape, e.g. (B, L).
        mask: same shape as `values`; 1/True = keep, 0/False = ignore.
        axis: reduce over this dimension only; None reduces over everything.
    Returns:
        A scalar tensor (axis=None) or `values` with dimension `axis` removed.
    """
    valid_values = torch.where(mask.bool(), values, 0.0)
    return (valid_values * mask).sum(dim=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Mean of `values` over the positions where `mask` is 1.

        masked_mean(x, m) = sum_i m_i x_i / (sum_i m_i + 1e-8)

    Mirrors `verl/utils/torch_functional.py::masked_mean`. The 1e-8 sits in the denominator so an
    all-zero mask gives 0 instead of NaN.

    Args:
        values: (B, L) or any shape.
        mask: same shape as `values`.
        axis: None for one mean over all valid elements (token-weighted), or a dimension,
            e.g. axis=-1 gives one mean per sequence, shape (B,).
    """
    return masked_sum(values, mask, axis) / (mask.sum(dim=axis) + 1e-8)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of `values` over all positions where `mask` is 1 (one scalar for the whole tensor).

        var = masked_mean((x - masked_mean(x))^2) * N / (N - 1)     (if unbiased, N = sum(mask))

    Mirrors `verl/utils/torch_functional.py::masked_var`.

    Raises:
        ValueError: if unbiased and the mask holds 0 or 1 valid element (the Bessel correction
            N / (N - 1) would divide by zero). Use a larger batch.
    """
    mean = masked_mean(values, mask)
    centered = values - mean
    variance = masked_mean(centered**2, mask)
    if unbiased:
        n_valid = mask.sum()
        if n_valid == 0:
            raise ValueError("masked_var: the mask is empty; at least one element must be 1.")
        if n_valid == 1:
            raise ValueError(
                "masked_var: the mask holds a single valid element, so the unbiased variance "
                "divides by zero; use a batch with at least two valid tokens."
            )
        bessel_correction = n_valid / (n_valid - 1)  # computed as verl does (float32 for an int mask)
        variance = variance * bessel_correction
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise `values` to zero mean and unit variance, using statistics of the valid positions.

        whiten(x) = (x - mu) / sqrt(var + 1e-8)        mu, var over mask==1, var unbiased

    Mirrors `verl/utils/torch_functional.py::masked_whiten`. Two details matter:
    the statistics are taken over *all* valid elements of the tensor (e.g. every response token of
    the whole batch), and the result is *not* multiplied by the mask again: padded positions hold
    (x - mu) / sigma too. Callers that need zeros there multiply by the mask themselves.

    Args:
        values: (B, L).
        mask: (B, L).
        shift_mean: if False, add the mean back (only the scale is normalised).
    Returns:
        (B, L) whitened values.
    """
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def clip_by_value(x: torch.Tensor, tensor_min: torch.Tensor, tensor_max: torch.Tensor) -> torch.Tensor:
    """Element-wise clamp with tensor bounds: max(min(x, tensor_max), tensor_min).

    Mirrors `verl/utils/torch_functional.py::clip_by_value` (used by the clipped value loss).
    """
    return torch.max(torch.min(x, tensor_max), tensor_min)


# ----------------------------------------------------------------------------------------------
# From logits to log-probs and entropy
# ----------------------------------------------------------------------------------------------


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of each label token under the softmax of `logits`.

        log pi(y) = logits[y] - logsumexp(logits)

    Mirrors `verl/utils/torch_functional.py::logprobs_from_logits` on its CPU path
    (`logprobs_from_logits_v2`; verl uses a fused flash-attn kernel on GPUs, same math).
    Never computes softmax(logits) and then log: that underflows to log(0) = -inf for large logits.
    For float32/float64 it uses the identity above; logsumexp subtracts the row max first, so it is
    stable even for logits scaled by 100. For bfloat16/float16 verl uses log_softmax instead
    (logsumexp is not accurate enough in 8 mantissa bits); so do we.

    Args:
        logits: (..., V) unnormalised scores, e.g. (B, L, V).
        labels: (...) integer token ids in [0, V), e.g. (B, L).
    Returns:
        (...) log-probs, same shape as `labels`, dtype of `logits`.
    """
    if logits.dtype in (torch.float32, torch.float64):
        label_logits = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
        if logits.dim() >= 3:  # one sequence at a time: temporaries stay small (faster on CPU, as in verl)
            logsumexp = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
        else:
            logsumexp = torch.logsumexp(logits, dim=-1)
        return label_logits - logsumexp  # log_softmax(x)_y = x_y - logsumexp(x)
    log_probs = F.log_softmax(logits.float(), dim=-1).to(logits.dtype)
    return torch.gather(log_probs, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution softmax(logits), per position.

        H = -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v          (p = softmax(z))

    Mirrors `verl/utils/torch_functional.py::entropy_from_logits`.

    Args:
        logits: (..., V).
    Returns:
        (...) entropy in nats.
    """
    probs = F.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.sum(probs * logits, dim=-1)


def sum_pi_squared_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """sum_v pi(v)^2 of the distribution softmax(logits), per position: the probability that two samples agree.

        sum_v pi_v^2 = exp(logsumexp(2 z) - 2 logsumexp(z))        (computed in log space: no underflow)

    1 for a certain distribution, 1/V for a uniform one. The optimal token baseline (minirl/optimal_baseline.py)
    uses it in its variance proxy 1 - 2 pi(a_t) + sum_v pi_v^2. Mirrors
    `verl/utils/torch_functional.py::calculate_sum_pi_squared_from_logits`.

    Args:
        logits: (..., V).
    Returns:
        (...).
    """
    return torch.exp(torch.logsumexp(2.0 * logits, dim=-1) - 2.0 * torch.logsumexp(logits, dim=-1))


# ----------------------------------------------------------------------------------------------
# Masks
# ----------------------------------------------------------------------------------------------


def get_response_mask(
    response_id: torch.Tensor, eos_token: int | list[int] = 2, dtype: torch.dtype = torch.int64
) -> torch.Tensor:
    """Mask that is 1 up to and including the first EOS token of each response, 0 after it.

    Mirrors `verl/utils/torch_functional.py::get_response_mask`.

        response_id   [[20, 10, 34,  1,  0,  0],        eos_token = 1
                       [23, 98,  1,  0,  0,  0]]
        response_mask [[ 1,  1,  1,  1,  0,  0],
                       [ 1,  1,  1,  0,  0,  0]]

    It looks for EOS, not for padding. That is why it is still right when the tokenizer pads with
    its EOS token (pad_token_id == eos_token_id, as many chat models do): a mask built as
    `response_id != pad_token_id` would then drop the EOS token itself, and the model would never
    be trained to stop.

    Args:
        response_id: (B, L) generated token ids.
        eos_token: one EOS id or a list of ids that all end a response.
        dtype: dtype of the returned mask.
    Returns:
        (B, L) mask of `dtype`.
    """
    eos = torch.tensor(eos_token, device=response_id.device)
    is_eos = torch.isin(response_id, eos).int()
    # cumsum counts EOS tokens seen so far, *including* this position; subtracting is_eos makes it
    # "EOS tokens strictly before this position". A token is kept while that count is 0.
    eos_before = is_eos.cumsum(dim=1) - is_eos
    return eos_before.eq(0).to(dtype)


def compute_response_mask(attention_mask: torch.Tensor, response_length: int) -> torch.Tensor:
    """The response part of the attention mask: attention_mask[:, -response_length:].

    Mirrors `verl/trainer/ppo/ray_trainer.py::compute_response_mask`, which reads the tensors from
    a `DataProto`; this one takes them directly. The rollout builds the response part of
    `attention_mask` with `get_response_mask`, so both masks agree.

    Args:
        attention_mask: (B, P + L).
        response_length: L.
    Returns:
        (B, L).
    """
    return attention_mask[:, -response_length:]


def place_scores_on_last_token(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Turn one score per sequence into `token_level_scores`: the score on the last valid token.

    An outcome reward (is the final answer right?) belongs to the whole response. verl stores it
    as a (B, L) tensor that is 0 everywhere except at the last response token that counts, index
    `response_mask[i].sum() - 1`; the advantage estimators then sum over L to read it back. This is
    what `verl/workers/reward_manager/naive.py::NaiveRewardManager.__call__` does inline. Like
    verl, a zero-length response puts its score at index -1 (the last column).

        scores          [1.0, 0.5]              response_mask [[1, 1, 1, 0],
                                                               [1, 1, 0, 0]]
        token_level_scores [[0, 0, 1.0, 0],
                            [0, 0.5, 0, 0]]

    Args:
        scores: (B,) one score per sequence.
        response_mask: (B, L).
    Returns:
        (B, L) float tensor, same dtype as `scores`.
    """
    token_level_scores = torch.zeros(response_mask.shape, dtype=scores.dtype, device=scores.device)
    last_valid = response_mask.sum(dim=-1).long() - 1  # (B,), -1 for an empty response
    rows = torch.arange(response_mask.shape[0], device=scores.device)
    token_level_scores[rows, last_valid] = scores
    return token_level_scores


# ----------------------------------------------------------------------------------------------
# Input checks shared by every algorithm file
# ----------------------------------------------------------------------------------------------


def check_same_shape(**tensors: torch.Tensor) -> None:
    """Raise ValueError naming every shape if the given tensors do not all have the same shape.

    Example: check_same_shape(log_prob=log_prob, response_mask=response_mask).
    """
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"shape mismatch: {listed}; these tensors must all be (batch, response_length).")


def check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    """Raise ValueError naming the valid choices if `value` is not one of them."""
    if value not in choices:
        raise ValueError(f"invalid {name} {value!r}; valid choices: {', '.join(map(repr, choices))}.")


# ----------------------------------------------------------------------------------------------
# Groups: the rollout.n responses to one prompt share a uid
# ----------------------------------------------------------------------------------------------


def group_index(index: Sequence | np.ndarray | torch.Tensor, device=None) -> tuple[torch.Tensor, int]:
    """Map group labels (verl's `uid` strings, or ints) to dense group numbers 0..G-1.

    Plays the role of `verl/utils/groupwise.py::as_torch_index`: group-wise statistics then become
    vectorised `index_add_` calls instead of a Python loop over the batch.

    Args:
        index: (B,) labels: a list/array of hashables (e.g. uid strings) or a 1-D integer tensor.
    Returns:
        (inverse, num_groups): inverse is a (B,) int64 tensor with inverse[i] = group of row i.
    """
    if isinstance(index, torch.Tensor):
        if index.dim() != 1:
            raise ValueError(f"index must be 1-D (one group id per row), got shape {tuple(index.shape)}")
        _, inverse = torch.unique(index, return_inverse=True)
    else:
        labels = np.asarray(index)
        if labels.ndim != 1:
            raise ValueError(f"index must be 1-D (one group id per row), got shape {labels.shape}")
        _, inverse = np.unique(labels, return_inverse=True)
        inverse = torch.as_tensor(inverse.reshape(-1), dtype=torch.long)
    inverse = inverse.to(device)
    return inverse, int(inverse.max().item()) + 1 if inverse.numel() else 0


def group_mean_std(scores: torch.Tensor, index) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row mean, unbiased std and size of the row's group (the GRPO/RLOO statistics).

        mean_g = sum_{i in g} s_i / n_g         std_g = sqrt( sum_{i in g} (s_i - mean_g)^2 / (n_g - 1) )

    Args:
        scores: (B,) one score per response.
        index: (B,) group labels (see `group_index`).
    Returns:
        (mean, std, size), each (B,): the statistics of each row's own group, broadcast back to the
        rows. For a group of one, std is NaN (n - 1 = 0); callers decide what a singleton means.
    """
    if scores.dim() != 1 or len(index) != scores.shape[0]:
        raise ValueError(f"scores must be (B,) and index must have B entries; got scores {tuple(scores.shape)} "
                         f"and {len(index)} index entries.")
    inverse, num_groups = group_index(index, device=scores.device)

    def group_sum(values: torch.Tensor) -> torch.Tensor:  # (B,) -> (G,)
        return torch.zeros(num_groups, dtype=scores.dtype, device=scores.device).index_add_(0, inverse, values)

    size = group_sum(torch.ones_like(scores))
    mean = (group_sum(scores) / size)[inverse]
    std = torch.sqrt(group_sum((scores - mean) ** 2) / (size - 1))[inverse]
    return mean, std, size[inverse]


# ----------------------------------------------------------------------------------------------
# Loss aggregation
# ----------------------------------------------------------------------------------------------

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: float | None = None,
    global_batch_size: float | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss matrix to the scalar that is back-propagated.

    Mirrors `verl/trainer/ppo/core_algos.py::agg_loss` (verl 0.9.1, same arguments).
    With S_i = sum_t m_it * l_it (the token sum of sequence i), T = sum_it m_it, and G = the number
    of sequences with at least one valid token:

        token-mean               sum_i S_i / T               every token weighs the same (PPO, DAPO)
        token-sum                sum_i S_i
        seq-mean-token-sum       sum_i S_i / G               every sequence weighs the same
        seq-mean-token-mean      sum_i [S_i / (sum_t m_it + 1e-8)] / G    (original GRPO)
        seq-mean-token-sum-norm  sum_i S_i / G / K           K = loss_scale_factor or L (Dr.GRPO)

    Fully masked rows are left out of G. In verl 0.9.1, seq-mean-token-sum-norm divides by G and K
    (older verl divided by K only).

    With several data-parallel processes, each holds part of a mini-batch. Pass the *global* T
    (`batch_num_tokens`) or G (`global_batch_size`) of the whole mini-batch and `dp_size`: each
    process's loss is then multiplied by dp_size, so that after the gradient all-reduce (an average
    over processes) the result is the exact loss of the whole mini-batch, however the tokens were
    split. With one process and no counts, everything is normalised by this batch.

    verl differs: with no valid token and no global count it returns NaN (0 / 0); minirl raises.

    Args:
        loss_mat: (B, L) per-token loss.
        loss_mask: (B, L) 1 for tokens that count.
        loss_agg_mode: one of LOSS_AGG_MODES.
        dp_size: number of data-parallel processes sharing the mini-batch.
        batch_num_tokens: T of the whole mini-batch across processes (token-mean).
        global_batch_size: G of the whole mini-batch across processes (seq-mean modes).
        loss_scale_factor: K for seq-mean-token-sum-norm; None uses L = loss_mask.shape[-1]. A
            constant (e.g. max_response_length) keeps the scale fixed across batches.
    Returns:
        A scalar tensor.
    """
    check_choice("loss_agg_mode", loss_agg_mode, LOSS_AGG_MODES)
    check_same_shape(loss_mat=loss_mat, loss_mask=loss_mask)
    if dp_size > 1 and loss_agg_mode == "token-mean" and batch_num_tokens is None:
        raise ValueError("agg_loss: with dp_size > 1, token-mean needs batch_num_tokens (the global token count).")
    if dp_size > 1 and loss_agg_mode.startswith("seq-mean") and global_batch_size is None:
        raise ValueError("agg_loss: with dp_size > 1, seq-mean modes need global_batch_size (the global count).")
    if loss_agg_mode != "token-sum" and batch_num_tokens is None and global_batch_size is None and not loss_mask.any():
        # verl returns 0/0 = NaN here, which silently poisons the weights after backward.
        raise ValueError(f"agg_loss: loss_mask has no valid token, so {loss_agg_mode} would divide by zero. "
                         "Skip this (micro-)batch, or check that rejection sampling did not mask everything.")
    if loss_agg_mode == "token-mean":
        tokens = loss_mask.sum() if batch_num_tokens is None else batch_num_tokens
        return masked_sum(loss_mat, loss_mask) / tokens * dp_size
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask) * dp_size
    tokens_per_seq = loss_mask.sum(dim=-1)
    seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)  # S_i
    if loss_agg_mode == "seq-mean-token-mean":
        seq_losses = seq_losses / (tokens_per_seq + 1e-8)
    seq_valid = (tokens_per_seq > 0).float()  # fully masked rows do not count as sequences
    sequences = seq_valid.sum() if global_batch_size is None else global_batch_size
    loss = masked_sum(seq_losses, seq_valid) / sequences * dp_size
    if loss_agg_mode == "seq-mean-token-sum-norm":
        loss = loss / (loss_scale_factor if loss_scale_factor is not None else loss_mask.shape[-1])
    return loss
