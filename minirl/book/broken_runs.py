"""Lab C's broken runs: real short runs of the tiny task, each broken by one known cause.

Every case is a few config overrides on top of `BASE` (GRPO from the tiny task's SFT warm start, 16 prompts x 8
responses per step, two mini-batches, the KL to the reference measured in every run), so a case's metrics differ
from the healthy run's only by its cause. The lab trains them all and plots each signature next to a healthy run;
Exercise C.1 names the cause of runs whose cause is hidden (`graded_runs`, cached). The hidden runs keep only what
the run did: every one has the same metric keys, and none holds a metric that states the config (`hide_config`).
Two rewards a real project could ship by mistake are in `minirl/book/broken_rewards.py`, loaded by
`reward.custom_reward_function.path` as any user's reward file.

The `pad_token_id == eos_token_id` masking bug is not a config key: `pad_is_eos_loss_mask` reproduces it in the
SFT data (`tokenize_demonstrations`), and the lab patches it in for one build, in its own process.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

ACTOR = "actor_rollout_ref.actor."
ROLLOUT = "actor_rollout_ref.rollout."
REWARD_FILE = Path(__file__).resolve().with_name("broken_rewards.py")


def reward_overrides(name: str) -> list[str]:
    """The overrides that make a run score with a reward of broken_rewards.py (loaded by path, as verl loads it)."""
    return [f"reward.custom_reward_function.path={REWARD_FILE}", f"reward.custom_reward_function.name={name}"]


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------

BASE = ["data.train_batch_size=16", f"{ACTOR}ppo_mini_batch_size=8", "data.val_max_samples=100",
        f"{ACTOR}use_kl_loss=true", f"{ACTOR}kl_loss_coef=0"]
"""Every case's common overrides: 16 prompts x 8 responses per step in two mini-batches, 100 validation questions,
and the KL loss to the reference with coefficient 0: measured and logged as `actor/kl_loss` in every run, never
trained on (0 times its gradient adds nothing). So a KL blow-up shows in the metric's value, not in its presence."""

UNCLIPPED = [f"{ACTOR}clip_ratio_low=0.999", f"{ACTOR}clip_ratio_high=1000", f"{ACTOR}clip_ratio_c=1000"]


@dataclass(frozen=True)
class Case:
    """One run of the gallery: its overrides on top of BASE, what is wrong, and the run it is read against."""

    overrides: tuple[str, ...]
    cause: str
    reference: str = "healthy"


CASES = {
    "healthy": Case((), "nothing: minirl's defaults (lr 1e-4, one epoch, clip 0.2)", reference=""),
    "healthy_4_epochs": Case((f"{ACTOR}ppo_epochs=4",), "nothing: each batch reused for 4 epochs, clipped",
                             reference=""),
    "lr_too_high": Case((f"{ACTOR}optim.lr=1e-2",), "the actor's learning rate is 100 times too high"),
    "no_clip": Case((f"{ACTOR}ppo_epochs=4", *UNCLIPPED), "4 epochs per batch with the clip switched off",
                    reference="healthy_4_epochs"),
    "entropy_collapse": Case((f"{ACTOR}ppo_epochs=4", f"{ACTOR}optim.lr=3e-4"),
                             "too much optimisation per batch (4 epochs at 3x the learning rate) sharpens the policy"),
    "all_equal_rewards": Case(tuple(reward_overrides("format_only_score")),
                              "a format-only reward that every response of the warm start satisfies"),
    "truncated": Case(("data.max_response_length=15",), "a response budget (15 tokens) shorter than the answers"),
    "kl_blowup": Case((f"{ACTOR}kl_loss_coef=0.001", f"{ACTOR}optim.lr=1e-3"),
                      "the policy runs away from the reference (lr 1e-3) faster than kl_loss_coef=0.001 holds it"),
    "rollout_mismatch": Case((f"{ROLLOUT}weight_sync_interval=16",),
                             "the rollout engine samples with weights up to 15 updates old"),
    "reward_always_zero": Case(tuple(reward_overrides("exact_match_score")),
                               "an exact-match reward on a task whose responses show their working"),
}
"""The gallery, by name. `pad_is_eos` (a data bug, not a key) is built separately by the lab."""

GRADED = ("healthy", "lr_too_high", "no_clip", "all_equal_rewards", "truncated", "kl_blowup", "rollout_mismatch",
          "reward_always_zero")
"""The causes Exercise C.1's hidden runs are drawn from (entropy collapse is left out: on the tiny task its
signature is a matter of degree, see the lab)."""

GRADED_STEPS = 12
GRADED_SEED = 3
"""The hidden runs' length (the lab's runs have the same) and seed (the lab trains seeds 0-2: never the hidden one)."""

CONFIG_METRICS = ("actor/lr", "actor/kl_coef", "critic/lr")
"""Metrics that restate a config value rather than measure the run; the hidden runs drop them."""
MACHINE_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/")
"""Timings and throughput: they depend on the machine, and an update's time gives away `ppo_epochs`; dropped too."""


def hide_config(runs: list[tuple[str, list[dict]]]) -> list[tuple[str, list[dict]]]:
    """The runs with only behaviour left: no config metric, no timing, and the same metric keys in every run.

    A key that some run lacks is dropped from all of them, so which keys a run has says nothing about its cause.
    `timing_s/step` stays as the marker of a training step (`minirl.plot.training_steps`), set to 0.0 everywhere.
    """
    def kept(key: str) -> bool:
        return key not in CONFIG_METRICS and not key.startswith(MACHINE_PREFIXES)

    per_run = [{key for record in records for key in record if kept(key)} for _, records in runs]
    common = set.intersection(*per_run) if per_run else set()
    hidden = []
    for cause, records in runs:
        cleaned = []
        for record in records:
            row = {key: value for key, value in record.items() if key in common}
            if "timing_s/step" in record:
                row["timing_s/step"] = 0.0
            cleaned.append(row)
        hidden.append((cause, cleaned))
    return hidden


def case_overrides(name: str, steps: int, seed: int, test_freq: int | None = None) -> list[str]:
    """The full override list of one case's run: BASE, the case, its length and seed."""
    test_freq = test_freq or steps
    return [*BASE, *CASES[name].overrides, f"trainer.total_training_steps={steps}", f"trainer.test_freq={test_freq}",
            f"data.seed={seed}"]


def run_case(name: str, out_dir: str | Path, steps: int, seed: int = 0, test_freq: int | None = None) -> list[dict]:
    """Train one case in this process (from the cached warm start) and return its metrics.jsonl records."""
    from minirl.plot import load_metrics
    from minirl.trainer import train

    train([*case_overrides(name, steps, seed, test_freq), f"trainer.default_local_dir={out_dir}",
           "trainer.resume_mode=disable", "trainer.logger=[]"], show_progress=False)
    return load_metrics(out_dir)


def graded_runs(cache_dir: str | Path | None = None) -> list[tuple[str, list[dict]]]:
    """Exercise C.1's runs: (cause, metrics records) for every GRADED cause, seed 3, 12 steps, in a fixed order.

    Trained once (about a minute on 2 cores) and cached in `<cache>/lab_c-<hash>/`, the hash covering the cases
    and their length; a build interrupted half way is started again, never half-read. The records are passed
    through `hide_config`: the same keys in every run, no `actor/lr`, no timings.
    """
    from minirl.sft import build_once, default_cache_dir

    def build(building: Path) -> None:
        for name in GRADED:
            run_case(name, building / name, GRADED_STEPS, GRADED_SEED)
        (building / "done").write_text("ok\n")

    spec = json.dumps([GRADED_STEPS, GRADED_SEED, BASE, [CASES[name].overrides for name in GRADED]])
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = build_once(root / f"lab_c-{hashlib.sha256(spec.encode()).hexdigest()[:12]}", "done", build)
    from minirl.plot import load_metrics

    return hide_config([(name, load_metrics(target / name)) for name in GRADED])


# ----------------------------------------------------------------------------------------------
# The pad == eos masking bug, as it happens in SFT data
# ----------------------------------------------------------------------------------------------

def pad_is_eos_loss_mask(tokenize):
    """Wrap `sft.tokenize_demonstrations` into the classic SFT data bug of a tokenizer that pads with EOS.

    The wrapped function pads with the EOS id and masks every target equal to it, so the one real EOS token of
    each demonstration loses its loss too. Why this happens and what it does to a run: Lab C, section 4.
    """
    def tokenize_with_bug(tokenizer, demos, max_length, tools=None):
        tensors = tokenize(tokenizer, demos, max_length, tools)
        eos = tokenizer.eos_token_id
        tensors["input_ids"] = tensors["input_ids"].masked_fill(tensors["attention_mask"] == 0, eos)  # pad = eos
        target_is_pad = tensors["input_ids"][:, 1:] == eos  # loss_mask[t] scores token t+1
        tensors["loss_mask"][:, :-1] *= (~target_is_pad).to(tensors["loss_mask"].dtype)
        return tensors

    return tokenize_with_bug
