"""Who did something on a team: an agent (through its tools or the API), a person (staff, through the board, the
admin or the API) or goclaw itself (sweeps, delegation). Stored as "agent:<key>", "user:<username>", "system[:why]"."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Actor:
    kind: str  # "agent" | "user" | "system"
    name: str
    agent_id: int | None = None

    @classmethod
    def for_agent(cls, agent: Any) -> "Actor":
        return cls("agent", agent.key, agent.pk)

    @classmethod
    def for_user(cls, user: Any) -> "Actor":
        return cls("user", user.get_username())

    @classmethod
    def system(cls, why: str = "") -> "Actor":
        return cls("system", why)

    @property
    def is_agent(self) -> bool:
        return self.kind == "agent"

    @property
    def is_person(self) -> bool:
        return self.kind == "user"

    def __str__(self) -> str:
        if self.kind == "system":
            return f"system:{self.name}" if self.name else "system"
        return f"{self.kind}:{self.name}"
