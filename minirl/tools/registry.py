"""Loading the tools of a run (verl 0.9.1: `verl/tools/tool_registry.py`)."""

from __future__ import annotations

import importlib
from pathlib import Path

import yaml

from minirl.tools.base import BaseTool
from minirl.tools.function import FunctionTool, load_function_tools_from_path


def load_tools_from_config(path: str | Path) -> list[BaseTool]:
    """Instantiate the `BaseTool` classes a YAML file lists (`tools: [{class_name, config, tool_schema}]`).

    Raises:
        ValueError: a missing file, an entry without class_name or with a config type other than native, a class
            that cannot be imported or is not a BaseTool; each message names the file and the entry.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"actor_rollout_ref.rollout.multi_turn.tool_config_path={path}: no such file")
    entries = (yaml.safe_load(path.read_text()) or {}).get("tools") or []
    tools = []
    for i, entry in enumerate(entries):
        where = f"{path}, tools[{i}]"
        class_name, config = entry.get("class_name"), entry.get("config") or {}
        if not class_name:
            raise ValueError(f"{where}: no class_name")
        if config.get("type") != "native":
            raise ValueError(f"{where}: config.type must be native (verl 0.9.1 requires it; got "
                             f"{config.get('type')!r})")
        module_name, _, attribute = class_name.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name), attribute)
        except Exception as error:
            raise ValueError(f"{where}: cannot import {class_name}: {type(error).__name__}: {error}") from error
        if not (isinstance(cls, type) and issubclass(cls, BaseTool)):
            raise ValueError(f"{where}: {class_name} is not a minirl.tools.BaseTool subclass")
        schema = entry.get("tool_schema")
        if schema is None:
            raise ValueError(f"{where}: no tool_schema (the OpenAI function schema the model is shown)")
        tools.append(cls(config=config, tool_schema=schema))
    return tools


def load_all_tools(tool_config_path: str | None, function_tool_path: str | None) -> list[BaseTool | FunctionTool]:
    """Both kinds of tools; a name used twice is an error."""
    tools = (load_tools_from_config(tool_config_path) if tool_config_path else []) + \
        (load_function_tools_from_path(function_tool_path) if function_tool_path else [])
    names = [tool.name for tool in tools]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"tool names used twice across tool_config_path and function_tool_path: {duplicates}")
    return tools
