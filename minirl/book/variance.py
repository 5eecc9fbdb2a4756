"""Measure advantage estimators by resampling: the bias and variance figures of Chapters 2 and 7.

An estimator is a random variable: sample the responses again and the advantages, and the gradient
they produce, change. These helpers resample on purpose, many times, from a fixed policy, and
report how much the estimate moves (variance) and where it is centred (bias). They use the library's
own rollout, reward manager, critic read-out, estimators and policy loss, so the numbers are those of
the training code.

    sample_responses        n responses per prompt, scored: the tensors the trainer's batch holds
    gae_bias_variance       Chapter 2: A_t^lambda at fixed (state, token) pairs, many continuations each
    policy_gradient_draws   Chapter 7: one policy-gradient vector per draw of a batch, per estimator
    gradient_noise          relative variance and cosine of those vectors
    score_norms             how hard each response pulls on the weights (the optimal baseline's weights)
    log_probs_after_updates Chapter 11: a step's updates, then the log-probs of the same responses
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minirl import models
from minirl.advantage import compute_advantage
from minirl.config import AlgorithmConfig
from minirl.core import get_response_mask, sum_pi_squared_from_logits
from minirl.data import compute_position_ids, encode_prompts
from minirl.gae import compute_gae_advantage_return
from minirl.ppo import compute_policy_loss
from minirl.protocol import DataProto
from minirl.rewards import NaiveRewardManager
from minirl.rollout import generate_sequences


def _seeds(seed: int, draw: int, count: int) -> list[int]:
    return [seed * 1_000_003 + draw * 10_007 + row for row in range(count)]


def _score(tokenizer, rows: Sequence[dict], responses: torch.Tensor, response_mask: torch.Tensor,
           reward_fn=None) -> torch.Tensor:
    """token_level_scores (B, L) of responses to `rows` (one row per response), with the reward manager."""
    reward_fn = reward_fn or NaiveRewardManager(tokenizer)
    scores, _ = reward_fn({"responses": responses, "response_mask": response_mask,
                           "reward_model": [r["reward_model"] for r in rows],
                           "data_source": [r["data_source"] for r in rows],
                           "extra_info": [r.get("extra_info") for r in rows]})
    return scores


def _assemble(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, responses: torch.Tensor, eos: int) -> dict:
    """The trainer's tensors for (left-padded prompt, right-padded response) pairs."""
    response_mask = get_response_mask(responses, eos, dtype=prompt_mask.dtype)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    return {"input_ids": torch.cat([prompt_ids, responses], dim=1), "attention_mask": attention_mask,
            "position_ids": compute_position_ids(attention_mask), "responses": responses,
            "response_mask": response_mask}


@torch.no_grad()
def sample_responses(policy, tokenizer, rows: Sequence[dict], n: int, response_length: int, temperature: float = 1.0,
                     seed: int = 0, draw: int = 0, do_sample: bool = True, reward_fn=None) -> dict:
    """n scored responses per prompt row, copies adjacent (rows [i*n, (i+1)*n) answer rows[i]).

    Returns a dict of tensors, B = len(rows) * n, L = response_length: input_ids, attention_mask,
    position_ids (B, P+L), responses, response_mask, token_level_scores (B, L), and `index` (B,) the
    prompt's row number (the group label). (seed, draw) seed every row's sampling.
    """
    prompts = encode_prompts(tokenizer, [r["prompt"] for r in rows], max_prompt_length=10_000)
    out = generate_sequences(policy, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                             tokenizer.pad_token_id, response_length, n=n, do_sample=do_sample,
                             temperature=temperature, seeds=_seeds(seed, draw, len(rows) * n) if do_sample else None)
    batch = {k: out[k] for k in ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")}
    repeated = [row for row in rows for _ in range(n)]
    batch["token_level_scores"] = _score(tokenizer, repeated, batch["responses"], batch["response_mask"], reward_fn)
    batch["index"] = torch.arange(len(rows)).repeat_interleave(n)
    return batch


# ----------------------------------------------------------------------------------------------
# Chapter 2: bias and variance of A_t^lambda at fixed (state, token) pairs
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def gae_bias_variance(policy, critic, tokenizer, rows: Sequence[dict], lams: Sequence[float], samples: int = 64,
                      response_length: int = 20, gamma: float = 1.0, temperature: float = 1.0, seed: int = 0,
                      reward_fn=None, chunk: int = 512) -> dict:
    """The GAE advantage of one token, resampled: its variance and its bias against Monte Carlo.

    For every prompt, sample one anchor response. For each of its tokens t except the last, the state
    s_t (prompt + tokens before t) and the token a_t are now fixed; sample `samples` continuations
    after a_t, score each full response, read the critic's values along it, and compute A_t^lambda
    (before whitening) for every lambda. Over the continuations of one anchor:

        variance_lambda = Var_k[A_t^lambda]                         how much the estimate moves
        bias_lambda     = Mean_k[A_t^lambda] - Mean_k[A_t^1]         lambda = 1 (Monte Carlo) is unbiased
        bias_se         = Std_k[A_t^lambda - A_t^1] / sqrt(samples)  the noise of that bias estimate

    Transitions are deterministic in an LLM (the next state is the prefix plus the token), so with
    lambda = 0, A_t = r_t + gamma V(s_{t+1}) - V(s_t) does not depend on the continuation: variance 0.

    Args:
        policy, critic: a causal LM and a token-classification critic (minirl.models loaders).
        rows: prompt rows in verl's schema (`prompt`, `reward_model`, `data_source`).
        lams: the lambdas to compare (1.0 is added if missing: it is the reference).
        samples: continuations per anchor (>= 2).
    Returns:
        {"lams": [...], "variance", "bias_rms", "bias_se_rms": lists over lams (means / root-mean-squares
        over anchors), "per_anchor_variance", "per_anchor_bias": (len(lams), anchors) tensors,
        "positions": (anchors,) token index t of each anchor, "anchors": number of anchors}.
    """
    if samples < 2:
        raise ValueError(f"samples must be >= 2 to measure a variance (got {samples}).")
    lams = sorted(set(lams) | {1.0})
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    anchors = sample_responses(policy, tokenizer, rows, 1, response_length, temperature, seed, reward_fn=reward_fn)
    prompt_len = anchors["input_ids"].shape[1] - response_length
    lengths = anchors["response_mask"].sum(-1).tolist()
    # One "prompt" per (anchor, t): the prompt's real tokens followed by the anchor's tokens 0..t.
    contexts, owners, positions = [], [], []
    for i, length in enumerate(lengths):
        prompt = anchors["input_ids"][i, :prompt_len][anchors["attention_mask"][i, :prompt_len].bool()]
        for t in range(int(length) - 1):
            contexts.append(torch.cat([prompt, anchors["responses"][i, : t + 1]]))
            owners.append(i)
            positions.append(t)
    if not contexts:
        raise ValueError("every anchor response has a single token; nothing to resample.")
    width = max(len(c) for c in contexts)
    context_ids = torch.full((len(contexts), width), pad, dtype=torch.long)
    context_mask = torch.zeros_like(context_ids)
    for j, c in enumerate(contexts):
        context_ids[j, width - len(c):], context_mask[j, width - len(c):] = c, 1
    advantages = {lam: [] for lam in lams}
    for start in range(0, len(contexts), max(1, chunk // samples)):
        stop = min(len(contexts), start + max(1, chunk // samples))
        out = generate_sequences(policy, context_ids[start:stop], context_mask[start:stop], eos, pad,
                                 response_length - 1, n=samples, temperature=temperature,
                                 seeds=_seeds(seed + 1, start, (stop - start) * samples))
        rows_here, responses = [], []
        for j in range(start, stop):
            t, i = positions[j], owners[j]
            prefix = anchors["responses"][i, : t + 1]
            for k in range(samples):  # the anchor's tokens 0..t, then the continuation, cut to response_length
                cont = out["responses"][(j - start) * samples + k, : response_length - t - 1]
                responses.append(torch.cat([prefix, cont]))
                rows_here.append((i, t))
        responses = torch.stack(responses)
        owner = torch.tensor([i for i, _ in rows_here])
        batch = _assemble(anchors["input_ids"][owner, :prompt_len], anchors["attention_mask"][owner, :prompt_len],
                          responses, eos)
        scores = _score(tokenizer, [rows[i] for i in owner.tolist()], responses, batch["response_mask"], reward_fn)
        values = models.compute_values(critic, batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                                       response_length, batch["response_mask"])
        column = torch.tensor([t for _, t in rows_here])
        for lam in lams:
            _, returns = compute_gae_advantage_return(scores, values, batch["response_mask"], gamma, lam)
            raw = returns - values  # A_t before whitening (returns = A + V)
            advantages[lam].append(raw[torch.arange(len(column)), column].view(stop - start, samples))
    A = {lam: torch.cat(advantages[lam]) for lam in lams}  # (anchors, samples) each
    variance = torch.stack([A[lam].var(dim=1) for lam in lams])
    bias = torch.stack([A[lam].mean(dim=1) - A[1.0].mean(dim=1) for lam in lams])
    bias_se = torch.stack([(A[lam] - A[1.0]).std(dim=1) / samples**0.5 for lam in lams])
    return {"lams": lams, "variance": variance.mean(1).tolist(), "bias_rms": bias.pow(2).mean(1).sqrt().tolist(),
            "bias_se_rms": bias_se.pow(2).mean(1).sqrt().tolist(), "per_anchor_variance": variance,
            "per_anchor_bias": bias, "positions": torch.tensor(positions), "anchors": len(positions)}


# ----------------------------------------------------------------------------------------------
# Chapter 7: the policy-gradient vector of each estimator, over many draws of the same prompts
# ----------------------------------------------------------------------------------------------


def policy_gradient_draws(policy, tokenizer, rows: Sequence[dict], n: int, draws: int, estimators: Sequence[str],
                          response_length: int = 20, temperature: float = 1.0, seed: int = 0,
                          loss_agg_mode: str = "token-mean", config: AlgorithmConfig | None = None,
                          reward_fn=None) -> dict[str, torch.Tensor]:
    """For `draws` fresh batches (n responses to each prompt), the gradient each estimator gives.

    Every estimator sees the same responses in a draw (equal samples); ReMax also gets the greedy
    response's score per prompt (`reward_baselines`, one extra rollout per prompt, computed once since
    the policy does not change), and the optimal token baselines get `old_log_probs` and `sum_pi_squared`
    (one extra forward pass per draw, only when one of them is asked for). Advantages come from
    `minirl.advantage.compute_advantage` (so any registered name works), the gradient from the trainer's
    policy loss at ratio 1 (on-policy):

        g = -d/dtheta agg_loss(-A_t * log pi(a_t | s_t))       the direction an update would move

    Args:
        policy: a causal LM; its parameters are not changed.
        rows: prompt rows in verl's schema.
        n: responses per prompt (rollout.n); draws: batches to sample.
        estimators: registered advantage-estimator names (not "gae": it needs a critic).
    Returns:
        name -> (draws, P) tensor of flattened gradients, P = number of trainable parameters.
    """
    if "gae" in estimators:
        raise ValueError("policy_gradient_draws compares critic-free estimators; gae needs values from a critic.")
    config = config or AlgorithmConfig()
    params = [p for p in policy.parameters() if p.requires_grad]
    greedy = sample_responses(policy, tokenizer, rows, 1, response_length, do_sample=False, reward_fn=reward_fn)
    baselines = greedy["token_level_scores"].sum(-1).repeat_interleave(n)
    grads = {name: [] for name in estimators}
    policy.eval()
    for draw in range(draws):
        batch = sample_responses(policy, tokenizer, rows, n, response_length, temperature, seed, draw,
                                 reward_fn=reward_fn)
        mask = batch["response_mask"]
        log_prob, _ = models.compute_log_probs(policy, batch["input_ids"], batch["attention_mask"],
                                               batch["position_ids"], response_length, temperature)
        tensors = {"token_level_rewards": batch["token_level_scores"], "response_mask": mask,
                   "reward_baselines": baselines, "old_log_probs": log_prob.detach()}
        if any("optimal_token_baseline" in name for name in estimators):  # they need sum_v pi(v)^2 per token
            with torch.no_grad():
                tensors["sum_pi_squared"] = sum_pi_squared_from_logits(models.response_logits(
                    policy, batch["input_ids"], batch["attention_mask"], batch["position_ids"], response_length,
                    temperature))
        data = DataProto(batch=tensors, non_tensor_batch={"uid": [str(i) for i in batch["index"].tolist()]})
        for name in estimators:
            advantages = compute_advantage(data, name, config.gamma, config.lam, config.norm_adv_by_std_in_grpo,
                                           config=config)["advantages"]
            loss, _ = compute_policy_loss(log_prob.detach(), log_prob, advantages, mask, loss_agg_mode)
            flat = torch.cat([g.flatten() for g in torch.autograd.grad(loss, params, retain_graph=True)])
            grads[name].append(-flat)
    return {name: torch.stack(vectors) for name, vectors in grads.items()}


def score_norms(policy, batch: dict, response_length: int, temperature: float = 1.0) -> torch.Tensor:
    """(B,) ||d/dtheta sum_t log pi(a_t | s_t)||^2 for each response of `batch` (from `sample_responses`).

    The squared length of each response's score function: how hard one response pulls on the weights.
    One backward pass per response.
    """
    params = [p for p in policy.parameters() if p.requires_grad]
    norms = []
    for row in range(batch["responses"].shape[0]):
        inputs = {k: batch[k][row:row + 1] for k in ("input_ids", "attention_mask", "position_ids")}
        log_prob, _ = models.compute_log_probs(policy, **inputs, response_length=response_length,
                                               temperature=temperature)
        grads = torch.autograd.grad((log_prob * batch["response_mask"][row:row + 1]).sum(), params)
        norms.append(sum(g.pow(2).sum() for g in grads))
    return torch.stack(norms).detach()


def gradient_noise(draws: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """How noisy and how well aimed a stack of gradient estimates is, measured against a reference.

        scale             = <g_bar, ref> / ||ref||^2                     how much of the reference it delivers
        relative_variance = sum_d ||g_d - g_bar||^2 / (D - 1) / (scale^2 ||ref||^2)
                                                                         noise per unit of signal, scale-free
        cosine            = Mean_d cos(g_d, ref)                         one draw's alignment with the reference
        cosine_of_mean    = cos(g_bar, ref)                              where it points on average (bias)

    Dividing by the estimator's own signal along the reference (not by ||g_bar||^2, which the noise
    itself inflates when D is small) makes estimators that rescale the advantages (GRPO, REINFORCE++)
    comparable with those that do not.

    Args:
        draws: (D, P) gradient vectors, D >= 2; reference: (P,) a many-sample mean gradient from *other* draws.
    """
    if draws.shape[0] < 2:
        raise ValueError(f"gradient_noise needs at least 2 draws to measure a variance (got {draws.shape[0]}).")
    mean = draws.mean(0)
    ref_norm2 = reference.pow(2).sum()
    scale = (mean @ reference) / ref_norm2
    variance = (draws - mean).pow(2).sum(1).sum() / (draws.shape[0] - 1)
    cosine = torch.nn.functional.cosine_similarity(draws, reference.unsqueeze(0), dim=1).mean()
    of_mean = torch.nn.functional.cosine_similarity(mean, reference, dim=0)
    return {"scale": scale.item(), "relative_variance": (variance / (scale**2 * ref_norm2)).item(),
            "cosine": cosine.item(), "cosine_of_mean": of_mean.item()}


# ----------------------------------------------------------------------------------------------
# Chapter 11: token, sequence and GSPO log-ratios after one step's updates
# ----------------------------------------------------------------------------------------------


def log_probs_after_updates(policy_dir, inputs: dict, response_length: int, old_log_prob: torch.Tensor,
                            advantages: torch.Tensor, response_mask: torch.Tensor, lr: float = 2e-4,
                            mini_batches: int = 4, loss_mode: str = "vanilla") -> torch.Tensor:
    """The log-probs (B, L) of a batch's responses after one step's updates of a fresh copy of `policy_dir`.

    One AdamW step (lr `lr`) per mini-batch, `mini_batches` of them in row order, with the registered policy loss
    `loss_mode` at verl's default settings against `old_log_prob` (the sampler's): what the actor does with
    ppo_epochs=1. `inputs` holds input_ids, attention_mask, position_ids (B, P+L); the other tensors are (B, L).
    Chapter 11 compares these with `old_log_prob`: the token, sequence and GSPO ratios of one step.
    """
    from minirl.config import ActorConfig
    from minirl.policy_loss import get_policy_loss_fn, policy_loss_view

    trained = models.load_policy(policy_dir)
    optimizer = torch.optim.AdamW(trained.parameters(), lr=lr)
    loss_fn, config = get_policy_loss_fn(loss_mode), policy_loss_view(ActorConfig(), {})
    for rows in torch.arange(len(response_mask)).chunk(mini_batches):
        log_prob, _ = models.compute_log_probs(trained, **{k: v[rows] for k, v in inputs.items()},
                                               response_length=response_length)
        loss, _ = loss_fn(old_log_prob[rows], log_prob, advantages[rows], response_mask[rows], config=config)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        return models.compute_log_probs(trained, **inputs, response_length=response_length)[0]
