"""Quality gates (docs/runtime.md "Quality gates"): checks a delegation's result must pass before it reaches the agent
that delegated. The source agent lists them in `other_config.quality_gates`; a `command` gate runs in the source's
sandbox with the result on stdin (exit 0 passes, stderr is the feedback), an `agent` gate asks a hosted reviewer to
answer APPROVED or REJECTED: <feedback>. Also the reviews both gates and evaluate_loop share: running another agent
to its end from inside goclaw, and reading its verdict. Orchestrators: processes and model requests run outside any
transaction."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime_app.choices import SessionOrigin, SessionStatus
from runtime_app.models import Session
from runtime_app.runs import agent_run, is_hosted
from runtime_app.services import sessions as svc
from sandbox_app.services import SandboxError, safe_child_env, sandbox_exec
from teams_app.models import Delegation
from teams_app.selectors_delegation import delegation_identifier
from tools_app import pipeline
from tools_app.base import ToolError
from tools_app.builtin.runtime import format_exec_result, sandbox_limits
from tools_app.calls import CallContext, Outcome, ToolCall
from tools_app.choices import InvocationStatus
from tools_app.models import Agent
from tools_app.sandboxing import sandbox_for_call
from tools_app.security.scrub import default_scrubber
from tools_app.workspace import workspace_required

logger = logging.getLogger("goclaw.runtime")

EVENTS = ("delegation.completed",)
DEFAULT_MAX_RETRIES = 1
FEEDBACK_MAX_CHARS = 4000
PROMPT_TEXT_MAX_CHARS = 60_000  # of a result or draft quoted in a reviewer's or generator's message
PARKED_WAIT_SECONDS = 600.0     # a review run parked on a person's approval is waited for this long, then stopped
POLL_SECONDS = 0.2
AUDIT_TOOL_NAME = "quality_gate"  # the audit rows of command gates
REF_PREFIX = "delegation:"


def delegation_ref(delegation: Delegation | int) -> str:
    """The `ref` of the sessions a delegation started (its target's, its gates' reviewers')."""
    return f"{REF_PREFIX}{getattr(delegation, 'pk', delegation)}"


@dataclass(frozen=True)
class Gate:
    """One entry of an agent's `quality_gates`, numbered from 1 in the agent's order."""

    number: int
    type: str
    command: str = ""
    agent: str = ""
    criteria: str = ""
    block_on_failure: bool = True
    max_retries: int = DEFAULT_MAX_RETRIES

    @property
    def name(self) -> str:
        return f"quality gate {self.number} ({self.type})"


@dataclass(frozen=True)
class Verdict:
    """A gate's answer. `retryable` False: the gate itself could not judge (its reviewer is missing, its command
    cannot run): a revision would not help, so the result is refused (or noted) at once."""

    passed: bool
    feedback: str = ""
    retryable: bool = True


def gates_for(agent: Agent, event: str) -> list[Gate]:
    """The agent's quality gates for `event`, in order. The schema checks them when the configuration is saved; an
    entry that still makes no sense is kept as a gate that fails (closed), never skipped."""
    entries = (agent.other_config or {}).get("quality_gates") if isinstance(agent.other_config, dict) else None
    gates = []
    for number, entry in enumerate(entries if isinstance(entries, list) else [], start=1):
        if not isinstance(entry, dict):
            gates.append(Gate(number, "invalid"))
            continue
        if entry.get("event", event) != event:
            continue
        retries = entry.get("max_retries", DEFAULT_MAX_RETRIES)
        retries = retries if isinstance(retries, int) and not isinstance(retries, bool) and 0 <= retries <= 5 \
            else DEFAULT_MAX_RETRIES
        kind = entry.get("type") if entry.get("type") in ("command", "agent") else "invalid"
        gates.append(Gate(number, kind, command=_str(entry.get("command")), agent=_str(entry.get("agent")),
                          criteria=_str(entry.get("criteria")), max_retries=retries,
                          block_on_failure=entry.get("block_on_failure") is not False))
    return gates


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def cut_text(text: str, limit: int) -> str:
    """`text`, cut after `limit` characters with a marker."""
    return text if len(text) <= limit else text[:limit] + "\n[... cut]"


def feedback_text(text: str) -> str:
    """Feedback as it is stored and shown: scrubbed of credentials, at most FEEDBACK_MAX_CHARS."""
    return cut_text(default_scrubber.scrub(text.strip())[0], FEEDBACK_MAX_CHARS)


def gate_check(gate: Gate, *, delegation: Delegation, session: Session, result: str,
               cancel: threading.Event) -> Verdict:
    """Run one gate on a delegation's `result` (its target's `session` produced it)."""
    if gate.type == "command" and gate.command:
        return _command_gate(gate, delegation, result, cancel)
    if gate.type == "agent" and gate.agent:
        return _agent_gate(gate, delegation, session, result, cancel)
    return Verdict(False, f"{gate.name} is misconfigured (see the agent's quality_gates)", retryable=False)


# --- command gates --------------------------------------------------------------------------------------------------
def _command_gate(gate: Gate, delegation: Delegation, result: str, cancel: threading.Event) -> Verdict:
    """The command in the SOURCE agent's sandbox and workspace, as its `exec` would run it (the shell safety check,
    the profile's limits, a minimal environment), with the result on stdin; the run is audited as `quality_gate`."""
    from tools_app.security.shell_check import check_command

    source = delegation.source
    arguments = {"command": gate.command, "delegation": delegation_identifier(delegation), "gate": gate.number}
    call = ToolCall(source, AUDIT_TOOL_NAME, arguments, cancel=cancel,
                    context=CallContext(user_id=delegation.user_id, session_key=delegation.session_key))
    ctx = pipeline.build_context(call)
    started = time.perf_counter()
    disabled = frozenset(ctx.settings.get("shell_disabled_rule_groups", ()) or ())
    checked = check_command(gate.command, disabled_groups=disabled)
    sandbox = sandbox_for_call(ctx)
    if checked.verdict != "allow":
        verdict = Verdict(False, f"{gate.name}: its command is refused by the shell safety policy: "
                                 + "; ".join(checked.reasons), retryable=False)
        outcome = Outcome(status=InvocationStatus.DENIED, for_llm=verdict.feedback, is_error=True)
    else:
        try:
            root = Path(workspace_required(ctx).ensure())
            limits = sandbox_limits(ctx, sandbox, tool_name="exec", timeout=float(
                ctx.settings.get("exec_timeout_seconds") or sandbox.profile.timeout_seconds))
            run = sandbox_exec(command=gate.command, workspace=root, cwd=root, env=safe_child_env(), limits=limits,
                               spec=sandbox.spec, stdin=result.encode(), cancel=cancel)
        except (SandboxError, ToolError, OSError) as exc:
            verdict = Verdict(False, f"{gate.name}: its command could not run: {exc}", retryable=False)
            outcome = Outcome(status=InvocationStatus.ERROR, for_llm=verdict.feedback, is_error=True)
        else:
            verdict = _command_verdict(gate, run)
            outcome = Outcome(status=InvocationStatus.OK if verdict.passed else InvocationStatus.ERROR,
                              for_llm=format_exec_result(run, limits), is_error=not verdict.passed,
                              sandbox=sandbox.audit(run.backend))
    outcome.duration_ms = (time.perf_counter() - started) * 1000
    pipeline.record(ctx, AUDIT_TOOL_NAME, arguments, outcome)
    return Verdict(verdict.passed, feedback_text(verdict.feedback), verdict.retryable)


def _command_verdict(gate: Gate, run: Any) -> Verdict:
    if run.timed_out or run.cancelled:
        return Verdict(False, f"{gate.name}: its command was stopped before it finished "
                              f"({'timed out' if run.timed_out else 'cancelled'})", retryable=not run.cancelled)
    if run.exit_code == 0:
        return Verdict(True)
    said = run.stderr.strip() or run.stdout.strip()
    return Verdict(False, said or f"{gate.name}: its command exited with code {run.exit_code}")


# --- agent gates and reviews --------------------------------------------------------------------------------------
def verdict_of(reply: str) -> tuple[bool, str]:
    """A reviewer's answer: APPROVED (case-insensitive prefix, whitespace stripped) passes; anything else rejects,
    with what follows REJECTED: (or the whole answer) as the feedback."""
    text = (reply or "").strip()
    if text[:8].upper() == "APPROVED":
        return True, ""
    if text[:8].upper() == "REJECTED":
        text = text[8:].lstrip(" \t\r\n:-")
    return False, text or "(no feedback given)"


class LinkedCancel(threading.Event):
    """One run's own cancel event, also set whenever `outer` (its caller's) is. A run needs its own: the runner's
    watch sets a synchronous run's event once its session ended (it may look just after), and that must not stop
    the caller's next run."""

    def __init__(self, outer: threading.Event) -> None:
        super().__init__()
        self._outer = outer

    def is_set(self) -> bool:
        return super().is_set() or self._outer.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = POLL_SECONDS if deadline is None else min(POLL_SECONDS, deadline - time.monotonic())
            if left <= 0:
                return False
            super().wait(left)
        return True


def run_to_end(*, agent: Agent, message: str, origin: str, parent: Session | None, label: str,
               cancel: threading.Event, wait_seconds: float = PARKED_WAIT_SECONDS, **context: Any) -> Session:
    """Run `agent` on `message` now, in this thread (`agent_run`, quality gates off for whatever it delegates), and
    return its ended session. One parked on a person's approval is handed to the runners: it is waited for (its
    result is this caller's, so it is not announced to `parent`), and stopped after `wait_seconds` or a cancel."""
    session = agent_run(agent=agent, message=message, origin=origin, owner=svc.PROCESS_OWNER,
                        cancel=LinkedCancel(cancel), parent=parent, label=label[:200], skip_gates=True, **context)
    if not session.is_active:
        return session
    Session.objects.filter(pk=session.pk).update(announced=True)
    deadline = time.monotonic() + wait_seconds
    while session.is_active and not cancel.is_set() and time.monotonic() < deadline:
        cancel.wait(POLL_SECONDS)
        session = Session.objects.select_related("agent").get(pk=session.pk)
    if session.is_active:
        session = svc.session_cancel(session=session, actor=f"{origin}:{parent.agent.key if parent else 'goclaw'}",
                                     reason="review_stopped", announce=False)
    return session


def run_problem(session: Session, role: str) -> str:
    """Why a review run gave no answer, in a sentence."""
    why = session.error or session.end_reason or session.status
    return f"the {role} {session.agent.key} gave no answer: its run {session.status} ({why})"


def _agent_gate(gate: Gate, delegation: Delegation, session: Session, result: str,
                cancel: threading.Event) -> Verdict:
    """A hosted reviewer judges the result (a session of its own under the delegation's session, gates off)."""
    reviewer = Agent.objects.filter(key=gate.agent).first()
    if reviewer is None or not reviewer.enabled or not is_hosted(reviewer):
        return Verdict(False, f"{gate.name}: its reviewer {gate.agent[:64]!r} is not an enabled hosted agent",
                       retryable=False)
    criteria = gate.criteria or "The result does what the request asked, completely and correctly."
    message = (f"[Quality gate review of delegation {delegation_identifier(delegation)} from "
               f"{delegation.source.key} to {delegation.target.key}]\n"
               "Review the result below against the criteria. Answer APPROVED if it meets them; otherwise answer "
               "REJECTED: followed by what must change.\n\n"
               f"Criteria:\n{criteria}\n\nThe request:\n{cut_text(delegation.request, PROMPT_TEXT_MAX_CHARS)}\n\n"
               f"The result:\n{cut_text(result, PROMPT_TEXT_MAX_CHARS)}")
    review = run_to_end(agent=reviewer, message=message, origin=SessionOrigin.GATE, parent=session,
                        label=f"{gate.name} review", cancel=cancel, user_id=session.user_id, channel=session.channel,
                        chat_id=session.chat_id, ref=delegation_ref(delegation))
    if review.status != SessionStatus.COMPLETED:
        return Verdict(False, f"{gate.name}: {run_problem(review, 'reviewer')}", retryable=False)
    approved, feedback = verdict_of(review.result)
    return Verdict(approved, "" if approved else feedback_text(feedback))
