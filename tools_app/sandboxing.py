"""Which sandbox a tool call's processes run in: the agent's profile (or the default one), as its mode applies."""
from __future__ import annotations

from dataclasses import dataclass

from sandbox_app.models import SandboxProfile
from sandbox_app.selectors import sandbox_profile_get
from sandbox_app.services import SandboxSpec
from tools_app.base import ToolContext
from tools_app.models import Agent


@dataclass(frozen=True)
class CallSandbox:
    """The profile of one call and whether it isolates this call (False only for a profile with the sandbox off)."""

    profile: SandboxProfile
    sandboxed: bool

    @property
    def spec(self) -> SandboxSpec:
        return self.profile.spec(sandboxed=self.sandboxed)

    def audit(self, backend: str) -> dict[str, str]:
        return {"backend": backend, "profile": self.profile.name}


def sandbox_for_call(ctx: ToolContext) -> CallSandbox:
    """The agent's sandbox profile for this call (else the default profile, else the built-in defaults); the one
    the pipeline already put in `ctx.sandbox` when there is one."""
    if isinstance(ctx.sandbox, CallSandbox):
        return ctx.sandbox
    profile_id = Agent.objects.filter(pk=ctx.agent_id).values_list("sandbox_profile_id", flat=True).first()
    profile = sandbox_profile_get(profile_id)
    return CallSandbox(profile, profile.applies_to(subagent_depth=ctx.subagent_depth, session_key=ctx.session_key))
