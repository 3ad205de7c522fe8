"""What goclaw offers an MCP client besides tools (docs/mcp-server-content.md): the calling agent's context files and
memory documents as read-only **resources**, and the skills it sees as **prompts**. Each is exactly what the agent's
file, memory and skill tools see for the call's user, filtered by the `resources` / `prompts` sections of its policy
(`tools_app.policy.content_rules`: the agent's own data by default, an explicit deny wins), scrubbed like tool
output, and audited like a tool call (a ToolInvocation row `mcp:resources/read` / `mcp:prompts/get`, written by the
pipeline's own `record`). What a caller may not read is answered exactly like what does not exist.

A sibling of the modules it composes (the context-file selectors, memory, skills, the pipeline's audit writer) and
not a service: they import `tools_app.services`, and the app's acyclic-siblings contract forbids the reverse.

Change detection serves `subscriptions/listen` and session streams in every process: a resource listing is kept per
(agent, user, rules) and recomputed only when one cheap aggregate over the agent's context-file and memory rows
moves; a prompt listing is kept per tool-set generation (every skill write bumps it), so checking costs no query
while nothing moved.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from django.core.validators import slug_re
from django.db import connection

from goclaw.db import pg_storable
from goclaw.errors import NotFound, ValidationError
from goclaw.generations import GenerationCache, generation_cache
from tools_app.base import ToolContext, ToolResult
from tools_app.calls import CallContext, Outcome
from tools_app.choices import InvocationStatus
from tools_app.labels import call_labels
from tools_app.models import Agent
from tools_app.models.context_files import CONTEXT_FILE_NAMES, AgentContextFile, UserContextFile
from tools_app.models.memory import MemoryDocument
from tools_app.models.skills import SKILL_SLUG_MAX
from tools_app.pipeline import record, scrub_result
from tools_app.policy import content_rules
from tools_app.security.scrub import default_scrubber
from tools_app.selectors_context import SOURCE_USER, context_file_resolve, context_files_visible
from tools_app.services.memory import (MemoryPathInvalid, memory_document_get, memory_documents_visible,
                                       memory_path_clean)
from tools_app.services.skills import skill_use_record
from tools_app.skills import skill_list_visible
from tools_app.toolsets import TOOLSETS_CACHE

# --- URIs -------------------------------------------------------------------------------------------------------
SCHEME = "goclaw://"
CONTEXT_PREFIX, MEMORY_PREFIX = f"{SCHEME}context/", f"{SCHEME}memory/"
URI_MAX_CHARS = 2048
_PATH_SAFE = "/-._~!$&'()*+,;=:@"  # RFC 3986 path characters kept as they are; everything else percent-encoded
READ_TOOL, GET_TOOL = "mcp:resources/read", "mcp:prompts/get"  # the audit rows' tool names
PAGE_SIZE = 100
# Bounds of what prompts/get accepts (each value, and all of them together).
ARGUMENT_VALUE_MAX_CHARS = 10_000
ARGUMENTS_TOTAL_MAX_CHARS = 50_000
WATCH_STAMP_SECONDS = 0.5  # a watcher reuses the aggregate this long (goclaw.generations.CHECK_SECONDS)

TEMPLATES = (
    {"uri_template": f"{CONTEXT_PREFIX}{{name}}", "name": "context-file", "title": "Context file",
     "mime_type": "text/markdown",
     "description": "One of the agent's context files as it reads it for this user: " + ", ".join(CONTEXT_FILE_NAMES)},
    {"uri_template": f"{MEMORY_PREFIX}{{+path}}", "name": "memory-document", "title": "Memory document",
     "description": "A memory document by its workspace path (MEMORY.md, memory.md, memory/<name>): the user's own, "
                    "else the shared one"},
)
_MIME_TYPES = {".md": "text/markdown", ".json": "application/json", ".yaml": "application/yaml",
               ".yml": "application/yaml", ".csv": "text/csv", ".html": "text/plain", ".txt": "text/plain"}


class ResourceNotFound(NotFound):
    """No resource this caller may read has that URI (unknown and denied look alike: existence does not leak)."""

    code = "resource_not_found"


class PromptNotFound(NotFound):
    """No prompt this caller may get has that name (unknown and denied look alike)."""

    code = "prompt_not_found"


class ContentRequestInvalid(ValidationError):
    """A prompt's arguments or a list cursor are not acceptable; the message says why."""

    code = "invalid_params"


@dataclass(frozen=True)
class ResourceRef:
    """A resource named by a URI: a context file by name, or a memory document by its workspace path."""

    kind: str  # "context" | "memory"
    key: str

    @property
    def uri(self) -> str:
        return context_uri(self.key) if self.kind == "context" else memory_uri(self.key)



def context_uri(name: str) -> str:
    return CONTEXT_PREFIX + name


def memory_uri(path: str) -> str:
    return MEMORY_PREFIX + quote(path, safe=_PATH_SAFE)


def resource_ref(uri: Any) -> ResourceRef | None:
    """The resource `uri` names, or None when it names none. Percent-encoding is decoded, so every spelling of a
    URI means one resource, and the policy is checked against its one canonical URI (`ResourceRef.uri`)."""
    if not isinstance(uri, str) or len(uri) > URI_MAX_CHARS:
        return None
    for prefix, kind in ((CONTEXT_PREFIX, "context"), (MEMORY_PREFIX, "memory")):
        if uri.startswith(prefix):
            try:
                key = unquote(uri[len(prefix):], errors="strict")
            except UnicodeDecodeError:
                return None
            if kind == "context":
                return ResourceRef(kind, key) if key in CONTEXT_FILE_NAMES else None
            try:
                return ResourceRef(kind, memory_path_clean(key)) if not key.startswith("./") else None
            except MemoryPathInvalid:
                return None
    return None


def _mime_type(path: str) -> str:
    dot = path.rfind(".")
    return _MIME_TYPES.get(path[dot:].lower(), "text/plain") if dot > path.rfind("/") else "text/plain"


def _offered(uri: str) -> bool:
    """A URI that holds what looks like a credential (a memory path an agent named after a token) is never offered:
    listing it would show the credential, and scrubbing it would make it unreadable."""
    return default_scrubber.scrub(uri)[1] == 0


# --- resources ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResourceEntry:
    """One resource as resources/list shows it; `stamp` moves when its text does (resources/updated)."""

    uri: str
    name: str
    description: str
    mime_type: str
    size: int | None
    stamp: str
    sort_key: str  # context files first (prompt order), then memory by path


@dataclass(frozen=True)
class ResourceSnapshot:
    """The resources one caller may read, in list order, by URI, and the list's fingerprint (list_changed)."""

    entries: tuple[ResourceEntry, ...]
    by_uri: dict[str, ResourceEntry]
    fingerprint: str


_memo = GenerationCache("mcp_content", max_entries=2000)  # its counter never moves: keys carry what they depend on
_stamps: dict[tuple, tuple[float, str]] = {}
_stamps_lock = threading.Lock()


def _rows_stamp(agent: Agent, user_id: str) -> str:
    """One query: counts and latest changes of the rows behind what this user sees (agent-level and the user's own
    context files, shared and the user's memory documents). Any write, deletion included, moves it."""
    agent_files, user_files, documents = (AgentContextFile._meta.db_table, UserContextFile._meta.db_table,
                                          MemoryDocument._meta.db_table)
    part = "(SELECT count(*) || '/' || coalesce(max(updated_at)::text, '') FROM {} WHERE agent_id = %s{})"
    sql = "SELECT " + ", ".join((part.format(agent_files, ""), part.format(user_files, " AND user_id = %s"),
                                 part.format(documents, " AND (user_id IS NULL OR user_id = %s)")))
    with connection.cursor() as cursor:
        cursor.execute(sql, [agent.pk, agent.pk, user_id, agent.pk, user_id])
        return "|".join(cursor.fetchone())


def _stamp(agent: Agent, user_id: str, max_age: float) -> str:
    """`_rows_stamp`, reused for `max_age` seconds (watchers checking several URIs of one caller in one pass)."""
    key = (agent.pk, user_id)
    now = time.monotonic()
    if max_age > 0:
        cached = _stamps.get(key)
        if cached is not None and now - cached[0] < max_age:
            return cached[1]
    value = _rows_stamp(agent, user_id)
    with _stamps_lock:
        if len(_stamps) >= 10_000:
            _stamps.clear()
        _stamps[key] = (now, value)
    return value


def _listing(agent: Agent, user_id: str) -> list[ResourceEntry]:
    """Every resource the agent's file and memory tools show this user, before the policy."""
    entries = []
    for f in context_files_visible(agent, user_id):
        whose = "this user's own" if f.source == SOURCE_USER else "the agent's (shared by its users)"
        entries.append(ResourceEntry(
            uri=context_uri(f.name), name=f.name, description=f"Context file {f.name}: {whose}",
            mime_type="text/markdown", size=len(f.content.encode("utf-8", "surrogatepass")),
            stamp=hashlib.sha256(f"{f.source}\0{f.content}".encode("utf-8", "surrogatepass")).hexdigest()[:32],
            sort_key=f"0{CONTEXT_FILE_NAMES.index(f.name)}"))
    for doc in memory_documents_visible(agent=agent, user_id=user_id):
        whose = "this user's own" if doc.user_id else "shared by the agent's users"
        entries.append(ResourceEntry(
            uri=memory_uri(doc.path), name=doc.path, description=f"Memory document {doc.path}: {whose}",
            mime_type=_mime_type(doc.path), size=None, stamp=f"{'u' if doc.user_id else 's'}:{doc.content_hash}",
            sort_key="1" + doc.path))
    return entries


def _snapshot(agent: Agent, user_id: str, rules) -> ResourceSnapshot:
    entries = tuple(e for e in _listing(agent, user_id) if rules.permits(e.uri) and _offered(e.uri))
    digest = hashlib.sha256(json.dumps([[e.uri, e.description, e.mime_type] for e in entries]).encode()).hexdigest()
    return ResourceSnapshot(entries=entries, by_uri={e.uri: e for e in entries}, fingerprint=digest)


def resources_snapshot(agent: Agent, context: CallContext, *, max_age: float = 0.0) -> ResourceSnapshot:
    """The resources this call may read (policy applied), recomputed only when the rows behind them moved."""
    rules = content_rules(agent, context, "resources")
    key = ("resources", agent.pk, agent.updated_at, context.user_id, rules, _stamp(agent, context.user_id, max_age))
    return _memo.get(key, lambda: _snapshot(agent, context.user_id, rules))


def resources_list(agent: Agent, context: CallContext,
                   cursor: str | None = None) -> tuple[list[ResourceEntry], str | None]:
    """resources/list: one page (PAGE_SIZE) after `cursor`, and the cursor of the next page (None: the last)."""
    return _page(resources_snapshot(agent, context).entries, cursor, lambda e: e.sort_key)


def resources_list_fingerprint(agent: Agent, context: CallContext) -> str:
    """What resources/list would answer, as a digest (moves when a resource appears, goes or is renamed)."""
    return resources_snapshot(agent, context, max_age=WATCH_STAMP_SECONDS).fingerprint


def resource_fingerprint(agent: Agent, context: CallContext, uri: str) -> str:
    """What resources/read of `uri` would answer, as a digest ("absent": not found, or not readable by this call)."""
    ref = resource_ref(uri)
    entry = resources_snapshot(agent, context, max_age=WATCH_STAMP_SECONDS).by_uri.get(ref.uri) if ref else None
    return entry.stamp if entry is not None else "absent"


@dataclass(frozen=True)
class ResourceText:
    """What resources/read answers: the canonical URI, its MIME type and the scrubbed text."""

    uri: str
    mime_type: str
    text: str
    invocation_id: str


def _resource_text(agent: Agent, user_id: str, ref: ResourceRef) -> str | None:
    """The text the agent's file / memory tools read at this resource for this user (None: nothing there)."""
    if ref.kind == "context":
        found = context_file_resolve(agent, ref.key, user_id)
        return found.content if found is not None else None
    document = memory_document_get(agent=agent, user_id=user_id, path=ref.key)
    return document.content if document is not None else None


def resource_read(*, agent: Agent, context: CallContext, uri: Any) -> ResourceText:
    """resources/read: the resource's text, scrubbed, with an audit row either way. ResourceNotFound for an unknown
    URI, a resource the call may not read (the audit row says `denied`) or one that is not there."""
    started = time.monotonic()
    ref = resource_ref(uri)
    arguments = {"uri": (uri if isinstance(uri, str) else repr(uri))[:URI_MAX_CHARS]}
    if ref is None or not _offered(ref.uri):
        _audit(agent, context, READ_TOOL, arguments, InvocationStatus.ERROR, "no such resource", started)
        raise ResourceNotFound("Resource not found")
    arguments["uri"] = ref.uri
    if not content_rules(agent, context, "resources").permits(ref.uri):
        _audit(agent, context, READ_TOOL, arguments, InvocationStatus.DENIED,
               f"reading {ref.uri} is denied by policy (resources)", started)
        raise ResourceNotFound("Resource not found")
    text = _resource_text(agent, context.user_id, ref)
    if text is None:
        _audit(agent, context, READ_TOOL, arguments, InvocationStatus.ERROR, "no such resource", started)
        raise ResourceNotFound("Resource not found")
    result = ToolResult(for_llm=text)
    scrub_result(result)
    invocation_id = _audit(agent, context, READ_TOOL, arguments, InvocationStatus.OK, result.for_llm, started)
    return ResourceText(uri=ref.uri, mime_type="text/markdown" if ref.kind == "context" else _mime_type(ref.key),
                        text=result.for_llm, invocation_id=invocation_id)


# --- prompts ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PromptArgument:
    name: str
    description: str
    required: bool


@dataclass(frozen=True)
class PromptEntry:
    """One prompt as prompts/list shows it: a visible skill by its slug."""

    name: str
    title: str
    description: str
    arguments: tuple[PromptArgument, ...]


def _arguments_of(declared: Any) -> tuple[PromptArgument, ...]:
    return tuple(PromptArgument(a["name"], a.get("description", ""), bool(a.get("required", True)))
                 for a in (declared or []) if isinstance(a, dict) and isinstance(a.get("name"), str))


def _prompt_listing(agent: Agent, rules) -> tuple[tuple[PromptEntry, ...], str]:
    rows = skill_list_visible(agent.pk).order_by("slug").values_list("slug", "name", "description", "arguments")
    entries = tuple(PromptEntry(name=slug, title=default_scrubber.scrub(name)[0],
                                description=default_scrubber.scrub(description)[0], arguments=_arguments_of(arguments))
                    for slug, name, description, arguments in rows if rules.permits(slug))
    digest = hashlib.sha256(json.dumps([[e.name, e.title, e.description, [[a.name, a.description, a.required]
                                                                          for a in e.arguments]] for e in entries])
                            .encode()).hexdigest()
    return entries, digest


def _prompts(agent: Agent, context: CallContext) -> tuple[tuple[PromptEntry, ...], str]:
    """The prompts this call may get and their fingerprint, kept while no skill was written (the tool-set
    generation) and the rules are the same."""
    rules = content_rules(agent, context, "prompts")
    key = ("prompts", agent.pk, rules, generation_cache(TOOLSETS_CACHE).sync())
    return _memo.get(key, lambda: _prompt_listing(agent, rules))


def prompts_list(agent: Agent, context: CallContext, cursor: str | None = None) -> tuple[list[PromptEntry], str | None]:
    """prompts/list: one page (PAGE_SIZE) after `cursor`, by name, and the next page's cursor (None: the last)."""
    return _page(_prompts(agent, context)[0], cursor, lambda e: e.name)


def prompts_list_fingerprint(agent: Agent, context: CallContext) -> str:
    """What prompts/list would answer, as a digest."""
    return _prompts(agent, context)[1]


@dataclass(frozen=True)
class PromptText:
    """What prompts/get answers: the skill's description and its text with the arguments in, scrubbed."""

    name: str
    description: str
    text: str
    invocation_id: str


_PLACEHOLDER_RE = re.compile(r"\{\{[ \t]*([A-Za-z][A-Za-z0-9_-]{0,39})[ \t]*\}\}")


def prompt_fill(text: str, declared: tuple[PromptArgument, ...], values: dict[str, str]) -> str:
    """`text` with each `{{name}}` of a declared argument replaced by its value (an optional one left out: nothing),
    in one pass: a value is data, never read again for placeholders, and nothing else in the text is interpreted.
    Values given for arguments the text never places are appended in declaration order, so none is lost."""
    names = {a.name for a in declared}
    placed: set[str] = set()

    def fill(match: re.Match) -> str:
        name = match.group(1)
        if name not in names:
            return match.group(0)
        placed.add(name)
        return values.get(name, "")

    filled = _PLACEHOLDER_RE.sub(fill, text)
    rest = [f"{a.name}: {values[a.name]}" for a in declared if a.name in values and a.name not in placed]
    return filled + ("\n\nArguments:\n" + "\n".join(rest) if rest else "")


def _checked_arguments(declared: tuple[PromptArgument, ...], arguments: Any) -> dict[str, str]:
    """The arguments as given, or ContentRequestInvalid: only declared names, every required one, text values
    within the bounds."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict) or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in arguments.items()):
        raise ContentRequestInvalid("arguments must map argument names to text")
    names = [a.name for a in declared]
    unknown = [name for name in arguments if name not in names]
    if unknown:
        listed = ", ".join(names) or "none"
        raise ContentRequestInvalid(f"unknown argument {unknown[0][:60]!r} (this prompt takes: {listed})")
    missing = [a.name for a in declared if a.required and not arguments.get(a.name, "").strip()]
    if missing:
        raise ContentRequestInvalid(f"missing required argument: {', '.join(missing)}")
    if any(len(v) > ARGUMENT_VALUE_MAX_CHARS for v in arguments.values()) or \
            sum(len(v) for v in arguments.values()) > ARGUMENTS_TOTAL_MAX_CHARS:
        raise ContentRequestInvalid(f"argument values are at most {ARGUMENT_VALUE_MAX_CHARS} characters each, "
                                    f"{ARGUMENTS_TOTAL_MAX_CHARS} in all")
    if not all(pg_storable(k) and pg_storable(v) for k, v in arguments.items()):
        raise ContentRequestInvalid("argument names and values must be text without NUL or unpaired surrogates")
    return dict(arguments)


def prompt_get(*, agent: Agent, context: CallContext, name: Any, arguments: Any = None) -> PromptText:
    """prompts/get: the skill's text with its arguments filled in (see `prompt_fill`), scrubbed, counted as a use of
    the skill, with an audit row either way. PromptNotFound for an unknown name or one the call may not get (the
    audit row says `denied`); ContentRequestInvalid for arguments that do not fit the declaration."""
    started = time.monotonic()
    audited = {"name": name if isinstance(name, str) else repr(name), "arguments": arguments}
    skill = None
    if isinstance(name, str) and len(name) <= SKILL_SLUG_MAX and slug_re.match(name):  # a slug, else no query
        skill = skill_list_visible(agent.pk).filter(slug=name).first()
    if skill is None:
        _audit(agent, context, GET_TOOL, audited, InvocationStatus.ERROR, "no such prompt", started)
        raise PromptNotFound("Prompt not found")
    if not content_rules(agent, context, "prompts").permits(skill.slug):
        _audit(agent, context, GET_TOOL, audited, InvocationStatus.DENIED,
               f"getting prompt {skill.slug} is denied by policy (prompts)", started)
        raise PromptNotFound("Prompt not found")
    declared = _arguments_of(skill.arguments)
    try:
        values = _checked_arguments(declared, arguments)
    except ContentRequestInvalid as exc:
        _audit(agent, context, GET_TOOL, audited, InvocationStatus.INVALID, exc.message, started)
        raise
    result = ToolResult(for_llm=prompt_fill(skill.content, declared, values))
    scrub_result(result)
    labels = call_labels(context)
    skill_use_record(skill=skill, agent_key=agent.key, user_id=labels.user_id, session_key=labels.session_key)
    invocation_id = _audit(agent, context, GET_TOOL, audited, InvocationStatus.OK, result.for_llm, started)
    return PromptText(name=skill.slug, description=default_scrubber.scrub(skill.description)[0], text=result.for_llm,
                      invocation_id=invocation_id)


# --- shared -------------------------------------------------------------------------------------------------------
def _audit(agent: Agent, context: CallContext, tool: str, arguments: dict, status: str, text: str,
           started: float) -> str:
    """One audit row through the pipeline's writer (labels, scrubbed arguments and error, `tool.executed`)."""
    call = context if context.request_id else context.replace(request_id=uuid.uuid4().hex)
    ctx = ToolContext(agent_key=agent.key, agent_id=agent.pk, call=call, labels=call_labels(call))
    outcome = Outcome(status=status, for_llm=text, is_error=status != InvocationStatus.OK,
                      duration_ms=(time.monotonic() - started) * 1000)
    record(ctx, tool, arguments, outcome)
    return outcome.invocation_id


def _page(entries, cursor: str | None, key) -> tuple[list, str | None]:
    """Keyset pagination: the entries after the cursor's key (stable while entries come and go)."""
    after = None
    if cursor is not None:
        try:
            after = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("utf-8")
        except (ValueError, UnicodeError, binascii.Error):
            raise ContentRequestInvalid("invalid cursor") from None
    rest = [e for e in entries if after is None or key(e) > after]
    page = rest[:PAGE_SIZE]
    more = len(rest) > PAGE_SIZE
    return page, (base64.urlsafe_b64encode(key(page[-1]).encode("utf-8")).decode("ascii") if more else None)
