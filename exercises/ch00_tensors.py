# EXERCISES FILE: fill in the functions below, then grade them with `make grade`.
# (Maintainers: this file is generated from solutions/; edit there, then run
#  `python -m minirl.book.exercises sync`.)
"""Chapter 0 exercises: the tensors of RL for LLMs.

Read chapters/00_tensors.ipynb first. Each function below has a twin in minirl/core.py (and in
verl's verl/utils/torch_functional.py); the grader compares yours with it on random batches.

Grade all:   make grade
Grade one:   .venv/bin/python -m pytest tests/exercises/test_ch00_tensors.py -k masked_mean
"""

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Exercise 0.1: the mean of `values` over the positions where `mask` is 1.

        masked_mean(x, m) = sum(x * m) / (sum(m) + 1e-8)

    Args:
        values: (B, L) float tensor. Padding positions may hold anything, even NaN.
        mask: (B, L) tensor of 0/1 (int or float).
        axis: None for one mean over every valid element of the batch (a scalar);
            an int (e.g. -1) to average along that dimension only (one mean per row: shape (B,)).
    Returns:
        A scalar tensor if axis is None, else a tensor of shape (B,) for axis=-1.

    Hint: `torch.where(mask.bool(), values, 0.0)` zeroes the padding first, so a NaN there cannot
    leak into the sum (NaN * 0 is NaN). The 1e-8 keeps an empty row from dividing by zero.
    """
    raise NotImplementedError("masked_mean: not written yet. Replace this line with your code.")


def masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Exercise 0.2: shift and scale `values` to mean 0 and variance 1 over the valid positions.

        mu  = masked mean of x over ALL valid positions of the batch (one number)
        var = masked mean of (x - mu)^2, times N / (N - 1) with N = sum(mask)   (unbiased)
        out = (x - mu) / sqrt(var + 1e-8)

    This is how verl normalises GAE advantages across a whole batch.

    Args:
        values: (B, L) float tensor.
        mask: (B, L) 0/1 tensor with at least two valid positions.
    Returns:
        (B, L) tensor. Like verl, apply the formula to every position, padding included: do not
        multiply the result by the mask.

    Hint: the statistics are over the whole batch, not per row. Use your masked_mean with axis=None
    (you may call it), and `torch.rsqrt` for 1 / sqrt.
    """
    raise NotImplementedError("masked_whiten: not written yet. Replace this line with your code.")


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Exercise 0.3: the log-probability of each label token, computed stably.

        log pi(y) = log softmax(z)_y = z_y - logsumexp(z)

    Args:
        logits: (B, L, V) float32 scores from the model.
        labels: (B, L) int64 token ids in [0, V).
    Returns:
        (B, L) log-probs (all <= 0).

    Hint: `torch.softmax(...).log()` underflows: with logits scaled by 100, most probabilities round
    to 0 and their log is -inf. `torch.logsumexp` subtracts the maximum first and never does.
    `torch.gather(logits, -1, labels.unsqueeze(-1)).squeeze(-1)` picks z_y.
    """
    raise NotImplementedError("logprobs_from_logits: not written yet. Replace this line with your code.")


def get_response_mask(response_id: torch.Tensor, eos_token: int) -> torch.Tensor:
    """Exercise 0.4: 1 on every response token up to AND including the first EOS, 0 after it.

        response_id   [[7, 5, 2, 2, 2],     eos_token = 2 (this tokenizer also pads with 2)
                       [4, 4, 4, 6, 9]]
        response_mask [[1, 1, 1, 0, 0],     the first EOS counts: the model must learn to stop
                       [1, 1, 1, 1, 1]]     no EOS at all: every token counts

    Args:
        response_id: (B, L) int64 generated token ids, right-padded.
        eos_token: the end-of-sequence token id.
    Returns:
        (B, L) int64 mask.

    Hint: do not build the mask as `response_id != pad_token_id`. When pad == eos (common with chat
    models) that also drops the EOS token. Count the EOS tokens strictly before each position
    (`cumsum` minus the current one) and keep positions where that count is 0.
    """
    raise NotImplementedError("get_response_mask: not written yet. Replace this line with your code.")


def place_scores_on_last_token(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Exercise 0.5: build `token_level_scores` from one score per sequence.

    The score goes on the last valid response token of each row (index sum(mask) - 1); every other
    position is 0.

        scores [1.0, -1.0]   response_mask [[1, 1, 1, 0],   ->   [[0, 0,  1.0, 0],
                                            [1, 1, 0, 0]]         [0, -1.0, 0, 0]]

    Args:
        scores: (B,) float tensor.
        response_mask: (B, L) 0/1 tensor; every row has at least one valid token.
    Returns:
        (B, L) tensor with the dtype of `scores`.

    Hint: `torch.arange(B)` gives the row indices; index a zeros tensor with (rows, last_positions).
    """
    raise NotImplementedError("place_scores_on_last_token: not written yet. Replace this line with your code.")
