# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 14 · Distillation and LoRA: a teacher per token, and training in less memory
#
# | The five answers | |
# |---|---|
# | **Problem** | Two things every RL-for-LLMs user asks for after the core algorithms. *Distillation*: a small model should learn from a larger one, and a reward says only "right" or "wrong" once per answer; can a teacher's opinion of every token teach faster, and should the student learn on its own samples (on-policy) or on the teacher's (off-policy)? *LoRA*: full fine-tuning keeps a gradient and two optimizer moments for every weight; can RL train a small low-rank update instead, and what does that change? |
# | **Core formula** | On the student's own samples $y \sim q_\theta$, with $x_t = \log q_\theta(y_t) - \log p(y_t)$ against the teacher $p$, verl's default per-token loss is k3: $\ell_t = e^{-x_t} - 1 + x_t \ge 0$, averaged over the response mask like any loss. Its gradient, in expectation, is the gradient of the *forward* KL: $\mathbb{E}_{y\sim q}[\nabla_\theta \ell_t] = \nabla_\theta \mathrm{KL}(p\,\|\,q_\theta)$. With `use_policy_gradient`, $A_t = -\ell_t$ is a per-token advantage for PPO's loss instead (k1 then gives the reverse KL's gradient). LoRA freezes each weight $W$ and trains $W' = W + \frac{\alpha}{r} B A$, $A \in \mathbb{R}^{r\times d_{in}}$, $B \in \mathbb{R}^{d_{out}\times r}$, $B=0$ at the start: $r(d_{in}+d_{out})$ numbers instead of $d_{in} d_{out}$. |
# | **Beginner's view** | A driving instructor beside the student corrects every move as it happens, on the roads the student actually drives: that is on-policy distillation. Watching videos of the instructor driving is off-policy distillation: cheap and clear, but it never shows the student's own mistakes. A pass/fail exam at the end is the reward. LoRA is tuning a car by adding a few small adjustable parts instead of rebuilding the engine: less to pay for, and each part must be turned further. |
# | **verl source** | `verl/trainer/distillation/losses.py` (`distillation_ppo_loss`, `distillation_loss`, `compute_distillation_loss_reverse_kl_estimator`, `compute_forward_kl_topk`, `register_distillation_loss`), `verl/trainer/distillation/fsdp/losses.py::compute_forward_kl_topk`, the teacher servers in `verl/experimental/teacher_loop/teacher_model.py::TeacherModelManager` and `teacher_manager.py::AsyncTeacherLLMServerManager`, keys in `verl/trainer/config/distillation/distillation.yaml`; LoRA in `verl/workers/engine/fsdp/transformer_impl.py::FSDPEngine._build_lora_module`, the reference as the actor without its adapter (`ref_in_actor` in `verl/trainer/ppo/ray_trainer.py`). |
# | **Where next** | [Chapter 3 · RLHF](03_rlhf.ipynb): the KL estimators k1/k2/k3 this chapter reuses; [Chapter 4 · GRPO](04_grpo.ipynb): the baseline every run here is compared with; [Chapter 6 · DPO](06_dpo.ipynb): another way to learn without sampling rewards; [Lab D · The GRPO config](lab_d_grpo_config.ipynb): where these keys sit in a real launch script. Back to [the reading map](index.md). |
#
# Run time: printed at the end (9 training runs and 22 short SFT runs, two at a time). With `MINIRL_FAST=1`
# everything shrinks.

# %%
import json
import statistics
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import display

from minirl import data, distillation, lora, models, sft
from minirl.book.notebook import (
    band,
    compare_table,
    fast_mode,
    final_spread,
    print_run_time,
    run_grid,
    run_parallel,
    seeds,
    show_source,
    where_this_ran,
)
from minirl.kl import kl_penalty
from minirl.rewards import default_compute_score
from minirl.rollout import generate_sequences
from minirl.teacher import check_same_tokenizer

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch14"
STUDENT = sft.default_warm_start()  # the tiny task's warm start (Chapters 1-4): noisy demonstrations
TEACHER = sft.default_warm_start(sft.TEACHER_SFT)  # 5x larger, trained on correct demonstrations
TOKENIZER = models.load_tokenizer(STUDENT)
STUDENT_MODEL, TEACHER_MODEL = models.load_policy(STUDENT), models.load_policy(TEACHER)
TRAIN_ROWS = data.read_parquet(STUDENT / "data" / "train.parquet").to_list()
VAL_ROWS = data.read_parquet(STUDENT / "data" / "test.parquet").to_list()[: 32 if fast_mode() else 200]
VAL = "val-core/minirl/arithmetic/acc/mean@1"

# %% [markdown]
# ## 1. A student and a teacher
#
# The student is the tiny task's warm start (sums `a+b` with operands up to 30; its demonstrations were wrong 40%
# of the time). The teacher is a larger model of the same family: the same tokenizer and chat template (it must
# read the student's token ids), four layers instead of two, trained on the same questions with correct
# demonstrations (`minirl/sft.py::TEACHER_SFT`, built once by `python -m minirl warm-start teacher`).

# %%
for name, path, model in (("student", STUDENT, STUDENT_MODEL), ("teacher", TEACHER, TEACHER_MODEL)):
    summary = json.loads((path / "warm_start.json").read_text())
    print(f"{name}: {sum(p.numel() for p in model.parameters()):,} parameters, greedy accuracy "
          f"{summary['greedy_acc']:.3f}, sampled {summary['sampled_acc']:.3f} (held-out questions)")

# %% [markdown]
# ## 2. What the teacher says about one answer
#
# The student samples an answer; the teacher reads the same token ids and returns its log-probability of each
# token (`minirl/teacher.py::Teacher`, verl's teacher server with `prompt_logprobs`). Below, a sampled answer the
# student got wrong, token by token: the student's log-prob, the teacher's, and the k3 loss of the token.

# %%
def sample_answer(row, seed):
    prompts = data.encode_prompts(TOKENIZER, [row["prompt"]], 64)
    out = generate_sequences(STUDENT_MODEL, prompts["input_ids"], prompts["attention_mask"], TOKENIZER.eos_token_id,
                             TOKENIZER.pad_token_id, 20, generator=torch.Generator().manual_seed(seed))
    length = int(out["response_length"][0])
    args = (out["input_ids"], out["attention_mask"], out["position_ids"], 20)
    with torch.no_grad():
        student = models.compute_log_probs(STUDENT_MODEL, *args)[0][0, :length]
        teacher = models.compute_log_probs(TEACHER_MODEL, *args)[0][0, :length]
    text = TOKENIZER.decode(out["responses"][0, :length])
    score = default_compute_score(row["data_source"], text, row["reward_model"]["ground_truth"])
    return out["responses"][0, :length], student, teacher, score


for seed in range(50):  # the first seed whose sample is wrong
    row = VAL_ROWS[seed % len(VAL_ROWS)]
    ids, student_lp, teacher_lp, score = sample_answer(row, seed)
    if score == 0:
        break
k3 = kl_penalty(student_lp, teacher_lp, "k3")
print(f"prompt {row['prompt'][0]['content']!r}, ground truth {row['reward_model']['ground_truth']}, reward {score}")
print(f"{'token':>7s} {'log q (student)':>16s} {'log p (teacher)':>16s} {'k3':>7s}")
for token, s, t, k in zip(ids.tolist(), student_lp.tolist(), teacher_lp.tolist(), k3.tolist()):
    print(f"{TOKENIZER.decode([token])!r:>7s} {s:16.3f} {t:16.3f} {k:7.3f}")
print(f"\nGRPO learns one number from this answer (its reward, {score}); distillation learns {len(ids)}, one per "
      "token.")

# %% [markdown]
# The teacher agrees with the question's echo and the format, so their k3 is near 0; it disagrees sharply with the
# wrong digits, and the loss lands exactly there. A reward would say only that the whole answer was wrong, and only
# if another answer of the same group was right (GRPO's advantage is zero for a group that is all wrong or all
# right). That is the *signal density* argument: one scalar per answer against one teacher log-prob per token.
#
# ## 3. Which KL does each loss follow?
#
# Back-propagating a per-token estimator is not the same as following the KL it estimates (Chapter 3 met this for
# the KL loss). On a 6-token vocabulary we can take the expectation over the student's samples exactly:
# $\mathbb{E}_{y \sim q}[\nabla_\theta \ell(y)] = \sum_y q(y) \nabla_\theta \ell(y)$, with $q$ not differentiated
# (the sample is given), and compare it with the gradients of the two KLs.

# %%
torch.manual_seed(0)
theta = torch.randn(6, dtype=torch.float64, requires_grad=True)  # the student's logits
log_p = torch.log_softmax(torch.randn(6, dtype=torch.float64) * 2, 0)  # a fixed teacher


def gradient(loss_of_log_q):
    return torch.autograd.grad(loss_of_log_q(torch.log_softmax(theta, 0)), theta)[0]


def expected(per_token):
    """sum_y q(y) * d per_token(log q(y), log p(y)) / d theta: the mean gradient over the student's samples."""
    return gradient(lambda log_q: (log_q.exp().detach() * per_token(log_q, log_p)).sum())


reverse_kl = gradient(lambda log_q: (log_q.exp() * (log_q - log_p)).sum())  # KL(q || p)
forward_kl = gradient(lambda log_q: (log_p.exp() * (log_p - log_q)).sum())  # KL(p || q)
losses = {"k1, back-propagated": lambda lq, lp: kl_penalty(lq, lp, "k1"),
          "k2, back-propagated": lambda lq, lp: kl_penalty(lq, lp, "k2"),
          "k3, back-propagated (verl's default)": lambda lq, lp: kl_penalty(lq, lp, "k3"),
          "k1 as a reward (use_policy_gradient)": lambda lq, lp: (lq - lp).detach() * lq}  # -A log q, A = -k1
print(f"{'loss':38s} {'|grad|':>7s} {'max diff to grad KL(q||p)':>26s} {'max diff to grad KL(p||q)':>26s}")
for name, per_token in losses.items():
    g = expected(per_token)
    print(f"{name:38s} {g.norm():7.4f} {(g - reverse_kl).abs().max():26.2e} {(g - forward_kl).abs().max():26.2e}")

# %% [markdown]
# Exact to rounding: k1 back-propagated has a zero mean gradient (the score function's mean is zero), which is why
# verl refuses `loss_mode=k1` without `use_policy_gradient`; k2 follows the reverse KL, the mode-seeking one; verl's
# default k3 follows the *forward* KL, the mass-covering one that SFT on the teacher's samples also follows; and k1
# used as a per-token reward (Thinking Machines' on-policy distillation) follows the reverse KL. Which KL a run
# follows is a property of the loss, not of where the samples come from. With one sample per token the estimate is
# noisy, and k3's weight $p/q$ grows large where the student gives a token little probability that the teacher
# likes.
#
# ## 4. On-policy vs off-policy distillation vs GRPO
#
# Three ways to spend the same 30 steps of 32 prompts x 8 answers, from the same student, 3 seeds each:
#
# - **on-policy distillation**: `distillation.enabled=true`, verl's default loss (k3, back-propagated),
#   `use_task_rewards=false`: the teacher alone, on the student's samples;
# - **GRPO**: the task's reward alone (the book's default run);
# - **off-policy distillation**: the teacher answers each training prompt once (sampled, temperature 1), and the
#   student is fine-tuned (SFT) on those answers, 256 of them per step: the student never sees its own samples.
#   At the RL runs' learning rate, 2e-4, and at 1e-3 (full fine-tuning's best in section 6).

# %%
STEPS = 2 if fast_mode() else 30
LR = "actor_rollout_ref.actor.optim.lr"
COMMON = [f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={1 if fast_mode() else 5}", f"{LR}=2e-4",
          *(["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8", "data.val_max_samples=32"]
            if fast_mode() else [])]
DISTILL = ["distillation.enabled=true", f"distillation.teacher_models.teacher_model.model_path={TEACHER}",
           "distillation.distillation_loss.use_task_rewards=false"]
rl_runs = run_grid(RUNS, {"on-policy distillation": DISTILL, "GRPO": [],
                          "GRPO, LoRA r16, lr 1e-3": ["actor_rollout_ref.model.lora_rank=16", f"{LR}=1e-3"]}, *COMMON)

PROMPTS = 8 if fast_mode() else 32
DEMOS = sft.sample_demonstrations(TEACHER, TRAIN_ROWS, 20, 64, seed=0)  # the teacher's answers, one per prompt
right = [default_compute_score(d["data_source"], d["response"], d["reward_model"]["ground_truth"]) for d in DEMOS]
print(f"the teacher's samples: {len(DEMOS)} finished answers to {len(TRAIN_ROWS)} training prompts, right: "
      f"{statistics.mean(right):.3f}")


EVAL_EVERY = 1 if fast_mode() else 5


def sft_jobs(lr, rank=0, seed_list=None, eval_every=EVAL_EVERY):
    """One off-policy distillation run per seed: SFT on the teacher's samples, the RL runs' batch and steps."""
    config = dict(steps=STEPS, batch_size=PROMPTS * 8, lr=lr, warmup_steps=0)
    return [dict(model_dir=STUDENT, demos=DEMOS, val_rows=VAL_ROWS, lora_rank=rank, eval_every=eval_every,
                 config=sft.SFTConfig(**config, seed=seed)) for seed in (seed_list or seeds())]


SFT_LRS = (2e-4, 1e-3)
sft_results = run_parallel(sft.train_on_demonstrations, [job for lr in SFT_LRS for job in sft_jobs(lr)])
per_lr = len(seeds())
runs = {**{k: rl_runs[k] for k in ("on-policy distillation", "GRPO")},
        **{f"off-policy (SFT), lr {lr:g}": sft_results[i * per_lr:(i + 1) * per_lr] for i, lr in enumerate(SFT_LRS)}}

# %% tags=["central-figure"]
TEACHER_ACC = json.loads((TEACHER / "warm_start.json").read_text())["greedy_acc"]
fig, axes = plt.subplots(1, 3, figsize=(14, 3.5))
for ax, x, label in zip(axes, ("step", "tokens", "seconds"),
                        ("step", "student tokens (prompt + response)", "training seconds")):
    for name, variant_runs in runs.items():
        band(ax, variant_runs, VAL, name, x=x, marker="o", markersize=3)
    ax.axhline(TEACHER_ACC, color="black", linestyle="--", linewidth=1, label="the teacher")
    ax.set(xlabel=label, title="validation accuracy (greedy)")
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=7)
plt.tight_layout()
plt.show()
print(compare_table(runs, VAL))

# %% [markdown]
# Read the three panels left to right. Per step, on-policy distillation runs ahead of GRPO: after 30 steps it ends
# at 0.630-0.705 against 0.540-0.640, ranges that still touch at the last step, while over the second half of the
# runs (next cell) they are apart. But the clear winner on this task is the *off-policy* run, SFT on the teacher's
# samples: 0.740-0.750 at the RL runs' learning rate and 0.885-0.930 at 1e-3, beyond the spread of every other
# run. Per token the picture is the same (every variant sees 256 answers a step); per second the gap widens, because
# an SFT step generates nothing and runs no teacher. No run reaches the teacher itself (0.980) in 30 steps: the
# closest ends at 0.885-0.930.
#
# Why does the textbook's claim ("on-policy distillation beats SFT on teacher samples") not show here? It is an
# argument about *compounding errors*: a student trained on the teacher's trajectories never visits the states its
# own mistakes lead to, and on long reasoning traces those states are most of what it meets. Our answers are short
# (`a+b=c #### c`, 16.2 tokens on average, printed below) and the student's errors are the noise of its own demonstrations, so the teacher's clean
# samples are exactly what it lacks. On-policy distillation pays for its generality here: the student must sample,
# the teacher must score, and the k3 gradient is a noisy single-sample estimate. Where answers are long and the
# student's states drift from the teacher's, the order can flip; this task is not that case, and the book says so.

# %%
def mean_over_run(variant_runs, key):
    """The mean of `key` over every step of every seed."""
    return statistics.mean(r[key] for records in variant_runs for r in records if key in r)


def second_half_mean(variant_runs, key=VAL):
    """The mean of `key` over the validations of each run's second half, then (mean, min, max) over seeds."""
    values = []
    for records in variant_runs:
        points = [r[key] for r in records if key in r and r["step"] >= STEPS / 2]
        values.append(statistics.mean(points))
    return statistics.mean(values), min(values), max(values)


for name, variant_runs in runs.items():
    mean, low, high = second_half_mean(variant_runs)
    print(f"{name:30s} validation accuracy over the second half: {mean:.3f} ({low:.3f}-{high:.3f})")

tokens = mean_over_run(rl_runs["on-policy distillation"], "response_length/mean")
zero = mean_over_run(rl_runs["GRPO"], "minirl/zero_spread_group_frac")
answers = PROMPTS * 8
print(f"\nper step: {answers} answers of {tokens:.1f} tokens on average. GRPO gets {answers} rewards, and "
      f"{zero:.2f} of its groups (all right or all wrong) give zero advantage; on-policy distillation gets "
      f"{answers * tokens:.0f} teacher log-probs.")
for name in ("on-policy distillation", "GRPO"):
    step_time = mean_over_run(rl_runs[name], "timing_s/step")
    print(f"{name}: {step_time:.2f} s per step")

# %% [markdown]
# Over the second half, on-policy distillation holds 0.617-0.660 against GRPO's 0.534-0.581: the teacher's
# per-token signal is worth something per step. The per-step numbers are the signal density argument with this
# task's figures: 4155 teacher log-probs against 256 rewards, an order of magnitude more numbers reaching the loss,
# and none wasted on one of the 0.24 of groups that give GRPO no advantage. The price is the teacher's forward pass
# over every sample (a model five times the student's size, in the same process; verl runs it on its own GPUs):
# 0.97 s per step against 0.61.
#
# ## 5. verl ↔ minirl: distillation
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | the losses | `verl/trainer/distillation/losses.py`: `compute_distillation_loss_reverse_kl_estimator` (kl, k1, abs, mse, k2, low_var_kl, k3), `compute_forward_kl_topk`; per-token terms in `fsdp/losses.py::compute_forward_kl_topk` | `minirl/distillation.py`: `reverse_kl_estimator_loss`, `forward_kl_topk_loss`, `forward_kl_topk_terms`; the same registry (`register_distillation_loss`) |
# | supervised or reward | `losses.py::distillation_loss` (agg_loss, or the vanilla PPO loss with $A_t = -\ell_t$) | `distillation.py::distillation_loss`, parity-tested in `tests/parity/test_distillation_parity.py` |
# | with the task's loss | `losses.py::distillation_ppo_loss` | `distillation.py::combine_with_policy_loss`, called by `Actor.update_actor` |
# | the teacher | vLLM/SGLang servers on their own GPU pool (`teacher_loop/`), asked per sample in the agent loop | `minirl/teacher.py::Teacher`, one forward pass over the batch after generation (timed in `gen`) |
# | keys | `distillation.{enabled, distillation_loss.{loss_mode, topk, use_task_rewards, distillation_loss_coef, loss_max_clamp, log_prob_min_clamp, use_policy_gradient, policy_loss_mode, clip_ratio, clip_ratio_low, clip_ratio_high}, teacher_models.teacher_model.model_path}` | the same keys and defaults; the pool and engine keys (`n_gpus_per_node`, `nnodes`, `inference.*`, `num_replicas`) are accepted, no effect; a second teacher is refused |
# | metrics | `distillation/{loss, abs_loss, loss_min, loss_max, student_mass, teacher_mass, overlap_ratio, ...}` | the same names |
#
# ## 6. LoRA: what trains, and what it costs
#
# `actor_rollout_ref.model.lora_rank=r` wraps the actor in a PEFT adapter on every linear layer but the output head
# (`target_modules=all-linear`), as verl's FSDP engine does. The counts below are measured on the student itself
# (`minirl/lora.py::count_parameters`, and AdamW's state after one step, `optimizer_state_bytes`), then computed for
# Qwen2.5-0.5B's shapes (24 blocks, hidden 896, MLP 4864, 2 key-value heads of 64): what LoRA saves is the
# gradient and the optimizer state of the frozen weights, not the weights themselves.

# %%
from minirl.config import OptimConfig  # noqa: E402  (used only here)
from minirl.optim import build_optimizer  # noqa: E402

x = torch.tensor([[5, 6, 7, 8]])
print(f"{'the student':12s} {'trained':>10s} {'of all':>7s} {'AdamW state (bytes)':>20s}")
for rank in (0, 1, 4, 16):
    model = models.load_policy(STUDENT)
    if rank:
        model = lora.apply_lora(model, lora.LoraSettings(rank, 16, "all-linear"))
    optimizer = build_optimizer(model, OptimConfig())
    model(input_ids=x).logits.sum().backward()
    optimizer.step()
    trained, total = lora.count_parameters(model)
    print(f"{'full' if rank == 0 else f'LoRA r{rank}':12s} {trained:10,d} {trained / total:7.1%} "
          f"{lora.optimizer_state_bytes(optimizer):20,d}")

# Qwen2.5-0.5B-Instruct (its config.json): the seven linear layers of a block, as (d_out, d_in)
hidden, mlp, kv, blocks, vocab = 896, 4864, 2 * 64, 24, 151936
block = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden), (mlp, hidden), (mlp, hidden), (hidden, mlp)]
full = blocks * sum(o * i for o, i in block) + vocab * hidden  # + the (tied) embedding; norms and biases left out
print(f"\nQwen2.5-0.5B: full fine-tuning trains ~{full / 1e6:.0f}M numbers; AdamW keeps "
      f"{full * 8 / 2**30:.1f} GiB of moments and the gradient {full * 4 / 2**30:.1f} GiB (float32)")
for rank in (1, 4, 16):
    trained = blocks * sum(rank * (o + i) for o, i in block)
    print(f"  LoRA r{rank:<2d}: {trained / 1e6:5.2f}M numbers, AdamW {trained * 8 / 2**20:6.1f} MiB, "
          f"gradient {trained * 4 / 2**20:5.1f} MiB")

# %% [markdown]
# ### The learning rate LoRA needs
#
# The adapter starts at zero and is scaled by $\alpha / r$, so the learning rate that suits full fine-tuning is
# not the one that suits LoRA. Rather than quote a rule, measure it: the off-policy distillation run of section 4
# (SFT on the teacher's samples, 30 steps, the clearest learning signal this chapter has) at three learning rates
# each, full fine-tuning and ranks 1, 4 and 16 with verl's `lora_alpha=16`, one seed; then the best rate of each
# with all 3 seeds. (These runs share two worker processes, so their peak memory is not theirs alone: the RL runs
# below, one process each, measure memory.)

# %%
RANKS = (4,) if fast_mode() else (1, 4, 16)
GRID = {0: (1e-3, 5e-3) if fast_mode() else (2e-4, 1e-3, 5e-3),
        **{rank: (1e-3, 5e-3) if fast_mode() else (1e-3, 5e-3, 2e-2) for rank in RANKS}}
first_seed = seeds()[0]
reused = {(0, lr): runs[f"off-policy (SFT), lr {lr:g}"][0] for lr in SFT_LRS}  # full fine-tuning, already run
sweep_jobs = [(rank, lr) for rank, lrs in GRID.items() for lr in lrs if (rank, lr) not in reused]
swept = run_parallel(sft.train_on_demonstrations,
                     [sft_jobs(lr, rank, [first_seed], eval_every=STEPS)[0] for rank, lr in sweep_jobs])
sweep = {**reused, **dict(zip(sweep_jobs, swept))}


def final(records, key=VAL):
    return [r[key] for r in records if key in r][-1]


print("validation accuracy after the run, seed", first_seed)
print(f"{'lr':>8s} " + " ".join(f"{'full' if r == 0 else f'LoRA r{r}':>9s}" for r in GRID))
for lr in sorted({lr for lrs in GRID.values() for lr in lrs}):
    print(f"{lr:8g} " + " ".join(f"{final(sweep[(r, lr)]):9.3f}" if (r, lr) in sweep else f"{'':9s}" for r in GRID))
best = {rank: max(GRID[rank], key=lambda lr: final(sweep[(rank, lr)])) for rank in GRID}
print("best learning rate:", {("full" if r == 0 else f"r{r}"): f"{lr:g}" for r, lr in best.items()})

fig, ax = plt.subplots(figsize=(5.5, 3.4))
for rank, lrs in GRID.items():
    ax.plot(lrs, [final(sweep[(rank, lr)]) for lr in lrs], marker="o", label="full fine-tuning" if rank == 0
            else f"LoRA r{rank}")
ax.set(xscale="log", xlabel="learning rate", ylabel="validation accuracy (greedy)",
       title=f"after {STEPS} SFT steps, seed {first_seed}")
ax.grid(alpha=0.3)
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %%
other_seeds = seeds()[1:]
extra = [(rank, seed) for rank in GRID for seed in other_seeds
         if not (rank == 0 and best[0] in SFT_LRS)]  # full fine-tuning's best rate may have all its seeds already
extra_runs = run_parallel(sft.train_on_demonstrations,
                          [sft_jobs(best[rank], rank, [seed], eval_every=STEPS)[0] for rank, seed in extra])
lora_runs = {}
for rank in GRID:
    name = "full fine-tuning" if rank == 0 else f"LoRA r{rank}"
    if rank == 0 and best[0] in SFT_LRS:
        lora_runs[name] = runs[f"off-policy (SFT), lr {best[0]:g}"]
    else:
        lora_runs[name] = [sweep[(rank, best[rank])]] + [r for (k, _), r in zip(extra, extra_runs) if k == rank]

print(f"{'':18s} {'lr':>7s} {'trained':>9s} {'AdamW bytes':>12s} {'s/step':>7s} {'val acc (3 seeds)':>24s}")
for name, variant_runs in lora_runs.items():
    rank = 0 if name.startswith("full") else int(name.split("r")[-1])
    last = variant_runs[0][-1]
    step_time = mean_over_run(variant_runs, "timing_s/step")
    mean, low, high = final_spread(variant_runs, VAL)
    print(f"{name:18s} {best[rank]:7g} {last['minirl/trainable_params']:9,d} "
          f"{last['minirl/optimizer_state_bytes']:12,d} {step_time:7.3f} {mean:8.3f} ({low:.3f}-{high:.3f})")
print()
print(compare_table(lora_runs, VAL))

# %% [markdown]
# Three findings, each printed above. First, the learning-rate rule: full fine-tuning does best at 1e-3 and every
# rank at 5e-3, five times more, whatever the rank (with $\alpha$ fixed, the $1/r$ in the scale keeps the best rate
# from moving with $r$). A LoRA run at full fine-tuning's rate is the "forgot to scale the learning rate" failure:
# 0.665-0.705 instead of 0.810-0.845 on seed 0. Second, the price: at its best rate, rank 1 ends at 0.755-0.825 and
# rank 4 at 0.835-0.845, both below full fine-tuning's 0.885-0.930 beyond the seed spread; rank 16's 0.830-0.915
# overlaps it. Third, the cost: rank 16 trains 65,536 numbers against 329,728 and AdamW's state shrinks with it,
# but the step time does not (0.290-0.330 s for all four), because the frozen weights still run forward and
# backward: the activations' gradients must flow through them.
#
# LoRA in the RL trainer: the `GRPO, LoRA r16, lr 1e-3` runs of section 4 trained with the adapter, the reference
# policy being the same model with its adapter switched off and the rollout sampling with merged weights. Their
# validation accuracy, step time and peak memory against full fine-tuning's GRPO runs:

# %%
lora_rl = {"GRPO (full)": rl_runs["GRPO"], "GRPO, LoRA r16, lr 1e-3": rl_runs["GRPO, LoRA r16, lr 1e-3"]}
for name, variant_runs in lora_rl.items():
    step_time = mean_over_run(variant_runs, "timing_s/step")
    rss = max(records[-1]["minirl/peak_rss_gb"] for records in variant_runs)
    print(f"{name:26s} {step_time:.2f} s/step, peak memory {rss:.2f} GiB (the largest of the seeds)")
print(compare_table(lora_rl, VAL))

# %% [markdown]
# In RL the adapter run at five times the learning rate ends within noise of full fine-tuning (0.595-0.655 against
# 0.540-0.640). It is slower and larger here, 0.69 against 0.61 s per step and 0.70 against 0.62 GiB at its peak:
# the rollout's merged copy is re-merged after every update and held beside the adapter, and at this size the
# process's memory is Python's and torch's own, so a few megabytes of optimizer state saved vanish in it. The
# Qwen2.5-0.5B figures of section 6 are where the saving is real: gigabytes of moments and gradients.
#
# ## 7. Failure modes
#
# - **A teacher with another tokenizer.** The teacher reads the student's token ids; with another vocabulary an id
#   means another string, and every log-prob it returns is about text nobody wrote. verl does not check; minirl
#   refuses at start:

# %%
other = models.load_tokenizer(STUDENT)
other.add_tokens(["<calc>"])  # one extra token: a different vocabulary
try:
    check_same_tokenizer(TOKENIZER, other, "a-teacher-of-another-family")
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# A teacher with the same vocabulary but another chat template is only reported (the ids still mean the same
# strings), yet it reads the student's prompts in a format it may never have seen: distil within one model family.
#
# - **A LoRA rank too small.** Rank 1 is a single direction per matrix; the table of section 6 shows where it ends
#   against the larger ranks.
# - **Forgetting to scale the learning rate.** LoRA at full fine-tuning's best rate: the sweep's row at that rate.
# - **Large k3 weights.** On-policy distillation's k3 weights a token's gradient by $1 - p/q$; where the student
#   is unsure and the teacher is sure, that weight is large. When raising the learning rate, watch
#   `distillation/loss_max` and `actor/grad_norm` (or set `distillation_loss.loss_max_clamp`).
#
# ## 8. verl ↔ minirl: LoRA
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | the adapter | `verl/workers/engine/fsdp/transformer_impl.py::FSDPEngine._build_lora_module`: PEFT's `get_peft_model(LoraConfig(task_type=CAUSAL_LM, r, lora_alpha, target_modules, exclude_modules, bias="none"))`, or `PeftModel.from_pretrained(lora_adapter_path)` | `minirl/lora.py::apply_lora`, the same call |
# | keys | `actor_rollout_ref.model.{lora_rank, lora_alpha, target_modules, exclude_modules, lora_adapter_path}` (FSDP); `model.lora.{rank, alpha, dropout, target_modules, lora_A_init_method, merge, ...}` (Megatron) | both spellings (`lora_settings`; Megatron's fused module names are unfused); `lora.merge` accepted, no effect (the rollout always merges) |
# | the reference | the actor with its adapter off (`ref_in_actor`) | `Reference(..., adapter_off=True)`: `disable_adapter()` |
# | the rollout | merged weights (`lora.merge=true`) or the adapter handed to vLLM | a plain engine copy with the merged weights, `lora.merged_state_dict` at each sync |
# | checkpoints | the adapter; `python -m verl.model_merger merge` for a full model | the adapter; `python -m minirl merge ADAPTER OUT` |
# | the critic | the FSDP engine would wrap the value model with CAUSAL_LM, which PEFT refuses | refused with that reason |
#
# ## Exercises
#
# `exercises/ch14_distillation_lora.py`: Exercise 14.1 writes verl's default distillation loss, k3 with its mask
# and clamps; Exercise 14.2 the top-k forward KL (`loss_mode=forward_kl_topk`); Exercise 14.3 counts what a LoRA
# adapter trains and what AdamW stores for it. Grade one with `make grade EX=14.1`.
#
# After you have tried them: the library's answers.

# %%
for function in (distillation.reverse_kl_estimator_loss, distillation.forward_kl_topk_terms,
                 lora.count_parameters, lora.optimizer_state_bytes):
    display(show_source(function, collapsed=True))

# %%
print_run_time()
