"""Small factories over the real services (no mocks)."""
from __future__ import annotations

import itertools
import tempfile

from tools_app.services.agents import agent_create

_seq = itertools.count(1)


def make_agent(**overrides):
    n = next(_seq)
    fields = {"key": f"agent-{n}", "display_name": f"Agent {n}", "provider": "openai", "model": "gpt-test",
              "workspace": tempfile.mkdtemp(prefix="goclaw-ws-")}
    fields.update(overrides)
    return agent_create(**fields)
