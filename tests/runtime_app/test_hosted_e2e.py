"""A hosted agent end to end under `manage.py up` (real gunicorn, worker, runner, embedded PostgreSQL) and a local
OpenAI-compatible server: a message starts a run, a tool call parks on an approval, `up` is restarted while it waits,
the decision resumes it in the new runner, the spawned subagent is refused a leaf-denied tool, the run completes."""
from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.runtime_app.llm_server import LLMServer, call, text
from tests.servers import UpProcess, free_port, manage, up_env

pytestmark = pytest.mark.slow


def _shell(env: dict, code: str) -> str:
    return manage(env, "shell", "-c", code).strip().splitlines()[-1]


def _session(base: str, token: str, sid: str) -> dict:
    return httpx.get(f"{base}/api/v1/sessions/{sid}", headers={"Authorization": f"Bearer {token}"}).json()


def _until(base: str, token: str, sid: str, wanted: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = _session(base, token, sid)
        if state["status"] == wanted or time.monotonic() > deadline:
            assert state["status"] == wanted, state
            return state
        time.sleep(0.2)


def test_a_hosted_run_parks_survives_a_restart_of_up_and_resumes_after_the_decision(tmp_path: Path):
    env = up_env(tmp_path / "var", GOCLAW_WEB_WORKERS="1", GOCLAW_Q_WORKERS="1", GOCLAW_RUNTIME_THREADS="2")
    port, ws_port = free_port(), free_port()
    with LLMServer() as llm:
        # the parent asks to run a subagent (spawn is not read-only: a cautious agent asks a person first); the
        # subagent tries a leaf-denied tool, is refused, answers; the parent answers
        llm.script(call("spawn", action="run", task="look around", label="scout"),
                   call("sessions_list"), text("scout: I may not list sessions"), text("all done"))
        up = UpProcess(env, port, ws_port, tmp_path / "up1.log")
        try:
            up.wait_healthy()
            manage(env, "create_agent", "hosted")
            _shell(env, "from runtime_app.models import LLMProvider; from runtime_app.services.providers import "
                        "provider_save; from tools_app.models import Agent; "
                        f"provider_save(actor=None, provider=LLMProvider(name='local', kind='openai', "
                        f"base_url='{llm.url}/v1', model='m', allow_private_network=True)); "
                        "Agent.objects.filter(key='hosted').update(provider='local', model='m', mode='cautious'); print('ok')")
            token = manage(env, "issue_token", "hosted").strip()
            created = httpx.post(f"{up.base}/api/v1/sessions", json={"user_id": "u", "message": "go"},
                                 headers={"Authorization": f"Bearer {token}"})
            assert created.status_code == 201, created.text
            sid = created.json()["id"]
            parked = _until(up.base, token, sid, "waiting_approval")
        finally:
            assert up.stop() == 0

        up = UpProcess(env, port, ws_port, tmp_path / "up2.log")
        try:
            up.wait_healthy()
            assert _session(up.base, token, sid)["status"] == "waiting_approval"  # nothing ran meanwhile
            _shell(env, "from tools_app.services.approvals import approval_decide; "
                        f"approval_decide(approval_id='{parked['waiting_approval']}', decision='allow_once', actor=None); "
                        "print('ok')")
            done = _until(up.base, token, sid, "completed")
            assert len(done["children"]) == 1 and done["children"][0]["status"] == "completed"
            child = done["children"][0]["id"]
            rows = httpx.get(f"{up.base}/api/v1/sessions/{child}/messages",
                             headers={"Authorization": f"Bearer {token}"}).json()["results"]
            refused = [m for m in rows if m["role"] == "tool"][0]
            assert refused["tool_name"] == "sessions_list" and refused["verdict"] == "denied"
            assert "not available" in refused["content"]
            parent_rows = httpx.get(f"{up.base}/api/v1/sessions/{sid}/messages",
                                    headers={"Authorization": f"Bearer {token}"}).json()["results"]
            spawn = [m for m in parent_rows if m["role"] == "tool"][0]
            assert spawn["tool_name"] == "spawn" and spawn["verdict"] == "ok" and spawn["approval_id"]
            assert "I may not list sessions" in spawn["content"]
            assert parent_rows[-1]["content"] == "all done"
        finally:
            assert up.stop() == 0
