"""Agent loops: every sample is its own session, as verl 0.9.1's v1 trainer rolls out.

The legacy trainer hands the engine one padded batch (`batch.repeat(n)`, then `generate_sequences`). The v1
trainer instead starts one *session* per sample: an agent loop that builds its prompt, calls an inference
server, and returns an `AgentLoopOutput`. A single-turn loop makes one call; a multi-turn loop (tools,
Chapter 13) makes several, appending observations between them. The server batches whatever requests are
waiting, as vLLM batches concurrent requests, so sessions cost no more than the padded batch did.

    verl 0.9.1                                                   minirl
    experimental/agent_loop/agent_loop.py::AgentLoopOutput       AgentLoopOutput
    experimental/agent_loop/agent_loop.py::AgentLoopBase.run     AgentLoopBase.run
    experimental/agent_loop/agent_loop.py::register              register_agent_loop
    experimental/agent_loop/single_turn_agent_loop.py            SingleTurnAgentLoop ("single_turn_agent")
    workers/rollout/llm_server.py::LLMServerClient.generate      LLMServer.generate
    trainer/ppo/v1/agent_loop_tq.py::AgentLoopWorkerTQ           AgentLoopManager.run_sessions

Sessions are asyncio coroutines. `AgentLoopManager.run_sessions` drives them to the end: whenever every live
session is waiting for the server, the server answers all waiting requests with one batched call of the rollout
engine (`minirl/workers.py::Rollout.generate_sequences`, so several processes shard it as before). Each request
carries its own sampling seed, so a session's answer does not depend on which others it was batched with.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from minirl.data import compute_position_ids, prompt_token_ids, truncate_prompt
from minirl.protocol import DataProto


@dataclass
class AgentLoopOutput:
    """One session's result, in verl's field names (lists of token ids, unpadded).

    prompt_ids: the prompt's tokens. response_ids: everything after the prompt (the model's tokens and, in a
    multi-turn loop, tool observations). response_mask: 1 for a token the model generated, 0 for an observation.
    response_logprobs: the rollout's log-prob of each response token (0 on observations). reward_score: set
    when the loop scores its own trajectory (else the reward loop scores it). num_turns: chat turns, user and
    assistant (and tool) messages counted. metrics: timings of the session. extra_fields: anything else
    (verl: min_global_steps / max_global_steps, the weight versions the answer was generated with).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    reward_score: float | None = None
    num_turns: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    extra_fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class TokenOutput:
    """The server's answer to one request: the generated tokens (up to and including EOS), their log-probs, and
    the weight version (`global_steps` of the last weight sync) that generated them."""

    token_ids: list[int]
    log_probs: list[float]
    global_steps: int


AGENT_LOOP_REGISTRY: dict[str, type[AgentLoopBase]] = {}


def register_agent_loop(name: str) -> Callable[[type], type]:
    """Class decorator: make an agent loop available by name (a dataset row's `agent_name`)."""
    def decorate(cls: type) -> type:
        if name in AGENT_LOOP_REGISTRY and AGENT_LOOP_REGISTRY[name] is not cls:
            raise ValueError(f"agent loop {name!r} is already registered ({AGENT_LOOP_REGISTRY[name].__name__})")
        AGENT_LOOP_REGISTRY[name] = cls
        return cls
    return decorate


class LLMServer:
    """An inference server for agent loops: requests wait until `serve_pending` answers them all in one batch.

    Prompts of a batch are left-padded to the longest, as the legacy trainer's prompt batch is; each row is
    sampled with its request's seed. `global_steps` is the version of the weights the engine holds, set at each
    weight sync (verl stamps it on every answer: `min_global_steps` / `max_global_steps`).
    """

    def __init__(self, rollout, pad_token_id: int, response_length: int):
        self.rollout = rollout
        self.pad_token_id = pad_token_id
        self.response_length = response_length
        self.global_steps = 0
        self.waiting: list[tuple[list[int], dict, int, asyncio.Future]] = []

    async def generate(self, prompt_ids: list[int], sampling_params: dict, seed: int) -> TokenOutput:
        """Queue a request and wait for its answer (`sampling_params`: do_sample, temperature, top_p, top_k)."""
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((prompt_ids, sampling_params, seed, future))
        return await future

    def serve_pending(self) -> None:
        """Answer every waiting request, one batched generation per distinct sampling setting (in arrival order)."""
        waiting, self.waiting = self.waiting, []
        settings = list(dict.fromkeys(tuple(sorted(params.items())) for _, params, _, _ in waiting))
        for setting in settings:
            requests = [r for r in waiting if tuple(sorted(r[1].items())) == setting]
            longest = max(len(ids) for ids, _, _, _ in requests)
            input_ids = torch.full((len(requests), longest), self.pad_token_id, dtype=torch.long)
            attention_mask = torch.zeros((len(requests), longest), dtype=torch.long)
            for row, (ids, _, _, _) in enumerate(requests):
                input_ids[row, longest - len(ids):] = torch.tensor(ids)
                attention_mask[row, longest - len(ids):] = 1
            batch = DataProto(batch={"input_ids": input_ids, "attention_mask": attention_mask,
                                     "row_seed": torch.tensor([seed for _, _, seed, _ in requests])},
                              meta_info={"response_length": self.response_length, **dict(setting)})
            out = self.rollout.generate_sequences(batch)
            lengths = out["response_mask"].sum(-1).tolist()
            for row, (_, _, _, future) in enumerate(requests):
                n = int(lengths[row])
                future.set_result(TokenOutput(out["responses"][row, :n].tolist(),
                                              out["rollout_log_probs"][row, :n].tolist(), self.global_steps))


class AgentLoopBase:
    """An agent loop: `run` turns one dataset row into one `AgentLoopOutput` (one sample of a group).

    Subclasses implement `run(sampling_params, **row)`, where the row holds the dataset fields (raw_prompt,
    reward_model, extra_info, ...) plus `uid`, `session_id` and `seed` (the session's sampling seed; a loop
    that calls the server more than once derives a seed per call, e.g. `seed + turn`).
    """

    def __init__(self, server: LLMServer, tokenizer, max_prompt_length: int, truncation: str = "error"):
        self.server = server
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.truncation = truncation

    async def run(self, sampling_params: dict, **kwargs) -> AgentLoopOutput:
        raise NotImplementedError


@register_agent_loop("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    """verl's default loop: apply the chat template, generate once, return the answer (num_turns = 2)."""

    async def run(self, sampling_params: dict, **kwargs) -> AgentLoopOutput:
        prompt_ids = truncate_prompt(prompt_token_ids(self.tokenizer, list(kwargs["raw_prompt"])),
                                     self.max_prompt_length, self.truncation)
        started = time.perf_counter()
        output = await self.server.generate(prompt_ids, sampling_params, kwargs["seed"])
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=output.token_ids, response_mask=[1] * len(output.token_ids),
            response_logprobs=output.log_probs, num_turns=2,
            metrics={"generate_sequences": time.perf_counter() - started},
            extra_fields={"min_global_steps": output.global_steps, "max_global_steps": output.global_steps,
                          "turn_scores": [], "tool_rewards": []})


class AgentLoopManager:
    """Runs sessions: one agent loop per sample, all driven together against one `LLMServer`."""

    def __init__(self, server: LLMServer, tokenizer, max_prompt_length: int, truncation: str = "error",
                 default_agent_loop: str = "single_turn_agent"):
        if default_agent_loop not in AGENT_LOOP_REGISTRY:
            raise ValueError(f"actor_rollout_ref.rollout.agent.default_agent_loop={default_agent_loop!r} is not a "
                             f"registered agent loop: {sorted(AGENT_LOOP_REGISTRY)}")
        self.server = server
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.truncation = truncation
        self.default_agent_loop = default_agent_loop

    def run_sessions(self, sessions: list[dict], sampling_params: dict) -> list[AgentLoopOutput]:
        """One `AgentLoopOutput` per session, in order. Each session dict is a row's fields plus `uid`,
        `session_id` and `seed`; its `agent_name` (or the default loop) picks the agent loop.

        Raises the first session's exception, if one failed.
        """
        if not sessions:
            raise ValueError("run_sessions got no sessions to run.")
        for session in sessions:
            name = session.get("agent_name") or self.default_agent_loop
            if name not in AGENT_LOOP_REGISTRY:
                raise ValueError(f"a row asks for agent_name={name!r}, which is not a registered agent loop: "
                                 f"{sorted(AGENT_LOOP_REGISTRY)}")
        return _run_coroutine(self._drive(sessions, sampling_params))

    async def _drive(self, sessions: list[dict], sampling_params: dict) -> list[AgentLoopOutput]:
        loops = [AGENT_LOOP_REGISTRY[s.get("agent_name") or self.default_agent_loop](
            self.server, self.tokenizer, self.max_prompt_length, self.truncation) for s in sessions]
        tasks = [asyncio.ensure_future(loop.run(dict(sampling_params), **s)) for loop, s in zip(loops, sessions)]
        while True:
            await asyncio.sleep(0)  # every session runs until it waits for the server (or for something else)
            live = [t for t in tasks if not t.done()]
            if not live:
                break
            if len(self.server.waiting) == len(live):  # all of them wait for the server: answer in one batch
                self.server.serve_pending()
            else:  # some session awaits something else (a tool): give it time
                await asyncio.wait(live, timeout=0.001)
        return [t.result() for t in tasks]


def _run_coroutine(coroutine):
    """Run a coroutine to completion, also from inside a running event loop (a Jupyter kernel has one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def outputs_to_batch(outputs: list[AgentLoopOutput], response_length: int, pad_token_id: int) -> DataProto:
    """Pad sessions into the trainer's batch: prompts left-padded to the longest, responses right-padded to
    `response_length` (the legacy rollout's layout, so both trainers see identical tensors).

    Returns a DataProto with prompts (B, P), responses (B, R), input_ids / attention_mask / position_ids
    (B, P + R), response_mask (B, R: the model's own tokens) and rollout_log_probs (B, R).
    """
    longest = max(len(o.prompt_ids) for o in outputs)
    rows = len(outputs)
    prompts = torch.full((rows, longest), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((rows, longest), dtype=torch.long)
    responses = torch.full((rows, response_length), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((rows, response_length), dtype=torch.long)
    log_probs = torch.zeros((rows, response_length), dtype=torch.float32)
    for row, o in enumerate(outputs):
        p, r = len(o.prompt_ids), min(len(o.response_ids), response_length)
        prompts[row, longest - p:] = torch.tensor(o.prompt_ids)
        prompt_mask[row, longest - p:] = 1
        responses[row, :r] = torch.tensor(o.response_ids[:r])
        response_mask[row, :r] = torch.tensor(o.response_mask[:r])
        if o.response_logprobs is not None:
            log_probs[row, :r] = torch.tensor(o.response_logprobs[:r])
    attention_mask = torch.cat([prompt_mask, _response_attention(outputs, response_length)], dim=1)
    return DataProto(batch={"prompts": prompts, "responses": responses,
                            "input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention_mask,
                            "position_ids": compute_position_ids(attention_mask), "response_mask": response_mask,
                            "rollout_log_probs": log_probs * response_mask})


def _response_attention(outputs: list[AgentLoopOutput], response_length: int) -> torch.Tensor:
    """(B, R) 1 on every response token of a session (the model's and observations), 0 on padding."""
    mask = torch.zeros((len(outputs), response_length), dtype=torch.long)
    for row, o in enumerate(outputs):
        mask[row, :min(len(o.response_ids), response_length)] = 1
    return mask
