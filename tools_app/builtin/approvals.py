"""The `submit_plan` tool (plan mode): a person approves a plan before mutating tools are allowed in a session."""
from __future__ import annotations

from typing import Any

from tools_app.base import Tool, ToolContext, ToolResult
from tools_app.services.approvals.decision import PLAN_TOOL


class SubmitPlanTool(Tool):
    """Asks a person to approve a plan. In plan mode, mutating tools stay denied in this session until a
    person approves one; the call only runs (and returns) once approved."""

    name = PLAN_TOOL
    group = "approvals"
    read_only = True
    always_require_approval = True
    inline = True
    description = (
        "Submit your plan for a person's approval. In plan mode, tools that change anything are denied until a "
        "person approves a plan for this session. The call returns pending_approval with an approval_id; wait "
        "for the decision (GET /api/v1/approvals/<id>?wait=30), then POST /api/v1/approvals/<id>/execute."
    )
    parameters = {
        "type": "object",
        "properties": {"plan": {"type": "string", "minLength": 1, "maxLength": 20000,
                                "description": "what you intend to do, step by step, and which files/commands it touches"}},
        "required": ["plan"],
        "additionalProperties": False,
    }

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        return ToolResult(for_llm="Your plan was approved by a person: tools that change things are now allowed in this session.")


TOOLS = [SubmitPlanTool()]
