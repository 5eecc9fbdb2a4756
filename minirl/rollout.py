"""The rollout engine: sample `n` responses per prompt and record the log-probs of what was sampled.

verl hands generation to an inference engine (vLLM, SGLang, or `verl/workers/rollout/hf_rollout.py`
for Hugging Face models). This file is a small engine of the same kind, readable in one sitting:
a KV-cached decode loop that applies temperature, top-k and top-p, samples (or picks greedily),
and keeps `rollout_log_probs`, the log-probability of each sampled token under the distribution it
was actually sampled from. The trainer later recomputes log-probs on its side; comparing the two is
the subject of Chapter 9 (rollout correction).

Output keys follow verl's batch: `prompts`, `responses`, `input_ids`, `attention_mask`,
`position_ids`, `response_mask`, `rollout_log_probs`, plus `response_length`.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

from minirl.core import get_response_mask
from minirl.data import compute_position_ids


def apply_top_k_top_p(logits: torch.Tensor, top_k: int = -1, top_p: float = 1.0) -> torch.Tensor:
    """Mask (to -inf) the tokens outside the top-k and outside the top-p nucleus. (B, V) -> (B, V).

    top_k <= 0 and top_p >= 1 disable each filter (verl's convention: top_k=-1). The nucleus keeps
    the smallest set of most likely tokens whose probability reaches top_p (at least one token).
    """
    if top_k > 0 and top_k < logits.shape[-1]:
        kth_largest = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative - sorted_logits.softmax(dim=-1) >= top_p  # mass before this token already >= p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _forward_with_cache(model, cache, **inputs):
    """One forward pass that reads and extends the KV cache; returns (last-position logits, cache).

    transformers 5 calls the cache argument `cache`; earlier versions call it `past_key_values`. (A PEFT model passes
    keyword arguments through to the model it wraps, so that model's signature decides.)
    """
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    name = "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"
    out = model(**inputs, use_cache=True, **({name: cache} if cache is not None else {}))
    new_cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
    return out.logits[:, -1, :].float(), new_cache


@torch.no_grad()
def generate_sequences(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    eos_token_id: int,
    pad_token_id: int,
    response_length: int,
    n: int = 1,
    do_sample: bool = True,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = -1,
    generator: torch.Generator | None = None,
    seeds: list[int] | None = None,
) -> dict[str, torch.Tensor]:
    """Sample `n` responses for each left-padded prompt.

    Each prompt is repeated n times with its copies adjacent (verl's `repeat(n, interleave=True)`),
    so rows [i*n, (i+1)*n) answer prompt i. Decoding stops at EOS (or after `response_length`
    tokens); everything after a row's EOS is `pad_token_id`.

        sampling:  p = softmax(apply_top_k_top_p(logits / temperature)),  token ~ p
        greedy:    token = argmax(logits),  p = softmax(logits)
        rollout_log_probs_t = log p(token_t)          (0 after the response ends)

    A token is drawn by inverse-CDF sampling: with u_t ~ Uniform(0, 1) drawn for the row in
    advance, token_t = the first token whose cumulative probability exceeds u_t. One uniform per
    row and step (not one per vocabulary entry) lets each row have its own seed: a row's response
    then depends only on its seed, not on which other rows share the batch or the process.

    Args:
        model: a Hugging Face causal LM (e.g. from minirl.models.load_policy).
        input_ids, attention_mask: (B, P) left-padded prompts.
        eos_token_id, pad_token_id: may be equal; the masks are built from EOS, not from padding.
        response_length: maximum new tokens (verl's `data.max_response_length`).
        n: responses per prompt (`actor_rollout_ref.rollout.n`), >= 1.
        do_sample, temperature, top_p, top_k: `rollout.do_sample/temperature/top_p/top_k`.
        generator: torch RNG (CPU) for the uniforms of all rows (seeded runs).
        seeds: one seed per output row (B' of them) instead of `generator`: row i's uniforms come
            from its own generator, so its sample does not depend on the batch it was part of
            (the trainer seeds each row from (rollout.seed, data.seed, step, global row)).
    Returns:
        dict of tensors, with R = response_length and B' = B * n:
        prompts (B', P), responses (B', R), input_ids (B', P+R), attention_mask (B', P+R),
        position_ids (B', P+R), response_mask (B', R), rollout_log_probs (B', R) float32,
        response_length (B',) number of valid response tokens.
    """
    if n < 1:
        raise ValueError(f"rollout.n must be >= 1, got {n}.")
    if response_length < 1:
        raise ValueError(f"response_length must be >= 1, got {response_length}.")
    if do_sample and temperature <= 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature}; use do_sample=False for greedy.")
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2 or input_ids.shape[0] == 0:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} must "
                         "be the same non-empty (batch, prompt_length) shape.")
    batch = input_ids.shape[0] * n
    if seeds is not None and len(seeds) != batch:
        raise ValueError(f"seeds has {len(seeds)} entries for {batch} output rows (one per prompt and sample).")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    prompts = input_ids.repeat_interleave(n, dim=0).to(device)
    prompt_mask = attention_mask.repeat_interleave(n, dim=0).to(device)
    if do_sample:  # drawn on the CPU in float64, so a seed gives the same response on any device
        if seeds is not None:
            uniforms = torch.stack([torch.rand(response_length, dtype=torch.float64,
                                               generator=torch.Generator().manual_seed(int(s))) for s in seeds])
        else:
            uniforms = torch.rand((batch, response_length), dtype=torch.float64, generator=generator)
        uniforms = uniforms.to(device)

    # Prefill: run the whole prompt once, keep the KV cache.
    mask = prompt_mask.clone()
    positions = compute_position_ids(mask)
    logits, cache = _forward_with_cache(model, None, input_ids=prompts, attention_mask=mask, position_ids=positions)
    next_position = positions[:, -1] + 1

    tokens = torch.full((batch, response_length), pad_token_id, dtype=torch.long, device=device)
    log_probs = torch.zeros((batch, response_length), dtype=torch.float32, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    for t in range(response_length):
        if do_sample:
            log_p = F.log_softmax(apply_top_k_top_p(logits / temperature, top_k, top_p), dim=-1)
            cdf = log_p.double().exp().cumsum(dim=-1)
            u = uniforms[:, t : t + 1] * cdf[:, -1:]  # scaled by the total so rounding cannot overshoot
            # right=True: the first token with cdf > u, so a token of probability 0 is never drawn
            token = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=logits.shape[-1] - 1)
        else:
            log_p = F.log_softmax(logits, dim=-1)
            token = log_p.argmax(dim=-1)
        token = torch.where(finished, torch.full_like(token, pad_token_id), token)
        tokens[:, t] = token
        log_probs[:, t] = torch.where(finished, 0.0, log_p.gather(-1, token[:, None]).squeeze(-1))
        finished |= token == eos_token_id
        if finished.all() or t == response_length - 1:
            break
        # Decode one step: the new token attends to the prompt and to what was generated so far.
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype, device=device)], dim=1)
        logits, cache = _forward_with_cache(model, cache, input_ids=token[:, None], attention_mask=mask,
                                            position_ids=next_position[:, None])
        next_position = next_position + 1
    model.train(was_training)

    response_mask = get_response_mask(tokens, eos_token_id, dtype=prompt_mask.dtype)
    full_mask = torch.cat([prompt_mask, response_mask], dim=1)
    return {
        "prompts": prompts,
        "responses": tokens,
        "input_ids": torch.cat([prompts, tokens], dim=1),
        "attention_mask": full_mask,
        "position_ids": compute_position_ids(full_mask),
        "response_mask": response_mask,
        "rollout_log_probs": log_probs * response_mask,
        "response_length": response_mask.sum(dim=-1),
    }
