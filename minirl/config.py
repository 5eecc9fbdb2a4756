"""The trainer's configuration, with verl's key names, and `key=value` overrides as verl takes them.

Every key a learner touches is named and explained once, here. Keys are verl 0.9.1's
(`verl/trainer/config/_generated_ppo_trainer.yaml`), so a line of a verl launch script works unchanged:

    python -m minirl train algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=8
    python -m minirl config OVERRIDES...     # print the resolved config and exit (verl/Hydra's --cfg job)

With no override, the defaults train the book's tiny task from the cached SFT warm start on a
laptop CPU. Where a default differs from verl's (learning rates, batch sizes: verl's are for
billion-parameter models on GPUs), the field's docstring gives verl's default. Keys that "follow"
another key (`critic.ppo_epochs` follows `actor_rollout_ref.actor.ppo_epochs`, ...) use the same
OmegaConf interpolation as verl's yaml.

verl has ~830 keys. The ones that only concern its distributed machinery (FSDP sharding and
offload, the vLLM/SGLang engine, Ray, profilers, ...) are accepted and listed once at start in a
short notice ("accepted, no effect in minirl: why"), never silently (`minirl/verl_keys.txt` lists
verl 0.9.1's keys; a parity test keeps it in sync). Any other unknown key is an error that names
the nearest valid key.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, InterpolationResolutionError, ValidationError

from minirl.advantage import ADV_ESTIMATOR_REGISTRY
from minirl.core import LOSS_AGG_MODES
from minirl.kl import KL_PENALTY_CHOICES
from minirl.policy_loss import POLICY_LOSS_REGISTRY, clip_range
from minirl.rollout_correction import BYPASS_LOSS_TYPES, ROLLOUT_IS_LEVELS, ROLLOUT_RS_OPTIONS

ROLLOUT_DTYPES = ("float32", "bfloat16", "float16")
TINY = "tiny"  # the special path/file value meaning "the cached tiny warm start and its data"
ACTOR = "actor_rollout_ref.actor"


@dataclass
class DataConfig:
    train_files: Any = TINY
    """Parquet file, or list of files (concatenated), in verl's schema; "tiny" = the tiny arithmetic task."""
    val_files: Any = TINY
    """Validation parquet file(s); "tiny" = the tiny task's test split."""
    train_batch_size: int = 32
    """Prompts per training step (each sampled rollout.n times). verl default: 1024."""
    gen_batch_size: int | None = None
    """Prompts per generation round with DAPO's dynamic sampling; None = train_batch_size."""
    max_prompt_length: int = 32
    """Longest prompt in tokens (chat template applied). verl default: 512."""
    max_response_length: int = 20
    """Most tokens generated per response. verl default: 512."""
    filter_overlong_prompts: bool = False
    """Drop prompts longer than max_prompt_length from the dataset before training (verl's RLHFDataset)."""
    truncation: str = "error"
    """What a prompt longer than max_prompt_length does if it was not filtered: error, left, right or middle."""
    train_max_samples: int = -1
    """Use at most this many training rows (a seeded random subset when shuffle is on); -1 = all."""
    val_max_samples: int = 200
    """Validation prompts used (the first ones of val_files); -1 for all. verl default: -1."""
    shuffle: bool = True
    """Shuffle the training prompts each epoch (seeded by data.seed)."""
    seed: int | None = 0
    """Seed of the data order (verl's data.seed, default null = torch's fixed default seed). In minirl it
    also enters every sampling seed and the critic head's initialisation: change it to get an independent run."""


@dataclass
class LoraGroupConfig:
    """verl's `model.lora.*` group (its Megatron engine's spelling of LoRA; minirl/lora.py maps it onto PEFT)."""

    rank: int = 0
    """LoRA rank r; > 0 trains adapters instead of the weights. Set this or lora_rank, not both."""
    alpha: float = 32
    """The adapter's scale is alpha / rank (Megatron's default 32; the flat key lora_alpha defaults to 16)."""
    dropout: float = 0.0
    """Dropout on the adapter's input."""
    target_modules: list[str] = field(default_factory=lambda: ["linear_qkv", "linear_proj", "linear_fc1",
                                                                "linear_fc2"])
    """Megatron's module names (linear_qkv = q/k/v_proj, linear_proj = o_proj, linear_fc1 = gate/up_proj,
    linear_fc2 = down_proj); Hugging Face names pass through."""
    exclude_modules: list[str] = field(default_factory=list)
    """Modules to leave without an adapter."""
    lora_A_init_method: str = "xavier"
    """How A starts: xavier (Xavier-uniform, Megatron's) or kaiming (PEFT's); B starts at 0 either way."""
    adapter_path: str | None = None
    """Continue training a saved adapter (with lora.rank > 0)."""


@dataclass
class ModelConfig:
    path: str = TINY
    """A Hugging Face model directory or hub id, e.g. Qwen/Qwen2.5-0.5B-Instruct; "tiny" = the cached warm start."""
    enable_gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (Hugging Face's gradient_checkpointing_enable, use_reentrant=False):
    less memory, ~30% more compute, the same gradients. verl default: true."""
    lora_rank: int = 0
    """LoRA rank r (minirl/lora.py, Chapter 14): > 0 freezes the model and trains rank-r adapters through PEFT; the
    reference policy is then the model with its adapter off, and checkpoints hold the adapter."""
    lora_alpha: float = 16
    """The adapter's scale is lora_alpha / lora_rank."""
    target_modules: Any = "all-linear"
    """Which layers get an adapter: all-linear (every linear layer but the output head) or a list of module names,
    e.g. [q_proj,v_proj]."""
    exclude_modules: Any = None
    """Module names (or a regex) to leave without an adapter."""
    lora_adapter_path: str | None = None
    """Continue training a saved adapter (a checkpoint's actor directory); needs lora_rank > 0, as in verl."""
    lora: LoraGroupConfig = field(default_factory=LoraGroupConfig)


@dataclass
class ValKwargsConfig:
    n: int = 1
    """Responses per validation prompt; n > 1 adds best@k, worst@k and maj@k metrics."""
    do_sample: bool = False
    """Sample during validation; False (or temperature 0) = greedy."""
    temperature: float = 0.0
    """Validation sampling temperature; 0 = greedy (verl's default)."""
    top_p: float = 1.0
    """Validation nucleus threshold."""
    top_k: int = -1
    """Validation top-k; -1 = off."""


@dataclass
class MultiTurnConfig:
    """The tool loop's settings (verl: `actor_rollout_ref.rollout.multi_turn`; read by the v1 trainer's
    `tool_agent` loop, minirl/v1/tool_agent_loop.py)."""

    enable: bool = False
    """verl 0.9.1 sets it into the batch's meta_info and never reads it: the loop a row runs is chosen by its
    agent_name (or agent.default_agent_loop). Accepted for verl's lines."""
    max_assistant_turns: int | None = None
    """Model turns per conversation; null = no limit (the response budget still ends it)."""
    max_user_turns: int | None = None
    """Tool turns per conversation; null = no limit."""
    max_parallel_calls: int = 1
    """Calls run from one model turn; the rest are dropped."""
    max_tool_response_length: int = 256
    """A tool result longer than this many characters is cut."""
    tool_response_truncate_side: str = "middle"
    """Where a long tool result is cut: left (keep its end), right (keep its start), middle."""
    format: str = "hermes"
    """How tool calls are written: hermes (<tool_call>{"name": ..., "arguments": {...}}</tool_call>)."""
    tool_config_path: str | None = None
    """YAML file of BaseTool classes with their OpenAI schemas (minirl.tools.BaseTool)."""
    function_tool_path: str | None = None
    """Python file of @minirl.tools.function_tool functions (schemas inferred from signature and docstring)."""
    train_on_tool_responses: bool = False
    """minirl only, for Chapter 13's ablation: give the tokens the loop inserts (tool results, template tokens)
    response_mask 1, so the loss, the KL, the entropy and the advantages also count text the model did not write.
    verl has no such switch: its mask is always 0 there."""


@dataclass
class AgentConfig:
    """verl's `actor_rollout_ref.rollout.agent` (the agent-loop workers)."""

    default_agent_loop: str = "single_turn_agent"
    """The loop of a row without an agent_name: single_turn_agent or tool_agent (or a registered loop)."""


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
    dtype: str = "float32"
    """Precision of the rollout engine's weights: float32 keeps the actor's precision (and shares its weights, unless
    weight_sync_interval > 1 or hybrid_engine=false); bfloat16 or float16 give the engine its own copy in that
    precision (sampled in it, trained in float32: a mismatch). verl: bfloat16."""
    weight_sync_interval: int = 1
    """minirl's own key: copy the actor's weights into the rollout engine after every k-th actor update (1 = every
    update, on-policy). An update is one training step's update_actor (ppo_epochs x mini-batches optimizer steps).
    k > 1 samples with weights up to k-1 updates old, as verl's asynchronous trainers do
    (verl/experimental/fully_async_policy: async_training.trigger_parameter_sync_step)."""
    seed: int = 42
    """Sampling seed (verl's default). Row i of step s is sampled with a seed made of (rollout.seed, data.seed, s, i),
    so a response does not depend on how many processes generated the batch."""
    log_prob_micro_batch_size_per_gpu: int | None = None
    """Rows per forward pass when recomputing old log-probs; None = the whole share at once."""
    log_prob_use_dynamic_bsz: bool = "${oc.select:actor_rollout_ref.actor.use_dynamic_bsz,false}"  # type: ignore
    """Token-budgeted forward passes for old log-probs (follows actor.use_dynamic_bsz)."""
    log_prob_max_token_len_per_gpu: int = "${oc.select:actor_rollout_ref.actor.ppo_max_token_len_per_gpu,16384}"  # type: ignore
    """Token budget per forward pass with log_prob_use_dynamic_bsz (follows actor.ppo_max_token_len_per_gpu)."""
    val_kwargs: ValKwargsConfig = field(default_factory=ValKwargsConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)


@dataclass
class OptimConfig:
    lr: float = 1e-4
    """AdamW learning rate. verl default: 1e-6 for the actor, 1e-5 for the critic."""
    weight_decay: float = 0.01
    """AdamW weight decay (verl's default)."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas (verl's default)."""
    clip_grad: float = 1.0
    """Clip the gradient's global norm to this (verl's live key; actor.grad_clip is a deprecated alias)."""
    lr_warmup_steps: int = -1
    """Linear warm-up steps; <= 0 uses lr_warmup_steps_ratio * total training steps."""
    lr_warmup_steps_ratio: float = 0.0
    """Warm-up as a fraction of the total training steps (when lr_warmup_steps <= 0)."""
    lr_scheduler_type: str = "constant"
    """constant or cosine (after the warm-up). The scheduler steps once per training step, as in verl."""
    min_lr_ratio: float = 0.0
    """cosine: the lr never falls below min_lr_ratio * lr."""
    num_cycles: float = 0.5
    """cosine: number of cosine periods over the decay (0.5 = one half-cosine down to min_lr_ratio)."""


@dataclass
class PolicyLossConfig:
    loss_mode: str = "vanilla"
    """The policy loss, by its registered name (minirl/policy_loss.py): vanilla (PPO), gspo, sapo, cispo, geo_mean,
    dppo_tv, dppo_kl, gpg, dro, clip_cov, kl_cov. bypass_mode is chosen by algorithm.rollout_correction.bypass_mode."""
    clip_cov_ratio: float = 0.0002
    """clip_cov: fraction of the batch's tokens whose gradient is removed (at least one)."""
    clip_cov_lb: float = 1.0
    """clip_cov: a token is a candidate if its covariance cov_t is above this ..."""
    clip_cov_ub: float = 5.0
    """... and below this."""
    kl_cov_ratio: float = 0.0002
    """kl_cov: fraction of the batch's tokens (the highest cov_t, at least one) that get the |log r| penalty."""
    ppo_kl_coef: float = 0.1
    """kl_cov: weight of that penalty."""
    dro_beta: float | None = None
    """dro: weight of the quadratic log-ratio penalty beta/2 (log r)^2; required (> 0) for loss_mode=dro."""


@dataclass
class ActorConfig:
    optim: OptimConfig = field(default_factory=OptimConfig)
    ppo_mini_batch_size: int = 16
    """Prompts per optimizer step (times rollout.n trajectories); must divide train_batch_size. verl: 256."""
    ppo_micro_batch_size_per_gpu: int | None = None
    """Rows per forward/backward pass; gradients of a mini-batch's micro-batches are accumulated (the same
    update, less memory). None = the whole share of a mini-batch at once."""
    use_dynamic_bsz: bool = False
    """Form micro-batches by a token budget (ppo_max_token_len_per_gpu) instead of a row count."""
    ppo_max_token_len_per_gpu: int = 16384
    """Token budget (prompt + response, padding excluded) of one micro-batch with use_dynamic_bsz."""
    ppo_epochs: int = 1
    """Passes over each batch. More than one makes later mini-batches off-policy, where clipping acts."""
    clip_ratio: float = 0.2
    """PPO's eps, used where clip_ratio_low or clip_ratio_high is null (both are 0.2 by default, as in verl, so
    this key alone changes nothing)."""
    clip_ratio_low: float | None = 0.2
    """PPO clip below 1: ratio >= 1 - clip_ratio_low (dppo_*: a probability-difference or KL threshold)."""
    clip_ratio_high: float | None = 0.2
    """PPO clip above 1: ratio <= 1 + clip_ratio_high (DAPO's clip-higher: 0.28)."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound for negative advantages (> 1); dppo_* truncate their IS weight at it."""
    calculate_sum_pi_squared: bool = False
    """Also compute sum_v pi(v)^2 of each response token's distribution in the old-log-prob pass: the optimal token
    baselines need it, and it adds the variance_proxy/* metrics."""
    tau_pos: float = 1.0
    """sapo: gate temperature for tokens with a positive advantage."""
    tau_neg: float = 1.05
    """sapo: gate temperature for tokens with a negative advantage (> tau_pos damps them sooner)."""
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
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
    shuffle: bool = False
    """Shuffle trajectories before splitting into mini-batches (verl default: False)."""
    data_loader_seed: int = 42
    """Seed of that shuffle; as in verl, every step uses the same permutation."""


@dataclass
class RefConfig:
    log_prob_micro_batch_size_per_gpu: int | None = None
    """Rows per forward pass of the reference model; None = the whole share at once."""
    log_prob_use_dynamic_bsz: bool = "${oc.select:actor_rollout_ref.actor.use_dynamic_bsz,false}"  # type: ignore
    """Token-budgeted forward passes of the reference (follows actor.use_dynamic_bsz)."""
    log_prob_max_token_len_per_gpu: int = "${oc.select:actor_rollout_ref.actor.ppo_max_token_len_per_gpu,16384}"  # type: ignore
    """Token budget of one reference forward pass (follows actor.ppo_max_token_len_per_gpu)."""


@dataclass
class ActorRolloutRefConfig:
    hybrid_engine: bool = True
    """True: the rollout engine runs in the actor's processes (verl's hybrid engine, colocated; verl's engine still
    keeps its own bf16 copy, re-synced every step; minirl's float32 engine uses the actor's). False: the engine keeps
    its own copy, synced after each actor update (with trainer.use_ray, in a worker group of its own). verl 0.9.1's
    legacy trainer refuses false ("only support hybrid engine"); its separated and async trainers split them."""
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)


@dataclass
class CriticConfig:
    enable: bool | None = None
    """Train a critic; None = only when adv_estimator is gae."""
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-3))
    cliprange_value: float = 0.5
    """Clip of the value loss (verl's default)."""
    ppo_mini_batch_size: int = "${oc.select:actor_rollout_ref.actor.ppo_mini_batch_size,256}"  # type: ignore
    """Prompts per critic optimizer step (follows the actor's)."""
    ppo_epochs: int = "${oc.select:actor_rollout_ref.actor.ppo_epochs,1}"  # type: ignore
    """Passes of the critic over each batch (follows the actor's)."""
    shuffle: bool = "${oc.select:actor_rollout_ref.actor.shuffle,false}"  # type: ignore
    """Shuffle before splitting into mini-batches (follows the actor's)."""
    data_loader_seed: int = 42
    """Seed of that shuffle."""
    ppo_micro_batch_size_per_gpu: int | None = None
    """Rows per critic forward/backward pass; None = the whole share at once."""
    use_dynamic_bsz: bool = "${oc.select:actor_rollout_ref.actor.use_dynamic_bsz,false}"  # type: ignore
    """Token-budgeted critic micro-batches (follows the actor's)."""
    ppo_max_token_len_per_gpu: int = 32768
    """Token budget of one critic micro-batch with use_dynamic_bsz."""
    forward_micro_batch_size_per_gpu: int | None = "${oc.select:.ppo_micro_batch_size_per_gpu,null}"  # type: ignore
    """Rows per forward pass when computing values."""
    forward_max_token_len_per_gpu: int = "${.ppo_max_token_len_per_gpu}"  # type: ignore
    """Token budget of one values forward pass with use_dynamic_bsz."""
    loss_agg_mode: str = "${oc.select:actor_rollout_ref.actor.loss_agg_mode,token-mean}"  # type: ignore
    """How per-token value losses are aggregated (follows the actor's)."""


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
    bypass_mode: bool = False
    """True: skip the actor's recomputation of pi_old and use the rollout's log-probs instead (two policies);
    the loss then compares pi_theta with pi_rollout (see loss_type). False: decoupled mode (three policies)."""
    loss_type: str = "ppo_clip"
    """Bypass mode's loss: ppo_clip (ratio pi_theta / pi_rollout, clipped) or reinforce (explicit IS weights)."""


@dataclass
class FilterGroupsConfig:
    enable: bool = False
    """DAPO dynamic sampling: drop groups whose responses all scored the same."""
    metric: str = "reward"
    """Per-response value compared within a group: "reward" (the verifier's score, before any KL), "seq_final_reward"
    (after the KL in the reward), or a key the reward function returns ("acc", "score", ...)."""
    max_num_gen_batches: int = 0
    """Legacy trainer: give up (error) after this many generation rounds; <= 0 = never (verl's default)."""
    max_inflight_gen_batches: int = 1
    """v1 trainer: DAPO's prompts in flight at most, in train batches (each evicted group dispatches two new
    prompts, up to this cap)."""


@dataclass
class AlgorithmConfig:
    adv_estimator: str = "grpo"
    """Advantage estimator: gae, grpo, grpo_vectorized, grpo_passk, gdpo, rloo, rloo_vectorized, opo, gpg, remax,
    reinforce_plus_plus, reinforce_plus_plus_baseline, optimal_token_baseline, tir_optimal_token_baseline, or a name
    registered with minirl.advantage.register_adv_est. verl: gae."""
    gdpo_reward_keys: list[str] | None = None
    """gdpo: the reward dimensions, keys of the dict the reward function returns (e.g. [acc, format]); each is
    normalised within its group before they are summed. verl reads it but does not declare it: +algorithm.gdpo_..."""
    gdpo_reward_weights: list[float] | None = None
    """gdpo: one weight per key of gdpo_reward_keys; null = equal weights."""
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
class ColocateAsyncConfig:
    num_warmup_batches: float = 1
    """Train batches of prompts dispatched before the first step (1.5 = one and a half), so the rollout runs ahead
    of the trainer."""


@dataclass
class SeparateAsyncConfig:
    num_warmup_batches: float = 1
    """Train batches of prompts dispatched before the first step (as colocate_async's)."""
    parameter_sync_step: int = 4
    """Local updates per step (each on train_batch_size / parameter_sync_step prompts, which must equal
    ppo_mini_batch_size) before the weights go to the rollout process: the rollout samples with weights up to this
    many updates old."""


@dataclass
class SamplerConfig:
    max_off_policy_threshold: int | None = 8
    """Steps a prompt group may span from dispatch to training (span = step - dispatch step + 1); null = no limit."""
    max_off_policy_strategy: str = "drop"
    """drop: evict a finished group past the threshold (and dispatch a new prompt); wait: hold sampling until
    in-flight groups at the threshold finish, so none is dropped."""


@dataclass
class V1Config:
    trainer_mode: str = "sync"
    """sync: generate, then train (on-policy); colocate_async: the rollout runs ahead by num_warmup_batches and
    unfinished answers resume with the new weights (partial rollout); separate_async: the rollout is a process of
    its own that never waits, synced every parameter_sync_step updates."""
    colocate_async: ColocateAsyncConfig = field(default_factory=ColocateAsyncConfig)
    separate_async: SeparateAsyncConfig = field(default_factory=SeparateAsyncConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)


@dataclass
class TrainerConfig:
    total_epochs: int = 30
    """Passes over the training prompts (verl's default); the run length when total_training_steps is null."""
    total_training_steps: int | None = 100
    """Training steps; null = total_epochs * (training prompts // train_batch_size), verl's default."""
    test_freq: int = 10
    """Validate every this many steps (and at the last step); -1 = never. verl default: -1."""
    val_before_train: bool = True
    """Validate once before the first step (logged at step 0)."""
    val_only: bool = False
    """Only validate (needs val_before_train), then stop."""
    save_freq: int = -1
    """Checkpoint every this many steps (and at the last step); -1 = never."""
    default_local_dir: str = "runs/minirl"
    """Run directory: config.yaml, metrics.jsonl, checkpoints."""
    resume_mode: str = "auto"
    """"auto" resumes from the latest checkpoint in default_local_dir; "disable" starts fresh."""
    balance_batch: bool = True
    """Reorder the batch by sequence length before the update, as verl does (changes mini-batch membership)."""
    critic_warmup: int = 0
    """Skip the actor update while global_step < critic_warmup (the critic trains alone first)."""
    n_gpus_per_node: int | None = None
    """Processes per node; with nnodes it must match the launch. null = whatever the launch started. verl: 8."""
    nnodes: int = 1
    """Number of nodes."""
    logger: list[str] = field(default_factory=lambda: ["console"])
    """Where metrics go besides metrics.jsonl: any of console, tensorboard, wandb."""
    project_name: str = "minirl"
    """Tracker project name."""
    experiment_name: str = "tiny"
    """Tracker run name."""
    progress_bar: bool = True
    """Show a tqdm bar over steps (minirl only: verl always shows one)."""
    use_ray: bool = False
    """minirl only (verl always uses Ray): run the actor, rollout, reference and critic as Ray worker groups of
    n_gpus_per_node * nnodes processes each, driven by this process (Chapter 10; needs `pip install ray`)."""
    use_v1: bool = False
    """verl 0.9.1's v1 trainer (minirl/v1/: agent-loop sessions feed a replay buffer). verl's default is true;
    minirl's is the legacy loop, which every chapter up to 11 measured (minirl/README.md)."""
    v1: V1Config = field(default_factory=V1Config)


@dataclass
class RewardModelConfig:
    enable: bool = False
    """Score responses with a learned reward model instead of the rule reward (verl 0.9.1 uses only the reward
    model then, unless reward.custom_reward_function is set). The legacy top-level reward_model.enable is refused
    (verl 0.9.1's main_ppo ignores it)."""
    model_path: str | None = None
    """The reward model's directory or hub id: an AutoModelForSequenceClassification with one label, e.g. what
    `python -m minirl train-rm` saves. The legacy reward_model.model.path is refused (verl 0.9.1's main_ppo
    ignores it)."""


@dataclass
class CustomRewardFunctionConfig:
    path: str | None = None
    """A Python file holding your reward function (verl's `reward.custom_reward_function.path`; the legacy top-level
    `custom_reward_function.path` is refused: verl 0.9.1's main_ppo ignores it). null = the built-in rules of
    minirl/rewards.py, chosen by data_source."""
    name: str = "compute_score"
    """The function's name in that file: compute_score(data_source, solution_str, ground_truth, extra_info),
    returning a float or a dict with a "score" (its other keys are logged as minirl/<key>/mean)."""


@dataclass
class RewardManagerConfig:
    name: str = "naive"
    """naive: the score as the reward function returns it. dapo: plus DAPO's overlong penalty
    (reward.reward_kwargs.overlong_buffer_cfg), verl's `experimental/reward_loop/reward_manager/dapo.py`.
    gdpo: naive, with trainer.experiment_name added to each row's extra_info (verl's GDPO example sets it;
    the GDPO maths is algorithm.adv_estimator=gdpo). The legacy reward_model.reward_manager is refused (verl
    0.9.1's main_ppo ignores it)."""


@dataclass
class OverlongBufferConfig:
    enable: bool = False
    """Penalise responses longer than max_resp_len - len (needs reward.reward_manager.name=dapo)."""
    len: int = 0
    """Width of the penalty zone in tokens: the penalty grows linearly across it (DAPO: 4096 of 20480)."""
    penalty_factor: float = 0.0
    """The penalty at max_resp_len, i.e. for a response that was cut off (DAPO: 1.0)."""
    log: bool = False
    """Also log the penalty (minirl/overlong_reward/mean) and the share penalised (minirl/overlong/mean)."""


@dataclass
class RewardKwargsConfig:
    """verl 0.9.1 has no defaults here: its DAPO scripts add the keys with Hydra's `+`
    (`+reward.reward_kwargs.overlong_buffer_cfg.enable=True`); minirl accepts both spellings."""

    overlong_buffer_cfg: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    max_resp_len: int | None = None
    """The length the overlong zone ends at; DAPO's scripts set data.max_response_length (required when the
    overlong buffer is on, as in verl)."""


@dataclass
class RewardConfig:
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    reward_manager: RewardManagerConfig = field(default_factory=RewardManagerConfig)
    reward_kwargs: RewardKwargsConfig = field(default_factory=RewardKwargsConfig)


@dataclass
class RayInitConfig:
    num_cpus: int | None = None
    """CPUs Ray's scheduler knows of; null = all of the machine's (`ray.init(num_cpus=...)`). minirl's ranks ask for
    0 CPUs each (they run one thread and take turns), so it limits nothing here."""


@dataclass
class RayKwargsConfig:
    ray_init: RayInitConfig = field(default_factory=RayInitConfig)


@dataclass
class DistillationLossConfig:
    loss_mode: str = "k3"
    """The per-token loss, by its registered name (minirl/distillation.py): k3 (= low_var_kl), k1 (= kl), k2 (= mse),
    abs (reverse-KL estimators on the student's samples), or forward_kl_topk (forward KL over the teacher's top-k)."""
    topk: int | None = 32
    """forward_kl_topk: how many of the teacher's most likely tokens it returns per position."""
    use_task_rewards: bool = True
    """Also train on the task reward (the usual PPO/GRPO loss); false: the distillation loss alone."""
    distillation_loss_coef: float = 1.0
    """Weight of the distillation loss beside the task's loss (used only with use_task_rewards)."""
    loss_max_clamp: float | None = None
    """Clamp each token's distillation loss to [-loss_max_clamp, loss_max_clamp]; null = no clamp."""
    log_prob_min_clamp: float | None = None
    """forward_kl_topk: clamp the top-k log-probs of both models from below (a token one model finds impossible)."""
    use_policy_gradient: bool = False
    """true: the negative per-token loss is a per-token advantage for PPO's clipped loss (Thinking Machines' on-policy
    distillation; use k1); false: the per-token loss is back-propagated directly (use k3 or forward_kl_topk)."""
    policy_loss_mode: str = "vanilla"
    """The policy loss used with use_policy_gradient; verl 0.9.1 implements only vanilla."""
    clip_ratio: float = 0.2
    """PPO's eps for that loss, where clip_ratio_low/high are null."""
    clip_ratio_low: float | None = 0.2
    """Its clip below 1."""
    clip_ratio_high: float | None = 0.2
    """Its clip above 1."""


@dataclass
class TeacherModelConfig:
    model_path: str | None = None
    """The teacher's Hugging Face directory or hub id. Its tokenizer must be the student's (the teacher scores the
    student's token ids); e.g. the cached teacher of Chapter 14: `python -m minirl warm-start teacher`."""


@dataclass
class DistillationConfig:
    enabled: bool = False
    """On-policy distillation: a teacher scores the student's sampled tokens and the actor's loss adds a
    distillation loss (minirl/distillation.py, minirl/teacher.py; Chapter 14)."""
    distillation_loss: DistillationLossConfig = field(default_factory=DistillationLossConfig)
    teacher_models: dict[str, TeacherModelConfig] = field(
        default_factory=lambda: {"teacher_model": TeacherModelConfig()})
    """One teacher, verl's `teacher_model` entry (verl can route rows to several teachers by teacher_key; minirl
    serves one and refuses more)."""


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
    distillation: DistillationConfig = field(default_factory=DistillationConfig)


# ----------------------------------------------------------------------------------------------
# Keys: minirl's, deprecated spellings, and verl keys that have no effect here
# ----------------------------------------------------------------------------------------------

# Old spelling -> verl 0.9.1's key (the value is moved there, with a notice).
ALIASES = {
    "trainer.seed": "data.seed",
    f"{ACTOR}.grad_clip": f"{ACTOR}.optim.clip_grad",
    "critic.grad_clip": "critic.optim.clip_grad",
    f"{ACTOR}.optim.warmup_style": f"{ACTOR}.optim.lr_scheduler_type",
    "critic.optim.warmup_style": "critic.optim.lr_scheduler_type",
}

# verl 0.9.1's main_ppo ignores the top-level legacy reward block: config/legacy_reward_impl.yaml keeps it as nulls and
# only experimental/fully_async_policy/fully_async_main.py calls reward_loop.py::migrate_legacy_reward_impl. A line
# that set them would train with default_compute_score in verl, so minirl refuses them and names the key to write.
LEGACY_REWARD_KEYS = {
    "reward_model.enable": "reward.reward_model.enable",
    "reward_model.model.path": "reward.reward_model.model_path",
    "custom_reward_function.path": "reward.custom_reward_function.path",
    "custom_reward_function.name": "reward.custom_reward_function.name",
    "reward_model.reward_manager": "reward.reward_manager.name",
    "reward_model.num_workers": "reward.num_workers",
    **{f"reward_model.reward_kwargs.{key}": f"reward.reward_kwargs.{key}" for key in (
        "max_resp_len", "overlong_buffer_cfg.enable", "overlong_buffer_cfg.len", "overlong_buffer_cfg.penalty_factor",
        "overlong_buffer_cfg.log")},
}
LEGACY_REWARD_GROUPS = ("reward_model.", "custom_reward_function.")


def legacy_reward_key_error(key: str) -> str:
    """The refusal for a top-level legacy reward key (`custom_reward_function.*`, `reward_model.*`)."""
    new = LEGACY_REWARD_KEYS.get(key, "the same key under reward.* (verl/trainer/config/reward/reward.yaml)")
    return (f"{key}: verl 0.9.1's main_ppo ignores this legacy key (legacy_reward_impl.yaml keeps it null and verl "
            f"scores with default_compute_score instead); write {new}=... instead")


# Keys that verl 0.9.1 does not read where a script writes them: refused, naming the key verl does read.
# (verl's examples/sapo_trainer/run_qwen3_8b_fsdp.sh adds +policy_loss.tau_pos/tau_neg; the loss reads actor.tau_*,
# and verl's PolicyLossConfig has no such field.)
MISPLACED_KEYS = {f"{ACTOR}.policy_loss.tau_pos": f"{ACTOR}.tau_pos",
                  f"{ACTOR}.policy_loss.tau_neg": f"{ACTOR}.tau_neg"}

# verl keys that change what is trained (the loss, the data, the model, the schedule) and that minirl lacks: refused
# unless set to verl 0.9.1's default, where they change nothing (tests/parity checks each default against verl's
# generated config). A key inside one of these (override_config.attention_dropout=...) is refused whatever its value.
# key -> (verl's default, what the key does in verl)
_V1 = "verl's v1 custom samplers, refilling failed groups, and lending the trainer's GPUs to separate_async's rollout"
_TOOLS = "agent loops declared in a YAML file, and filtering prompts by their length with the tool schemas"
MINIRL_LACKS: dict[str, tuple[Any, str]] = {
    **{f"{role}.optim.optimizer": ("AdamW", "optimizers other than torch.optim.AdamW")
       for role in (ACTOR, "critic")},
    **{f"{role}.optim.optimizer_impl": ("torch.optim", "optimizer libraries other than torch.optim")
       for role in (ACTOR, "critic")},
    **{f"{role}.optim.override_optimizer_config": (None, "extra optimizer arguments") for role in (ACTOR, "critic")},
    **{f"{role}.optim.zero_indexed_step": (True, "a learning-rate schedule counted from step 1") for role in
       (ACTOR, "critic")},
    f"{ACTOR}.qat.enable": (False, "quantization-aware training"),
    **{f"{model}.{key}": (default, why) for model in ("actor_rollout_ref.model", "critic.model") for key, (default, why)
       in {"lora.type": ("lora", "adapter types other than LoRA (canonical_lora, DoRA, ...)"),
           "lora.dropout_position": ("pre", "dropout after the adapter (PEFT applies it to the adapter's input)"),
           "lora.lora_B_init_method": ("zero", "adapters whose B does not start at zero"),
           "lora.dtype": (None, "adapters in another dtype than the model's"),
           "override_config": ({}, "overriding the model's Hugging Face config (dropout, rope scaling, ...)"),
           "custom_chat_template": (None, "chat templates other than the tokenizer's"),
           "tokenizer_path": (None, "tokenizers from a directory other than model.path"),
           "hf_config_path": (None, "model configs from a directory other than model.path"),
           "external_lib": (None, "importing a library that registers custom model classes"),
           "trust_remote_code": (False, "running a model repository's own Python code"),
           "mtp.enable": (False, "multi-token prediction heads")}.items()},
    "critic.loss_scale_factor": (None, "the critic's own seq-mean-token-sum-norm constant"),
    "algorithm.use_pf_ppo": (False, "preference-feedback PPO's reweighted resampling of each batch "
                                    "(core_algos.py::compute_pf_ppo_reweight_data)"),
    "trainer.v1.separate_async.hybrid_rollout.enable_switch": (False, _V1),
    "trainer.v1.sampler.sync_refill_failed_groups": (False, _V1),
    "trainer.v1.sampler.custom_sampler.path": (None, _V1),
    "trainer.v1.sampler.sampler_kwargs": ({}, _V1),
    "actor_rollout_ref.rollout.agent.agent_loop_config_path": (None, _TOOLS),
    "data.tool_config_path": (None, _TOOLS),
    "data.function_tool_path": (None, _TOOLS),
    "actor_rollout_ref.rollout.ignore_eos": (False, "generating past the end-of-sequence token"),
    "actor_rollout_ref.rollout.logprobs_mode": ("processed_logprobs", "returning the rollout's raw log-probs "
                                                "(before temperature)"),
    "actor_rollout_ref.rollout.over_sample_rate": (0, "sampling extra responses and aborting the slowest"),
    "actor_rollout_ref.rollout.response_length": (None, "a rollout length other than data.max_response_length "
                                                        "(set that key instead)"),
    "actor_rollout_ref.rollout.prompt_length": (None, "a prompt length other than data.max_prompt_length (set that "
                                                      "key instead)"),
    "data.apply_chat_template_kwargs": ({}, "extra chat-template arguments (e.g. enable_thinking)"),
    "data.custom_cls.path": (None, "a custom dataset class"),
    "data.prompt_key": ("prompt", "reading the prompt from a column other than `prompt`"),
    "data.reward_fn_key": ("data_source", "choosing the scoring rule by a column other than `data_source`"),
    "data.tokenizer": (None, "a tokenizer other than the model's"),
    "data.validation_shuffle": (False, "shuffling the validation set (with val_max_samples, another subset)"),
    "reward.reward_manager.source": ("register", "loading a reward manager class from a file"),
    "reward.reward_manager.module.path": (None, "loading a reward manager class from a file"),
    "reward.sandbox_fusion.url": (None, "code-execution rewards in a sandbox"),
    "sandbox_fusion.url": (None, "code-execution rewards in a sandbox"),
    "trainer.resume_from_path": (None, "resuming from a chosen checkpoint (resume_mode=resume_path)"),
    **{f"skip.{name}.enable": (False, "replaying rollouts dumped by an earlier run")
       for name in ("rollout", "rollout_tq", "async_rollout")},
}


def lacks_refusal(key: str, value: str) -> str | None:
    """The refusal for a verl key of MINIRL_LACKS set to something other than verl's default, else None."""
    for lacked, (default, why) in MINIRL_LACKS.items():
        if key.startswith(lacked + "."):
            return f"{key}={value}: minirl lacks {why} (verl 0.9.1's {lacked}). Remove the key."
        if key == lacked:
            try:
                parsed = OmegaConf.to_container(OmegaConf.from_dotlist([f"x={value}"]))["x"]
            except Exception:  # noqa: BLE001 (an unparsable value is not the default)
                parsed = value
            if parsed != default and not (default is None and parsed in ("", "null")):
                return (f"{key}={value}: minirl lacks {why}, so this run would not train as it does in verl 0.9.1. "
                        f"Remove the key, or set verl's default {key}={_yaml(default)}.")
            return None
    return None


def _yaml(value) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


# Why a verl key has no effect in minirl, by glob pattern (first match wins). None of them changes what is trained:
# those are in MINIRL_LACKS, and a test checks that no verl key falls through to the last line.
_SAME_MATHS = "a kernel, memory or speed optimisation (same maths)"
NO_EFFECT_REASONS = [
    ("*fsdp_config.*", "FSDP sharding, offload and dtypes: minirl keeps a full float32 copy per process (DDP)"),
    ("critic.fsdp.*", "FSDP sharding, offload and dtypes: minirl keeps a full float32 copy per process (DDP)"),
    ("*.use_remove_padding", "padding-free packing is a kernel optimisation; minirl pads (same maths)"),
    ("*ulysses_sequence_parallel_size", "sequence parallelism: minirl runs whole sequences per process"),
    ("actor_rollout_ref.rollout.calculate_log_probs", "minirl's rollout always returns its log-probs"),
    ("actor_rollout_ref.rollout.multi_turn.*", "multi-turn settings of verl's old SGLang rollout, which 0.9.1 no "
                                               "longer imports"),
    ("actor_rollout_ref.rollout.agent.*", "agent-loop workers: minirl's rollout runs in the trainer's process"),
    ("actor_rollout_ref.rollout.enable_rollout_routing_replay", "replaying mixture-of-experts routing: minirl's "
                                                                "models are dense"),
    ("actor_rollout_ref.rollout.*", "inference-engine setting (vLLM/SGLang): minirl's rollout is a KV-cached "
                                    "decode loop (its options: dtype, weight_sync_interval, top_k, top_p)"),
    ("*.ppo_micro_batch_size", "deprecated global micro-batch size: use ppo_micro_batch_size_per_gpu"),
    ("*.log_prob_micro_batch_size", "deprecated global micro-batch size: use log_prob_micro_batch_size_per_gpu"),
    ("*.forward_micro_batch_size", "deprecated global micro-batch size: use forward_micro_batch_size_per_gpu"),
    ("trainer.device", "accelerate picks the device"),
    ("trainer.logger", "minirl writes console, tensorboard and wandb; other loggers are skipped"),
    ("ray_kwargs.*", "minirl reads only ray_kwargs.ray_init.num_cpus (with trainer.use_ray)"),
    ("transfer_queue.*", "the v1 trainer's data transport; minirl passes batches in memory"),
    ("global_profiler.*", "profilers are not wired in minirl"),
    ("*.profiler.*", "profilers are not wired in minirl"),
    ("*checkpoint*", "minirl writes one checkpoint layout (see minirl/README.md)"),
    ("*ckpt*", "minirl keeps every checkpoint of a run, locally (see minirl/README.md)"),
    ("trainer.default_hdfs_dir", "minirl keeps every checkpoint of a run, locally (see minirl/README.md)"),
    ("*.model.lora.merge", "minirl's rollout always samples with the merged weights (verl's merge=true; false hands "
                           "vLLM the adapter: the same function)"),
    ("*.model.lora.a2a_experimental", "Megatron's expert-parallel all-to-all for adapters"),
    ("*.model.lora.freeze_*", "multimodal inputs: minirl's models and tasks are text-only"),
    ("*.model.mtp.*", "multi-token prediction settings: used only with mtp.enable (refused)"),
    ("*.qat.*", "quantization-aware training settings: used only with qat.enable (refused)"),
    ("distillation.teacher_models.teacher_model.inference.*", "the teacher's inference engine (vLLM/SGLang): minirl's "
                                                              "teacher is a forward pass in the trainer's process"),
    ("distillation.n_gpus_per_node", "the teacher's GPU pool: minirl's teacher runs in the trainer's process"),
    ("distillation.nnodes", "the teacher's GPU pool: minirl's teacher runs in the trainer's process"),
    ("distillation.teacher_models.teacher_model.num_replicas", "teacher server replicas: minirl's teacher runs in "
                                                               "the trainer's process"),
    ("distillation.teacher_models.teacher_model.key", "routing rows to one of several teachers: minirl serves one"),
    ("distillation.teacher_key", "routing rows to one of several teachers: minirl serves one"),
    ("trainer.v1.sync", "sync mode's settings: verl 0.9.1 declares none"),
    ("trainer.v1.*", "v1 trainer settings: used only in a v1 mode minirl refuses"),
    ("algorithm.pf_ppo.*", "used only with algorithm.use_pf_ppo (refused)"),
    ("reward.reward_model.*", "the reward model's serving engine: minirl runs the reward model in the trainer process"),
    ("*sandbox_fusion.*", "sandbox settings: used only with a sandbox url (refused)"),
    ("reward.reward_manager.module.*", "used only with reward_manager.module.path (refused)"),
    ("reward.num_workers", "reward workers: minirl scores in the trainer process"),
    ("skip.*", "rollout replay settings: used only with skip.*.enable (refused)"),
    ("data.custom_cls.*", "used only with data.custom_cls.path (refused)"),
    ("data.image_key", "multimodal inputs: minirl's models and tasks are text-only"),
    ("data.video_key", "multimodal inputs: minirl's models and tasks are text-only"),
    ("data.audio_key", "multimodal inputs: minirl's models and tasks are text-only"),
    ("data.image_patch_size", "multimodal inputs: minirl's models and tasks are text-only"),
    ("data.mm_processor_kwargs", "multimodal inputs: minirl's models and tasks are text-only"),
    ("data.return_multi_modal_inputs", "multimodal inputs: minirl's models and tasks are text-only"),
    ("*freeze_vision_tower", "multimodal inputs: minirl's models and tasks are text-only"),
    ("data.return_*", "what verl's dataset hands its rollout engine; minirl's loader returns ids and the chat"),
    ("data.val_batch_size", "deprecated in verl: validation runs as one batch, as in minirl"),
    ("data.trust_remote_code", "running a tokenizer repository's own code: minirl never does"),
    ("*num_workers", "parallel workers: minirl loads data and scores in the trainer process"),
    ("data.filter_overlong_prompts_workers", "parallel workers: minirl loads data and scores in the trainer process"),
    ("*.use_shm", "loading speed"),
    ("*.use_fused_kernels", _SAME_MATHS),
    ("*.fused_kernel_options.*", _SAME_MATHS),
    ("*.use_liger", _SAME_MATHS),
    ("*.use_torch_compile", _SAME_MATHS),
    ("*.entropy_from_logits_*", _SAME_MATHS),
    ("*.pad_to_length", _SAME_MATHS),
    ("*.tiled_mlp.*", _SAME_MATHS),
    ("*.enable_activation_offload", _SAME_MATHS),
    ("*.use_prefix_grouper", _SAME_MATHS),
    ("*.strategy", "the training backend (fsdp, megatron, ...): minirl uses accelerate's DDP"),
    ("*.rollout_n", "verl's internal copy of rollout.n"),
    ("*.optim.total_training_steps", "verl fills it from trainer.total_training_steps, as minirl does"),
    ("actor_rollout_ref.actor.calculate_entropy", "minirl always computes the entropy metric"),
    ("actor_rollout_ref.nccl_timeout", "distributed timeouts: minirl's processes use torch.distributed's"),
    ("trainer.esi_redundant_time", "elastic-training timing on Ascend NPUs"),
    ("trainer.ray_wait_register_center_timeout", "Ray start-up timeout"),
    ("trainer.log_val_generations", "logging sample generations to the tracker"),
    ("trainer.rollout_data_dir", "dumping generations to files"),
    ("trainer.validation_data_dir", "dumping generations to files"),
    ("*", "a verl 0.9.1 feature minirl does not implement"),
]


def _all_keys(node, prefix: str = "") -> list[str]:
    keys = []
    for key, value in node.items_ex(resolve=False) if OmegaConf.is_config(node) else node.items():
        path = f"{prefix}{key}"
        keys.append(path)
        if OmegaConf.is_dict(value):
            keys += _all_keys(value, path + ".")
    return keys


@cache
def verl_keys() -> frozenset[str]:
    """Every key of verl 0.9.1's generated PPO config (minirl/verl_keys.txt)."""
    lines = (Path(__file__).with_name("verl_keys.txt")).read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def _is_verl_key(key: str) -> bool:
    """A verl key, or a key inside one of verl's free-form dicts (engine_kwargs, ray_init, ...)."""
    keys = verl_keys()
    parts = key.split(".")
    return any(".".join(parts[:i]) in keys for i in range(len(parts), 0, -1))


def _is_verl_group(prefix: str) -> bool:
    return any(key.startswith(prefix + ".") for key in verl_keys())


def no_effect_reason(key: str) -> str:
    return next(reason for pattern, reason in NO_EFFECT_REASONS if fnmatch.fnmatch(key, pattern))


@dataclass
class ParsedOverrides:
    """The overrides split by what minirl does with them."""

    applied: list[str] = field(default_factory=list)
    """key=value lines minirl applies (aliases already renamed)."""
    no_effect: dict[str, str] = field(default_factory=dict)
    """verl keys accepted without effect -> why."""
    notices: list[str] = field(default_factory=list)
    """Deprecation notices (an alias was used)."""


def parse_overrides(overrides: list[str] | None) -> ParsedOverrides:
    """Sort verl-style `key=value` overrides into applied ones, aliases and verl keys without effect.

    Hydra's `+key=value` (add a key) and `++key=value` (add or override) are read like `key=value`.

    Raises:
        ValueError: an override that is not key=value, or a key neither minirl nor verl 0.9.1 has
            (the message names the nearest valid key).
    """
    base = OmegaConf.structured(Config)
    minirl_keys = _all_keys(base)
    parsed = ParsedOverrides()
    for override in overrides or []:
        if "=" not in override:
            raise ValueError(f"override {override!r} is not key=value, e.g. algorithm.adv_estimator=grpo")
        key, value = override.split("=", 1)
        adds = key.startswith("+")  # Hydra's +key adds a key to an existing group (e.g. +ray_kwargs.ray_init.num_gpus)
        key = key.lstrip("+")
        if key.startswith(LEGACY_REWARD_GROUPS):
            raise ValueError(legacy_reward_key_error(key))
        if key in MISPLACED_KEYS:
            raise ValueError(f"{key}: verl 0.9.1 does not read this key (its SAPO loss reads {MISPLACED_KEYS[key]}, "
                             f"core_algos.py::compute_policy_loss_sapo); write {MISPLACED_KEYS[key]}={value}")
        if key in ALIASES:
            parsed.notices.append(f"{key} is deprecated in verl 0.9.1 (or not a verl key): using {ALIASES[key]}")
            key = ALIASES[key]
        if key.startswith("distillation.teacher_models.") and key.split(".")[2] != "teacher_model":
            raise ValueError(f"{key}: minirl serves one teacher, distillation.teacher_models.teacher_model (verl 0.9.1 "
                             "routes rows to several by distillation.teacher_key); set its model_path instead")
        if key in minirl_keys:
            if key == "trainer.logger":
                value = _check_loggers(value, parsed)
            parsed.applied.append(f"{key}={value}")
        elif _is_verl_key(key) or (adds and _is_verl_group(key.rsplit(".", 1)[0])):
            refusal = lacks_refusal(key, value)
            if refusal:
                raise ValueError(refusal)
            parsed.no_effect[key] = no_effect_reason(key) if key not in MINIRL_LACKS else \
                f"verl's default, the only value minirl implements (it lacks {MINIRL_LACKS[key][1]})"
        else:
            close = difflib.get_close_matches(key, minirl_keys + sorted(verl_keys()), n=1, cutoff=0.5)
            hint = f" Did you mean {close[0]}?" if close else ""
            raise ValueError(f"unknown config key {key!r}.{hint} See minirl/config.py for every key.")
    return parsed


REWARD_MANAGERS = ("naive", "dapo", "gdpo")  # verl 0.9.1's reward loop also has rate_limited and remote

SUPPORTED_LOGGERS = ("console", "tensorboard", "wandb")
# verl 0.9.1's verl/utils/tracking.py::Tracking.supported_backend
VERL_LOGGERS = ("wandb", "mlflow", "swanlab", "vemlp_wandb", "tensorboard", "console", "clearml", "trackio", "file",
                "rl_insight")


def _check_loggers(value: str, parsed: ParsedOverrides) -> str:
    """Check a trainer.logger value and return it as a list: verl also takes one name (`trainer.logger=console`,
    as its quickstart writes; verl/utils/tracking.py::Tracking wraps a string in a list)."""
    loggers = OmegaConf.from_dotlist([f"x={value}"]).x
    loggers = [loggers] if isinstance(loggers, str) else list(loggers or [])
    unknown = [name for name in loggers if name not in VERL_LOGGERS]
    if unknown:
        raise ValueError(f"trainer.logger: {unknown} is not a logger verl knows ({', '.join(VERL_LOGGERS)}); minirl "
                         f"writes {', '.join(SUPPORTED_LOGGERS)}.")
    skipped = [name for name in loggers if name not in SUPPORTED_LOGGERS]
    if skipped:
        parsed.no_effect[f"trainer.logger={skipped}"] = no_effect_reason("trainer.logger")
    return "[" + ",".join(loggers) + "]"


def load_config(overrides: list[str] | None = None, announce: bool = True) -> Config:
    """Build the config from the defaults and verl-style `key=value` overrides, then validate it.

    Args:
        overrides: e.g. ["algorithm.adv_estimator=gae", "data.train_batch_size=64"].
        announce: print the notices (deprecated spellings, verl keys without effect) to stderr, once
            (by process 0 of a multi-process launch).
    Raises:
        ValueError: for an unknown key (suggesting the nearest valid one), a value of the wrong
            type, or a combination that cannot train (see `validate_config`).
    """
    parsed = parse_overrides(overrides)
    base = OmegaConf.structured(Config)
    try:
        merged = OmegaConf.merge(base, OmegaConf.from_dotlist(parsed.applied))
        merged.trainer.logger = [name for name in merged.trainer.logger if name in SUPPORTED_LOGGERS]
        config = OmegaConf.to_object(merged)
    except (ValidationError, ConfigKeyError, InterpolationResolutionError) as error:
        raise ValueError(f"bad config value: {error.msg}") from None
    validate_config(config)
    actor = config.actor_rollout_ref.actor
    if actor.policy_loss.loss_mode == "sapo" and actor.loss_agg_mode != "seq-mean-token-mean":
        parsed.notices.append(f"policy_loss.loss_mode=sapo aggregates its policy loss with seq-mean-token-mean, as "
                              f"verl 0.9.1 does, whatever loss_agg_mode says ({actor.loss_agg_mode}, which still "
                              "applies to the entropy and KL losses)")
    loss = config.distillation.distillation_loss
    if config.distillation.enabled and loss.use_policy_gradient and loss.loss_mode == "forward_kl_topk":
        parsed.notices.append("forward_kl_topk with use_policy_gradient=true (verl warns too): the update then uses "
                              "only the sampled token's log-prob, so the teacher's top-k distribution is mostly unused")
    if announce and os.environ.get("RANK", "0") == "0":
        for notice in parsed.notices:
            print(f"minirl config: {notice}", file=sys.stderr)
        if parsed.no_effect:
            lines = "".join(f"\n  {key}: {why}" for key, why in parsed.no_effect.items())
            print(f"minirl config: accepted, no effect in minirl:{lines}", file=sys.stderr)
    return config


def validate_config(config: Config) -> None:
    """Reject settings that cannot train, with a message that says what to change."""
    algo, actor = config.algorithm, config.actor_rollout_ref.actor
    rollout, data, trainer = config.actor_rollout_ref.rollout, config.data, config.trainer
    problems = []

    def choice(name, value, choices):
        if value not in choices:
            problems.append(f"{name}={value!r} is not one of {', '.join(map(str, choices))}")

    if algo.adv_estimator not in ADV_ESTIMATOR_REGISTRY:
        problems.append(f"algorithm.adv_estimator={algo.adv_estimator!r} is not one of "
                        f"{', '.join(sorted(ADV_ESTIMATOR_REGISTRY))}; to add your own, decorate it with "
                        "@register_adv_est(name) from minirl.advantage in the process that calls train()")
    choice(f"{ACTOR}.loss_agg_mode", actor.loss_agg_mode, LOSS_AGG_MODES)
    choice("critic.loss_agg_mode", config.critic.loss_agg_mode, LOSS_AGG_MODES)
    choice(f"{ACTOR}.kl_loss_type", actor.kl_loss_type, KL_PENALTY_CHOICES)
    choice("algorithm.kl_penalty", algo.kl_penalty, KL_PENALTY_CHOICES)
    choice("algorithm.kl_ctrl.type", algo.kl_ctrl.type, ("fixed", "adaptive"))
    choice("trainer.resume_mode", trainer.resume_mode, ("auto", "disable"))
    choice("data.truncation", data.truncation, ("error", "left", "right", "middle"))
    for name, optim in ((f"{ACTOR}.optim", actor.optim), ("critic.optim", config.critic.optim)):
        choice(f"{name}.lr_scheduler_type", optim.lr_scheduler_type, ("constant", "cosine"))
        if optim.clip_grad <= 0:
            problems.append(f"{name}.clip_grad must be > 0 (got {optim.clip_grad}); a negative norm would reverse "
                            "the update")
        if not 0 <= optim.min_lr_ratio <= 1:
            problems.append(f"{name}.min_lr_ratio must be in [0, 1] (got {optim.min_lr_ratio})")
    if algo.rollout_correction.rollout_is is not None:
        choice("algorithm.rollout_correction.rollout_is", algo.rollout_correction.rollout_is, ROLLOUT_IS_LEVELS)
    choice("algorithm.rollout_correction.loss_type", algo.rollout_correction.loss_type, BYPASS_LOSS_TYPES)
    choice("actor_rollout_ref.rollout.dtype", rollout.dtype, ROLLOUT_DTYPES)
    for option in (algo.rollout_correction.rollout_rs or "").split(","):
        if option.strip():
            choice("algorithm.rollout_correction.rollout_rs", option.strip(), ROLLOUT_RS_OPTIONS)
    for name, files in (("data.train_files", data.train_files), ("data.val_files", data.val_files)):
        is_list = isinstance(files, list) and files and all(isinstance(f, str) for f in files)
        if not (isinstance(files, str) or is_list):
            problems.append(f"{name} must be a file path or a non-empty list of paths (got {files!r})")
    choice("trainer.v1.trainer_mode", trainer.v1.trainer_mode, ("sync", "colocate_async", "separate_async"))
    multi_turn = rollout.multi_turn
    choice("actor_rollout_ref.rollout.multi_turn.format", multi_turn.format, ("hermes",))
    choice("actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side", multi_turn.tool_response_truncate_side,
           ("left", "right", "middle"))
    for key in ("max_assistant_turns", "max_user_turns", "max_parallel_calls", "max_tool_response_length"):
        value = getattr(multi_turn, key)
        if value is not None and value < 1:
            bound = ">= 1 or null" if "turns" in key else ">= 1"
            problems.append(f"actor_rollout_ref.rollout.multi_turn.{key} must be {bound} (got {value})")
    tools_asked = multi_turn.tool_config_path or multi_turn.function_tool_path or \
        rollout.agent.default_agent_loop != "single_turn_agent"
    if tools_asked and not trainer.use_v1:
        problems.append("agent loops and tools run on the v1 trainer (verl's default): set trainer.use_v1=true")
    if trainer.v1.trainer_mode == "separate_async":
        sync_step = trainer.v1.separate_async.parameter_sync_step
        if sync_step < 1:
            problems.append(f"trainer.v1.separate_async.parameter_sync_step must be >= 1 (got {sync_step})")
        elif data.train_batch_size != sync_step * actor.ppo_mini_batch_size:
            problems.append(f"separate_async trains each local update on one mini-batch, so data.train_batch_size "
                            f"({data.train_batch_size}) must equal trainer.v1.separate_async.parameter_sync_step "
                            f"({sync_step}) x {ACTOR}.ppo_mini_batch_size ({actor.ppo_mini_batch_size}), as verl "
                            f"asserts: e.g. {ACTOR}.ppo_mini_batch_size={data.train_batch_size // sync_step}")
        if trainer.use_ray:
            problems.append("trainer.v1.trainer_mode=separate_async starts its rollout process itself; it does not run "
                            "on Ray worker groups (set trainer.use_ray=false)")
        if trainer.v1.separate_async.num_warmup_batches < 0:
            problems.append("trainer.v1.separate_async.num_warmup_batches must be >= 0 (got "
                            f"{trainer.v1.separate_async.num_warmup_batches})")
    choice("trainer.v1.sampler.max_off_policy_strategy", trainer.v1.sampler.max_off_policy_strategy, ("drop", "wait"))
    threshold = trainer.v1.sampler.max_off_policy_threshold
    if threshold is not None and threshold < 1:
        problems.append(f"trainer.v1.sampler.max_off_policy_threshold must be a positive integer or null (got "
                        f"{threshold})")
    if trainer.v1.colocate_async.num_warmup_batches < 0:
        problems.append("trainer.v1.colocate_async.num_warmup_batches must be >= 0 (got "
                        f"{trainer.v1.colocate_async.num_warmup_batches})")
    if not trainer.use_v1 and trainer.v1 != V1Config():
        problems.append("trainer.v1.* is read only by the v1 trainer: set trainer.use_v1=true (verl's legacy trainer "
                        "ignores these keys)")
    if trainer.use_v1 and algo.adv_estimator == "remax":
        problems.append("algorithm.adv_estimator=remax needs a greedy answer per prompt (reward_baselines), which only "
                        "verl 0.9.1's legacy trainer requests: set trainer.use_v1=false for ReMax")
    if trainer.use_v1 and algo.filter_groups.enable and algo.filter_groups.max_num_gen_batches > 0:
        problems.append("algorithm.filter_groups.max_num_gen_batches is read only by the legacy trainer (verl 0.9.1's "
                        "v1 trainer warns and ignores it): drop it, and bound DAPO with max_inflight_gen_batches")
    if not trainer.use_v1 and algo.filter_groups.max_inflight_gen_batches != 1:
        problems.append("algorithm.filter_groups.max_inflight_gen_batches is read only by the v1 trainer: set "
                        "trainer.use_v1=true, or bound the legacy trainer's DAPO with max_num_gen_batches")
    if algo.filter_groups.max_inflight_gen_batches < 1:
        problems.append("algorithm.filter_groups.max_inflight_gen_batches must be >= 1 (got "
                        f"{algo.filter_groups.max_inflight_gen_batches}): it caps DAPO's prompts in flight, in "
                        "train batches")
    if algo.adv_estimator in ("grpo", "rloo", "reinforce_plus_plus_baseline") and rollout.n < 2:
        problems.append(f"{algo.adv_estimator} compares the responses to one prompt, so it needs "
                        f"actor_rollout_ref.rollout.n >= 2 (got {rollout.n})")
    if rollout.n < 1:
        problems.append(f"actor_rollout_ref.rollout.n must be >= 1 (got {rollout.n})")
    use_critic = config.critic.enable if config.critic.enable is not None else algo.adv_estimator == "gae"
    if algo.adv_estimator == "gae" and not use_critic:
        problems.append("algorithm.adv_estimator=gae needs a critic: set critic.enable=true (or leave it unset)")
    positive = [("data.train_batch_size", data.train_batch_size),
                (f"{ACTOR}.ppo_mini_batch_size", actor.ppo_mini_batch_size),
                (f"{ACTOR}.ppo_epochs", actor.ppo_epochs),
                ("critic.ppo_mini_batch_size", config.critic.ppo_mini_batch_size),
                ("critic.ppo_epochs", config.critic.ppo_epochs), ("data.max_response_length", data.max_response_length),
                ("data.max_prompt_length", data.max_prompt_length), ("trainer.total_epochs", trainer.total_epochs),
                ("actor_rollout_ref.rollout.val_kwargs.n", rollout.val_kwargs.n),
                ("actor_rollout_ref.rollout.weight_sync_interval", rollout.weight_sync_interval)]
    positive += [(name, value) for name, value in (
        ("trainer.total_training_steps", trainer.total_training_steps),
        (f"{ACTOR}.ppo_micro_batch_size_per_gpu", actor.ppo_micro_batch_size_per_gpu),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", rollout.log_prob_micro_batch_size_per_gpu),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
         config.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu),
        ("critic.ppo_micro_batch_size_per_gpu", config.critic.ppo_micro_batch_size_per_gpu),
        ("critic.forward_micro_batch_size_per_gpu", config.critic.forward_micro_batch_size_per_gpu),
        ("trainer.n_gpus_per_node", trainer.n_gpus_per_node)) if value is not None]
    for name, value in positive:
        if value < 1:
            problems.append(f"{name} must be >= 1 (got {value})")
    for name, mini in ((f"{ACTOR}.ppo_mini_batch_size", actor.ppo_mini_batch_size),
                       ("critic.ppo_mini_batch_size", config.critic.ppo_mini_batch_size)):
        if mini >= 1 and data.train_batch_size % mini:
            problems.append(f"{name}={mini} must divide data.train_batch_size={data.train_batch_size} "
                            "(both count prompts)")
    low, high = clip_range(actor)
    if low < 0:
        problems.append(f"{ACTOR}.clip_ratio_low must be >= 0 (got {low}); 1 or more removes the lower clip")
    if high < 0:
        problems.append(f"{ACTOR}.clip_ratio_high must be >= 0 (got {high})")
    problems += policy_loss_problems(config)
    problems += distillation_problems(config)
    problems += lora_problems(config)
    if algo.adv_estimator in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        if not actor.calculate_sum_pi_squared:
            problems.append(f"algorithm.adv_estimator={algo.adv_estimator} needs sum_pi_squared from the actor: set "
                            f"{ACTOR}.calculate_sum_pi_squared=true")
        if algo.rollout_correction.bypass_mode:
            problems.append(f"algorithm.adv_estimator={algo.adv_estimator} needs the actor's old-log-prob pass, which "
                            "algorithm.rollout_correction.bypass_mode=true skips (verl fails there too)")
    if algo.adv_estimator == "gdpo" and not algo.gdpo_reward_keys:
        problems.append("algorithm.adv_estimator=gdpo needs +algorithm.gdpo_reward_keys=[...], the keys of the dict "
                        "your reward function returns (e.g. [acc,format])")
    if algo.gdpo_reward_weights is not None and len(algo.gdpo_reward_weights) != len(algo.gdpo_reward_keys or []):
        problems.append(f"algorithm.gdpo_reward_weights has {len(algo.gdpo_reward_weights)} weights for "
                        f"{len(algo.gdpo_reward_keys or [])} gdpo_reward_keys: give one per key")
    if actor.clip_ratio_c <= 1:
        problems.append(f"{ACTOR}.clip_ratio_c must be > 1 (got {actor.clip_ratio_c})")
    if actor.kl_loss_coef < 0 or algo.kl_ctrl.kl_coef < 0:
        problems.append(f"KL coefficients must be >= 0 (got {ACTOR}.kl_loss_coef={actor.kl_loss_coef}, "
                        f"algorithm.kl_ctrl.kl_coef={algo.kl_ctrl.kl_coef}): a negative one rewards drifting away")
    for name, value in (("algorithm.gamma", algo.gamma), ("algorithm.lam", algo.lam)):
        if not 0 <= value <= 1:
            problems.append(f"{name} must be in [0, 1] (got {value})")
    if rollout.temperature <= 0:
        problems.append(f"actor_rollout_ref.rollout.temperature must be > 0 (got {rollout.temperature}): the actor "
                        "divides its logits by it to recompute the log-probs, as verl does. Greedy decoding is for "
                        "validation: rollout.val_kwargs.do_sample=false")
    val = rollout.val_kwargs
    if val.n > 1 and not (val.do_sample and val.temperature > 0):
        problems.append(f"actor_rollout_ref.rollout.val_kwargs.n={val.n} with greedy decoding (do_sample="
                        f"{val.do_sample}, temperature={val.temperature}) gives {val.n} identical answers per prompt, "
                        "so best@k equals mean@k: set val_kwargs.do_sample=true and val_kwargs.temperature=1.0 "
                        "(verl's default temperature is 0), or val_kwargs.n=1")
    if not 0 < rollout.top_p <= 1:
        problems.append(f"actor_rollout_ref.rollout.top_p must be in (0, 1] (got {rollout.top_p})")
    if actor.optim.lr <= 0:
        problems.append(f"{ACTOR}.optim.lr must be > 0 (got {actor.optim.lr})")
    if data.val_max_samples == 0 and (trainer.test_freq > 0 or trainer.val_before_train):
        problems.append("data.val_max_samples=0 is ambiguous (verl's loader reads it as 'no limit'): set -1 for all "
                        "validation prompts or a positive number, or turn validation off with trainer.test_freq=-1 "
                        "trainer.val_before_train=false")
    if not rollout.do_sample and algo.adv_estimator in ("grpo", "rloo", "reinforce_plus_plus_baseline"):
        problems.append(f"actor_rollout_ref.rollout.do_sample=false makes the {rollout.n} responses to a prompt "
                        f"identical, so {algo.adv_estimator}'s advantages are all 0 and nothing is learned: set "
                        "do_sample=true (greedy decoding is for validation: rollout.val_kwargs.do_sample=false)")
    manager, kwargs = config.reward.reward_manager, config.reward.reward_kwargs
    choice("reward.reward_manager.name", manager.name, REWARD_MANAGERS)
    overlong = kwargs.overlong_buffer_cfg
    if overlong.enable:
        if overlong.penalty_factor <= 0:
            problems.append("reward.reward_kwargs.overlong_buffer_cfg.enable=true needs overlong_buffer_cfg."
                            f"penalty_factor > 0 (got {overlong.penalty_factor}); DAPO uses 1.0")
        if manager.name != "dapo":
            problems.append("reward.reward_kwargs.overlong_buffer_cfg.enable=true acts only in DAPO's reward manager: "
                            "also set reward.reward_manager.name=dapo (verl would silently ignore it)")
        if kwargs.max_resp_len is None:
            problems.append("reward.reward_kwargs.overlong_buffer_cfg.enable=true needs reward.reward_kwargs."
                            f"max_resp_len, normally data.max_response_length ({data.max_response_length})")
        elif not 0 < overlong.len <= kwargs.max_resp_len:
            problems.append(f"reward.reward_kwargs.overlong_buffer_cfg.len must be in (0, max_resp_len="
                            f"{kwargs.max_resp_len}] (got {overlong.len}); to switch the penalty off set "
                            "overlong_buffer_cfg.enable=false")
    if manager.name != "naive" and config.reward.reward_model.enable and not config.reward.custom_reward_function.path:
        problems.append(f"reward.reward_manager.name={manager.name} wraps rule scores, but reward.reward_model."
                        "enable=true scores with the reward model alone: disable one of them")
    if config.reward.reward_model.enable and not config.reward.reward_model.model_path:
        problems.append("reward.reward_model.enable=true needs reward.reward_model.model_path (a directory saved by "
                        "`python -m minirl train-rm`)")
    if problems:
        raise ValueError("invalid config:\n  - " + "\n  - ".join(problems))


def policy_loss_problems(config: Config) -> list[str]:
    """What stops `actor.policy_loss` from training as asked (a name minirl lacks, a loss that needs a setting,
    bypass mode replacing the loss)."""
    actor = config.actor_rollout_ref.actor
    policy, key = actor.policy_loss, f"{ACTOR}.policy_loss"
    if policy.loss_mode == "bypass_mode":
        return [f"{key}.loss_mode=bypass_mode is set by algorithm.rollout_correction.bypass_mode=true (which also "
                "makes the rollout's log-probs pi_old): set that instead"]
    if policy.loss_mode not in POLICY_LOSS_REGISTRY:
        return [f"{key}.loss_mode={policy.loss_mode!r} is not one of {', '.join(sorted(POLICY_LOSS_REGISTRY))}; to "
                "add your own, decorate it with @register_policy_loss(name) from minirl.policy_loss in the process "
                "that calls train()"]
    problems = []
    if config.algorithm.rollout_correction.bypass_mode and policy.loss_mode != "vanilla":
        problems.append(f"algorithm.rollout_correction.bypass_mode=true replaces the policy loss with bypass_mode "
                        f"(PPO's clip or REINFORCE, rollout_correction.loss_type), so {key}.loss_mode="
                        f"{policy.loss_mode} would not train (verl 0.9.1 overwrites it silently in apply_bypass_mode):"
                        " use one or the other")
    if policy.loss_mode == "dro" and not (policy.dro_beta or 0) > 0:
        problems.append(f"{key}.loss_mode=dro needs a positive {key}.dro_beta (got {policy.dro_beta}), e.g. 0.1")
    for name in ("clip_cov_ratio", "kl_cov_ratio"):
        if getattr(policy, name) <= 0:
            problems.append(f"{key}.{name} must be > 0 (got {getattr(policy, name)})")
    if actor.tau_pos <= 0 or actor.tau_neg <= 0:
        problems.append(f"{ACTOR}.tau_pos and tau_neg must be > 0 (got {actor.tau_pos}, {actor.tau_neg}): SAPO's "
                        "gate divides by them")
    return problems


def distillation_problems(config: Config) -> list[str]:
    """What stops `distillation.*` from training as asked (checked whether or not it is enabled, as verl's
    DistillationLossConfig does)."""
    from minirl.distillation import DISTILLATION_LOSS_REGISTRY  # deferred: it imports the policy losses

    distillation, key = config.distillation, "distillation.distillation_loss"
    loss = distillation.distillation_loss
    if loss.loss_mode not in DISTILLATION_LOSS_REGISTRY:
        return [f"{key}.loss_mode={loss.loss_mode!r} is not one of {', '.join(DISTILLATION_LOSS_REGISTRY)}"]
    problems = []
    if loss.loss_mode in ("k1", "kl") and not loss.use_policy_gradient:  # verl's DistillationLossConfig refuses it
        problems.append(f"{key}.loss_mode={loss.loss_mode} back-propagated directly has a gradient that does not "
                        f"depend on the teacher (its expectation is 0): set {key}.use_policy_gradient=true (k1 as a "
                        "per-token reward, Thinking Machines' recipe) or use loss_mode=k3 or forward_kl_topk")
    if loss.policy_loss_mode != "vanilla":
        problems.append(f"{key}.policy_loss_mode={loss.policy_loss_mode!r}: verl 0.9.1 implements only vanilla")
    if loss.loss_mode == "forward_kl_topk" and not (loss.topk or 0) >= 1:
        problems.append(f"{key}.loss_mode=forward_kl_topk needs {key}.topk >= 1 (got {loss.topk}); verl's default "
                        "is 32")
    if loss.loss_max_clamp is not None and loss.loss_max_clamp <= 0:
        problems.append(f"{key}.loss_max_clamp must be > 0 or null (got {loss.loss_max_clamp})")
    if distillation.enabled and not distillation.teacher_models["teacher_model"].model_path:
        problems.append("distillation.enabled=true needs distillation.teacher_models.teacher_model.model_path, a model "
                        "with the student's tokenizer (the book's: the path `python -m minirl warm-start teacher` "
                        "prints)")
    return problems


def lora_problems(config: Config) -> list[str]:
    """What stops a LoRA setting from training as asked (the actor's; a LoRA critic is refused, as verl fails on it)."""
    critic = config.critic.model
    problems = []
    if critic.lora_rank != 0 or critic.lora.rank != 0 or critic.lora_adapter_path or critic.lora.adapter_path:
        problems.append("critic.model.lora_rank / lora.*: verl 0.9.1 cannot train a LoRA critic (its FSDP engine wraps "
                        "the value model, a token classifier, with PEFT's CAUSAL_LM task, which PEFT refuses for it: "
                        "no prepare_inputs_for_generation); train the critic in full, or use a critic-free estimator "
                        "(grpo, rloo, ...) with a LoRA actor")
    for key, model in (("actor_rollout_ref.model", config.actor_rollout_ref.model),):
        if model.lora_rank < 0 or model.lora.rank < 0:
            problems.append(f"{key}.lora_rank and {key}.lora.rank must be >= 0 (0 = full fine-tuning)")
        if model.lora_rank > 0 and model.lora.rank > 0:
            problems.append(f"{key}.lora_rank ({model.lora_rank}) and {key}.lora.rank ({model.lora.rank}) are both "
                            "set: they are verl's FSDP and Megatron spellings of one adapter; keep one")
        if model.lora_adapter_path and model.lora_rank <= 0:
            problems.append(f"{key}.lora_adapter_path is read only with {key}.lora_rank > 0 (verl 0.9.1's FSDP engine "
                            "ignores it otherwise): set lora_rank too (the adapter keeps its own rank)")
        if model.lora.adapter_path and model.lora.rank <= 0:
            problems.append(f"{key}.lora.adapter_path is read only with {key}.lora.rank > 0: set lora.rank too")
        if model.lora.lora_A_init_method not in ("xavier", "kaiming"):
            problems.append(f"{key}.lora.lora_A_init_method={model.lora.lora_A_init_method!r} is not one of xavier, "
                            "kaiming")
        if (model.lora_rank > 0 or model.lora.rank > 0) and config.trainer.use_ray:
            problems.append(f"{key}: LoRA with trainer.use_ray=true is not implemented in minirl's Ray workers; train "
                            "without Ray (the same maths)")
    return problems


def check_split_over_ranks(config: Config, ranks: int) -> None:
    """Raise if a step's responses, or a mini-batch's, do not split evenly over `ranks` data-parallel ranks.

    verl 0.9.1's legacy trainer splits a batch over its ranks without padding (`single_controller/base/decorator.py`
    via `_split_args_kwargs_data_proto`; `utils/tensordict_utils.py` asserts `len(td) % chunks == 0`), and
    `utils/config.py::validate_config` asserts `train_batch_size * n % n_gpus == 0` (without dynamic batch size);
    the v1 trainer pads an uneven step instead (`trainer/ppo/padding_utils.py`). Mini-batches are split the same
    way in both, so their size must divide too.
    """
    n = config.actor_rollout_ref.rollout.n
    responses = config.data.train_batch_size * n
    if responses % ranks:
        raise ValueError(f"data.train_batch_size * actor_rollout_ref.rollout.n = {responses} responses per step must "
                         f"be divisible by the number of processes or ranks ({ranks}): verl's legacy trainer splits "
                         "the batch over its ranks without padding. Change the batch size or rollout.n, or the "
                         "number of ranks.")
    actor, critic = config.actor_rollout_ref.actor, config.critic
    for name, prompts in (("actor_rollout_ref.actor.ppo_mini_batch_size", actor.ppo_mini_batch_size),
                          ("critic.ppo_mini_batch_size", critic.ppo_mini_batch_size)):
        if prompts * n % ranks:
            raise ValueError(f"{name} * rollout.n = {prompts * n} responses per mini-batch must be divisible by the "
                             f"number of processes or ranks ({ranks}), as in verl.")


def to_yaml(config: Config) -> str:
    """The full resolved config as YAML (written to the run directory; printed by `python -m minirl config`)."""
    return OmegaConf.to_yaml(OmegaConf.structured(config))


def load_dataclass(cls, overrides: list[str] | None):
    """An instance of the dataclass `cls` from `key=value` overrides (the train-rm and dpo commands).

    Raises:
        ValueError: an override that is not key=value, an unknown key (naming the nearest), or a bad value.
    """
    base = OmegaConf.structured(cls)
    keys = _all_keys(base)
    for override in overrides or []:
        if "=" not in override:
            raise ValueError(f"override {override!r} is not key=value, e.g. output_dir=runs/rm")
        key = override.split("=", 1)[0].lstrip("+")
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1, cutoff=0.5)
            hint = f" Did you mean {close[0]}?" if close else f" Known keys: {', '.join(keys)}."
            raise ValueError(f"unknown key {key!r}.{hint}")
    try:
        merged = OmegaConf.merge(base, OmegaConf.from_dotlist([o.lstrip("+") for o in overrides or []]))
        return OmegaConf.to_object(merged)
    except (ValidationError, ConfigKeyError, InterpolationResolutionError) as error:
        raise ValueError(f"bad value: {error.msg}") from None
