"""A tool's contract (verl 0.9.1: `verl/tools/base_tool.py::BaseTool`, `verl/tools/schemas.py::ToolResponse`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any


@dataclass
class ToolResponse:
    """What a tool call returns to the model: text (minirl's tools are text-only; verl also carries images)."""

    text: str | None = None


class BaseTool:
    """A stateful tool: the agent loop calls `create` (a fresh instance per call), `execute`, then `release`.

    Subclass it, override `execute` (and `create` / `release` if the tool holds state), and list the class in the
    YAML file of `actor_rollout_ref.rollout.multi_turn.tool_config_path` with its OpenAI function schema:

        tools:
          - class_name: my_tools.Lookup
            config: {type: native}
            tool_schema:
              type: function
              function:
                name: lookup
                description: Look a city up in the table.
                parameters: {type: object, properties: {city: {type: string, description: the city}},
                             required: [city]}

    Args:
        config: the YAML entry's `config` (free-form; `type: native` is required, as in verl).
        tool_schema: the OpenAI schema dict ({"type": "function", "function": {"name", "description", "parameters"}}).
    """

    def __init__(self, config: dict, tool_schema: dict):
        self.config = dict(config)
        self.tool_schema = tool_schema
        self.name = tool_schema["function"]["name"]

    def get_openai_tool_schema(self) -> dict:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        """Start an instance (kwargs: the row's `tools_kwargs[name]["create_kwargs"]`); returns its id."""
        return instance_id or uuid.uuid4().hex, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        """Run one call with the model's arguments; returns (response, reward, metrics)."""
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        """A reward for the instance's whole episode (verl's ToolAgentLoop never calls it)."""
        return 0.0

    async def release(self, instance_id: str, **kwargs) -> None:
        """Free the instance."""
