"""The `handoff` and `delegate` tools (group "delegation") and their tool source, and the generated DELEGATION.md
(docs/delegation.md). Thin: parse the model's arguments, call one service or selector, answer in sentences; a
service's error becomes the tool's error result with the service's message."""
from __future__ import annotations

import time
from typing import Any, Iterable

from django.db import transaction

from goclaw.errors import ApplicationError
from teams_app.actors import Actor
from teams_app.choices import DelegationStatus
from teams_app.selectors_delegation import (DelegationTarget, delegation_as_dict, delegation_get_for_agent,
                                            delegation_identifier, delegation_md, delegation_target_line,
                                            delegation_targets_search, delegations_for_agent)
from teams_app.services import delegation as delegation_svc
from teams_app.services import handoff as handoff_svc
from tools_app.base import Tool, ToolContext, ToolError, ToolResult
from tools_app.models import Agent
from tools_app.selectors_context import context_file_provider_register
from tools_app.toolsets import ToolSource, tool_source_register

GROUP = "delegation"
SOURCE_NAME = "delegation"
LIST_MAX = 50
PREVIEW_CHARS = 300
SYNC_WAIT_SECONDS = 300.0  # mode sync: how long `delegate` waits for the result before answering "still running"
SYNC_POLL_SECONDS = 0.2


def _caller(ctx: ToolContext) -> Agent:
    agent = Agent.objects.filter(pk=ctx.agent_id).first() if ctx.agent_id is not None else None
    if agent is None:
        raise ToolError("delegation and handoff need a registered agent")
    return agent


def _agent_named(key: Any) -> Agent:
    if not isinstance(key, str) or not key.strip():
        raise ToolError("argument agent must be the key of an agent (DELEGATION.md lists them)")
    agent = Agent.objects.filter(key=key.strip()).first() if len(key) <= 64 and "\x00" not in key else None
    if agent is None:
        raise ToolError(f"There is no agent {key[:64]!r}. DELEGATION.md lists the agents you can reach.")
    return agent


def _text(args: dict[str, Any], name: str, *, required: bool) -> str:
    value = args.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise ToolError(f"argument {name} must be a non-empty string")
    return value


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _run_service(fn, **kwargs):
    try:
        return fn(**kwargs)
    except ApplicationError as exc:
        raise ToolError(exc.message) from None


class HandoffTool(Tool):
    """Passes the current conversation to another linked agent (or clears the handoff)."""

    name = "handoff"
    description = (
        "Hand this conversation over to another agent: its next messages go to that agent until the handoff is "
        'cleared or expires. {"agent": "<key>", "reason": "<why>"} hands off (you need a link to that agent; '
        'DELEGATION.md lists them); add "expires_in_minutes" to make it temporary. {"action": "clear"} gives the '
        "conversation back to the channel's usual agent. Works only inside a conversation (a channel and chat id)."
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["transfer", "clear"], "default": "transfer",
                       "description": "transfer (default) or clear"},
            "agent": {"type": "string", "minLength": 1, "maxLength": 64, "description": "the agent to hand off to"},
            "reason": {"type": "string", "maxLength": 2000, "description": "why (the other agent sees it)"},
            "expires_in_minutes": {"type": "integer", "minimum": 1, "maximum": handoff_svc.EXPIRES_MAX_MINUTES},
        },
        "additionalProperties": False,
    }
    group = GROUP
    read_only = False
    inline = True  # a few indexed queries in one transaction
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        agent = _caller(ctx)
        actor = Actor.for_agent(agent)
        if args.get("action", "transfer") == "clear":
            cleared = _run_service(handoff_svc.handoff_clear, actor=actor, channel=ctx.channel, chat_id=ctx.chat_id)
            if not cleared:
                return ToolResult(for_llm="This conversation had no handoff; nothing to clear.")
            return ToolResult(for_llm="Handoff cleared: the conversation goes back to the channel's usual agent.")
        target = _agent_named(args.get("agent"))
        route = _run_service(handoff_svc.handoff_set, actor=actor, source=agent, target=target, channel=ctx.channel,
                             chat_id=ctx.chat_id, reason=_text(args, "reason", required=False),
                             user_id=ctx.user_id, expires_in_minutes=args.get("expires_in_minutes"))
        until = f" until {route.expires_at.isoformat(timespec='minutes')}" if route.expires_at else ""
        return ToolResult(for_llm=f"Handed this conversation off to {target.key}{until}: its next messages go to "
                                  f"{target.key}.")


class DelegateTool(Tool):
    """Delegates work to linked agents (a team lead's becomes a task on its board) and follows it up."""

    name = "delegate"
    description = (
        "Delegate work to another agent and follow it up. Actions: "
        '"delegate" {"agent": "<key>", "task": "<what to do>", "team"?: "<name>", "mode"?: "async" | "sync"} '
        "starts a delegation D-n (to a team lead it becomes a task on its team's board); mode async (default) "
        "returns at once, sync waits for the result (up to 5 minutes) and returns it; "
        '"list": your running delegations, outgoing and incoming; "status" {"id": "D-n"}: one delegation and its '
        'result; "complete" {"id", "result"} / "fail" {"id", "result"}: answer a delegation made to you; '
        '"cancel" {"id"}: withdraw one you made; "search" {"query"}: find agents you can delegate to.'
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["delegate", "list", "status", "complete", "fail", "cancel", "search"],
                       "default": "delegate"},
            "agent": {"type": "string", "minLength": 1, "maxLength": 64},
            "task": {"type": "string", "minLength": 1, "maxLength": delegation_svc.REQUEST_MAX},
            "team": {"type": ["string", "integer"]},
            "mode": {"type": "string", "enum": ["async", "sync"], "default": "async",
                     "description": "delegate: async returns at once; sync waits for the result and returns it"},
            "id": {"type": ["string", "integer"], "description": "a delegation id, D-12"},
            "result": {"type": "string", "maxLength": delegation_svc.RESULT_MAX},
            "reason": {"type": "string", "maxLength": 2000},
            "query": {"type": "string", "minLength": 1, "maxLength": 200},
        },
        "additionalProperties": False,
    }
    group = GROUP
    read_only = False
    inline = True  # row locks and a few indexed queries in one short transaction
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        agent = _caller(ctx)
        action = args.get("action", "delegate")
        handler = {"delegate": self._delegate, "list": self._list, "status": self._status,
                   "complete": self._complete, "fail": self._fail, "cancel": self._cancel,
                   "search": self._search}.get(action) if isinstance(action, str) else None
        if handler is None:
            raise ToolError("action must be one of delegate, list, status, complete, fail, cancel, search")
        return handler(ctx, agent, args)

    def _delegate(self, ctx: ToolContext, agent: Agent, args: dict[str, Any]) -> ToolResult:
        target = _agent_named(args.get("agent"))
        mode = args.get("mode", "async")
        if mode not in ("async", "sync"):
            raise ToolError("mode must be async or sync")
        # Waiting inside the caller's transaction would be in vain: the work is announced only when it commits.
        wait = mode == "sync" and not transaction.get_connection().in_atomic_block
        delegation = _run_service(
            delegation_svc.delegation_create, source=agent, target=target, request=_text(args, "task", required=True),
            user_id=ctx.user_id, session_key=ctx.session_key, channel=ctx.channel, chat_id=ctx.chat_id,
            team=args.get("team"), wait=wait)
        ident = delegation_identifier(delegation)
        follow = f'Follow it with {{"action": "status", "id": "{ident}"}}; the result comes back there.'
        if wait:
            return self._wait(ctx, agent, delegation, follow)
        if delegation.task is not None:
            return ToolResult(for_llm=f"Delegated {ident} to {target.key}: it is task {delegation.task.identifier} on "
                                      f"team {delegation.task.team.name}'s board. {follow}")
        return ToolResult(for_llm=f"Delegated {ident} to {target.key} (running). {follow}")

    def _wait(self, ctx: ToolContext, agent: Agent, delegation: Any, follow: str) -> ToolResult:
        """Mode sync: poll the delegation until it finishes, the caller gives up (its cancel), or SYNC_WAIT_SECONDS
        pass. An inline tool: the pipeline does not stop it, so it watches the caller's own cancel event too."""
        ident, target = delegation_identifier(delegation), delegation.target.key
        deadline = time.monotonic() + SYNC_WAIT_SECONDS
        while True:
            d = _run_service(delegation_get_for_agent, agent=agent, ref=delegation.pk)
            if d.status != DelegationStatus.RUNNING:
                break
            if time.monotonic() >= deadline:
                return ToolResult(for_llm=f"Delegated {ident} to {target}; it is still running after "
                                          f"{SYNC_WAIT_SECONDS:g} s. {follow}")
            stopped = ctx.cancel.wait(SYNC_POLL_SECONDS) or (ctx.caller_cancel is not None
                                                             and ctx.caller_cancel.is_set())
            if stopped:
                return ToolResult(for_llm=f"Stopped waiting for {ident} (still running). {follow}", is_error=True)
        if d.status == DelegationStatus.COMPLETED:
            return ToolResult(for_llm=f"{ident} completed by {target}:\n{d.result}")
        return ToolResult(for_llm=f"{ident} {d.status}: {d.result or '(no reason given)'}", is_error=True)

    def _list(self, ctx: ToolContext, agent: Agent, args: dict[str, Any]) -> ToolResult:
        rows = list(delegations_for_agent(agent, status=DelegationStatus.RUNNING)[:LIST_MAX])
        if not rows:
            return ToolResult(for_llm="You have no running delegations, outgoing or incoming.")
        lines = [f"[{len(rows)} running delegation{'s' if len(rows) != 1 else ''}]"]
        for d in rows:
            way = f"to {d.target.key}" if d.source_id == agent.pk else f"from {d.source.key} (answer it)"
            task = f", task {d.task.identifier} ({d.task.status})" if d.task else ""
            lines.append(f"{delegation_identifier(d)} {way}{task}: {_preview(d.request)}")
        return ToolResult(for_llm="\n".join(lines))

    def _status(self, ctx: ToolContext, agent: Agent, args: dict[str, Any]) -> ToolResult:
        d = _run_service(delegation_get_for_agent, agent=agent, ref=args.get("id"))
        data = delegation_as_dict(d)
        lines = [f"{data['id']} from {data['source']} to {data['target']}: {data['status']}",
                 f"request: {_preview(d.request)}"]
        if d.task is not None:
            lines.append(f"board task: {d.task.identifier} on team {d.task.team.name} ({d.task.status}, "
                         f"{d.task.progress_percent}% done)")
        if d.status != DelegationStatus.RUNNING:
            lines.append(f"result: {d.result}" if d.result else "result: (none given)")
        return ToolResult(for_llm="\n".join(lines))

    def _answer(self, agent: Agent, args: dict[str, Any], fn) -> Any:
        d = _run_service(delegation_get_for_agent, agent=agent, ref=args.get("id"))
        return _run_service(fn, agent=agent, delegation=d, result=_text(args, "result", required=True))

    def _complete(self, ctx: ToolContext, agent: Agent, args: dict[str, Any]) -> ToolResult:
        d = self._answer(agent, args, delegation_svc.delegation_complete)
        return ToolResult(for_llm=f"{delegation_identifier(d)} completed; {d.source.key} gets your result.")

    def _fail(self, ctx: ToolContext, agent: Agent, args: dict[str, Any]) -> ToolResult:
        d = self._answer(agent, args, delegation_svc.delegation_fail)
        return ToolResult(for_llm=f"{delegation_identifier(d)} marked failed; {d.source.key} is told why.")

    def _cancel(self, ctx: ToolContext, agent: Agent, args: dict[str, Any]) -> ToolResult:
        d = _run_service(delegation_get_for_agent, agent=agent, ref=args.get("id"))
        d = _run_service(delegation_svc.delegation_cancel, actor=Actor.for_agent(agent), delegation=d,
                         reason=_text(args, "reason", required=False))
        extra = f" Its board task {d.task.identifier} is cancelled too." if d.task else ""
        return ToolResult(for_llm=f"{delegation_identifier(d)} cancelled.{extra}")

    def _search(self, ctx: ToolContext, agent: Agent, args: dict[str, Any]) -> ToolResult:
        query = _text(args, "query", required=True)[:200]
        found: list[DelegationTarget] = delegation_targets_search(agent, ctx.user_id, query)
        if not found:
            return ToolResult(for_llm=f"No agent you can delegate to matches {query[:100]!r}.")
        return ToolResult(for_llm="\n".join([f"[{len(found)} agent{'s' if len(found) != 1 else ''} for "
                                             f"{query[:100]!r}]", *(delegation_target_line(t) for t in found)]))


TOOLS: tuple[Tool, ...] = (HandoffTool(), DelegateTool())


class DelegationToolSource(ToolSource):
    """Gives every agent `handoff` and `delegate` (group "delegation"); links decide whom they reach and the policy
    engine decides who may call them."""

    name = SOURCE_NAME
    reserved_names = frozenset({"handoff", "delegate"})

    def tools_for(self, agent: Any, user_id: str) -> Iterable[Tool]:
        return TOOLS


def register() -> None:
    """Called from TeamsAppConfig.ready(): the tool source and the DELEGATION.md context file."""
    tool_source_register(DelegationToolSource())
    context_file_provider_register("DELEGATION.md", delegation_md)
