"""Running another agent's session from inside a run: spawn's `run`, a synchronous delegation, an evaluate loop's
rounds, a quality gate's reviewer. The session is born leased to the caller's run and driven in the caller's thread,
so a busy runner pool never deadlocks callers waiting for their callees."""
from __future__ import annotations

import threading
from typing import Any

from runtime_app.loop import RunControl, session_advance
from runtime_app.models import Session
from runtime_app.selectors import llm_provider_of
from runtime_app.services import sessions as svc
from tools_app.models import Agent


def is_hosted(agent: Agent) -> bool:
    """Does goclaw run this agent itself (its `provider` names an enabled LLM provider)? Others are external: they
    call goclaw's API and keep today's paths."""
    return llm_provider_of(agent) is not None


def run_inline(session: Session, *, owner: str, cancel: threading.Event) -> Session:
    """Advance a session born leased to `owner` (session_create(lease_owner=…, sync=True)) to its end in this thread.
    One that parks on an approval, or is interrupted, is handed to the runners and announced to its parent when it
    ends. Returns the session as it is then."""
    with svc.lease_held(session.pk, owner, cancel):
        outcome = session_advance(session.pk, RunControl(owner=owner, cancel=cancel))
    if outcome not in ("completed", "failed"):
        Session.objects.filter(pk=session.pk).update(sync=False)
        svc.session_release(session_id=session.pk, owner=owner)
        svc.session_announce_if_ended(session.pk)
    return Session.objects.select_related("agent").get(pk=session.pk)


def agent_run(*, agent: Agent, message: str, origin: str, owner: str, cancel: threading.Event,
              parent: Session | None = None, label: str = "", skip_gates: bool = False, **context: Any) -> Session:
    """Run `agent` on `message` in a new session of its own (linked under `parent` for people to follow), now, in
    this thread; `context`: user_id, channel, chat_id. Returns the session when it ended (or was handed on)."""
    session = svc.session_create(agent=agent, created_by=f"{origin}:{parent.agent.key}" if parent else origin,
                                 message=message, parent=parent, label=label, origin=origin, sync=True,
                                 lease_owner=owner, skip_gates=skip_gates, **context)
    return run_inline(session, owner=owner, cancel=cancel)
