# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Lab A exercises: GSM8K in verl's schema, and a scorer that forgives the way a number is written.

Read chapters/lab_a_gsm8k.ipynb first. The twins are minirl/data.py::gsm8k_rows (verl's
examples/data_preprocess/gsm8k.py, `process_fn`) and minirl/rewards.py::compute_gsm8k_score (verl's
verl/utils/reward_score/gsm8k.py::compute_score, strict mode), which A.2 changes on purpose.

Grade all:   make grade
Grade one:   make grade EX=A.1   (or .venv/bin/python -m pytest tests/exercises/test_lab_a_gsm8k.py -k gsm8k_row)
"""

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def gsm8k_row(example: dict, index: int, split: str) -> dict:
    """Exercise A.1: one raw GSM8K example -> one row of verl's RL parquet schema.

    A raw example is {"question": "...", "answer": "...worked solution...\\n#### 72"}. verl's
    examples/data_preprocess/gsm8k.py writes, for the example at position `index` of `split`:

        data_source   "openai/gsm8k"            (the key that picks the GSM8K scorer)
        prompt        [{"role": "user", "content": question + " " + INSTRUCTION}]
        ability       "math"
        reward_model  {"style": "rule", "ground_truth": the number after "#### " in the answer}
        extra_info    {"split": split, "index": index, "answer": the raw answer, "question": the raw question}

    The ground truth is a STRING: the first match of the regex  #### (-?[0-9.,]+)  in the answer, with its
    commas removed ("#### 1,600" -> "1600"). Raise ValueError if the answer has no such line.
    """
    # BEGIN SOLUTION
    import re

    match = re.search(r"#### (\-?[0-9\.\,]+)", example["answer"])
    if match is None:
        raise ValueError(f"GSM8K answer has no '#### <number>' line: {example['answer'][-80:]!r}")
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": example["question"] + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": match.group(1).replace(",", "")},
        "extra_info": {"split": split, "index": index, "answer": example["answer"], "question": example["question"]},
    }
    # END SOLUTION


def numeric_gsm8k_score(solution_str: str, ground_truth: str) -> float:
    """Exercise A.2: GSM8K's strict rule, but comparing numbers instead of strings.

    verl's rule compares the text after the last "#### " with the ground truth as strings, so "#### 18.0"
    and "#### 18.00" score 0 against "18". Keep everything else of the strict rule and compare values:

      - only the last 300 characters of solution_str count (verl's window);
      - the answer is the LAST match of  #### (-?[0-9.,]+)  in that window, exactly one space after ####;
      - remove "," from it; it must then be a number ("-3", "18", "18.50", ".5"); anything else ("1.2.3", ".",
        "-") is a malformed answer;
      - return 1.0 if its value equals float(ground_truth) (within 1e-9), else 0.0 (wrong, malformed or no
        answer). Never raise: the policy can write anything.
    """
    # BEGIN SOLUTION
    import re

    answers = re.findall(r"#### (\-?[0-9\.\,]+)", solution_str[-300:])
    if not answers:
        return 0.0
    answer = answers[-1].replace(",", "")
    if not re.fullmatch(r"-?(\d+\.?\d*|\.\d+)", answer):
        return 0.0
    return 1.0 if abs(float(answer) - float(ground_truth)) < 1e-9 else 0.0
    # END SOLUTION
