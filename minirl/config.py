"""The trainer's configuration, with verl's key names, and `key=value` overrides as verl takes them.

Every key a learner touches is named and explained once, here. Keys are verl's
(`verl/trainer/config/ppo_trainer.yaml`), so an override written for verl works unchanged:

    python -m minirl train algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=8

With no override, the defaults train the book's tiny task from the cached SFT warm start on a
laptop CPU. Where a default differs from verl's (learning rates, batch sizes: verl's are for
billion-parameter models on GPUs), the field's docstring gives verl's default.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from minirl.core import LOSS_AGG_MODES
from minirl.kl import KL_PENALTY_CHOICES
from minirl.rollout_correction import ROLLOUT_IS_LEVELS, ROLLOUT_RS_OPTIONS

ADV_ESTIMATORS = ("gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax")
TINY = "tiny"  # the special path/file value meaning "the cached tiny warm start and its data"


@dataclass
class DataConfig:
    train_files: str = TINY
    """Parquet file(s) in verl's schema; "tiny" = the tiny arithmetic task (built with the warm start)."""
    val_files: str = TINY
    """Validation parquet file(s); "tiny" = the tiny task's test split."""
    train_batch_size: int = 32
    """Prompts per training step (each sampled rollout.n times). verl default: 1024."""
    gen_batch_size: int | None = None
    """Prompts per generation round with DAPO's dynamic sampling; None = train_batch_size."""
    max_prompt_length: int = 32
    """Longest prompt in tokens; longer prompts raise an error. verl default: 512."""
    max_response_length: int = 20
    """Most tokens generated per response. verl default: 512."""
    val_max_samples: int = 200
    """Validation prompts used (the first ones of val_files); -1 for all."""
    shuffle: bool = True
    """Shuffle the training prompts each epoch (seeded by trainer.seed)."""


@dataclass
class ModelConfig:
    path: str = TINY
    """A Hugging Face model directory or hub id, e.g. Qwen/Qwen2.5-0.5B-Instruct; "tiny" = the cached warm start."""


@dataclass
class RolloutConfig:
    n: int = 8
    """Responses sampled per prompt (the group size of GRPO/RLOO). verl default: 1."""
    temperature: float = 1.0
    """Sampling temperature; the actor's log-probs use the same one."""
    top_p: float = 1.0
    """Nucleus sampling threshold; 1.0 = off."""
    top_k: int = -1
    """Keep the k most likely tokens; -1 = off."""
    do_sample: bool = True
    """Sample (True) or decode greedily (False) during training."""


@dataclass
class OptimConfig:
    lr: float = 1e-4
    """AdamW learning rate. verl default: 1e-6 for the actor, 1e-5 for the critic."""
    weight_decay: float = 0.01
    """AdamW weight decay (verl's default)."""


@dataclass
class ActorConfig:
    optim: OptimConfig = field(default_factory=OptimConfig)
    ppo_mini_batch_size: int = 16
    """Prompts per optimizer step (times rollout.n trajectories); must divide train_batch_size. verl: 256."""
    ppo_epochs: int = 1
    """Passes over each batch. More than one makes later mini-batches off-policy, where clipping acts."""
    clip_ratio_low: float = 0.2
    """PPO clip below 1: ratio >= 1 - clip_ratio_low."""
    clip_ratio_high: float = 0.2
    """PPO clip above 1: ratio <= 1 + clip_ratio_high (DAPO's clip-higher: 0.28)."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound for negative advantages (> 1)."""
    loss_agg_mode: str = "token-mean"
    """How per-token losses become one number; see minirl.core.agg_loss."""
    loss_scale_factor: float | None = None
    """K of seq-mean-token-sum-norm; None = the padded response length."""
    entropy_coeff: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss)."""
    use_kl_loss: bool = False
    """Add kl_loss_coef * KL(actor || reference) to the actor loss (GRPO's way)."""
    kl_loss_coef: float = 0.001
    """Weight of the KL loss."""
    kl_loss_type: str = "low_var_kl"
    """KL estimator of the KL loss; see minirl.kl."""
    grad_clip: float = 1.0
    """Clip the gradient's global norm to this."""
    shuffle: bool = False
    """Shuffle trajectories before splitting into mini-batches (verl default: False)."""


@dataclass
class ActorRolloutRefConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)


@dataclass
class CriticConfig:
    enable: bool | None = None
    """Train a critic; None = only when adv_estimator is gae."""
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-3))
    cliprange_value: float = 0.5
    """Clip of the value loss (verl's default)."""
    ppo_epochs: int = 1
    """Passes of the critic over each batch."""


@dataclass
class KLControlConfig:
    type: str = "fixed"
    """"fixed" or "adaptive" KL coefficient for the KL in the reward."""
    kl_coef: float = 0.001
    """beta (initial beta for adaptive)."""
    horizon: int = 10000
    """Adaptive controller horizon."""
    target_kl: float = 0.1
    """Adaptive controller target KL."""


@dataclass
class RolloutCorrectionConfig:
    rollout_is: str | None = None
    """Importance weights pi_train / pi_rollout: None (off), "token" or "sequence"."""
    rollout_is_threshold: str | None = "2.0"
    """Truncation of the IS weights ("2.0") or IcePop bounds ("0.5_5.0")."""
    rollout_is_batch_normalize: bool = False
    """Normalise the IS weights to mean 1 over the batch."""
    rollout_rs: str | None = None
    """Rejection sampling options, comma separated (e.g. "token_k1"); None = off."""
    rollout_rs_threshold: str | None = None
    """Thresholds of the rejection options."""


@dataclass
class FilterGroupsConfig:
    enable: bool = False
    """DAPO dynamic sampling: drop groups whose responses all scored the same."""
    metric: str = "acc"
    """Per-response value compared within a group: "acc", "score" or "seq_reward"."""
    max_num_gen_batches: int = 10
    """Give up (error) after this many generation rounds; <= 0 = never."""


@dataclass
class AlgorithmConfig:
    adv_estimator: str = "grpo"
    """Advantage estimator: gae, grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, remax. verl: gae."""
    gamma: float = 1.0
    """Discount (GAE, REINFORCE++)."""
    lam: float = 1.0
    """GAE lambda."""
    norm_adv_by_std_in_grpo: bool = True
    """GRPO divides by the group std; False = Dr.GRPO."""
    use_kl_in_reward: bool = False
    """Subtract beta * KL(actor || reference) from the reward (InstructGPT's way)."""
    kl_penalty: str = "kl"
    """KL estimator of the in-reward KL."""
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)


@dataclass
class TrainerConfig:
    total_training_steps: int = 100
    """Training steps (one batch of train_batch_size prompts each)."""
    test_freq: int = 10
    """Validate every this many steps (and at the end); -1 = never."""
    val_before_train: bool = True
    """Validate once before the first step."""
    save_freq: int = -1
    """Checkpoint every this many steps; -1 = never."""
    default_local_dir: str = "runs/minirl"
    """Run directory: metrics.jsonl, checkpoints, plots."""
    resume_mode: str = "auto"
    """"auto" resumes from the latest checkpoint in default_local_dir; "disable" starts fresh."""
    seed: int = 0
    """Seeds data order, sampling and initialisation."""
    logger: list[str] = field(default_factory=lambda: ["console"])
    """Where metrics go besides metrics.jsonl: any of console, tensorboard, wandb."""
    project_name: str = "minirl"
    """Tracker project name."""
    experiment_name: str = "tiny"
    """Tracker run name."""
    progress_bar: bool = True
    """Show a tqdm bar over steps."""


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


def _all_keys(node, prefix: str = "") -> list[str]:
    keys = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        keys.append(path)
        if OmegaConf.is_dict(value):
            keys += _all_keys(value, path + ".")
    return keys


def load_config(overrides: list[str] | None = None) -> Config:
    """Build the config from the defaults and verl-style `key=value` overrides, then validate it.

    Raises:
        ValueError: for an unknown key (suggesting the nearest valid one), a value of the wrong
            type, or a combination that cannot train (see `validate_config`).
    """
    base = OmegaConf.structured(Config)
    for override in overrides or []:
        if "=" not in override:
            raise ValueError(f"override {override!r} is not key=value, e.g. algorithm.adv_estimator=grpo")
        key = override.split("=", 1)[0].lstrip("+")
        if OmegaConf.select(base, key, default="__missing__") == "__missing__":
            close = difflib.get_close_matches(key, _all_keys(base), n=1, cutoff=0.5)
            hint = f" Did you mean {close[0]}?" if close else ""
            raise ValueError(f"unknown config key {key!r}.{hint} See minirl/config.py for every key.")
    try:
        merged = OmegaConf.merge(base, OmegaConf.from_dotlist(overrides or []))
    except (ValidationError, ConfigKeyError) as error:
        raise ValueError(f"bad config value: {error.msg}") from None
    config = OmegaConf.to_object(merged)
    validate_config(config)
    return config


def validate_config(config: Config) -> None:
    """Reject settings that cannot train, with a message that says what to change."""
    algo, actor = config.algorithm, config.actor_rollout_ref.actor
    rollout, data = config.actor_rollout_ref.rollout, config.data
    problems = []

    def choice(name, value, choices):
        if value not in choices:
            problems.append(f"{name}={value!r} is not one of {', '.join(map(str, choices))}")

    choice("algorithm.adv_estimator", algo.adv_estimator, ADV_ESTIMATORS)
    choice("actor_rollout_ref.actor.loss_agg_mode", actor.loss_agg_mode, LOSS_AGG_MODES)
    choice("actor_rollout_ref.actor.kl_loss_type", actor.kl_loss_type, KL_PENALTY_CHOICES)
    choice("algorithm.kl_penalty", algo.kl_penalty, KL_PENALTY_CHOICES)
    choice("algorithm.kl_ctrl.type", algo.kl_ctrl.type, ("fixed", "adaptive"))
    choice("trainer.resume_mode", config.trainer.resume_mode, ("auto", "disable"))
    choice("algorithm.filter_groups.metric", algo.filter_groups.metric, ("acc", "score", "seq_reward"))
    if algo.rollout_correction.rollout_is is not None:
        choice("algorithm.rollout_correction.rollout_is", algo.rollout_correction.rollout_is, ROLLOUT_IS_LEVELS)
    for option in (algo.rollout_correction.rollout_rs or "").split(","):
        if option.strip():
            choice("algorithm.rollout_correction.rollout_rs", option.strip(), ROLLOUT_RS_OPTIONS)
    for logger in config.trainer.logger:
        choice("trainer.logger", logger, ("console", "tensorboard", "wandb"))
    if algo.adv_estimator in ("grpo", "rloo", "reinforce_plus_plus_baseline") and rollout.n < 2:
        problems.append(f"{algo.adv_estimator} compares the responses to one prompt, so it needs "
                        f"actor_rollout_ref.rollout.n >= 2 (got {rollout.n})")
    if rollout.n < 1:
        problems.append(f"actor_rollout_ref.rollout.n must be >= 1 (got {rollout.n})")
    use_critic = config.critic.enable if config.critic.enable is not None else algo.adv_estimator == "gae"
    if algo.adv_estimator == "gae" and not use_critic:
        problems.append("algorithm.adv_estimator=gae needs a critic: set critic.enable=true (or leave it unset)")
    for name, value in (("data.train_batch_size", data.train_batch_size),
                        ("actor_rollout_ref.actor.ppo_mini_batch_size", actor.ppo_mini_batch_size),
                        ("actor_rollout_ref.actor.ppo_epochs", actor.ppo_epochs),
                        ("data.max_response_length", data.max_response_length),
                        ("data.max_prompt_length", data.max_prompt_length),
                        ("trainer.total_training_steps", config.trainer.total_training_steps)):
        if value < 1:
            problems.append(f"{name} must be >= 1 (got {value})")
    if actor.ppo_mini_batch_size >= 1 and data.train_batch_size % actor.ppo_mini_batch_size:
        problems.append(f"actor_rollout_ref.actor.ppo_mini_batch_size={actor.ppo_mini_batch_size} must divide "
                        f"data.train_batch_size={data.train_batch_size} (both count prompts)")
    if not 0 <= actor.clip_ratio_low < 1:
        problems.append(f"actor_rollout_ref.actor.clip_ratio_low must be in [0, 1) (got {actor.clip_ratio_low})")
    if actor.clip_ratio_high < 0:
        problems.append(f"actor_rollout_ref.actor.clip_ratio_high must be >= 0 (got {actor.clip_ratio_high})")
    if actor.clip_ratio_c <= 1:
        problems.append(f"actor_rollout_ref.actor.clip_ratio_c must be > 1 (got {actor.clip_ratio_c})")
    if rollout.do_sample and rollout.temperature <= 0:
        problems.append("actor_rollout_ref.rollout.temperature must be > 0 when sampling "
                        f"(got {rollout.temperature}); set rollout.do_sample=false for greedy decoding")
    if not 0 < rollout.top_p <= 1:
        problems.append(f"actor_rollout_ref.rollout.top_p must be in (0, 1] (got {rollout.top_p})")
    if actor.optim.lr <= 0:
        problems.append(f"actor_rollout_ref.actor.optim.lr must be > 0 (got {actor.optim.lr})")
    if problems:
        raise ValueError("invalid config:\n  - " + "\n  - ".join(problems))


def to_yaml(config: Config) -> str:
    """The full resolved config as YAML (written to the run directory)."""
    return OmegaConf.to_yaml(OmegaConf.structured(config))
