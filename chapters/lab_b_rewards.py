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
# # Lab B · Writing reward functions
#
# | | |
# |---|---|
# | **What you will do** | Write a reward function in verl's signature, load it by verl's keys, and watch its extra keys become metrics. Try five reward patterns and break each one. Test a reward like software, with property tests. Train against a plausible shaping with a hole in it and measure what the policy does with it (3 seeds). |
# | **What you need** | [Lab A](lab_a_gsm8k.ipynb) for the GSM8K rule and verl's data schema; [Chapter 4 · GRPO](04_grpo.ipynb) for the group advantage. |
# | **verl pages this lab follows** | `docs/preparation/reward_function.rst` (tag v0.9.0) and the reward code of verl 0.9.1: `verl/trainer/ppo/reward.py::get_custom_reward_fn`, `verl/utils/reward_score/__init__.py::default_compute_score`, the reward loop's managers. Section 7 lists where the page is out of date. |
# | **Run time** | 2.1 minutes in the run shown here, on 2 CPU cores (six GRPO runs of 30 steps, two at a time; the first output names the machine, the last prints the run time). With `MINIRL_FAST=1`, a few seconds. |

# %%
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from minirl import rewards
from minirl.book.notebook import (
    compare_table,
    fast_mode,
    plot_comparison,
    print_run_time,
    run_grid,
    show_source,
    where_this_ran,
)
from minirl.plot import load_metrics
from minirl.trainer import train

where_this_ran()  # the machine behind this notebook's outputs

RUNS = Path("..") / "runs" / "lab_b"
RUNS.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## 1. verl's contract
#
# A reward function is a plain Python function with this signature:
#
# ```python
# def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float | dict
# ```
#
# | argument | what it holds |
# |---|---|
# | `data_source` | the row's `data_source` column (`"openai/gsm8k"`): one function can serve several datasets |
# | `solution_str` | the decoded response, special tokens removed: **any string at all** |
# | `ground_truth` | the row's `reward_model.ground_truth` (a string) |
# | `extra_info` | the row's `extra_info` dict. In verl 0.9.1 it is never None: the dataset puts `{}` in a row without one, and the reward manager adds `num_turns` and `rollout_reward_scores` to it. minirl passes the row's dict as stored, or None |
#
# It returns the reward as a number, or a dict whose `"score"` is the reward and whose other entries are
# logged. The reward manager puts the score on the last token of the response (`token_level_scores`).
#
# verl 0.9.1 can pass more than these four
# (`verl/experimental/reward_loop/reward_manager/naive.py::NaiveRewardManager.run_single` and
# `verl/trainer/ppo/reward.py::get_custom_reward_fn`):
#
# - **With a served reward model** (`reward.reward_model.enable=True`) it adds two keyword arguments,
#   `reward_router_address` (the reward model server's address) and `reward_model_tokenizer`, so that your
#   function can query the reward model itself. A function with exactly the four parameters above then fails
#   with a `TypeError` on its first call. Add `**kwargs` if your function may ever run beside a reward model.
#   minirl runs its reward model in-process and never passes these two.
# - **`reward.custom_reward_function.reward_kwargs`**, a dict that verl binds to every call as extra keyword
#   arguments (they win over the call's own). minirl has no such key: it is an unknown-key error.
# - **An `async def` function** is awaited. minirl calls the function and does not await it, so keep yours
#   synchronous.
#
# verl chooses it with two keys: `reward.custom_reward_function.path` (a `.py` file) and
# `reward.custom_reward_function.name` (default `compute_score`). Without them, verl's
# `default_compute_score` picks a built-in rule by `data_source`. minirl reads the same keys and loads the
# file the same way (`minirl/rewards.py::load_custom_reward_function`). Let us write one to a file and train
# with it for two steps.

# %%
MY_REWARD = (RUNS / "my_reward").with_suffix(".py")  # a Python file of your own
MY_REWARD.write_text('''
from minirl.rewards import compute_gsm8k_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    score = float(compute_gsm8k_score(solution_str, ground_truth))
    return {"score": score, "answer_chars": float(len(solution_str))}  # every other number is logged
''')
train([f"reward.custom_reward_function.path={MY_REWARD}", "reward.custom_reward_function.name=compute_score",
       "trainer.total_training_steps=2", "trainer.test_freq=2", "data.val_max_samples=40",
       f"trainer.default_local_dir={RUNS / 'contract'}", "trainer.resume_mode=disable", "trainer.logger=[]"],
      show_progress=False)
last = load_metrics(RUNS / "contract")[-1]
print(json.dumps({k: round(v, 3) for k, v in last.items() if "answer_chars" in k or k == "critic/score/mean"},
                 indent=1))

# %% [markdown]
# The extra key `answer_chars` shows up twice: as `minirl/answer_chars/mean` for the training batch and as
# `val-aux/minirl/arithmetic/answer_chars/mean@1` for validation (verl's validation names; "aux" because only
# the score and `acc` are "core"). Two details of the contract:
#
# - **A float score is also logged as `acc`.** verl 0.9.1's reward loop does this for a plain number; a dict
#   should carry its own `acc` if accuracy is not the score (see section 5).
# - **The legacy spelling is ignored, silently.** verl 0.9.1's `main_ppo` accepts the top-level
#   `custom_reward_function.path` / `.name` (without `reward.`) and the top-level `reward_model.*` block, and
#   then ignores them: `verl/trainer/config/legacy_reward_impl.yaml` keeps them only as nulls, and the function
#   that would move them under `reward.` (`verl/experimental/reward_loop/reward_loop.py::migrate_legacy_reward_impl`)
#   is called only by the fully asynchronous trainer (`verl/experimental/fully_async_policy/fully_async_main.py`).
#   A `main_ppo` run with the old keys trains on `default_compute_score`, the built-in rule, with no error.
#   minirl refuses each of these keys with a `ValueError` that names the `reward.` key to write instead.
#
# **Reward managers** decide how scores become `token_level_scores`. `reward.reward_manager.name=naive` (the
# default) calls `compute_score` once per response and puts the score on its last token. `dapo` does the same
# and can add DAPO's overlong penalty (`reward.reward_kwargs.overlong_buffer_cfg.*`): a response that runs into
# the last tokens of its budget loses reward in proportion ([Chapter 5](05_dapo.ipynb) measures it). verl 0.9.1
# looks the name up in its reward loop's registry (`verl/experimental/reward_loop/reward_manager/registry.py`):
# `naive`, `dapo`, `gdpo`, `rate_limited` and `remote`. `prime` and `batch`, which older scripts name, exist only
# in the older `verl/workers/reward_manager/` registry, and 0.9.1 stops with `Unknown reward manager`. minirl
# has `naive`, `dapo` and `gdpo` and refuses the other names.
#
# ## 2. Five patterns, and how each one fails
#
# The same ten responses to "12+7=?" (right answer 19), scored by five rewards you might write:

# %%
def exact_match(s, truth):           # the whole response must be the answer
    return float(s.strip() == truth)


def format_and_answer(s, truth):     # GSM8K's strict rule: "#### N" at the end, compared as a string
    return float(rewards.compute_gsm8k_score(s, truth))


def partial_credit(s, truth):        # format 0.1, right answer 1.0 (verl's format_score)
    return float(rewards.compute_gsm8k_score(s, truth, format_score=0.1))


def math_equivalence(s, truth):      # math-verify: parse both, compare as mathematics
    return rewards.compute_math_verify_score(s, truth)


def length_shaped(s, truth):         # "reward showing work": + 0.02 per character, at most 0.5
    return rewards.length_bonus_score("minirl/arithmetic", s, truth)["score"]


PATTERNS = [exact_match, format_and_answer, partial_credit, math_equivalence, length_shaped]
RESPONSES = ["19", "12+7=19 #### 19", "12+7=19 #### 19.0", "#### 19\n", "12+7 = 19", "12+7=18 #### 18",
             "12+7=19 #### 18", "I think 19, or maybe 20", "#### 19 " + "padding " * 8, "\\boxed{19}"]
print(f"{'response':36s} " + " ".join(f"{p.__name__:>17s}" for p in PATTERNS))
for response in RESPONSES:
    print(f"{response[:34]!r:36s} " + " ".join(f"{p(response, '19'):17.2f}" for p in PATTERNS))

# %% [markdown]
# Read each column for its failure:
#
# | pattern | fails by | example above |
# |---|---|---|
# | exact match | refusing any working: a model that shows its steps scores 0 | `12+7=19 #### 19` gets 0 |
# | format + answer (GSM8K's rule) | string comparison and a strict format | `#### 19.0` and `12+7 = 19` get 0 |
# | partial credit | paying for confident wrong answers in the right format; a policy can settle for 0.1 | `#### 18` gets 0.1 |
# | math equivalence | leniency about *where* the answer is: it reads the last answer-like expression anywhere | `I think 19, or maybe 20` is judged on 20, `12+7 = 19` gets 1 |
# | length shaping | paying for text, not for work | `#### 19 padding padding ...` earns the most |
#
# No pattern is right in general. A good reward states its format in the prompt (GSM8K's instruction does),
# checks that format strictly, and compares the answer by value. Exercise B.1 writes one for fractions.
#
# ## 3. Testing rewards like software
#
# A reward runs on every response the policy will ever write, so test it against strings you did not think
# of. Property-based testing (the `hypothesis` library) generates them. Three properties every reward needs:
# it never raises, it stays in its range, and it does not change when irrelevant whitespace is added. Here is
# a reward that looks fine on hand-written examples, and what `hypothesis` finds:

# %%
def naive_gsm8k(solution_str, ground_truth):
    answer = solution_str.split("####")[-1].strip()
    return 1.0 if float(answer) == float(ground_truth) else 0.0


print("hand-written cases:", [naive_gsm8k(s, "19") for s in ("12+7=19 #### 19", "#### 18", "#### 19.0")])
texts = st.lists(st.sampled_from(["#### ", "####", "1", "9", " ", "\n", ".", "x", "-"]), max_size=12).map("".join)


def find_failure(reward):
    """The first string on which `reward` raises or leaves [0, 1], as hypothesis finds it; None if none."""
    found = []

    @settings(max_examples=200, deadline=None, derandomize=True, database=None)
    @given(texts)
    def never_raises_and_stays_in_range(text):
        try:
            value = reward(text, "19")
        except Exception as error:  # noqa: BLE001 - finding the exception is the point
            found.append(f"{text!r} raised {type(error).__name__}: {error}")
            raise
        assert 0.0 <= value <= 1.0

    try:
        never_raises_and_stays_in_range()
    except Exception:  # noqa: BLE001 - hypothesis re-raises the failure it shrank
        return found[-1] if found else "out of range"
    return None


print("naive_gsm8k:", find_failure(naive_gsm8k))
print("GSM8K's rule:", find_failure(format_and_answer))

# %% [markdown]
# `hypothesis` shrinks the failure to the smallest string that shows it (an empty answer that `float` cannot
# read). verl's own rule survives the same search. minirl compares its GSM8K scorer with verl's on tricky and
# random strings (`tests/parity/test_verl_parity.py`), Chapter 8's graders fuzz the reader's extractors, and
# Exercise B.1's grader runs 300 generated strings plus hidden adversarial ones against your reward.
#
# ## 4. Reward hacking: does the policy take the length bonus?
#
# `length_shaped` above has an obvious hole: it pays for characters. A policy trained on it "should" learn to
# pad its answers. We train GRPO on the tiny arithmetic task with it (`rewards.length_bonus_score`, loaded by
# path as in section 1) and with the plain GSM8K rule, 3 seeds each, 30 steps, with room to grow (40 tokens
# per response, twice what the answers need). `critic/score/mean` is what the policy is paid; `minirl/acc/mean`
# and validation accuracy are the strict rule alone.

# %% tags=["central-figure"]
STEPS = 3 if fast_mode() else 30
LENIENT = ["reward.custom_reward_function.path=../minirl/rewards.py",
           "reward.custom_reward_function.name=length_bonus_score"]
common = [f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={min(10, STEPS)}", "data.max_response_length=40"]
if fast_mode():
    common += ["data.val_max_samples=40"]
results = run_grid(RUNS / "hacking", {"GSM8K rule": [], "GSM8K rule + length bonus": LENIENT}, *common)
VAL = "val-core/minirl/arithmetic/acc/mean@1"
plot_comparison(results, [("critic/score/mean", "reward paid (training batch)", "step"),
                          ("minirl/acc/mean", "accuracy (strict rule, training batch)", "step"),
                          ("response_length/mean", "response length (tokens)", "step"),
                          (VAL, "validation accuracy", "step")])
print(compare_table(results, VAL))
print(compare_table(results, "response_length/mean"))


def per_seed(label, key, summary):
    """mean (min-max) over seeds of summary(the values of `key` in one run, in step order)."""
    values = [summary([r[key] for r in records if key in r]) for records in results[label]]
    return f"{sum(values) / len(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def mean(values):
    return sum(values) / len(values)


for label in results:
    print(f"{label}: validation accuracy before training {per_seed(label, VAL, lambda v: v[0])}"
          f" | reward paid, mean over steps {per_seed(label, 'critic/score/mean', mean)}"
          f" | largest response_length/clip_ratio {per_seed(label, 'response_length/clip_ratio', max)}")
paid = {label: mean([mean([r["critic/score/mean"] for r in records if "critic/score/mean" in r]) for records in runs])
        for label, runs in results.items()}
print(f"reward paid, mean over steps and seeds: {paid['GSM8K rule + length bonus'] - paid['GSM8K rule']:+.3f} "
      "with the length bonus")
print("length bonus paid per answer, mean over steps:",
      per_seed("GSM8K rule + length bonus", "minirl/length_bonus/mean", mean))

# %% [markdown]
# **What we saw: the hole was not taken.** In this run (3 seeds, 30 steps, on this machine) the policy was paid
# +0.303 more per answer under the bonus (reward paid, mean over steps: 0.712 (seeds 0.701-0.726) with the bonus,
# 0.409 (0.399-0.422) without), almost all of it the bonus itself (0.305 per answer, seeds 0.304-0.306). Yet it
# did not pad:
#
# - The response length at the last step was 16.370 tokens (seeds 16.293-16.473) with the bonus and 16.401
#   (16.320-16.555) without: within noise, and the length curves lie on top of each other throughout.
# - The largest `response_length/clip_ratio` of a run was 0.001 on average with the bonus (seeds 0.000-0.004)
#   and 0.000 without: almost no response reached the 40-token limit.
# - The curves of strict training accuracy lie on top of each other. Validation accuracy rose from 0.450 before
#   training (the same for every seed) to 0.607 (seeds 0.570-0.660) with the bonus and 0.597 (0.575-0.640)
#   without: within noise (the ranges overlap).
#
# Why: GRPO's advantage is the reward minus **the mean of the group** (divided by its std). For the $G$
# responses to one prompt, with rewards $r_i$ and bonuses $b_i$,
#
# $$
# \hat A_i = \frac{(r_i + b_i) - \operatorname{mean}_j (r_j + b_j)}{\operatorname{std}_j (r_j + b_j) + \epsilon}
# \quad\text{and}\quad (r_i + b_i) - \operatorname{mean}_j (r_j + b_j) = (r_i - \bar r) + (b_i - \bar b),
# $$
#
# so only $b_i - \bar b$, the part of the bonus that varies within the group, reaches the advantage. The warm
# start always ends with EOS right after its answer, so the responses to one prompt have nearly the same length
# (they differ only when a wrong answer has another number of digits); then $b_i \approx \bar b$ for every member
# of the group and the bonus cancels. A reward term only teaches what varies *within* a group. A policy that sometimes padded its answers would be pushed to pad
# more; this one never does, so it has nothing to reinforce. This is also why reward hacking usually appears
# late in real runs: first the policy must stumble on the behaviour that the hole pays for.
#
# [Chapter 8 · DeepSeek-R1](08_r1.ipynb) shows a hole that *is* found: a verifier that accepts the right number
# anywhere in the response, on a task where the policy already writes several numbers. There the paid reward
# rises while true accuracy falls (measured over 3 seeds in that chapter).
#
# **The fix** for a length bonus is not to write one: pay for the answer, and let length follow from what helps
# (R1's lesson). If you must shape, pay only right answers, cap the bonus, and watch `response_length/mean` and
# `response_length/clip_ratio` next to the strict accuracy.
#
# ## 5. A checklist for a new reward
#
# - It never raises and stays in range on any string (property tests).
# - It reads a format the prompt asks for, and only the end of the response (the last 300 characters, as
#   verl's rules do), so text after the answer cannot change it.
# - It compares by value where the task has several spellings of one answer.
# - Its dict carries an `acc` (the strict truth) when the score is shaped, so that `minirl/acc/mean` and
#   validation report the truth beside what the policy is paid.
# - Train a few steps and read samples, `critic/score/mean` against `minirl/acc/mean`, and the response length.
#
# ## 6. verl <-> minirl
#
# | what | verl 0.9.1 | minirl |
# |---|---|---|
# | load your function | `verl/trainer/ppo/reward.py::get_custom_reward_fn` | `minirl/rewards.py::load_custom_reward_function` |
# | built-in rules by `data_source` | `verl/utils/reward_score/__init__.py::default_compute_score` | `minirl/rewards.py::default_compute_score` |
# | the naive manager | `verl/experimental/reward_loop/reward_manager/naive.py::NaiveRewardManager` | `minirl/rewards.py::NaiveRewardManager` |
# | DAPO's manager | `verl/experimental/reward_loop/reward_manager/dapo.py::DAPORewardManager` | `minirl/dapo.py` |
# | math equivalence | `verl/utils/reward_score/math_verify.py::compute_score` | `minirl/rewards.py::compute_math_verify_score` |
# | keys | `reward.custom_reward_function.path`, `.name`, `reward.reward_manager.name` | the same |
#
# ## 7. Where verl's page is out of date (checked against verl 0.9.1's code)
#
# - **`docs/preparation/reward_function.rst` names the keys `custom_reward_function.path` / `.name`**, the
#   top-level spelling of older verl. Written that way, 0.9.1's `main_ppo` ignores them (section 1) and trains
#   on the built-in rule without an error. Write them under `reward.`: there `name` defaults to
#   `compute_score`, so the page's advice to leave `name` unset for a function of that name holds.
# - **It describes a `RewardManager` built in `main_ppo.py` with a `__call__` on a `DataProto`.** 0.9.1's trainer
#   runs the reward loop of `verl/experimental/reward_loop/`: managers such as `NaiveRewardManager` score one
#   response at a time (`run_single`) and a float score is also logged as `acc`.
# - **"Currently, we support reward functions for GSM8k and MATH datasets."** 0.9.1's `default_compute_score`
#   knows many more data sources (geometry, code with a sandbox, search, ...).
#
# ## 8. Exercises
#
# Open `exercises/lab_b_rewards.py` and grade with `make grade`.
#
# | exercise | function | graded on |
# |---|---|---|
# | B.1 | `fraction_score` | right answers written many ways, about 25 hidden adversarial strings, and 300 generated strings (never raises, 0 or 1, trailing spaces change nothing) — `make grade EX=B.1` |
# | B.2 | `compute_score` | its score and `formatted` flag on fixed strings, verl's keyword call, and a real two-step run loading it by `reward.custom_reward_function.path` whose `metrics.jsonl` must hold `minirl/formatted/mean` — `make grade EX=B.2` |
#
# <details><summary>Hints for B.1</summary>
#
# Cut the last 300 characters first, then take the text after the last `"#### "` up to the newline. Check it
# with `re.fullmatch` before converting: `int()` and `Fraction()` accept things the rules refuse (`"+3"`,
# `" 3"`, `"3.0"`, full-width digits). A zero denominator is malformed, not an error.
# </details>
#
# **A failure-mode question.** A colleague's reward returns `{"score": s, "acc": s > 0.5, "len": len(text)}`.
# Training runs, but `critic/score/mean` and validation accuracy disagree wildly. What would you check first?
#
# <details><summary>Answer</summary>
#
# What `s` contains. If `s` includes a shaping term (length, format), `acc` computed from it is not the truth;
# compute `acc` from the strict rule alone. Then read a few samples: a rising score with flat accuracy is the
# signature of a policy paid for something other than the answer.
# </details>
#
# ### The library's code, after you tried

# %%
from IPython.display import display

for function in (rewards.load_custom_reward_function, rewards.length_bonus_score):
    display(show_source(function, collapsed=True))

# %% [markdown]
# ## 9. Where next
#
# - [Chapter 8 · DeepSeek-R1](08_r1.ipynb): rule rewards at the centre of a training recipe, and a verifier
#   that gets exploited.
# - [Lab A · GSM8K with PPO](lab_a_gsm8k.ipynb) for the data and the GSM8K rule.
# - [Chapter 5 · DAPO / Dr.GRPO](05_dapo.ipynb) for DAPO's reward manager and overlong shaping. Back to
#   [the reading map](index.md).

# %%
print_run_time()
