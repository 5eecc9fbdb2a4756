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
# # Chapter 0 · The tensors of RL for LLMs
#
# Every algorithm in this book (PPO, GRPO, DAPO, ...) is a few lines of math on the same handful of
# tensors. This chapter builds those tensors by hand, in verl's vocabulary, so that later chapters can
# spend their time on the algorithms.
#
# | The five answers | |
# |---|---|
# | **Problem** | A batch of LLM responses is ragged: prompts and responses have different lengths, so the tensors are padded. Every loss must count real tokens only, include the token that ends the response, and stay finite for large logits. |
# | **Core idea** | Carry a `response_mask` (1 up to and including the first EOS) beside every per-token tensor, and reduce with *masked* statistics. Compute log-probs as $z_y - \operatorname{logsumexp}(z)$. Put a sequence-level reward on the last valid token. |
# | **Beginner's view** | The mask is a stencil: you lay it over the batch, and only the tokens the model really produced show through. |
# | **verl source** | `verl/utils/torch_functional.py`: `masked_mean`, `masked_whiten`, `logprobs_from_logits`, `entropy_from_logits`, `get_response_mask`; `verl/workers/reward_manager/naive.py::NaiveRewardManager.__call__` (reward on the last token). |
# | **Where next** | [Chapter 1 · PPO](01_ppo.ipynb) builds its ratio and clipped loss from these tensors. Back to [the reading map](index.md). |
#
# Run time: a few seconds on one CPU thread (the last cell prints this run's; the chapter trains nothing).
# The code shown on this page is read from `minirl/core.py`, the library itself,
# so it cannot drift from what the book runs.

# %%
import matplotlib.pyplot as plt
import torch

from minirl import core
from minirl.book.notebook import print_run_time, show_source, where_this_ran

where_this_ran()  # the machine behind this notebook's outputs

_ = torch.manual_seed(0)

# %% [markdown]
# ## 1. A batch of prompts and responses
#
# An RL step for an LLM starts with a batch of **prompts**. The policy (the model being trained)
# writes one **response** per prompt (or several: `rollout.n` of them). verl keeps the two parts side
# by side in fixed-size tensors:
#
# | tensor | shape | meaning |
# |---|---|---|
# | `prompts` | $(B, P)$ | prompt token ids, **left**-padded so that every prompt ends at the same column |
# | `responses` | $(B, L)$ | generated token ids, **right**-padded after the response ends |
# | `input_ids` | $(B, P+L)$ | `prompts` and `responses` side by side: what the model reads |
# | `attention_mask` | $(B, P+L)$ | 1 on real tokens, 0 on padding |
# | `response_mask` | $(B, L)$ | 1 on response tokens that count for the loss |
#
# $B$ is the number of sequences, $P$ the padded prompt length, $L$ the padded response length.
#
# We use a toy vocabulary of characters. Like many chat models, this tokenizer pads with its
# end-of-sequence token: `pad_token_id == eos_token_id`. Keep that in mind.

# %%
vocab = ["<eos>"] + list("0123456789+=? ")
stoi = {ch: i for i, ch in enumerate(vocab)}
EOS = PAD = stoi["<eos>"]  # this tokenizer pads with EOS, as many chat models do


def encode(text):
    return [stoi[ch] for ch in text]


prompt_texts = ["2+3=", "10+7=", "4+4="]
response_texts = ["5", "17", "88888888"]  # the third one never says <eos>: it was cut at max length
P, L = 6, 8

prompts = torch.tensor([[PAD] * (P - len(t)) + encode(t) for t in prompt_texts])  # left padding
responses = torch.tensor([(encode(t) + [EOS] + [PAD] * L)[:L] for t in response_texts])  # right padding
prompt_mask = torch.tensor([[0] * (P - len(t)) + [1] * len(t) for t in prompt_texts])


def show_tokens(ids):
    return [" ".join(f"{vocab[i]:>5}" for i in row) for row in ids.tolist()]


print("prompts:")
print("\n".join(show_tokens(prompts)))
print("responses:")
print("\n".join(show_tokens(responses)))

# %% [markdown]
# ## 2. The problem, shown
#
# ### 2.1 The mask that forgets to stop
#
# The obvious way to find the real response tokens is "every token that is not padding". With
# `pad_token_id == eos_token_id` that also throws away the EOS token, the one token that teaches the
# model to **stop**. verl's `get_response_mask` looks for the first EOS instead and keeps it.

# %%
naive_mask = (responses != PAD).long()
response_mask = core.get_response_mask(responses, eos_token=EOS)
print("naive  responses != PAD:\n", naive_mask)
print("verl   get_response_mask:\n", response_mask)
print("EOS tokens the naive mask trains on:", int((naive_mask * (responses == EOS)).sum()),
      "| get_response_mask:", int((response_mask * (responses == EOS)).sum()))

# %% [markdown]
# With the naive mask, no EOS is ever in the loss. The policy gradient never pushes the EOS
# probability up after a good answer, so answers that stop are not reinforced; over training,
# responses tend to grow until they hit `max_response_length`.
#
# ### 2.2 Padding that changes the loss
#
# Most RL losses average a per-token quantity over the batch. If the average includes padding, the
# result depends on how much padding the batch happens to have, which is an accident of batching.
# Below, the same three responses are padded to longer and longer $L$. We score them with a fixed
# random "model" that, like any trained model, is confident that `<eos>` follows `<eos>`, and compare a
# plain mean of the per-token log-probs with the masked mean.

# %%
generator = torch.Generator().manual_seed(0)
max_len = 64
logits_full = torch.randn(len(response_texts), max_len, len(vocab), generator=generator) * 2
for i, text in enumerate(response_texts):
    logits_full[i, len(text) + 1 :, EOS] += 8.0  # after the end, the model is sure the next token is <eos>

lengths, plain_means, masked_means = [], [], []
for length in [12, 16, 24, 32, 48, 64]:  # long enough for every response to end with <eos>
    ids = torch.tensor([(encode(t) + [EOS] + [PAD] * max_len)[:length] for t in response_texts])
    mask = core.get_response_mask(ids, eos_token=EOS)
    log_probs = core.logprobs_from_logits(logits_full[:, :length], ids)
    lengths.append(length)
    plain_means.append(log_probs.mean().item())
    masked_means.append(core.masked_mean(log_probs, mask).item())

fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(lengths, plain_means, "o-", label="plain mean (padding included)")
ax.plot(lengths, masked_means, "s-", label="masked_mean (response tokens only)")
ax.set_xlabel("padded response length L")
ax.set_ylabel("mean log-prob per token")
ax.set_title("Same responses, more padding")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# The masked mean is flat: padding is invisible to it. The plain mean climbs toward 0 as padding grows,
# because the easy padding predictions dilute the real ones. A loss built on it would change with the
# batch's padding, and a "better" number would only mean "more padding".
#
# ### 2.3 Log-probs that become $-\infty$
#
# A policy gradient needs $\log \pi(y)$ for each generated token $y$. Computing `softmax` first and
# taking the `log` after fails when logits are large: the small probabilities round to exactly 0.

# %%
z = torch.tensor([[2.0, 1.0, 0.0]])
for scale in [1, 100]:
    logits = z * scale
    naive = torch.softmax(logits, dim=-1).log()
    stable = core.logprobs_from_logits(logits.expand(3, 3), torch.arange(3))
    print(f"logits x{scale:<3}  log(softmax): {naive[0].tolist()}")
    print(f"            logprobs_from_logits: {stable.tolist()}")

# %% [markdown]
# ## 3. The formulas and the code
#
# ### 3.1 Masked mean, variance and whitening
#
# For values $x$ and a 0/1 mask $m$ (for example, the response mask of the whole batch):
#
# $$
# \operatorname{masked\_mean}(x, m) = \frac{\sum_i m_i x_i}{\sum_i m_i + 10^{-8}}
# $$
#
# $$
# \operatorname{masked\_var}(x, m) = \operatorname{masked\_mean}\big((x - \mu)^2, m\big)\cdot\frac{N}{N-1},
# \qquad \mu = \operatorname{masked\_mean}(x, m),\ N = \sum_i m_i
# $$
#
# $$
# \operatorname{masked\_whiten}(x, m) = \frac{x - \mu}{\sqrt{\operatorname{masked\_var}(x, m) + 10^{-8}}}
# $$
#
# Three details are easy to get wrong, and verl is precise about them:
#
# - the $10^{-8}$ in the mean's denominator (an empty mask gives 0, not NaN);
# - the variance is **unbiased** ($N/(N-1)$, Bessel's correction) and taken over **all valid tokens
#   of the batch**, not row by row;
# - `masked_whiten` does **not** multiply its result by the mask: padding positions hold
#   $(x-\mu)/\sigma$ too. GAE (Chapter 2) whitens its advantages with it, REINFORCE++ (Chapter 7) its
#   returns.
#
# `masked_sum` replaces padding by 0 before multiplying, so a NaN sitting in padding cannot leak in.
# Here is `masked_sum`. `masked_mean` and `masked_whiten` are Exercises 0.1 and 0.2: write them first;
# the library's versions are at the end of section 7.

# %%
show_source(core.masked_sum)

# %% [markdown]
# ### 3.2 Log-probs and entropy from logits
#
# The model outputs logits $z \in \mathbb{R}^V$ for the next token. The policy is
# $\pi = \operatorname{softmax}(z)$, and for the token $y$ it produced,
#
# $$
# \log \pi(y) = z_y - \log \sum_{v} e^{z_v} = z_y - \operatorname{logsumexp}(z).
# $$
#
# `logsumexp` subtracts $\max_v z_v$ before exponentiating, so nothing overflows or underflows.
# The entropy of the next-token distribution, logged by verl as `actor/entropy`, uses the same trick:
#
# $$
# H(\pi) = -\sum_v \pi_v \log \pi_v = \operatorname{logsumexp}(z) - \sum_v \pi_v z_v .
# $$
#
# Logits at position $t$ predict the token at position $t+1$, so the log-prob of response token $t$
# comes from the logits one position earlier. The rollout and trainer code (later chapters) handle
# that shift; these functions take logits and labels already aligned.
# `logprobs_from_logits` is Exercise 0.3 (its code is shown after the exercises); here is the entropy.

# %%
show_source(core.entropy_from_logits)

# %% [markdown]
# ### 3.3 The response mask
#
# $$
# \text{response\_mask}_t = \big[\ \#\{\,s < t : y_s = \text{EOS}\,\} = 0\ \big]
# $$
#
# In words: keep token $t$ while no EOS has appeared *before* it. The first EOS itself is kept.
# `get_response_mask` is Exercise 0.4; its code is shown after the exercises.

# %% [markdown]
# ## 4. A numeric toy you can check by hand
#
# A $2 \times 4$ batch of per-token values (think: advantages) with a ragged mask:
#
# $$
# x = \begin{pmatrix} 1 & 2 & 3 & 4 \\ 5 & 6 & 7 & 8 \end{pmatrix},\qquad
# m = \begin{pmatrix} 1 & 1 & 1 & 0 \\ 1 & 1 & 0 & 0 \end{pmatrix}
# $$
#
# By hand: the valid values are $1, 2, 3, 5, 6$, so $\mu = 17/5 = 3.4$. The squared deviations are
# $5.76, 1.96, 0.16, 2.56, 6.76$, which sum to $17.2$; the unbiased variance is $17.2/4 = 4.3$.
# Per row, the means are $2$ and $5.5$. Whitening maps $x=1$ to $(1 - 3.4)/\sqrt{4.3} \approx -1.157$.

# %%
x = torch.tensor([[1.0, 2, 3, 4], [5, 6, 7, 8]])
m = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
print("masked_mean           ", core.masked_mean(x, m).item(), "  (hand: 3.4)")
print("masked_mean per row   ", core.masked_mean(x, m, axis=-1).tolist(), "  (hand: [2.0, 5.5])")
print("masked_var (unbiased) ", core.masked_var(x, m).item(), "  (hand: 4.3)")
print("masked_whiten         \n", core.masked_whiten(x, m))
print("plain mean, for contrast:", x.mean().item())

# %% [markdown]
# Note the last column of the whitened tensor: $x=4$ and $x=8$ are padding, and they are whitened
# too ($(4-3.4)/\sqrt{4.3} \approx 0.289$). Anything that uses the result multiplies by the mask again.
#
# And a log-prob by hand: for logits $z = (2, 1, 0)$ and label $y=0$,
# $\operatorname{logsumexp}(z) = \log(e^2 + e + 1) = \log 11.107 = 2.4076$, so $\log\pi(0) = -0.4076$.

# %%
print(core.logprobs_from_logits(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([0])).item(), "(hand: -0.4076)")

# %% [markdown]
# ## 5. Where the reward sits
#
# With verifiable rewards (is the final answer right?), a whole response gets **one** score. verl
# still stores it per token, as a $(B, L)$ tensor `token_level_scores` that is 0 everywhere except at
# the **last valid response token**, index `response_mask.sum() - 1`. The advantage estimators of
# later chapters read it back by summing over tokens; PPO with a KL penalty ([Chapter 3](03_rlhf.ipynb)) adds a
# per-token term to the same tensor.
#
# Our three answers: "2+3=5" is right, "10+7=17" is right, "4+4=88888888" is wrong. Say our scorer
# gives +1 for a right answer and -1 for a wrong one (verl's `math_dapo` scorer does exactly that).

# %%
scores = torch.tensor([1.0, 1.0, -1.0])
token_level_scores = core.place_scores_on_last_token(scores, response_mask)
print(token_level_scores)
print("sum over tokens gives back the scores:", token_level_scores.sum(-1).tolist())

# %% [markdown]
# Here is the whole batch at once. Each row is one sequence, each column a position; the dashed
# line separates prompt from response.

# %% tags=["central-figure"]
attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
input_ids = torch.cat([prompts, responses], dim=1)
panels = [
    ("attention_mask (B, P+L)", attention_mask, "Greys", 0),
    ("response_mask (B, L)", torch.cat([torch.zeros_like(prompts), response_mask], 1), "Blues", 0),
    ("token_level_scores (B, L): +1 green, -1 red", torch.cat([torch.zeros(prompts.shape), token_level_scores], 1),
     "RdYlGn", -1.6),
]
fig, axes = plt.subplots(len(panels), 1, figsize=(8, 5.2))
for ax, (title, tensor, cmap, vmin) in zip(axes, panels):
    ax.imshow(tensor.float(), cmap=cmap, vmin=vmin, vmax=1.6, aspect="auto")
    for (i, j), token in zip(torch.cartesian_prod(torch.arange(3), torch.arange(P + L)).tolist(), input_ids.flatten()):
        ax.text(j, i, vocab[token].replace("<eos>", "eos"), ha="center", va="center", fontsize=7)
    ax.axvline(P - 0.5, color="k", linestyle="--")
    ax.set_title(title, fontsize=10)
    ax.set_yticks(range(3))
    ax.set_xticks([])
plt.tight_layout()
plt.show()

# %% [markdown]
# Read the picture row by row: the prompt is left-padded, the response is right-padded, the
# response mask covers the answer **and its EOS**, and the score sits on that EOS (the last valid
# token). The third response never produced an EOS: it was cut at $L$, every one of its tokens counts,
# and its score sits on its last token.
#
# ## 6. verl ↔ minirl
#
# | concept | minirl | verl 0.9.1 |
# |---|---|---|
# | masked mean / sum | `minirl/core.py::masked_mean`, `masked_sum` | `verl/utils/torch_functional.py::masked_mean`, `masked_sum` |
# | unbiased masked variance | `minirl/core.py::masked_var` | `verl/utils/torch_functional.py::masked_var` |
# | batch whitening | `minirl/core.py::masked_whiten` | `verl/utils/torch_functional.py::masked_whiten` |
# | token log-probs | `minirl/core.py::logprobs_from_logits` | `verl/utils/torch_functional.py::logprobs_from_logits` |
# | entropy | `minirl/core.py::entropy_from_logits` | `verl/utils/torch_functional.py::entropy_from_logits` |
# | response mask | `minirl/core.py::get_response_mask` | `verl/utils/torch_functional.py::get_response_mask` |
# | response part of the attention mask | `minirl/core.py::compute_response_mask` | `verl/trainer/ppo/ray_trainer.py::compute_response_mask` |
# | outcome reward on the last token | `minirl/core.py::place_scores_on_last_token` | inline in `verl/workers/reward_manager/naive.py::NaiveRewardManager.__call__` |
#
# The batch keys have the same names in both: `prompts`, `responses`, `input_ids`, `attention_mask`,
# `response_mask`, `token_level_scores` (and, in later chapters, `old_log_probs`, `ref_log_prob`,
# `token_level_rewards`, `advantages`, `returns`). In verl they live in a `DataProto`'s `batch`
# (a `TensorDict`). The metric `response_length/mean` is the mean of `response_mask.sum(-1)`.
#
# ## 7. Exercises
#
# Open `exercises/ch00_tensors.py`. Each function has a docstring with the task, the shapes and a
# hint; replace its `raise NotImplementedError(...)` line with your code. Then grade:
#
# ```bash
# make grade                                                        # all exercises, with a progress table
# make grade EX=0.1                                                 # one exercise, all its checks
# ```
#
# | # | function | what it checks |
# |---|---|---|
# | 0.1 | `masked_mean` | a toy like the one above, per-row means, NaN in padding, empty rows |
# | 0.2 | `masked_whiten` | batch-wide, unbiased statistics; padding not re-masked |
# | 0.3 | `logprobs_from_logits` | equals log-softmax; finite for logits ×100 |
# | 0.4 | `get_response_mask` | keeps the first EOS even when `pad == eos` |
# | 0.5 | `place_scores_on_last_token` | the score on the last valid token only |
#
# <details>
# <summary>Hint for 0.2</summary>
# Compute one mean and one variance for the whole batch: call your <code>masked_mean</code> (Exercise
# 0.1, in the same file) with <code>axis=None</code>. The unbiased variance multiplies the masked mean of squared deviations by
# N/(N-1), with N the number of valid tokens.
# </details>
#
# <details>
# <summary>Hint for 0.4</summary>
# <code>(ids == eos).cumsum(1)</code> counts the EOS tokens up to and including each position.
# Subtract the current position's own EOS flag to count those strictly before it.
# </details>
#
# <details>
# <summary>Hint for 0.5</summary>
# <code>response_mask.sum(-1) - 1</code> is the index of the last valid token of each row.
# Advanced indexing <code>t[rows, cols] = scores</code> writes one value per row.
# </details>
#
# **Failure-mode question.** A colleague's GRPO run looks healthy at first, but the mean response
# length keeps climbing until almost every response hits `max_response_length`
# (`response_length/clip_ratio` near 1), and accuracy falls. In their code you find
# `response_mask = (responses != tokenizer.pad_token_id)`, and their tokenizer pads with its EOS
# token. Explain the link.
#
# <details>
# <summary>Answer</summary>
# The mask drops every EOS token, so no loss term ever involves the probability of stopping. Correct
# answers are reinforced token by token, but the EOS that ended them is not, while nothing pushes
# EOS down or up after wrong answers either. The model's habit of stopping is left to drift, and
# truncated, rambling responses follow. <code>get_response_mask</code> keeps the first EOS, so "stop
# here" is reinforced with the answer.
# </details>
#
# ### The library's code, after you tried
#
# minirl's versions of the functions the exercises ask for, read from the library itself. Open them
# after your own answers pass (or after you are stuck with the hints): they are the reference the
# graders compare with.

# %%
from IPython.display import display

for function in (core.masked_mean, core.masked_whiten, core.logprobs_from_logits, core.get_response_mask,
                 core.place_scores_on_last_token):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 8. Where next
#
# - [Chapter 1 · PPO](01_ppo.ipynb): the ratio of new to old log-probs, computed from exactly these
#   `log_probs`, and the clipped objective reduced with masked means (`agg_loss`).
# - Back to [the reading map](index.md).
#
# References: verl's `verl/utils/torch_functional.py`; PyTorch's
# [`torch.logsumexp`](https://pytorch.org/docs/stable/generated/torch.logsumexp.html).

# %%
print_run_time()
