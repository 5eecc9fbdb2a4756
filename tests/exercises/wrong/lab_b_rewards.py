# A plausible wrong answer to Lab B (tests/test_exercise_harness.py grades it: every exercise must fail).
def fraction_score(solution_str, ground_truth):
    # mistakes: the whole string, the first answer, float() division (raises on 1/0 and on malformed text)
    answer = solution_str.split("####")[1].strip()
    p, _, q = answer.partition("/")
    a, _, b = ground_truth.partition("/")
    return 1.0 if float(p) / float(q or 1) == float(a) / float(b or 1) else 0.0


def compute_score(data_source, solution_str, ground_truth, extra_info):
    # mistakes: a bare float (no dict, so nothing extra is logged), and the answer anywhere counts
    return 1.0 if ground_truth in solution_str else 0.0
