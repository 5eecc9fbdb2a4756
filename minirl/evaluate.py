"""Score a policy on a dataset: generate, verify, average. Used for SFT checks and validation.

The SFT warm start checks itself with it. The trainer's validation (verl's `RayPPOTrainer._validate`)
is `minirl/trainer.py::PPOTrainer.validate`, which also shards the work over processes and names the
metrics as verl does.
"""

from __future__ import annotations

import numbers
from collections import defaultdict

import torch

from minirl import models
from minirl.data import encode_prompts
from minirl.rewards import NaiveRewardManager
from minirl.rollout import generate_sequences

RESERVED = ("acc", "score", "reward", "response_length")  # evaluate's own keys; a reward's extras never replace them


@torch.no_grad()
def evaluate(model, tokenizer, rows: list[dict], response_length: int, max_prompt_length: int = 64,
             batch_size: int = 256, do_sample: bool = False, temperature: float = 1.0,
             generator: torch.Generator | None = None) -> dict[str, float]:
    """Mean reward and accuracy of `model` on verl-schema `rows`, one response each.

    Args:
        rows: dicts with `prompt`, `data_source`, `reward_model` (as read from a verl parquet file).
        do_sample: False for greedy decoding (verl's validation default), True to sample.
    Returns:
        {"reward": mean score, "acc": mean accuracy, "response_length": mean valid length}, plus the mean of
        every other number the reward function returns (e.g. "format" and "worked" on the chain task).
    """
    if not rows:
        raise ValueError("evaluate got no rows: the validation dataset is empty.")
    reward_manager = NaiveRewardManager(tokenizer)
    scores, accs, lengths, others = [], [], [], defaultdict(list)
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        prompts = encode_prompts(tokenizer, [row["prompt"] for row in chunk], max_prompt_length)
        out = generate_sequences(model, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                                 tokenizer.pad_token_id, response_length, do_sample=do_sample,
                                 temperature=temperature, generator=generator)
        token_level_scores, extra = reward_manager({
            "responses": out["responses"], "response_mask": out["response_mask"],
            "data_source": [row["data_source"] for row in chunk],
            "reward_model": [row["reward_model"] for row in chunk]})
        scores += token_level_scores.sum(-1).tolist()
        accs += [float(a) for a in extra.get("acc", [0.0] * len(chunk))]
        lengths += out["response_length"].tolist()
        for key, values in extra.items():
            if key not in RESERVED and all(isinstance(v, numbers.Number) for v in values):
                others[key] += [float(v) for v in values]
    return {"reward": sum(scores) / len(scores), "acc": sum(accs) / len(accs),
            "response_length": sum(lengths) / len(lengths),
            **{key: sum(values) / len(values) for key, values in others.items() if len(values) == len(rows)}}


@torch.no_grad()
def measure_policy(policy, reference, tokenizer, rows: list[dict], response_length: int, reward_scorer=None,
                   samples_per_prompt: int = 1, seed: int = 0, max_prompt_length: int = 64) -> dict[str, float]:
    """Sample from a policy and measure what RLHF trades: the gold reward, the proxy and the distance moved.

    For each prompt, `samples_per_prompt` answers are sampled (temperature 1) and scored:

        gold    the rule reward of minirl.rewards (the hidden "human" preference of the preference task)
        proxy   the reward model's score (when a reward_scorer is given)
        kl      KL(policy || reference) per answer, estimated by sum_t [log pi(y_t) - log pi_ref(y_t)] on the
                policy's own samples (k1 summed over the answer: unbiased, Chapter 3 section 4)
        logp    log pi(y) of the policy's own answers (minus the entropy per answer, estimated)

    Args:
        policy, reference: causal LMs (the reference is usually the SFT warm start); tokenizer: theirs.
        rows: verl-schema rows (prompt, data_source, reward_model).
        response_length: token budget of an answer.
        reward_scorer: a `minirl.reward_model.RewardModelScorer` (loaded once by the caller), or None.
    Returns:
        {"gold", "proxy" (if a reward model), "kl", "kl_stderr", "logp", "response_length"}: means over answers.
    """
    was_training = policy.training
    prompts = encode_prompts(tokenizer, [row["prompt"] for row in rows], max_prompt_length)
    out = generate_sequences(policy, prompts["input_ids"], prompts["attention_mask"], tokenizer.eos_token_id,
                             tokenizer.pad_token_id, response_length, n=samples_per_prompt, do_sample=True,
                             generator=torch.Generator().manual_seed(seed))
    mask = out["response_mask"]
    args = (out["input_ids"], out["attention_mask"], out["position_ids"], response_length)
    policy.eval()
    policy_log_probs = models.compute_log_probs(policy, *args)[0] * mask
    log_ratio = policy_log_probs - models.compute_log_probs(reference, *args)[0] * mask
    policy.train(was_training)
    kl = log_ratio.sum(-1)
    repeated = [row for row in rows for _ in range(samples_per_prompt)]
    batch = {"responses": out["responses"], "response_mask": mask, "raw_prompt": [r["prompt"] for r in repeated],
             "data_source": [r["data_source"] for r in repeated],
             "reward_model": [r["reward_model"] for r in repeated]}
    gold, _ = NaiveRewardManager(tokenizer)(batch)
    result = {"gold": gold.sum(-1).mean().item(), "kl": kl.mean().item(),
              "kl_stderr": (kl.std() / len(kl) ** 0.5).item(), "logp": policy_log_probs.sum(-1).mean().item(),
              "response_length": mask.sum(-1).float().mean().item()}
    if reward_scorer is not None:
        proxy, _ = reward_scorer(batch)
        result["proxy"] = proxy.sum(-1).mean().item()
    return result


def evaluate_against_reference(policy_dir, reference_dir, rows: list[dict], response_length: int,
                               reward_scorer=None, samples_per_prompt: int = 1, seed: int = 0) -> dict[str, float]:
    """`measure_policy` for model directories (a checkpoint's actor, a DPO output, the SFT warm start).

    reward_scorer: a `minirl.reward_model.RewardModelScorer` for the proxy, or None (evaluation takes a scorer
    rather than importing the reward model's module, so the package's imports run one way).
    """
    tokenizer = models.load_tokenizer(policy_dir)
    return measure_policy(models.load_policy(policy_dir), models.load_policy(reference_dir), tokenizer, rows,
                          response_length, reward_scorer, samples_per_prompt, seed)


class ModelEngine:
    """A rollout engine over a plain model: what `LLMServer` calls (`generate_sequences` on a DataProto of
    left-padded prompts, `row_seed` and the sampling settings in meta_info)."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer

    def generate_sequences(self, prompts):
        from minirl.workers import generate_rows

        return generate_rows(self.model, self.tokenizer, prompts)


@torch.no_grad()
def run_agent_loops(model, tokenizer, rows: list[dict], response_length: int, max_prompt_length: int,
                    multi_turn, tools: dict, do_sample: bool = False, seed: int = 0) -> list:
    """Run `rows` through their own agent loops (`agent_name`, else `tool_agent`) on a plain model: one session
    per row, row i seeded `seed + i`, at temperature 1 when sampling.

    Args:
        multi_turn: the loop's limits (a `minirl.config.MultiTurnConfig`).
        tools: name -> tool (`minirl.tools.load_all_tools`).
    Returns:
        One `minirl.v1.agent_loop.AgentLoopOutput` per row, in order.
    """
    from minirl.v1.agent_loop import AgentLoopManager, LLMServer
    from minirl.v1.tool_agent_loop import ToolAgentLoop  # noqa: F401  (registers "tool_agent")

    if not rows:
        raise ValueError("run_agent_loops got no rows: the validation dataset is empty.")
    server = LLMServer(ModelEngine(model, tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, response_length)
    manager = AgentLoopManager(server, tokenizer, max_prompt_length, "error", "tool_agent",
                               response_length=response_length, multi_turn=multi_turn, tools=tools)
    sessions = [{**row, "raw_prompt": row["prompt"], "uid": str(i), "session_id": 0, "seed": seed + i}
                for i, row in enumerate(rows)]
    try:
        return manager.run_sessions(sessions, {"do_sample": do_sample, "temperature": 1.0, "top_p": 1.0,
                                               "top_k": -1})
    finally:
        manager.shutdown()


def evaluate_agent_loops(model, tokenizer, rows: list[dict], response_length: int, max_prompt_length: int,
                         multi_turn, tools: dict, do_sample: bool = False, seed: int = 0) -> dict[str, float]:
    """`evaluate` for rows that run an agent loop (the tool task): `run_agent_loops`, then each conversation
    scored whole, as the trainer scores it.

    Returns:
        {"acc", "reward", "response_length" (all response tokens, tool results included), "num_turns",
        "tool_calls", "malformed_tool_calls", "tool_errors"}: means over the rows.
    """
    from minirl.v1.agent_loop import outputs_to_batch

    outputs = run_agent_loops(model, tokenizer, rows, response_length, max_prompt_length, multi_turn, tools,
                              do_sample, seed)
    batch = outputs_to_batch(outputs, response_length, tokenizer.pad_token_id)
    attended = batch["attention_mask"][:, -response_length:]
    scores, extra = NaiveRewardManager(tokenizer)({
        "responses": batch["responses"], "response_mask": batch["response_mask"],
        "response_attention_mask": attended, "data_source": [row["data_source"] for row in rows],
        "reward_model": [row["reward_model"] for row in rows]})
    mean = lambda values: float(sum(values) / len(values))  # noqa: E731
    return {"acc": mean([float(a) for a in extra.get("acc", [0.0] * len(rows))]),
            "reward": mean(scores.sum(-1).tolist()), "response_length": mean(attended.sum(-1).tolist()),
            "num_turns": mean([o.num_turns for o in outputs]),
            **{key: mean([o.extra_fields[key] for o in outputs])
               for key in ("tool_calls", "malformed_tool_calls", "tool_errors")}}
