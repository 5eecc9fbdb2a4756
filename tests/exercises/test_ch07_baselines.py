"""Grades exercises/ch07_baselines.py (or solutions/ with --target solutions)."""

import inspect

import numpy as np
import pytest
import torch
from grading import call, close, expect_tensor, fail, load_chapter, raised

from minirl.advantage import ADV_ESTIMATOR_REGISTRY, compute_advantage, get_adv_estimator_fn
from minirl.config import AlgorithmConfig
from minirl.core import place_scores_on_last_token
from minirl.protocol import DataProto
from minirl.remax import compute_remax_outcome_advantage
from minirl.rloo import compute_rloo_outcome_advantage


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch07_baselines")


def batch(scores, lengths, length=5):
    mask = (torch.arange(length)[None] < torch.tensor(lengths)[:, None]).long()
    return place_scores_on_last_token(torch.tensor(scores, dtype=torch.float32), mask), mask


def per_row(advantages, mask):
    """The scalar each row was given (advantages are constant over a row's valid tokens)."""
    return (advantages * mask).sum(-1) / mask.sum(-1)


def rounded(t):
    return [round(v, 3) for v in t.tolist()]


# Groups of 4, 3, 1 and 2 (adjacent, as verl's interleaved repeat leaves them), ragged lengths.
SCORES = [1.0, 0.0, 0.0, 1.0, 0.2, 0.9, 0.4, 0.7, 0.3, 0.8]
LENGTHS = [5, 3, 4, 2, 5, 1, 3, 4, 2, 5]
INDEX = ["a"] * 4 + ["b"] * 3 + ["solo"] + ["c"] * 2


# ----------------------------------------------------------------------------------------------
# 7.1 rloo_advantages
# ----------------------------------------------------------------------------------------------


@pytest.mark.exercise("7.1", "rloo_advantages")
def test_rloo_matches_verl(ch):
    rewards, mask = batch(SCORES, LENGTHS)
    out = expect_tensor(call(ch.rloo_advantages, rewards, mask, INDEX), mask.shape, "advantages")
    expected, _ = compute_rloo_outcome_advantage(rewards, mask, INDEX)
    if close(out, expected, atol=1e-5):
        return
    valid = mask.bool()
    if close(out[valid], expected[valid], atol=1e-5):
        fail("the values on the response tokens are right, but padding is not 0: multiply by response_mask.")
    got, want = per_row(out, mask), per_row(expected, mask)
    scores = torch.tensor(SCORES)
    groups = [slice(0, 4), slice(4, 7), slice(7, 8), slice(8, 10)]
    with_itself = torch.cat([scores[g] - scores[g].mean() for g in groups])
    if close(got[[0, 1, 2, 3, 4, 5, 6, 8, 9]], with_itself[[0, 1, 2, 3, 4, 5, 6, 8, 9]], atol=1e-4):
        fail("your baseline is the mean of the WHOLE group, the sample itself included: that is GRPO without the "
             "std, smaller than RLOO by (n - 1) / n. Leave sample i out: baseline = (group sum - R_i) / (n - 1).")
    if close(got[[0, 1, 2, 3, 8, 9]], want[[0, 1, 2, 3, 8, 9]], atol=1e-4) and not close(got[7], want[7], atol=1e-4):
        fail(f"the group of one (score 0.7) got {got[7].item():.3f}. It has no other sample to compare with: verl's "
             "rloo keeps its raw score, A = R = 0.7.")
    whole = scores - (scores.sum() - scores) / (len(scores) - 1)
    if close(got, whole, atol=1e-4):
        fail("you left one out of the WHOLE batch. The baseline is the other samples of the SAME prompt: group the "
             "rows by index.")
    fail(f"RLOO advantages differ from verl's: expected per-response values {rounded(want)}, got {rounded(got)}.")


@pytest.mark.exercise("7.1", "rloo_advantages")
def test_rloo_singleton_keeps_its_score(ch):
    rewards, mask = batch([0.7, 1.0, 0.0, -0.4], [3, 2, 4, 1])
    out = per_row(call(ch.rloo_advantages, rewards, mask, ["solo", "pair", "pair", "alone"]), mask)
    if not torch.isfinite(out).all():
        fail("a group of one gave NaN or inf: it has no other sample, so n - 1 = 0. verl's rloo keeps its raw score.")
    if close(out[0], 0.0, atol=1e-6):
        fail("a group of one got advantage 0 (what verl's rloo_vectorized does). verl's rloo keeps the raw score: "
             "A = R = 0.7 here.")
    if not close(out, torch.tensor([0.7, 1.0, -1.0, -0.4]), atol=1e-5):
        fail(f"scores [0.7 | 1.0, 0.0 | -0.4] in groups (solo | pair | alone) should give [0.7, 1.0, -1.0, -0.4], "
             f"got {rounded(out)}.")


@pytest.mark.exercise("7.1", "rloo_advantages")
def test_rloo_is_a_scaled_centred_score(ch):
    g = torch.Generator().manual_seed(0)
    for n in (2, 3, 5):
        scores = torch.rand(2 * n, generator=g)
        index = ["x", "y"] * n  # the two groups interleaved: grouping is by label, not by position
        rewards, mask = batch(scores.tolist(), [3] * (2 * n), length=4)
        first = 0.5 * torch.rand(2 * n, generator=g)
        rewards[:, 0] += first  # a reward on the first token too: the score is the sum over tokens
        out = expect_tensor(call(ch.rloo_advantages, rewards, mask, index), mask.shape, "advantages")
        total = rewards.sum(-1)
        expected = torch.empty_like(total)
        for rows in (slice(0, None, 2), slice(1, None, 2)):
            expected[rows] = n / (n - 1) * (total[rows] - total[rows].mean())
        got = per_row(out, mask)
        if close(got, expected, atol=1e-5):
            continue
        if close(got, expected * (n - 1) / n, atol=1e-5):
            fail(f"with groups of {n}, your advantages are (n - 1) / n of RLOO's: you included the sample in its own "
                 "baseline. Use the mean of the OTHER n - 1 samples.")
        last_only = torch.empty_like(scores)
        for rows in (slice(0, None, 2), slice(1, None, 2)):
            last_only[rows] = n / (n - 1) * (scores[rows] - scores[rows].mean())
        if close(got, last_only, atol=1e-5):
            fail("the score is the sum of token_level_rewards over ALL tokens of the row, not the last token's value.")
        fail(f"groups of {n} labelled x, y, x, y, ...: expected A = R - (mean of the other n - 1 in the group) = "
             f"{rounded(expected)}, got {rounded(got)}. Are the groups formed by label (not by adjacency)?")


# ----------------------------------------------------------------------------------------------
# 7.2 remax_advantages
# ----------------------------------------------------------------------------------------------


def remax_pair(ch, rewards, baselines, mask):
    out = call(ch.remax_advantages, rewards, baselines, mask)
    if not isinstance(out, tuple) or len(out) != 2:
        fail("remax_advantages must return a pair (advantages, returns).")
    return expect_tensor(out[0], mask.shape, "advantages"), expect_tensor(out[1], mask.shape, "returns")


@pytest.mark.exercise("7.2", "remax_advantages")
def test_remax_toy(ch):
    rewards = torch.tensor([[0.1, 0.0, 0.5, 0.0]])  # a reward on a middle token and on the last valid one
    mask = torch.tensor([[1, 1, 1, 0]])
    advantages, returns = remax_pair(ch, rewards, torch.tensor([0.2]), mask)
    want_returns = torch.tensor([[0.6, 0.5, 0.5, 0.0]])
    if not close(returns, want_returns, atol=1e-5):
        if close(returns[0, :3], torch.tensor([0.6, 0.6, 0.6]), atol=1e-5):
            fail("returns hold the whole score 0.6 on every token. ReMax's returns are the reward-to-go, "
                 "G_t = sum of rewards from t on: [0.6, 0.5, 0.5].")
        if close(returns[0, :3], torch.tensor([0.1, 0.1, 0.6]), atol=1e-5):
            fail("your cumulative sum runs forwards (rewards up to t). The reward-to-go sums from t to the end: "
                 "x.flip(-1).cumsum(-1).flip(-1).")
        fail(f"rewards [0.1, 0, 0.5, pad] should give returns (reward-to-go) {want_returns.tolist()}, "
             f"got {returns.tolist()}.")
    want = torch.tensor([[0.4, 0.3, 0.3, 0.0]])
    if close(advantages, returns, atol=1e-5):
        fail("advantages equal the returns: subtract the greedy baseline b = reward_baselines[i] on each valid token.")
    if close(advantages[0, :3], want[0, :3], atol=1e-5) and not close(advantages, want, atol=1e-5):
        fail("right on the response tokens, but padding is not 0: subtract the baseline only where the mask is 1 "
             "(b * response_mask).")
    if not close(advantages, want, atol=1e-5):
        fail(f"with baseline 0.2 the advantages should be G - 0.2 on valid tokens, {rounded(want[0])}, "
             f"got {rounded(advantages[0])}.")


@pytest.mark.exercise("7.2", "remax_advantages")
def test_remax_matches_verl(ch):
    g = torch.Generator().manual_seed(3)
    lengths = torch.tensor([6, 1, 4, 3, 5])
    mask = (torch.arange(6)[None] < lengths[:, None]).long()
    rewards = 0.1 * torch.randn(5, 6, generator=g) * mask
    rewards[torch.arange(5), lengths - 1] += torch.rand(5, generator=g)
    rewards = rewards + 9.0 * (1 - mask)  # junk on padding: it must not count
    baselines = torch.rand(5, generator=g)
    advantages, returns = remax_pair(ch, rewards, baselines, mask)
    expected, expected_returns = compute_remax_outcome_advantage(rewards, baselines, mask)
    if close(advantages, expected, atol=1e-5) and close(returns, expected_returns, atol=1e-5):
        return
    valid = mask.bool()
    unmasked = rewards.flip(-1).cumsum(-1).flip(-1)
    if close(returns[valid], unmasked[valid], atol=1e-4):
        fail("rewards sitting on padded positions leaked into the reward-to-go: multiply token_level_rewards by "
             "response_mask BEFORE the reverse cumulative sum.")
    if close(returns, expected_returns, atol=1e-5) and close(advantages[valid], expected[valid], atol=1e-5):
        fail("right on the response tokens, but padding is not 0: subtract the baseline only where the mask is 1 "
             "(b * response_mask).")
    if not close(returns, expected_returns, atol=1e-5):
        fail(f"returns differ from verl's reward-to-go on a random ragged batch: row 0 expected "
             f"{rounded(expected_returns[0])}, got {rounded(returns[0])}.")
    fail(f"returns are right but advantages are not: A_t = G_t - b on valid tokens. Row 0 expected "
         f"{rounded(expected[0])}, got {rounded(advantages[0])}.")


@pytest.mark.exercise("7.2", "remax_advantages")
def test_remax_checks_the_baseline_shape(ch):
    rewards, mask = batch([1.0, 0.0, 0.5], [3, 2, 4])
    for baselines, what in [(torch.tensor([[0.5], [0.5], [0.2]]), "(B, 1)"), (torch.tensor([0.5, 0.2]), "(B - 1,)")]:
        error = raised(ch.remax_advantages, rewards, baselines, mask)
        if error is None:
            fail(f"reward_baselines of shape {what} was accepted. Raise a ValueError unless it is (B,): a (B, 1) "
                 "tensor broadcasts silently into a (B, B, L) result.")
        if not isinstance(error, ValueError):
            fail(f"reward_baselines of shape {what}: raise a ValueError, not {type(error).__name__} ({error}).")
    advantages, _ = remax_pair(ch, rewards, torch.tensor([1.0, 0.0, 0.5]), mask)
    if not close(advantages, torch.zeros_like(advantages), atol=1e-6):
        fail("when each sample scores exactly its greedy baseline, every advantage must be 0.")


# ----------------------------------------------------------------------------------------------
# 7.3 register_my_estimator
# ----------------------------------------------------------------------------------------------

NAME = "reinforce_median"


@pytest.fixture
def registry():
    """The registry with no 'reinforce_median' before the test, and as it was (without it) after."""
    before = {k: v for k, v in ADV_ESTIMATOR_REGISTRY.items() if k != NAME}
    ADV_ESTIMATOR_REGISTRY.pop(NAME, None)
    yield ADV_ESTIMATOR_REGISTRY
    ADV_ESTIMATOR_REGISTRY.clear()
    ADV_ESTIMATOR_REGISTRY.update(before)


def registered(ch, registry):
    """Run the reader's function; return what the registry now holds under NAME."""
    before = set(registry)
    call(ch.register_my_estimator)
    if NAME not in registry:
        new = sorted(set(registry) - before)
        if new:
            fail(f"register_my_estimator registered {new}, not {NAME!r}: use @register_adv_est({NAME!r}).")
        fail(f"after register_my_estimator() the registry has no {NAME!r}. Decorate the estimator defined INSIDE "
             f"register_my_estimator with @register_adv_est({NAME!r}) from minirl.advantage.")
    return get_adv_estimator_fn(NAME)


def median_reference(scores, index):
    out = torch.empty_like(scores)
    for label in set(index):
        rows = torch.tensor([other == label for other in index])
        out[rows] = scores[rows] - torch.quantile(scores[rows], 0.5)
    return out


def estimate(fn, **kwargs):
    """Call the registered estimator with verl's keyword arguments, explaining a signature mismatch."""
    try:
        inspect.signature(fn).bind(**kwargs)
    except TypeError as error:
        fail(f"the registry calls your estimator with keyword arguments {sorted(kwargs)}, and it refused: {error}. "
             "Use verl's signature (token_level_rewards, response_mask, index=None, config=None, **kwargs); "
             "**kwargs swallows the ones you do not use, like reward_baselines.")
    out = call(fn, **kwargs)
    if not isinstance(out, tuple) or len(out) != 2:
        fail("an estimator returns a pair (advantages, returns), as every verl estimator does.")
    shape = kwargs["token_level_rewards"].shape
    return expect_tensor(out[0], shape, "advantages"), expect_tensor(out[1], shape, "returns")


# Groups of 3 (median 0.1), 4 (median 1.25, lower middle 0.5), 2 (median 2.1) and 1, interleaved; ragged lengths.
MEDIAN_SCORES = [0.1, 3.0, 0.0, 0.5, 1.0, 0.0, 2.0, 0.2, 4.0, 1.0]
MEDIAN_LENGTHS = [5, 3, 4, 2, 5, 1, 3, 4, 2, 5]
MEDIAN_INDEX = ["odd", "even", "odd", "even", "odd", "even", "even", "pair", "pair", "solo"]


@pytest.mark.exercise("7.3", "register_my_estimator")
def test_estimator_is_registered(ch, registry):
    fn = registered(ch, registry)
    if not callable(fn):
        fail(f"the registry holds {fn!r} under {NAME!r}, not a function.")
    returned = call(ch.register_my_estimator)  # calling it twice must work too (re-running a notebook cell)
    if registry.get(NAME) is not returned:
        fail("register_my_estimator should return the function it registered (the one the decorator returns).")


@pytest.mark.exercise("7.3", "register_my_estimator")
def test_estimator_values_through_the_registry(ch, registry):
    fn = registered(ch, registry)
    rewards, mask = batch(MEDIAN_SCORES, MEDIAN_LENGTHS)
    index = np.array(MEDIAN_INDEX, dtype=object)
    advantages, returns = estimate(fn, token_level_rewards=rewards, response_mask=mask, config=AlgorithmConfig(),
                                   index=index, reward_baselines=torch.zeros(len(mask)))
    scores = torch.tensor(MEDIAN_SCORES)
    want = median_reference(scores, MEDIAN_INDEX)
    expected = want.unsqueeze(-1) * mask
    if not close(advantages, expected, atol=1e-5):
        valid = mask.bool()
        got = per_row(advantages, mask)
        if close(advantages[valid], expected[valid], atol=1e-5):
            fail("the values on the response tokens are right, but padding is not 0: multiply by response_mask.")
        lower = scores.clone()
        for label in set(MEDIAN_INDEX):
            rows = torch.tensor([other == label for other in MEDIAN_INDEX])
            lower[rows] = scores[rows] - torch.median(scores[rows])
        if close(got, lower, atol=1e-5):
            fail("right for the odd-sized group, wrong for the even ones: torch.median returns the LOWER middle "
                 "value. The median asked for is the mean of the two middle values: torch.quantile(x, 0.5).")
        if close(got, median_reference(scores, ["all"] * len(scores)), atol=1e-5):
            fail("you took the median of the whole batch: take it per group (the rows sharing an index label).")
        mean_based = scores.clone()
        for label in set(MEDIAN_INDEX):
            rows = torch.tensor([other == label for other in MEDIAN_INDEX])
            mean_based[rows] = scores[rows] - scores[rows].mean()
        if close(got, mean_based, atol=1e-5):
            fail("you subtracted the group MEAN; this estimator's baseline is the group MEDIAN.")
        fail(f"through the registry, expected per-response advantages {rounded(want)}, got {rounded(got)}.")
    if not close(returns, advantages, atol=1e-6):
        fail("returns should equal the advantages (as in verl's critic-free estimators).")


@pytest.mark.exercise("7.3", "register_my_estimator")
def test_estimator_median_of_even_group_and_singletons(ch, registry):
    fn = registered(ch, registry)
    rewards, mask = batch([0.0, 1.0, 2.0, 10.0, 0.6], [2, 3, 4, 1, 3])
    advantages, _ = estimate(fn, token_level_rewards=rewards, response_mask=mask, index=["g"] * 4 + ["solo"])
    got = per_row(advantages, mask)
    want = torch.tensor([-1.5, -0.5, 0.5, 8.5, 0.0])  # median of (0, 1, 2, 10) is (1 + 2) / 2 = 1.5
    if close(got, want, atol=1e-5):
        pass
    elif close(got[:4], torch.tensor([-1.0, 0.0, 1.0, 9.0]), atol=1e-5):
        fail("scores (0, 1, 2, 10) used baseline 1: torch.median's lower middle value. The median of an even group "
             "is the mean of the two middle values, 1.5 here (torch.quantile(x, 0.5)).")
    elif not close(got[4], 0.0, atol=1e-6):
        fail(f"a group of one is its own median, so its advantage is 0; got {got[4].item():.3f}.")
    else:
        fail(f"scores (0, 1, 2, 10 | 0.6) should give {want.tolist()}, got {rounded(got)}.")
    error = raised(fn, token_level_rewards=rewards, response_mask=mask, index=None)
    if error is not None:
        fail(f"with index=None your estimator raised {type(error).__name__}: {error}. index=None means the whole "
             "batch is one group (give every row the same label).")
    advantages, _ = estimate(fn, token_level_rewards=rewards, response_mask=mask, index=None)
    if not close(per_row(advantages, mask), torch.tensor([-1.0, 0.0, 1.0, 9.0, -0.4]), atol=1e-5):
        fail("with index=None the whole batch is one group: scores (0, 1, 2, 10, 0.6) have median 1, so the "
             f"advantages are (-1, 0, 1, 9, -0.4); got {rounded(per_row(advantages, mask))}.")


@pytest.mark.exercise("7.3", "register_my_estimator")
def test_estimator_runs_in_compute_advantage(ch, registry):
    registered(ch, registry)
    rewards, mask = batch(MEDIAN_SCORES, MEDIAN_LENGTHS)
    uids = np.array(MEDIAN_INDEX, dtype=object)
    data = DataProto(batch={"token_level_rewards": rewards, "response_mask": mask,
                            "reward_baselines": torch.rand(len(mask))},
                     non_tensor_batch={"uid": uids})
    try:
        out = compute_advantage(data, NAME, config=AlgorithmConfig(adv_estimator=NAME))
    except Exception as error:
        fail(f"minirl.advantage.compute_advantage(batch, {NAME!r}) failed with {type(error).__name__}: {error}. It "
             "calls your estimator with keywords token_level_rewards, response_mask, config, index (a numpy object "
             "array of uids) and reward_baselines.")
    want = median_reference(torch.tensor(MEDIAN_SCORES), MEDIAN_INDEX).unsqueeze(-1) * mask
    if not close(out["advantages"], want, atol=1e-5):
        fail("compute_advantage ran your estimator, but the advantages in the batch are not R_i - group median "
             "(groups given by the uid column, a numpy object array).")
    if not close(out["returns"], want, atol=1e-5):
        fail("compute_advantage ran your estimator, but the returns in the batch differ from the advantages.")
