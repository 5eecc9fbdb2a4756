"""Lab C's central effect: each broken cause leaves its own signature in metrics.jsonl; the hidden runs of Exercise
C.1 can only be told apart by that behaviour; the lab explains every metric the runs log; `minirl plot --view debug`
draws the lab's checklist.

The runs are Exercise C.1's (minirl/book/broken_runs.py::graded_runs: seed 3, 12 steps, trained once and cached).
"""

import fnmatch
import json
import re
import statistics
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from minirl import models, sft
from minirl.__main__ import main as cli
from minirl.book import broken_runs
from minirl.plot import DEBUG_KEYS, load_metrics, plot_runs, training_steps
from minirl.trainer import train

LAB = (Path(__file__).resolve().parents[1] / "chapters" / "lab_c_metrics.py").read_text()


VAL = "val-core/minirl/arithmetic/acc/mean@1"


@pytest.fixture(scope="session")  # session: built once per worker, even when xdist interleaves files
def all_records():
    return dict(broken_runs.graded_runs())


@pytest.fixture(scope="module")
def runs(all_records):
    return {cause: training_steps(records) for cause, records in all_records.items()}


def series(records, key):
    return [r[key] for r in records if key in r]


def test_each_broken_cause_leaves_its_signature(runs, all_records):
    healthy = runs["healthy"]
    # the healthy run's diagnostics sit where the lab says healthy runs sit (in 12 steps of 16 prompts its greedy
    # validation moves within its noise on 100 questions, so only "not worse" is asserted)
    before, after = series(all_records["healthy"], VAL)[0], series(all_records["healthy"], VAL)[-1]
    assert after >= before - 0.05, (before, after)
    assert max(series(healthy, "actor/ppo_kl")) < 0.01
    assert max(series(healthy, "training/rollout_probs_diff_mean")) < 1e-5
    assert max(series(healthy, "response_length/clip_ratio")) < 0.05
    assert max(series(healthy, "actor/kl_loss")) < 0.05
    # lr 1e-2: one huge first step, then a broken model (score 0 for every response) and a gradient of exactly 0
    lr = runs["lr_too_high"]
    assert series(lr, "actor/ppo_kl")[0] > 0.2 and series(lr, "critic/score/max")[0] > 0
    assert max(series(lr, "critic/score/max")[2:]) == 0
    assert set(series(lr, "actor/grad_norm")[3:]) == {0.0}
    # a reward that is always 0, and one that is always 1: every advantage and gradient is 0
    assert max(series(runs["reward_always_zero"], "critic/score/max")) == 0
    # (a format-only reward: now and then one response of 128 lacks `#### `, and that step's group has a spread; on
    # an AMD EPYC seed 3 had one such step, the lab's seeds 0-2 on a Xeon 2, 0 and 1: the median is the signature)
    assert set(series(runs["reward_always_zero"], "minirl/zero_spread_group_frac")) == {1.0}
    assert set(series(runs["reward_always_zero"], "actor/grad_norm")) == {0.0}
    equal = runs["all_equal_rewards"]
    assert statistics.median(series(equal, "minirl/zero_spread_group_frac")) == 1.0
    assert series(equal, "actor/grad_norm").count(0.0) >= 9, series(equal, "actor/grad_norm")
    assert statistics.median(series(equal, "critic/score/min")) == 1
    # truncation: most responses use the whole budget from the first step
    assert min(series(runs["truncated"], "response_length/clip_ratio")) > 0.5
    # stale weights: within 8 steps the trainer disagrees with the sampler beyond verl's FAQ's normal (0.005)
    assert max(series(runs["rollout_mismatch"], "training/rollout_probs_diff_mean")[:8]) > 0.005
    # the KL to the reference climbs past 0.1 within 8 steps, with clipped tokens (a no-clip run has almost none)
    assert max(series(runs["kl_blowup"], "actor/kl_loss")[:8]) > 0.1
    assert max(series(runs["kl_blowup"], "actor/pg_clipfrac")) > 0.005
    # no clip with 4 epochs: big steps, almost no token clipped (only a ratio beyond 1/1000 or 1000 counts)
    assert max(series(runs["no_clip"], "actor/pg_clipfrac")) < 0.005
    assert sorted(series(runs["no_clip"], "actor/ppo_kl"))[6] > 0.002


def test_the_hidden_runs_show_behaviour_not_config(all_records):
    keys = {cause: {key for record in records for key in record} for cause, records in all_records.items()}
    assert all(k == keys["healthy"] for k in keys.values()), "every hidden run must expose the same metric keys"
    shown = keys["healthy"]
    assert not shown & set(broken_runs.CONFIG_METRICS)  # actor/lr would name lr_too_high and kl_blowup
    assert not [key for key in shown if key.startswith(broken_runs.MACHINE_PREFIXES) and key != "timing_s/step"]
    assert "actor/kl_loss" in shown  # measured in every run, so a blow-up shows in its value only
    assert {r["timing_s/step"] for rs in all_records.values() for r in rs if "timing_s/step" in r} == {0.0}


def test_plot_draws_the_debug_view(all_records, tmp_path, capsys):
    for cause in ("healthy", "lr_too_high"):
        (tmp_path / cause).mkdir()
        (tmp_path / cause / "metrics.jsonl").write_text(
            "\n".join(json.dumps(r) for r in all_records[cause]) + "\n")
    assert cli(["plot", str(tmp_path / "healthy"), str(tmp_path / "lr_too_high"), "--view", "debug"]) == 0
    assert (tmp_path / "healthy" / "debug.png").stat().st_size > 10_000
    assert "debug.png" in capsys.readouterr().out
    axes = plot_runs([tmp_path / "healthy", tmp_path / "lr_too_high"], view="debug")
    titles = [ax.get_title() for ax in axes if ax.get_visible()]
    assert titles == list(DEBUG_KEYS) and "minirl/zero_spread_group_frac" in titles
    # a run without the rollout's log-probs gets no rollout_probs_diff panel
    records = [{k: v for k, v in r.items() if not k.startswith("training/rollout")} for r in all_records["healthy"]]
    (tmp_path / "no_logprobs").mkdir()
    (tmp_path / "no_logprobs" / "metrics.jsonl").write_text(
        "\n".join(json.dumps(r) for r in records) + "\n")
    axes = plot_runs([tmp_path / "no_logprobs"], view="debug")
    assert [ax.get_title() for ax in axes if ax.get_visible()] == list(DEBUG_KEYS[:-1])
    with pytest.raises(ValueError, match="unknown view"):
        plot_runs([tmp_path / "healthy"], view="nope")
    plt.close("all")


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
