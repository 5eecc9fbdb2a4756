# EXERCISES FILE: fill in the functions below, then grade them with `make grade`.
# (Maintainers: this file is generated from solutions/; edit there, then run
#  `python -m minirl.book.exercises sync`.)
"""Chapter 8 exercises: DeepSeek-R1's rule rewards (the <think> format, the final answer) and pass@k.

Read chapters/08_r1.ipynb first. The twins are minirl/rewards.py::think_format (R1's format reward in
miniature; verl 0.9.1 has no single twin: format checks live in custom reward functions and in the scorers
of verl/utils/reward_score/, e.g. geo3k.py::format_reward for "<think>...</think>...\\boxed{}"),
minirl/rewards.py::extract_solution with method="strict" (verl's
verl/utils/reward_score/gsm8k.py::extract_solution) and minirl/metrics.py::pass_at_k (Chen et al. 2021;
verl's validation reports a related metric, best@k/mean (drawn with replacement),
verl/trainer/ppo/metric_utils.py::bootstrap_metric, minirl/metrics.py::bootstrap_metric).

Grade all:   make grade
Grade one:   make grade EX=8.1   (or .venv/bin/python -m pytest tests/exercises/test_ch08_r1.py -k think_format)
"""


def think_format(solution_str: str) -> float:
    """Exercise 8.1: R1's format reward on the chain task: one <think> block, then the final answer.

    DeepSeek-R1-Zero is rewarded for the SHAPE of its response as well as for its answer: the reasoning
    goes between <think> and </think>. On the chain task the answer follows as GSM8K's "#### N":

        s = solution_str.strip()
        1.0  if  s == "<think>" + inner + "</think>" + ws + "#### " + number + ws
                 with inner free of "<think>" and "</think>" (it may be empty or span many lines),
                 ws any run of whitespace (possibly empty), number matching -?[0-9][0-9,.]*
        0.0  otherwise

    Args:
        solution_str: the decoded response, any string at all (the policy can write anything).
    Returns:
        1.0 or 0.0, a Python float.

    Details minirl is precise about:
      - the response must START with <think> (after stripping) and END with the number: no preamble
        ("Sure! <think>..."), no text after the answer ("#### 20 because ...");
      - exactly one block: a second <think>...</think>, a nested <think> or a stray </think> inside
        the block scores 0.0. A greedy `<think>.*</think>` happily swallows two blocks; verl's
        geo3k.py::format_reward is that loose on purpose, R1's chain task is not;
      - "####" is followed by exactly one space, then an optional "-" and a digit: "####20",
        "####  20" and "#### $20" are not the format;
      - digits are [0-9]: in Python 3, \\d also matches other scripts' digits ("٣", Arabic-Indic 3);
      - the thinking may span lines: without re.DOTALL, "." does not match a newline;
      - a reward function must never raise, whatever the string.

    Hint: `import re`; re.fullmatch(pattern, s, re.DOTALL) with a lazy group "<think>(.*?)</think>",
    then check the group for stray tags. Or without a regex: find the first "</think>" and test the two sides.
    """
    raise NotImplementedError("think_format: not written yet. Replace this line with your code.")


def extract_answer(solution_str: str) -> str | None:
    """Exercise 8.2: the final answer of a response, as verl's GSM8K scorer reads it (strict mode).

        tail    = the last 300 characters of solution_str (all of it if shorter)
        matches = every match of the regex  #### (\\-?[0-9\\.\\,]+)  in tail, left to right
        answer  = the LAST match's group, with "," and "$" removed;   None when there is no match

    The scorer then compares the answer with the ground truth as strings: 1.0 if equal, else 0.0
    (gsm8k.py::compute_score). A missing "####" therefore scores like a wrong answer.

    Args:
        solution_str: the decoded response, any string at all.
    Returns:
        the answer as a string (not a number), or None.

    Details verl is precise about:
      - only the tail is searched (gsm8k.py's _SOLUTION_CLIP_CHARS = 300): an answer further back
        than 300 characters is not seen, and one cut in half by the clip is not an answer;
      - the LAST answer wins: "#### 3 ... no, wait: #### 4" gives "4";
      - thousands commas go: "#### 1,000" gives "1000". The "$" removal is a no-op (the regex never
        captures a "$"), and "#### $5" has no match at all: the space after "####" must be followed
        by "-" or a digit, "." or ",";
      - it is a string matcher, not a number parser: "#### 42." gives "42." (which then does not
        equal "42"), "#### 007" gives "007", and "#### ," gives "" (an empty string, not None);
      - it must never raise: any string in, a string or None out.

    Hint: `import re`; re.findall returns the groups of all matches in order; s[-300:] is the whole s
    when s is shorter.
    """
    raise NotImplementedError("extract_answer: not written yet. Replace this line with your code.")


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Exercise 8.3: pass@k, the chance that at least one of k answers is right, estimated without bias.

    Sample n answers to a prompt, c of them right. Drawing k of the n without replacement, the chance that
    all k are wrong is C(n - c, k) / C(n, k), so (Chen et al. 2021, "Evaluating Large Language Models
    Trained on Code")

        pass@k = 1 - C(n - c, k) / C(n, k)
               = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)          (the same, as a product of c factors)
               = 1.0                                               when n - c < k (every k-subset holds
                                                                   a right answer)

    It is unbiased for "sample k, is one right?", unlike 1 - (1 - c/n)^k. verl's validation logs a
    related metric, best@k/mean: the mean best score of k answers drawn WITH replacement, by bootstrap
    (verl/trainer/ppo/metric_utils.py::bootstrap_metric, minirl/metrics.py::bootstrap_metric).

    Args:
        num_samples: n >= 1 answers sampled for one prompt.
        num_correct: c, 0 <= c <= n, how many of them are right.
        k: 1 <= k <= n.
    Returns:
        a Python float in [0, 1] (average it over prompts for a dataset's pass@k).
    Raises:
        ValueError: unless n >= 1, 0 <= c <= n and 1 <= k <= n.

    Details minirl is precise about:
      - k = 1 gives c / n, the plain accuracy; c = 0 gives 0.0 and c = n gives 1.0;
      - n can be large (R1 reports pass@1 from up to 64 answers per question, HumanEval used 200):
        C(2000, 500) has 487 digits, and float(math.comb(2000, 500)) raises OverflowError. The product
        form never builds a binomial;
      - nonsense arguments (k > n, c > n, a negative c, n = 0, k = 0) raise, they do not return a number.

    Hint: start from 1.0 and multiply by (1 - k / i) for i = n - c + 1, ..., n (range(n - c + 1, n + 1)).
    """
    raise NotImplementedError("pass_at_k: not written yet. Replace this line with your code.")
