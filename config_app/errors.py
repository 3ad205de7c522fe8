"""The one error configuration as code raises: every problem of a document, each with its path in the document."""
from __future__ import annotations

from goclaw.errors import ValidationError


def problem(path: str, message: str) -> dict[str, str]:
    return {"path": path, "message": message}


class ConfigInvalid(ValidationError):
    """A document that cannot be applied: nothing was changed. `details["problems"]` lists every problem found."""

    code = "config_invalid"

    def __init__(self, problems: list[dict[str, str]], message: str | None = None):
        self.problems = problems
        first = f"{problems[0]['path']}: {problems[0]['message']}" if problems else ""
        super().__init__(message or f"the document has {len(problems)} problem(s), nothing was changed; first: {first}",
                         details={"problems": problems})

    @property
    def lines(self) -> list[str]:
        return [f"{p['path']}: {p['message']}" for p in self.problems]
