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

import numpy as np
import torch

from minirl.data import compute_position_ids, left_pad, prompt_token_ids, truncate_prompt
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
    the oldest and newest weight versions (`global_steps` of a weight sync) that generated them: a partial
    rollout, resumed after a sync, spans several."""

    token_ids: list[int]
    log_probs: list[float]
    min_global_steps: int
    max_global_steps: int


@dataclass
class _Request:
    """A request in the server: its prompt, settings and seed, and what has been generated so far."""

    prompt_ids: list[int]
    sampling_params: dict
    seed: int
    on_finish: Callable[[TokenOutput], None]
    max_tokens: int
    token_ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)


def continuation_seed(seed: int, generated: int) -> int:
    """The seed of a resumed request's next piece: a fresh stream for each (seed, tokens so far); none resumed
    keeps the request's own seed."""
    if generated == 0:
        return seed
    return int(np.random.SeedSequence([seed, generated]).generate_state(2, np.uint64)[0] >> np.uint64(1))


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
    """An inference server for agent loops: requests wait until `serve_pending` advances them all in one batch.

    Prompts of a batch are left-padded to the longest, as the legacy trainer's prompt batch is; each row is
    sampled with its request's seed. `global_steps` is the version of the weights the engine holds, set at each
    weight sync; every answer carries the versions that generated it (verl: `min_global_steps`,
    `max_global_steps`).
    """

    def __init__(self, rollout, pad_token_id: int, eos_token_id: int, response_length: int):
        self.rollout = rollout
        self.pad_token_id = pad_token_id
        self.eos_token_id = eos_token_id
        self.response_length = response_length
        self.global_steps = 0
        self.waiting: list[_Request] = []

    async def generate(self, prompt_ids: list[int], sampling_params: dict, seed: int,
                       max_tokens: int | None = None) -> TokenOutput:
        """Queue a request and wait for its answer (`sampling_params`: do_sample, temperature, top_p, top_k;
        `max_tokens`: at most this many new tokens, default the response length)."""
        future = asyncio.get_running_loop().create_future()
        self.submit(prompt_ids, sampling_params, seed, future.set_result, max_tokens)
        return await future

    def submit(self, prompt_ids: list[int], sampling_params: dict, seed: int,
               on_finish: Callable[[TokenOutput], None], max_tokens: int | None = None) -> None:
        """Queue a request; `on_finish(answer)` is called by the `serve_pending` call that finishes it (the
        standalone rollout process answers its requests this way, `minirl/v1/rollout_server.py`)."""
        budget = self.response_length if max_tokens is None else max(1, min(max_tokens, self.response_length))
        self.waiting.append(_Request(list(prompt_ids), sampling_params, seed, on_finish, budget))

    def serve_pending(self, max_new_tokens: int | None = None) -> None:
        """Advance every waiting request by up to `max_new_tokens` tokens (None: to its end), one batched generation
        per distinct sampling setting, in arrival order.

        A request that is not finished (no EOS, budget left) keeps its tokens and stays waiting. The next call
        resumes it from prompt + tokens so far, with the weights the engine holds then: verl's partial rollout
        (`workers/rollout/llm_server.py::FullyAsyncLLMServerClient.generate`, which re-sends the prompt and the
        generated tokens after an abort, with the remaining token budget).
        """
        waiting, self.waiting = self.waiting, []
        settings = list(dict.fromkeys(tuple(sorted(r.sampling_params.items())) for r in waiting))
        length = self.response_length if max_new_tokens is None else max_new_tokens
        for setting in settings:
            requests = [r for r in waiting if tuple(sorted(r.sampling_params.items())) == setting]
            input_ids, attention_mask = left_pad([r.prompt_ids + r.token_ids for r in requests], self.pad_token_id)
            seeds = [continuation_seed(r.seed, len(r.token_ids)) for r in requests]
            batch = DataProto(batch={"input_ids": input_ids, "attention_mask": attention_mask,
                                     "row_seed": torch.tensor(seeds)},
                              meta_info={"response_length": length, **dict(setting)})
            out = self.rollout.generate_sequences(batch)
            lengths = out["response_mask"].sum(-1).tolist()
            for row, request in enumerate(requests):
                budget = request.max_tokens - len(request.token_ids)
                n = min(int(lengths[row]), budget)
                new = out["responses"][row, :n].tolist()
                request.token_ids += new
                request.log_probs += out["rollout_log_probs"][row, :n].tolist()
                request.versions.append(self.global_steps)
                if new[-1] == self.eos_token_id or len(request.token_ids) >= request.max_tokens:
                    request.on_finish(TokenOutput(request.token_ids, request.log_probs,
                                                  min(request.versions), max(request.versions)))
                else:
                    self.waiting.append(request)


class AgentLoopBase:
    """An agent loop: `run` turns one dataset row into one `AgentLoopOutput` (one sample of a group).

    Subclasses implement `run(sampling_params, **row)`, where the row holds the dataset fields (raw_prompt,
    reward_model, extra_info, ...) plus `uid`, `session_id` and `seed` (the session's sampling seed; a loop
    that calls the server more than once derives a seed per call, e.g. `seed + turn`).
    """

    def __init__(self, server: LLMServer, tokenizer, max_prompt_length: int, truncation: str = "error", **kwargs):
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
            extra_fields={"min_global_steps": output.min_global_steps, "max_global_steps": output.max_global_steps,
                          "turn_scores": [], "tool_rewards": []})


class AgentLoopManager:
    """Runs sessions: one agent loop per sample, all driven together against one `LLMServer`.

    The sessions live on an event loop of the manager's own (in a thread of its own, so a notebook's loop does
    not get in the way). Between two `drive` calls they stay where they were: the asynchronous trainer starts
    sessions, drives them while it waits for a batch, and leaves the rest in flight while it trains.
    """

    def __init__(self, server: LLMServer, tokenizer, max_prompt_length: int, truncation: str = "error",
                 default_agent_loop: str = "single_turn_agent", **loop_kwargs):
        if default_agent_loop not in AGENT_LOOP_REGISTRY:
            raise ValueError(f"actor_rollout_ref.rollout.agent.default_agent_loop={default_agent_loop!r} is not a "
                             f"registered agent loop: {sorted(AGENT_LOOP_REGISTRY)}")
        self.server = server
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.truncation = truncation
        self.default_agent_loop = default_agent_loop
        self.loop_kwargs = loop_kwargs  # what a loop needs beyond the server (the tool loop: tools, limits)
        self.loop = asyncio.new_event_loop()
        self.thread = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.live: list[asyncio.Task] = []

    def start_sessions(self, sessions: list[dict], sampling_params: dict,
                       on_done: Callable[[dict, AgentLoopOutput], None] | None = None) -> list[asyncio.Task]:
        """Create one agent-loop task per session (it runs at the next `drive`). Each session dict is a row's
        fields plus `uid`, `session_id` and `seed`; its `agent_name` (or the default loop) picks the loop.
        `on_done(session, output)` is called as each session finishes."""
        if not sessions:
            raise ValueError("start_sessions got no sessions to run.")
        for session in sessions:
            name = session.get("agent_name") or self.default_agent_loop
            if name not in AGENT_LOOP_REGISTRY:
                raise ValueError(f"a row asks for agent_name={name!r}, which is not a registered agent loop: "
                                 f"{sorted(AGENT_LOOP_REGISTRY)}")
        tasks = []
        for session in sessions:
            loop = AGENT_LOOP_REGISTRY[session.get("agent_name") or self.default_agent_loop](
                self.server, self.tokenizer, self.max_prompt_length, self.truncation, **self.loop_kwargs)
            task = self.loop.create_task(loop.run(dict(sampling_params), **session))
            if on_done is not None:
                task.add_done_callback(lambda t, s=session: not t.cancelled() and t.exception() is None
                                       and on_done(s, t.result()))
            tasks.append(task)
        self.live += tasks
        return tasks

    def drive(self, until: Callable[[], bool] | None = None, max_new_tokens: int | None = None) -> None:
        """Run the sessions. Whenever every live session waits for the server, stop if `until()` says so, else let
        the server advance all waiting requests (by `max_new_tokens` tokens each; None: to their end). Returns
        when `until()` is true or no session is left. Raises the first failed session's exception."""
        self.thread.submit(self.loop.run_until_complete, self._drive(until, max_new_tokens)).result()

    async def _drive(self, until, max_new_tokens) -> None:
        while True:
            await asyncio.sleep(0)  # every session runs until it waits for the server (or for something else)
            for task in self.live:
                if task.done() and task.exception() is not None:
                    raise task.exception()
            self.live = [t for t in self.live if not t.done()]
            if not self.live or (len(self.server.waiting) == len(self.live) and until is not None and until()):
                return
            if len(self.server.waiting) == len(self.live):  # all of them wait for the server: advance them
                self.server.serve_pending(max_new_tokens)
            else:  # some session awaits something else (a tool), or until() just started new ones
                await asyncio.wait(self.live, timeout=0.001)

    def shutdown(self) -> None:
        """Cancel the sessions still in flight (a run that ends leaves the asynchronous rollout's behind) and close
        the event loop."""
        for task in self.live:
            task.cancel()
        if self.live:
            self.thread.submit(self.loop.run_until_complete,
                               asyncio.gather(*self.live, return_exceptions=True)).result()
        self.live = []
        self.thread.submit(self.loop.close).result()
        self.thread.shutdown()

    def run_sessions(self, sessions: list[dict], sampling_params: dict) -> list[AgentLoopOutput]:
        """Start `sessions`, run them to their end, return one `AgentLoopOutput` per session, in order."""
        tasks = self.start_sessions(sessions, sampling_params)
        self.drive()
        return [t.result() for t in tasks]


def outputs_to_batch(outputs: list[AgentLoopOutput], response_length: int, pad_token_id: int) -> DataProto:
    """Pad sessions into the trainer's batch: prompts left-padded to the longest, responses right-padded to
    `response_length` (the legacy rollout's layout, so both trainers see identical tensors).

    Returns a DataProto with prompts (B, P), responses (B, R), input_ids / attention_mask / position_ids
    (B, P + R), response_mask (B, R: the model's own tokens) and rollout_log_probs (B, R).
    """
    prompts, prompt_mask = left_pad([o.prompt_ids for o in outputs], pad_token_id)
    rows = len(outputs)
    responses = torch.full((rows, response_length), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((rows, response_length), dtype=torch.long)
    log_probs = torch.zeros((rows, response_length), dtype=torch.float32)
    attended = torch.zeros((rows, response_length), dtype=torch.long)  # every response token, observations too
    for row, o in enumerate(outputs):
        r = min(len(o.response_ids), response_length)
        attended[row, :r] = 1
        responses[row, :r] = torch.tensor(o.response_ids[:r])
        response_mask[row, :r] = torch.tensor(o.response_mask[:r])
        if o.response_logprobs is not None:
            log_probs[row, :r] = torch.tensor(o.response_logprobs[:r])
    attention_mask = torch.cat([prompt_mask, attended], dim=1)
    return DataProto(batch={"prompts": prompts, "responses": responses,
                            "input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention_mask,
                            "position_ids": compute_position_ids(attention_mask), "response_mask": response_mask,
                            "rollout_log_probs": log_probs * response_mask})

