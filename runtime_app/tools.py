"""The `sessions` group: sessions_list, sessions_history, sessions_send, session_status, and `spawn` (subagents).
Thin: parse the model's arguments, call one service or selector, answer in sentences. They act within the calling
hosted session (its agent and user): another user's conversations are never listed, read or written."""
from __future__ import annotations

from typing import Any, Iterable

from goclaw.errors import ApplicationError
from runtime_app import spawn as spawning
from runtime_app.choices import ACTIVE_STATUSES, MessageRole
from runtime_app.models import Session, SessionMessage
from runtime_app.services import sessions as svc
from tools_app.base import Tool, ToolContext, ToolError, ToolResult
from tools_app.toolsets import ToolSource, tool_source_register

GROUP = "sessions"
PREVIEW_CHARS = 300
LIST_MAX = 50
WAIT_DEFAULT_SECONDS = 300
WAIT_MAX_SECONDS = 900


def _preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def calling_session(ctx: ToolContext) -> Session:
    """The hosted session a tool call comes from (its agent and session key), or a tool error."""
    session = Session.objects.select_related("agent").filter(key=ctx.session_key, agent_id=ctx.agent_id).first() \
        if ctx.session_key and ctx.agent_id is not None else None
    if session is None:
        raise ToolError("this tool works only inside a session goclaw runs (a hosted agent's session)")
    return session


def _visible(ctx: ToolContext):
    """The sessions this call may see: its agent's, of its own user."""
    return Session.objects.filter(agent_id=ctx.agent_id, user_id=ctx.user_id).select_related("agent")


def _named(ctx: ToolContext, ref: Any) -> Session:
    if not isinstance(ref, str) or not ref.strip() or len(ref) > 255:
        raise ToolError("argument session must be a session key or id (sessions_list shows them)")
    qs = _visible(ctx)
    session = qs.filter(key=ref).first() or (qs.filter(pk=ref).first() if spawning._is_uuid(ref) else None)
    if session is None:
        raise ToolError(f"there is no session {ref[:80]!r} of yours")
    return session


def _service(fn, **kwargs):
    try:
        return fn(**kwargs)
    except ApplicationError as exc:
        raise ToolError(exc.message) from None


def _line(s: Session) -> str:
    label = f" [{s.label}]" if s.label else ""
    return (f"{s.pk} {s.status}{label} key={s.key} depth={s.depth} iterations={s.iterations} "
            f"updated={s.updated_at.isoformat(timespec='seconds')}")


class SessionsListTool(Tool):
    """Lists the agent's sessions with this user."""

    name = "sessions_list"
    description = "List your sessions with this user (newest first): id, status, key. Optional status filter."
    parameters = {"type": "object", "properties": {
        "status": {"type": "string", "enum": ["running", "waiting_approval", "completed", "failed", "cancelled", "archived"]},
        "limit": {"type": "integer", "minimum": 1, "maximum": LIST_MAX}}, "additionalProperties": False}
    group = GROUP
    inline = True
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        qs = _visible(ctx)
        if args.get("status"):
            qs = qs.filter(status=args["status"])
        rows = list(qs.order_by("-updated_at")[: args.get("limit", 20)])
        if not rows:
            return ToolResult(for_llm="No sessions.")
        return ToolResult(for_llm="\n".join(_line(s) for s in rows))


class SessionsHistoryTool(Tool):
    """Reads the last messages of one of the agent's sessions with this user."""

    name = "sessions_history"
    description = 'The last messages of one of your sessions: {"session": "<key or id>", "limit"?: 20}.'
    parameters = {"type": "object", "properties": {
        "session": {"type": "string", "minLength": 1, "maxLength": 255},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100}}, "required": ["session"],
        "additionalProperties": False}
    group = GROUP
    inline = True
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        session = _named(ctx, args["session"])
        rows = list(SessionMessage.objects.filter(session=session).order_by("-seq")[: args.get("limit", 20)])[::-1]
        if not rows:
            return ToolResult(for_llm=f"Session {session.pk} has no messages.")
        lines = [f"[session {session.pk}, {session.status}]"]
        for m in rows:
            what = m.role if m.role != MessageRole.TOOL else f"tool {m.tool_name} ({m.verdict})"
            calls = f" calls: {', '.join(c['name'] for c in m.tool_calls)}" if m.tool_calls else ""
            lines.append(f"#{m.seq} {what}:{calls} {_preview(m.content, 1000)}")
        return ToolResult(for_llm="\n".join(lines))


class SessionsSendTool(Tool):
    """Sends a message to another of the agent's sessions with this user (it runs again to answer it)."""

    name = "sessions_send"
    description = 'Send a message into another of your sessions: {"session": "<key or id>", "message": "..."}.'
    parameters = {"type": "object", "properties": {
        "session": {"type": "string", "minLength": 1, "maxLength": 255},
        "message": {"type": "string", "minLength": 1, "maxLength": svc.MESSAGE_MAX_CHARS}},
        "required": ["session", "message"], "additionalProperties": False}
    group = GROUP
    read_only = False
    inline = True
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        session = _named(ctx, args["session"])
        if session.key == ctx.session_key:
            raise ToolError("that is this session; answer here instead")
        message = _service(svc.session_message_post, session=session, content=args["message"])
        return ToolResult(for_llm=f"Sent to session {session.pk} as message #{message.seq}; it runs to answer it.")


class SessionStatusTool(Tool):
    """Reports the current session: status, turns, tokens, subagents."""

    name = "session_status"
    description = "This session's status: model turns, tokens, subagents."
    parameters = {"type": "object", "properties": {}, "additionalProperties": False}
    group = GROUP
    inline = True
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        s = calling_session(ctx)
        children = list(Session.objects.filter(parent=s).order_by("created_at"))
        lines = [f"session {s.pk} ({s.status}), agent {s.agent.key}, model {s.agent.model or '(provider default)'}",
                 f"turns {s.iterations}/{s.max_iterations}, tokens in {s.tokens_in} out {s.tokens_out}, depth {s.depth}"]
        lines += [f"subagent {_line(c)}" for c in children]
        return ToolResult(for_llm="\n".join(lines))


class SpawnTool(Tool):
    """Starts and manages subagents: clones of this agent working on one task each."""

    name = "spawn"
    description = (
        "Run subagents (copies of you, with fewer tools) on separate tasks. Actions: "
        '"spawn" {"task", "label"?}: start one in the background, its result is announced to you when it ends; '
        '"run" {"task", "label"?}: start one and wait for its result; "list": your subagents; '
        '"cancel" {"id": "<id>" | "all" | "last"}; "steer" {"id", "message"}: restart one with a new instruction; '
        '"wait" {"id"?}: wait for one (or all running) to finish.')
    parameters = {"type": "object", "properties": {
        "action": {"type": "string", "enum": ["spawn", "run", "list", "cancel", "steer", "wait"]},
        "task": {"type": "string", "minLength": 1, "maxLength": 20000},
        "label": {"type": "string", "maxLength": 200},
        "id": {"type": "string", "minLength": 1, "maxLength": 64},
        "message": {"type": "string", "minLength": 1, "maxLength": 20000}},
        "required": ["action"], "additionalProperties": False}
    group = GROUP
    read_only = False
    timeout_seconds = WAIT_MAX_SECONDS + 60

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        parent = calling_session(ctx)
        return getattr(self, "_" + args["action"])(ctx, parent, args)

    def _task(self, args: dict[str, Any]) -> str:
        if not args.get("task", "").strip():
            raise ToolError("argument task is required: what the subagent should do")
        return args["task"]

    def _spawn(self, ctx: ToolContext, parent: Session, args: dict[str, Any]) -> ToolResult:
        child = _service(spawning.subagent_spawn, parent=parent, task=self._task(args), label=args.get("label", ""))
        return ToolResult(for_llm=f"Subagent {child.pk} started{_label(child)}; its result is announced to you when "
                                  'it ends (or use {"action": "wait"}).')

    def _run(self, ctx: ToolContext, parent: Session, args: dict[str, Any]) -> ToolResult:
        child = _service(spawning.subagent_spawn, parent=parent, task=self._task(args), label=args.get("label", ""),
                         run_by=svc.PROCESS_OWNER)
        child = spawning.subagent_run(child=child, owner=svc.PROCESS_OWNER, cancel=ctx.cancel)
        return ToolResult(for_llm=_outcome(child), is_error=child.status not in ("completed", *ACTIVE_STATUSES))

    def _list(self, ctx: ToolContext, parent: Session, args: dict[str, Any]) -> ToolResult:
        rows = list(Session.objects.filter(parent=parent).order_by("created_at"))
        if not rows:
            return ToolResult(for_llm="You have no subagents in this session.")
        return ToolResult(for_llm="\n".join(f"{_line(c)} task: {_preview(c.task, 120)}" for c in rows))

    def _cancel(self, ctx: ToolContext, parent: Session, args: dict[str, Any]) -> ToolResult:
        which = args.get("id")
        if not which:
            raise ToolError('argument id is required: a subagent id, "all" or "last"')
        done = spawning.children_cancel(parent=parent, which=which, actor=f"agent:{parent.agent.key}")
        if not done:
            return ToolResult(for_llm="No running subagent matched; nothing was cancelled.")
        return ToolResult(for_llm="Cancelled: " + ", ".join(str(c.pk) for c in done))

    def _steer(self, ctx: ToolContext, parent: Session, args: dict[str, Any]) -> ToolResult:
        if not args.get("id") or not args.get("message"):
            raise ToolError("arguments id and message are required")
        child = _service(spawning.subagent_steer, parent=parent, child_id=args["id"], message=args["message"],
                         actor=f"agent:{parent.agent.key}")
        return ToolResult(for_llm=f"Subagent {args['id']} was cancelled and restarted as {child.pk} with your "
                                  "new instruction.")

    def _wait(self, ctx: ToolContext, parent: Session, args: dict[str, Any]) -> ToolResult:
        ids = [args["id"]] if args.get("id") else None
        if ids and not spawning._is_uuid(ids[0]):
            raise ToolError("argument id must be a subagent id (spawn list shows them)")
        rows = spawning.children_wait(parent=parent, ids=ids, seconds=WAIT_DEFAULT_SECONDS, cancel=ctx.cancel)
        if not rows:
            return ToolResult(for_llm="No subagent to wait for.")
        Session.objects.filter(pk__in=[c.pk for c in rows if not c.is_active]).update(announced=True)
        return ToolResult(for_llm="\n\n".join(_outcome(c) for c in rows))


def _label(child: Session) -> str:
    return f" ({child.label})" if child.label else ""


def _outcome(child: Session) -> str:
    if child.status == "completed":
        return f"Subagent {child.pk}{_label(child)} completed:\n{child.result}"
    if child.is_active:
        waiting = " (waiting for a person's approval)" if child.status == "waiting_approval" else ""
        return f"Subagent {child.pk}{_label(child)} is still {child.status}{waiting}; its result is announced later."
    return f"Subagent {child.pk}{_label(child)} {child.status}: {child.error or child.end_reason}"


TOOLS: tuple[Tool, ...] = (SessionsListTool(), SessionsHistoryTool(), SessionsSendTool(), SessionStatusTool(), SpawnTool())


class SessionToolSource(ToolSource):
    """The sessions group for every agent (the policy engine decides who sees which)."""

    name = "sessions"
    reserved_names = frozenset(tool.name for tool in TOOLS)

    def tools_for(self, agent: Any, user_id: str) -> Iterable[Tool]:
        return TOOLS


def register() -> None:
    tool_source_register(SessionToolSource())
