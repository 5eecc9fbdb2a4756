"""RLHF costs on the preference task (Chapters 3 and 6): reward model and DPO steps, and what scoring with a
reward model adds to an RL step.

    .venv/bin/python bench/rlhf.py            # about a minute on 2 CPU cores

Prints seconds per step of `train-rm` and `dpo` (64 pairs per step), and the trainer's `timing_s/reward` and
`timing_s/step` with the rule reward and with a reward model (16 prompts x 8 answers, 48-token budget).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from minirl import dpo, preference, reward_model
from minirl.plot import load_metrics
from minirl.trainer import train

STEPS = 8


def mean_of(records: list[dict], key: str) -> float:
    values = [r[key] for r in records if key in r][1:]  # the first step pays for warm-up
    return sum(values) / len(values)


def main() -> None:
    preference.default_preference_task()  # built once, cached
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        start = time.perf_counter()
        summary = reward_model.train_reward_model(reward_model.RewardModelConfig(
            output_dir=str(out / "rm"), max_steps=20, val_files=None), show_progress=False)
        rm_step = summary["seconds"] / len(summary["history"])
        rm_total = time.perf_counter() - start
        summary = dpo.train_dpo(dpo.DPOConfig(output_dir=str(out / "dpo"), max_steps=20, val_files=None),
                                show_progress=False)
        dpo_step = summary["seconds"] / len(summary["history"])
        runs = {}
        for name in ("rule reward", "reward model"):
            overrides = preference.ppo_overrides(out / "rm", kl_coef=0.05)
            if name == "rule reward":  # the same run scored by the rule, its critic from the SFT model
                overrides = [o for o in overrides if not o.startswith(("critic.model.path=", "reward.reward_model."))]
            train([f"trainer.default_local_dir={out / name}", f"trainer.total_training_steps={STEPS}",
                   "trainer.test_freq=-1", "trainer.logger=[]", "trainer.resume_mode=disable", *overrides],
                  show_progress=False)
            runs[name] = load_metrics(out / name)
    print(f"train-rm: {rm_step:.3f} s per step of 64 pairs ({rm_total:.1f} s for 20 steps, loading included)")
    print(f"dpo:      {dpo_step:.3f} s per step of 64 pairs (reference log-probs of all pairs computed once first)")
    for name, records in runs.items():
        print(f"RL step, {name:12s}: timing_s/reward {mean_of(records, 'timing_s/reward'):.3f} s, "
              f"timing_s/step {mean_of(records, 'timing_s/step'):.3f} s (mean of steps 2-{STEPS})")


if __name__ == "__main__":
    main()
