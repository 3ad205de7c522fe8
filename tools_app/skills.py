"""Skills at run time (docs/skills.md): reading a skill directory from a call's workspace (SKILL.md's front matter in
a small safe subset of YAML, its text files under caps), what an agent can see (global skills plus its own, its own
shadowing a global one of the same slug), the per-process BM25 index, and the three tools with their tool source.

The index of an agent's skills is built once per process and tool-set generation: every skill write calls
`tools_changed()` in its transaction, so no process searches a stale index for more than a second.
"""
from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from django.db.models import Q, QuerySet

from goclaw.errors import ApplicationError
from goclaw.generations import generation_cache
from tools_app.base import Tool, ToolContext, ToolError, ToolResult
from tools_app.builtin.fs import open_entry, walk_tree, WalkState
from tools_app.labels import labels_of
from tools_app.models import Agent
from tools_app.models.skills import Skill
from tools_app.paths import PathError
from tools_app.services import skills as svc
from tools_app.services.skills import SkillInvalid
from tools_app.toolsets import TOOLSETS_CACHE, ToolSource, tool_source_register
from tools_app.workspace import Workspace, workspace_required

SOURCE_NAME = "skills"
GROUP = "skills"
SKILL_FILE = "SKILL.md"
DIR_MAX_DEPTH = 8
SEARCH_DEFAULT_RESULTS, SEARCH_MAX_RESULTS = 5, 20
QUERY_MAX_CHARS = 1000
KNOWN_KEYS = ("name", "description", "tags", "arguments")


# --- SKILL.md front matter: a small, safe subset of YAML -----------------------------------------------------------
# Top-level `key: value` lines between two `---` lines. Values: plain or quoted (single or double) one-line scalars,
# plain scalars continued on indented lines, `|` / `>` block scalars, `[a, b]` flow lists and `- item` block lists.
# No anchors, aliases, tags or directives; nothing is ever evaluated. Keys other than name, description and tags are
# allowed (and ignored, whatever their shape), so SKILL.md files written for other tools still publish.
_KEY_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:(?:[ \t]+(.*))?$")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "t": "\t", "r": "\r", "0": "\x00"}


@dataclass(frozen=True)
class FrontMatter:
    """What SKILL.md says about itself, and its body (the skill's instructions)."""

    name: str
    description: str
    tags: tuple[str, ...]
    body: str
    ignored_keys: tuple[str, ...] = ()
    arguments: tuple[dict[str, Any], ...] = ()  # what the skill takes as an MCP prompt (docs/skills.md)


def _invalid(message: str) -> SkillInvalid:
    return SkillInvalid(f"{SKILL_FILE}: {message}")


def skill_front_matter_parse(text: str) -> FrontMatter:
    """Split SKILL.md into its front matter (name, description, tags) and body; SkillInvalid says what is wrong
    and on which line."""
    lines = text.lstrip("\ufeff").replace("\r\n", "\n").split("\n")
    if not lines or lines[0].rstrip() != "---":
        raise _invalid("must begin with front matter: a first line '---', then lines 'name: …', 'description: …' "
                       "(and optionally 'tags: [a, b]'), then a closing '---'")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), None)
    if end is None:
        raise _invalid("the front matter opened on line 1 is never closed by a '---' line")
    meta: dict[str, Any] = {}
    seen: list[str] = []
    i = 1
    while i < end:
        line, lineno = lines[i], i + 1
        if not line.strip() or line.lstrip().startswith("#"):
            i += 1
            continue
        if line[0] in " \t":
            raise _invalid(f"line {lineno}: unexpected indentation; expected 'key: value'")
        match = _KEY_RE.match(line.rstrip())
        if match is None:
            raise _invalid(f"line {lineno}: expected 'key: value', found {line.strip()[:60]!r}")
        key, raw = match.group(1), (match.group(2) or "").strip()
        if key in seen:
            raise _invalid(f"line {lineno}: {key} is given twice")
        seen.append(key)
        j = i + 1
        while j < end and (not lines[j].strip() or lines[j][0] in " \t"):
            j += 1
        block = lines[i + 1:j]
        while block and not block[-1].strip():
            block.pop()
        if key in KNOWN_KEYS:
            meta[key] = _value(key, raw, block, lineno)
        i = j
    for key in ("name", "description"):
        if not isinstance(meta.get(key), str) or not meta[key].strip():
            raise _invalid(f"the front matter needs a non-empty '{key}: …' line")
    problems = svc.skill_problems({"name": meta["name"], "description": meta["description"]})
    if problems:
        field_name, message = next(iter(problems.items()))
        raise _invalid(f"{field_name} {message}")
    try:
        tags = svc.skill_tags_normalize(meta.get("tags"))
        arguments = svc.skill_arguments_normalize(meta.get("arguments"))
    except SkillInvalid as exc:
        raise _invalid(exc.message) from None
    body = "\n".join(lines[end + 1:]).strip("\n")
    if not body.strip():
        raise _invalid("has no instructions after its front matter")
    return FrontMatter(name=meta["name"].strip(), description=" ".join(meta["description"].split()),
                       tags=tuple(tags), body=body, ignored_keys=tuple(k for k in seen if k not in KNOWN_KEYS),
                       arguments=tuple(arguments))


def _value(key: str, raw: str, block: list[str], lineno: int) -> Any:
    """One known key's value: a string or a list of strings."""
    if raw[:1] in ("&", "*", "!", "%", "@", "`", "{"):
        raise _invalid(f"line {lineno}: {key}: anchors, aliases, tags, directives and mappings are not supported; "
                       "quote the value")
    if raw in ("|", "|-", "|+", ">", ">-", ">+"):
        if not block:
            raise _invalid(f"line {lineno}: {key}: the block scalar '{raw}' has no indented lines after it")
        return _block_scalar(block, folded=raw.startswith(">"))
    if raw.startswith("["):
        if block:
            raise _invalid(f"line {lineno}: {key}: a [list] must fit on one line")
        return _flow_list(key, raw, lineno)
    if not raw:
        items = [b.strip() for b in block if b.strip()]
        if items and all(item == "-" or item.startswith("- ") for item in items):
            return [_scalar(key, item[1:].strip(), lineno) for item in items]
        if items and any(item.startswith("- ") for item in items):
            raise _invalid(f"line {lineno}: {key}: mix of list items and other lines")
        return " ".join(items)
    if raw[0] in "\"'":
        if block:
            raise _invalid(f"line {lineno}: {key}: a quoted value must fit on one line (use '>' for long text)")
        return _scalar(key, raw, lineno)
    value = _scalar(key, raw, lineno)
    continuation = [b.strip() for b in block if b.strip()]
    return " ".join([value, *continuation]) if continuation else value


def _scalar(key: str, raw: str, lineno: int) -> str:
    """A one-line scalar: "double" (with \\ escapes), 'single' ('' is a quote) or plain (a ' #' starts a comment)."""
    if not raw:
        return ""
    if raw[0] == '"':
        out, k = [], 1
        while k < len(raw):
            ch = raw[k]
            if ch == "\\":
                nxt = raw[k + 1:k + 2]
                if nxt not in _ESCAPES or nxt == "0":
                    raise _invalid(f"line {lineno}: {key}: unsupported escape '\\{nxt}' in a double-quoted value")
                out.append(_ESCAPES[nxt])
                k += 2
                continue
            if ch == '"':
                return _after_quote(key, "".join(out), raw[k + 1:], lineno)
            out.append(ch)
            k += 1
        raise _invalid(f"line {lineno}: {key}: the double-quoted value is not closed")
    if raw[0] == "'":
        out, k = [], 1
        while k < len(raw):
            if raw[k] == "'":
                if raw[k + 1:k + 2] == "'":
                    out.append("'")
                    k += 2
                    continue
                return _after_quote(key, "".join(out), raw[k + 1:], lineno)
            out.append(raw[k])
            k += 1
        raise _invalid(f"line {lineno}: {key}: the single-quoted value is not closed")
    comment = re.search(r"\s#", raw)
    return (raw[:comment.start()] if comment else raw).strip()


def _after_quote(key: str, value: str, rest: str, lineno: int) -> str:
    rest = rest.strip()
    if rest and not rest.startswith("#"):
        raise _invalid(f"line {lineno}: {key}: unexpected text after the closing quote")
    return value


def _flow_list(key: str, raw: str, lineno: int) -> list[str]:
    """`[a, "b, c", 'd']` → ["a", "b, c", "d"] (strings only, no nesting)."""
    inner, items, current, quote = raw[1:], [], [], ""
    k = 0
    while k < len(inner):
        ch = inner[k]
        if quote:
            current.append(ch)
            if ch == "\\" and quote == '"':
                current.append(inner[k + 1:k + 2])
                k += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            current.append(ch)
        elif ch in "[{":
            raise _invalid(f"line {lineno}: {key}: nested lists and mappings are not supported")
        elif ch == ",":
            items.append("".join(current).strip())
            current = []
        elif ch == "]":
            rest = inner[k + 1:].strip()
            if rest and not rest.startswith("#"):
                raise _invalid(f"line {lineno}: {key}: unexpected text after ']'")
            last = "".join(current).strip()
            if last or items:
                items.append(last)
            return [_scalar(key, item, lineno) for item in items if item]
        else:
            current.append(ch)
        k += 1
    raise _invalid(f"line {lineno}: {key}: the list is not closed with ']'")


def _block_scalar(block: list[str], *, folded: bool) -> str:
    indent = min(len(b) - len(b.lstrip(" \t")) for b in block if b.strip())
    lines = [b[indent:] if b.strip() else "" for b in block]
    if not folded:
        return "\n".join(lines).strip("\n")
    paragraphs, current = [], []
    for line in lines:
        if line:
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n".join(paragraphs)


# --- reading a skill directory through the call's workspace --------------------------------------------------------
@dataclass(frozen=True)
class SkillDirectory:
    """A skill as read from a workspace directory, ready for `skill_publish`."""

    front: FrontMatter
    files: dict[str, str]
    source_path: str
    skipped: tuple[str, ...] = ()


def skill_directory_read(ws: Workspace, path: str) -> SkillDirectory:
    """Read the skill directory `path` (or the SKILL.md in it) through `ws`: the same confinement, denied prefixes,
    symlink and hard-link refusals as the file tools. Hidden entries, symlinks, special and binary files are skipped
    (and named); a file or a total over the caps is an error."""
    if not isinstance(path, str) or not path:
        raise ToolError("missing required argument: path")
    stripped = path.rstrip("/") or path
    dir_path = (posixpath.dirname(stripped) or ".") if posixpath.basename(stripped) == SKILL_FILE else path
    rel = ws.rel_of(dir_path)
    dfd = ws.open_dir(dir_path)
    skill_md: str | None = None
    files: dict[str, str] = {}
    skipped: list[str] = []
    total = 0
    state = WalkState()
    try:
        for entry in walk_tree(dfd, rel, denied=ws.denied, recursive=True, max_depth=DIR_MAX_DEPTH, state=state):
            inner = entry.rel if rel == "." else entry.rel[len(rel) + 1:]
            if entry.kind == "dir" or any(part.startswith(".") for part in inner.split("/")):
                continue
            if entry.kind != "file":
                skipped.append(f"{inner} ({entry.kind})")
                continue
            if ws.router_for(entry.rel) is not None:
                skipped.append(f"{inner} (stored elsewhere, not on disk)")
                continue
            if inner == SKILL_FILE:
                skill_md = _read_text(entry, svc.CONTENT_MAX_BYTES, inner)
                if skill_md is None:
                    raise ToolError(f"{SKILL_FILE} is not UTF-8 text")
                continue
            if len(inner) > svc.FILE_PATH_MAX_CHARS:
                skipped.append(f"{inner[:80]}… (path too long)")
                continue
            if len(files) >= svc.FILES_MAX:
                raise ToolError(f"the skill directory holds more than {svc.FILES_MAX} files; keep only what the "
                                "skill needs")
            text = _read_text(entry, svc.FILE_MAX_BYTES, inner)
            if text is None:
                skipped.append(f"{inner} (binary)")
                continue
            total += len(text.encode("utf-8"))
            if total > svc.FILES_TOTAL_MAX_BYTES:
                raise ToolError(f"the skill's files exceed {svc.FILES_TOTAL_MAX_BYTES // (1024 * 1024)} MB in all")
            files[inner] = text
    finally:
        os.close(dfd)
    if state.capped:
        raise ToolError("the skill directory is too large to read")
    if state.depth_limited:
        skipped.append(f"(directories deeper than {DIR_MAX_DEPTH} levels)")
    if skill_md is None:
        shown = "the workspace root" if rel == "." else f"{rel}/"
        raise ToolError(f"no {SKILL_FILE} in {shown}: a skill directory holds a {SKILL_FILE} with front matter")
    return SkillDirectory(front=skill_front_matter_parse(skill_md), files=dict(sorted(files.items())),
                          source_path=rel, skipped=tuple(skipped))


def _read_text(entry: Any, limit: int, shown: str) -> str | None:
    """A walked file's text (None if it is not UTF-8 text); ToolError over `limit` bytes."""
    if entry.size > limit:
        raise ToolError(f"{shown} is larger than {limit // 1024} KB")
    try:
        fd = open_entry(entry)
    except PathError as exc:
        raise ToolError(f"{shown}: {exc}") from None
    except OSError:
        raise ToolError(f"could not read {shown}") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ToolError(f"{shown} is larger than {limit // 1024} KB")
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


# --- what an agent sees ----------------------------------------------------------------------------------------------
def skill_list_visible(agent_id: Any) -> QuerySet:
    """The enabled skills an agent sees: the global ones and its own, its own shadowing a global one of the same
    slug. One query, whatever is chained on."""
    own_slugs = Skill.objects.filter(agent_id=agent_id).values("slug")
    return (Skill.objects.filter(Q(agent__isnull=True) | Q(agent_id=agent_id), enabled=True)
            .exclude(Q(agent__isnull=True) & Q(slug__in=own_slugs)))


def skill_get_visible(agent_id: Any, name: str) -> Skill | None:
    """The visible skill `name` names: its slug, else its name (any case)."""
    if not isinstance(name, str) or not name.strip() or "\x00" in name:
        return None
    name = name.strip()
    slug = svc.skill_slug_for(name)
    rows = list(skill_list_visible(agent_id).filter(Q(slug=name) | Q(slug=slug) | Q(name__iexact=name))[:10])
    for match in (lambda s: s.slug == name, lambda s: s.slug == slug, lambda s: s.name.lower() == name.lower()):
        found = sorted((s for s in rows if match(s)), key=lambda s: (s.agent_id is None, s.slug))
        if found:
            return found[0]
    return None


# --- BM25 search ---------------------------------------------------------------------------------------------------
_WORD_RE = re.compile(r"[^\W_]+")
_STOPWORDS = frozenset(
    "a about all an and any are as at be but by can could do does for from get how i if in into is it its me my no "
    "not of on or our over should so some such than that the their then there these they this to too up us use "
    "using via want was we what when which will with would you your".split())


def _stem(word: str) -> str:
    """A light suffix-stripping stemmer (plurals, -ing, -ed, final e): "parsing", "parses" and "parse" meet."""
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("es") and word[-3] in "sxz":
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
        word = word[:-1]
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def _words(text: str) -> list[tuple[str, str]]:
    """(stem, word) for each searchable word of `text`."""
    return [(_stem(w), w) for w in _WORD_RE.findall(text.lower()) if len(w) > 1 and w not in _STOPWORDS]


@dataclass(frozen=True)
class SkillEntry:
    """What the index keeps of a skill: enough to answer a search without another query."""

    slug: str
    name: str
    description: str
    tags: tuple[str, ...]
    version: int
    own: bool
    fields: dict[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class SkillMatch:
    entry: SkillEntry
    score: float
    reason: str


class SkillIndex:
    """BM25 (bm25s) over each visible skill's name (twice), tags (twice) and description."""

    def __init__(self, entries: list[SkillEntry]) -> None:
        self.entries = entries
        self.retriever = None
        if entries:
            import bm25s

            corpus = []
            for e in entries:
                name = [s for s, _ in _words(f"{e.name} {e.slug.replace('-', ' ')}")]
                tags = [s for s, _ in _words(" ".join(e.tags))]
                corpus.append(name * 2 + tags * 2 + [s for s, _ in _words(e.description)])
            self.retriever = bm25s.BM25()
            self.retriever.index(corpus, show_progress=False)

    def search(self, query: str, max_results: int) -> list[SkillMatch]:
        words: dict[str, str] = {}  # stem → the first query word with it
        for stem, word in _words(query):
            words.setdefault(stem, word)
        if not words or self.retriever is None:
            return []
        scores = self.retriever.get_scores(list(words))
        ranked = sorted((i for i in range(len(self.entries)) if scores[i] > 0),
                        key=lambda i: (-float(scores[i]), self.entries[i].slug))
        return [SkillMatch(self.entries[i], float(scores[i]), _reason(self.entries[i], words))
                for i in ranked[:max_results]]


def _reason(entry: SkillEntry, words: dict[str, str]) -> str:
    """Which query words matched which fields, e.g. `"pdf" in name, tags; "extract" in description`."""
    parts = []
    for stem, word in words.items():
        where = [f for f in ("name", "tags", "description") if stem in entry.fields.get(f, ())]
        if where:
            parts.append(f'"{word}" in {", ".join(where)}')
    return "matched " + "; ".join(parts) if parts else "weak match"


_cache = generation_cache(TOOLSETS_CACHE)


def skill_index_for(agent_id: Any) -> SkillIndex:
    """The agent's index, built once per process and tool-set generation (a skill write bumps it)."""
    return _cache.get(("skill-index", agent_id), lambda: _build_index(agent_id))


def _build_index(agent_id: Any) -> SkillIndex:
    rows = skill_list_visible(agent_id).only("slug", "name", "description", "tags", "version", "agent_id")
    entries = []
    for row in rows.order_by("slug"):
        tags = tuple(t for t in (row.tags or []) if isinstance(t, str))
        fields = {"name": frozenset(s for s, _ in _words(f"{row.name} {row.slug.replace('-', ' ')}")),
                  "tags": frozenset(s for s, _ in _words(" ".join(tags))),
                  "description": frozenset(s for s, _ in _words(row.description))}
        entries.append(SkillEntry(slug=row.slug, name=row.name, description=row.description, tags=tags,
                                  version=row.version, own=row.agent_id is not None, fields=fields))
    return SkillIndex(entries)


def skill_search(agent_id: Any, query: str, max_results: int = SEARCH_DEFAULT_RESULTS) -> list[SkillMatch]:
    """The agent's visible skills best matching `query`, best first (BM25 over name, tags and description)."""
    return skill_index_for(agent_id).search(query, max_results)


# --- the tools -----------------------------------------------------------------------------------------------------
def _agent_of(ctx: ToolContext) -> Any:
    if ctx.agent_id is None:
        raise ToolError("skills need a registered agent")
    return ctx.agent_id


class PublishSkillTool(Tool):
    """Registers a workspace directory holding a SKILL.md as a skill this agent can find and load again later."""

    name = "publish_skill"
    description = (
        "Publish a skill from a directory of your workspace. The directory holds a SKILL.md that begins with front "
        "matter between two '---' lines: 'name: …', 'description: …' (what the skill does and when to use it) and "
        "optionally 'tags: [a, b]'; the rest of SKILL.md is the skill's instructions. The directory's other text "
        "files (scripts, templates, references; at most 64 files, 256 KB each, 2 MB in all; hidden, binary and "
        "symlinked files are skipped) are stored with it. Publishing the same name again replaces it as a new "
        "version. The skill is yours: skill_search finds it and use_skill loads it."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 4096,
                     "description": "The skill directory (or its SKILL.md), relative to the workspace."},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    group = GROUP
    read_only = False
    inline = True  # bounded local reads, then one short transaction: the call's own thread and connection
    timeout_seconds = 60.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        agent_id = _agent_of(ctx)
        ws = workspace_required(ctx)
        path = args.get("path")
        if not isinstance(path, str) or not path:
            raise ToolError("argument path must be a non-empty string")
        try:
            found = skill_directory_read(ws, path)
            agent = Agent.objects.get(pk=agent_id)
            skill, created = svc.skill_publish(
                agent=agent, name=found.front.name, description=found.front.description, content=found.front.body,
                tags=found.front.tags, files=found.files, source_path=found.source_path,
                published_by=f"agent:{ctx.agent_key}", arguments=found.front.arguments)
        except ApplicationError as exc:
            raise ToolError(exc.message) from None
        lines = [f"{'published' if created else 'republished'} skill {skill.slug} version {skill.version}: "
                 f"{skill.name} ({len(found.files)} file{'s' if len(found.files) != 1 else ''} besides {SKILL_FILE})",
                 f'load it with use_skill {{"name": "{skill.slug}"}}; it is visible to this agent']
        if found.front.tags:
            lines.append("tags: " + ", ".join(found.front.tags))
        if found.skipped:
            lines.append("not stored: " + "; ".join(found.skipped[:20]) + (" …" if len(found.skipped) > 20 else ""))
        if found.front.ignored_keys:
            lines.append("front matter keys ignored: " + ", ".join(found.front.ignored_keys))
        return ToolResult(for_llm="\n".join(lines))


class SkillSearchTool(Tool):
    """Finds the skills worth loading for a task, without loading them all into the prompt."""

    name = "skill_search"
    description = (
        "Search the skills available to you (BM25 over their names, tags and descriptions). Returns the best "
        "matches, best first, each with its name to pass to use_skill, its description and which of your words "
        "matched. Describe the task in a few words, e.g. 'extract tables from pdf'."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": QUERY_MAX_CHARS,
                      "description": "What you want to do, in a few words."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": SEARCH_MAX_RESULTS,
                            "default": SEARCH_DEFAULT_RESULTS, "description": "How many skills to return."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    group = GROUP
    read_only = True
    inline = True  # an in-memory index (one query when the generation moved)
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        agent_id = _agent_of(ctx)
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("argument query must be a non-empty string")
        limit = args.get("max_results", SEARCH_DEFAULT_RESULTS)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= SEARCH_MAX_RESULTS:
            raise ToolError(f"argument max_results must be an integer from 1 to {SEARCH_MAX_RESULTS}")
        if not _words(query[:QUERY_MAX_CHARS]):
            raise ToolError("the query has no searchable words")
        index = skill_index_for(agent_id)
        if not index.entries:
            return ToolResult(for_llm="no skills are available to you yet")
        matches = index.search(query[:QUERY_MAX_CHARS], limit)
        if not matches:
            return ToolResult(for_llm=f"no skill matches {query[:200]!r} ({len(index.entries)} skills searched)")
        lines = [f"[{len(matches)} skill{'s' if len(matches) != 1 else ''} for {query[:200]!r}, best first]"]
        for rank, m in enumerate(matches, 1):
            e = m.entry
            tags = f" [{', '.join(e.tags)}]" if e.tags else ""
            lines.append(f"{rank}. {e.slug} — {e.name} (v{e.version}){tags} score {m.score:.2f}\n"
                         f"   {e.description[:300]}\n   why: {m.reason}")
        lines.append('load one with use_skill {"name": "<slug>"}')
        return ToolResult(for_llm="\n".join(lines))


class UseSkillTool(Tool):
    """Loads a skill's instructions (and lists its files) and counts the use."""

    name = "use_skill"
    description = (
        "Load a skill: returns its instructions (the SKILL.md body) and the list of its files. Pass the slug or "
        "name skill_search gave you. To read one of the skill's files, pass its path as `file` as well."
    )
    parameters = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 200, "description": "The skill's slug or name."},
            "file": {"type": "string", "minLength": 1, "maxLength": 500,
                     "description": "Optional: one of the skill's files to return instead of its instructions."},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    group = GROUP
    read_only = True  # the use record is bookkeeping, like the audit row
    inline = True  # one indexed query and one insert
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        agent_id = _agent_of(ctx)
        name, wanted = args.get("name"), args.get("file")
        if not isinstance(name, str) or not name.strip():
            raise ToolError("argument name must be a non-empty string")
        if wanted is not None and not isinstance(wanted, str):
            raise ToolError("argument file must be a string")
        skill = skill_get_visible(agent_id, name)
        if skill is None:
            raise ToolError(f"no skill named {name[:100]!r} is available to you; skill_search lists the ones that are")
        files = skill.files or {}
        if wanted:
            text = files.get(wanted)
            if text is None:
                listed = ", ".join(list(files)[:20]) or "none"
                raise ToolError(f"skill {skill.slug} has no file {wanted[:200]!r} (its files: {listed})")
            return ToolResult(for_llm=f"[skill {skill.slug} v{skill.version}: {wanted}]\n{text}")
        labels = labels_of(ctx)
        svc.skill_use_record(skill=skill, agent_key=ctx.agent_key, user_id=labels.user_id,
                             session_key=labels.session_key)
        out = [f"[skill {skill.slug} v{skill.version}: {skill.name}]", skill.content]
        if files:
            out.append(f"\n[{len(files)} file{'s' if len(files) != 1 else ''}; read one with use_skill "
                       f'{{"name": "{skill.slug}", "file": "<path>"}}]')
            out.extend(f"{path} ({_size(len(text.encode('utf-8')))})" for path, text in files.items())
        return ToolResult(for_llm="\n".join(out))


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB"


TOOLS: tuple[Tool, ...] = (PublishSkillTool(), SkillSearchTool(), UseSkillTool())


class SkillToolSource(ToolSource):
    """Gives every agent the three skill tools (group `skills`); the policy engine decides who may call them."""

    name = SOURCE_NAME
    reserved_names = frozenset(tool.name for tool in TOOLS)

    def tools_for(self, agent: Any, user_id: str) -> Iterable[Tool]:
        return TOOLS


def register() -> None:
    """Called from ToolsAppConfig.ready(): the skill tools' source."""
    tool_source_register(SkillToolSource())
