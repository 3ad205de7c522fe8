"""A call the pipeline gives up on (timeout) is told to stop, and counted in /healthz until its thread ends."""
import threading

import pytest

from tests.factories import make_agent
from tools_app import pipeline
from tools_app.base import Tool, ToolResult
from tools_app.registry import registry

pytestmark = pytest.mark.django_db


class WaitsForever(Tool):
    """Waits until cancelled (as a network tool waiting on a hung server would), then says how it ended."""

    name = "waits_forever"
    description = "hangs until cancelled"
    timeout_seconds = 0.2
    ended = threading.Event()
    released = threading.Event()  # the test's safety net: never leave a thread behind

    def run(self, ctx, args):
        if ctx.cancel.wait(30) or self.released.is_set():
            self.ended.set()
            return ToolResult(for_llm="stopped")
        return ToolResult(for_llm="never cancelled")


class IgnoresCancel(Tool):
    """A tool that does not honour the signal: its thread stays busy until released."""

    name = "ignores_cancel"
    description = "hangs regardless"
    timeout_seconds = 0.2
    release = threading.Event()

    def run(self, ctx, args):
        self.release.wait(30)
        return ToolResult(for_llm="done at last")


@pytest.fixture
def reg():
    r = registry.clone()
    r.register(WaitsForever())
    r.register(IgnoresCancel())
    return r


def test_a_timed_out_call_is_cancelled_and_its_thread_ends(reg):
    WaitsForever.ended.clear()
    outcome = pipeline.execute(pipeline.ToolCall(make_agent(), "waits_forever", {}), reg)
    assert outcome.status == "timeout" and "timed out" in outcome.for_llm
    try:
        assert WaitsForever.ended.wait(10), "the tool never saw the cancellation"
    finally:
        WaitsForever.released.set()


def test_healthz_counts_runs_given_up_on_until_their_thread_ends(reg, admin_client):
    before = admin_client.get("/healthz").json()["checks"]["tool_workers"]
    IgnoresCancel.release.clear()
    try:
        outcome = pipeline.execute(pipeline.ToolCall(make_agent(), "ignores_cancel", {}), reg)
        assert outcome.status == "timeout"
        during = admin_client.get("/healthz").json()["checks"]["tool_workers"]
        assert during["abandoned_running"] == before["abandoned_running"] + 1
        assert during["abandoned_total"] == before["abandoned_total"] + 1
        assert during["workers"] == before["workers"] > 1
    finally:
        IgnoresCancel.release.set()
    done = threading.Event()
    for _ in range(200):  # the thread ends once released; its end is counted by a done-callback
        if pipeline.tool_workers_status()["abandoned_running"] == before["abandoned_running"]:
            done.set()
            break
        done.wait(0.05)
    assert done.is_set()
