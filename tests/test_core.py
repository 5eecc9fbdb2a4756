"""Unit tests of minirl/core.py against independent computations (loops, torch built-ins)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirl import core


def ragged(seed, batch=5, length=8, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(batch, length, generator=g, dtype=dtype)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    return values, mask


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), batch=st.integers(1, 6), length=st.integers(1, 9))
def test_masked_mean_equals_mean_of_selected_elements(seed, batch, length):
    values, mask = ragged(seed, batch, length)
    expected = values[mask.bool()].mean()
    assert torch.allclose(core.masked_mean(values, mask), expected, rtol=1e-7)
    per_row = torch.stack([values[i][mask[i].bool()].mean() for i in range(batch)])
    assert torch.allclose(core.masked_mean(values, mask, axis=-1), per_row, rtol=1e-7)


def test_masked_mean_has_verl_epsilon_and_ignores_padding_nan():
    values = torch.tensor([[2.0, float("nan")]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    out = core.masked_mean(values, mask)
    assert torch.isfinite(out)
    assert out.item() == pytest.approx(2.0 / (1 + 1e-8), abs=0, rel=1e-15)  # the 1e-8 is visible in float64
    assert core.masked_mean(values, torch.zeros_like(mask)).item() == 0.0


def test_masked_sum_with_float_mask_weights():
    values = torch.tensor([1.0, 2.0, 3.0])
    weights = torch.tensor([0.5, 0.0, 2.0])
    assert core.masked_sum(values, weights).item() == pytest.approx(0.5 + 6.0)


def test_masked_var_is_unbiased_over_whole_batch_and_rejects_tiny_masks():
    values, mask = ragged(1)
    expected = values[mask.bool()].var(unbiased=True)
    assert torch.allclose(core.masked_var(values, mask), expected, rtol=1e-6)
    assert torch.allclose(core.masked_var(values, mask, unbiased=False), values[mask.bool()].var(unbiased=False))
    with pytest.raises(ValueError, match="empty"):
        core.masked_var(values, torch.zeros_like(mask))
    one = torch.zeros_like(mask)
    one[0, 0] = 1
    with pytest.raises(ValueError, match="single valid element"):
        core.masked_var(values, one)


def test_masked_whiten_statistics_and_unmasked_padding():
    values, mask = ragged(2)
    out = core.masked_whiten(values, mask)
    valid = out[mask.bool()]
    assert valid.mean().abs() < 1e-10
    assert (valid.var(unbiased=True) - 1).abs() < 1e-6
    # Padding is whitened too (not re-masked), exactly as verl does.
    mu = values[mask.bool()].mean()
    sigma = torch.sqrt(values[mask.bool()].var(unbiased=True) + 1e-8)
    assert torch.allclose(out, (values - mu) / sigma)
    assert torch.allclose(core.masked_whiten(values, mask, shift_mean=False), (values - mu) / sigma + mu)


def test_logprobs_from_logits_equals_log_softmax_and_is_stable():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 17, generator=g)
    labels = torch.randint(0, 17, (3, 4), generator=g)
    expected = torch.log_softmax(logits, -1).gather(-1, labels[..., None])[..., 0]
    assert torch.allclose(core.logprobs_from_logits(logits, labels), expected, atol=1e-6)
    big = core.logprobs_from_logits(logits * 100, labels)
    assert torch.isfinite(big).all() and (big <= 1e-4).all()
    naive = torch.softmax(logits * 100, -1).gather(-1, labels[..., None])[..., 0].log()
    assert not torch.isfinite(naive).all(), "the test batch should make the naive softmax-then-log underflow"


def test_logprobs_from_logits_bfloat16_path():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 11, generator=g)
    labels = torch.randint(0, 11, (2, 3), generator=g)
    out = core.logprobs_from_logits(logits.bfloat16(), labels)
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), core.logprobs_from_logits(logits, labels), atol=0.05)


def test_entropy_from_logits():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(4, 6, generator=g, dtype=torch.float64)
    p = torch.softmax(logits, -1)
    assert torch.allclose(core.entropy_from_logits(logits), -(p * p.log()).sum(-1))
    assert core.entropy_from_logits(torch.zeros(1, 10)).item() == pytest.approx(math.log(10), rel=1e-6)
    assert core.entropy_from_logits(torch.tensor([[1000.0, 0.0, 0.0]])).item() == pytest.approx(0.0, abs=1e-6)


def test_get_response_mask_verl_docstring_example():
    ids = torch.tensor([[20, 10, 34, 1, 0, 0, 0], [78, 0, 76, 2, 1, 0, 0], [23, 98, 1, 0, 0, 0, 0],
                        [33, 3, 98, 45, 1, 0, 0]])
    assert core.get_response_mask(ids, eos_token=1).tolist() == [
        [1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0]]
    assert core.get_response_mask(ids, eos_token=[1, 2]).tolist() == [
        [1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0]]
    assert core.get_response_mask(ids, eos_token=1, dtype=torch.bool).dtype == torch.bool


def test_get_response_mask_when_pad_equals_eos():
    eos = pad = 2
    ids = torch.tensor([[5, 6, eos, pad, pad]])
    assert core.get_response_mask(ids, eos).tolist() == [[1, 1, 1, 0, 0]]
    assert (ids != pad).long().tolist() == [[1, 1, 0, 0, 0]], "the naive mask drops the EOS"


def test_compute_response_mask_slices_attention_mask():
    attention_mask = torch.tensor([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
    assert core.compute_response_mask(attention_mask, 3).tolist() == [[1, 1, 0], [1, 0, 0]]


def test_place_scores_on_last_token():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    out = core.place_scores_on_last_token(torch.tensor([1.0, 2.0, 3.0]), mask)
    assert out.tolist() == [[0, 0, 1.0, 0], [2.0, 0, 0, 0], [0, 0, 0, 3.0]]  # empty row: index -1, like verl


def test_clip_by_value_with_tensor_bounds():
    x = torch.tensor([-2.0, 0.5, 3.0])
    assert core.clip_by_value(x, torch.tensor([-1.0, 0.0, 0.0]), torch.tensor([1.0, 0.25, 5.0])).tolist() == [
        -1.0, 0.25, 3.0]
