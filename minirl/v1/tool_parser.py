"""Reading tool calls out of a model's answer: the hermes format (verl 0.9.1:
`verl/experimental/agent_loop/tool_parser.py::HermesToolParser`).

    I need the total. <tool_call>{"name": "add", "arguments": {"a": 17, "b": 25}}</tool_call>

Every `<tool_call>...</tool_call>` block whose JSON has a "name" (a string) and "arguments" is a call; the
arguments are kept as a JSON string. A malformed block (bad JSON, no name, no arguments) is dropped, as verl
drops it (it only logs): the model gets no error turn for it, and if no block parses, the answer ends. minirl
counts the dropped blocks (an unclosed `<tool_call>` too) so that the run can log a malformed-call rate.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass
class FunctionCall:
    """One parsed call: the tool's name and its arguments as a JSON string."""

    name: str
    arguments: str


def parse_hermes(text: str) -> tuple[str, list[FunctionCall], int]:
    """Split an answer's text into (content without the call blocks, the calls in order, dropped blocks).

    As verl: without both tags the text is returned whole with no call; a block whose JSON does not parse or lacks
    a string "name" or an "arguments" is dropped (and counted here); non-dict arguments are kept (the tool call
    then fails with an error turn).
    """
    opened = text.count("<tool_call>")
    if "<tool_call>" not in text or "</tool_call>" not in text:
        return text, [], opened
    calls = []
    for block in TOOL_CALL.findall(text):
        try:
            parsed = json.loads(block)
            name, arguments = parsed["name"], parsed["arguments"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(name, str):
            calls.append(FunctionCall(name, json.dumps(arguments, ensure_ascii=False)))
    return TOOL_CALL.sub("", text), calls, opened - len(calls)
