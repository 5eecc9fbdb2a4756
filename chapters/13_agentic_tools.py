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
# # Chapter 13 · Agentic RL: multi-turn rollouts with tools
#
# | The five answers | |
# |---|---|
# | **Problem** | Some tasks a model cannot do in its head but can do with help: add 3-digit numbers, look up a fact, run code. An *agentic* answer is a conversation: the model writes a tool call, the tool's result comes back as a new turn, the model writes again. RL must then train on one token stream that mixes text the model wrote with text it did not, and the reward must judge the whole conversation. How does verl run such rollouts, what must the loss ignore, and does RL teach the model to use the tool? |
# | **Core formula** | One trajectory is prompt, then turns $y = (a_1, o_1, a_2, o_2, \dots, a_K)$: the model's turns $a_k$ and the tools' observations $o_k$. The response mask is $m_t = 1$ on every token of an $a_k$ and $m_t = 0$ on every token of an $o_k$, and every loss term is a masked mean: $\mathcal{L} = \frac{1}{\sum_t m_t}\sum_t m_t\,\ell_t$. The policy gradient then only has terms $\nabla\log\pi_\theta(y_t \mid y_{<t})$ for tokens the policy sampled; the observations are context, like the prompt. One reward $r(x, y)$ per conversation, on its last token. |
# | **Beginner's view** | A student is allowed a calculator in an exam. They write down what to type, the calculator shows a number, they copy it into the answer. The teacher grades the answer sheet, and gives feedback on what the *student* wrote: how to type the question and how to copy the result, never on the calculator's display. If the feedback were also on the display, the student would be trained to imitate a calculator they cannot be. |
# | **verl source** | `verl/experimental/agent_loop/tool_agent_loop.py::ToolAgentLoop` (`run`, `_handle_pending_state`, `_handle_generating_state`, `_handle_processing_tools_state`, `_call_tool`; the states in `AgentState`), `tool_parser.py::HermesToolParser.extract_tool_calls`, `verl/tools/function_tool.py::function_tool` and `load_function_tools_from_path`, `verl/tools/base_tool.py::BaseTool`, `verl/tools/tool_registry.py::load_all_tools`; the reward on the whole conversation: `verl/experimental/reward_loop/reward_manager/naive.py::NaiveRewardManager.run_single`. |
# | **Where next** | [Chapter 12 · The v1 trainer](12_v1_trainer.ipynb): the agent-loop contract this chapter's loop plugs into; [Lab B · Reward functions](lab_b_rewards.ipynb): the function that scores the conversation; [Lab C · Reading the metrics](lab_c_metrics.ipynb): entropy and clip fractions, which this chapter's ablation moves; [Chapter 4 · GRPO](04_grpo.ipynb): the estimator every run here uses. Back to [the reading map](index.md). |
#
# Run time: printed at the end (12 short training runs, two at a time). With `MINIRL_FAST=1` everything shrinks.

# %%
import statistics
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import HTML, display

from minirl import data, models, sft
from minirl.book.notebook import (
    band,
    compare_table,
    fast_mode,
    print_run_time,
    run_grid,
    show_source,
    where_this_ran,
)
from minirl.evaluate import run_agent_loops
from minirl.v1.tool_agent_loop import ToolAgentLoop
from minirl.v1.tool_parser import parse_hermes

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "ch13"
WARM = sft.default_warm_start(sft.TOOL_SFT)  # 3-digit sums; demonstrations that call, skip or botch the tool
TOKENIZER, MODEL = models.load_tokenizer(WARM), models.load_policy(WARM)
MULTI_TURN, TOOLS = sft.tool_task_settings()  # the loop's limits and the calculator tool, as the trainer reads them
TEST_ROWS = data.read_parquet(WARM / "data" / "test.parquet").to_list()[: 48 if fast_mode() else 200]

# %% [markdown]
# ## 1. A task where the tool pays
#
# Each prompt asks for the sum of two 3-digit numbers. The book's 0.3M-parameter model cannot add them reliably
# in its head, but it can call a calculator. The tool is a plain Python file, as a reader would write one: a
# function with type hints and a Google docstring, decorated with `minirl.tools.function_tool`. The trainer loads
# it from `actor_rollout_ref.rollout.multi_turn.function_tool_path`, exactly verl's key.

# %%
print(Path(data.TOOL_FILE).read_text())
print("the schema inferred from the signature and the docstring:", TOOLS["add"].tool_schema)
print("\na prompt, as the chat template renders it for the model:")
print(TOKENIZER.apply_chat_template(TEST_ROWS[0]["prompt"], tools=[TOOLS["add"].tool_schema], tokenize=False,
                                    add_generation_prompt=True))

# %% [markdown]
# A real model's chat template (Qwen2.5's, say) writes the tools' schemas into the system turn, and the model
# reads how to call them there. The tiny model's template has no such section: it learned the one tool from its
# demonstrations. The `tool` role is what the template needs: a tool's result is rendered as
# `<tool_response>...</tool_response>` in a new turn.
#
# The warm start was fine-tuned (SFT) on demonstrations of five kinds: a correct call then the result copied into
# `#### N`, a call with a miscopied operand, a malformed call that never closes its JSON, a correct direct answer
# and a wrong direct answer. So the warm start sometimes calls, sometimes not, sometimes badly. What does a call
# buy it? Run the test prompts through the tool loop (greedy), and split the answers by whether they called:

# %%
def run_sessions(rows, do_sample=False):
    """The warm start's conversations for `rows`, through the tool loop with the task's budget (128 tokens)."""
    return run_agent_loops(MODEL, TOKENIZER, rows, 128, 144, MULTI_TURN, TOOLS, do_sample=do_sample)


def is_correct(output, row) -> bool:
    """GSM8K's strict rule on the whole conversation, as the reward manager decodes it."""
    from minirl.rewards import default_compute_score

    text = TOKENIZER.decode(output.response_ids, skip_special_tokens=False)
    score = default_compute_score(row["data_source"], text, row["reward_model"]["ground_truth"])
    return (score["score"] if isinstance(score, dict) else score) == 1.0


outputs = run_sessions(TEST_ROWS)
called = [o.extra_fields["tool_calls"] > 0 for o in outputs]
right = [is_correct(o, row) for o, row in zip(outputs, TEST_ROWS)]
for label, chosen in (("called the tool", True), ("answered directly", False)):
    group = [r for r, c in zip(right, called) if c == chosen]
    print(f"{label:18s}: {len(group):3d} of {len(right)} answers, accuracy {sum(group) / max(1, len(group)):.2f}")
print(f"overall accuracy {sum(right) / len(right):.2f}")

# %% [markdown]
# Calling pays: the greedy answers that called are right 1.00 of the time, the direct answers 0.05. Yet the warm
# start calls in only 89 of its 200 greedy answers.
# That is what RL should fix: the reward is the same GSM8K rule as everywhere in the book, and nothing in it
# mentions the tool.
#
# ## 2. The agent loop: a state machine
#
# verl's `ToolAgentLoop.run` is a loop over four states (`AgentState`): **PENDING** renders the prompt with the
# tools' schemas; **GENERATING** asks the server for one assistant turn and parses it for calls; if there are
# calls, **PROCESSING_TOOLS** runs them (in parallel, at most `max_parallel_calls`), appends their results as
# `tool` turns and goes back to GENERATING; otherwise, or when a limit is hit, **TERMINATED**.

# %%
def draw_state_machine():
    """The tool agent loop's states and transitions (verl: AgentState in tool_agent_loop.py)."""
    fig, ax = plt.subplots(figsize=(10, 2.6))
    boxes = {"PENDING": (0.08, 0.5), "GENERATING": (0.38, 0.5), "PROCESSING_TOOLS": (0.70, 0.82),
             "TERMINATED": (0.70, 0.16)}
    for name, (x, y) in boxes.items():
        ax.text(x, y, name, ha="center", va="center", fontsize=10,
                bbox={"boxstyle": "round,pad=0.5", "facecolor": "#dbe9f6" if name != "TERMINATED" else "#eeeeee"})
    arrows = [("PENDING", "GENERATING", "prompt + tool schemas", (0.0, 0.07)),
              ("GENERATING", "PROCESSING_TOOLS", "the turn has calls", (0.09, -0.05)),
              ("GENERATING", "TERMINATED", "no call / budget /\nmax_assistant_turns", (-0.07, -0.2))]
    for start, end, label, (dx, dy) in arrows:
        (x0, y0), (x1, y1) = boxes[start], boxes[end]
        ax.annotate("", xy=(x1 - 0.09, y1), xytext=(x0 + 0.08, y0), arrowprops={"arrowstyle": "->"})
        ax.text((x0 + x1) / 2 + dx, (y0 + y1) / 2 + dy, label, ha="center", fontsize=8)
    ax.annotate("", xy=(0.43, 0.62), xytext=(0.62, 0.9),
                arrowprops={"arrowstyle": "->", "connectionstyle": "arc3,rad=0.4", "color": "#2b6cb0"})
    ax.text(0.47, 0.95, "tool turns appended (mask 0)", fontsize=8, color="#2b6cb0")
    ax.annotate("", xy=(0.70, 0.28), xytext=(0.70, 0.70), arrowprops={"arrowstyle": "->", "color": "gray"})
    ax.text(0.72, 0.48, "results would pass the budget /\nmax_user_turns", fontsize=8, color="gray")
    ax.set_axis_off()
    plt.show()


draw_state_machine()

# %% [markdown]
# minirl's loop (`minirl/v1/tool_agent_loop.py::ToolAgentLoop.run`) writes the same states as the branches of one
# `while` loop, with the same limits (`actor_rollout_ref.rollout.multi_turn.*`: `max_assistant_turns`,
# `max_user_turns`, `max_parallel_calls`, `max_tool_response_length`, `tool_response_truncate_side`) and the same
# response budget, `data.max_response_length`, which counts **every** token after the prompt, the tools'
# included. Exercise 13.2 asks you to write its token bookkeeping; its source is shown after the exercises.
#
# ## 3. Reading calls: the hermes format
#
# The model asks for a tool by writing `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. verl's
# `HermesToolParser` finds each block with a regular expression and parses its JSON; a block that does not parse,
# or lacks a `name` or `arguments`, is dropped with a log line: no error turn, and if nothing parses the
# conversation ends. minirl counts the dropped blocks, so a run can watch its malformed-call rate:

# %%
for text in ['<tool_call>{"name": "add", "arguments": {"a": 343, "b": 709}}</tool_call></s>',
             '<tool_call>{"name": "add", "arguments": {"a": 343, "b": 709}</tool_call></s>',  # a brace missing
             '#### 1052</s>']:
    content, calls, dropped = parse_hermes(text)
    print(f"{text!r}\n  -> calls {[(c.name, c.arguments) for c in calls]}, dropped {dropped}, content {content!r}")

# %% [markdown]
# A call that parses but fails (an unknown tool, arguments the function rejects, an exception, a timeout) is
# different: the loop answers it with an error turn the model reads (`Error executing tool 'add': ...`) and counts
# it under `minirl/tool_errors/mean`. A run never crashes on a tool.
#
# ## 4. One trajectory, token by token, with its mask
#
# Here is one sampled conversation from the warm start. Green tokens were sampled by the model (mask 1, their
# log-probs kept from the sampler); grey tokens were inserted by the loop: the chat template's turn markers and
# the tool's result (mask 0, log-prob 0).

# %%
sampled = run_sessions(TEST_ROWS[:16], do_sample=True)
trajectory = next(o for o in sampled if o.extra_fields["tool_calls"] > 0)


def colour_by_mask(output):
    """HTML of a response, each token on a green (mask 1) or grey (mask 0) background."""
    spans = []
    for token, mask in zip(output.response_ids, output.response_mask):
        text = TOKENIZER.decode([token]).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        colour = "#c6f6d5" if mask else "#e2e8f0"
        spans.append(f'<span style="background:{colour};font-family:monospace">{text}</span>')
    return HTML("".join(spans))


display(colour_by_mask(trajectory))
mask = trajectory.response_mask
print(f"{len(mask)} response tokens: {sum(mask)} sampled by the model (mask 1), {len(mask) - sum(mask)} inserted "
      f"by the loop (mask 0); num_turns = {trajectory.num_turns}")
inserted_logprobs = [lp for lp, m in zip(trajectory.response_logprobs, mask) if not m]
print("log-probs of the inserted tokens, all zero:", set(inserted_logprobs))

# %% [markdown]
# `num_turns` counts every message: the user's prompt, two assistant turns, one tool turn: 4. The trainer turns
# the list of outputs into a padded batch whose `response_mask` is this mask, and every masked mean in the loss
# (`agg_loss`, Chapter 4), the KL and the entropy uses it. The ablation below switches that off for the tool
# turns (`multi_turn.train_on_tool_responses=true`, a minirl-only key; verl has no switch: it always masks them).
#
# ## 5. Does RL teach the model to use the tool?
#
# Four variants, the same warm start, GRPO, 3 seeds each, 15 steps of 16 prompts x 8 answers:
#
# - **tools**: the rows run the tool loop (`agent_name: tool_agent`), response budget 128 tokens;
# - **without tools**: the same rows with `agent_name: single_turn_agent`. A call goes nowhere: the answer ends
#   after it and scores 0, so the model can only learn to answer directly;
# - **train on tool tokens**: tools, with the mask set to 1 on the tool turns (the ablation);
# - **budget 96**: tools, with `data.max_response_length=96`, a budget that looks generous for a 4-digit answer.

# %%
NO_TOOL = RUNS / "data_without_tools"  # the same rows, run by the single-turn loop
for split in ("train", "test"):
    rows = data.read_parquet(WARM / "data" / f"{split}.parquet").to_list()
    data.write_parquet([{**row, "agent_name": "single_turn_agent"} for row in rows], NO_TOOL / f"{split}.parquet")

PROMPTS, SAMPLES = (4, 4) if fast_mode() else (16, 8)
STEPS = 2 if fast_mode() else 15
ACTOR = "actor_rollout_ref.actor"
BASE = [*sft.train_overrides(WARM, sft.TOOL_SFT), f"data.train_batch_size={PROMPTS}",
        f"actor_rollout_ref.rollout.n={SAMPLES}", f"{ACTOR}.ppo_mini_batch_size={PROMPTS // 2}",
        f"{ACTOR}.optim.lr=2e-4", f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={max(1, STEPS // 3)}",
        f"data.val_max_samples={8 if fast_mode() else 64}"]
VARIANTS = {"tools": [],
            "without tools": [f"data.train_files={NO_TOOL / 'train.parquet'}",
                              f"data.val_files={NO_TOOL / 'test.parquet'}"],
            "train on tool tokens": ["actor_rollout_ref.rollout.multi_turn.train_on_tool_responses=true"],
            "budget 96": ["data.max_response_length=96"]}
runs = run_grid(RUNS, VARIANTS, *BASE)
VAL = "val-core/minirl/tool_add/acc/mean@1"

# %% tags=["central-figure"]
def plot_panels(results, panels):
    """One panel per (metric, title); each variant that logs the metric drawn as a band over seeds."""
    fig, axes = plt.subplots(1, len(panels), figsize=(14, 3.3))
    for ax, (key, title) in zip(axes, panels):
        for label, variant_runs in results.items():
            if all(any(key in record for record in records) for records in variant_runs):
                band(ax, variant_runs, key, label, marker="o" if key.startswith("val-") else None, markersize=3)
        ax.set(title=title, xlabel="step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    plt.tight_layout()
    plt.show()


plot_panels({k: runs[k] for k in ("tools", "without tools")},
            [(VAL, "validation accuracy (greedy)"), ("minirl/tool_calls/mean", "tool calls per answer"),
             ("minirl/acc/mean", "training accuracy (sampled)")])
print(compare_table({k: runs[k] for k in ("tools", "without tools")}, VAL))
print()
print(compare_table({"tools": runs["tools"]}, "minirl/tool_calls/mean"))

# %% [markdown]
# With the tool, greedy validation accuracy climbs from the warm start's level to 1.000 after 15 steps (all 3
# seeds), and the tool calls per answer rise to 0.938-0.961: RL found that calling pays, from a reward that never
# mentions the tool. Without the tool, the same model and the same steps end at 0.000-0.016: a direct 3-digit sum
# is out of this model's reach, and a group rarely holds a correct answer to learn from. (Every run is in
# `runs/ch13/`.)
#
# What does the tool cost? Each answer that calls carries the call, the template's markers and the result:
# more tokens per sample for the trainer to forward, and a second generation turn. The step time includes both
# (the runs train two at a time, one thread each, so compare the rows with each other, not with other
# chapters):

# %%
def mean_over_run(variant_runs, key):
    """The mean of `key` over every step of every seed."""
    return statistics.mean(record[key] for records in variant_runs for record in records if key in record)


print(f"{'variant':22s} {'s/step':>7s} {'response tokens/sample':>23s} {'num_turns/mean':>15s}")
for label in ("tools", "without tools"):
    print(f"{label:22s} {mean_over_run(runs[label], 'timing_s/step'):7.2f} "
          f"{mean_over_run(runs[label], 'response_length/mean'):23.1f} "
          f"{mean_over_run(runs[label], 'num_turns/mean'):15.2f}")

# %% [markdown]
# Averaged over every step of the 3 seeds, an answer with the tool carried 105.1 response tokens against 27.7,
# and a step took 2.80 s against 1.98: the tool's price is almost four times the tokens and about two fifths more
# time per step, at this scale. (The calculator itself costs milliseconds: `timing_s/agent_loop/tool_calls/mean`.)

# %% [markdown]
# ## 6. The masking ablation: training on the tool's text
#
# With `train_on_tool_responses=true` the tool's tokens enter the loss with the answer's advantage. A good answer
# now also pushes up the log-probability of the *calculator's output* given the call: the model is trained to
# predict a sum it cannot compute, and a bad answer pushes down the correct sum. Those tokens are a quarter or
# more of every calling answer, so a large part of every gradient is spent on them.

# %%
plot_panels({k: runs[k] for k in ("tools", "train on tool tokens")},
            [(VAL, "validation accuracy (greedy)"), ("minirl/tool_calls/mean", "tool calls per answer"),
             ("minirl/malformed_tool_calls/mean", "malformed calls per answer"), ("actor/entropy", "entropy")])
for key in (VAL, "minirl/tool_calls/mean", "minirl/malformed_tool_calls/mean", "actor/entropy"):
    print(key)
    print(compare_table({k: runs[k] for k in ("tools", "train on tool tokens")}, key), "\n")

# %% [markdown]
# Three things break, each beyond the seed spread. The entropy rises to 0.278-0.329 instead of falling to
# 0.014-0.016. (It is averaged over the mask, so the ablation's includes the tool's tokens, where the model guesses
# at sums it cannot compute: that is why it starts higher. That it *rises* is the damage.) Malformed calls do not
# fall: 0.070-0.125 per answer at the last step instead of 0.023-0.031, so the model's own call format does not
# improve. And the tool-call rate stalls at 0.695-0.789 instead of 0.938-0.961. Accuracy pays little for it here,
# 0.984 against 1.000, because a call that is made still gets copied right; with fewer calls on a harder task,
# the answers lost would be more. It is fast: the tool-call curves part within the first five steps. This is why verl's `ToolAgentLoop` builds `response_mask`
# with zeros on every tool turn and has no switch to turn that off.
#
# ## 7. A failure mode readers hit: a response budget that cannot hold the conversation
#
# In a single-turn task `data.max_response_length` is the answer's length. In a tool task it is the whole
# conversation after the prompt: the call, the tool's result with its template markers, and the final answer.
# Here a call takes about 74 tokens and the tool turn about 36, so a budget of 96 lets the model write its call
# but leaves no room for the result. The loop then ends the conversation on the model's call (verl's rule: tool
# results that would reach the budget are not appended), every call scores 0, and RL learns to stop calling:

# %%
plot_panels({k: runs[k] for k in ("tools", "budget 96", "without tools")},
            [(VAL, "validation accuracy (greedy)"), ("minirl/tool_calls/mean", "tool calls per answer"),
             ("response_length/mean", "response tokens per sample")])
print(compare_table({k: runs[k] for k in ("tools", "budget 96")}, "minirl/tool_calls/mean"))
print()
print(compare_table({k: runs[k] for k in ("tools", "budget 96", "without tools")}, VAL))
longest = max(r["num_turns/max"] for records in runs["budget 96"] for r in records if "num_turns/max" in r)
print(f"\nbudget 96: the longest conversation of any step had num_turns = {longest} (a tool turn needs 4)")

# %% [markdown]
# With a budget that cannot hold the result, the tool loop is the single-turn loop in disguise: no tool result
# ever reaches the model, every call scores 0, and the run learns what the run without tools learns. The
# tool-call rate falls from the warm start's level to 0.086-0.180 calls per answer (3 seeds; with the full
# budget it rises to 0.938-0.961), and accuracy ends where the run without tools ends. Nothing crashes and nothing
# warns; only `minirl/tool_calls/mean` falling while `num_turns/max` stays at 2 gives it away. The fix is
# to budget the whole conversation: (tokens of a call + tokens of a tool turn) x calls you allow + the final
# answer. This task needs 121; the book uses 128. With real models, `max_tool_response_length` (characters) caps
# the tool's share.
#
# ## 8. verl <-> minirl
#
# | | verl 0.9.1 | minirl |
# |---|---|---|
# | the loop | `verl/experimental/agent_loop/tool_agent_loop.py::ToolAgentLoop`, states in `AgentState` | `minirl/v1/tool_agent_loop.py::ToolAgentLoop` (the states as branches of one loop) |
# | parsing calls | `tool_parser.py::HermesToolParser.extract_tool_calls` (`multi_turn.format=hermes`) | `minirl/v1/tool_parser.py::parse_hermes` (also counts dropped blocks) |
# | function tools | `verl/tools/function_tool.py::function_tool`, `load_function_tools_from_path` | `minirl/tools/function.py::function_tool`, `load_function_tools_from_path` |
# | stateful tools | `verl/tools/base_tool.py::BaseTool` (`create`, `execute`, `calc_reward`, `release`), YAML via `tool_registry.py::load_all_tools` | `minirl/tools/base.py::BaseTool`, `minirl/tools/registry.py::load_all_tools` |
# | which rows use it | the row's `agent_name`, else `actor_rollout_ref.rollout.agent.default_agent_loop` | the same |
# | keys | `actor_rollout_ref.rollout.multi_turn.{enable, max_assistant_turns, max_user_turns, max_parallel_calls, max_tool_response_length, tool_response_truncate_side, format, function_tool_path, tool_config_path}` | the same; `train_on_tool_responses` is minirl's ablation switch |
# | the mask | `response_mask`: 1 on generated tokens, 0 on tool turns | the same |
# | the reward | `NaiveRewardManager.run_single`: decodes the whole response (tool text included), `extra_info` gets the tool fields and `num_turns`; the score sits on the last attended token | the same (`minirl/rewards.py::NaiveRewardManager`) |
# | metrics | `num_turns/{min,max,mean}`, `timing_s/agent_loop/tool_calls/{min,max,mean}` | the same, plus `minirl/tool_calls/mean`, `minirl/malformed_tool_calls/mean`, `minirl/tool_errors/mean` |
# | a tool file | a Python file of `@function_tool` functions, schema from type hints and the Google docstring | the same; `from minirl.tools import function_tool` |
#
# The README's "Agentic RL" section trains the tool task from the command line with these keys.
#
# ## Exercises
#
# `exercises/ch13_agentic_tools.py`: Exercise 13.1 parses hermes calls, malformed ones included; Exercise 13.2
# builds the response, its mask and its log-probs from a conversation's turns; Exercise 13.3 writes a function
# tool the loop accepts. Grade one
# with `make grade EX=13.1`.
#
# After you have tried them: the library's answers, `parse_hermes` and the loop that builds the mask.

# %%
for function in (parse_hermes, ToolAgentLoop.run):
    display(show_source(function, collapsed=True))

# %%
print_run_time()
