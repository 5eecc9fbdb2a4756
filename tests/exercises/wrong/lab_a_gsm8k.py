# A plausible wrong answer to Lab A (tests/test_exercise_harness.py grades it: every exercise must fail).
import re

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def gsm8k_row(example, index, split):
    # mistakes: no space before the instruction, the LAST number of the answer, commas kept
    truth = re.findall(r"-?[0-9.,]+", example["answer"])[-1]
    return {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": example["question"] + INSTRUCTION}],
            "ability": "math", "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {"split": split, "index": index, "answer": example["answer"],
                           "question": example["question"] + " " + INSTRUCTION}}


def numeric_gsm8k_score(solution_str, ground_truth):
    # mistakes: the first answer, the whole string, float() of anything (raises on "1.2.3")
    answers = re.findall(r"#### (\-?[0-9\.\,]+)", solution_str)
    return 1.0 if answers and float(answers[0].replace(",", "")) == float(ground_truth) else 0.0
