"""The standalone rollout of verl's `separate_async` mode: an inference server in a process of its own.

In `separate_async` the rollout never waits for the trainer. It runs on resources of its own (verl: the
`actor_rollout_ref.rollout.nnodes x n_gpus_per_node` pool, `LLMServerManager` with `FullyAsyncLLMServerClient`),
keeps generating while the trainer trains, and takes new weights whenever the trainer sends them (verl: the
checkpoint engine, `checkpoint_manager.update_weights`, over NCCL/NIXL/Mooncake).

Here the rollout is one CPU process, started with `multiprocessing` (forkserver), and two queues:

    trainer process                                 rollout process (serve)
    agent loops -- ("generate", id, prompt, ...) -->  LLMServer: every waiting request advances POLL_TOKENS
                <-- (id, TokenOutput) -------------  tokens per batched call; finished ones are sent back
    on_step_end -- ("weights", version, bytes) --->  loaded between two calls: a request in the middle of its
                                                     answer continues with the new weights (partial rollout)

Between two token chunks the process reads everything the trainer sent, in order, so a weight sync lands at a
chunk boundary. Which chunk that is depends on the clock: separate_async runs are not repeatable to the bit
(verl's are not either); the sampling seeds of each request are.
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing
import queue
import time
import traceback
from itertools import count
from types import SimpleNamespace

import torch

from minirl import models
from minirl.parallel import apply_thread_policy
from minirl.protocol import DataProto
from minirl.v1.agent_loop import LLMServer, TokenOutput
from minirl.workers import generate_rows

# The standalone server advances its requests this many tokens per batched call, then reads its inbox: the
# granularity at which new prompts join the batch and new weights take effect (verl's server does continuous
# batching: every token).
CHUNK_TOKENS = 4


class _Engine:
    """The rollout process's engine: its own copy of the policy (cast to rollout.dtype), sampling rows."""

    def __init__(self, model, pad_token_id: int, eos_token_id: int):
        self.model = model
        self.tokenizer = SimpleNamespace(pad_token_id=pad_token_id, eos_token_id=eos_token_id)

    @torch.no_grad()
    def generate_sequences(self, batch: DataProto) -> DataProto:
        return generate_rows(self.model, self.tokenizer, batch)


def serve(model_path: str, dtype: str, pad_token_id: int, eos_token_id: int, response_length: int,
          inbox, outbox) -> None:
    """The rollout process's main loop: read the inbox, advance every waiting request, send the finished ones.

    Messages in: ("generate", request_id, prompt_ids, sampling_params, seed, max_tokens), ("weights", version,
    state bytes), ("stop",). Messages out: (request_id, TokenOutput); ("busy", seconds) after each batched call
    (the time the process spent generating); ("error", traceback) once, before the process exits.
    """
    try:
        apply_thread_policy()
        with models.quiet_progress():
            model = models.load_policy(model_path).to(getattr(torch, dtype)).eval().requires_grad_(False)
        server = LLMServer(_Engine(model, pad_token_id, eos_token_id), pad_token_id, eos_token_id, response_length)
        while True:
            messages = [] if server.waiting else [inbox.get()]  # idle: sleep until something arrives
            while True:
                try:
                    messages.append(inbox.get_nowait())
                except queue.Empty:
                    break
            for message in messages:
                if message[0] == "stop":
                    return
                if message[0] == "weights":  # the weight sync: every token from here on uses version `version`
                    _, version, state = message
                    model.load_state_dict(torch.load(io.BytesIO(state), weights_only=True))  # copies and casts
                    server.global_steps = version
                else:
                    _, request_id, prompt_ids, sampling_params, seed, max_tokens = message
                    server.submit(prompt_ids, sampling_params, seed,
                                  lambda answer, request_id=request_id: outbox.put((request_id, answer)),
                                  max_tokens)
            if server.waiting:
                started = time.perf_counter()
                server.serve_pending(CHUNK_TOKENS)
                outbox.put(("busy", time.perf_counter() - started))
    except Exception:  # the trainer raises it (a crashed rollout would otherwise look like a hang)
        outbox.put(("error", traceback.format_exc()))


class StandaloneLLMServer:
    """The trainer's client of the rollout process; agent loops call it exactly as they call `LLMServer`.

    `generate` sends a request and waits for its answer; `serve_pending` (called by the agent-loop manager when
    every session waits for the engine) collects the answers the process has finished, waiting for at least one.
    `update_weights` is the weight sync: it returns as soon as the weights are sent (the process loads them at
    its next chunk boundary), so the trainer never waits for the rollout to finish anything.
    """

    def __init__(self, model_path: str, dtype: str, pad_token_id: int, eos_token_id: int, response_length: int,
                 poll_seconds: float = 1.0):
        # forkserver: a clean process (no threads, like spawn) that imports this module once; every rollout process
        # after the first is forked from it, already past the ~5 s import of torch and transformers
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        self.inbox, self.outbox = context.Queue(), context.Queue()
        self.process = context.Process(
            target=serve, args=(model_path, dtype, pad_token_id, eos_token_id, response_length, self.inbox,
                                self.outbox), daemon=True, name="minirl-rollout")
        self.process.start()
        self.poll_seconds = poll_seconds
        self.global_steps = 0  # the version last sent
        self.waiting: dict[int, object] = {}  # request id -> the future its agent loop awaits
        self.busy_seconds = 0.0  # the process's generating time, as reported so far
        self._arrived: list = []  # answers read by `take_busy_seconds`, handed over at the next serve_pending
        self._ids = count()

    async def generate(self, prompt_ids: list[int], sampling_params: dict, seed: int,
                       max_tokens: int | None = None) -> TokenOutput:
        """Send a request to the rollout process and wait for its answer."""
        request_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        self.inbox.put(("generate", request_id, list(prompt_ids), dict(sampling_params), seed, max_tokens))
        return await future

    def serve_pending(self, max_new_tokens: int | None = None) -> None:
        """Hand every finished answer to its agent loop, waiting until there is at least one.
        (`max_new_tokens` is the colocated engine's; the process decodes on its own.)"""
        answers, self._arrived = self._arrived, []
        if not answers:
            answers.append(self._next_answer(block=True))
        while (answer := self._next_answer(block=False)) is not None:
            answers.append(answer)
        for request_id, output in answers:
            future = self.waiting.pop(request_id, None)
            if future is not None and not future.done():  # a cancelled session's answer is dropped
                future.set_result(output)

    def _next_answer(self, block: bool):
        while True:
            try:
                answer = self.outbox.get(timeout=self.poll_seconds) if block else self.outbox.get_nowait()
            except queue.Empty:
                if not block:
                    return None
                if not self.process.is_alive():
                    raise RuntimeError(f"the rollout process stopped (exit code {self.process.exitcode}) with "
                                       f"{len(self.waiting)} requests unanswered") from None
                continue
            if answer[0] == "error":
                raise RuntimeError(f"the rollout process failed:\n{answer[1]}")
            if answer[0] == "busy":
                self.busy_seconds += answer[1]
                continue
            return answer

    def take_busy_seconds(self) -> float:
        """The process's generating seconds reported since the last call (answers read meanwhile are kept for
        their agent loops); for the Gantt chart of Chapter 12 (`minirl/rollout_busy_s`)."""
        while (answer := self._next_answer(block=False)) is not None:
            self._arrived.append(answer)
        busy, self.busy_seconds = self.busy_seconds, 0.0
        return busy

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Send the trainer's weights (a copy: later updates do not reach the process until the next sync)."""
        buffer = io.BytesIO()
        torch.save({k: v.detach().cpu() for k, v in state_dict.items()}, buffer)
        self.inbox.put(("weights", version, buffer.getvalue()))
        self.global_steps = version

    def shutdown(self) -> None:
        """Stop the process (requests still in flight are dropped)."""
        if self.process.is_alive():
            self.inbox.put(("stop",))
            self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
