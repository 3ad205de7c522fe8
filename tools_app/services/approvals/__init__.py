"""Human approvals (docs/approvals.md). Every failure path refuses: nothing runs that a person did not approve.

- `decision`: allow / ask / deny / hold for one call (permissions, modes, the exec matrix and allowlist);
- `effects`: what a command's arguments do, and globs on normalised paths (the data widened rules are judged by);
- `requests`: durable requests bound to the exact call, decided exactly once, expiring, long-polled;
- `rules`: allow-always rules; `changes`: file writes held in review / audit modes;
- `identity`: the caller identity of a held call, sealed; `gate`: the pipeline's approval step.
Running an approved call or an accepted change is `tools_app.execution`'s job (through the pipeline).
"""
from tools_app.services.approvals.changes import (  # noqa: F401
    pending_change_claim, pending_change_create, pending_change_finish, pending_change_open, pending_change_seal_context,
)
from tools_app.services.approvals.decision import (  # noqa: F401
    PLAN_TOOL, Decision, allowlist_covers, approval_resolve, arguments_hash, canonical_arguments, exec_matrix,
    permission_for, plan_approved,
)
from tools_app.services.approvals.effects import (  # noqa: F401
    PROGRAMS, WordPattern, arguments_glob_match, clean_path_pattern, command_effects, glob_match,
    normalised_workspace_path, single_command_view, words_cover,
)
from tools_app.services.approvals.identity import call_identity  # noqa: F401
from tools_app.services.approvals.requests import (  # noqa: F401
    MAX_WAIT_SECONDS, POLL_SECONDS, approval_cancel, approval_decide, approval_expire_if_overdue, approval_request_create,
    approval_summary, approval_sweep_expired, approval_timeout, approval_wait,
)
from tools_app.services.approvals.rules import (  # noqa: F401
    approval_rule_description, approval_rule_match, approval_rule_payload, approval_rule_preview, approval_rule_revoke,
    describe_rule,
)
