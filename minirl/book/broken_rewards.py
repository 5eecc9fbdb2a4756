"""Two reward files a real project could ship by mistake (verl's compute_score contract); Lab C trains with them.

Both look reasonable and both give every response of a group the same score, so GRPO's advantages are all 0.
"""


def exact_match_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """1.0 if the whole response equals the ground truth. On a task answered `a+b=c #### c` it is always 0."""
    return float(solution_str.strip() == str(ground_truth).strip())


def format_only_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """1.0 if the response has a `#### ` answer, right or wrong. A warm start that always writes one scores 1 always."""
    return float("#### " in solution_str)
