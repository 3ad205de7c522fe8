"""The official MCP conformance suite against a live goclaw (docs/mcp-conformance.md): one harness, used by
tests/mcp_app/test_conformance.py (asserts) and benchmarks/mcp_conformance.py (writes the figures).

It runs the pinned suite (tools/conformance, `make conformance-deps`) once per protocol revision, both at the same
time, against goclaw's MCP port through the token-injecting forwarder (conformance_proxy.py), reads the per-scenario
check files the suite writes, and scores them the way the suite does (a scenario passes when none of its checks is
a FAILURE; warnings and skips do not fail it), with one difference: the scenarios and checks that
conformance_not_applicable.yaml lists, with the reason, are set aside. Only the scenarios a revision's requirement
set requires are scored; the ones the suite runs without scoring (extensions such as tasks, pending,
added-after-release) are reported for information."""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.mcp_app.conformance_proxy import TokenProxy
from tests.servers import ROOT, UpProcess, free_port, wait_until

SUITE_HOME = ROOT / "tools" / "conformance"
PACKAGE_NAME = "@modelcontextprotocol/conformance"
PACKAGE = SUITE_HOME / "node_modules" / "@modelcontextprotocol" / "conformance"
NODE = SUITE_HOME / "node_modules" / ".bin" / "node"
ENTRY = PACKAGE / "dist" / "index.js"
NOT_APPLICABLE_FILE = Path(__file__).with_name("conformance_not_applicable.yaml")
REVISIONS = ("2025-11-25", "2026-07-28")
SCENARIO_TIMEOUT_MS = 15_000  # per scenario (the suite's default is 30 s); the slowest takes about 5 s
RUN_TIMEOUT_S = 600  # the whole run of one revision
_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")


# --- the pinned suite ----------------------------------------------------------------------------------------------
def pinned_version() -> str:
    """The suite version tools/conformance/package.json pins (exactly, no range)."""
    return json.loads((SUITE_HOME / "package.json").read_text())["dependencies"][PACKAGE_NAME]


def installed_version() -> str:
    """The installed suite's version; AssertionError with the remedy when it is missing or not the pinned one."""
    manifest = PACKAGE / "package.json"
    assert manifest.exists() and NODE.exists(), (
        f"the MCP conformance suite is not installed in {SUITE_HOME}/node_modules: run `make conformance-deps`")
    installed = json.loads(manifest.read_text())["version"]
    assert installed == pinned_version(), (
        f"{PACKAGE_NAME} {installed} is installed but {pinned_version()} is pinned: run `make conformance-deps`")
    return installed


@dataclass(frozen=True)
class Requirements:
    """What a revision's frozen requirement set (shipped with the suite) lists for servers."""

    revision: str
    required: tuple[str, ...]
    not_scored: dict[str, str]  # scenario -> the suite's reason (extension, pending, added-after-release)


def requirements(revision: str) -> Requirements:
    data = yaml.safe_load((PACKAGE / "requirements" / f"{revision}.yaml").read_text())
    not_scored = {entry["scenario"]: entry["reason"] for entry in data.get("not_scored") or []
                  if entry.get("leg") == "server"}
    return Requirements(revision, tuple(data.get("server") or ()), not_scored)


# --- what does not apply, and why ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NotApplicable:
    """One entry of conformance_not_applicable.yaml (its header explains the keys)."""

    key: str
    scenario: str
    revisions: tuple[str, ...]
    reason: str
    checks: tuple[str, ...] = ()
    unless_capability: str = ""

    def applies(self, revision: str, capabilities: dict[str, Any]) -> bool:
        return revision in self.revisions and not (
            self.unless_capability and declared(capabilities, self.unless_capability))


def not_applicable_entries() -> list[NotApplicable]:
    """The checked-in list, validated against the installed suite: every entry names a scenario its revisions
    require (an entry the suite no longer knows is an error, not a silent no-op) and says why."""
    raw = yaml.safe_load(NOT_APPLICABLE_FILE.read_text()) or {}
    entries, problems = [], []
    known = {revision: set(requirements(revision).required) for revision in REVISIONS}
    for key, fields in raw.items():
        unknown = set(fields) - {"scenario", "revisions", "reason", "checks", "unless_capability"}
        entry = NotApplicable(key=key, scenario=fields.get("scenario", key),
                              revisions=tuple(fields.get("revisions") or ()),
                              reason=" ".join(str(fields.get("reason") or "").split()),
                              checks=tuple(fields.get("checks") or ()),
                              unless_capability=str(fields.get("unless_capability") or ""))
        if unknown:
            problems.append(f"{key}: unknown key(s) {sorted(unknown)}")
        if not entry.reason:
            problems.append(f"{key}: no reason")
        if not entry.revisions:
            problems.append(f"{key}: no revisions")
        for revision in entry.revisions:
            if revision not in known:
                problems.append(f"{key}: unknown revision {revision!r} (quote dates in YAML)")
            elif entry.scenario not in known[revision]:
                problems.append(f"{key}: {entry.scenario} is not a required server scenario of {revision}")
        entries.append(entry)
    assert not problems, f"{NOT_APPLICABLE_FILE.name}: " + "; ".join(problems)
    return entries


def declared(capabilities: dict[str, Any], path: str) -> bool:
    """Whether a capability (dotted path, `resources.subscribe`) is declared: present, and not null or false (an
    empty object, `"logging": {}`, declares it)."""
    value: Any = capabilities
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return value is not None and value is not False


# --- the platform under test ---------------------------------------------------------------------------------------
def fixture_catalog(agent) -> None:
    """Give `agent` what the applicable scenarios need, through goclaw's own services: the suite's fixtures that
    goclaw's ordinary configuration can express, namely its two text tools as operator-defined custom tools
    (sandboxed shell templates, no approval needed, run through the whole pipeline like any tool) and its two text
    prompts as skills of the same name (goclaw serves an agent's skills as prompts, by slug); and a context file
    and a memory document, so that resources, where goclaw serves them, are not empty."""
    from tools_app.services.context_files import ContextActor, context_file_write
    from tools_app.services.custom_tools import custom_tool_create
    from tools_app.services.memory import memory_document_write
    from tools_app.services.skills import skill_publish

    no_arguments = {"type": "object", "properties": {}}
    custom_tool_create(actor=None, agent=agent, name="test_simple_text", parameters=no_arguments,
                       requires_approval=False, description="Answers a fixed text (the MCP conformance suite's fixture).",
                       command="printf '%s' 'This is a simple text response for testing.'")
    custom_tool_create(actor=None, agent=agent, name="test_error_handling", parameters=no_arguments,
                       requires_approval=False, description="Always fails (the MCP conformance suite's fixture).",
                       command="printf '%s' 'This tool intentionally returns an error for testing' >&2; exit 1")
    context_file_write(agent=agent, name="SOUL.md", content="# Soul\nA careful agent under conformance test.\n",
                       actor=ContextActor.system("conformance"))
    memory_document_write(agent=agent, user_id="", path="memory/conformance.md", embed=False,
                          content="# Conformance\nThe MCP conformance suite ran against this agent.\n")
    skill_publish(agent=agent, name="test_simple_prompt", description="A simple prompt (the suite's fixture).",
                  content="This is a simple prompt for testing.")
    skill_publish(agent=agent, name="test_prompt_with_arguments", description="A prompt with two arguments "
                  "(the suite's fixture).", arguments=["arg1: First test argument", "arg2: Second test argument"],
                  content="Prompt with arguments: arg1='{{arg1}}', arg2='{{arg2}}'")


def start_goclaw(env: dict[str, str], log: Path) -> tuple[UpProcess, int]:
    """`manage.py up` with `env` (its database, data dir) on free ports; returns it and its MCP port once both the
    main port is healthy and the MCP port answers (401 without a token)."""
    mcp_port = free_port()
    up = UpProcess({**env, "GOCLAW_MCP_PORT": str(mcp_port)}, free_port(), free_port(), log)

    def mcp_answers() -> bool:
        try:
            return httpx.post(f"http://127.0.0.1:{mcp_port}/mcp", timeout=2).status_code == 401
        except httpx.HTTPError:
            return False

    try:
        up.wait_healthy()
        wait_until(mcp_answers, timeout=60, interval=0.2, message="the MCP port of `up`")
    except BaseException:
        up.stop()
        raise
    return up, mcp_port


def capabilities(url: str, revision: str) -> dict[str, Any]:
    """The server capabilities goclaw declares at `revision` (initialize's result for the handshake era,
    server/discover's for 2026-07-28); {} when it answers neither (then nothing conditional applies)."""
    client = {"name": "goclaw-conformance-harness", "version": "1"}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": revision}
    if revision == "2026-07-28":
        body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": revision, "io.modelcontextprotocol/clientInfo": client,
            "io.modelcontextprotocol/clientCapabilities": {}}}}
        headers["Mcp-Method"] = "server/discover"
    else:
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": revision, "capabilities": {}, "clientInfo": client}}
    try:
        answer = httpx.post(url, json=body, headers=headers, timeout=30)
        message = _json_rpc_message(answer)
        session = answer.headers.get("mcp-session-id")
        if session:
            httpx.delete(url, headers={"Mcp-Session-Id": session, "MCP-Protocol-Version": revision}, timeout=30)
    except (httpx.HTTPError, ValueError):
        return {}
    result = message.get("result") if isinstance(message, dict) else None
    return dict(result.get("capabilities") or {}) if isinstance(result, dict) else {}


def _json_rpc_message(answer: httpx.Response) -> Any:
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        for line in answer.text.splitlines():
            if line.startswith("data:"):
                return json.loads(line[5:])
        return None
    return answer.json()


# --- running the suite ---------------------------------------------------------------------------------------------
def run_suites(url: str, out_root: Path, revisions: tuple[str, ...] = REVISIONS) -> dict[str, int]:
    """Run the suite for each revision at the same time (separate processes, separate result directories
    out_root/<revision>, output in out_root/<revision>.log); their exit codes."""
    installed_version()
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    running = {}
    for revision in revisions:
        log = (out_root / f"{revision}.log").open("wb")
        command = [str(NODE), str(ENTRY), "server", "--url", url, "--requirements", revision,
                   "-o", str(out_root / revision), "--timeout", str(SCENARIO_TIMEOUT_MS)]
        running[revision] = (subprocess.Popen(command, cwd=out_root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL), log)
    codes = {}
    try:
        for revision, (process, _) in running.items():
            codes[revision] = process.wait(RUN_TIMEOUT_S)
    finally:
        for process, log in running.values():
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
    return codes


def read_checks(result_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """scenario -> the checks the suite wrote for it (server-<scenario>-<timestamp>/checks.json)."""
    found: dict[str, tuple[str, list]] = {}
    for checks in sorted(result_dir.glob("server-*/checks.json")) if result_dir.exists() else []:
        match = _RESULT_DIR.match(checks.parent.name)
        if match:
            found[match["scenario"]] = (checks.parent.name, json.loads(checks.read_text()))
    return {scenario: checks for scenario, (_, checks) in found.items()}


# --- scoring --------------------------------------------------------------------------------------------------------
@dataclass
class Row:
    """One scenario's line: `outcome` is pass, FAIL, n/a (set aside, with what it did when run), or
    `not scored` (run by the suite for information only)."""

    scenario: str
    outcome: str
    detail: str = ""
    failures: list[str] = field(default_factory=list)


@dataclass
class Report:
    revision: str
    suite_exit: int
    capabilities: dict[str, Any]
    rows: list[Row]
    log: Path

    def _count(self, outcome: str) -> int:
        return sum(row.outcome == outcome for row in self.rows)

    @property
    def failing(self) -> list[Row]:
        return [row for row in self.rows if row.outcome == "FAIL"]

    @property
    def applicable(self) -> int:
        return self._count("pass") + self._count("FAIL")

    @property
    def passed(self) -> int:
        return self._count("pass")

    @property
    def not_applicable(self) -> list[str]:
        return [row.scenario for row in self.rows if row.outcome.startswith("n/a")]

    def summary(self) -> str:
        informational = [row for row in self.rows if row.outcome.startswith("not scored")]
        passing_extra = sum(row.outcome.endswith("pass") for row in informational)
        return (f"{self.revision}: {self.passed}/{self.applicable} applicable required scenarios pass, "
                f"{len(self.not_applicable)} not applicable; not scored by the suite: {passing_extra}/"
                f"{len(informational)} pass")


def _verdict(checks: list[dict[str, Any]], excluded: tuple[str, ...] = ()) -> tuple[bool, list[str], list[str]]:
    """(passed, failure messages, warning messages) of a scenario's checks, minus the excluded check ids."""
    considered = [check for check in checks if check.get("id") not in excluded]
    failures = [f"{check.get('id')}: {_one_line(check.get('errorMessage') or check.get('description') or '')}"
                for check in considered if check.get("status") == "FAILURE"]
    warnings = [f"{check.get('id')}: {_one_line(check.get('errorMessage') or '')}"
                for check in considered if check.get("status") == "WARNING"]
    if not considered:
        failures.append("the suite recorded no check for this scenario")
    return not failures, failures, warnings


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def evaluate(revision: str, results: dict[str, list[dict[str, Any]]], entries: list[NotApplicable],
             caps: dict[str, Any], suite_exit: int = 0, log: Path = Path()) -> Report:
    """Score one revision's results (module docstring)."""
    reqs = requirements(revision)
    rows = []
    for scenario in reqs.required:
        checks = results.get(scenario)
        relevant = [entry for entry in entries if entry.scenario == scenario and entry.applies(revision, caps)]
        whole = next((entry for entry in relevant if not entry.checks), None)
        if checks is None:
            rows.append(Row(scenario, "n/a (not run)" if whole else "FAIL", whole.reason if whole else "",
                            [] if whole else ["the suite wrote no result for this scenario (see the run's log)"]))
            continue
        if whole:
            ran, _, _ = _verdict(checks)
            rows.append(Row(scenario, f"n/a (ran: {'pass' if ran else 'fail'})", whole.reason))
            continue
        excluded = tuple(check for entry in relevant for check in entry.checks)
        passed, failures, warnings = _verdict(checks, excluded)
        notes = [f"set aside: {', '.join(excluded)}"] if excluded else []
        notes += [f"warning {message}" for message in warnings]
        rows.append(Row(scenario, "pass" if passed else "FAIL", "; ".join(failures + notes), failures))
    for scenario, reason in reqs.not_scored.items():
        checks = results.get(scenario)
        if checks is None:
            rows.append(Row(scenario, "not scored: not run", reason))
            continue
        passed, failures, _ = _verdict(checks)
        rows.append(Row(scenario, f"not scored: {'pass' if passed else 'fail'}",
                        f"{reason}" + (f"; {'; '.join(failures)}" if failures else "")))
    return Report(revision, suite_exit, caps, rows, log)


def render(report: Report, width: int = 200) -> str:
    """The per-scenario table of one revision."""
    name_width = max(len(row.scenario) for row in report.rows)
    outcome_width = max(len(row.outcome) for row in report.rows)
    lines = [f"== MCP conformance {report.revision} ({PACKAGE_NAME} {pinned_version()}), "
             f"capabilities: {json.dumps(report.capabilities, sort_keys=True)}"]
    for row in report.rows:
        detail = row.detail
        room = max(40, width - name_width - outcome_width - 4)
        detail = detail if len(detail) <= room or row.outcome == "FAIL" else detail[:room - 1] + "…"
        lines.append(f"{row.scenario:<{name_width}}  {row.outcome:<{outcome_width}}  {detail}".rstrip())
    lines.append(report.summary())
    return "\n".join(lines)


def conformance_run(mcp_port: int, token: str, out_root: Path) -> dict[str, Report]:
    """The whole harness against goclaw's MCP port: the forwarder with the agent's token, the capabilities each
    revision declares, both suite runs at once, and their reports."""
    out_root.mkdir(parents=True, exist_ok=True)
    entries = not_applicable_entries()
    with TokenProxy(mcp_port, token) as proxy:
        caps = {revision: capabilities(proxy.url, revision) for revision in REVISIONS}
        codes = run_suites(proxy.url, out_root)
    return {revision: evaluate(revision, read_checks(out_root / revision), entries, caps[revision], codes[revision],
                               out_root / f"{revision}.log")
            for revision in REVISIONS}


def figures(reports: dict[str, Report]) -> dict[str, Any]:
    """The JSON the benchmark writes: per revision, passed/applicable, what is not applicable, what fails."""
    return {"suite": f"{PACKAGE_NAME}@{pinned_version()}", "revisions": {
        revision: {"passed": report.passed, "applicable": report.applicable,
                   "not_applicable": report.not_applicable,
                   "failing": {row.scenario: row.failures for row in report.failing},
                   "not_scored": {row.scenario: row.outcome.removeprefix("not scored: ")
                                  for row in report.rows if row.outcome.startswith("not scored")},
                   "capabilities": report.capabilities}
        for revision, report in reports.items()}}
