"""Tools an agent loop can call, declared the way verl 0.9.1 declares them (`verl/tools/`).

Two kinds, both loaded at start-up by `load_all_tools` (verl: `tool_registry.py::load_all_tools`):

    function tools   a Python file of functions decorated with `@function_tool`
                     (`actor_rollout_ref.rollout.multi_turn.function_tool_path`); the OpenAI schema is inferred from
                     the signature and the Google docstring (verl: `verl/tools/function_tool.py`)
    stateful tools   `BaseTool` subclasses listed in a YAML file with their schema
                     (`multi_turn.tool_config_path`; verl: `base_tool.py`, `tool_registry.py`)

    from minirl.tools import function_tool

    @function_tool
    def add(a: int, b: int) -> int:
        \"\"\"Add two integers.

        Args:
            a: the first number.
            b: the second number.
        \"\"\"
        return a + b
"""

from minirl.tools.base import BaseTool, ToolResponse
from minirl.tools.function import FUNCTION_TOOL_REGISTRY, FunctionTool, function_tool, load_function_tools_from_path
from minirl.tools.registry import load_all_tools, load_tools_from_config

__all__ = ["BaseTool", "ToolResponse", "FunctionTool", "function_tool", "FUNCTION_TOOL_REGISTRY",
           "load_function_tools_from_path", "load_tools_from_config", "load_all_tools"]
