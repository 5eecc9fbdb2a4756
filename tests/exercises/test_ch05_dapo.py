"""Grades exercises/ch05_dapo.py (or solutions/ with --target solutions)."""

import numbers

import numpy as np
import pytest
import torch
from grading import call, close, expect_tensor, fail, load_chapter, raised
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirl.dapo import compute_overlong_penalty as minirl_overlong_penalty
from minirl.dapo import filter_groups as minirl_filter_groups


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch05_dapo")


# Every fuzz test sees the same 200 cases on every run (derandomize): a grade does not change between runs.
FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None, report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def rounded(values) -> list:
    return [round(float(v), 4) for v in values]


# ----------------------------------------------------------------------------------------------
# 5.1 compute_overlong_penalty
# ----------------------------------------------------------------------------------------------


def tokens(n) -> str:
    return f"{n:g} token" if n == 1 else f"{n:g} tokens"


def verl_overlong(length: float, max_resp_len: int, buffer_len: int, factor: float) -> float:
    """The overlong branch of verl 0.9.1's DAPORewardManager.run_single, for one response."""
    expected_len = max_resp_len - buffer_len
    exceed_len = length - expected_len
    return min(-exceed_len / buffer_len * factor, 0)


def verl_penalties(lengths: torch.Tensor, max_len: int, buf: int, factor: float) -> torch.Tensor:
    return torch.tensor([verl_overlong(x, max_len, buf, factor) for x in lengths.double().tolist()],
                        dtype=torch.float64)


def call_text(lengths, max_len, buf, factor) -> str:
    shown = lengths.tolist() if lengths.numel() <= 12 else f"<{lengths.numel()} lengths>"
    return (f"compute_overlong_penalty({shown}, max_response_length={max_len}, overlong_buffer_len={buf}, "
            f"penalty_factor={factor})")


def penalty(ch, lengths: torch.Tensor, max_len: int, buf: int, factor: float) -> torch.Tensor:
    """Call the reader's compute_overlong_penalty; check that it returned (B,) floats."""
    text = call_text(lengths, max_len, buf, factor)
    out = call(ch.compute_overlong_penalty, lengths.clone(), max_len, buf, factor)
    if isinstance(out, torch.Tensor) and out.dim() == 0 and lengths.dim() == 1:
        fail(f"{text} returned a single number, shape (): return one penalty per response, shape "
             f"{tuple(lengths.shape)} (no .sum(), .mean() or .item()).")
    out = expect_tensor(out, tuple(lengths.shape), f"the result of {text}")
    if not out.is_floating_point():
        fail(f"{text} returned a {out.dtype} tensor: the penalty is fractional (-0.25, -0.5, ...), so return floats. "
             "Lengths are counts (response_mask.sum(-1) is int64): convert them, lengths.float(), and divide with /, "
             "not //.")
    return out.detach()


def why_penalty(lengths: torch.Tensor, max_len: int, buf: int, factor: float, got: torch.Tensor) -> str:
    """The classic mistake that gives exactly `got`, in a sentence, or ''."""
    L, E = lengths.double(), max_len - buf
    want = verl_penalties(lengths, max_len, buf, factor)
    raw = -(L - E) / buf * factor
    mistakes = [
        (raw, "you did not clamp at 0: responses shorter than max_response_length - overlong_buffer_len got a "
              "POSITIVE penalty, a bonus for being short. It is min(-exceed / overlong_buffer_len * penalty_factor, "
              "0): torch.clamp(..., max=0.0)."),
        (-(L - E).abs() / buf * factor, "you used abs(): responses shorter than the zone are punished like long "
                                        "ones. Before the zone the penalty is 0: min(..., 0), torch.clamp(..., "
                                        "max=0.0), not abs()."),
        (raw.clamp(max=0).abs(), "your penalties are positive: the penalty is ADDED to the score and must lower it, "
                                 "so it is <= 0: min(-exceed / overlong_buffer_len * penalty_factor, 0)."),
        (raw.clamp(min=0), "you kept the positive part, max(..., 0) or torch.clamp(min=0): short responses get a "
                           "bonus and long ones pay nothing. It is min(..., 0): torch.clamp(..., max=0.0)."),
        ((-(L - E) / max_len * factor).clamp(max=0), "you divided by max_response_length: the penalty grows over the "
                                                     "buffer zone, divide exceed by overlong_buffer_len so that it "
                                                     "reaches -penalty_factor exactly at max_response_length."),
        ((-(L - buf) / buf * factor).clamp(max=0), "your zone starts after overlong_buffer_len tokens; it starts after "
                                                   "expected = max_response_length - overlong_buffer_len tokens (the "
                                                   "buffer is the LAST tokens of the budget)."),
        ((-(L - E) / (buf * factor)).clamp(max=0) if factor else raw, "you divided by penalty_factor; multiply by it: "
                                                                      "the penalty at max_response_length is "
                                                                      "-penalty_factor."),
        ((-(L - E) / buf).clamp(max=0), "you left out penalty_factor: multiply by it, the penalty at "
                                        "max_response_length is -penalty_factor."),
        (torch.floor(-(L - E) / buf).clamp(max=0) * factor, "your penalty moves in whole steps: integer division "
                                                            "(//) floors -exceed / overlong_buffer_len. Convert the "
                                                            "lengths to float and divide with /."),
        ((-(L - E - 1) / buf * factor).clamp(max=0), "off by one: a response of max_response_length - "
                                                     "overlong_buffer_len tokens pays 0 and one of "
                                                     "max_response_length tokens pays exactly penalty_factor: "
                                                     "exceed = length - (max_response_length - overlong_buffer_len)."),
        ((-(L - E + 1) / buf * factor).clamp(max=0), "off by one: a response of max_response_length - "
                                                     "overlong_buffer_len tokens pays 0 and one of "
                                                     "max_response_length tokens pays exactly penalty_factor: "
                                                     "exceed = length - (max_response_length - overlong_buffer_len)."),
    ]
    if not (raw.clamp(min=0) > 0).any():  # that mistake shows only where some response is short
        mistakes = [(wrong, hint) for wrong, hint in mistakes if not hint.startswith("you kept the positive part")]
    if len(got) and not got.any() and want.any():
        mistakes.insert(0, (got, "all your penalties are 0: is the zone where you think it is, and is the clamp "
                                 "min(..., 0) (not max)?"))
    hints = [hint for wrong, hint in mistakes if close(got, wrong, atol=1e-5) and not close(wrong, want, atol=1e-5)]
    hints = list(dict.fromkeys(hints))[:2]  # several mistakes can give the same numbers on a few lengths
    return "".join(" " + ("" if i == 0 else "Or: ") + hint[0].upper() + hint[1:] for i, hint in enumerate(hints))


def expect_penalty(ch, lengths: torch.Tensor, max_len: int, buf: int, factor: float, found_by: str = ""):
    """Fail, naming the first wrong response and the likely mistake, unless the reader agrees with verl."""
    got = penalty(ch, lengths, max_len, buf, factor)
    want = verl_penalties(lengths, max_len, buf, factor)
    if close(got, want, atol=1e-5) and close(got, minirl_overlong_penalty(lengths, max_len, buf, factor), atol=1e-5):
        return got
    bad = next((i for i in range(len(want)) if not close(got[i], want[i], atol=1e-5)), 0)
    length, E = lengths[bad].item(), max_len - buf
    zone = (f"it is not longer than max_response_length - overlong_buffer_len = {E}, so it pays exactly 0"
            if length <= E else f"it is {tokens(length - E)} into the {buf}-token zone, so it pays "
                                f"{length - E:g}/{buf} * {factor}")
    fail(f"{call_text(lengths, max_len, buf, factor)}: the response of {tokens(length)} got "
         f"{got[bad].item() + 0.0:.6g}, expected {want[bad].item() + 0.0:.6g} ({zone})."
         f"{why_penalty(lengths, max_len, buf, factor, got)}{found_by}")


@pytest.mark.exercise("5.1", "compute_overlong_penalty")
def test_overlong_penalty_toy(ch):
    lengths = torch.tensor([0, 10, 16, 17, 18, 19, 20])
    got = expect_penalty(ch, lengths, 20, 4, 1.0)
    want = [0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0]
    if not close(got, torch.tensor(want)):
        fail(f"with a budget of 20 tokens and a 4-token buffer, lengths {lengths.tolist()} pay {want}; "
             f"got {rounded(got)}.")


@pytest.mark.exercise("5.1", "compute_overlong_penalty")
def test_overlong_penalty_zones(ch):
    for max_len, buf, factor in ((20480, 4096, 1.0), (512, 128, 0.5), (100, 100, 2.0), (64, 1, 1.0), (8, 3, 0.0)):
        E = max_len - buf
        lengths = torch.tensor(sorted({0, E // 2, E, min(E + 1, max_len), E + buf // 2, max_len - 1, max_len}))
        got = penalty(ch, lengths, max_len, buf, factor)
        text, hint = call_text(lengths, max_len, buf, factor), why_penalty(lengths, max_len, buf, factor, got)
        for length, value in zip(lengths.tolist(), got.tolist()):
            if length <= E and value != 0.0:
                fail(f"{text}: the response of {length} tokens got {value:.6g}. Up to max_response_length - "
                     f"overlong_buffer_len = {E} tokens a response pays nothing: exactly 0, neither a penalty nor "
                     f"a bonus.{hint}")
        at_max = got[-1].item()
        if abs(at_max + factor) > 1e-5:
            fail(f"{text}: the response of max_response_length = {max_len} tokens got {at_max:.6g}; it was cut off "
                 f"and pays the whole penalty, -penalty_factor = {-factor}.{hint}")
        expect_penalty(ch, lengths, max_len, buf, factor)  # linear in between


@pytest.mark.exercise("5.1", "compute_overlong_penalty")
def test_overlong_penalty_is_never_positive(ch):
    for max_len, buf, factor in ((32, 8, 1.5), (40, 40, 1.0), (16, 5, 3.0)):
        lengths = torch.arange(max_len + 1)
        got = penalty(ch, lengths, max_len, buf, factor)
        if (got > 0).any():
            first = int(torch.nonzero(got > 0)[0])
            fail(f"{call_text(lengths, max_len, buf, factor)}: the response of {first} tokens got a positive penalty, "
                 f"{got[first].item():.6g}. A short response earns no bonus: clamp at 0, min(..., 0) or "
                 f"torch.clamp(..., max=0.0).{why_penalty(lengths, max_len, buf, factor, got)}")
        expect_penalty(ch, lengths, max_len, buf, factor)


@pytest.mark.exercise("5.1", "compute_overlong_penalty")
def test_overlong_penalty_takes_integer_lengths(ch):
    # What the reward manager passes: response_mask.sum(-1), an int64 tensor.
    g = torch.Generator().manual_seed(5)
    max_len, buf = 48, 16
    lengths = torch.cat([torch.tensor([0, 32, 33, 40, 47, 48]), torch.randint(0, max_len + 1, (10,), generator=g)])
    response_mask = (torch.arange(max_len)[None] < lengths[:, None]).long()
    expect_penalty(ch, response_mask.sum(-1), max_len, buf, 1.0)
    expect_penalty(ch, lengths.to(torch.int32), max_len, buf, 0.5)
    expect_penalty(ch, lengths.double(), max_len, buf, 1.0)


@pytest.mark.exercise("5.1", "compute_overlong_penalty")
def test_overlong_penalty_keeps_the_batch_shape(ch):
    for lengths in (torch.tensor([9]), torch.tensor([3, 9]), torch.zeros(0, dtype=torch.long),
                    torch.randint(0, 11, (64,), generator=torch.Generator().manual_seed(1))):
        expect_penalty(ch, lengths, 10, 4, 1.0)


@pytest.mark.exercise("5.1", "compute_overlong_penalty")
def test_overlong_penalty_rejects_a_bad_buffer(ch):
    lengths = torch.tensor([3, 15, 20])
    for max_len, buf, why in ((20, 0, "a zone of width 0 (it would divide by 0)"), (20, -4, "a negative width"),
                              (20, 21, "a zone wider than the whole budget"), (1, 2, "a zone wider than the budget")):
        error = raised(ch.compute_overlong_penalty, lengths, max_len, buf, 1.0)
        if error is None:
            fail(f"{call_text(lengths, max_len, buf, 1.0)} was accepted: {why}. Raise a ValueError unless "
                 "0 < overlong_buffer_len <= max_response_length (verl asserts it when it builds the manager).")
        if not isinstance(error, ValueError):
            fail(f"{call_text(lengths, max_len, buf, 1.0)} ({why}): raise a ValueError, not "
                 f"{type(error).__name__} ({error}).")
    for max_len, buf in ((20, 20), (20, 1)):
        error = raised(ch.compute_overlong_penalty, lengths, max_len, buf, 1.0)
        if error is not None:
            fail(f"{call_text(lengths, max_len, buf, 1.0)} is valid (0 < overlong_buffer_len <= max_response_length), "
                 f"but your function raised {type(error).__name__}: {error}.")
    expect_penalty(ch, lengths, 20, 20, 1.0)


@pytest.mark.exercise("5.1", "compute_overlong_penalty")
def test_overlong_penalty_matches_verl(ch):
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        max_len = int(torch.randint(1, 30000, (1,), generator=g))
        buf = int(torch.randint(1, max_len + 1, (1,), generator=g))
        factor = round(3 * torch.rand(1, generator=g).item(), 3)
        lengths = torch.cat([torch.tensor([max_len - buf, max_len]), torch.randint(0, max_len + 1, (30,), generator=g),
                             torch.randint(max_len - buf, max_len + 1, (30,), generator=g)])
        expect_penalty(ch, lengths, max_len, buf, factor)


@st.composite
def overlong_cases(draw):
    max_len = draw(st.integers(1, 32768))
    buf = draw(st.one_of(st.integers(1, max_len), st.sampled_from([1, max_len])))
    factor = draw(st.one_of(st.sampled_from([0.0, 0.5, 1.0, 2.0]), st.floats(0.0, 10.0, allow_subnormal=False)))
    E = max_len - buf
    length = st.one_of(st.integers(0, max_len), st.integers(E, max_len),
                       st.sampled_from([0, E, min(E + 1, max_len), max(E - 1, 0), max_len]))
    values = draw(st.lists(length, max_size=16))
    dtype = draw(st.sampled_from([torch.long, torch.int32, torch.float32, torch.float64]))
    return torch.tensor(values, dtype=torch.long).to(dtype), max_len, buf, factor


@pytest.mark.exercise("5.1", "compute_overlong_penalty")
@FUZZ
@given(case=overlong_cases())
def test_overlong_penalty_agrees_with_minirl(ch, case):
    lengths, max_len, buf, factor = case
    expect_penalty(ch, lengths, max_len, buf, factor, " (a failing case found by hypothesis, shrunk)")


# ----------------------------------------------------------------------------------------------
# 5.2 filter_groups
# ----------------------------------------------------------------------------------------------


def as_floats(values) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
    return np.asarray(values, dtype=np.float64)


def groups_of(index) -> dict:
    """label -> its row numbers, in order of first appearance."""
    rows_of: dict = {}
    for row, label in enumerate(index):
        rows_of.setdefault(label, []).append(row)
    return rows_of


def recipe_filter(values, index) -> tuple[list[int], int]:
    """The DAPO recipe's rule per uid: keep it iff np.std(values) > 0 or it has a single member."""
    values, rows_of = as_floats(values), groups_of(index)
    keep = {label for label, rows in rows_of.items() if np.std(values[rows]) > 0 or len(rows) == 1}
    return [row for row, label in enumerate(index) if label in keep], len(rows_of) - len(keep)


def show_batch(values, index) -> str:
    """The batch, group by group: label, rows and values."""
    values = as_floats(values)
    parts = [f"{label!r} rows {rows} values {[float(v) for v in values[rows]]}"
             for label, rows in list(groups_of(index).items())[:8]]
    more = f" and {len(groups_of(index)) - 8} more groups" if len(groups_of(index)) > 8 else ""
    return "; ".join(parts) + more if parts else "an empty batch"


def filt(ch, values, index) -> tuple[list[int], int]:
    """Call the reader's filter_groups; check that it returned (1-D int64 tensor, int)."""
    out = call(ch.filter_groups, values, index)
    if not isinstance(out, tuple) or len(out) != 2:
        fail(f"filter_groups returned {type(out).__name__}: return a pair (kept_rows, num_dropped_groups).")
    kept, dropped = out
    if not isinstance(kept, torch.Tensor):
        fail(f"kept_rows is a {type(kept).__name__}: return a torch tensor of row numbers, "
             "torch.as_tensor(rows, dtype=torch.long); the trainer selects the batch's rows with it.")
    if kept.dtype != torch.int64:
        fail(f"kept_rows has dtype {kept.dtype}: row numbers are int64 (dtype=torch.long), the dtype of an index. "
             "Note torch.tensor([]) is float32: pass dtype=torch.long.")
    if kept.dim() != 1:
        fail(f"kept_rows should be 1-D, one row number per kept row; got shape {tuple(kept.shape)}.")
    if isinstance(dropped, bool) or not isinstance(dropped, numbers.Integral):
        fail(f"num_dropped_groups is {type(dropped).__name__} {dropped!r}: return a Python int, the number of "
             "dropped groups (int(...)).")
    return kept.tolist(), int(dropped)


def why_filter(values, index, got: list[int], describe: bool = True) -> str:
    """The classic mistake that gives exactly the rows `got`, in a sentence (capitalised), or '' if none does.

    With describe, fall back on the first group gotten wrong.
    """
    values, rows_of = as_floats(values), groups_of(index)
    want, _ = minirl_filter_groups(values, index)
    want = want.tolist()

    def rule(keep_group) -> list[int]:
        keep = {label for label, rows in rows_of.items() if keep_group(values[rows])}
        return [row for row, label in enumerate(index) if label in keep]

    if sorted(got) == want:
        return ("These are the right rows in the wrong order: keep the original order, ascending row numbers (not "
                "grouped by label), so the kept batch lines up with the one generated.")
    tolerance = "you compared with a tolerance (np.isclose, allclose, or std > eps): the rule is exact, values " \
                "that differ at all make a group worth keeping."
    mistakes = [
        (rule(lambda v: 0 < v.mean() < 1), "you kept the groups whose mean lies strictly between 0 and 1: right for "
                                           "0/1 rewards only. Drop a group iff all its values are equal (and it has "
                                           "more than one member), whatever value they share."),
        (rule(lambda v: v.max() > v.min()), "you dropped the groups of ONE response: the recipe keeps them "
                                            "(np.std(values) > 0 or len(values) == 1). Beware torch.std: of one value "
                                            "it is nan, and nan > 0 is False."),
        (rule(lambda v: len(v) == 1 or v.astype(np.float32).max() > v.astype(np.float32).min()),
         "your values went through float32, which rounds numbers that differ by less than about 1e-7 to the same "
         "number: compare them as given, or as float64 (np.asarray(values, dtype=np.float64))."),
        *[(rule(lambda v, tol=tol: len(v) == 1 or v.max() - v.min() > tol), tolerance)
          for tol in (1e-12, 1e-9, 1e-8, 1e-6, 1e-5, 1e-4)],
    ]
    runs: list[list[int]] = []
    for row in range(len(index)):
        if runs and index[runs[-1][-1]] == index[row]:
            runs[-1].append(row)
        else:
            runs.append([row])
    mistakes.append(([row for run in runs if len(run) == 1 or values[run].max() > values[run].min() for row in run],
                     "you grouped adjacent rows (runs of equal labels, as itertools.groupby without sorting gives, "
                     "or blocks of rows): the rows of a group need not be adjacent. Group by label over the whole "
                     "batch, e.g. a dict label -> row numbers."))
    if rows_of and len(index) % len(rows_of) == 0:
        n = len(index) // len(rows_of)
        blocks = [list(range(start, start + n)) for start in range(0, len(index), n)]
        mistakes.append(([row for b in blocks if n == 1 or values[b].max() > values[b].min() for row in b],
                         f"you took the groups to be blocks of {n} adjacent rows (reshape(-1, n)?): the rows of a "
                         "group need not be adjacent. Group by the labels in index, wherever they are."))
    hints = list(dict.fromkeys(hint for wrong, hint in mistakes if got == wrong and wrong != want))
    if hints:
        return " Or: ".join(h[0].upper() + h[1:] for h in hints)  # several mistakes can give the same rows
    if not describe:
        return ""
    for label, rows in rows_of.items():
        should, kept = rows[0] in want, [row in got for row in rows]
        if all(kept) != should or any(kept) != should:
            group = [float(v) for v in values[rows]]
            reason = ("it has a single member" if len(rows) == 1 else
                      "its values differ" if should else f"all its values equal {group[0]}")
            partly = [row for row in rows if row in got]
            yours = "kept" if all(kept) else "dropped" if not any(kept) else f"kept only rows {partly} of"
            return (f"The group {label!r} (rows {rows}, values {group}) should be {'kept' if should else 'dropped'}: "
                    f"{reason}. You {yours} it.")
    extra = sorted(set(got) - set(range(len(index))))
    return f"Rows {extra} do not exist: the batch has {len(index)} rows." if extra else ""


def expect_filter(ch, values, index, found_by: str = ""):
    """Fail with the likely mistake unless the reader's filter agrees with minirl (and the recipe's rule)."""
    want, want_dropped = minirl_filter_groups(values, index)
    want = want.tolist()
    assert (want, want_dropped) == recipe_filter(values, index)  # the grader's own cases are ones where they agree
    got, dropped = filt(ch, values, index)
    if got != want:
        fail(f"filter_groups kept rows {got}, expected {want}: {why_filter(values, index, got)} The batch: "
             f"{show_batch(values, index)}.{found_by}")
    if dropped != want_dropped:
        rows_dropped = len(index) - len(want)
        hint = ("that is the number of dropped ROWS; count the dropped GROUPS (labels)." if dropped == rows_dropped
                else "count the groups dropped, one per label.")
        fail(f"filter_groups kept the right rows but returned num_dropped_groups={dropped}, expected {want_dropped}: "
             f"{hint} The batch: {show_batch(values, index)}.{found_by}")


@pytest.mark.exercise("5.2", "filter_groups")
def test_filter_groups_toy(ch):
    values = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    index = ["p0"] * 4 + ["p1"] * 4 + ["p2"] * 4
    got, dropped = filt(ch, values, index)
    if got != [0, 1, 2, 3]:
        fail(f"groups p0 (rewards 1, 0, 1, 1), p1 (all 0) and p2 (all 1): keep only p0, rows [0, 1, 2, 3]; got {got}. "
             f"{why_filter(values, index, got)}")
    if dropped != 2:
        fail(f"two groups were dropped (p1, all wrong, and p2, all right), so num_dropped_groups is 2; got {dropped}."
             + (" That is the number of dropped ROWS: count the GROUPS." if dropped == 8 else ""))


@pytest.mark.exercise("5.2", "filter_groups")
def test_filter_groups_labels_come_in_any_order(ch):
    # uid strings as the trainer makes them, the rows of a group scattered through the batch
    index = ["u7", "u2", "u7", "u9", "u2", "u9", "u7", "u4", "u4"]
    values = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    for labels in (index, np.array(index, dtype=object)):
        expect_filter(ch, values, labels)
    # a label that comes back later: "a" and "b" alternate, each group all 1.0
    expect_filter(ch, torch.ones(4), ["a", "b", "a", "b"])
    expect_filter(ch, torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 1.0]), ["x", "y", "x", "z", "y", "z"])


@pytest.mark.exercise("5.2", "filter_groups")
def test_filter_groups_keeps_a_group_of_one(ch):
    for values, index in (([0.0, 1.0, 1.0, 1.0], ["solo", "pair", "pair", "alone"]),
                          ([0.0, 1.0, 0.5], ["a", "b", "c"]), ([0.0], ["only"])):
        got, _ = filt(ch, values, index)
        for label, rows in groups_of(index).items():
            if len(rows) == 1 and rows[0] not in got:
                fail(f"the group {label!r} has a single response (row {rows[0]}, value {values[rows[0]]}) and was "
                     "dropped. The recipe keeps a group of one (np.std(values) > 0 or len(values) == 1): there is "
                     "nothing to compare it with, but nothing says it teaches nothing. torch.std of one value is "
                     "nan, and nan > 0 is False.")
        expect_filter(ch, values, index)


@pytest.mark.exercise("5.2", "filter_groups")
def test_filter_groups_drops_every_constant_group(ch):
    groups = {"half": [0.5, 0.5, 0.5], "minus": [-1.0, -1.0], "two": [2.0, 2.0, 2.0, 2.0], "zero": [0.0, 0.0],
              "one": [1.0, 1.0, 1.0], "mixed": [0.2, 0.7], "big": [1.0, 2.0], "signs": [-1.0, 1.0, -1.0]}
    index = [label for label, vals in groups.items() for _ in vals]
    values = torch.tensor([v for vals in groups.values() for v in vals], dtype=torch.float64)
    got, _ = filt(ch, values, index)
    for label, rows in groups_of(index).items():
        should = len(set(groups[label])) > 1
        if (rows[0] in got) != should:
            why = ("its values differ, so its advantages do not all vanish: keep it" if should else
                   "all its values are equal, so every advantage in it is 0: drop it")
            fail(f"the group {label!r} with values {groups[label]} was {'dropped' if should else 'kept'}: {why}. "
                 f"{why_filter(values, index, got, describe=False)}")
    expect_filter(ch, values, index)


@pytest.mark.exercise("5.2", "filter_groups")
def test_filter_groups_compares_exactly(ch):
    groups = {"tiny": [1.0, 1.0 + 2**-40], "sum": [0.3, 0.1 + 0.2], "small": [1e-9, 0.0], "same": [2.0, 2.0]}
    index = [label for label, vals in groups.items() for _ in vals]
    flat = [v for vals in groups.values() for v in vals]
    for values in (np.array(flat), torch.tensor(flat, dtype=torch.float64), flat):
        got, _ = filt(ch, values, index)
        for label in ("tiny", "sum", "small"):
            rows = groups_of(index)[label]
            if rows[0] not in got:
                hint = why_filter(values, index, got, describe=False)
                fail(f"the group {label!r} with values {groups[label]} was dropped: its values differ, if only "
                     "slightly, so keep it. \"All equal\" is exact: no tolerance, and no float32 on the way (given "
                     f"{type(values).__name__} values). {hint}")
        expect_filter(ch, values, index)


@pytest.mark.exercise("5.2", "filter_groups")
def test_filter_groups_keeps_the_row_order(ch):
    index = ["b", "a", "b", "c", "a", "c", "d", "d"]
    values = [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    got, _ = filt(ch, values, index)
    if sorted(got) == [0, 1, 2, 3, 4, 5] and got != [0, 1, 2, 3, 4, 5]:
        fail(f"filter_groups returned rows {got}: the right rows, grouped by label. Keep them in their original "
             "order, [0, 1, 2, 3, 4, 5], so the kept batch lines up with the one generated (rows in order of a "
             "mask over the batch, not group by group).")
    expect_filter(ch, values, index)


@pytest.mark.exercise("5.2", "filter_groups")
def test_filter_groups_counts_the_dropped_groups(ch):
    for values, index, count in (([1.0] * 4 + [0.0] * 4 + [1.0, 0.0, 1.0, 1.0] + [0.0] * 4,
                                  ["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["d"] * 4, 3),
                                 ([0.5, 0.5, 1.0, 0.0], ["p", "p", "q", "q"], 1), ([0.0, 1.0], ["x", "y"], 0)):
        _, dropped = filt(ch, values, index)
        if dropped != count:
            rows_dropped = len(index) - len(recipe_filter(values, index)[0])
            extra = " That is the number of dropped ROWS." if dropped == rows_dropped else ""
            fail(f"num_dropped_groups should be {count}, the number of GROUPS dropped; got {dropped}.{extra} "
                 f"The batch: {show_batch(values, index)}.")
        expect_filter(ch, values, index)


@pytest.mark.exercise("5.2", "filter_groups")
def test_filter_groups_empty_batch_and_bad_shapes(ch):
    for values in (torch.zeros(0), np.zeros(0), []):
        got, dropped = filt(ch, values, [])
        if got != [] or dropped != 0:
            fail(f"an empty batch ({type(values).__name__} values, no labels) keeps no rows and drops no group: "
                 f"expected an empty int64 tensor and 0, got rows {got} and {dropped}.")
    for values, index, why in ((torch.ones(3), ["a", "a", "b", "b"], "3 values for 4 labels"),
                               (torch.ones(5), ["a", "a", "b", "b"], "5 values for 4 labels"),
                               (torch.ones(4, 1), ["a", "a", "b", "b"], "values of shape (4, 1), not (B,)")):
        error = raised(ch.filter_groups, values, index)
        if error is None:
            fail(f"filter_groups was given {why} and accepted them. Raise a ValueError when metric_values is not "
                 "1-D or its length differs from len(index): a mismatch means the values belong to other rows.")
        if not isinstance(error, ValueError):
            fail(f"filter_groups given {why}: raise a ValueError, not {type(error).__name__} ({error}).")


@pytest.mark.exercise("5.2", "filter_groups")
def test_filter_groups_reads_tensors_arrays_and_lists(ch):
    index = ["a", "b", "a", "c", "b", "c", "d"]
    flat = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    for values in (torch.tensor(flat), torch.tensor(flat, dtype=torch.float64), np.array(flat), flat,
                   [int(v) for v in flat], np.array(flat, dtype=np.float32)):
        expect_filter(ch, values, index)


@pytest.mark.exercise("5.2", "filter_groups")
def test_filter_groups_matches_the_recipe(ch):
    for seed in range(6):
        rng = np.random.default_rng(seed)
        sizes = rng.integers(1, 9, size=int(rng.integers(1, 10)))
        index = np.array([f"uid-{seed}-{g}" for g, size in enumerate(sizes) for _ in range(size)], dtype=object)
        index = index[rng.permutation(len(index))]
        values = rng.integers(0, 2, len(index)).astype(float)
        expect_filter(ch, torch.tensor(values), index)
        expect_filter(ch, values, list(index))


# Values whose all-equal groups have np.std exactly 0, and whose unequal ones have np.std > 0 (the recipe's rule
# and minirl's agree on them); 1 + 2**-40 rounds to 1.0 in float32.
NICE = [0.0, 1.0, 0.5, -1.0, 0.25, 2.0, 1.0 + 2**-40]


@st.composite
def batches(draw):
    labels = draw(st.lists(st.text(alphabet="abcdef0123456789-", min_size=1, max_size=6), min_size=1, max_size=6,
                           unique=True))
    shared = {label: draw(st.sampled_from(NICE)) for label in labels}
    varies = {label: draw(st.booleans()) for label in labels}
    index = draw(st.lists(st.sampled_from(labels), max_size=24))
    values = [draw(st.sampled_from(NICE)) if varies[label] else shared[label] for label in index]
    kind = draw(st.sampled_from(["tensor64", "numpy", "list"]))
    values = {"tensor64": torch.tensor(values, dtype=torch.float64), "numpy": np.array(values, dtype=np.float64),
              "list": values}[kind]
    return values, np.array(index, dtype=object) if draw(st.booleans()) else index


@pytest.mark.exercise("5.2", "filter_groups")
@FUZZ
@given(batch=batches())
def test_filter_groups_agrees_with_minirl(ch, batch):
    values, index = batch
    expect_filter(ch, values, index, " (a failing batch found by hypothesis, shrunk)")
