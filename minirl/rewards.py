"""Verifiable rewards: score a response string against a ground truth, chosen by `data_source`.

Mirrors verl 0.9.1's `verl/utils/reward_score/` (`gsm8k.compute_score`, `default_compute_score`) and
the naive reward manager that verl 0.9.1's trainer runs inside its reward loop,
`verl/experimental/reward_loop/reward_manager/naive.py::NaiveRewardManager.run_single`. The GSM8K
scorer matches verl exactly;
the boxed-answer scorer is in the spirit of verl's `math_dapo` (normalise, compare, score +1/-1)
with its own, smaller normaliser. The "writing reward functions" lab reads this file.

A reward function must never raise on a response: the policy can write anything.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable

import torch

from minirl.core import place_scores_on_last_token

# ----------------------------------------------------------------------------------------------
# GSM8K: "#### 42" at the end of the answer (verl/utils/reward_score/gsm8k.py)
# ----------------------------------------------------------------------------------------------

SOLUTION_CLIP_CHARS = 300  # only the end of a response is searched: the final answer lives there


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The final answer of a GSM8K-style response, or None.

        strict:   the last "#### <number>" (a space after ####); commas and "$" removed
        flexible: the last number-like token anywhere, skipping "" and "."

    Only the last 300 characters are searched, as in verl. verl's flexible mode has a quirk we keep:
    if every number-like token is "." or "", the last of them is returned (and will not match).
    """
    if method not in ("strict", "flexible"):
        raise ValueError(f"invalid method {method!r}; valid choices: 'strict', 'flexible'.")
    solution_str = solution_str[-SOLUTION_CLIP_CHARS:]
    if method == "strict":
        solutions = re.findall(r"#### (\-?[0-9\.\,]+)", solution_str)
        return solutions[-1].replace(",", "").replace("$", "") if solutions else None
    candidates = re.findall(r"(\-?[0-9\.\,]+)", solution_str)
    final_answer = None
    for final_answer in reversed(candidates):
        if final_answer not in ("", "."):
            break
    return final_answer


def compute_gsm8k_score(
    solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """GSM8K's rule reward (verl's `gsm8k.compute_score`).

        no answer found                -> 0
        answer == ground_truth         -> score          (exact string equality)
        an answer, but a wrong one     -> format_score   (partial credit for the format, default 0)
    """
    answer = extract_solution(solution_str, method)
    if answer is None:
        return 0
    return score if answer == ground_truth else format_score


def format_reward(solution_str: str) -> float:
    """1.0 if the response ends with a final answer in GSM8K's format ("#### <number>"), else 0.0.

    A format reward checks *how* the model answers, not whether it is right. Mixed with the
    correctness reward it teaches the format early; alone, it is easy to hack (any number will do).
    """
    return 1.0 if re.search(r"#### \-?[0-9][0-9\.\,]*\s*$", solution_str[-SOLUTION_CLIP_CHARS:]) else 0.0


# ----------------------------------------------------------------------------------------------
# Boxed answers, in the spirit of verl's math_dapo: "... \boxed{42}" scores +1, anything else -1
# ----------------------------------------------------------------------------------------------


def last_boxed_content(text: str) -> str | None:
    r"""The content of the last \boxed{...} in `text` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    for i in range(start + len("\\boxed"), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + len("\\boxed{") : i]
    return None  # unbalanced braces


def normalize_math_answer(answer: str) -> str:
    r"""Canonical form of a final answer, so that "$\frac{1}{2}$", "\dfrac12" and " 1/2 " compare equal-ish.

    Takes the text after the last "=", drops "$", spaces, "\left"/"\right", "\!", a trailing ".",
    unwraps \text{...}, maps \dfrac/\tfrac to \frac, writes \fracab as \frac{a}{b}, and removes the
    thousands commas of a plain integer ("1,000" -> "1000").
    """
    answer = answer.split("=")[-1]
    for old, new in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("$", ""), (" ", ""), ("\\dfrac", "\\frac"),
                     ("\\tfrac", "\\frac")):
        answer = answer.replace(old, new)
    answer = re.sub(r"\\text\{([^{}]*)\}", r"\1", answer)  # [^{}]: linear time on an unclosed \text{
    answer = re.sub(r"\\frac([^{\\])([^{\\])", r"\\frac{\1}{\2}", answer)
    answer = answer.rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", answer):
        answer = answer.replace(",", "")
    return answer


def compute_math_score(solution_str: str, ground_truth: str) -> dict:
    r"""+1 if the last \boxed{} answer (or the last "Answer: ..." line) matches the ground truth, else -1.

    Like verl's `math_dapo.compute_score`: only the last 300 characters count, both sides are
    normalised, and a wrong or missing answer scores -1 (not 0), so that "no answer" is as bad as a
    wrong one. Returns {"score", "acc", "pred"}; pred is "[INVALID]" when no answer was found.
    """
    tail = solution_str[-SOLUTION_CLIP_CHARS:]
    pred = last_boxed_content(tail)
    if pred is None:
        lines = re.findall(r"(?i)Answer\s*:\s*([^\n]+)", tail)
        pred = lines[-1] if lines else None
    if pred is None:
        return {"score": -1.0, "acc": False, "pred": "[INVALID]"}
    pred = normalize_math_answer(pred)
    correct = pred == normalize_math_answer(ground_truth)
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": pred}


def compute_math_verify_score(solution_str: str, ground_truth: str) -> float:
    r"""1.0 if the math-verify library finds the response's answer equal to the ground truth, else 0.0.

    verl's `utils/reward_score/math_verify.py::compute_score`: the ground truth is wrapped in \boxed{} and
    parsed as LaTeX; the response is parsed as LaTeX and as a plain expression; the score is 1 if any parse
    of the response is mathematically equal to the truth ("26.0" and "\frac{52}{2}" equal "26"). It looks
    for the last answer-like expression anywhere, with no "####" or format required.

    verl runs each check in a process pool with a 30 s timeout; minirl calls the library in-process. In the
    main thread the library's own timeouts apply (5 s per parse, signal-based); elsewhere (a thread) they
    cannot, so they are switched off there instead of failing every check. Any error scores 0.0, as in verl.
    Needs `pip install math-verify` (a minirl dependency).
    """
    import threading

    from math_verify.grader import verify
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig, parse

    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        gold = parse("\\boxed{" + ground_truth + "}", (LatexExtractionConfig(),), parsing_timeout=timeout)
        pred = parse(solution_str, (ExprExtractionConfig(), LatexExtractionConfig()), parsing_timeout=timeout)
        if gold and pred:
            return max(1.0 if any(verify(g, p, timeout_seconds=timeout) for g in gold) else 0.0 for p in pred)
    except Exception:  # noqa: BLE001 - a verifier must score, never crash a training step (verl: 0.0)
        return 0.0
    return 0.0


# ----------------------------------------------------------------------------------------------
# The chain task (Chapters 5 and 8): "<think>7+5=12, 12+8=20</think> #### 20"
# ----------------------------------------------------------------------------------------------

THINK_FORMAT = re.compile(r"<think>(.*?)</think>\s*#### -?[0-9][0-9,.]*\s*$", re.DOTALL)


def think_format(solution_str: str) -> float:
    """1.0 if the response is one <think>...</think> block followed by a final "#### N" and nothing else."""
    match = THINK_FORMAT.fullmatch(solution_str.strip())
    return 1.0 if match and "<think>" not in match.group(1) and "</think>" not in match.group(1) else 0.0


def compute_chain_score(solution_str: str, ground_truth: str) -> dict:
    """The chain task's verifier: the GSM8K rule for the answer, plus what the chapters watch.

    Returns {"score": 1.0 or 0.0 (the right final answer, strict "#### N"), "acc", "format" (think_format),
    "worked": 1.0 if the response writes at least one step "a+b=c" before its final answer}.
    Only "score" is the reward; the rest is logged (minirl/<key>/mean).
    """
    score = float(compute_gsm8k_score(solution_str, ground_truth))
    worked = 1.0 if re.search(r"\d\+\d+=\d", solution_str.split("####")[0]) else 0.0
    return {"score": score, "acc": score == 1.0, "format": think_format(solution_str), "worked": worked}


def r1_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
             format_weight: float = 0.1) -> dict:
    """DeepSeek-R1's rule reward for the chain task: accuracy plus a small reward for the <think> format.

        score = acc + format_weight * format

    A custom reward function in verl's signature: `reward.custom_reward_function.path=minirl/rewards.py
    reward.custom_reward_function.name=r1_score`. Nobody rewards the steps themselves; only the answer and
    the shape of the response are checked.
    """
    result = compute_chain_score(solution_str, ground_truth)
    return {**result, "score": result["score"] + format_weight * result["format"]}


def lenient_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> dict:
    """A too-lenient verifier, for Chapter 8 to attack: full reward if the right number appears anywhere.

    Do not train with it: a response can collect the reward without a right final answer, e.g. by listing
    many numbers, or by writing the right running sum and then any final answer. "acc" is what the strict
    rule (`compute_chain_score`) says of the same response, so `minirl/acc/mean` and validation's
    `val-core/.../acc` report the truth while `critic/score/mean` reports what the policy is paid.
    """
    numbers = re.findall(r"-?\d+", solution_str[-SOLUTION_CLIP_CHARS:])
    strict = compute_chain_score(solution_str, ground_truth)
    return {"score": 1.0 if ground_truth.strip() in numbers else 0.0, "acc": strict["acc"],
            "worked": strict["worked"], "numbers": float(len(numbers))}


def length_bonus_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                       per_char: float = 0.02, cap: float = 0.5) -> dict:
    """A plausible shaping with a hole, for Lab B to attack: GSM8K's rule plus a bonus for longer answers.

        score = gsm8k_strict + min(cap, per_char * len(solution_str))

    The intent is "reward showing work". The hole: length is paid whether or not the extra text is work, and
    whether or not the answer is right. "acc" is the strict rule alone, so `minirl/acc/mean` and validation's
    `val-core/.../acc` report the truth while `critic/score/mean` reports what the policy is paid.
    """
    acc = float(compute_gsm8k_score(solution_str, ground_truth))
    bonus = min(cap, per_char * len(solution_str))
    return {"score": acc + bonus, "acc": acc, "length_bonus": bonus}


def load_custom_reward_function(path: str, name: str = "compute_score") -> Callable:
    """Your reward function, loaded from a file as verl 0.9.1 does (`verl/trainer/ppo/reward.py::get_custom_reward_fn`).

    Raises:
        FileNotFoundError, ValueError: the file does not exist, does not import, or has no callable `name`.
    """
    import importlib.util
    from pathlib import Path

    if not Path(path).is_file():
        raise FileNotFoundError(f"reward.custom_reward_function.path: {path} is not a file.")
    spec = importlib.util.spec_from_file_location(f"custom_reward_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise ValueError(f"reward.custom_reward_function.path: {path} does not import ({type(error).__name__}: "
                         f"{error}).") from error
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"reward.custom_reward_function.name: {path} has no function {name!r}; set the name of "
                         "your compute_score(data_source, solution_str, ground_truth, extra_info).")
    return function


# ----------------------------------------------------------------------------------------------
# Dispatch by data_source (verl/utils/reward_score/__init__.py::default_compute_score)
# ----------------------------------------------------------------------------------------------

GSM8K_SOURCES = ("openai/gsm8k", "minirl/arithmetic", "minirl/gsm8k_tiny", "minirl/tool_add")
CHAIN_SOURCES = ("minirl/chain_sum",)
MATH_SOURCES = ("math_dapo", "math", "minirl/boxed")


def has_rule(data_source: str) -> bool:
    """Whether `default_compute_score` has a rule for this data_source."""
    return data_source in GSM8K_SOURCES + CHAIN_SOURCES + MATH_SOURCES


def default_compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None):
    """Score one response with the rule its dataset asks for.

        openai/gsm8k, minirl/arithmetic,
        minirl/gsm8k_tiny, minirl/tool_add -> compute_gsm8k_score (0/1)
        minirl/chain_sum                 -> compute_chain_score ({"score": 0/1, "acc", "format", "worked"})
        math_dapo, math, minirl/boxed    -> compute_math_score ({"score": +-1, "acc", "pred"})

    Raises:
        ValueError: for an unknown data_source, naming the known ones. (verl raises
            NotImplementedError.) Pass your own `compute_score` to the reward manager for new data.
    """
    if data_source in GSM8K_SOURCES:
        return float(compute_gsm8k_score(solution_str, ground_truth))
    if data_source in CHAIN_SOURCES:
        return compute_chain_score(solution_str, ground_truth)
    if data_source in MATH_SOURCES:
        return compute_math_score(solution_str, ground_truth)
    raise ValueError(f"no reward function for data_source {data_source!r}; known: "
                     f"{GSM8K_SOURCES + CHAIN_SOURCES + MATH_SOURCES}. "
                     "Pass compute_score=your_function to the reward manager to score other data.")


# ----------------------------------------------------------------------------------------------
# The reward manager: decoded responses -> token_level_scores
# ----------------------------------------------------------------------------------------------


class NaiveRewardManager:
    """Turn a batch of generated responses into `token_level_scores` (verl's naive reward manager).

    For each row: decode the valid response tokens (special tokens skipped), call
    `compute_score(data_source, solution_str, ground_truth, extra_info)`, and put the score on the
    last valid response token. A dict result contributes its "score" and every key goes to the
    extra info (e.g. "acc"); a plain number is logged as "acc" too, as verl 0.9.1's reward loop does
    (`experimental/reward_loop/reward_manager/naive.py::NaiveRewardManager.run_single`; the older
    `verl/workers/reward_manager/naive.py` adds no "acc").

    Args:
        tokenizer: decodes response ids.
        compute_score: scoring function; default `default_compute_score`.
        reward_fn_key: the batch field naming each row's data source.
    """

    def __init__(self, tokenizer, compute_score: Callable | None = None, reward_fn_key: str = "data_source"):
        self.tokenizer = tokenizer
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key

    def __call__(self, batch: dict) -> tuple[torch.Tensor, dict[str, list]]:
        """Score a batch.

        Args:
            batch: a dict with tensors `responses` (B, L) and `response_mask` (B, L), and per-row
                lists `reward_model` (dicts with "ground_truth"), the `reward_fn_key` field
                (e.g. `data_source`) and optionally `extra_info`. A multi-turn batch also has
                `response_attention_mask` (B, L): 1 on every response token, tool results included (verl's
                `attention_mask[:, -L:]`); the decoded text and the score's position follow it, so the reward
                function reads the whole conversation and the score sits on its last token, as in verl.
        Returns:
            (token_level_scores (B, L) float32, extra info: lists of length B, e.g. {"acc": [...]}).
        """
        responses, response_mask = batch["responses"].cpu(), batch["response_mask"].cpu()
        valid = batch.get("response_attention_mask")
        valid = response_mask if valid is None else valid.cpu()
        lengths = valid.sum(dim=-1).tolist()
        texts = self.tokenizer.batch_decode(
            [row[:length].tolist() for row, length in zip(responses, lengths)], skip_special_tokens=True)
        extra_infos = batch.get("extra_info") or [None] * len(texts)
        scores, extra = [], defaultdict(list)
        for text, reward_model, source, info in zip(texts, batch["reward_model"], batch[self.reward_fn_key],
                                                    extra_infos):
            result = self.compute_score(data_source=source, solution_str=text,
                                        ground_truth=reward_model["ground_truth"], extra_info=info)
            if isinstance(result, dict):
                score = float(result["score"])
                for key, value in result.items():
                    extra[key].append(value)
            else:
                score = float(result)
                extra["acc"].append(score)
            scores.append(score)
        token_level_scores = place_scores_on_last_token(torch.tensor(scores, dtype=torch.float32), valid)
        return token_level_scores, dict(extra)


class GDPORewardManager(NaiveRewardManager):
    """verl 0.9.1's `gdpo` reward manager: the naive manager, whose reward function also finds the run's
    `trainer.experiment_name` in each row's `extra_info` (a missing extra_info becomes {"experiment_name": ...}).

    GDPO itself happens in the advantage (`minirl/gdpo.py`): it reads the dimensions named by
    `algorithm.gdpo_reward_keys` from the dict the reward function returns, which any manager passes on.
    Mirrors `verl/experimental/reward_loop/reward_manager/gdpo.py::GDPORewardManager.run_single`.
    """

    def __init__(self, tokenizer, compute_score: Callable | None = None, experiment_name: str = "",
                 reward_fn_key: str = "data_source"):
        super().__init__(tokenizer, compute_score, reward_fn_key)
        self.experiment_name = experiment_name

    def __call__(self, batch: dict) -> tuple[torch.Tensor, dict[str, list]]:
        """Score a batch as `NaiveRewardManager.__call__`, with `experiment_name` added to every extra_info."""
        infos = batch.get("extra_info") or [None] * len(batch["responses"])
        infos = [{**(info or {}), "experiment_name": self.experiment_name} for info in infos]
        return super().__call__({**batch, "extra_info": infos})
