"""The errors team services raise. Their messages are written for the model as much as for people: they say what
is wrong and what to do instead (a tool shows the message as its error result)."""
from goclaw.errors import Conflict, NotFound, PermissionDenied, ValidationError


class TeamNotFound(NotFound):
    code = "team_not_found"


class TaskNotFound(NotFound):
    code = "task_not_found"


class TeamPermissionDenied(PermissionDenied):
    """The actor's role (or non-membership) does not allow the action."""

    code = "team_permission_denied"


class TaskConflict(Conflict):
    """An illegal transition: the task is not in a state the action applies to (or another agent won the race)."""

    code = "task_conflict"


class TaskInvalid(ValidationError):
    code = "task_invalid"


class DependencyCycle(ValidationError):
    code = "task_dependency_cycle"


class TeamInvalid(ValidationError):
    code = "team_invalid"


class AgentAtCapacity(Conflict):
    """A delegation would exceed the link's max_concurrent or the target's max_delegation_load."""

    code = "agent_at_capacity"


class DelegationNotAllowed(PermissionDenied):
    code = "delegation_not_allowed"


class HandoffInvalid(ValidationError):
    code = "handoff_invalid"
