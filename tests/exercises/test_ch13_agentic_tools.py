"""Grades exercises/ch13_agentic_tools.py (or solutions/ with --target solutions)."""

import asyncio
import json

import pytest
from grading import call, fail, load_chapter, raised

from minirl.config import MultiTurnConfig
from minirl.tools import FUNCTION_TOOL_REGISTRY
from minirl.v1.tool_agent_loop import ToolAgentLoop
from minirl.v1.tool_parser import parse_hermes


@pytest.fixture(scope="module")
def ch(request):
    return load_chapter(request.config, "ch13_agentic_tools")


def check_hermes(ch, text, why=""):
    content, calls, dropped = parse_hermes(text)
    want = (content, [(c.name, c.arguments) for c in calls], dropped)
    got = call(ch.parse_hermes_calls, text)
    if not (isinstance(got, tuple) and len(got) == 3):
        fail(f"parse_hermes_calls must return (content, calls, dropped); yours returned {got!r}.")
    got = (got[0], [tuple(c) for c in got[1]], got[2])
    for part, index in (("calls", 1), ("dropped", 2), ("content", 0)):
        if got[index] != want[index]:
            fail(f"parse_hermes_calls({text!r}): {part} = {got[index]!r}, want {want[index]!r}.{why}")


@pytest.mark.exercise("13.1", "parse_hermes_calls")
def test_hermes_toy(ch):
    check_hermes(ch, '<tool_call>{"name": "add", "arguments": {"a": 343, "b": 709}}</tool_call></s>',
                 " A call's arguments are re-serialised with json.dumps; the content is what is left around the block.")
    check_hermes(ch, "#### 1052</s>", " Without both tags there is no call and the content is the whole text.")
    check_hermes(ch, 'First <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call> then '
                 '<tool_call>{"name": "add",\n "arguments": {"a": 3, "b": 4}}</tool_call>',
                 " Each block is matched non-greedily (.*?) and across newlines (re.DOTALL): two calls here.")


@pytest.mark.exercise("13.1", "parse_hermes_calls")
def test_hermes_drops_malformed_blocks(ch):
    check_hermes(ch, '<tool_call>{"name": "add", "arguments": {"a": 343, "b": 709}</tool_call></s>',
                 " A block whose JSON does not parse is dropped, and counted in `dropped`.")
    check_hermes(ch, '<tool_call>{"arguments": {}}</tool_call><tool_call>{"name": 7, "arguments": {}}</tool_call>'
                 '<tool_call>{"name": "add"}</tool_call>',
                 " A block needs a str name and an 'arguments' key; each one without is dropped.")
    check_hermes(ch, '<tool_call>{"name": "neg", "arguments": "5"}</tool_call>',
                 " Arguments that are not a dict are kept (json.dumps('5') is '\"5\"'): the tool call fails later.")


@pytest.mark.exercise("13.1", "parse_hermes_calls")
def test_hermes_counts_unclosed_tags(ch):
    check_hermes(ch, '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</s>',
                 " An opening tag never closed is no call, but a malformed one: dropped = the '<tool_call>' count.")
    check_hermes(ch, '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call><tool_call>{"name": "add"',
                 " dropped = opening tags - calls kept: the second block was never closed.")


ASSISTANT_1 = {"role": "assistant", "ids": [11, 12, 13, 2], "log_probs": [-0.1, -0.2, -0.3, -0.4]}
TOOL = {"role": "tool", "ids": [21, 22, 23]}
ASSISTANT_2 = {"role": "assistant", "ids": [31, 32, 2], "log_probs": [-0.5, -0.6, -0.7]}


def check_response(ch, turns, length, want, train_on_tool=False, why=""):
    got = call(ch.response_from_turns, [dict(t) for t in turns], length, train_on_tool)
    if not (isinstance(got, tuple) and len(got) == 3):
        fail(f"response_from_turns must return (ids, mask, log_probs); yours returned {got!r}.")
    got = tuple(list(x) for x in got)
    for part, index in (("ids", 0), ("mask", 1), ("log-probs", 2)):
        if got[index] != want[index]:
            fail(f"response_from_turns(turns={turns}, response_length={length}, train_on_tool_responses="
                 f"{train_on_tool}): {part} = {got[index]}, want {want[index]}.{why}")


@pytest.mark.exercise("13.2", "response_from_turns")
def test_response_mask_of_a_call_and_an_answer(ch):
    check_response(ch, [ASSISTANT_1, TOOL, ASSISTANT_2], 64,
                   ([11, 12, 13, 2, 21, 22, 23, 31, 32, 2], [1, 1, 1, 1, 0, 0, 0, 1, 1, 1],
                    [-0.1, -0.2, -0.3, -0.4, 0.0, 0.0, 0.0, -0.5, -0.6, -0.7]),
                   why=" The model's tokens are 1 with their log-probs; the tool's are 0 with log-prob 0.0.")
    check_response(ch, [ASSISTANT_2], 64, ([31, 32, 2], [1, 1, 1], [-0.5, -0.6, -0.7]),
                   why=" A conversation without a call is one assistant turn.")


@pytest.mark.exercise("13.2", "response_from_turns")
def test_response_budget(ch):
    check_response(ch, [ASSISTANT_1, TOOL, ASSISTANT_2], 7,
                   ([11, 12, 13, 2], [1, 1, 1, 1], [-0.1, -0.2, -0.3, -0.4]),
                   why=" 4 + 3 tool tokens would reach the budget of 7 (>=): the tool turn is not appended, and the "
                       "conversation ends on the model's tokens.")
    check_response(ch, [ASSISTANT_1, TOOL, ASSISTANT_2], 9,
                   ([11, 12, 13, 2, 21, 22, 23, 31, 32], [1, 1, 1, 1, 0, 0, 0, 1, 1],
                    [-0.1, -0.2, -0.3, -0.4, 0.0, 0.0, 0.0, -0.5, -0.6]),
                   why=" A model turn may run past the budget: all three lists are cut to response_length at the end.")
    check_response(ch, [ASSISTANT_1, TOOL, ASSISTANT_2], 4,
                   ([11, 12, 13, 2], [1, 1, 1, 1], [-0.1, -0.2, -0.3, -0.4]),
                   why=" Once the response holds response_length tokens, the conversation ends.")


@pytest.mark.exercise("13.2", "response_from_turns")
def test_response_ablation_switch(ch):
    check_response(ch, [ASSISTANT_1, TOOL, ASSISTANT_2], 64,
                   ([11, 12, 13, 2, 21, 22, 23, 31, 32, 2], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
                    [-0.1, -0.2, -0.3, -0.4, 0.0, 0.0, 0.0, -0.5, -0.6, -0.7]), train_on_tool=True,
                   why=" train_on_tool_responses=True puts 1 on the tool's tokens; their log-probs stay 0.0 (the "
                       "sampler never produced them).")


def multiply_tool(ch):
    fn = call(ch.make_multiply_tool)
    if not callable(fn):
        fail(f"make_multiply_tool must return the decorated function; it returned {fn!r}.")
    tool = FUNCTION_TOOL_REGISTRY.get("multiply")
    if tool is None or getattr(tool.fn, "__name__", None) != getattr(fn, "__name__", None):
        fail("no function tool named 'multiply' is registered: decorate `multiply` with "
             "minirl.tools.function_tool inside make_multiply_tool.")
    return tool


@pytest.mark.exercise("13.3", "make_multiply_tool")
def test_multiply_schema(ch):
    schema = multiply_tool(ch).tool_schema["function"]
    parameters = schema["parameters"]
    if set(parameters.get("properties", {})) != {"a", "b"}:
        fail(f"the tool's parameters are {sorted(parameters.get('properties', {}))}, want a and b.")
    for name, spec in parameters["properties"].items():
        if spec.get("type") != "integer":
            fail(f"parameter {name} has type {spec.get('type')!r} in the schema: annotate it `int` (-> 'integer').")
        if not spec.get("description"):
            fail(f"parameter {name} has no description: give it a line under 'Args:' in the docstring.")
    if sorted(parameters.get("required", [])) != ["a", "b"]:
        fail(f"required = {parameters.get('required')}, want ['a', 'b']: neither argument has a default.")
    if not schema.get("description"):
        fail("the tool has no description: the docstring's first line is what the model is told it does.")


@pytest.mark.exercise("13.3", "make_multiply_tool")
def test_multiply_answers_and_refuses(ch):
    fn = multiply_tool(ch).fn
    for a, b in ((6, 7), (-3, 12), (0, 999)):
        got = call(fn, a, b)
        if got != str(a * b):
            fail(f"multiply({a}, {b}) returned {got!r}, want {str(a * b)!r} (a str: the text the model reads).")
    for a, b in (("6", 7), (6, 7.5), (True, 7)):
        if not isinstance(raised(fn, a, b), TypeError):
            fail(f"multiply({a!r}, {b!r}) must raise TypeError: a model's wrong arguments become an error turn.")


@pytest.mark.exercise("13.3", "make_multiply_tool")
def test_multiply_through_the_loop(ch):
    tool = multiply_tool(ch)
    loop = ToolAgentLoop.__new__(ToolAgentLoop)  # only the tool-calling part of the loop is exercised
    loop.tools, loop.settings = {"multiply": tool}, MultiTurnConfig(enable=True)

    def run(arguments):
        content, calls, _ = parse_hermes(f'<tool_call>{{"name": "multiply", "arguments": {json.dumps(arguments)}}}'
                                         "</tool_call>")
        return asyncio.run(loop._call_tool(calls[0], {}))

    text, _, failed = run({"a": 6, "b": 7})
    if failed or text != "42":
        fail(f"the loop called multiply(a=6, b=7) and the model read {text!r} (failed={failed}), want '42'.")
    text, _, failed = run({"a": "six", "b": 7})
    if not failed or "Error executing tool 'multiply'" not in text:
        fail(f"called with a='six', the model read {text!r}: raise TypeError so the loop sends an error turn.")
