"""The schema of an agent's `other_config` (per-agent settings) and its check. A leaf module: the Agent model's
`clean()` and the agent services both use it."""
from __future__ import annotations

import functools
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError

from goclaw.errors import ValidationError


def _int(minimum: int, maximum: int, description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum, "description": description}


_QUALITY_GATE: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["event", "type"],
    "properties": {
        "event": {"enum": ["delegation.completed"], "description": "when the gate runs"},
        "type": {"enum": ["command", "agent"]},
        "command": {"type": "string", "minLength": 1, "maxLength": 10_000,
                    "description": "type command: run in this agent's sandbox with the result on stdin; exit 0 passes, "
                                   "stderr is the feedback"},
        "agent": {"type": "string", "minLength": 1, "maxLength": 64,
                  "description": "type agent: the key of a hosted reviewer agent answering APPROVED or REJECTED: …"},
        "criteria": {"type": "string", "minLength": 1, "maxLength": 10_000,
                     "description": "type agent: what the reviewer checks (default: the result does what was asked)"},
        "block_on_failure": {"type": "boolean", "description": "a failing result is revised, then refused (default "
                                                               "true); false: it passes with a note"},
        "max_retries": _int(0, 5, "revisions the target gets after a failure (default 1)"),
    },
    "allOf": [{"if": {"properties": {"type": {"const": "command"}}}, "then": {"required": ["command"]}},
              {"if": {"properties": {"type": {"const": "agent"}}}, "then": {"required": ["agent"]}}],
}
_NAME_LIST = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 200}, "uniqueItems": True}
AGENT_CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rate_limit_per_hour": {"type": "integer", "minimum": 0, "description": "tool calls per session per hour; 0 disables"},
        "rate_limit_user_per_hour": {"type": "integer", "minimum": 0,
                                     "description": "tool calls per user id per hour, across sessions; 0 disables"},
        "rate_limit_agent_per_hour": {"type": "integer", "minimum": 0,
                                      "description": "tool calls per hour for the whole agent; 0 disables"},
        "output_budget_chars": {"type": "integer", "minimum": 1000, "maximum": 10_000_000},
        "tool_output_budgets": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1000}},
        "tool_timeouts": {"type": "object", "additionalProperties": {"type": "number", "minimum": 1, "maximum": 3600}},
        "exec_timeout_seconds": {"type": "number", "minimum": 1, "maximum": 3600,
                                 "description": "exec's default command timeout (never above the sandbox profile's)"},
        "exec_grace_seconds": {"type": "number", "minimum": 0, "maximum": 60,
                               "description": "seconds between SIGTERM and SIGKILL at the timeout (default 3)"},
        "exec_max_output_bytes": {"type": "integer", "minimum": 1024, "maximum": 256 * 1024 * 1024,
                                  "description": "bytes of stdout and of stderr kept per command (default 1 MiB)"},
        "shell_disabled_rule_groups": _NAME_LIST,
        "denied_paths": _NAME_LIST,
        # Approvals (docs/approvals.md): GoClaw's exec security × ask matrix, and the decision deadline.
        "exec_security": {"enum": ["deny", "allowlist", "full"], "description": "default full"},
        "exec_ask": {"enum": ["off", "on-miss", "always"], "description": "default off"},
        "exec_allowlist": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 1000}, "uniqueItems": True,
                           "description": "glob patterns on each simple command (e.g. 'git status', 'ls *')"},
        "approval_timeout_seconds": {"type": "integer", "minimum": 10, "maximum": 86400},
        # Teams (docs/teams.md): how many delegations this agent takes at once, from every source together.
        "max_delegation_load": {"type": "integer", "minimum": 1, "maximum": 1000,
                                "description": "running delegations this agent accepts at once (default 5)"},
        # Hosted runs (docs/runtime.md): model turns per run, and the subagent limits of `spawn`.
        "max_iterations": {"type": "integer", "minimum": 1, "maximum": 200, "description": "model turns per run (default 20)"},
        "subagents": {"type": "object", "additionalProperties": False, "properties": {
            "max_concurrent": _int(1, 64, "running subagents across all parents (default 8)"),
            "max_spawn_depth": _int(1, 5, "nesting depth; the leaf deny list applies there (default 1)"),
            "max_children_per_agent": _int(1, 20, "subagents of one parent session until archived (default 5)"),
            "archive_after_minutes": _int(1, 10080, "ended subagents are archived after (default 60)"),
            "max_retries": _int(0, 10, "failed model requests a subagent survives (default 2)"),
            "max_iterations": _int(1, 200, "model turns per subagent run (default 20)"),
        }},
        # Quality gates (docs/runtime.md): checks a delegation's result must pass before it reaches this agent.
        "quality_gates": {"type": "array", "maxItems": 10, "items": _QUALITY_GATE},
    },
}


@functools.cache
def _validator():
    """Built on first use: jsonschema imports in ~0.1 s, which every process loading the models would pay."""
    import jsonschema

    return jsonschema.Draft202012Validator(AGENT_CONFIG_SCHEMA)


def agent_config_validate(config: Any, *, as_django_error: bool = False) -> dict:
    """Check `other_config` against AGENT_CONFIG_SCHEMA; errors name the offending key."""
    problems = [
        f"{'/'.join(str(p) for p in err.absolute_path) or '(root)'}: {err.message}"
        for err in sorted(_validator().iter_errors(config), key=lambda e: list(e.absolute_path))
    ]
    if problems:
        if as_django_error:
            raise DjangoValidationError({"other_config": problems})
        raise ValidationError("invalid agent configuration", code="invalid_agent_config", details=problems)
    return config
