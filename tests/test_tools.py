"""Multi-turn tool rollouts (minirl/tools/, minirl/v1/tool_parser.py, minirl/v1/tool_agent_loop.py): verl 0.9.1's
hermes parsing, tool declarations, the loop's state machine and limits, error turns, and the response mask token by
token."""

import asyncio
import random

import pytest
import torch

from minirl import data, models, sft
from minirl.core import agg_loss
from minirl.tools import BaseTool, ToolResponse, function_tool, load_all_tools, load_function_tools_from_path
from minirl.v1 import tool_agent_loop
from minirl.v1.agent_loop import TokenOutput, outputs_to_batch
from minirl.v1.tool_agent_loop import ToolAgentLoop, render_new_turns, truncate_text
from minirl.v1.tool_parser import parse_hermes

# ----------------------------------------------------------------------------------------------
# The hermes format
# ----------------------------------------------------------------------------------------------

def test_hermes_parses_calls_and_drops_malformed_blocks_as_verl_does():
    text = 'Sum it. <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call> then ' \
           '<tool_call>{"name": "add", "arguments": {"a": 3</tool_call><tool_call>{"arguments": {}}</tool_call>' \
           '<tool_call>{"name": "neg", "arguments": "5"}</tool_call></s>'
    content, calls, dropped = parse_hermes(text)
    assert [(c.name, c.arguments) for c in calls] == [("add", '{"a": 1, "b": 2}'), ("neg", '"5"')]
    assert dropped == 2  # bad JSON, no name
    assert content == "Sum it.  then </s>"
    assert parse_hermes("no call here") == ("no call here", [], 0)
    assert parse_hermes('<tool_call>{"name": "add"') == ('<tool_call>{"name": "add"', [], 1)  # never closed


# ----------------------------------------------------------------------------------------------
# Declaring tools
# ----------------------------------------------------------------------------------------------

def test_function_tool_infers_the_schema_from_the_signature_and_docstring():
    @function_tool("test_multiply")
    def multiply(a: int, b: float = 1.0) -> float:
        """Multiply two numbers.

        Args:
            a: the first factor.
            b: the second factor.
        """
        return a * b

    from minirl.tools import FUNCTION_TOOL_REGISTRY

    schema = FUNCTION_TOOL_REGISTRY["test_multiply"].tool_schema["function"]
    assert schema["name"] == "test_multiply" and schema["description"] == "Multiply two numbers."
    assert schema["parameters"]["properties"] == {"a": {"type": "integer", "description": "the first factor."},
                                                  "b": {"type": "number", "description": "the second factor."}}
    assert schema["parameters"]["required"] == ["a"]
    with pytest.raises(ValueError, match="type hint and an 'Args:' line"):
        function_tool("test_undocumented")(lambda x: x)


def test_a_tool_file_that_fails_to_import_is_a_start_up_error_naming_the_file(tmp_path):
    broken = tmp_path / "broken_tools.py"
    broken.write_text("import not_a_module_anywhere\n")
    with pytest.raises(ValueError, match=f"{broken}.*failed to import.*ModuleNotFoundError"):
        load_function_tools_from_path(broken)
    empty = tmp_path / "no_tools.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ValueError, match="registers no tool"):
        load_function_tools_from_path(empty)
    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - class_name: tests.test_tools.Lookup\n    config: {}\n")
    with pytest.raises(ValueError, match=r"tools\[0\]: config.type must be native"):
        load_all_tools(str(config), None)


class Lookup(BaseTool):
    """A stateful tool for the tests: a city's population from a table given at create time."""

    async def create(self, instance_id=None, **kwargs):
        self.table = kwargs.get("create_kwargs", {}).get("table", {"paris": 2})
        return "one", ToolResponse()

    async def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(text=str(self.table[parameters["city"]])), 1.0, {}


LOOKUP_YAML = """
tools:
  - class_name: tests.test_tools.Lookup
    config: {type: native}
    tool_schema:
      type: function
      function:
        name: lookup
        description: a city's population in millions
        parameters: {type: object, properties: {city: {type: string, description: the city}}, required: [city]}
"""

TOOL_FILE = '''
import time
from minirl.tools import function_tool

@function_tool
def slow(x: int) -> int:
    """Sleep, then answer.

    Args:
        x: a number.
    """
    time.sleep(1.0)
    return x

@function_tool
def shout(word: str) -> dict:
    """Shout a word back (a dict: sent as JSON).

    Args:
        word: the word.
    """
    if word == "boom":
        raise RuntimeError("the tool broke")
    return {"echo": word.upper() * 40}
'''


# ----------------------------------------------------------------------------------------------
# The loop, with a scripted engine
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer():
    tok = models.build_tokenizer()
    tok.chat_template = models.TOOL_CHAT_TEMPLATE
    return tok


class ScriptedServer:
    """Answers each turn with the next scripted text (its token ids, log-prob -0.01 * (position + 1))."""

    def __init__(self, tokenizer, turns):
        self.tokenizer, self.turns, self.calls = tokenizer, list(turns), []

    async def generate(self, prompt_ids, sampling_params, seed, max_tokens=None):
        self.calls.append((list(prompt_ids), seed, max_tokens))
        ids = self.tokenizer.encode(self.turns.pop(0), add_special_tokens=False)[:max_tokens]
        return TokenOutput(ids, [-0.01 * (i + 1) for i in range(len(ids))], 3, 3)


class Settings:
    max_assistant_turns = None
    max_user_turns = None
    max_parallel_calls = 1
    max_tool_response_length = 256
    tool_response_truncate_side = "middle"
    train_on_tool_responses = False


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    """The lookup tool (YAML) and the function tools (a Python file), loaded once: a run loads its tool files once."""
    folder = tmp_path_factory.mktemp("tools")
    (folder / "tools.yaml").write_text(LOOKUP_YAML)
    (folder / "function_tools.py").write_text(TOOL_FILE)
    tools = {t.name: t for t in load_all_tools(str(folder / "tools.yaml"), str(folder / "function_tools.py"))}
    # `add` is the book's calculator: one process registers a tool name once (as verl's registry does), and a
    # worker that trained Chapter 13's task has already loaded it
    return {**tools, **{t.name: t for t in load_function_tools_from_path(data.TOOL_FILE)}}


def run_loop(tokenizer, tools, turns, response_length=200, settings=Settings, **row):
    server = ScriptedServer(tokenizer, turns)
    loop = ToolAgentLoop(server, tokenizer, 64, response_length=response_length, multi_turn=settings, tools=tools)
    session = {"raw_prompt": [{"role": "user", "content": "17+25=?"}], "seed": 7, **row}
    return asyncio.run(loop.run({"do_sample": True}, **session)), server


CALL = '<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call></s>'


def test_the_response_mask_is_one_on_the_models_tokens_and_zero_on_the_tool_turn(tokenizer, tools):
    first, second = CALL.format(name="add", arguments='{"a": 17, "b": 25}'), "#### 42</s>"
    out, server = run_loop(tokenizer, tools, [first, second])
    first_ids = tokenizer.encode(first, add_special_tokens=False)
    second_ids = tokenizer.encode(second, add_special_tokens=False)
    observation = render_new_turns(tokenizer, [{"role": "tool", "content": "42"}], None)
    assert tokenizer.decode(observation) == "<|user|><tool_response>42</tool_response><|assistant|>"
    assert out.response_ids == first_ids + observation + second_ids  # the sampled ids, never re-tokenized
    assert out.response_mask == [1] * len(first_ids) + [0] * len(observation) + [1] * len(second_ids)
    assert out.response_logprobs == ([-0.01 * (i + 1) for i in range(len(first_ids))] + [0.0] * len(observation)
                                     + [-0.01 * (i + 1) for i in range(len(second_ids))])
    assert out.num_turns == 4  # user prompt, model, tool, model
    assert out.extra_fields["tool_calls"] == 1 and out.extra_fields["tool_errors"] == 0
    assert server.calls[1][0] == out.prompt_ids + first_ids + observation  # the second turn sees the result
    assert server.calls[1][2] == 200 - len(first_ids) - len(observation)  # and only the budget left
    assert server.calls[0][1] != server.calls[1][1]  # each model turn samples with its own seed

    # what the update trains on: the trainer's batch keeps the mask, and a masked loss ignores the tool's tokens
    batch = outputs_to_batch([out], 200, tokenizer.pad_token_id)
    mask = batch["response_mask"][0]
    assert mask[:len(out.response_mask)].tolist() == out.response_mask and mask[len(out.response_mask):].sum() == 0
    assert batch["attention_mask"][0, -200:].sum() == len(out.response_ids)  # tool tokens are still attended to
    log_prob = torch.zeros(1, 200, requires_grad=True)
    agg_loss(-log_prob, batch["response_mask"], "token-mean").backward()
    assert torch.equal(log_prob.grad[0] != 0, mask.bool())  # no gradient reaches a tool token


def test_the_ablation_switch_trains_on_the_tool_turn_too(tokenizer, tools):
    first, second = CALL.format(name="add", arguments='{"a": 17, "b": 25}'), "#### 42</s>"
    unmasked = type("Unmasked", (Settings,), {"train_on_tool_responses": True})
    out, _ = run_loop(tokenizer, tools, [first, second], settings=unmasked)
    assert out.response_mask == [1] * len(out.response_ids)
    masked, _ = run_loop(tokenizer, tools, [first, second])
    assert masked.response_ids == out.response_ids and 0 in masked.response_mask


def test_a_tool_task_demonstration_is_the_token_stream_the_loop_builds(tokenizer, tools):
    """SFT on the tool task trains on exactly the tokens (and with exactly the mask) that RL's loop produces (this
    tools' `add` is the task's calculator)."""
    row = data.tool_rows(1, "train")[0]
    for kind in ("call", "miscopied_call", "malformed_call", "direct"):
        turns = data.tool_demo_turns(row, kind, random.Random(0))
        prompt_ids, response_ids, loss = sft.demonstration_tokens(tokenizer, {"prompt": row["prompt"], "turns": turns})
        said = [t["content"] + "</s>" for t in turns if t["role"] == "assistant"]
        server = ScriptedServer(tokenizer, said)
        loop = ToolAgentLoop(server, tokenizer, 64, response_length=200, multi_turn=Settings, tools=tools)
        out = asyncio.run(loop.run({"do_sample": True}, raw_prompt=row["prompt"], seed=0))
        assert (out.prompt_ids, out.response_ids, out.response_mask) == (prompt_ids, response_ids, loss), kind
        assert out.extra_fields["tool_calls"] == (kind in ("call", "miscopied_call"))
        assert out.extra_fields["malformed_tool_calls"] == (kind == "malformed_call")


def test_the_reward_reads_the_whole_conversation_and_scores_its_last_token(tokenizer, tools):
    """As verl's reward loop: the decoded text runs to the last attended token (tool results included) and the score
    sits there, not at response_mask.sum() - 1 (which would fall inside the conversation)."""
    from minirl.rewards import NaiveRewardManager

    text = ['<tool_call>{"name": "add", "arguments": {"a": 417, "b": 385}}</tool_call></s>', "#### 802</s>"]
    out, _ = run_loop(tokenizer, tools, text)
    batch = outputs_to_batch([out], 200, tokenizer.pad_token_id)
    seen = []
    manager = NaiveRewardManager(tokenizer, lambda **kw: seen.append(kw["solution_str"]) or 1.0)
    scores, _ = manager({"responses": batch["responses"], "response_mask": batch["response_mask"],
                         "response_attention_mask": batch["attention_mask"][:, -200:],
                         "data_source": ["minirl/tool_add"], "reward_model": [{"ground_truth": "802"}]})
    assert "<tool_response>802</tool_response>" in seen[0] and seen[0].endswith("#### 802")
    assert scores[0].nonzero().flatten().tolist() == [len(out.response_ids) - 1]
    assert batch["response_mask"][0, len(out.response_ids) - 1] == 1  # the model's own last token


def test_stateful_tools_rewards_and_parallel_calls(tokenizer, tools):
    two = CALL.format(name="lookup", arguments='{"city": "rome"}')[:-4] + \
        CALL.format(name="lookup", arguments='{"city": "oslo"}')
    settings = type("Two", (Settings,), {"max_parallel_calls": 2})
    out, _ = run_loop(tokenizer, tools, [two, "#### 3</s>"], settings=settings, response_length=400,
                      extra_info={"tools_kwargs": {"lookup": {"create_kwargs": {"table": {"rome": 3, "oslo": 1}}}}})
    text = tokenizer.decode(out.response_ids)
    assert "<tool_response>3</tool_response><tool_response>1</tool_response>" in text
    assert out.extra_fields["tool_rewards"] == [1.0, 1.0] and out.extra_fields["tool_calls"] == 2


@pytest.mark.parametrize("call, error", [
    (CALL.format(name="shout", arguments='{"word": "boom"}'), "Error executing tool 'shout': the tool broke"),
    (CALL.format(name="add", arguments='{"a": 1}'), "Error executing tool 'add':"),  # a missing argument
    (CALL.format(name="add", arguments='[1, 2]'), "must be a JSON object"),
    (CALL.format(name="divide", arguments='{"a": 1}'), "Unknown function 'divide'. Available tools:"),
    (CALL.format(name="slow", arguments='{"x": 1}'), "Error executing tool 'slow': no answer within 0.2 s"),
])
def test_a_failing_tool_call_is_an_error_turn_and_a_counted_error(tokenizer, tools, monkeypatch, call, error):
    monkeypatch.setattr(tool_agent_loop, "TOOL_TIMEOUT_S", 0.2)
    out, _ = run_loop(tokenizer, tools, [call, "#### 0</s>"])
    tool_text = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert error in tool_text, tool_text
    assert out.extra_fields["tool_errors"] == 1 and out.num_turns == 4


def test_limits_end_the_conversation(tokenizer, tools):
    call = CALL.format(name="add", arguments='{"a": 1, "b": 1}')
    once = type("Once", (Settings,), {"max_assistant_turns": 1})
    out, _ = run_loop(tokenizer, tools, [call], settings=once)
    assert out.num_turns == 2 and all(out.response_mask)  # the call was never run
    out, _ = run_loop(tokenizer, tools, [call, call, call, "#### 2</s>"], response_length=600,
                      settings=type("TwoTools", (Settings,), {"max_user_turns": 2}))
    assert out.num_turns == 1 + 3 + 2 and out.extra_fields["tool_calls"] == 2
    # a tool turn that would reach the response budget is not appended: the answer ends on the model's tokens
    budget = len(tokenizer.encode(call, add_special_tokens=False)) + 5
    out, _ = run_loop(tokenizer, tools, [call], response_length=budget)
    assert all(out.response_mask) and out.extra_fields["tool_calls"] == 1
    # malformed calls end the answer, as in verl, and are counted
    out, _ = run_loop(tokenizer, tools, ['<tool_call>{"name": add}</tool_call></s>'])
    assert out.num_turns == 2 and out.extra_fields["malformed_tool_calls"] == 1


def test_long_tool_results_are_cut_on_the_configured_side():
    text = "abcdefghij"
    assert truncate_text(text, 4, "left") == "(truncated)...ghij"
    assert truncate_text(text, 4, "right") == "abcd...(truncated)"
    assert truncate_text(text, 4, "middle") == "ab...(truncated)...ij"
    assert truncate_text(text, 10, "middle") == text


@pytest.mark.parametrize("overrides, message", [
    (["actor_rollout_ref.rollout.multi_turn.function_tool_path=tools.py"], "set trainer.use_v1=true"),
    (["actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent"], "set trainer.use_v1=true"),
    (["trainer.use_v1=true", "actor_rollout_ref.rollout.multi_turn.format=gpt-oss"], "not one of hermes"),
    (["trainer.use_v1=true", "actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side=top"],
     "not one of left, right, middle"),
    (["trainer.use_v1=true", "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=0"], "must be >= 1"),
])
def test_tool_settings_minirl_cannot_honour_are_refused(overrides, message):
    from minirl.config import load_config

    with pytest.raises(ValueError, match=message):
        load_config(overrides, announce=False)


def test_the_v1_trainer_runs_the_tool_loop_and_logs_verls_turn_metrics(tmp_path):
    """The wiring: tools load at start-up, every session (training and validation) runs the tool loop, the step logs
    num_turns and minirl's tool counts (the tiny model never writes a call, so each answer is one model turn:
    num_turns 2)."""
    from minirl.trainer import train

    renamed = TOOL_FILE.replace("def slow", "def slow_v1")
    (tmp_path / "function_tools.py").write_text(renamed.replace("def shout", "def shout_v1"))
    history = train([f"trainer.default_local_dir={tmp_path / 'run'}", "trainer.logger=[]", "trainer.use_v1=true",
                     "trainer.total_training_steps=1", "data.val_max_samples=6", "trainer.test_freq=1",
                     "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                     "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
                     f"actor_rollout_ref.rollout.multi_turn.function_tool_path={tmp_path / 'function_tools.py'}"],
                    show_progress=False)
    step = history[-1]
    assert step["num_turns/mean"] == 2.0 and step["minirl/tool_calls/mean"] == 0.0
    assert "timing_s/agent_loop/generate_sequences/mean" in step
    # validation runs the rows' tool loop too (verl's val-aux/num_turns), with the legacy validation's row seeds:
    # a one-turn answer is the legacy validation's answer, so the accuracy is the same
    assert history[0]["val-aux/num_turns/mean"] == 2.0 and step["val-aux/num_turns/mean"] == 2.0
    legacy = train([f"trainer.default_local_dir={tmp_path / 'legacy'}", "trainer.logger=[]", "trainer.val_only=true",
                    "data.val_max_samples=6"], show_progress=False)
    key = "val-core/minirl/arithmetic/acc/mean@1"
    assert history[0][key] == legacy[0][key]
