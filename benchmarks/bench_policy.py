"""Catalog resolution for an agent that can see ~1,000 tools (built-ins + 900 synthetic tools in 30 groups):
warm p50 (target <= 0.5 ms) and the SQL queries of a cold resolution (target <= 6)."""
from __future__ import annotations

import time

from _common import django_setup, summary_ms, write_result

N = 5000


def main() -> None:
    django_setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tools_app.base import Tool, ToolResult
    from tools_app.models import Agent, ToolPolicy, ToolProfile
    from tools_app.calls import CallContext
    from django.db.models import Q

    from tools_app.policy import PolicyInput, _cache, resolve
    from tools_app.services.agents import agent_create
    from tools_app.services.policy import tool_policy_delete, tool_policy_save
    from tools_app.registry import registry

    reg = registry.clone()
    for i in range(900):
        tool = type(f"T{i}", (Tool,), {"name": f"synthetic_{i:03d}", "description": "x", "group": f"synthetic{i % 30:02d}",
                                       "run": lambda self, ctx, args: ToolResult(for_llm="")})()
        reg.register(tool)
    agent = Agent.objects.filter(key="bench-policy").first() or agent_create(key="bench-policy", provider="openai")
    tool_policy_delete(actor=None, queryset=ToolPolicy.objects.filter(Q(scope__in=["global", "provider"]) | Q(agent=agent)))
    for spec in ({"scope": "global", "profile": ToolProfile.objects.get(name="full"), "deny": ["group:synthetic29"],
                  "also_allow": ["datetime"]},
                 {"scope": "provider", "provider": "openai", "deny": ["synthetic_000"]},
                 {"scope": "agent", "agent": agent, "deny": ["exec"], "also_allow": ["group:synthetic01"]}):
        tool_policy_save(actor=None, policy=ToolPolicy(**spec))
    inp = PolicyInput(agent, CallContext(channel="cli"))

    cold_samples, cold_queries = [], []
    for _ in range(50):
        _cache.clear()
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            allowed = resolve(inp, reg)
            cold_samples.append(time.perf_counter() - started)
        cold_queries.append(len(queries))
    warm = []
    for _ in range(N):
        started = time.perf_counter()
        resolve(inp, reg)
        warm.append(time.perf_counter() - started)
    tool_policy_delete(actor=None, queryset=ToolPolicy.objects.filter(Q(scope__in=["global", "provider"]) | Q(agent=agent)))
    write_result("policy", {"registered_tools": len(reg.names()), "allowed_tools": len(allowed),
                            "warm": {**summary_ms(warm), "target_p50_ms": 0.5},
                            "cold": {**summary_ms(cold_samples), "queries_max": max(cold_queries), "target_queries": 6}})


if __name__ == "__main__":
    main()
