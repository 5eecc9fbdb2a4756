# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Lab B exercises: a reward for a new task that survives adversarial answers, and a reward that logs a metric.

Read chapters/lab_b_rewards.ipynb first. verl's contract for both: a function
`compute_score(data_source, solution_str, ground_truth, extra_info)` returning a float or a dict with "score",
loaded with reward.custom_reward_function.path / .name (verl/trainer/ppo/reward.py::get_custom_reward_fn;
minirl/rewards.py::load_custom_reward_function).

Grade all:   make grade
Grade one:   make grade EX=B.1   (or .venv/bin/python -m pytest tests/exercises/test_lab_b_rewards.py -k fraction)
"""


def fraction_score(solution_str: str, ground_truth: str) -> float:
    """Exercise B.1: the reward of a fractions task, whose answers end with "#### p/q".

    Rules (the grader tries many adversarial strings against them):
      - read only the last 300 characters of solution_str (verl's window);
      - the answer is the text after the LAST "#### " (hash marks, one space) up to the end of that line,
        with spaces around it stripped;
      - it must be an integer ("3", "-3") or a fraction of two integers ("6/8", "-3/4"; exactly one "/", digits
        only on each side apart from one leading "-" on the numerator, a denominator that is not zero);
      - the ground truth is written the same way ("3/4", "2", "-1/2");
      - return 1.0 if the two have the same VALUE ("6/8" equals "3/4"), else 0.0;
      - never raise, whatever the string: return 0.0 for anything malformed.
    Hint: fractions.Fraction compares values exactly; check the text with a regex before building one.
    """
    # BEGIN SOLUTION
    import re
    from fractions import Fraction

    def parse(text: str) -> Fraction | None:
        match = re.fullmatch(r"(-?[0-9]+)(?:/([0-9]+))?", text.strip())
        if match is None or (match.group(2) is not None and int(match.group(2)) == 0):
            return None
        return Fraction(int(match.group(1)), int(match.group(2) or 1))

    tail = solution_str[-300:]
    if "#### " not in tail:
        return 0.0
    answer = tail.rsplit("#### ", 1)[1].split("\n", 1)[0]
    got, truth = parse(answer), parse(ground_truth)
    return 1.0 if got is not None and truth is not None and got == truth else 0.0
    # END SOLUTION


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> dict:
    """Exercise B.2: GSM8K's rule plus a logged "formatted" metric, in verl's custom-reward signature.

    Return a dict:
        "score":     GSM8K's strict rule (minirl.rewards.compute_gsm8k_score(solution_str, ground_truth)), a float;
        "formatted": 1.0 if the response ends with a final answer in GSM8K's format (minirl.rewards.format_reward),
                     else 0.0.
    Only "score" is the reward. Every other number in the dict is logged: minirl's trainer writes it as
    `minirl/formatted/mean` in metrics.jsonl (and validation as `val-aux/<data_source>/formatted/mean@1`).
    The grader trains two steps with `reward.custom_reward_function.path=<your file>
    reward.custom_reward_function.name=compute_score` and reads the metric.
    """
    # BEGIN SOLUTION
    from minirl.rewards import compute_gsm8k_score, format_reward

    return {"score": float(compute_gsm8k_score(solution_str, ground_truth)), "formatted": format_reward(solution_str)}
    # END SOLUTION
