"""Subagent limits: the design documents' defaults, each overridable per agent in `other_config.subagents`."""
from __future__ import annotations

from dataclasses import dataclass

from tools_app.agent_config import AGENT_CONFIG_SCHEMA
from tools_app.models import Agent
from tools_app.policy import max_subagent_depth


@dataclass(frozen=True)
class SpawnLimits:
    """The design documents' defaults; each overridable per agent in `other_config.subagents`."""

    max_concurrent: int = 8          # running subagents across all parents
    max_spawn_depth: int = 1         # nesting depth (the leaf deny list applies there)
    max_children_per_agent: int = 5  # children of one parent session not yet archived
    archive_after_minutes: int = 60
    max_retries: int = 2             # model request failures a subagent survives
    max_iterations: int = 20


# The ranges the agent configuration schema allows (one source: tools_app/agent_config.py).
RANGES = {name: (spec["minimum"], spec["maximum"])
          for name, spec in AGENT_CONFIG_SCHEMA["properties"]["subagents"]["properties"].items()
          if name != "max_spawn_depth"}


def spawn_limits(agent: Agent) -> SpawnLimits:
    """The limits for `agent`'s subagents: its overrides (integers within range) over the defaults."""
    raw = (agent.other_config or {}).get("subagents")
    raw = raw if isinstance(raw, dict) else {}
    values = {name: raw[name] for name, (low, high) in RANGES.items()
              if isinstance(raw.get(name), int) and not isinstance(raw.get(name), bool) and low <= raw[name] <= high}
    return SpawnLimits(**values, max_spawn_depth=max_subagent_depth(agent))
