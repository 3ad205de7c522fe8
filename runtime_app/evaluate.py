"""`evaluate_loop` (group "delegation"): a generator agent drafts, an evaluator agent judges the draft against the
caller's criteria, and the generator revises with the evaluator's feedback until the evaluator answers APPROVED or
the rounds run out (docs/runtime.md "Evaluate loops"). Each round is two synchronous runs of hosted agents in the
calling thread, sessions of their own under the calling session (origin evaluation), with quality gates off for
whatever they delegate. The caller needs a delegation link to both agents, as for `delegate`."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Iterable

from runtime_app.choices import SessionOrigin, SessionStatus
from runtime_app.gates import PROMPT_TEXT_MAX_CHARS, cut_text, feedback_text, run_problem, run_to_end, verdict_of
from runtime_app.models import Session
from runtime_app.runs import is_hosted
from runtime_app.tools import calling_session
from teams_app.selectors_delegation import agent_link_for, link_allows_user
from tools_app.base import Tool, ToolContext, ToolError, ToolResult
from tools_app.models import Agent
from tools_app.toolsets import ToolSource, tool_source_register

GROUP = "delegation"
DEFAULT_ROUNDS = 3
MAX_ROUNDS = 5
TASK_MAX_CHARS = 20_000
CRITERIA_MAX_CHARS = 10_000


@dataclass
class LoopOutcome:
    """How a loop ended: approved in round `rounds`, or not (the last draft and the evaluator's last feedback), or
    stopped by a run that gave no answer (`problem`)."""

    approved: bool
    rounds: int
    draft: str = ""
    feedback: str = ""
    problem: str = ""


def _header(caller: Session, number: int, rounds: int) -> str:
    return f"[Evaluate loop from {caller.agent.key}: round {number} of {rounds}]"


def generator_prompt(caller: Session, *, task: str, criteria: str, number: int, rounds: int, draft: str,
                     feedback: str) -> str:
    """What the generator reads: the task and criteria; from round 2, the evaluator's feedback and its last draft."""
    head = _header(caller, number, rounds)
    if number == 1:
        return (f"{head}\n{task}\n\nYour result will be judged against these criteria:\n{criteria}\n\n"
                "Answer with the result itself.")
    return (f"{head}\nRevise your draft. Feedback from the evaluator: {feedback}\n\nThe task:\n{task}\n\n"
            f"The criteria:\n{criteria}\n\nYour previous draft:\n{cut_text(draft, PROMPT_TEXT_MAX_CHARS)}\n\n"
            "Answer with the revised result itself.")


def evaluator_prompt(caller: Session, *, task: str, criteria: str, number: int, rounds: int, draft: str) -> str:
    return (f"{_header(caller, number, rounds)}\nEvaluate the draft below against the criteria. Answer APPROVED if "
            "it meets them; otherwise answer REJECTED: followed by what must change.\n\n"
            f"Criteria:\n{criteria}\n\nThe task the draft answers:\n{task}\n\n"
            f"The draft:\n{cut_text(draft, PROMPT_TEXT_MAX_CHARS)}")


def evaluate_loop(*, caller: Session, generator: Agent, evaluator: Agent, task: str, criteria: str, rounds: int,
                  cancel: threading.Event) -> LoopOutcome:
    """Run the rounds (an orchestrator: model requests and tools run in the agents' own runs, no transaction here).
    `caller` is the calling session: the rounds' sessions hang under it for people to follow."""
    context = {"user_id": caller.user_id, "channel": caller.channel, "chat_id": caller.chat_id}
    draft, feedback = "", ""
    for number in range(1, rounds + 1):
        if cancel.is_set():
            return LoopOutcome(False, number - 1, draft, feedback, problem="the loop was stopped")
        made = run_to_end(agent=generator, origin=SessionOrigin.EVALUATION, parent=caller, cancel=cancel,
                          label=f"evaluate round {number}: generator", **context,
                          message=generator_prompt(caller, task=task, criteria=criteria, number=number, rounds=rounds,
                                                   draft=draft, feedback=feedback))
        if made.status != SessionStatus.COMPLETED:
            return LoopOutcome(False, number, draft, feedback, problem=run_problem(made, "generator"))
        draft = made.result
        if cancel.is_set():
            return LoopOutcome(False, number, draft, feedback, problem="the loop was stopped")
        judged = run_to_end(agent=evaluator, origin=SessionOrigin.EVALUATION, parent=caller, cancel=cancel,
                            label=f"evaluate round {number}: evaluator", **context,
                            message=evaluator_prompt(caller, task=task, criteria=criteria, number=number,
                                                     rounds=rounds, draft=draft))
        if judged.status != SessionStatus.COMPLETED:
            return LoopOutcome(False, number, draft, feedback, problem=run_problem(judged, "evaluator"))
        approved, said = verdict_of(judged.result)
        if approved:
            return LoopOutcome(True, number, draft)
        feedback = feedback_text(said)
    return LoopOutcome(False, rounds, draft, feedback)


def _participant(caller: Session, key: Any, role: str, user_id: str) -> Agent:
    """The generator or evaluator: an existing, enabled, hosted agent the caller has a delegation link to (the link
    that governs `delegate`, its user lists included)."""
    if not isinstance(key, str) or not key.strip() or len(key) > 64 or "\x00" in key:
        raise ToolError(f"argument {role} must be the key of an agent (DELEGATION.md lists them)")
    agent = Agent.objects.filter(key=key.strip()).first()
    if agent is None:
        raise ToolError(f"There is no agent {key[:64]!r} (the {role}).")
    link = agent_link_for(caller.agent, agent) if agent.pk != caller.agent_id else None
    if link is None:
        raise ToolError(f"You have no delegation link to agent {agent.key} (the {role}); evaluate_loop needs one to "
                        "the generator and to the evaluator. DELEGATION.md lists the agents you can delegate to.")
    if not link_allows_user(link, user_id):
        raise ToolError(f"Your link to agent {agent.key} (the {role}) does not allow it for this user.")
    if not agent.enabled:
        raise ToolError(f"Agent {agent.key} (the {role}) is disabled.")
    if not is_hosted(agent):
        raise ToolError(f"Agent {agent.key} (the {role}) is not a hosted agent: evaluate_loop runs agents goclaw "
                        "runs itself (their provider names an enabled LLM provider). Use delegate instead.")
    return agent


def _text(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"argument {name} must be a non-empty string")
    return value


class EvaluateLoopTool(Tool):
    """Runs a generator / evaluator revision loop between two linked hosted agents."""

    name = "evaluate_loop"
    description = (
        "Have one agent produce a result and another judge it, revising until it passes: "
        '{"generator": "<agent key>", "evaluator": "<agent key>", "task": "<what to produce>", '
        '"criteria": "<what the result must meet>", "max_rounds"?: 3}. Each round the generator drafts (or revises '
        "with the evaluator's feedback) and the evaluator answers APPROVED or REJECTED: <feedback>. Returns the "
        "approved result, or after max_rounds (at most 5) the last draft and the last feedback, marked NOT "
        "APPROVED. You need delegation links to both agents (DELEGATION.md lists them).")
    parameters = {"type": "object", "properties": {
        "generator": {"type": "string", "minLength": 1, "maxLength": 64, "description": "the agent that drafts"},
        "evaluator": {"type": "string", "minLength": 1, "maxLength": 64, "description": "the agent that judges"},
        "task": {"type": "string", "minLength": 1, "maxLength": TASK_MAX_CHARS},
        "criteria": {"type": "string", "minLength": 1, "maxLength": CRITERIA_MAX_CHARS},
        "max_rounds": {"type": "integer", "minimum": 1, "maximum": 100,
                       "description": f"default {DEFAULT_ROUNDS}, at most {MAX_ROUNDS}"}},
        "required": ["generator", "evaluator", "task", "criteria"], "additionalProperties": False}
    group = GROUP
    read_only = False
    timeout_seconds = 3600.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        caller = calling_session(ctx)
        if caller.origin == SessionOrigin.EVALUATION:
            raise ToolError("an evaluate loop's rounds cannot start evaluate loops of their own")
        generator = _participant(caller, args.get("generator"), "generator", ctx.user_id)
        evaluator = _participant(caller, args.get("evaluator"), "evaluator", ctx.user_id)
        task, criteria = _text(args, "task"), _text(args, "criteria")
        asked = args.get("max_rounds", DEFAULT_ROUNDS)
        rounds = min(asked, MAX_ROUNDS) if isinstance(asked, int) and not isinstance(asked, bool) and asked >= 1 \
            else DEFAULT_ROUNDS
        outcome = evaluate_loop(caller=caller, generator=generator, evaluator=evaluator, task=task,
                                criteria=criteria, rounds=rounds, cancel=ctx.cancel)
        who = f"generator {generator.key}, evaluator {evaluator.key}"
        if outcome.problem:
            last = f"\n\nThe last draft (not approved):\n{outcome.draft}" if outcome.draft else ""
            return ToolResult(for_llm=f"The evaluate loop stopped in round {outcome.rounds} ({who}): "
                                      f"{outcome.problem}.{last}", is_error=True)
        if outcome.approved:
            return ToolResult(for_llm=f"APPROVED in round {outcome.rounds} of {rounds} ({who}). The approved "
                                      f"result:\n\n{outcome.draft}")
        capped = f" (capped at {MAX_ROUNDS})" if asked != rounds and isinstance(asked, int) else ""
        return ToolResult(for_llm=f"NOT APPROVED after {rounds} rounds{capped} ({who}): the evaluator rejected every "
                                  f"draft. Its last feedback: {outcome.feedback}\n\nThe last draft, not approved:\n\n"
                                  f"{outcome.draft}")


TOOLS: tuple[Tool, ...] = (EvaluateLoopTool(),)


class EvaluateToolSource(ToolSource):
    """evaluate_loop for every agent (group "delegation"); links decide whom it reaches, the policy engine who may
    call it, and it works only inside a hosted session."""

    name = "evaluate"
    reserved_names = frozenset(tool.name for tool in TOOLS)

    def tools_for(self, agent: Any, user_id: str) -> Iterable[Tool]:
        return TOOLS


def register() -> None:
    tool_source_register(EvaluateToolSource())
