"""Grades exercises/ch02_gae.py (or solutions/ with --target solutions)."""

import pytest
import torch
from grading import call, close, expect_tensor, fail, load_chapter, raised

from minirl.gae import compute_gae_advantage_return


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch02_gae")


def padded_batch(seed, batch=6, length=7, dtype=torch.float64):
    """Ragged rows (1s then padding): a score on the last valid token plus a small per-token reward (a KL
    penalty), critic values 0 on padding as verl's critic writes them."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    rewards = 0.05 * torch.randn(batch, length, generator=g, dtype=dtype) * mask
    rewards[torch.arange(batch), lengths - 1] += torch.randint(0, 2, (batch,), generator=g).to(dtype)
    values = torch.randn(batch, length, generator=g, dtype=dtype) * mask
    return rewards, values, mask


def verl_scan(rewards, values, mask, gamma, lam):
    """The twin's raw advantages (before whitening) and returns: returns - values undoes the R = A + V step."""
    _, returns = compute_gae_advantage_return(rewards, values, mask, gamma, lam)
    return returns - values, returns


def variant(rewards, values, mask, gamma, lam, *, forward=False, unreversed=False, reset="",
            ignore_mask=False, no_gamma_in_recursion=False, v_t=False, zero_padding=False):
    """The scan with one classic mistake switched on (all off: verl's scan)."""
    m = torch.ones_like(values) if ignore_mask else mask.to(values.dtype)
    next_value, last_gae, columns = torch.zeros_like(values[:, 0]), torch.zeros_like(values[:, 0]), []
    steps = range(values.shape[1]) if forward else reversed(range(values.shape[1]))
    for t in steps:
        if v_t:
            next_value = m[:, t] * values[:, t] + (1 - m[:, t]) * next_value
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        gae = delta + (1.0 if no_gamma_in_recursion else gamma) * lam * last_gae
        if not v_t:
            next_value = m[:, t] * values[:, t] + (1 - m[:, t]) * next_value
        last_gae = m[:, t] * gae + (1 - m[:, t]) * last_gae
        if "value" in reset:  # "value", "gae" or "value gae": zeroed at masked tokens instead of carried
            next_value = values[:, t] * m[:, t]
        if "gae" in reset:
            last_gae = gae * m[:, t]
        columns.append(last_gae * m[:, t] if zero_padding else last_gae)
    if not unreversed:
        columns = columns[::-1]
    return torch.stack(columns, dim=1)


def whiten(x, mask):
    m = mask.to(x.dtype)
    n = m.sum()
    mean = (x * m).sum() / n
    return (x - mean) / torch.sqrt(((x - mean) ** 2 * m).sum() / (n - 1) + 1e-8)


def scan_pair(ch, rewards, values, mask, gamma, lam):
    out = call(ch.gae_scan, rewards, values, mask, gamma, lam)
    if not isinstance(out, tuple) or len(out) != 2:
        fail("gae_scan must return a pair (advantages_raw, returns).")
    advantages = expect_tensor(out[0], values.shape, "advantages_raw")
    returns = expect_tensor(out[1], values.shape, "returns")
    return advantages, returns


def diagnose_scan(out, rewards, values, mask, gamma, lam, where, hint=""):
    """Fail with the classic mistake that `out` matches on the valid tokens, if any."""
    valid = mask.bool()
    expected, _ = verl_scan(rewards, values, mask, gamma, lam)
    if close(out[valid], expected[valid], atol=1e-5):
        return
    forwards = ("you scanned FORWARDS (t = 0 .. L-1). A_t needs A_{t+1}, so the scan must run backwards: "
                "for t in reversed(range(L)).")
    carry = ("at a masked token you reset V_{t+1} or A_{t+1} to 0. verl carries them over the token unchanged: "
             "next_value = m * V_t + (1 - m) * next_value, and the same for last_gae.")
    mistakes = [
        (dict(forward=True), forwards),
        (dict(forward=True, unreversed=True), forwards),
        (dict(unreversed=True), "the numbers are right but in reversed order along each row: the backward loop "
                                "collects column L-1 first, so reverse the list before torch.stack."),
        (dict(no_gamma_in_recursion=True), "you forgot gamma in the recursion: A_t = delta_t + gamma * lam * A_{t+1}, "
                                           "not delta_t + lam * A_{t+1}."),
        (dict(v_t=True), "your TD error uses V_t where it needs V_{t+1}: compute delta_t with the PREVIOUS "
                         "next_value, and only then set next_value = V_t."),
        (dict(reset="value"), carry),
        (dict(reset="gae"), carry),
        (dict(reset="value gae"), carry),
        (dict(ignore_mask=True), "you ignored response_mask: the values sitting on masked positions leaked into the "
                                 "TD errors. Skip masked tokens by carrying next_value and last_gae over them."),
    ]
    for flags, message in mistakes:
        if close(out[valid], variant(rewards, values, mask, gamma, lam, **flags)[valid], atol=1e-5):
            fail(f"{where}: {message}")
    if close(out[valid], whiten(expected, mask)[valid], atol=1e-4):
        fail(f"{where}: your advantages are whitened. gae_scan returns the RAW advantages; whitening is 2.2.")
    fail(f"{where}: advantages differ from verl's on the response tokens. Expected row 0 "
         f"{[round(v, 4) for v in expected[0][valid[0]].tolist()]}, got "
         f"{[round(v, 4) for v in out[0][valid[0]].tolist()]}.{hint}")


# ----------------------------------------------------------------------------------------------
# 2.1 gae_scan
# ----------------------------------------------------------------------------------------------


@pytest.mark.exercise("2.1", "gae_scan")
def test_gae_scan_toy(ch):
    rewards, values = torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.6, 0.8]])
    mask = torch.ones(1, 3)
    advantages, returns = scan_pair(ch, rewards, values, mask, 1.0, 0.5)
    # t=2: delta = 1 + 0 - 0.8 = 0.2, A = 0.2;  t=1: delta = 0.8 - 0.6 = 0.2, A = 0.2 + 0.5 * 0.2 = 0.3;
    # t=0: delta = 0.6 - 0.5 = 0.1, A = 0.1 + 0.5 * 0.3 = 0.25.
    expected = torch.tensor([[0.25, 0.3, 0.2]])
    if not close(advantages, expected, atol=1e-5):
        diagnose_scan(advantages, rewards, values, mask, 1.0, 0.5, "rewards (0, 0, 1), values (0.5, 0.6, 0.8), "
                      "gamma 1, lam 0.5")
    if not close(returns, expected + values, atol=1e-5):
        fail(f"returns should be advantages_raw + values = {(expected + values).tolist()}, got {returns.tolist()}: "
             "R_t = A_t + V_t, with the raw (unwhitened) A_t.")


@pytest.mark.exercise("2.1", "gae_scan")
def test_gae_scan_matches_verl(ch):
    settings = [(1.0, 1.0), (1.0, 0.95), (0.9, 0.8), (0.99, 0.0), (0.8, 1.0)]
    for seed, (gamma, lam) in enumerate(settings * 2):
        rewards, values, mask = padded_batch(seed)
        advantages, returns = scan_pair(ch, rewards, values, mask, gamma, lam)
        where = f"gamma={gamma}, lam={lam}, random padded batch {seed}"
        diagnose_scan(advantages, rewards, values, mask, gamma, lam, where)
        expected, expected_returns = verl_scan(rewards, values, mask, gamma, lam)
        if not close(advantages, expected, atol=1e-5):
            fail(f"{where}: right on the response tokens, wrong on padding. After the last valid token verl's "
                 "last_gae is still 0, so padding positions hold 0.")
        if not close(returns, expected_returns, atol=1e-5):
            fail(f"{where}: advantages are right but returns are not: returns = advantages_raw + values "
                 "(before whitening), on every position.")


@pytest.mark.exercise("2.1", "gae_scan")
def test_gae_scan_extremes_of_lambda(ch):
    rewards, values, mask = padded_batch(7)
    rewards = rewards + 0.3 * mask * (torch.arange(7) == 1)  # a reward in the middle too
    valid = mask.bool()
    advantages, _ = scan_pair(ch, rewards, values, mask, 1.0, 1.0)
    reward_to_go = rewards.flip(-1).cumsum(-1).flip(-1)
    if not close(advantages[valid], (reward_to_go - values)[valid], atol=1e-5):
        diagnose_scan(advantages, rewards, values, mask, 1.0, 1.0, "gamma 1, lam 1")
        fail("with gamma = lam = 1, GAE is the Monte Carlo advantage: reward-to-go minus V_t. Yours is not.")
    advantages, _ = scan_pair(ch, rewards, values, mask, 0.9, 0.0)
    next_values = torch.cat([values[:, 1:], torch.zeros(len(values), 1, dtype=values.dtype)], dim=1)
    td = rewards + 0.9 * next_values - values
    if not close(advantages[valid], td[valid], atol=1e-5):
        diagnose_scan(advantages, rewards, values, mask, 0.9, 0.0, "gamma 0.9, lam 0")
        fail("with lam = 0, A_t is the one-step TD error r_t + gamma * V_{t+1} - V_t. Yours is not.")


@pytest.mark.exercise("2.1", "gae_scan")
def test_gae_scan_skips_masked_tokens(ch):
    rewards, values, mask = padded_batch(3)
    g = torch.Generator().manual_seed(11)
    values = values + 5 * torch.randn(values.shape, generator=g, dtype=values.dtype) * (1 - mask)  # junk on padding
    mask = mask.clone()
    mask[0, :] = torch.tensor([1, 1, 0, 1, 0, 1, 0])  # holes in the middle
    mask[1, :] = torch.tensor([1, 0, 0, 1, 1, 0, 0])
    rewards[0, 5], rewards[1, 4] = 1.0, 1.0
    advantages, returns = scan_pair(ch, rewards, values, mask, 0.95, 0.9)
    where = "a batch with holes in the masks and junk values on padding"
    diagnose_scan(advantages, rewards, values, mask, 0.95, 0.9, where,
                  " Carry next_value and last_gae over EVERY masked token, holes in the middle included.")
    expected, expected_returns = verl_scan(rewards, values, mask, 0.95, 0.9)
    if not close(advantages, expected, atol=1e-5):
        if close(advantages, variant(rewards, values, mask, 0.95, 0.9, zero_padding=True), atol=1e-5):
            fail(f"{where}: right on the response tokens, but you wrote 0 on masked positions. verl writes the "
                 "carried last_gae there (so a hole holds A of the next valid token): append last_gae every step.")
        fail(f"{where}: right on the response tokens, wrong on masked positions: write the carried last_gae there.")
    if not close(returns, expected_returns, atol=1e-5):
        fail(f"{where}: advantages are right but returns are not: returns = advantages_raw + values on EVERY "
             "position, padding included (verl does not mask them; the critic loss does).")


# ----------------------------------------------------------------------------------------------
# 2.2 whiten_advantages
# ----------------------------------------------------------------------------------------------


@pytest.mark.exercise("2.2", "whiten_advantages")
def test_whiten_advantages_match_minirl(ch):
    for seed, (gamma, lam) in enumerate([(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)]):
        rewards, values, mask = padded_batch(seed + 20)
        expected, _ = compute_gae_advantage_return(rewards, values, mask, gamma, lam)
        raw, _ = verl_scan(rewards, values, mask, gamma, lam)
        out = expect_tensor(call(ch.whiten_advantages, raw, mask), raw.shape, "advantages")
        if close(out, expected, atol=1e-5):
            continue
        valid = mask.bool()
        if close(out[valid], expected[valid], atol=1e-5):
            fail("right on the response tokens, but padding is not 0: multiply the result by response_mask "
                 "(minirl does; verl leaves (A - mu) / sigma there).")
        if close(out[valid], raw[valid], atol=1e-5):
            fail("you returned the raw advantages unchanged: subtract the mean and divide by the std.")
        m = mask.to(raw.dtype)
        rows = m.sum(-1) >= 2
        row_n = m.sum(-1, keepdim=True)
        row_mean = (raw * m).sum(-1, keepdim=True) / row_n
        per_row = (raw - row_mean) / torch.sqrt(((raw - row_mean) ** 2 * m).sum(-1, keepdim=True) / (row_n - 1) + 1e-8)
        if close(out[rows][valid[rows]], per_row[rows][valid[rows]], atol=1e-4):
            fail("you whitened each row separately. verl uses ONE mean and ONE variance over all valid tokens of "
                 "the batch (a row of one token would even divide by zero here).")
        n = m.sum()
        mean = (raw * m).sum() / n
        biased = (raw - mean) / torch.sqrt(((raw - mean) ** 2 * m).sum() / n + 1e-8)
        if close(out[valid], biased[valid], atol=1e-4):
            fail("you used the biased variance (divide by N). verl's masked_var is unbiased: divide by N - 1.")
        if close(out[valid], ((raw - raw.mean()) / raw.std())[valid], atol=1e-4):
            fail("your mean and variance include the padding positions: compute them over valid tokens only.")
        fail(f"whitened advantages differ from minirl's compute_gae_advantage_return (gamma={gamma}, lam={lam}). "
             "Check: one mean and one unbiased variance over all valid tokens, 1e-8 inside the square root.")


@pytest.mark.exercise("2.2", "whiten_advantages")
def test_whiten_advantages_statistics_are_batch_wide(ch):
    raw = torch.tensor([[1.0, 2.0, 0.0], [5.0, 6.0, 7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    out = expect_tensor(call(ch.whiten_advantages, raw, mask), raw.shape, "advantages")
    expected = whiten(raw, mask) * mask
    if close(out, expected, atol=1e-5):
        return
    if close(out[0, :2], torch.tensor([-0.7071, 0.7071]), atol=1e-3):
        fail("row 0 came out with mean 0 on its own: you whitened each row separately. verl uses ONE mean and ONE "
             "variance over all valid tokens of the batch, so row 0 (which did worse) stays negative.")
    fail(f"rows [1, 2] and [5, 6, 7] whitened together should give {[round(v, 4) for v in expected.flatten().tolist()]}"
         f" (padding 0), got {[round(v, 4) for v in out.flatten().tolist()]}.")


@pytest.mark.exercise("2.2", "whiten_advantages")
def test_whiten_advantages_toy_unbiased_and_finite(ch):
    raw, mask = torch.tensor([[1.0, 3.0, 99.0]]), torch.tensor([[1, 1, 0]])
    out = expect_tensor(call(ch.whiten_advantages, raw, mask), raw.shape, "advantages")
    if close(out[0, :2], torch.tensor([-1.0, 1.0]), atol=1e-3):
        fail("[1, 3] gave [-1, 1]: that is the biased variance (divide by N = 2). Divide by N - 1 = 1: the values "
             "are -+1/sqrt(2).")
    if not close(out[0], torch.tensor([-(2**-0.5), 2**-0.5, 0.0]), atol=1e-4):
        fail(f"[1, 3, padding 99] should give [-0.7071, 0.7071, 0], got {[round(v, 4) for v in out[0].tolist()]}: "
             "the padded 99 stays out of the statistics and its position is 0.")
    out = call(ch.whiten_advantages, torch.full((2, 3), 0.5), torch.ones(2, 3))
    if not torch.isfinite(out).all():
        fail("equal advantages (variance 0) gave NaN or inf: put 1e-8 inside the square root, sqrt(var + 1e-8).")
    if not close(out, torch.zeros(2, 3), atol=1e-6):
        fail(f"equal advantages should whiten to 0, got {out.tolist()}.")


@pytest.mark.exercise("2.2", "whiten_advantages")
def test_whiten_advantages_needs_two_valid_tokens(ch):
    raw = torch.tensor([[0.3, 1.0, 2.0], [4.0, 5.0, 6.0]])
    for mask, what in [(torch.tensor([[1, 0, 0], [0, 0, 0]]), "a single valid token"),
                       (torch.zeros(2, 3, dtype=torch.long), "no valid token")]:
        error = raised(ch.whiten_advantages, raw, mask)
        if error is None:
            fail(f"with {what} in the mask, the unbiased variance divides by N - 1 <= 0, yet whiten_advantages "
                 "returned a result. Raise a ValueError (as minirl.core.masked_var does).")
        if not isinstance(error, ValueError):
            fail(f"with {what} in the mask, raise a ValueError, not {type(error).__name__}: {error}")
    out = call(ch.whiten_advantages, raw, torch.tensor([[1, 1, 0], [0, 0, 0]]))
    if not close(out, torch.tensor([[-(2**-0.5), 2**-0.5, 0.0], [0.0, 0.0, 0.0]]), atol=1e-3):
        fail("two valid tokens are enough: [0.3, 1.0] should whiten to [-0.7071, 0.7071].")
