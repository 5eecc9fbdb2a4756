# SOLUTIONS FILE: the answers. The stubs in exercises/ are generated from it.
"""Chapter 13 exercises: reading tool calls, the response mask of a conversation, writing a function tool.

Read chapters/13_agentic_tools.ipynb first. The twins are minirl/v1/tool_parser.py::parse_hermes (verl 0.9.1's
verl/experimental/agent_loop/tool_parser.py::HermesToolParser.extract_tool_calls), the token bookkeeping of
minirl/v1/tool_agent_loop.py::ToolAgentLoop.run (verl's _handle_generating_state and
_handle_processing_tools_state), and minirl/assets/tools/calculator.py (verl's verl/tools/function_tool.py).

Grade all:   make grade
Grade one:   make grade EX=13.1   (or .venv/bin/python -m pytest tests/exercises/test_ch13_agentic_tools.py -k hermes)
"""


def parse_hermes_calls(text: str) -> tuple[str, list[tuple[str, str]], int]:
    """Exercise 13.1: read the tool calls out of one assistant turn, as verl's HermesToolParser does.

    A call is a block  <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>.

        if the text lacks "<tool_call>" or lacks "</tool_call>":  no call; the content is the whole text
        else, for every block (non-greedy, across newlines: re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S)):
            parse its JSON; keep it if it has a "name" that is a str and an "arguments" key
            a kept call's arguments are re-serialised: json.dumps(arguments, ensure_ascii=False)
        content = the text with every block removed (re.sub with the same pattern)
        dropped = how many times "<tool_call>" occurs in the text - the calls kept

    Args:
        text: one decoded assistant turn, special tokens included (e.g. it may end with "</s>").
    Returns:
        (content, [(name, arguments as a JSON string), ...] in order, dropped). `dropped` counts the blocks that
        did not parse (bad JSON, no name, a name that is not a string, no arguments) and opening tags never closed:
        minirl logs it as minirl/malformed_tool_calls/mean.
    Details: arguments that are not a dict (e.g. "5") are kept: the tool call then fails with an error turn.
    """
    # BEGIN SOLUTION
    import json
    import re

    opened = text.count("<tool_call>")
    if "<tool_call>" not in text or "</tool_call>" not in text:
        return text, [], opened
    pattern = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    calls = []
    for block in pattern.findall(text):
        try:
            parsed = json.loads(block)
            name, arguments = parsed["name"], parsed["arguments"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(name, str):
            calls.append((name, json.dumps(arguments, ensure_ascii=False)))
    return pattern.sub("", text), calls, opened - len(calls)
    # END SOLUTION


def response_from_turns(turns: list[dict], response_length: int, train_on_tool_responses: bool = False
                        ) -> tuple[list[int], list[int], list[float]]:
    """Exercise 13.2: one conversation's response as the trainer gets it: ids, response mask, rollout log-probs.

    `turns` lists what followed the prompt, in order:
        {"role": "assistant", "ids": [...], "log_probs": [...]}   tokens the model sampled, with their log-probs
        {"role": "tool", "ids": [...]}                              tokens the loop inserted (template + result)

    The loop's rules (verl's ToolAgentLoop; the budget is data.max_response_length):
        assistant turn: append its ids, mask 1 each, its log-probs;
                        then if the response has response_length tokens or more, the conversation ends
        tool turn:      if len(response) + len(its ids) >= response_length, it is NOT appended and the
                        conversation ends (the answer ends on the model's tokens);
                        else append its ids, mask 0 each (1 if train_on_tool_responses), log-prob 0.0 each
        at the end, cut all three lists to response_length (a model turn may run past the budget).

    Args:
        turns: the turns above (at least one).
        response_length: the response budget, in tokens.
        train_on_tool_responses: the ablation of Chapter 13 section 6 (mask 1 on tool tokens too).
    Returns:
        (response_ids, response_mask, response_logprobs), three lists of the same length <= response_length.
    """
    # BEGIN SOLUTION
    ids, mask, log_probs = [], [], []
    for turn in turns:
        if turn["role"] == "assistant":
            ids += turn["ids"]
            mask += [1] * len(turn["ids"])
            log_probs += list(turn["log_probs"])
            if len(mask) >= response_length:
                break
        else:
            if len(mask) + len(turn["ids"]) >= response_length:
                break
            ids += turn["ids"]
            mask += [int(train_on_tool_responses)] * len(turn["ids"])
            log_probs += [0.0] * len(turn["ids"])
    return ids[:response_length], mask[:response_length], log_probs[:response_length]
    # END SOLUTION


def make_multiply_tool():
    """Exercise 13.3: write a function tool `multiply` and register it; return the function.

    Inside this function, define and decorate (from minirl.tools import function_tool):

        multiply(a: int, b: int) -> str     returns str(a * b), e.g. multiply(6, 7) == "42"

    so that the loop accepts it: the decorator infers the schema the model is shown from the signature and a
    Google-style docstring, so every argument needs a type hint and a line under "Args:", and the docstring's
    first line is the tool's description. The schema must come out as
        name "multiply", parameters a and b of type "integer", both required, each with a description.
    A model may call it with wrong arguments (a string, a float, a bool): raise TypeError then (the loop turns
    any exception into an error turn the model reads, "Error executing tool 'multiply': ...").

    Returns:
        the decorated function (function_tool returns the function itself).
    """
    # BEGIN SOLUTION
    from minirl.tools import function_tool

    @function_tool
    def multiply(a: int, b: int) -> str:
        """Multiply two whole numbers exactly.

        Args:
            a: the first factor.
            b: the second factor.
        """
        if any(isinstance(x, bool) or not isinstance(x, int) for x in (a, b)):
            raise TypeError(f"multiply takes two whole numbers, got {a!r} and {b!r}")
        return str(a * b)

    return multiply
    # END SOLUTION
