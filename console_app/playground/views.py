"""The tool playground: run any tool the policy allows as a chosen agent and user, through the one pipeline
(`tools_app.execution.tool_execute`: policy, hooks, approvals, sandbox, scrubbing, audit with the person as actor),
and see the result as the model would; "explain" tells why a tool is or is not available. Thin: parse, call, render.
Seeing the page needs tools_app.view_agent; running a tool (or resuming an approved one) acts as the agent and needs
tools_app.execute_as_agent as well (docs/permissions.md)."""
from __future__ import annotations

import copy
import json
import uuid

from django.contrib import admin
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from console_app.playground.forms import RunAsForm
from console_app.playground.schema_form import (
    RawArgumentsForm,
    ToolArgumentsForm,
    initial_arguments,
)
from goclaw.authz import person_may, person_required
from goclaw.errors import ApplicationError, ValidationError
from tools_app.calls import CallContext, Outcome, ToolCall
from tools_app.execution import approval_execute, tool_execute
from tools_app.pipeline import scrub_arguments
from tools_app.selectors import tool_catalog_explain, tool_catalog_for_agent

VIEW_PERMISSION = "tools_app.view_agent"
RUN_PERMISSION = "tools_app.execute_as_agent"


def may_run(user) -> bool:
    """Running a tool acts as the agent (its policy, its sandbox, its audit rows with the person as actor)."""
    return person_may(user, VIEW_PERMISSION, RUN_PERMISSION)


def _explain(agent, call: CallContext, name: str) -> dict:
    """The policy explanation of one tool name for this call context (`found` False: not in the tool set)."""
    explanation = tool_catalog_explain(agent, call)
    row = next((tool for tool in explanation["tools"] if tool["name"] == name), None)
    return {"name": name, "row": row, "found": row is not None, "steps": explanation["steps"],
            "full_url": reverse("admin:tools_app_agent_explain", args=[agent.pk])}


def _result(outcome: Outcome, arguments: dict) -> dict:
    """What the page shows of an outcome (already scrubbed by the pipeline) and of the arguments sent (scrubbed as
    the audit row stores them)."""
    approval_id = outcome.extra.get("approval_id", "")
    return {
        "outcome": outcome, "model_json": json.dumps(outcome.as_dict(), indent=2, ensure_ascii=False, default=str),
        "for_user_differs": outcome.for_user is not None and outcome.for_user != outcome.for_llm,
        "audit_url": reverse("admin:tools_app_toolinvocation_change", args=[outcome.invocation_id])
        if outcome.invocation_id else "",
        "approval_id": approval_id if outcome.status == "pending_approval" else "",
        "queue_url": reverse("admin:tools_app_approvalrequest_queue"),
        "arguments_audited": json.dumps(scrub_arguments(arguments), indent=2, ensure_ascii=False, default=str),
    }


@person_required(GET=(VIEW_PERMISSION,), POST=(VIEW_PERMISSION, RUN_PERMISSION))
@require_http_methods(["GET", "POST"])
def playground(request):
    """GET: choose agent, user and tool, see its form (or an explanation). POST: run it (mode form / raw / resume)."""
    data = request.POST if request.method == "POST" else request.GET
    run_as = RunAsForm(data if data.get("agent") else None)
    page = {**admin.site.each_context(request), "title": "Tool playground", "run_as": run_as,
            "may_run": may_run(request.user)}
    if not run_as.is_bound or not run_as.is_valid():
        return TemplateResponse(request, "console_app/playground/playground.html", page)

    agent, chosen = run_as.cleaned_data["agent"], run_as.cleaned_data
    call = CallContext(user_id=chosen["user_id"], session_key=chosen["session_key"], channel="console",
                       actor=f"staff:{request.user.get_username()}")
    catalog = tool_catalog_for_agent(agent, call)
    definition = next((d for d in catalog if d["name"] == chosen["tool"]), None)
    schema = definition["parameters"] if definition else {}
    page.update(agent=agent, catalog=catalog, tool=chosen["tool"], definition=definition,
                hidden={"agent": agent.key, "user_id": chosen["user_id"], "session_key": chosen["session_key"],
                        "tool": chosen["tool"]})
    if data.get("explain"):
        page["explain"] = _explain(agent, call, data["explain"][:128])
    elif chosen["tool"] and definition is None:
        page["explain"] = _explain(agent, call, chosen["tool"])

    mode = request.POST.get("mode", "form") if request.method == "POST" else ""
    args_form = ToolArgumentsForm(schema, request.POST if mode == "form" else None)
    raw_form = RawArgumentsForm(request.POST if mode in ("raw", "resume") else None,
                                initial={"arguments": json.dumps(initial_arguments(schema), indent=2)})
    page.update(args_form=args_form, raw_form=raw_form, mode=mode)
    if not mode or not chosen["tool"]:
        return TemplateResponse(request, "console_app/playground/playground.html", page)

    form = args_form if mode == "form" else raw_form
    if not form.is_valid():
        return TemplateResponse(request, "console_app/playground/playground.html", page)
    arguments = args_form.arguments() if mode == "form" else raw_form.cleaned_data["arguments"]
    try:
        if mode == "resume":
            outcome = approval_execute(approval_id=_uuid(request.POST.get("approval_id", "")), agent=agent,
                                       arguments=copy.deepcopy(arguments))
        else:
            # No transaction is open here (ATOMIC_REQUESTS is off): the tool's I/O runs outside any.
            outcome = tool_execute(ToolCall(agent, chosen["tool"], copy.deepcopy(arguments), context=call),
                                   wait_seconds=chosen["wait_seconds"] or 0)
    except ApplicationError as exc:
        page["run_error"] = exc.message
        return TemplateResponse(request, "console_app/playground/playground.html", page)
    page["result"] = _result(outcome, arguments)
    # The person's own typed arguments (never the pipeline's copy, which hooks may rewrite) for editing and resuming.
    page["typed_json"] = json.dumps(arguments, indent=2, ensure_ascii=False)
    if mode == "form":
        page["raw_form"] = RawArgumentsForm(initial={"arguments": page["typed_json"]})
    return TemplateResponse(request, "console_app/playground/playground.html", page)


def _uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ValidationError("not an approval id", code="approval_id_invalid") from None
