"""Grades exercises/ch00_tensors.py (or solutions/ with --target solutions).

Each check compares the reader's function with minirl.core (the library's twin of verl's
function) or with a hand-computed toy, and explains the usual mistake when they differ.
"""

import pytest
import torch
from grading import call, close, expect_tensor, fail, load_chapter

from minirl import core


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch00_tensors")


def ragged_batch(seed: int, batch: int = 4, length: int = 7, dtype=torch.float32):
    """Random values and a right-padded mask whose rows have 2..length valid tokens."""
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(batch, length, generator=g, dtype=dtype) * 3 + 1
    lengths = torch.randint(2, length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    return values, mask


# ----------------------------------------------------------------------------------------------
# 0.1 masked_mean
# ----------------------------------------------------------------------------------------------

TOY_VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
TOY_MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


@pytest.mark.exercise("0.1", "masked_mean")
def test_masked_mean_toy(ch):
    out = expect_tensor(call(ch.masked_mean, TOY_VALUES, TOY_MASK), (), "masked_mean(values, mask)")
    if close(out, TOY_VALUES.mean()):
        fail("masked_mean averaged over the padding too (got 3.5, the plain mean). Multiply by the mask.")
    if close(out, 7 / 6):
        fail("masked_mean divided by the number of elements (6), not by the number of valid ones (3).")
    if not close(out, 7 / 3):
        fail(f"masked_mean of {TOY_VALUES.tolist()} under mask {TOY_MASK.tolist()} should be (1+2+4)/3 = 2.333, "
             f"got {out.item():.4f}.")


@pytest.mark.exercise("0.1", "masked_mean")
def test_masked_mean_per_row(ch):
    out = expect_tensor(call(ch.masked_mean, TOY_VALUES, TOY_MASK, axis=-1), (2,), "masked_mean(..., axis=-1)")
    if not close(out, torch.tensor([1.5, 4.0])):
        fail(f"with axis=-1 each row is averaged over its own valid tokens: expected [1.5, 4.0], got {out.tolist()}.")


@pytest.mark.exercise("0.1", "masked_mean")
def test_masked_mean_ignores_nan_in_padding(ch):
    values = TOY_VALUES.clone()
    values[0, 2] = float("nan")
    out = call(ch.masked_mean, values, TOY_MASK)
    if not torch.isfinite(out).all():
        fail("a NaN sitting in a padded position leaked into the mean (NaN * 0 is still NaN). "
             "Zero the padding first with torch.where(mask.bool(), values, 0.0).")


@pytest.mark.exercise("0.1", "masked_mean")
def test_masked_mean_empty_row_is_zero(ch):
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    out = call(ch.masked_mean, TOY_VALUES, mask, axis=-1)
    if not torch.isfinite(out).all():
        fail("a row with no valid token gave NaN: add 1e-8 to the denominator, as verl does.")
    if not close(out, torch.tensor([1.5, 0.0])):
        fail(f"expected [1.5, 0.0] for a full row and an empty row, got {out.tolist()}.")


@pytest.mark.exercise("0.1", "masked_mean")
def test_masked_mean_matches_verl(ch):
    for seed in range(5):
        values, mask = ragged_batch(seed)
        for axis in (None, -1):
            if not close(call(ch.masked_mean, values, mask, axis=axis), core.masked_mean(values, mask, axis=axis)):
                fail(f"masked_mean differs from minirl.core.masked_mean on a random batch (seed {seed}, axis={axis}).")


# ----------------------------------------------------------------------------------------------
# 0.2 masked_whiten
# ----------------------------------------------------------------------------------------------


@pytest.mark.exercise("0.2", "masked_whiten")
def test_masked_whiten_matches_verl(ch):
    values, mask = ragged_batch(0)
    out = expect_tensor(call(ch.masked_whiten, values, mask), values.shape, "masked_whiten(values, mask)")
    expected = core.masked_whiten(values, mask)
    valid = mask.bool()
    if close(out[valid], expected[valid]) and not close(out, expected):
        if close(out, expected * mask):
            fail("the valid positions are right, but you multiplied the result by the mask. verl does not: "
                 "padding positions hold (x - mean) / std too, and callers mask later.")
        fail("the valid positions are right but the padding positions differ: apply the formula everywhere.")
    if close(out, expected):
        return
    # Diagnose the usual mistakes by computing each wrong variant and comparing.
    m = mask.to(values.dtype)
    n = m.sum()
    mean = (values * m).sum() / n
    biased_var = (((values - mean) * m) ** 2).sum() / n
    if close(out[valid], ((values - mean) / torch.sqrt(biased_var + 1e-8))[valid], atol=1e-4):
        fail("you used the biased variance (divide by N). verl's masked_var is unbiased: multiply by N / (N - 1).")
    row_n = m.sum(-1, keepdim=True)
    row_mean = (values * m).sum(-1, keepdim=True) / row_n
    row_var = (((values - row_mean) * m) ** 2).sum(-1, keepdim=True) / (row_n - 1)
    if close(out[valid], ((values - row_mean) / torch.sqrt(row_var + 1e-8))[valid], atol=1e-4):
        fail("you whitened each row separately. verl uses ONE mean and ONE variance over all valid tokens "
             "of the batch (masked_mean with axis=None).")
    if close(out[valid], ((values - values.mean()) / values.std())[valid], atol=1e-4):
        fail("your mean and variance include the padding positions: compute them over the valid tokens only.")
    fail("masked_whiten differs from minirl.core.masked_whiten. Check: mean over valid tokens, unbiased "
         "variance over valid tokens, 1e-8 inside the square root.")


@pytest.mark.exercise("0.2", "masked_whiten")
def test_masked_whiten_toy(ch):
    values, mask = torch.tensor([[1.0, 3.0, 99.0]]), torch.tensor([[1, 1, 0]])
    out = expect_tensor(call(ch.masked_whiten, values, mask), values.shape, "masked_whiten(values, mask)")
    # mean 2, unbiased variance ((1-2)^2 + (3-2)^2) / (2 - 1) = 2, so the valid values become -+1/sqrt(2)
    expected = torch.tensor([-(2**-0.5), 2**-0.5])
    if close(out[0, :2], torch.tensor([-1.0, 1.0]), atol=1e-3):
        fail("on [1, 3] you got [-1, 1]: that is the biased variance (divide by N = 2). verl's masked_var is "
             "unbiased: divide by N - 1 = 1, so the values are -+1/sqrt(2).")
    if not close(out[0, :2], expected, atol=1e-4):
        fail(f"whitening [1, 3] (padding 99 ignored) should give {expected.tolist()}, got {out[0, :2].tolist()}: "
             "the padded 99 must not enter the mean or the variance.")


@pytest.mark.exercise("0.2", "masked_whiten")
def test_masked_whiten_keeps_dtype_and_is_finite(ch):
    values, mask = ragged_batch(5, dtype=torch.float64)
    out = expect_tensor(call(ch.masked_whiten, values, mask), values.shape, "masked_whiten(values, mask)")
    if out.dtype != torch.float64:
        fail(f"float64 values came back as {out.dtype}: keep the input's dtype (no .float()).")
    if not torch.isfinite(out).all():
        fail("the result holds NaN or inf: add 1e-8 to the variance before the square root.")


@pytest.mark.exercise("0.2", "masked_whiten")
def test_masked_whiten_gives_zero_mean_unit_variance(ch):
    for seed in range(1, 4):
        values, mask = ragged_batch(seed, dtype=torch.float64)
        out = call(ch.masked_whiten, values, mask)
        valid = out[mask.bool()]
        if not close(valid.mean(), 0.0, atol=1e-6):
            fail(f"after whitening, the valid tokens should have mean 0; got {valid.mean().item():.4f}.")
        if not close(valid.var(unbiased=True), 1.0, atol=1e-5):
            fail(f"after whitening, the valid tokens should have unbiased variance 1; got {valid.var().item():.4f}.")


# ----------------------------------------------------------------------------------------------
# 0.3 logprobs_from_logits
# ----------------------------------------------------------------------------------------------


def random_logits(seed: int, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 5, 11, generator=g) * scale
    labels = torch.randint(0, 11, (3, 5), generator=g)
    return logits, labels


@pytest.mark.exercise("0.3", "logprobs_from_logits")
def test_logprobs_from_logits_matches_verl(ch):
    logits, labels = random_logits(0)
    out = expect_tensor(call(ch.logprobs_from_logits, logits, labels), labels.shape, "logprobs_from_logits")
    if close(out, torch.gather(torch.softmax(logits, -1), -1, labels[..., None])[..., 0]):
        fail("you returned probabilities, not log-probabilities.")
    if close(out, torch.gather(logits, -1, labels[..., None])[..., 0]):
        fail("you returned the raw logit z_y; subtract logsumexp(z) to normalise it.")
    if not close(out, core.logprobs_from_logits(logits, labels)):
        fail("logprobs_from_logits differs from minirl.core.logprobs_from_logits on random logits.")


@pytest.mark.exercise("0.3", "logprobs_from_logits")
def test_logprobs_from_logits_is_stable_for_large_logits(ch):
    logits, labels = random_logits(1, scale=100.0)
    out = call(ch.logprobs_from_logits, logits, labels)
    if not torch.isfinite(out).all():
        fail("with logits x100 some log-probs are -inf or NaN: softmax underflowed to 0 before the log. "
             "Use z_y - torch.logsumexp(z, dim=-1).")
    if not close(out, core.logprobs_from_logits(logits, labels), atol=1e-3):
        fail("with logits x100 your log-probs are finite but wrong.")


@pytest.mark.exercise("0.3", "logprobs_from_logits")
def test_logprobs_from_logits_normalise(ch):
    logits, _ = random_logits(2)
    vocab = logits.shape[-1]
    total = torch.zeros(logits.shape[:-1])
    for token in range(vocab):
        labels = torch.full(logits.shape[:-1], token)
        total += call(ch.logprobs_from_logits, logits, labels).exp()
    if not close(total, torch.ones_like(total), atol=1e-4):
        fail("summed over the vocabulary, exp(log-prob) should be 1 at every position.")


# ----------------------------------------------------------------------------------------------
# 0.4 get_response_mask
# ----------------------------------------------------------------------------------------------

EOS = 2


@pytest.mark.exercise("0.4", "get_response_mask")
def test_get_response_mask_keeps_the_eos_when_pad_is_eos(ch):
    ids = torch.tensor([[7, 5, EOS, EOS, EOS], [4, 4, 4, 6, 9]])
    out = expect_tensor(call(ch.get_response_mask, ids, EOS), ids.shape, "get_response_mask")
    row = out[0].long().tolist()
    if row == [1, 1, 0, 0, 0]:
        fail("the EOS token itself is masked out. This is the classic pad == eos bug: a mask built as "
             "`ids != pad_token_id` also drops the EOS, so the model is never trained to stop. "
             "Keep everything up to AND including the first EOS.")
    if row != [1, 1, 1, 0, 0]:
        fail(f"for {ids[0].tolist()} with eos={EOS} expected [1, 1, 1, 0, 0], got {row}.")
    if out[1].long().tolist() != [1, 1, 1, 1, 1]:
        fail(f"a response with no EOS keeps every token: expected [1, 1, 1, 1, 1], got {out[1].long().tolist()}.")


@pytest.mark.exercise("0.4", "get_response_mask")
def test_get_response_mask_drops_everything_after_the_first_eos(ch):
    ids = torch.tensor([[EOS, 3, 4, EOS, 5], [6, EOS, 7, 8, 9]])
    out = call(ch.get_response_mask, ids, EOS).long()
    if out[1].tolist() == [1, 1, 1, 1, 1] or out[0].tolist()[1:] != [0, 0, 0, 0]:
        fail("tokens after the first EOS are kept. Only the first EOS ends the response; ignore later ones "
             f"(expected [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], got {out.tolist()}).")
    if out.tolist() != [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]]:
        fail(f"expected [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], got {out.tolist()}.")


@pytest.mark.exercise("0.4", "get_response_mask")
def test_get_response_mask_matches_verl(ch):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 6, (16, 9), generator=g)
    out = call(ch.get_response_mask, ids, EOS)
    if not torch.equal(out.long(), core.get_response_mask(ids, EOS)):
        fail("get_response_mask differs from minirl.core.get_response_mask on random ids.")


# ----------------------------------------------------------------------------------------------
# 0.5 place_scores_on_last_token
# ----------------------------------------------------------------------------------------------


@pytest.mark.exercise("0.5", "place_scores_on_last_token")
def test_place_scores_on_last_token_toy(ch):
    scores = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    out = expect_tensor(call(ch.place_scores_on_last_token, scores, mask), mask.shape, "token_level_scores")
    expected = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, -1.0, 0.0, 0.0]])
    if close(out, scores[:, None] * mask):
        fail("you spread the score over every valid token. An outcome reward sits on the LAST valid token only.")
    if close(out, torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, -1.0, 0.0]])):
        fail("off by one: the last valid token is at index mask.sum() - 1, not mask.sum().")
    if close(out, torch.tensor([[1.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]])):
        fail("the score sits on the first token; it belongs on the last valid one.")
    if not close(out, expected):
        fail(f"expected {expected.tolist()}, got {out.tolist()}.")


@pytest.mark.exercise("0.5", "place_scores_on_last_token")
def test_place_scores_on_last_token_matches_verl(ch):
    _, mask = ragged_batch(3, batch=6)
    scores = torch.linspace(-1, 1, 6)
    out = call(ch.place_scores_on_last_token, scores, mask)
    if not close(out, core.place_scores_on_last_token(scores, mask)):
        fail("place_scores_on_last_token differs from minirl.core.place_scores_on_last_token on a ragged batch.")
    if not close(out.sum(-1), scores):
        fail("summing token_level_scores over tokens should give back each sequence's score.")


@pytest.mark.exercise("0.5", "place_scores_on_last_token")
def test_place_scores_on_last_token_edge_rows(ch):
    scores = torch.tensor([0.5, 2.0, -3.0], dtype=torch.float64)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1], [1, 1, 0]])  # a one-token response and a full-length one
    out = expect_tensor(call(ch.place_scores_on_last_token, scores, mask), mask.shape, "token_level_scores")
    if out.dtype != torch.float64:
        fail(f"float64 scores came back as {out.dtype}: the output takes the dtype of `scores`, not of the mask.")
    expected = torch.tensor([[0.5, 0, 0], [0, 0, 2.0], [0, -3.0, 0]], dtype=torch.float64)
    if not close(out, expected):
        fail(f"a one-token response keeps its score on token 0 and a full-length one on its last token: expected "
             f"{expected.tolist()}, got {out.tolist()}.")
