"""Function tools: plain Python functions made callable by the model (verl 0.9.1: `verl/tools/function_tool.py`).

`@function_tool` infers the OpenAI schema from the signature and the Google docstring with transformers'
`get_json_schema` (as verl does): every parameter needs a type hint and an `Args:` line; parameters without a
default are required. The function may be sync or async and return a str, a dict (sent as JSON), a ToolResponse
or a (response, reward) tuple.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minirl.tools.base import ToolResponse

FUNCTION_TOOL_REGISTRY: dict[str, FunctionTool] = {}
_LOADED: dict[str, list[FunctionTool]] = {}  # absolute path -> the tools its import registered


@dataclass
class FunctionTool:
    """A registered function and its schema."""

    name: str
    fn: Callable
    tool_schema: dict

    async def call(self, parameters: dict[str, Any]):
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**parameters)
        return await asyncio.to_thread(self.fn, **parameters)


def function_tool(name: str | Callable | None = None, *, schema: dict | None = None):
    """Register a function as a tool: `@function_tool`, `@function_tool("other_name")` or
    `@function_tool(schema={...})` (a given schema skips the inference). Returns the function unchanged."""
    def register(fn: Callable, tool_name: str | None) -> Callable:
        tool_name = tool_name or fn.__name__
        tool_schema = schema or _schema_from_signature(fn, tool_name)
        known = FUNCTION_TOOL_REGISTRY.get(tool_name)
        if known is not None and known.fn is not fn and _where(known.fn) != _where(fn):
            raise ValueError(f"function tool {tool_name!r} is registered twice ({_where(known.fn)} and {_where(fn)})")
        FUNCTION_TOOL_REGISTRY[tool_name] = FunctionTool(tool_name, fn, tool_schema)
        return fn

    if callable(name):  # bare @function_tool
        return register(name, None)
    return lambda fn: register(fn, name)


def _where(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


def _schema_from_signature(fn: Callable, tool_name: str) -> dict:
    from transformers.utils import get_json_schema

    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ValueError(f"function tool {tool_name!r}: *args and **kwargs have no schema; name every argument")
    try:
        schema = get_json_schema(fn)
    except Exception as error:  # transformers' DocstringParsingException / TypeHintParsingException
        raise ValueError(f"function tool {tool_name!r}: cannot infer its schema ({error}). Give every argument a "
                         "type hint and an 'Args:' line in a Google-style docstring, or pass schema=...") from error
    schema["function"]["name"] = tool_name
    schema["function"].pop("return", None)
    return schema


def normalize_return(value) -> tuple[ToolResponse, float]:
    """A function tool's return value as (ToolResponse, reward) (verl: `normalize_function_tool_return`)."""
    reward = 0.0
    if isinstance(value, tuple):
        if not 1 <= len(value) <= 3:
            raise TypeError(f"a function tool returned a tuple of {len(value)}; return (response[, reward[, metrics]])")
        value, reward = value[0], (value[1] if len(value) > 1 and value[1] is not None else 0.0)
    if isinstance(value, ToolResponse):
        return value, float(reward)
    if isinstance(value, dict):
        return ToolResponse(text=json.dumps(value, ensure_ascii=False)), float(reward)
    return ToolResponse(text=value if isinstance(value, str) else str(value)), float(reward)


def load_function_tools_from_path(path: str | Path) -> list[FunctionTool]:
    """Import a Python file and return the function tools its import registered.

    Raises:
        ValueError: the file is missing, fails to import (the message names the file and the error), or registers
            no tool.
    """
    path = Path(path).resolve()
    if str(path) in _LOADED:
        return _LOADED[str(path)]
    if not path.is_file():
        raise ValueError(f"actor_rollout_ref.rollout.multi_turn.function_tool_path={path}: no such file")
    before = set(FUNCTION_TOOL_REGISTRY)
    spec = importlib.util.spec_from_file_location(f"_minirl_function_tools_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise ValueError(f"the function tool file {path} failed to import: {type(error).__name__}: {error}") from error
    tools = [FUNCTION_TOOL_REGISTRY[name] for name in FUNCTION_TOOL_REGISTRY if name not in before]
    if not tools:
        raise ValueError(f"the function tool file {path} registers no tool: decorate its functions with "
                         "@minirl.tools.function_tool")
    _LOADED[str(path)] = tools
    return tools
