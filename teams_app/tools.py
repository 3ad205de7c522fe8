"""The team tools (group "teams"): `team_tasks` (the task board) and `team_message` (the mailbox), and the tool source
that gives both to every agent. Membership and roles are checked per call by the services: an agent in no team gets
a clear error, an agent of team A never sees (nor learns the existence of) team B's tasks.

Entrypoints only: parse the arguments, find the caller's team, call one service or selector, answer compact JSON.
A service's error (illegal transition, role refusal, bad argument) becomes a tool error carrying its sentence.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterable

from goclaw.db import pg_text
from goclaw.errors import ApplicationError
from teams_app import selectors
from teams_app.actors import Actor
from teams_app.models import Team, TeamMember
from teams_app.selectors import task_as_dict
from teams_app.services import mailbox
from teams_app.services import tasks as svc
from tools_app.base import Tool, ToolContext, ToolError, ToolResult
from tools_app.labels import labels_of
from tools_app.models import Agent
from tools_app.toolsets import ToolSource, tool_source_register
from tools_app.workspace import workspace_required

SOURCE_NAME = "teams"
GROUP = "teams"
LIST_MAX, SEARCH_MAX = 30, 10
SUBJECT_MAX, DESCRIPTION_MAX, TEXT_MAX, RESULT_MAX = 500, 20_000, 10_000, 50_000
STEP_MAX, NOTE_MAX, QUERY_MAX, PATH_MAX = 500, 500, 500, 4096
TEAM_REF_MAX, TASK_ID_MAX, BLOCKED_BY_MAX = 100, 20, 50
PRIORITY_MIN, PRIORITY_MAX = -1_000_000, 1_000_000
LISTED_TEXT_CHARS = 300  # description / result in list and search answers (get shows the whole task)

TASK_ACTIONS = ("create", "list", "get", "claim", "complete", "cancel", "assign", "review", "approve", "reject",
                "comment", "progress", "attach", "ask_user", "search", "update", "retry")
LIST_FILTERS = ("active", "pending", "in_progress", "blocked", "in_review", "completed", "failed", "cancelled",
                "stale", "all")
MESSAGE_ACTIONS = ("send", "broadcast", "read")

_TASK_ID = {"type": "string", "minLength": 1, "maxLength": TASK_ID_MAX,
            "description": "The task's identifier, e.g. \"T-001\"."}
_AGENT_KEY = {"type": "string", "minLength": 1, "maxLength": 64, "description": "A teammate's agent key."}
_TEAM = {"type": "string", "minLength": 1, "maxLength": TEAM_REF_MAX,
         "description": "The team's name; needed only when you are in several teams."}


# --- shared helpers --------------------------------------------------------------------------------------------------
def _agent(ctx: ToolContext):
    agent = Agent.objects.filter(pk=ctx.agent_id).first() if ctx.agent_id is not None else None
    if agent is None and ctx.agent_key:
        agent = Agent.objects.filter(key=ctx.agent_key).first()
    if agent is None:
        raise ToolError("the team tools need an agent: this call has none")
    return agent


def _team(agent: Any, args: dict[str, Any]):
    """The caller's team: the one it is in, or the one `team` names among its own (never another team)."""

    ref = _text(args, "team", TEAM_REF_MAX)
    if not selectors.teams_for_agent(agent).exists():
        raise ToolError(f"agent {agent.key} is not a member of any team; a person must add it to one first")
    return selectors.team_for_agent(agent, ref or None)


def _text(args: dict[str, Any], key: str, limit: int, *, required: str = "") -> str:
    """A string argument ("" when absent). `required` names the action that needs it."""
    value = args.get(key)
    if value is None or value == "":
        if required:
            raise ToolError(f"action {required} needs the argument {key}")
        return ""
    if not isinstance(value, str):
        raise ToolError(f"argument {key} must be a string")
    if required and not value.strip():
        raise ToolError(f"action {required} needs a non-empty {key}")
    if len(value) > limit:
        raise ToolError(f"argument {key} is {len(value)} characters long; the limit is {limit}")
    if pg_text(value) != value:
        raise ToolError(f"argument {key} holds characters that cannot be stored (NUL or unpaired surrogates)")
    return value


def _int(args: dict[str, Any], key: str, low: int, high: int, *, required: str = "") -> int | None:
    value = args.get(key)
    if value is None:
        if required:
            raise ToolError(f"action {required} needs the argument {key}")
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ToolError(f"argument {key} must be an integer from {low} to {high}")
    return value


def _identifiers(args: dict[str, Any], key: str) -> list[str] | None:
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and 0 < len(v) <= TASK_ID_MAX for v in value):
        raise ToolError(f"argument {key} must be a list of task identifiers like [\"T-001\", \"T-002\"]")
    if len(value) > BLOCKED_BY_MAX:
        raise ToolError(f"argument {key} names {len(value)} tasks; the limit is {BLOCKED_BY_MAX}")
    if any(pg_text(v) != v for v in value):
        raise ToolError(f"argument {key} holds characters that cannot be stored")
    return value


def _task(team: Any, args: dict[str, Any], action: str, *, required: bool = True):
    """The team's task `task_id` names (None when optional and absent)."""

    ref = _text(args, "task_id", TASK_ID_MAX, required=action if required else "")
    return selectors.task_get(team, ref) if ref else None


def _teammate(team: Any, key: str, what: str):
    """The team member whose agent key is `key`: one sentence whether the agent is unknown or in another team."""

    member = TeamMember.objects.filter(team=team, agent__key=key).select_related("agent").first()
    if member is None:
        keys = list(TeamMember.objects.filter(team=team).order_by("agent__key").values_list("agent__key", flat=True))
        raise ToolError(f"{what} {key[:64]!r} is not a member of team {team.name} (its members: {', '.join(keys)})")
    return member.agent


def _answer(payload: dict[str, Any]) -> ToolResult:
    return ToolResult(for_llm=json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=_json_value))


def _json_value(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _call(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """Run a service or selector; its ApplicationError becomes the tool error the model reads."""
    try:
        return fn(**kwargs)
    except ApplicationError as exc:
        raise ToolError(exc.message) from None


def _quoted(task: Any) -> str:
    subject = task.subject if len(task.subject) <= 80 else task.subject[:79] + "…"
    return f"{task.identifier} {json.dumps(subject, ensure_ascii=False)}"


def _listed(task_dict: dict[str, Any]) -> dict[str, Any]:
    """A task as list and search show it: long texts cut (get shows them whole)."""
    for key in ("description", "result"):
        value = task_dict.get(key)
        if isinstance(value, str) and len(value) > LISTED_TEXT_CHARS:
            task_dict[key] = value[:LISTED_TEXT_CHARS] + f"… (cut; get {task_dict.get('id')} shows all)"
    return task_dict


# --- team_tasks --------------------------------------------------------------------------------------------------------
class TeamTasksTool(Tool):
    """The team task board: create, claim, progress, review and approve tasks, by role (lead, member, reviewer)."""

    name = "team_tasks"
    description = (
        "Your team's task board. Tasks are named T-001, T-002, … Actions: "
        "create {subject, description?, priority?, assignee?, blocked_by?} (lead; without assignee any member may "
        "claim it; blocked_by holds it until those tasks complete) · list {status?} · get {task_id} · "
        "search {query} · claim {task_id?, count?} (members; without task_id: the best open task, or the best count "
        "of them) · "
        "progress {task_id, percent, step?} · review {task_id, result?} (submit for approval) · "
        "complete {task_id, result} or {results: [{task_id, result}, …]} · approve {task_id, text?} / reject {task_id, text} (lead or reviewer) · "
        "comment {task_id, text, kind: note|blocker} (a blocker fails the task and tells the lead) · "
        "attach {task_id, path} (a file in your workspace) · ask_user {task_id, text} · "
        "assign {task_id, assignee} / cancel {task_id, text?} / update {task_id, …} / retry {task_id} (lead). "
        "Pass team (its name) only when you are in several teams. Answers are JSON."
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(TASK_ACTIONS)},
            "task_id": _TASK_ID,
            "subject": {"type": "string", "minLength": 1, "maxLength": SUBJECT_MAX},
            "description": {"type": "string", "maxLength": DESCRIPTION_MAX},
            "priority": {"type": "integer", "minimum": PRIORITY_MIN, "maximum": PRIORITY_MAX,
                         "description": "Higher first (default 0)."},
            "blocked_by": {"type": "array", "maxItems": BLOCKED_BY_MAX, "items": _TASK_ID,
                           "description": "Tasks that must complete first."},
            "assignee": _AGENT_KEY,
            "result": {"type": "string", "maxLength": RESULT_MAX, "description": "What was done (complete, review)."},
            "count": {"type": "integer", "minimum": 1, "maximum": svc.CLAIM_BATCH_MAX,
                      "description": "claim: take up to this many of the best open tasks at once."},
            "results": {"type": "array", "minItems": 1, "maxItems": svc.COMPLETE_BATCH_MAX,
                        "description": "complete several tasks at once, each with its result.",
                        "items": {"type": "object", "required": ["task_id", "result"], "additionalProperties": False,
                                  "properties": {"task_id": _TASK_ID,
                                                 "result": {"type": "string", "maxLength": RESULT_MAX}}}},
            "text": {"type": "string", "maxLength": TEXT_MAX,
                     "description": "comment text, reject feedback, cancel reason, ask_user question, approve or "
                                    "attach note."},
            "kind": {"type": "string", "enum": ["note", "blocker"], "description": "comment kind (default note)."},
            "percent": {"type": "integer", "minimum": 0, "maximum": 100},
            "step": {"type": "string", "maxLength": STEP_MAX, "description": "What you are doing now (progress)."},
            "path": {"type": "string", "minLength": 1, "maxLength": PATH_MAX,
                     "description": "A file in your workspace, relative to it (attach)."},
            "status": {"type": "string", "enum": list(LIST_FILTERS), "description": "list filter (default active)."},
            "query": {"type": "string", "minLength": 1, "maxLength": QUERY_MAX, "description": "search words."},
            "team": _TEAM,
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    group = GROUP
    read_only = False
    inline = True  # database work only: a few indexed queries and one transaction

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        action = args.get("action")
        if action not in TASK_ACTIONS:
            raise ToolError(f"action must be one of: {', '.join(TASK_ACTIONS)}")
        agent = _agent(ctx)
        team = _call(_team, agent=agent, args=args)
        handler = getattr(self, f"_{action}")
        return handler(ctx, agent, Actor.for_agent(agent), team, args)

    # One method per action: (ctx, agent, actor, team, args) -> ToolResult.
    def _done(self, action: str, task: Any, message: str) -> ToolResult:
        return _answer({"ok": True, "action": action, "task": task_as_dict(task), "message": message})

    def _create(self, ctx, agent, actor, team, args) -> ToolResult:
        subject = _text(args, "subject", SUBJECT_MAX, required="create")
        description = _text(args, "description", DESCRIPTION_MAX)
        priority = _int(args, "priority", PRIORITY_MIN, PRIORITY_MAX) or 0
        blocked_by = _identifiers(args, "blocked_by") or []
        key = _text(args, "assignee", 64)
        assignee = _teammate(team, key, "assignee") if key else None
        labels = labels_of(ctx)
        task = _call(svc.task_create, actor=actor, team=team, subject=subject, description=description,
                     priority=priority, assignee=assignee, blocked_by=blocked_by, user_id=labels.user_id,
                     channel=labels.channel, chat_id=labels.chat_id, session_key=ctx.session_key)
        if task.status == "blocked":
            waits = sorted(t.identifier for t in task.blocked_by.all())
            until = f"{waits[0]} completes" if len(waits) == 1 else f"{', '.join(waits)} complete"
            then = f"then {task.owner.key} can claim it" if task.owner_id else "then any member can claim it"
            message = f"Created {_quoted(task)}; it is blocked until {until}, {then}."
        elif task.owner_id:
            message = f"Created {_quoted(task)}; it is assigned to {task.owner.key}, who claims it to start."
        else:
            message = f"Created {_quoted(task)}; it is open for any member to claim."
        return self._done("create", task, message)

    def _list(self, ctx, agent, actor, team, args) -> ToolResult:
        status = args.get("status") or "active"
        if status not in LIST_FILTERS:
            raise ToolError(f"status must be one of: {', '.join(LIST_FILTERS)}")
        return self._listing("list", team, status=status, query=None, limit=LIST_MAX)

    def _search(self, ctx, agent, actor, team, args) -> ToolResult:
        query = _text(args, "query", QUERY_MAX, required="search")
        return self._listing("search", team, status="all", query=query, limit=SEARCH_MAX)

    def _listing(self, action: str, team: Any, *, status: str, query: str | None, limit: int) -> ToolResult:
        rows = list(_call(selectors.task_list, team=team, status=status, query=query, limit=limit + 1))
        more = len(rows) > limit
        tasks = [_listed(selectors.task_as_dict(task)) for task in rows[:limit]]
        payload: dict[str, Any] = {"ok": True, "action": action, "team": team.name, "tasks": tasks,
                                   "count": len(tasks)}
        if action == "list":
            payload["status"] = status
        else:
            payload["query"] = query
        if more:
            payload["more"] = (f"only the first {limit} are shown; narrow with status" if action == "list"
                               else f"only the best {limit} are shown; use more precise words")
        return _answer(payload)

    def _get(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="get")
        return _answer({"ok": True, "action": "get", "task": task_as_dict(task, detail=True)})

    def _claim(self, ctx, agent, actor, team, args) -> ToolResult:
        count = _int(args, "count", 1, svc.CLAIM_BATCH_MAX)
        if count is not None:
            if args.get("task_id"):
                raise ToolError("claim takes task_id (that task) or count (the best open tasks), not both")
            tasks = _call(svc.task_claim_many, actor=actor, team=team, count=count)
            return _answer({"ok": True, "action": "claim", "tasks": [task_as_dict(task) for task in tasks],
                            "message": f"You claimed {len(tasks)} task(s): {', '.join(map(_quoted, tasks))}; they "
                                       f"are in progress and yours: finish each with complete."})
        task = _call(_task, team=team, args=args, action="claim", required=False)
        task = _call(svc.task_claim, actor=actor, team=team, task=task)
        return self._done("claim", task, f"You claimed {_quoted(task)}; it is in progress and yours: report "
                                         "progress, then submit it with review or finish it with complete.")

    def _complete(self, ctx, agent, actor, team, args) -> ToolResult:
        if args.get("results") is not None:
            return self._complete_many(team, actor, args)
        task = _call(_task, team=team, args=args, action="complete")
        result = _text(args, "result", RESULT_MAX, required="complete")
        task = _call(svc.task_complete, actor=actor, task=task, result=result)
        return self._done("complete", task, f"Completed {_quoted(task)}.")

    def _complete_many(self, team, actor, args) -> ToolResult:
        items = args["results"]
        if args.get("task_id") or args.get("result"):
            raise ToolError("complete takes task_id and result (one task) or results (several), not both")
        if not isinstance(items, list) or not 0 < len(items) <= svc.COMPLETE_BATCH_MAX or \
                not all(isinstance(item, dict) for item in items):
            raise ToolError(f"argument results must be a list of 1 to {svc.COMPLETE_BATCH_MAX} objects "
                            "{task_id, result}")
        pairs = [(_call(_task, team=team, args=item, action="complete"),
                  _text(item, "result", RESULT_MAX, required="complete")) for item in items]
        answers = _call(svc.task_complete_many, actor=actor, results=pairs)
        outcomes = [{"task_id": task.identifier, "ok": False, "error": answer.message}
                    if isinstance(answer, ApplicationError) else {"task_id": task.identifier, "ok": True,
                                                                    "task": task_as_dict(answer)}
                    for (task, _), answer in zip(pairs, answers)]
        completed = sum(outcome["ok"] for outcome in outcomes)
        return _answer({"ok": completed == len(outcomes), "action": "complete", "results": outcomes,
                        "message": f"Completed {completed} of {len(outcomes)} task(s)."})

    def _cancel(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="cancel")
        task = _call(svc.task_cancel, actor=actor, task=task, reason=_text(args, "text", TEXT_MAX))
        return self._done("cancel", task, f"Cancelled {_quoted(task)}.")

    def _assign(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="assign")
        assignee = _teammate(team, _text(args, "assignee", 64, required="assign"), "assignee")
        task = _call(svc.task_assign, actor=actor, task=task, assignee=assignee, session_key=ctx.session_key)
        return self._done("assign", task, f"Assigned {_quoted(task)} to {assignee.key}, who claims it to start.")

    def _review(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="review")
        task = _call(svc.task_review, actor=actor, task=task, result=_text(args, "result", RESULT_MAX))
        return self._done("review", task, f"Submitted {_quoted(task)} for review; the lead or a reviewer "
                                          "approves or rejects it.")

    def _approve(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="approve")
        task = _call(svc.task_approve, actor=actor, task=task, note=_text(args, "text", TEXT_MAX))
        return self._done("approve", task, f"Approved {_quoted(task)}; it is completed.")

    def _reject(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="reject")
        feedback = _text(args, "text", TEXT_MAX, required="reject")
        task = _call(svc.task_reject, actor=actor, task=task, feedback=feedback)
        back = f"back with {task.owner.key}" if task.owner_id and task.status == "in_progress" else "open again"
        return self._done("reject", task, f"Rejected {_quoted(task)}; it is {back} ({task.status}) with your "
                                          "feedback as a comment.")

    def _comment(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="comment")
        content = _text(args, "text", TEXT_MAX, required="comment")
        kind = args.get("kind") or "note"
        if kind not in ("note", "blocker"):
            raise ToolError("kind must be note or blocker")
        _call(svc.task_comment, actor=actor, task=task, content=content, kind=kind)
        task.refresh_from_db()
        if kind == "blocker":
            told = "; the lead is told" if team.blocker_escalation else ""
            message = f"Recorded the blocker on {_quoted(task)}; the task is {task.status}{told}."
        else:
            message = f"Commented on {_quoted(task)}."
        return self._done("comment", task, message)

    def _progress(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="progress")
        percent = _int(args, "percent", 0, 100, required="progress")
        task = _call(svc.task_progress, actor=actor, task=task, percent=percent, step=_text(args, "step", STEP_MAX))
        return self._done("progress", task, f"{task.identifier} is at {task.progress_percent}%; your claim is "
                                            "renewed.")

    def _attach(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="attach")
        rel, size = _workspace_file(ctx, _text(args, "path", PATH_MAX, required="attach"))
        note = _text(args, "text", NOTE_MAX)
        _call(svc.task_attach, actor=actor, task=task, path=rel, size=size, note=note)
        task.refresh_from_db()
        return self._done("attach", task, f"Attached {rel} ({size} bytes) to {_quoted(task)}.")

    def _ask_user(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="ask_user")
        question = _text(args, "text", TEXT_MAX, required="ask_user")
        task = _call(svc.task_ask_user, actor=actor, task=task, question=question)
        return self._done("ask_user", task, f"Asked the user about {_quoted(task)}; the answer arrives as a "
                                            "comment and a team_message.")

    def _update(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="update")
        changes: dict[str, Any] = {}
        if args.get("subject") is not None:
            changes["subject"] = _text(args, "subject", SUBJECT_MAX, required="update")
        if args.get("description") is not None:
            changes["description"] = _text(args, "description", DESCRIPTION_MAX)
        if args.get("priority") is not None:
            changes["priority"] = _int(args, "priority", PRIORITY_MIN, PRIORITY_MAX)
        if args.get("blocked_by") is not None:
            changes["blocked_by"] = _identifiers(args, "blocked_by")
        if not changes:
            raise ToolError("action update needs at least one of subject, description, priority, blocked_by")
        task = _call(svc.task_update, actor=actor, task=task, **changes)
        return self._done("update", task, f"Updated {_quoted(task)} ({', '.join(changes)}); it is {task.status}.")

    def _retry(self, ctx, agent, actor, team, args) -> ToolResult:
        task = _call(_task, team=team, args=args, action="retry")
        task = _call(svc.task_retry, actor=actor, task=task)
        who = f"{task.owner.key} can claim it again" if task.owner_id else "any member can claim it"
        if task.status == "blocked":
            who = f"it waits for its unfinished blockers, then {who}"
        return self._done("retry", task, f"{_quoted(task)} is {task.status} again; {who}.")


def _workspace_file(ctx: ToolContext, path: str) -> tuple[str, int]:
    """(workspace-relative path, size) of an existing regular file in the call's workspace, checked by the same
    rules as the file tools (confinement, denied paths, symlinks); absolute paths are refused outright."""
    ws = workspace_required(ctx)
    if path.startswith(("/", "~", "\\")):
        raise ToolError("path must be relative to your workspace (e.g. reports/summary.md), not absolute")
    routed = ws.router_for(path)
    if routed is not None:
        router, rel = routed
        try:
            return rel, len(router.read(ws, rel).encode("utf-8", "surrogatepass"))
        except FileNotFoundError:
            raise ToolError(f"file not found: {rel}") from None
    rel = ws.rel_of(path)
    fd = ws.open_for_read(path)
    try:
        return rel, os.fstat(fd).st_size
    finally:
        os.close(fd)


# --- team_message ------------------------------------------------------------------------------------------------------
class TeamMessageTool(Tool):
    """The team mailbox: a direct message to a teammate, a broadcast (lead), and reading unread messages."""

    name = "team_message"
    description = (
        "Your team's mailbox. Actions: send {to: <teammate's agent key>, text, task_id?} · broadcast {text} (lead: "
        "to every teammate) · read (your unread messages, oldest first; reading marks them read). Pass team (its "
        "name) only when you are in several teams; read without team reads all your teams. Answers are JSON."
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(MESSAGE_ACTIONS)},
            "to": _AGENT_KEY,
            "text": {"type": "string", "minLength": 1, "maxLength": TEXT_MAX},
            "task_id": _TASK_ID,
            "team": _TEAM,
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    group = GROUP
    read_only = False
    inline = True  # database work only

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        action = args.get("action")
        if action not in MESSAGE_ACTIONS:
            raise ToolError(f"action must be one of: {', '.join(MESSAGE_ACTIONS)}")
        agent = _agent(ctx)
        actor = Actor.for_agent(agent)
        if action == "read":
            team = _call(_team, agent=agent, args=args) if args.get("team") else None
            if team is None:
                _call(_team_check, agent=agent)
            messages = _call(mailbox.messages_read, agent=agent, team=team)
            names = {team.pk: team.name} if team is not None else _team_names(agent)
            return _answer({"ok": True, "action": "read", "messages": [_message(m, names) for m in messages],
                            "count": len(messages)})
        team = _call(_team, agent=agent, args=args)
        text = _text(args, "text", TEXT_MAX, required=action)
        if action == "broadcast":
            sent = _call(mailbox.message_broadcast, actor=actor, team=team, text=text, session_key=ctx.session_key)
            return _answer({"ok": True, "action": "broadcast", "team": team.name, "count": len(sent),
                            "message": f"Sent to {len(sent)} teammate{'s' if len(sent) != 1 else ''} of team "
                                       f"{team.name}."})
        to = _teammate(team, _text(args, "to", 64, required="send"), "recipient")
        task = _call(_task, team=team, args=args, action="send", required=False)
        _call(mailbox.message_send, actor=actor, team=team, to=to, text=text, task=task, session_key=ctx.session_key)
        about = f" about {task.identifier}" if task is not None else ""
        return _answer({"ok": True, "action": "send", "team": team.name, "to": to.key,
                        "message": f"Sent to {to.key}{about}; they see it when they read their messages."})


def _team_check(*, agent: Any) -> None:
    if not selectors.teams_for_agent(agent).exists():
        raise ToolError(f"agent {agent.key} is not a member of any team; a person must add it to one first")


def _team_names(agent: Any) -> dict[int, str]:
    return dict(Team.objects.filter(members__agent=agent).values_list("pk", "name"))


def _message(message: Any, team_names: dict[int, str]) -> dict[str, Any]:
    """One message as `read` hands it over."""
    task = message.task
    return {"from": message.sender, "kind": message.kind, "text": message.text,
            "task": task.identifier if task is not None else None,
            "team": team_names.get(message.team_id) or message.team.name, "sent_at": message.created_at.isoformat()}


TOOLS: tuple[Tool, ...] = (TeamTasksTool(), TeamMessageTool())


class TeamToolSource(ToolSource):
    """Gives team_tasks and team_message to every agent: membership and roles are checked when a call runs, so a
    team change needs no tool-set rebuild."""

    name = SOURCE_NAME
    reserved_names = frozenset(tool.name for tool in TOOLS)

    def tools_for(self, agent: Any, user_id: str) -> Iterable[Tool]:
        return TOOLS


def register() -> None:
    """Called from TeamsAppConfig.ready(): the team tools' source."""
    tool_source_register(TeamToolSource())
