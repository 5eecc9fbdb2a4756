# A plausible wrong answer to Chapter 13 (tests/test_exercise_harness.py grades it: every exercise must fail).
import json
import re


def parse_hermes_calls(text):
    # mistakes: a greedy pattern without DOTALL, and malformed blocks are not counted
    calls = []
    for block in re.findall(r"<tool_call>(.*)</tool_call>", text):
        try:
            parsed = json.loads(block)
            calls.append((parsed["name"], json.dumps(parsed["arguments"])))
        except (ValueError, KeyError):
            pass
    return re.sub(r"<tool_call>(.*)</tool_call>", "", text), calls, 0


def response_from_turns(turns, response_length, train_on_tool_responses=False):
    # mistakes: the tool's tokens are trained on, and the budget never stops a tool turn
    ids, mask, log_probs = [], [], []
    for turn in turns:
        ids += turn["ids"]
        mask += [1] * len(turn["ids"])
        log_probs += list(turn.get("log_probs", [0.0] * len(turn["ids"])))
    return ids[:response_length], mask[:response_length], log_probs[:response_length]


def make_multiply_tool():
    # mistakes: no type hints or Args section (the schema cannot be inferred), and it returns an int
    from minirl.tools import function_tool

    def multiply(a, b):
        """Multiply."""
        return a * b

    try:
        function_tool(multiply)
    except ValueError:
        pass
    return multiply
