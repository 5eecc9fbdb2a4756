"""Datasets in verl's parquet schema: the tiny arithmetic task, the chain task, GSM8K, SFT demonstrations, DPO pairs.

Every RL dataset here is a parquet file with verl's columns (what
`examples/data_preprocess/gsm8k.py` writes and `verl/utils/dataset/rl_dataset.py` reads):

    data_source   which reward function scores it ("openai/gsm8k", "minirl/arithmetic", ...)
    prompt        the chat messages, e.g. [{"role": "user", "content": "12+7=?"}]
    ability       a tag ("math")
    reward_model  {"style": "rule", "ground_truth": "19"}
    extra_info    {"split": "train", "index": 0, ...}

The tiny task uses GSM8K's answer convention ("... #### 19"), so one reward function scores both,
and swapping in GSM8K is a change of `data.train_files`.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from collections.abc import Iterable
from pathlib import Path

import datasets
import numpy as np
import torch

from minirl.rewards import CHAIN_SOURCES, GSM8K_SOURCES, default_compute_score

REQUIRED_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")
ARITHMETIC_SOURCE = "minirl/arithmetic"
GSM8K_SOURCE = "openai/gsm8k"
GSM8K_LOCAL_DIR = Path(__file__).parent / "assets" / "gsm8k"
"""GSM8K's own train.jsonl and test.jsonl, shipped with minirl (MIT licence), for `preprocess_gsm8k(local_dir=...)`."""
# verl's instruction for GSM8K (examples/data_preprocess/gsm8k.py)
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


# ----------------------------------------------------------------------------------------------
# The tiny task: "12+7=?" -> "12+7=19 #### 19"
# ----------------------------------------------------------------------------------------------


def arithmetic_rows(num: int, split: str, seed: int = 0, max_operand: int = 30) -> list[dict]:
    """`num` addition questions a+b (0 <= a, b <= max_operand) as verl rows, answers in GSM8K form.

    The prompt is just "a+b=?" (a few tokens, so CPU runs are fast); a correct response is
    "a+b=c #### c": one line of work, then the final answer after "####".
    """
    rng = random.Random(f"{seed}-{split}")
    rows = []
    for index in range(num):
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        rows.append({
            "data_source": ARITHMETIC_SOURCE,
            "prompt": [{"role": "user", "content": f"{a}+{b}=?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"split": split, "index": index, "a": a, "b": b},
        })
    return rows


def arithmetic_response(row: dict, answer: int | None = None) -> str:
    """The demonstration for an arithmetic row: "a+b=c #### c" (c = the right sum unless `answer` is given)."""
    a, b = row["extra_info"]["a"], row["extra_info"]["b"]
    c = a + b if answer is None else answer
    return f"{a}+{b}={c} #### {c}"


def wrong_answer(row: dict, rng: random.Random) -> int:
    """A plausible wrong sum: the right one off by 1 to 3, never negative."""
    right = int(row["reward_model"]["ground_truth"])
    return max(0, right + rng.choice([-3, -2, -1, 1, 2, 3])) if right > 3 else right + rng.randint(1, 3)


def sft_rows(rows: Iterable[dict], wrong_fraction: float = 0.4, seed: int = 0) -> list[dict]:
    """Noisy demonstrations for SFT: each row's response, wrong with probability `wrong_fraction`.

    Imitating noisy demonstrations caps what SFT can learn; RL with a verifier is not capped, which
    is the point DeepSeek-R1 makes. Each demonstration records whether it is correct.
    """
    if not 0.0 <= wrong_fraction <= 1.0:
        raise ValueError(f"wrong_fraction must be in [0, 1], got {wrong_fraction}.")
    rng = random.Random(seed)
    demos = []
    for row in rows:
        wrong = rng.random() < wrong_fraction
        response = arithmetic_response(row, wrong_answer(row, rng) if wrong else None)
        demos.append({"prompt": row["prompt"], "response": response, "correct": not wrong,
                      "data_source": row["data_source"], "reward_model": row["reward_model"]})
    return demos


def worked_response(row: dict, worked: bool, answer: int | None = None) -> str:
    """A direct answer "12+19=31 #### 31", or a worked one that adds tens and units first:
    "12+19: 10+10=20, 2+9=11, 20+11=31 #### 31". A wrong `answer` is a slip in the last step."""
    a, b = row["extra_info"]["a"], row["extra_info"]["b"]
    c = a + b if answer is None else answer
    if not worked:
        return f"{a}+{b}={c} #### {c}"
    tens, units = (a // 10 + b // 10) * 10, a % 10 + b % 10
    return f"{a}+{b}: {a // 10 * 10}+{b // 10 * 10}={tens}, {a % 10}+{b % 10}={units}, {tens}+{units}={c} #### {c}"


def worked_sft_rows(rows: Iterable[dict], wrong_fraction: float = 0.4, seed: int = 0) -> list[dict]:
    """Demonstrations of the preference task (Chapters 3 and 6): half direct, half worked, each wrong with
    probability `wrong_fraction` whatever its style. Whether working helps is left to the model that learns them."""
    rng = random.Random(seed)
    demos = []
    for row in rows:
        worked = rng.random() < 0.5
        wrong = rng.random() < wrong_fraction
        response = worked_response(row, worked, wrong_answer(row, rng) if wrong else None)
        demos.append({"prompt": row["prompt"], "response": response, "correct": not wrong, "worked": worked,
                      "data_source": row["data_source"], "reward_model": row["reward_model"]})
    return demos


# ----------------------------------------------------------------------------------------------
# The chain task (Chapters 5 and 8): "7+5+8+6=?" where writing the running sums pays
# ----------------------------------------------------------------------------------------------

CHAIN_SOURCE = "minirl/chain_sum"


def chain_rows(num: int, split: str, seed: int = 0, min_terms: int = 3, max_terms: int = 4,
               max_operand: int = 9) -> list[dict]:
    """`num` questions that add `min_terms` to `max_terms` numbers in [1, max_operand], as verl rows.

    The final answer is GSM8K's "#### N", so verl's GSM8K rule scores it; the terms are in extra_info.
    """
    if not 2 <= min_terms <= max_terms:
        raise ValueError(f"need 2 <= min_terms <= max_terms, got {min_terms}, {max_terms}.")
    rng = random.Random(f"chain-{seed}-{split}")
    rows = []
    for index in range(num):
        terms = [rng.randint(1, max_operand) for _ in range(rng.randint(min_terms, max_terms))]
        rows.append({
            "data_source": CHAIN_SOURCE,
            "prompt": [{"role": "user", "content": "+".join(map(str, terms)) + "=?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(sum(terms))},
            "extra_info": {"split": split, "index": index, "terms": terms},
        })
    return rows


def chain_response(row: dict, worked: bool, slip: tuple[int, int] | None = None) -> str:
    """A direct answer "#### 26", or a worked one: "<think>7+5=12, 12+8=20, 20+6=26</think> #### 26".

    slip=(step, offset) makes a mistake: the running sum after `step` (0-based) is off by `offset`, and the
    chain goes on from the wrong value, as a person's would. A direct answer's slip is its whole offset.
    """
    terms = row["extra_info"]["terms"]
    if not worked:
        return f"#### {sum(terms) + (slip[1] if slip else 0)}"
    total, steps = terms[0], []
    for step, term in enumerate(terms[1:]):
        new = total + term + (slip[1] if slip and slip[0] == step else 0)
        steps.append(f"{total}+{term}={new}")
        total = new
    return f"<think>{', '.join(steps)}</think> #### {total}"


def chain_sft_rows(rows: Iterable[dict], worked_fraction: float = 0.5, wrong_fraction: float = 0.4,
                   seed: int = 0) -> list[dict]:
    """Noisy demonstrations of the chain task: worked with probability `worked_fraction`, else direct; either
    has a slip with probability `wrong_fraction`. Whether working helps is left to the model that learns them."""
    for name, value in (("worked_fraction", worked_fraction), ("wrong_fraction", wrong_fraction)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}.")
    rng = random.Random(seed)
    demos = []
    for row in rows:
        worked = rng.random() < worked_fraction
        steps = len(row["extra_info"]["terms"]) - 1
        slip = (rng.randrange(steps), rng.choice([-3, -2, -1, 1, 2, 3])) if rng.random() < wrong_fraction else None
        if slip and sum(row["extra_info"]["terms"]) + slip[1] < 0:
            slip = (slip[0], abs(slip[1]))
        response = chain_response(row, worked, slip)
        demos.append({"prompt": row["prompt"], "response": response, "correct": slip is None, "worked": worked,
                      "data_source": row["data_source"], "reward_model": row["reward_model"]})
    return demos


# ----------------------------------------------------------------------------------------------
# The GSM8K-format tiny task (Lab A): templated word problems, "#### N" answers, GSM8K's rule
# ----------------------------------------------------------------------------------------------

WORD_SOURCE = "minirl/gsm8k_tiny"
WORD_NAMES = ("Tom", "Ann", "Sam", "Mia", "Leo", "Zoe")
WORD_ITEMS = ("apples", "pens", "cards", "eggs", "books", "coins")
# (template, operation): the wording alone says whether to add or subtract
WORD_TEMPLATES = (
    ("{name} has {a} {item}. {name} gets {b} more. How many {item} does {name} have now?", "+"),
    ("{name} had {a} {item} and found {b} more. How many {item} in all?", "+"),
    ("A box has {a} {item}. {name} puts in {b} more. How many {item} are in the box?", "+"),
    ("{name} has {a} {item}. {name} gives away {b}. How many {item} are left?", "-"),
    ("{name} had {a} {item} and lost {b}. How many {item} does {name} have now?", "-"),
    ("A box has {a} {item}. {name} takes out {b}. How many {item} are in the box?", "-"),
)


def word_problem_rows(num: int, split: str, seed: int = 0, max_operand: int = 30) -> list[dict]:
    """`num` one-step word problems in GSM8K's format, as verl rows (data_source "minirl/gsm8k_tiny").

    "Mia has 12 pens. Mia gets 7 more. How many pens does Mia have now?" -> ground truth "19". Half the
    templates add, half subtract (a >= b, so answers are never negative); numbers are in [1, max_operand].
    The answer convention is GSM8K's ("... #### 19"), so verl's GSM8K rule scores it. Unlike the real
    GSM8K prompts, these carry no instruction sentence: it would triple the prompt for a tiny model.
    """
    rng = random.Random(f"word-{seed}-{split}")
    rows = []
    for index in range(num):
        template, op = rng.choice(WORD_TEMPLATES)
        a, b = rng.randint(1, max_operand), rng.randint(1, max_operand)
        if op == "-" and a < b:
            a, b = b, a
        question = template.format(name=rng.choice(WORD_NAMES), item=rng.choice(WORD_ITEMS), a=a, b=b)
        rows.append({
            "data_source": WORD_SOURCE,
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b if op == "+" else a - b)},
            "extra_info": {"split": split, "index": index, "a": a, "b": b, "op": op, "question": question},
        })
    return rows


def word_response(row: dict, answer: int | None = None) -> str:
    """The demonstration for a word problem: "12+7=19 #### 19" (the equation, then GSM8K's final answer)."""
    info = row["extra_info"]
    c = int(row["reward_model"]["ground_truth"]) if answer is None else answer
    return f"{info['a']}{info['op']}{info['b']}={c} #### {c}"


def word_sft_rows(rows: Iterable[dict], wrong_fraction: float = 0.4, seed: int = 0) -> list[dict]:
    """Noisy demonstrations of the word problems: each wrong with probability `wrong_fraction` (off by 1-3)."""
    if not 0.0 <= wrong_fraction <= 1.0:
        raise ValueError(f"wrong_fraction must be in [0, 1], got {wrong_fraction}.")
    rng = random.Random(seed)
    demos = []
    for row in rows:
        wrong = rng.random() < wrong_fraction
        response = word_response(row, wrong_answer(row, rng) if wrong else None)
        demos.append({"prompt": row["prompt"], "response": response, "correct": not wrong,
                      "data_source": row["data_source"], "reward_model": row["reward_model"]})
    return demos


# ----------------------------------------------------------------------------------------------
# The tool task (Chapter 13): "417+385=?" with an `add` tool the model may call
# ----------------------------------------------------------------------------------------------

TOOL_SOURCE = "minirl/tool_add"
TOOL_FILE = Path(__file__).parent / "assets" / "tools" / "calculator.py"
"""The task's function-tool file (`add(a, b)`), loaded through multi_turn.function_tool_path."""


def tool_rows(num: int, split: str, seed: int = 0, max_operand: int = 999) -> list[dict]:
    """`num` questions a+b with a, b in [max_operand // 10 + 1, max_operand] (three digits by default), as verl
    rows that run the `tool_agent` loop (the row's `agent_name`). The answer is GSM8K's "#### N"."""
    rng = random.Random(f"tool-{seed}-{split}")
    low = max_operand // 10 + 1
    rows = []
    for index in range(num):
        a, b = rng.randint(low, max_operand), rng.randint(low, max_operand)
        rows.append({
            "data_source": TOOL_SOURCE,
            "prompt": [{"role": "user", "content": f"{a}+{b}=?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"split": split, "index": index, "a": a, "b": b},
            "agent_name": "tool_agent",
        })
    return rows


def hermes_call(name: str, arguments: dict) -> str:
    """A tool call in the hermes format: <tool_call>{"name": ..., "arguments": {...}}</tool_call>."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def miscopy(number: int, rng: random.Random) -> int:
    """`number` with one of its digits changed (a copying slip)."""
    digits = list(str(number))
    position = rng.randrange(len(digits))
    choices = [d for d in "0123456789" if d != digits[position] and (position > 0 or d != "0")]
    digits[position] = rng.choice(choices)
    return int("".join(digits))


TOOL_DEMO_KINDS = ("call", "miscopied_call", "malformed_call", "direct", "wrong_direct")


def tool_demo_turns(row: dict, kind: str, rng: random.Random) -> list[dict]:
    """The turns after the prompt of one demonstration of the tool task (assistant and tool messages):

        call            <tool_call>{"name": "add", "arguments": {"a": 417, "b": 385}}</tool_call> | tool: 802 | #### 802
        miscopied_call  the same with one digit of an argument changed: the tool adds what it was given
        malformed_call  the call's JSON lacks its closing brace: the loop drops it and the answer ends there
        direct          #### 802 (the sum done in the head)
        wrong_direct    #### 812 (one digit off)
    """
    a, b = row["extra_info"]["a"], row["extra_info"]["b"]
    if kind in ("direct", "wrong_direct"):
        return [{"role": "assistant", "content": f"#### {a + b if kind == 'direct' else miscopy(a + b, rng)}"}]
    if kind == "malformed_call":
        return [{"role": "assistant", "content": hermes_call("add", {"a": a, "b": b}).replace("}}<", "}<")}]
    if kind == "miscopied_call":
        a, b = (miscopy(a, rng), b) if rng.random() < 0.5 else (a, miscopy(b, rng))
    elif kind != "call":
        raise ValueError(f"kind must be one of {TOOL_DEMO_KINDS}, got {kind!r}")
    return [{"role": "assistant", "content": hermes_call("add", {"a": a, "b": b})},
            {"role": "tool", "content": str(a + b)},
            {"role": "assistant", "content": f"#### {a + b}"}]


def tool_sft_rows(rows: Iterable[dict], call_fraction: float = 0.5, wrong_fraction: float = 0.3,
                  seed: int = 0) -> list[dict]:
    """Noisy demonstrations of the tool task: a call with probability `call_fraction`, else a direct answer;
    with probability `wrong_fraction` either goes wrong (a call half the time miscopied, half the time malformed;
    a direct answer one digit off). Each demo holds its `turns` (see `tool_demo_turns`) and its `kind`."""
    for name, value in (("call_fraction", call_fraction), ("wrong_fraction", wrong_fraction)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}.")
    rng = random.Random(seed)
    demos = []
    for row in rows:
        call, wrong = rng.random() < call_fraction, rng.random() < wrong_fraction
        if call:
            kind = ("miscopied_call" if rng.random() < 0.5 else "malformed_call") if wrong else "call"
        else:
            kind = "wrong_direct" if wrong else "direct"
        demos.append({"prompt": row["prompt"], "turns": tool_demo_turns(row, kind, rng), "kind": kind,
                      "correct": kind in ("call", "direct"), "data_source": row["data_source"],
                      "reward_model": row["reward_model"]})
    return demos


def preference_pairs(rows: Iterable[dict], seed: int = 0) -> list[dict]:
    """DPO pairs in TRL's conversational layout: {"prompt", "chosen", "rejected"}.

    The verifier decides: "chosen" is a response the reward function scores as correct, "rejected"
    one it scores as wrong, both for the same prompt.
    """
    rng = random.Random(seed)
    pairs = []
    for row in rows:
        chosen, rejected = arithmetic_response(row), arithmetic_response(row, wrong_answer(row, rng))
        truth = row["reward_model"]["ground_truth"]
        assert default_compute_score(row["data_source"], chosen, truth) == 1.0
        assert default_compute_score(row["data_source"], rejected, truth) == 0.0
        pairs.append({"prompt": row["prompt"], "chosen": [{"role": "assistant", "content": chosen}],
                      "rejected": [{"role": "assistant", "content": rejected}]})
    return pairs


# ----------------------------------------------------------------------------------------------
# GSM8K, preprocessed as verl does (examples/data_preprocess/gsm8k.py)
# ----------------------------------------------------------------------------------------------


def extract_gsm8k_ground_truth(answer_raw: str) -> str:
    """The number after "#### " in a GSM8K reference answer, commas removed ("1,234" -> "1234")."""
    match = re.search(r"#### (\-?[0-9\.\,]+)", answer_raw)
    if match is None:
        raise ValueError(f"GSM8K answer has no '#### <number>' line: {answer_raw[-80:]!r}")
    return match.group(1).replace(",", "")


def gsm8k_rows(examples: Iterable[dict], split: str) -> list[dict]:
    """verl rows from raw GSM8K examples ({"question", "answer"}): the question plus verl's instruction."""
    rows = []
    for index, example in enumerate(examples):
        rows.append({
            "data_source": GSM8K_SOURCE,
            "prompt": [{"role": "user", "content": example["question"] + " " + GSM8K_INSTRUCTION}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": extract_gsm8k_ground_truth(example["answer"])},
            "extra_info": {"split": split, "index": index, "answer": example["answer"],
                           "question": example["question"]},
        })
    return rows


def preprocess_gsm8k(out_dir: str | Path, local_dir: str | Path | None = None) -> dict[str, Path]:
    """Write GSM8K's train/test splits as verl parquet files into `out_dir`.

    Args:
        out_dir: where train.parquet and test.parquet go.
        local_dir: a folder with train.jsonl and test.jsonl (GSM8K's own files, columns question and
            answer). None downloads `openai/gsm8k` ("main") from the Hugging Face hub (needs network).
    Returns:
        {"train": path, "test": path}.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if local_dir is None:
        raw = datasets.load_dataset(GSM8K_SOURCE, "main")
        splits = {split: list(raw[split]) for split in ("train", "test")}
    else:
        splits = {}
        for split in ("train", "test"):
            path = Path(local_dir) / f"{split}.jsonl"
            if not path.exists():
                raise FileNotFoundError(f"{path} not found: local_dir must hold GSM8K's train.jsonl and test.jsonl.")
            with path.open() as handle:
                splits[split] = [json.loads(line) for line in handle if line.strip()]
    return {split: write_parquet(gsm8k_rows(examples, split), out_dir / f"{split}.parquet")
            for split, examples in splits.items()}


# ----------------------------------------------------------------------------------------------
# Reading and writing parquet files
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet_datasets():
    """Hide `datasets`' per-file progress bars (noise for files of a few kB)."""
    was_enabled = datasets.utils.logging.is_progress_bar_enabled()
    datasets.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            datasets.utils.logging.enable_progress_bar()


def write_parquet(rows: list[dict], path: str | Path) -> Path:
    """Write rows (dicts) to a parquet file with `datasets`."""
    if not rows:
        raise ValueError(f"refusing to write an empty dataset to {path}.")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _quiet_datasets():
        datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


def read_parquet(path: str | Path, required_columns: Iterable[str] = REQUIRED_COLUMNS) -> datasets.Dataset:
    """Read a parquet file and check that it has the columns verl's RL datasets need.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not parquet, is empty, or lacks a required column (the message lists
            the missing ones and points at the preprocessing functions that write the right schema).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset file {path} does not exist. Build one with minirl.data "
                                "(make_arithmetic_dataset, preprocess_gsm8k) or fix the path.")
    try:
        with _quiet_datasets():
            dataset = datasets.Dataset.from_parquet(str(path))
    except Exception as error:  # pyarrow raises several types for a file that is not parquet
        raise ValueError(f"{path} could not be read as parquet ({type(error).__name__}: {error}).") from error
    missing = [column for column in required_columns if column not in dataset.column_names]
    if missing:
        raise ValueError(f"{path} lacks the column(s) {missing} of verl's schema {list(required_columns)}; "
                         "write it with minirl.data.write_parquet from rows like arithmetic_rows() or gsm8k_rows().")
    if len(dataset) == 0:
        raise ValueError(f"{path} holds no rows.")
    return dataset


DEMO_STYLES = ("plain", "worked", "chain", "word", "tool")


def make_arithmetic_dataset(out_dir: str | Path, num_train: int = 2000, num_test: int = 200, seed: int = 0,
                            wrong_fraction: float = 0.4, max_operand: int = 30, demo_style: str = "plain",
                            worked_fraction: float = 0.5, terms: tuple[int, int] = (3, 4)) -> dict[str, Path]:
    """Write a tiny task's files: train.parquet, test.parquet (RL), sft.parquet (noisy demos), dpo.parquet.

    demo_style "plain" writes "a+b=c #### c" demonstrations, "worked" the preference task's mix of direct and
    worked answers (`worked_sft_rows`), "chain" the chain task (`chain_rows`, `chain_sft_rows` with
    worked_fraction; max_operand is then the largest term, `terms` the fewest and most of them, and there is no
    dpo.parquet), "word" the GSM8K-format word problems of Lab A (`word_problem_rows`, `word_sft_rows`; no
    dpo.parquet), "tool" Chapter 13's sums of two numbers up to max_operand with an `add` tool (`tool_rows`,
    `tool_sft_rows` with worked_fraction as the share of demonstrations that call it; no dpo.parquet).
    Demonstrations are wrong with probability wrong_fraction.
    """
    out_dir = Path(out_dir)
    if demo_style not in DEMO_STYLES:
        raise ValueError(f"demo_style must be one of {DEMO_STYLES}, got {demo_style!r}.")
    if demo_style == "chain":
        train, test = (chain_rows(n, split, seed, *terms, max_operand=max_operand)
                       for n, split in ((num_train, "train"), (num_test, "test")))
        demos = chain_sft_rows(train, worked_fraction, wrong_fraction, seed)
    elif demo_style == "tool":
        train, test = (tool_rows(n, split, seed, max_operand)
                       for n, split in ((num_train, "train"), (num_test, "test")))
        demos = tool_sft_rows(train, worked_fraction, wrong_fraction, seed)
    elif demo_style == "word":
        train, test = (word_problem_rows(n, split, seed, max_operand) for n, split in ((num_train, "train"),
                                                                                        (num_test, "test")))
        demos = word_sft_rows(train, wrong_fraction, seed)
    else:
        train = arithmetic_rows(num_train, "train", seed, max_operand)
        test = arithmetic_rows(num_test, "test", seed, max_operand)
        demos = (sft_rows if demo_style == "plain" else worked_sft_rows)(train, wrong_fraction, seed)
    paths = {"train": write_parquet(train, out_dir / "train.parquet"),
             "test": write_parquet(test, out_dir / "test.parquet"),
             "sft": write_parquet(demos, out_dir / "sft.parquet")}
    if demo_style in ("plain", "worked"):
        paths["dpo"] = write_parquet(preference_pairs(train, seed), out_dir / "dpo.parquet")
    return paths


PAIR_COLUMNS = ("prompt", "chosen", "rejected")  # TRL's preference layout


def read_preference_pairs(path: str | Path, key: str) -> list[dict]:
    """Comparisons from a parquet file in TRL's layout, checked: prompt a chat list, chosen/rejected non-empty."""
    rows = read_parquet(path, required_columns=PAIR_COLUMNS).to_list()
    for i, row in enumerate(rows):
        if not isinstance(row["prompt"], list):
            raise ValueError(f"{key}: {path} row {i}: prompt must be a list of chat messages, as in TRL's "
                             "conversational layout.")
        for column in ("chosen", "rejected"):
            if answer_text(row[column]) is None:
                raise ValueError(f"{key}: {path} row {i}: {column} must be a string or [{{'role': 'assistant', "
                                 "'content': ...}].")
    return rows


def answer_text(value) -> str | None:
    """The text of a preference answer: a string, or TRL's [{"role": "assistant", "content": ...}]; else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict) and "content" in value[0]:
        return value[0]["content"]
    return None



# ----------------------------------------------------------------------------------------------
# Tokenising prompts (verl's RLHFDataset: chat template, left padding, truncation="error")
# ----------------------------------------------------------------------------------------------


def compute_position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: cumsum(mask) - 1, clipped at 0.

    Mirrors `verl/utils/model.py::compute_position_id_with_mask`. Rollout and training must use
    the same positions, or the recomputed log-probs drift from the sampled ones.
    """
    return torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0)


def prompt_token_ids(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """Token ids of one chat prompt with the generation prompt appended (what the model is asked to continue);
    `tools` (OpenAI schemas) go to the chat template, which may show them to the model."""
    extra = {"tools": tools} if tools else {}
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# A fixed conversation that the chat template renders before new turns, cut off again (`render_new_turns`).
SYNTHETIC_PREFIX = [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]


def render_new_turns(tokenizer, new_messages: list[dict], tools: list[dict] | None) -> list[int]:
    """The token ids the chat template adds for `new_messages` (tool results), up to the next assistant prompt.

    Rendered after a fixed synthetic prefix and cut off at its end (verl's `render_delta_token_id`): the template
    decides every token, and the conversation so far is never re-tokenized. Template tokens that follow the end of
    an assistant turn (e.g. Qwen's newline after <|im_end|>, which the model never samples) are included, because
    the model's last turn ended at its EOS.
    """
    def render(messages, generation_prompt):
        extra = {"tools": tools} if tools else {}
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt, **extra)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prefix = render(SYNTHETIC_PREFIX, False)
    full = render(SYNTHETIC_PREFIX + new_messages, True)
    if full[:len(prefix)] != prefix:
        raise ValueError("the chat template renders the conversation differently once tool turns are added; it "
                         "cannot be extended turn by turn (is there a `tool` role in the template?)")
    eos = tokenizer.eos_token_id
    after_eos = prefix[len(prefix) - prefix[::-1].index(eos):] if eos in prefix else []
    return after_eos + full[len(prefix):]


def truncate_prompt(ids: list[int], max_prompt_length: int, truncation: str = "error") -> list[int]:
    """Fit a prompt into max_prompt_length tokens as verl's `data.truncation` says.

    error: raise (silently cutting a question changes its answer); left: keep the last tokens (the end
    of the prompt, where the question and the generation prompt are); right: keep the first tokens;
    middle: keep the first and last halves.
    """
    if len(ids) <= max_prompt_length:
        return ids
    if truncation == "left":
        return ids[-max_prompt_length:]
    if truncation == "right":
        return ids[:max_prompt_length]
    if truncation == "middle":
        left = max_prompt_length // 2
        return ids[:left] + ids[len(ids) - (max_prompt_length - left):]
    raise ValueError(f"a prompt has {len(ids)} tokens, more than data.max_prompt_length={max_prompt_length}. Raise "
                     "data.max_prompt_length, drop long prompts with data.filter_overlong_prompts=true (what verl's "
                     "example scripts do), or cut them with data.truncation=left|right|middle.")


def left_pad(rows: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token-id lists to the longest: (input_ids, attention_mask), each (B, longest)."""
    longest = max(len(ids) for ids in rows)
    input_ids = torch.full((len(rows), longest), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, ids in enumerate(rows):
        input_ids[i, longest - len(ids):] = torch.tensor(ids, dtype=torch.long)
        attention_mask[i, longest - len(ids):] = 1
    return input_ids, attention_mask


def encode_prompts(tokenizer, messages: list[list[dict]], max_prompt_length: int,
                   truncation: str = "error") -> dict[str, torch.Tensor]:
    """Apply the chat template, tokenise, and left-pad a list of prompts to one (B, P) tensor.

    P is the longest prompt in the batch. A prompt longer than `max_prompt_length` is handled by
    `truncate_prompt` (verl's `data.truncation`, default "error").

    Returns:
        {"input_ids", "attention_mask", "position_ids"}, each (B, P).
    """
    if not messages:
        raise ValueError("encode_prompts got an empty batch of prompts.")
    encoded = [truncate_prompt(prompt_token_ids(tokenizer, m), max_prompt_length, truncation) for m in messages]
    input_ids, attention_mask = left_pad(encoded, tokenizer.pad_token_id)
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": compute_position_ids(attention_mask)}


def check_rl_row(row: dict, where: str) -> None:
    """Reject a row that verl's RL dataset would mis-read, naming the field and the fix.

    A row's `prompt` is a list of chat messages ({"role", "content"}); `reward_model` is a dict whose
    `ground_truth` is a string (verl's preprocessing scripts write strings; a number or a word would
    make the rule-based scorers return 0 forever, silently). GSM8K-style sources must have a number
    as their ground truth.
    """
    prompt = row.get("prompt")
    if not (isinstance(prompt, list) and prompt and all(isinstance(m, dict) and {"role", "content"} <= set(m)
                                                        for m in prompt)):
        raise ValueError(f"{where}: prompt must be a list of chat messages like [{{'role': 'user', 'content': "
                         f"'...'}}] (verl's schema), got {prompt!r:.80}.")
    reward_model = row.get("reward_model")
    if not isinstance(reward_model, dict) or reward_model.get("ground_truth") is None:
        raise ValueError(f"{where}: reward_model must be a dict with a 'ground_truth' key "
                         f"(e.g. {{'style': 'rule', 'ground_truth': '72'}}), got {reward_model!r:.80}.")
    truth = reward_model["ground_truth"]
    if not isinstance(truth, str):
        raise ValueError(f"{where}: reward_model.ground_truth is {type(truth).__name__} {truth!r:.40}; verl's schema "
                         f"stores it as a string (write str({truth!r:.40})), or the scorer compares it with text "
                         "and returns 0 forever.")
    if row.get("data_source") in GSM8K_SOURCES + CHAIN_SOURCES and not re.fullmatch(r"-?[\d,]*\.?\d+", truth.strip()):
        raise ValueError(f"{where}: data_source {row['data_source']!r} is scored by comparing numbers, but its "
                         f"ground_truth {truth!r:.40} is not a number, so every answer would score 0.")


def load_rl_rows(files: str | list[str], tokenizer, max_prompt_length: int, filter_overlong_prompts: bool = False,
                 max_samples: int = -1, shuffle: bool = False, seed: int | None = 0,
                 key: str = "data.train_files") -> list[dict]:
    """The rows of one or several verl parquet files, as verl's `RLHFDataset` prepares them.

    Files are concatenated in order. With 0 < max_samples < rows, a subset is kept first: a seeded
    random choice when `shuffle` (verl: np.random.default_rng(seed).choice), else the first rows.
    Then, with `filter_overlong_prompts`, prompts longer than max_prompt_length tokens (chat template
    applied) are dropped. `key` names the config key the files came from, for error messages.

    Raises:
        FileNotFoundError, ValueError: a missing or unreadable file, a malformed row (`check_rl_row`),
            or no row left after filtering; each names the file or `key` and the fix.
    """
    files = [files] if isinstance(files, str) else list(files)
    rows = []
    for path in files:
        try:
            for index, row in enumerate(read_parquet(path).to_list()):
                check_rl_row(row, f"{path} row {index}")
                rows.append(row)
        except FileNotFoundError as error:
            raise FileNotFoundError(f"{key}: {error}") from None
    if 0 < max_samples < len(rows):
        if shuffle:
            keep = np.random.default_rng(seed).choice(len(rows), max_samples, replace=False)
            rows = [rows[i] for i in keep]
        else:
            rows = rows[:max_samples]
    if filter_overlong_prompts:
        rows = [row for row in rows if len(prompt_token_ids(tokenizer, row["prompt"])) <= max_prompt_length]
        if not rows:
            raise ValueError(f"every prompt of {key} {files} is longer than data.max_prompt_length={max_prompt_length} "
                             "tokens: raise data.max_prompt_length.")
    return rows
