"""Lab C's central effect: each broken cause leaves its own signature in metrics.jsonl; and the lab explains every
metric the runs log.

The runs are Exercise C.1's (minirl/book/broken_runs.py::graded_runs: seed 1, 12 steps, trained once and cached).
"""

import fnmatch
import re
from pathlib import Path

import pytest

from minirl import models, sft
from minirl.book import broken_runs
from minirl.plot import load_metrics, training_steps
from minirl.trainer import train

LAB = (Path(__file__).resolve().parents[1] / "chapters" / "lab_c_metrics.py").read_text()


VAL = "val-core/minirl/arithmetic/acc/mean@1"


@pytest.fixture(scope="module")
def all_records():
    return dict(broken_runs.graded_runs())


@pytest.fixture(scope="module")
def runs(all_records):
    return {cause: training_steps(records) for cause, records in all_records.items()}


def series(records, key):
    return [r[key] for r in records if key in r]


def test_each_broken_cause_leaves_its_signature(runs, all_records):
    healthy = runs["healthy"]
    # the healthy run learns, and its diagnostics sit where the lab says healthy runs sit. In 12 steps of 16 prompts
    # greedy validation moves within its noise (0.47 -> 0.49 on 100 questions); the sampled score rises clearly.
    before, after = series(all_records["healthy"], VAL)[0], series(all_records["healthy"], VAL)[-1]
    assert after >= before - 0.02, (before, after)
    scores = series(healthy, "critic/score/mean")
    assert sum(scores[-4:]) / 4 > scores[0] + 0.05, scores
    assert max(series(healthy, "actor/ppo_kl")) < 0.01
    assert max(series(healthy, "training/rollout_probs_diff_mean")) < 1e-5
    assert max(series(healthy, "response_length/clip_ratio")) < 0.05
    # lr 1e-2: one huge first step, then a broken model (score 0 for every response)
    lr = runs["lr_too_high"]
    assert series(lr, "actor/ppo_kl")[0] > 0.2 and series(lr, "critic/score/max")[0] > 0
    assert max(series(lr, "critic/score/max")[2:]) == 0
    # a reward that is always 0, and one that is always 1: every advantage and gradient is 0
    assert max(series(runs["reward_always_zero"], "critic/score/max")) == 0
    for cause in ("reward_always_zero", "all_equal_rewards"):
        assert set(series(runs[cause], "minirl/zero_spread_group_frac")) == {1.0}
        assert set(series(runs[cause], "actor/grad_norm")) == {0.0}
    assert min(series(runs["all_equal_rewards"], "critic/score/min")) == 1
    # truncation: most responses use the whole budget from the first step
    assert min(series(runs["truncated"], "response_length/clip_ratio")) > 0.5
    # stale weights: the trainer disagrees with the sampler beyond verl's FAQ line (0.01)
    assert max(series(runs["rollout_mismatch"], "training/rollout_probs_diff_mean")) > 0.01
    # the KL to the reference climbs well past its healthy 1e-3 scale
    assert max(series(runs["kl_blowup"], "actor/kl_loss")) > 0.1
    # no clip with 4 epochs: big steps, almost no token clipped (only a ratio beyond 1/1000 or 1000 counts)
    assert max(series(runs["no_clip"], "actor/pg_clipfrac")) < 0.005
    assert sorted(series(runs["no_clip"], "actor/ppo_kl"))[6] > 0.002


VAL_STATISTIC = re.compile(r"^val-(core|aux)/.+/[^/]+/(mean|std|best|worst|maj)@\d+(/mean|/std)?$")


def explained(name: str, tokens: set[str]) -> bool:
    """Whether the lab names `name`: in full, by a wildcard, or (inside its group's table) by its tail."""
    if name in tokens or any("*" in t and fnmatch.fnmatch(name, t) for t in tokens):
        return True
    match = VAL_STATISTIC.match(name)
    if match:
        statistic, tail = match.group(2), match.group(3) or ""
        return f"{statistic}@{'N' if statistic in ('mean', 'std') else 'k'}{tail}" in tokens
    tail = name.split("/", 1)[1]
    return tail in tokens or "/" + name.rsplit("/", 1)[1] in tokens or name.rsplit("/", 1)[1] in tokens


def test_the_lab_explains_every_metric_the_runs_log(runs, tmp_path):
    train([*broken_runs.BASE, "trainer.total_training_steps=2", "trainer.test_freq=2", "data.val_max_samples=8",
           "algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true", "actor_rollout_ref.actor.use_kl_loss=true",
           "actor_rollout_ref.actor.entropy_coeff=0.001", "actor_rollout_ref.rollout.val_kwargs.n=4",
           "actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.val_kwargs.temperature=1",
           "algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_rs=token_k1",
           "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0", f"trainer.default_local_dir={tmp_path}",
           "trainer.logger=[]"], show_progress=False)
    records = load_metrics(tmp_path) + [r for rs in runs.values() for r in rs]
    names = {key for record in records for key in record} - {"step"}
    assert len(names) > 120
    tokens = set(re.findall(r"`([^`\s]+)`", LAB))
    missing = sorted(name for name in names if not explained(name, tokens))
    assert not missing, f"Lab C does not explain {missing}"


def test_the_pad_is_eos_bug_drops_exactly_the_eos_token():
    tokenizer = models.load_tokenizer(sft.default_warm_start())
    demos = [{"prompt": [{"role": "user", "content": "12+7="}], "response": "12+7=19 #### 19"},
             {"prompt": [{"role": "user", "content": "3+4="}], "response": "3+4=7 #### 7"}]
    right = sft.tokenize_demonstrations(tokenizer, demos, 48)
    buggy = broken_runs.pad_is_eos_loss_mask(sft.tokenize_demonstrations)(tokenizer, demos, 48)
    dropped = right["loss_mask"] - buggy["loss_mask"]
    assert dropped.min() == 0 and dropped.sum(-1).tolist() == [1, 1]  # one token per demonstration ...
    targets = right["input_ids"][:, 1:]
    assert (targets[dropped[:, :-1].bool()] == tokenizer.eos_token_id).all()  # ... and it is the EOS target
