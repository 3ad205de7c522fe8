"""The MCP methods for what goclaw offers besides tools (docs/mcp-server-content.md): `resources/list`,
`resources/templates/list`, `resources/read` (the calling agent's context files and memory documents for the call's
user) and `prompts/list`, `prompts/get` (the skills it sees), plus the fingerprints `subscriptions/listen` and the
session streams watch. Thin: the caller and context come from the request as for tools/call; what is visible, the
policy, scrubbing and the audit row are `tools_app.mcp_content`'s.

Errors follow the 2026-07-28 specification (SEP-2164): an unknown resource, or one this caller may not read, is
JSON-RPC -32602 "Resource not found" with the requested `uri` in `data`; an unknown or denied prompt, bad arguments,
a bad cursor or an invalid `_meta` context are -32602 too."""
from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from goclaw.errors import ApplicationError
from mcp_app.server import services
from mcp_app.server.context import call_context, raw_context_from_meta
from mcp_app.server.handlers import caller_of, in_thread, session_context
from tools_app import mcp_content
from tools_app.calls import CallContext
from tools_app.security.scrub import default_scrubber

RESOURCES_CHANGED = "notifications/resources/list_changed"
PROMPTS_CHANGED = "notifications/prompts/list_changed"


def request_context(ctx) -> CallContext:
    """The call's context: the session's, this request's headers, then the request's `_meta` (`goclaw/<field>`);
    the JSON-RPC id is the audit row's request id. Invalid context is -32602 naming the fields."""
    meta = (ctx.params or {}).get("_meta")
    try:
        return call_context(session_context(caller_of(ctx)), raw_context_from_meta(meta),
                            request_id=str(ctx.request_id or ""))
    except ApplicationError as exc:
        raise MCPError(types.INVALID_PARAMS, exc.message, {"details": exc.details}) from None


def _echo(value: Any) -> str:
    """A client value as an error's data may carry it back: bounded and scrubbed."""
    text = (value if isinstance(value, str) else repr(value)).encode("utf-8", "replace").decode("utf-8")
    return default_scrubber.scrub(text[:mcp_content.URI_MAX_CHARS])[0]


def _cursor_of(params) -> str | None:
    return getattr(params, "cursor", None) if params is not None else None


async def _served(func, *args, **kwargs):
    """`func` in a worker thread; a refused request (bad arguments, bad cursor) is -32602 with its reason."""
    try:
        return await in_thread(func, *args, **kwargs)
    except mcp_content.ContentRequestInvalid as exc:
        raise MCPError(types.INVALID_PARAMS, exc.message) from None


# --- resources ----------------------------------------------------------------------------------------------------
async def list_resources(ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    """resources/list: the agent's context files (prompt order), then its memory documents (by path), as this user
    sees them and the policy lets this call read them; PAGE_SIZE per page."""
    entries, next_cursor = await _served(mcp_content.resources_list, caller_of(ctx).agent, request_context(ctx),
                                         _cursor_of(params))
    return types.ListResourcesResult(
        resources=[types.Resource(uri=e.uri, name=e.name, description=e.description, mime_type=e.mime_type, size=e.size)
                   for e in entries], next_cursor=next_cursor)


async def list_resource_templates(ctx,
                                  params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
    """resources/templates/list: the two URI shapes (a context file by name, a memory document by path)."""
    if _cursor_of(params) is not None:  # one page: no cursor was ever handed out
        raise MCPError(types.INVALID_PARAMS, "invalid cursor")
    return types.ListResourceTemplatesResult(
        resource_templates=[types.ResourceTemplate(**template) for template in mcp_content.TEMPLATES])


async def read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    """resources/read: the text the agent's tools read there for this user, scrubbed and audited; not found (also
    for what this call may not read) is -32602 with the uri in `data`."""
    try:
        found = await in_thread(mcp_content.resource_read, agent=caller_of(ctx).agent, context=request_context(ctx),
                                uri=params.uri)
    except mcp_content.ResourceNotFound as exc:
        raise MCPError(types.INVALID_PARAMS, exc.message, {"uri": _echo(params.uri)}) from None
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=found.uri, mime_type=found.mime_type,
                                                                         text=found.text)])


# --- prompts ------------------------------------------------------------------------------------------------------
async def list_prompts(ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    """prompts/list: the skills this agent sees (by slug) that the policy lets this call get, with their declared
    arguments; PAGE_SIZE per page."""
    entries, next_cursor = await _served(mcp_content.prompts_list, caller_of(ctx).agent, request_context(ctx),
                                         _cursor_of(params))
    return types.ListPromptsResult(prompts=[
        types.Prompt(name=e.name, title=e.title, description=e.description,
                     arguments=[types.PromptArgument(name=a.name, description=a.description or None,
                                                     required=a.required) for a in e.arguments] or None)
        for e in entries], next_cursor=next_cursor)


async def get_prompt(ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    """prompts/get: the skill's text with the arguments filled in as data, as one user message; scrubbed, audited,
    counted as a use of the skill."""
    try:
        found = await _served(mcp_content.prompt_get, agent=caller_of(ctx).agent, context=request_context(ctx),
                              name=params.name, arguments=params.arguments)
    except mcp_content.PromptNotFound as exc:
        raise MCPError(types.INVALID_PARAMS, exc.message, {"name": _echo(params.name)}) from None
    return types.GetPromptResult(description=found.description, messages=[
        types.PromptMessage(role="user", content=types.TextContent(type="text", text=found.text))])


# --- change detection ---------------------------------------------------------------------------------------------
def _watched_context(caller: services.Caller) -> CallContext:
    return call_context(session_context(caller))


def prompts_fingerprint(caller: services.Caller) -> str:
    """What the caller's prompts/list would answer, as a digest (no query while no skill or policy changed)."""
    return mcp_content.prompts_list_fingerprint(caller.agent, _watched_context(caller))


def resources_fingerprint(caller: services.Caller) -> str:
    """What the caller's resources/list would answer, as a digest (one aggregate query while nothing moved)."""
    return mcp_content.resources_list_fingerprint(caller.agent, _watched_context(caller))


def resource_fingerprint(caller: services.Caller, uri: str) -> str:
    """What the caller's resources/read of `uri` would answer, as a digest."""
    return mcp_content.resource_fingerprint(caller.agent, _watched_context(caller), uri)


def session_fingerprints(agent, context: CallContext) -> dict[str, str]:
    """For a session stream's watcher (the 2025-11-25 era): notification method → the digest that moves with it."""
    return {PROMPTS_CHANGED: mcp_content.prompts_list_fingerprint(agent, context),
            RESOURCES_CHANGED: mcp_content.resources_list_fingerprint(agent, context)}


def session_content_changes(session_ids: list[str], seen: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """For the session era's GET streams (2025-11-25, where list_changed notifications ride the standalone stream):
    per session, the notifications due since the last check. `seen` is the watching process's memory of the digests
    each open stream was last told about (the first check of a stream records where it starts; entries of streams
    no longer watched are dropped here)."""
    from mcp_app.models import MCPServerSession

    for sid in [sid for sid in seen if sid not in session_ids]:
        del seen[sid]
    due: dict[str, list[str]] = {}
    for session in MCPServerSession.objects.select_related("agent").filter(session_id__in=session_ids):
        try:
            now = session_fingerprints(session.agent, call_context(session.context))
        except ApplicationError:
            continue
        before = seen.setdefault(session.session_id, now)
        due[session.session_id] = [method for method, digest in now.items() if before.get(method) != digest]
        seen[session.session_id] = now
    return due


def install_watches() -> None:
    """Let `subscriptions/listen` streams ask for prompts and resources changes (once per process)."""
    from mcp_app.server import listen  # listen builds on handlers, as this module does

    if not any(watch.fingerprint is prompts_fingerprint for watch in listen.WATCHES):
        listen.watch_register(prompts=prompts_fingerprint, resources=resources_fingerprint,
                              resource=resource_fingerprint)
