"""Grades exercises/ch04_grpo.py (or solutions/ with --target solutions)."""

import pytest
import torch
from grading import call, close, expect_tensor, fail, load_chapter

from minirl.core import place_scores_on_last_token
from minirl.grpo import compute_grpo_outcome_advantage


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch04_grpo")


def batch(scores, lengths, length=5):
    mask = (torch.arange(length)[None] < torch.tensor(lengths)[:, None]).long()
    return place_scores_on_last_token(torch.tensor(scores, dtype=torch.float32), mask), mask


# Two groups of 4 with ragged lengths; group "b" has a small spread.
SCORES = [1.0, 0.0, 0.0, 1.0, 0.2, 0.4, 0.4, 0.4]
LENGTHS = [5, 3, 4, 2, 5, 5, 1, 3]
INDEX = ["a"] * 4 + ["b"] * 4


def per_row(advantages, mask):
    """The scalar each row was given (advantages are constant over a row's valid tokens)."""
    return (advantages * mask).sum(-1) / mask.sum(-1)


# ----------------------------------------------------------------------------------------------
# 4.1 group_advantages
# ----------------------------------------------------------------------------------------------


@pytest.mark.exercise("4.1", "group_advantages")
def test_group_advantages_match_verl(ch):
    rewards, mask = batch(SCORES, LENGTHS)
    out = expect_tensor(call(ch.group_advantages, rewards, mask, INDEX), mask.shape, "advantages")
    expected, _ = compute_grpo_outcome_advantage(rewards, mask, INDEX)
    if close(out, expected, atol=1e-4):
        return
    valid = mask.bool()
    if close(out[valid], expected[valid], atol=1e-4):
        fail("the values on the response tokens are right, but padding is not 0: multiply by response_mask.")
    scores = torch.tensor(SCORES)
    groups = [slice(0, 4), slice(4, 8)]
    biased = torch.cat([(scores[g] - scores[g].mean()) / (scores[g].std(unbiased=False) + 1e-6) for g in groups])
    if close(per_row(out, mask), biased, atol=1e-3):
        fail("you used the biased std (divide by n). GRPO in verl uses torch.std, the unbiased one (divide by n - 1).")
    whole = (scores - scores.mean()) / (scores.std() + 1e-6)
    if close(per_row(out, mask), whole, atol=1e-3):
        fail("you normalised with the mean and std of the whole batch. GRPO compares each response only with "
             "the other responses to the SAME prompt: compute mean and std per group (per index label).")
    fail(f"group advantages differ from verl's: expected per-response values "
         f"{[round(v, 3) for v in per_row(expected, mask).tolist()]}, got "
         f"{[round(v, 3) for v in per_row(out, mask).tolist()]}.")


@pytest.mark.exercise("4.1", "group_advantages")
def test_group_with_equal_rewards_gets_zero(ch):
    rewards, mask = batch([1.0, 1.0, 1.0, 0.0, 1.0], [3, 4, 5, 2, 2])
    out = call(ch.group_advantages, rewards, mask, ["x", "x", "x", "y", "y"])
    if not torch.isfinite(out).all():
        fail("a group whose rewards are all equal gave NaN or inf. Its std is 0: you must add epsilon to the "
             "std, so the advantage is 0 / (0 + epsilon) = 0.")
    if not close(out[:3], torch.zeros(3, 5), atol=1e-5):
        fail("a group whose rewards are all equal must get advantage 0 on every token: nothing to learn from it.")


@pytest.mark.exercise("4.1", "group_advantages")
def test_epsilon_is_added_to_the_std(ch):
    rewards, mask = batch([1.0, 1.0 + 2e-6], [2, 2])
    out = per_row(call(ch.group_advantages, rewards, mask, ["g", "g"]), mask)
    expected = per_row(compute_grpo_outcome_advantage(rewards, mask, ["g", "g"])[0], mask)
    if close(out, expected, atol=2e-2):
        return
    if out.abs().max() < 0.01:
        fail("with a tiny spread your advantages are ~0: did you add epsilon to the variance (sqrt(var + eps))? "
             "verl adds it to the std: (R - mean) / (std + epsilon).")
    fail(f"for rewards [1, 1 + 2e-6] expected about {expected.tolist()}, got {out.tolist()}.")


@pytest.mark.exercise("4.1", "group_advantages")
def test_singleton_group(ch):
    rewards, mask = batch([0.7, 1.0, 0.0], [3, 2, 4])
    out = per_row(call(ch.group_advantages, rewards, mask, ["solo", "pair", "pair"]), mask)
    if not torch.isfinite(out).all():
        fail("a group of one response gave NaN: its std (n - 1 = 0) is undefined. verl uses mean 0 and std 1 there.")
    if close(out[0], 0.0, atol=1e-6):
        fail("a group of one got advantage 0. verl's GRPO uses mean 0 and std 1 for it, so A = R / (1 + epsilon) "
             "(0.7 here); giving 0 is what rloo_vectorized does, not GRPO.")
    if not close(out[0], 0.7 / (1 + 1e-6), atol=1e-5):
        fail(f"a group of one should get its raw score / (1 + epsilon) = 0.7, got {out[0].item():.4f}.")


@pytest.mark.exercise("4.1", "group_advantages")
def test_dr_grpo_does_not_divide_by_the_std(ch):
    rewards, mask = batch(SCORES, LENGTHS)
    out = call(ch.group_advantages, rewards, mask, INDEX, norm_adv_by_std_in_grpo=False)
    expected, _ = compute_grpo_outcome_advantage(rewards, mask, INDEX, norm_adv_by_std_in_grpo=False)
    if not close(out, expected, atol=1e-5):
        fail("with norm_adv_by_std_in_grpo=False (Dr.GRPO) the advantage is R - group mean, not divided by the std.")


# ----------------------------------------------------------------------------------------------
# 4.2 repeat_with_uids
# ----------------------------------------------------------------------------------------------


@pytest.mark.exercise("4.2", "repeat_with_uids")
def test_repeat_is_interleaved(ch):
    prompts, uids = call(ch.repeat_with_uids, ["a", "b", "c"], 2)
    if list(prompts) == ["a", "b", "c", "a", "b", "c"]:
        fail("the copies are tiled (a b c a b c). verl repeats with interleave=True: a a b b c c, so the n "
             "responses to one prompt sit next to each other.")
    if list(prompts) != ["a", "a", "b", "b", "c", "c"]:
        fail(f"expected ['a', 'a', 'b', 'b', 'c', 'c'], got {list(prompts)}.")
    if len(uids) != 6 or uids[0] != uids[1] or uids[2] != uids[3] or len({uids[0], uids[2], uids[4]}) != 3:
        fail("each prompt needs one uid shared by its n copies, and different prompts need different uids.")


@pytest.mark.exercise("4.2", "repeat_with_uids")
def test_repeat_once_and_many_times(ch):
    prompts, uids = call(ch.repeat_with_uids, ["a", "b"], 1)
    if list(prompts) != ["a", "b"] or len(set(uids)) != 2:
        fail(f"with n=1 the prompts come back unchanged, each with its own uid; got {list(prompts)}, {list(uids)}.")
    prompts, uids = call(ch.repeat_with_uids, ["p", "q"], 5)
    if list(prompts) != ["p"] * 5 + ["q"] * 5 or len(uids) != 10 or len(set(uids[:5])) != 1 or uids[4] == uids[5]:
        fail("with n=5, expected five 'p' sharing one uid, then five 'q' sharing another; "
             f"got {list(prompts)} with uids {list(uids)}.")
    if not all(isinstance(u, str) for u in uids):
        fail("uids should be strings (verl stores str(uuid.uuid4())), so they can be compared and written out.")


@pytest.mark.exercise("4.2", "repeat_with_uids")
def test_uid_is_per_prompt_not_per_text(ch):
    _, uids = call(ch.repeat_with_uids, ["2+2=?", "2+2=?"], 3)
    if uids[0] == uids[3]:
        fail("two rows with the same question text got the same uid, so their 6 responses would form one "
             "group. The uid identifies a prompt ROW (uuid4 per row), not its text.")
    _, fresh = call(ch.repeat_with_uids, ["2+2=?"], 1)
    if fresh[0] in uids:
        fail("uids must be fresh for every call (uuid4), not derived from positions like '0', '1'.")
