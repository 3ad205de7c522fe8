"""Hosted-agent fixtures: a local LLM server speaking the providers' wire formats (`llm`), a provider row pointing at
it, an agent that runs on it, and a runner advancing sessions in this process (`runner`; real threads, real
database, so tests using it are transactional)."""
from __future__ import annotations

import pytest

from runtime_app.choices import SessionStatus

SETTLED = (SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.CANCELLED, SessionStatus.WAITING_APPROVAL)


@pytest.fixture
def llm():
    from tests.runtime_app.llm_server import LLMServer

    with LLMServer() as server:
        yield server


def make_provider(llm, *, kind: str = "openai", **fields):
    from runtime_app.models import LLMProvider
    from runtime_app.services.providers import provider_save

    base = f"{llm.url}/v1" if kind == "openai" else llm.url
    provider = LLMProvider(name=fields.pop("name", f"local-{kind}"), kind=kind, base_url=base, model="test-model",
                           allow_private_network=True, **fields)
    return provider_save(actor=None, provider=provider, api_key="sk-test-key-0123456789")


@pytest.fixture
def provider(transactional_db, llm):
    return make_provider(llm, max_concurrent=8)


@pytest.fixture
def hosted(provider):
    """An agent running on the local provider (autonomous mode: reads and writes run without asking)."""
    from tests.factories import make_agent

    return make_agent(provider=provider.name, model="test-model")


@pytest.fixture
def runner(transactional_db):
    from runtime_app.runner import Runner

    started = Runner(threads=4, poll=0.02, owner="test-runner-a").start()
    yield started
    started.stop()


def settle(session, seconds: float = 60, *, past_approval=None):
    """The session once it stops running (completed, failed, cancelled, parked on an approval other than
    `past_approval`, one the test just decided)."""
    from runtime_app.selectors import session_wait_settled

    current = session_wait_settled(session, seconds=seconds, past_approval=past_approval)
    assert current.status in SETTLED, f"session still {current.status} after {seconds}s"
    return current


def messages_of(session):
    from runtime_app.models import SessionMessage

    return list(SessionMessage.objects.filter(session=session).order_by("seq"))


def delegation_finished(delegation, seconds: float = 30):
    """The delegation once it is no longer running (or after `seconds`)."""
    import time

    from teams_app.models import Delegation

    deadline = time.monotonic() + seconds
    while True:
        current = Delegation.objects.get(pk=delegation.pk)
        if current.status != "running" or time.monotonic() > deadline:
            return current
        time.sleep(0.05)
