"""The policy engine: which tools one call may see and run. `resolve()` feeds both the catalog endpoint and
the execution check; `explain()` shows, per tool, which step added or removed it.

Order (seed 003 §5, with GoClaw's bugs fixed): global profile → provider profile override → ∩ global allow
→ ∩ provider allow → ∩ agent allow (and agent profile) → ∩ agent+provider allow → ∩ group allow → − every
deny list (global, provider, agent, agent+provider, group) → ∪ also_allow (global, then agent) → − subagent
deny (depth > 0) → − leaf deny (depth ≥ max) → ∩ per-request allow.
Deliberate choice: an explicit deny always wins. also_allow adds tools outside the profile and allow lists
but never re-adds a denied one (GoClaw lets it resurrect denied tools).

The same specs govern what an MCP client may read and get besides tools (`content_rules`): their `resources` and
`prompts` sections, resolved over the same scopes, with the same rule that a deny wins.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Callable, Iterable

from django.conf import settings
from django.db.models import Q

from goclaw.generations import generation_bump, generation_cache
from tools_app.calls import CallContext
from tools_app.choices import PolicyScope
from tools_app.models import Agent, ToolPolicy
from tools_app.registry import ToolRegistry, registry

ALL = "*"
POLICY_CACHE = "policy"


@dataclass(frozen=True)
class PolicyInput:
    """Everything a catalog depends on: the agent and what the caller said about the call."""

    agent: Agent
    call: CallContext = CallContext()

    @property
    def effective_provider(self) -> str:
        return self.call.provider or self.agent.provider

    @property
    def group_keys(self) -> list[str]:
        channel, chat_id = self.call.channel, self.call.chat_id
        keys = [channel] if channel else []
        if channel and chat_id:
            keys.append(f"{channel}:{chat_id}")
        return keys

    def cache_key(self, reg: ToolRegistry) -> tuple:
        call = self.call
        return (self.agent.pk, self.agent.updated_at, call.user_id, self.effective_provider, call.channel, call.chat_id,
                call.subagent_depth, call.request_allow, reg.cache_key)


@dataclass
class Step:
    label: str
    op: str  # base | intersect | subtract | union
    names: frozenset[str]


@dataclass
class Resolution:
    allowed: frozenset[str]
    steps: list[Step] = field(default_factory=list)


# --- loading ------------------------------------------------------------------------------------------
def _load_policies(inp: PolicyInput) -> dict[str, list[ToolPolicy]]:
    """Every enabled policy that applies to this input, with profiles, in one query."""
    provider = inp.effective_provider
    condition = Q(scope__in=[PolicyScope.GLOBAL, PolicyScope.SUBAGENT, PolicyScope.LEAF]) | Q(scope=PolicyScope.AGENT, agent=inp.agent)
    if provider:
        condition |= Q(scope=PolicyScope.PROVIDER, provider=provider) | Q(scope=PolicyScope.AGENT_PROVIDER, agent=inp.agent, provider=provider)
    if inp.group_keys:
        condition |= Q(scope=PolicyScope.GROUP, group_key__in=inp.group_keys)
    by_scope: dict[str, list[ToolPolicy]] = {}
    for policy in ToolPolicy.objects.filter(condition, enabled=True).select_related("profile").order_by("group_key"):
        by_scope.setdefault(policy.scope, []).append(policy)
    return by_scope


def _expand(names: Iterable[str], reg: ToolRegistry, every: frozenset[str]) -> frozenset[str]:
    names = list(names)
    if ALL in names:
        return every
    return frozenset(reg.expand(names)) & every


def build_steps(inp: PolicyInput, policies: dict[str, list[ToolPolicy]], reg: ToolRegistry) -> list[Step]:
    """The ordered steps for this input; each step carries the expanded tool set it applies."""
    every = frozenset(reg.names())
    first = lambda scope: (policies.get(scope) or [None])[0]  # noqa: E731
    glob, prov, agent, agent_prov = (first(PolicyScope.GLOBAL), first(PolicyScope.PROVIDER),
                                     first(PolicyScope.AGENT), first(PolicyScope.AGENT_PROVIDER))
    groups = policies.get(PolicyScope.GROUP, [])
    ex = lambda names: _expand(names, reg, every)  # noqa: E731
    steps: list[Step] = []

    if glob is not None and glob.profile is not None:
        steps.append(Step(f"global profile ({glob.profile.name})", "base", ex(glob.profile.tools)))
    else:
        steps.append(Step("global profile (full: every tool)", "base", every))
    if prov is not None and prov.profile is not None:
        steps.append(Step(f"provider {prov.provider} profile override ({prov.profile.name})", "base", ex(prov.profile.tools)))

    for label, spec in ((("global allow", glob)), (f"provider {inp.effective_provider} allow", prov),
                        (f"agent {inp.agent.key} allow", agent), (f"agent {inp.agent.key} + provider {inp.effective_provider} allow", agent_prov)):
        if spec is None:
            continue
        if spec.scope in (PolicyScope.AGENT, PolicyScope.AGENT_PROVIDER) and spec.profile is not None:
            steps.append(Step(label.replace(" allow", f" profile ({spec.profile.name})"), "intersect", ex(spec.profile.tools)))
        if spec.allow:
            steps.append(Step(label, "intersect", ex(spec.allow)))
    for spec in groups:
        if spec.allow:
            steps.append(Step(f"group {spec.group_key} allow", "intersect", ex(spec.allow)))

    denied: set[str] = set()
    for label, spec in (("global deny", glob), (f"provider {inp.effective_provider} deny", prov), (f"agent {inp.agent.key} deny", agent),
                        (f"agent {inp.agent.key} + provider {inp.effective_provider} deny", agent_prov),
                        *((f"group {g.group_key} deny", g) for g in groups)):
        if spec is not None and spec.deny:
            names = ex(spec.deny)
            denied |= names
            steps.append(Step(label, "subtract", names))

    for label, spec in (("global also_allow", glob), (f"agent {inp.agent.key} also_allow", agent),
                        (f"agent {inp.agent.key} + provider {inp.effective_provider} also_allow", agent_prov)):
        if spec is not None and spec.also_allow:
            steps.append(Step(label + " (denied tools excluded)", "union", ex(spec.also_allow) - denied))

    if inp.call.subagent_depth > 0:
        sub = first(PolicyScope.SUBAGENT)
        if sub is not None and sub.deny:
            steps.append(Step(f"subagent deny (depth {inp.call.subagent_depth})", "subtract", ex(sub.deny)))
        if inp.call.subagent_depth >= max_subagent_depth(inp.agent):
            leaf = first(PolicyScope.LEAF)
            if leaf is not None and leaf.deny:
                steps.append(Step(f"leaf deny (depth {inp.call.subagent_depth} = max)", "subtract", ex(leaf.deny)))
    if inp.call.request_allow is not None:
        steps.append(Step("per-request allow list", "intersect", ex(inp.call.request_allow)))
    return steps


def apply_steps(steps: list[Step]) -> frozenset[str]:
    current: frozenset[str] = frozenset()
    for step in steps:
        if step.op == "base":
            current = step.names
        elif step.op == "intersect":
            current &= step.names
        elif step.op == "subtract":
            current -= step.names
        elif step.op == "union":
            current |= step.names
    return current


# --- caching across processes ---------------------------------------------------------------------------
_cache = generation_cache(POLICY_CACHE)


def policy_changed() -> None:
    """A policy, profile, permission or agent changed: every process drops its catalogs (see goclaw.generations).
    Call it inside the writing transaction."""
    generation_bump(POLICY_CACHE)


def cached(key: tuple, compute: Callable[[], Any]) -> Any:
    """Memoize a value derived from policy data (catalogs, tool permissions) in this process until the
    shared generation moves."""
    return _cache.get(key, compute)


def resolve(inp: PolicyInput, reg: ToolRegistry = registry) -> frozenset[str]:
    """The allowed tool names for this input (cached; at most 2 queries when cold)."""
    return cached(("catalog", *inp.cache_key(reg)), lambda: apply_steps(build_steps(inp, _load_policies(inp), reg)))


def explain(inp: PolicyInput, reg: ToolRegistry = registry) -> dict:
    """For every registered tool: allowed or not, and each step that added or removed it."""
    steps = build_steps(inp, _load_policies(inp), reg)
    membership = {name: False for name in reg.names()}
    trails: dict[str, list[dict]] = {name: [] for name in membership}
    current: frozenset[str] = frozenset()
    for step in steps:
        after = apply_steps([Step("", "base", current), step])
        for name in membership:
            was, now = name in current, name in after
            if was != now:
                trails[name].append({"step": step.label, "effect": "added" if now else "removed"})
        current = after
    return {
        "agent": inp.agent.key,
        "inputs": {"user_id": inp.call.user_id, "provider": inp.effective_provider, "channel": inp.call.channel,
                   "chat_id": inp.call.chat_id, "depth": inp.call.subagent_depth,
                   "request_allow": list(inp.call.request_allow) if inp.call.request_allow is not None else None},
        "steps": [{"step": s.label, "op": s.op, "tools": len(s.names)} for s in steps],
        "tools": [{"name": name, "allowed": name in current, "decided_by": (trails[name][-1]["step"] if trails[name] else None),
                   "trail": trails[name]} for name in sorted(membership)],
    }


def max_subagent_depth(agent: Agent) -> int:
    """How deep this agent's subagents may nest (`other_config.subagents.max_spawn_depth`, 1-5, else the global
    GOCLAW_MAX_SUBAGENT_DEPTH): the leaf deny list applies at that depth, and spawning deeper is refused."""
    sub = (agent.other_config or {}).get("subagents")
    value = sub.get("max_spawn_depth") if isinstance(sub, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 5 \
        else settings.TOOL_MAX_SUBAGENT_DEPTH


def catalog_for(agent: Agent, call: CallContext, tools: ToolRegistry) -> frozenset[str]:
    """The tool names a call may see: the catalog endpoint and the execution check both come from here."""
    return resolve(PolicyInput(agent, call), tools)


# --- resources and prompts (what an MCP client reads and gets besides tools) ------------------------------
CONTENT_KINDS = ("resources", "prompts")
_DENY_EVERYTHING = ("*",)


@dataclass(frozen=True)
class ContentRules:
    """What one call may read (`resources`: URIs) or get (`prompts`: names). An item passes when it matches a
    pattern of every non-empty allow list on the way and no deny pattern; with no lists at all, everything of the
    agent's own passes. Patterns are `fnmatch` globs, case-sensitive, and `*` also matches `/`."""

    allow: tuple[tuple[str, ...], ...] = ()
    deny: tuple[str, ...] = ()

    def permits(self, name: str) -> bool:
        if any(fnmatchcase(name, pattern) for pattern in self.deny):
            return False
        return all(any(fnmatchcase(name, pattern) for pattern in patterns) for patterns in self.allow)


def _content_lists(spec: ToolPolicy, kind: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(allow, deny) of one spec's section. Saved sections are checked (tools_app.services.policy); one that is
    malformed anyway (a raw database edit) denies everything rather than nothing."""
    section = getattr(spec, kind) or {}
    lists = (section.get("allow", []), section.get("deny", [])) if isinstance(section, dict) else (None, None)
    if not all(isinstance(names, list) and all(isinstance(n, str) for n in names) for names in lists):
        return (), _DENY_EVERYTHING
    return tuple(lists[0]), tuple(lists[1])


def build_content_rules(inp: PolicyInput, policies: dict[str, list[ToolPolicy]], kind: str) -> ContentRules:
    """The scopes of the tool order, read for one section: global, provider, agent, agent + provider and group
    specs each add their allow list (intersected) and deny list; the subagent and leaf specs' deny lists apply at
    their depths, as for tools."""
    first = lambda scope: (policies.get(scope) or [None])[0]  # noqa: E731
    specs = [first(PolicyScope.GLOBAL), first(PolicyScope.PROVIDER), first(PolicyScope.AGENT),
             first(PolicyScope.AGENT_PROVIDER), *policies.get(PolicyScope.GROUP, [])]
    if inp.call.subagent_depth > 0:
        specs.append(first(PolicyScope.SUBAGENT))
        if inp.call.subagent_depth >= max_subagent_depth(inp.agent):
            specs.append(first(PolicyScope.LEAF))
    allow: list[tuple[str, ...]] = []
    deny: list[str] = []
    for spec in specs:
        if spec is None:
            continue
        allowed, denied = _content_lists(spec, kind)
        if allowed and spec.scope not in (PolicyScope.SUBAGENT, PolicyScope.LEAF):
            allow.append(allowed)
        deny.extend(denied)
    return ContentRules(allow=tuple(allow), deny=tuple(dict.fromkeys(deny)))


def content_rules(agent: Agent, call: CallContext, kind: str) -> ContentRules:
    """The `resources` or `prompts` rules of a call (cached with the catalogs; at most 2 queries when cold)."""
    if kind not in CONTENT_KINDS:
        raise ValueError(f"unknown content kind {kind!r}")
    inp = PolicyInput(agent, call)
    key = ("content", kind, agent.pk, agent.updated_at, inp.effective_provider, call.channel, call.chat_id,
           call.subagent_depth)
    return cached(key, lambda: build_content_rules(inp, _load_policies(inp), kind))
