"""verl 0.9.1's multi-turn tool loop (`verl/experimental/agent_loop/tool_agent_loop.py::ToolAgentLoop`).

One session is a conversation. The model writes; if its answer calls tools (hermes format, `tool_parser.py`), the
loop runs them, appends their results as `tool` turns rendered by the chat template, and lets the model write
again, until it answers without a call or a limit is reached:

    PENDING -> GENERATING -> (calls?) PROCESSING_TOOLS -> GENERATING -> ... -> TERMINATED

One token stream holds the whole conversation. The trainer trains on it with the response mask:

    response_mask_t = 1  for a token the model sampled (its log-prob kept from the engine)
                      0  for a token the loop inserted (tool results, template tokens between turns; log-prob 0)

so the loss, the KL, the entropy and the advantages only count the model's own tokens. The model's tokens are kept
as the ids it sampled, never re-tokenized from text (verl's Continuous Token builder); only the inserted turns are
tokenized, as the chat template's suffix after a fixed synthetic prefix (`render_new_turns`).

Limits, as verl reads them (`actor_rollout_ref.rollout.multi_turn.*`): `max_assistant_turns`, `max_user_turns`
(null: none), `max_parallel_calls` (extra calls in one answer are dropped), `max_tool_response_length` (characters,
cut on `tool_response_truncate_side`), and the response budget `data.max_response_length`: a model turn may end the
answer past it (cut at the end), and tool results that would reach it are not appended (the answer ends on the
model's tokens).
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np

from minirl.data import prompt_token_ids, render_new_turns, truncate_prompt
from minirl.tools.base import BaseTool, ToolResponse
from minirl.tools.function import FunctionTool, normalize_return
from minirl.v1.agent_loop import AgentLoopBase, AgentLoopOutput, register_agent_loop
from minirl.v1.tool_parser import FunctionCall, parse_hermes

# A tool call that runs longer than this is abandoned with an error turn (minirl's; verl 0.9.1 waits forever).
TOOL_TIMEOUT_S = 10.0


def turn_seed(seed: int, turn: int) -> int:
    """The sampling seed of the session's `turn`-th model turn (turn 0: the session's own seed)."""
    if turn == 0:
        return seed
    return int(np.random.SeedSequence([seed, 1 << 32, turn]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def truncate_text(text: str, limit: int, side: str) -> str:
    """verl's cut of a long tool result (characters): left keeps the end, right the start, middle both ends."""
    if len(text) <= limit:
        return text
    if side == "left":
        return "(truncated)..." + text[-limit:]
    if side == "right":
        return text[:limit] + "...(truncated)"
    return text[:limit // 2] + "...(truncated)..." + text[-(limit // 2):]


@register_agent_loop("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    """Multi-turn generation with tool calls (verl's ToolAgentLoop). Needs `response_length`, the
    `multi_turn` settings and `tools` (name -> BaseTool or FunctionTool) from the agent-loop manager."""

    def __init__(self, server, tokenizer, max_prompt_length: int, truncation: str = "error", *,
                 response_length: int, multi_turn, tools: dict[str, BaseTool | FunctionTool], **kwargs):
        super().__init__(server, tokenizer, max_prompt_length, truncation)
        self.response_length = response_length
        self.settings = multi_turn
        self.tools = tools
        self.schemas = [tool.tool_schema for tool in tools.values()]

    async def run(self, sampling_params: dict, **kwargs) -> AgentLoopOutput:
        settings, budget = self.settings, self.response_length
        messages = list(kwargs["raw_prompt"])
        prompt_ids = truncate_prompt(prompt_token_ids(self.tokenizer, messages, tools=self.schemas or None),
                                     self.max_prompt_length, self.truncation)
        ids, mask, log_probs = list(prompt_ids), [], []
        assistant_turns = user_turns = 0
        versions: list[int] = []
        counts = {"tool_calls": 0, "malformed_tool_calls": 0, "tool_errors": 0}
        tool_rewards: list[float] = []
        timing = {"generate_sequences": 0.0, "tool_calls": 0.0}
        tools_kwargs = kwargs.get("tools_kwargs") or (kwargs.get("extra_info") or {}).get("tools_kwargs") or {}
        while True:
            # GENERATING: the model writes one turn, from the whole stream so far, within the remaining budget
            started = time.perf_counter()
            out = await self.server.generate(ids, sampling_params, turn_seed(kwargs["seed"], assistant_turns),
                                             max_tokens=budget - len(mask))
            timing["generate_sequences"] += time.perf_counter() - started
            ids += out.token_ids
            mask += [1] * len(out.token_ids)
            log_probs += out.log_probs
            versions += [out.min_global_steps, out.max_global_steps]
            assistant_turns += 1
            out_of_turns = (settings.max_assistant_turns and assistant_turns >= settings.max_assistant_turns) or \
                (settings.max_user_turns and user_turns >= settings.max_user_turns)
            if len(mask) >= budget or out_of_turns:
                break
            content, calls, malformed = parse_hermes(self.tokenizer.decode(out.token_ids))
            counts["malformed_tool_calls"] += malformed
            messages.append({"role": "assistant", "content": content})
            if not calls:
                break
            # PROCESSING_TOOLS: run the calls together, append their results as tool turns (mask 0)
            calls = calls[:settings.max_parallel_calls]
            started = time.perf_counter()
            results = await asyncio.gather(*(self._call_tool(call, tools_kwargs) for call in calls))
            timing["tool_calls"] += time.perf_counter() - started
            counts["tool_calls"] += len(calls)
            counts["tool_errors"] += sum(failed for _, _, failed in results)
            tool_rewards += [reward for _, reward, _ in results]
            tool_messages = [{"role": "tool", "content": text} for text, _, _ in results]
            messages += tool_messages
            new_ids = render_new_turns(self.tokenizer, tool_messages, self.schemas)
            if len(mask) + len(new_ids) >= budget:  # the answer ends on the model's tokens
                break
            ids += new_ids
            mask += [int(settings.train_on_tool_responses)] * len(new_ids)  # 0: never train on injected text
            log_probs += [0.0] * len(new_ids)
            user_turns += 1
        response = ids[len(prompt_ids):]
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=response[:budget], response_mask=mask[:budget],
            response_logprobs=log_probs[:budget], num_turns=user_turns + assistant_turns + 1, metrics=timing,
            extra_fields={"min_global_steps": min(versions), "max_global_steps": max(versions), "turn_scores": [],
                          "tool_rewards": tool_rewards, **counts})

    async def _call_tool(self, call: FunctionCall, tools_kwargs: dict) -> tuple[str, float, bool]:
        """Run one call; returns (the text the model reads, the tool's reward, whether it failed). A failure is an
        error turn the model reads, with verl's wording, never an exception."""
        tool = self.tools.get(call.name)
        if tool is None:
            return f"Unknown function '{call.name}'. Available tools: {sorted(self.tools)}", 0.0, True
        try:
            arguments = json.loads(call.arguments)
        except (ValueError, TypeError) as error:
            return f"Invalid JSON in arguments for '{call.name}': {error}", 0.0, True
        try:
            if not isinstance(arguments, dict):
                raise TypeError(f"the arguments must be a JSON object, got {type(arguments).__name__}")
            if isinstance(tool, FunctionTool):
                response, reward = normalize_return(await asyncio.wait_for(tool.call(arguments), TOOL_TIMEOUT_S))
            else:
                create_kwargs = (tools_kwargs.get(call.name) or {}).get("create_kwargs") or {}
                instance, _ = await tool.create(create_kwargs=create_kwargs)
                try:
                    response, reward, _ = await asyncio.wait_for(tool.execute(instance, arguments), TOOL_TIMEOUT_S)
                finally:
                    await tool.release(instance)
        except asyncio.TimeoutError:
            return f"Error executing tool '{call.name}': no answer within {TOOL_TIMEOUT_S:g} s", 0.0, True
        except Exception as error:
            return f"Error executing tool '{call.name}': {error}", 0.0, True
        text = response.text if isinstance(response, ToolResponse) else response
        text = text if isinstance(text, str) else ("" if text is None else str(text))
        return (truncate_text(text, self.settings.max_tool_response_length, self.settings.tool_response_truncate_side),
                float(reward or 0.0), False)
