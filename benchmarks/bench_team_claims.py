"""Team board claims: 16 worker processes claiming and completing 10,000 tasks of one team.

Each worker is a separate process (multiprocessing spawn: its own `django.setup()` and its own PostgreSQL connection)
acting as one member agent (its Agent, Team and Actor are read once, before the release). Released together by a
barrier, each loops `task_claim(actor, team)` then `task_complete(actor, task, result)` until nothing is claimable.
On this common path each service runs one statement (prepared once per connection) and its COMMIT: the claim picks
the best pending task (`FOR UPDATE SKIP LOCKED`), checks membership and the team's status, changes the row and
writes the `claimed` event in one CTE; the completion likewise, and runs the finishing logic (dependents,
delegation) only when the statement reports there is some. Anything else falls back to the full checks. Measured: wall time from the release to the last completion, claims/s = tasks / seconds (target
>= 2,000 claims/s; pg-boss does ~2,400 jobs/s on 4 CPUs, procrastinate ~270), completions/s, and each call's
latency under load (p50/p99, from the workers). Events are delivered as in production (background sender thread,
the configured channel layer).

Proof of zero double claims, asserted on the database after the run: every task completed, exactly one `claimed`
TeamEvent per task, each task's owner and its claimed event's actor = the worker that reported claiming it, and the
union of the workers' claims has no duplicates and size = tasks. A failed proof exits non-zero.

Set-up is not measured: a sample of tasks is created through `task_create` (its rate is reported), the rest with one
bulk INSERT with consecutive numbers and `task_counter` set to the last (no `created` events for those). Then one
process, alone, claims and completes a few hundred tasks of a second team with every SQL statement timed and counted
(`profile`): statements and milliseconds per claim and per complete, by statement, and the cost of event publishing.
The CPU seconds the workers and the PostgreSQL backends spend per claim+complete are read from /proc: on a machine
of C cores the ceiling is about C / (CPU seconds per cycle) cycles per second.

    python benchmarks/bench_team_claims.py [--tasks 10000] [--workers 16]     # quick check: --tasks 2000 --workers 4
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as queue_module
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from _common import BENCH_DATA, django_setup, summary_ms, write_result

TEAM = "bench-claims"
PROFILE_TEAM = "bench-claims-profile"
LEAD_KEY = "bench-claims-lead"
WORKER_KEY = "bench-claims-w{:02d}"
TARGET_CLAIMS_PER_SECOND = 2000
SERVICE_CREATED = 200  # tasks made through task_create during set-up (its rate is reported), the rest bulk-inserted
EMPTY_RECHECKS = 50  # a worker told "nothing to claim" while pending tasks remain retries (never seen: counted)


# --- workers -----------------------------------------------------------------------------------------------------

def worker(index: int, team_id: int, agent_key: str, barrier, results, may_exit, sync_commit: str,
           batch: int) -> None:
    """One member agent in its own process: set up, wait for the release, claim and complete until nothing is left,
    report (task ids, latencies, CPU), then keep the connection open until the parent has read the server's CPU."""
    import django

    django.setup()
    from django.db import connection

    from goclaw.errors import ApplicationError
    from teams_app.actors import Actor
    from teams_app.choices import TaskStatus
    from teams_app.models import Team, TeamTask
    from teams_app.services.tasks import task_claim, task_claim_many, task_complete, task_complete_many
    from tools_app.models import Agent

    report: dict = {"index": index, "agent": agent_key, "claims": [], "claim_s": [], "complete_s": [], "completed": 0,
                    "errors": Counter(), "empty_rechecks": 0, "error_samples": []}
    try:
        agent = Agent.objects.get(key=agent_key)
        team = Team.objects.get(pk=team_id)
        actor = Actor.for_agent(agent)
        report["agent_id"] = agent.pk
        connection.ensure_connection()
        report["backend_pid"] = connection.connection.info.backend_pid
        if sync_commit != "on":
            with connection.cursor() as cursor:
                cursor.execute("SET synchronous_commit = %s" % ("off" if sync_commit == "off" else "on"))
        TeamTask.objects.filter(team=team, status=TaskStatus.PENDING).exists()  # warm the connection and the ORM
    except Exception as exc:  # reported to the parent, which stops the run
        report["setup_error"] = f"{type(exc).__name__}: {exc}"
        barrier.abort()
        results.put(report)
        return
    try:
        barrier.wait(timeout=300)
    except Exception:
        report["setup_error"] = "the barrier was broken (another worker failed to set up)"
        results.put(report)
        return
    started, cpu0, thread0 = time.monotonic(), time.process_time(), time.thread_time()
    pending_left = True
    while pending_left:
        t0 = time.perf_counter()
        try:
            tasks = (task_claim_many(actor=actor, team=team, count=batch) if batch > 1
                     else [task_claim(actor=actor, team=team)])
        except ApplicationError as exc:
            tasks = []
            claim_error = exc
        else:
            claim_error = None
        t1 = time.perf_counter()
        if not tasks:
            # Nothing claimable: done, unless pending tasks remain (then the claim lost a race it should not lose).
            if not TeamTask.objects.filter(team=team, status=TaskStatus.PENDING).exists():
                break
            report["empty_rechecks"] += 1
            if claim_error is not None:
                report["errors"][f"claim:{claim_error.code}"] += 1
                if len(report["error_samples"]) < 5:
                    report["error_samples"].append(f"claim: {claim_error.message}")
            pending_left = report["empty_rechecks"] < EMPTY_RECHECKS
            continue
        report["claims"].extend(task.pk for task in tasks)
        report["claim_s"].append(t1 - t0)
        t2 = time.perf_counter()
        result = f"done by {agent_key}"
        if batch > 1:
            answers = task_complete_many(actor=actor, results=[(task, result) for task in tasks])
        else:
            try:
                answers = [task_complete(actor=actor, task=tasks[0], result=result)]
            except ApplicationError as exc:
                answers = [exc]
        for task, answer in zip(tasks, answers):
            if isinstance(answer, ApplicationError):
                report["errors"][f"complete:{answer.code}"] += 1
                if len(report["error_samples"]) < 5:
                    report["error_samples"].append(f"complete {task.pk}: {answer.message}")
            else:
                report["completed"] += 1
        report["complete_s"].append(time.perf_counter() - t2)
    report["started"], report["finished"] = started, time.monotonic()
    report["cpu_s"] = time.process_time() - cpu0  # with the event sender thread
    report["main_thread_cpu_s"] = time.thread_time() - thread0
    report["errors"] = dict(report["errors"])
    results.put(report)
    may_exit.wait(timeout=600)  # the parent reads the PostgreSQL backends' CPU while they are still alive


# --- PostgreSQL CPU from /proc --------------------------------------------------------------------------------

def postgres_cpu() -> dict[int, float]:
    """{pid: utime + stime seconds} of every process of the benchmark's PostgreSQL cluster (the postmaster's
    children: backends, WAL writer, checkpointer, …); {} when it cannot be read."""
    pidfile = BENCH_DATA / "var" / "postgres" / "postmaster.pid"
    try:
        postmaster = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return {}
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            out[int(entry.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def postgres_cpu_delta(before: dict[int, float], after: dict[int, float], worker_backends: list[int]) -> dict:
    """CPU the cluster spent between two snapshots: in the workers' own backends, and in everything else (the
    event layer's pool connections, opened after the release, the WAL writer, …)."""
    if not after:
        return {"available": False}
    own = set(worker_backends)
    delta = {pid: cpu - before.get(pid, 0.0) for pid, cpu in after.items()}
    return {"available": True, "backends": sum(d for pid, d in delta.items() if pid in own),
            "others": sum(d for pid, d in delta.items() if pid not in own)}


def cpu_calibration_ms() -> float:
    """CPU milliseconds of a fixed pure-Python workload (best of 3): how fast this machine is right now, to compare
    runs across machines and loads (lower is faster; CPU time, so it grows when cores are shared, e.g. SMT)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.thread_time()
        total = 0
        for i in range(1_000_000):
            total += i * i % 7
        best = min(best, time.thread_time() - t0)
    return round(best * 1000, 1)


# --- set-up --------------------------------------------------------------------------------------------------

def agents(n: int):
    """The lead and n member agents, made once and reused by later runs."""
    from tools_app.models import Agent
    from tools_app.services.agents import agent_create

    def get(key: str):
        return Agent.objects.filter(key=key).first() or agent_create(key=key, provider="openai")

    return get(LEAD_KEY), [get(WORKER_KEY.format(i + 1)) for i in range(n)]


def fresh_team(name: str, lead, members):
    """Delete the previous run's team (its tasks and events go with it) and make it again through team_create."""
    from teams_app.actors import Actor
    from teams_app.models import Team
    from teams_app.services.teams import team_create

    Team.objects.filter(name=name).delete()
    return team_create(actor=Actor.system("bench"), name=name, lead=lead,
                       members=[(agent, "member") for agent in members],
                       description="benchmark: concurrent claims")


def fill(team, n: int, through_service: int) -> dict:
    """n pending, unassigned tasks: `through_service` of them via task_create (timed), the rest bulk-inserted with
    consecutive numbers, then team.task_counter set to the last number. Priorities vary (0..3) so the claim order
    is exercised."""
    from django.db import connection, transaction

    from teams_app.actors import Actor
    from teams_app.models import Team, TeamTask
    from teams_app.services.tasks import task_create

    lead_actor = Actor.for_agent(team.lead)
    through_service = min(through_service, n)
    t0 = time.perf_counter()
    for i in range(through_service):
        task_create(actor=lead_actor, team=team, subject=f"bench task {i + 1}", priority=i % 4,
                    description="a unit of work for the claims benchmark")
    service_s = time.perf_counter() - t0
    team.refresh_from_db()
    start = team.task_counter
    t0 = time.perf_counter()
    with transaction.atomic():
        TeamTask.objects.bulk_create(
            [TeamTask(team=team, number=start + i + 1, subject=f"bench task {start + i + 1}", priority=(start + i) % 4,
                      description="a unit of work for the claims benchmark", created_by=str(lead_actor))
             for i in range(n - through_service)], batch_size=2000)
        Team.objects.filter(pk=team.pk).update(task_counter=start + n - through_service)
    bulk_s = time.perf_counter() - t0
    with connection.cursor() as cursor:  # each run starts from a vacuumed board, not the last run's dead rows
        for table in ("teams_app_teamtask", "teams_app_teamevent"):
            cursor.execute(f"VACUUM (ANALYZE) {table}")
    return {"through_task_create": through_service, "task_create_seconds": round(service_s, 3),
            "task_create_per_second": round(through_service / service_s, 1) if through_service else None,
            "bulk_inserted": n - through_service, "bulk_insert_seconds": round(bulk_s, 3)}


# --- the concurrent run ---------------------------------------------------------------------------------------

def run_workers(team, members, sync_commit: str, batch: int) -> tuple[list[dict], dict]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(members) + 1)
    results = ctx.Queue()
    may_exit = ctx.Event()
    procs = [ctx.Process(target=worker, args=(i, team.pk, m.key, barrier, results, may_exit, sync_commit, batch),
                         name=f"claims-worker-{i}") for i, m in enumerate(members)]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout=300)
    except Exception:
        pass  # a worker failed to set up: its report says why
    released = time.monotonic()
    cpu_before = postgres_cpu()
    load_start = os.getloadavg()
    reports = []
    while len(reports) < len(procs):
        try:
            reports.append(results.get(timeout=5))
        except queue_module.Empty:
            if not any(p.is_alive() for p in procs):  # a worker died without reporting (its traceback is above)
                break
    collected = time.monotonic()
    pids = [r["backend_pid"] for r in reports if "backend_pid" in r]
    cpu = postgres_cpu_delta(cpu_before, postgres_cpu(), pids)
    may_exit.set()
    for p in procs:
        p.join(timeout=60)
        if p.is_alive():
            p.terminate()
    return reports, {"released": released, "collected": collected, "postgres_cpu": cpu,
                     "loadavg_at_release": [round(x, 2) for x in load_start],
                     "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]}


def prove(team, reports: list[dict], tasks: int) -> dict:
    """Zero double claims, asserted on the database and on what the workers reported."""
    from django.db.models import Count

    from teams_app.choices import TaskStatus, TeamEventType
    from teams_app.models import TeamEvent, TeamTask

    claimed_by: dict[int, list[str]] = defaultdict(list)
    agent_of_key = {r["agent"]: r.get("agent_id") for r in reports}
    for r in reports:
        for task_id in r["claims"]:
            claimed_by[task_id].append(r["agent"])
    union = [t for r in reports for t in r["claims"]]
    duplicates_reported = len(union) - len(set(union))

    rows = dict(TeamTask.objects.filter(team=team).values_list("pk", "status"))
    owners = dict(TeamTask.objects.filter(team=team).values_list("pk", "owner_id"))
    not_completed = sum(1 for status in rows.values() if status != TaskStatus.COMPLETED)
    event_counts = dict(TeamEvent.objects.filter(team=team, event_type=TeamEventType.CLAIMED)
                        .values_list("task_id").annotate(n=Count("id")).values_list("task_id", "n"))
    event_actor = dict(TeamEvent.objects.filter(team=team, event_type=TeamEventType.CLAIMED)
                       .values_list("task_id", "actor"))
    tasks_with_several_claim_events = sum(1 for n in event_counts.values() if n > 1)
    tasks_without_claim_event = sum(1 for pk in rows if event_counts.get(pk, 0) == 0)
    owner_mismatch = sum(1 for pk, keys in claimed_by.items()
                         if len(keys) != 1 or owners.get(pk) != agent_of_key[keys[0]])
    actor_mismatch = sum(1 for pk, keys in claimed_by.items()
                         if len(keys) != 1 or event_actor.get(pk) != f"agent:{keys[0]}")
    unknown_claims = sum(1 for pk in claimed_by if pk not in rows)
    proof = {
        "tasks_in_db": len(rows), "completed_in_db": len(rows) - not_completed, "not_completed": not_completed,
        "claimed_events": sum(event_counts.values()), "tasks_with_several_claimed_events": tasks_with_several_claim_events,
        "tasks_without_claimed_event": tasks_without_claim_event,
        "reported_claims": len(union), "reported_distinct": len(set(union)), "reported_duplicates": duplicates_reported,
        "owner_differs_from_reporting_worker": owner_mismatch, "claimed_event_actor_differs": actor_mismatch,
        "claims_of_unknown_tasks": unknown_claims,
    }
    proof["double_claims"] = duplicates_reported + tasks_with_several_claim_events
    proof["ok"] = (proof["double_claims"] == 0 and not_completed == 0 and len(rows) == tasks
                   and len(set(union)) == tasks and len(union) == tasks and tasks_without_claim_event == 0
                   and owner_mismatch == 0 and actor_mismatch == 0 and unknown_claims == 0)
    return proof


# --- the single-process profile ------------------------------------------------------------------------------

_TABLE_RE = re.compile(r'\b(?:FROM|UPDATE|INTO)\s+"?([a-z_0-9]+)"?', re.IGNORECASE)


def statement_label(sql: str) -> str:
    """'SELECT teams_app_teamtask' / 'UPDATE teams_app_teamtask' / 'SAVEPOINT' / …: what a statement does."""
    head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else "?"
    if head in ("SAVEPOINT", "RELEASE", "ROLLBACK", "COMMIT", "BEGIN", "SET"):
        return head
    table = _TABLE_RE.search(sql)
    label = f"{head} {table.group(1) if table else ''}".strip()
    if head == "SELECT" and "FOR UPDATE" in sql.upper():
        label += " FOR UPDATE" + (" SKIP LOCKED" if "SKIP LOCKED" in sql.upper() else "")
    return label


class StatementTimer:
    """Counts and times every statement (execute_wrapper) and every COMMIT of the default connection."""

    def __init__(self) -> None:
        self.samples: list[tuple[str, float]] = []
        self.last_sql: list[str] = []  # the statements of the last step, shortened (shown in the result)

    def __call__(self, execute, sql, params, many, context):
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.samples.append((statement_label(sql), time.perf_counter() - t0))
            self.last_sql.append(" ".join(sql.split())[:240])

    def take(self) -> list[tuple[str, float]]:
        out, self.samples, self.sql_of_step = self.samples, [], self.last_sql
        self.last_sql = []
        return out


def _no_publish(*args, **kwargs) -> None:
    return None


def profile(lead, member, cycles: int) -> dict:
    """One process alone claims and completes `cycles` tasks: statements and ms per claim and per complete (by
    statement), Python time outside SQL, and the same with goclaw.events.publish and publish_many replaced by a no-op."""
    from django.db import connection, connections

    import goclaw.events
    from teams_app.actors import Actor
    from teams_app.services.tasks import task_claim, task_complete

    team = fresh_team(PROFILE_TEAM, lead, [member])
    fill(team, 2 * cycles + 40, through_service=0)
    actor = Actor.for_agent(member)
    timer = StatementTimer()
    wrapper = connections["default"]
    original_commit = wrapper.commit

    def timed_commit():
        t0 = time.perf_counter()
        try:
            return original_commit()
        finally:
            timer.samples.append(("COMMIT", time.perf_counter() - t0))
            timer.last_sql.append("COMMIT")

    def backend_cpu(pid: int) -> float:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    publish_refs = [(mod, name) for mod in list(sys.modules.values())
                    if mod is not None and getattr(mod, "__name__", "").startswith(("teams_app", "goclaw.events"))
                    for name in ("publish", "publish_many")
                    if getattr(mod, name, None) in (goclaw.events.publish, goclaw.events.publish_many)]
    originals = [(mod, name, getattr(mod, name)) for mod, name in publish_refs]

    def set_publish(on: bool) -> None:
        for mod, name, fn in originals:
            setattr(mod, name, fn if on else _no_publish)

    # The two modes alternate cycle by cycle, so a change in the machine's load affects both alike.
    modes = ("with_events", "publish_patched_out")
    per = {m: {"claim": [], "complete": []} for m in modes}
    cpu = {m: {"claim": 0.0, "complete": 0.0, "postgres": 0.0} for m in modes}
    sql_of: dict[str, list[str]] = {}
    n = max(1, cycles // 2)
    wrapper.commit = timed_commit
    try:
        with connection.execute_wrapper(timer):
            for _ in range(20):  # warm-up
                task_complete(actor=actor, task=task_claim(actor=actor, team=team), result="warm")
            timer.take()
            backend = connection.connection.info.backend_pid
            for i in range(2 * n):
                mode = modes[i % 2]
                set_publish(mode == "with_events")
                pg0 = backend_cpu(backend)
                t0, c0 = time.perf_counter(), time.thread_time()
                task = task_claim(actor=actor, team=team)
                t1, c1 = time.perf_counter(), time.thread_time()
                per[mode]["claim"].append((t1 - t0, timer.take()))
                sql_of["claim"] = timer.sql_of_step
                t1, c1 = time.perf_counter(), time.thread_time()
                task_complete(actor=actor, task=task, result="profiled")
                t2, c2 = time.perf_counter(), time.thread_time()
                per[mode]["complete"].append((t2 - t1, timer.take()))
                sql_of["complete"] = timer.sql_of_step
                cpu[mode]["claim"] += c1 - c0
                cpu[mode]["complete"] += c2 - c1
                cpu[mode]["postgres"] += backend_cpu(backend) - pg0
    finally:
        set_publish(True)
        del wrapper.commit
    goclaw.events.flush(10)

    def summarize(mode: str, detail: bool) -> dict:
        out: dict = {"postgres_backend_cpu_ms_per_cycle": round(cpu[mode]["postgres"] / n * 1000, 3)}
        for step, items in per[mode].items():
            totals = [t for t, _ in items]
            sql_s = [sum(d for _, d in stmts) for _, stmts in items]
            by_label: dict[str, list[float]] = defaultdict(list)
            for _, stmts in items:
                for label, d in stmts:
                    by_label[label].append(d)
            out[step] = {
                "statements": round(statistics.fmean(len(st) for _, st in items), 2),
                "mean_ms": round(statistics.fmean(totals) * 1000, 3),
                "sql_and_commit_ms": round(statistics.fmean(sql_s) * 1000, 3),
                "python_ms": round((statistics.fmean(totals) - statistics.fmean(sql_s)) * 1000, 3),
                "python_cpu_ms": round(cpu[mode][step] / n * 1000, 3),
            }
            if detail:
                out[step]["by_statement"] = {
                    label: {"per_call": round(len(ds) / n, 2), "mean_ms": round(statistics.fmean(ds) * 1000, 3)}
                    for label, ds in sorted(by_label.items(), key=lambda kv: -sum(kv[1]))}
                out[step]["statements_of_one_call"] = sql_of.get(step, [])
        return out

    normal, silent = summarize(modes[0], True), summarize(modes[1], False)
    cycle_ms = normal["claim"]["mean_ms"] + normal["complete"]["mean_ms"]
    silent_ms = silent["claim"]["mean_ms"] + silent["complete"]["mean_ms"]
    cycle_cpu = normal["claim"]["python_cpu_ms"] + normal["complete"]["python_cpu_ms"]
    silent_cpu = silent["claim"]["python_cpu_ms"] + silent["complete"]["python_cpu_ms"]
    return {"cycles_each": n, "modes_interleaved": True, "with_events": normal, "publish_patched_out": silent,
            "publish_modules_patched": sorted({mod.__name__ for mod, _ in publish_refs}),
            "cycle_ms": round(cycle_ms, 3), "cycle_ms_without_publish": round(silent_ms, 3),
            "publish_cost_ms_per_cycle": round(cycle_ms - silent_ms, 3),
            "publish_cost_python_cpu_ms_per_cycle": round(cycle_cpu - silent_cpu, 3),
            "note": "publish patched out = goclaw.events.publish and publish_many replaced by a no-op: the payload's JSON round trip and "
                    "the hand-off to the sender thread are saved; task_as_dict still runs (its blocked_by comes from the "
                    "statement, no query). "
                    "The sender thread's own CPU is not in python_cpu_ms (main thread only)",
            "single_process_cycles_per_second": round(1000 / cycle_ms, 1)}


# --- main ----------------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--batch", type=int, default=50,
                        help="tasks per claim and per complete call in the batch run (a single-task run goes first)")
    parser.add_argument("--repeat", type=int, default=5, help="batch runs, each on a fresh board (met: the slowest)")
    parser.add_argument("--profile-cycles", type=int, default=400, help="claim+complete cycles profiled (0: none)")
    parser.add_argument("--synchronous-commit", choices=("on", "off"), default="on",
                        help="diagnostic only: the workers' sessions with synchronous_commit off (no WAL flush wait)")
    parser.add_argument("--no-write", action="store_true", help="print the result without writing results/*.json")
    args = parser.parse_args()
    if args.tasks < 1 or args.workers < 1 or args.repeat < 1 or not 1 <= args.batch <= 50:
        sys.exit("--tasks, --workers and --repeat must be positive, --batch from 1 to 50")

    django_setup()
    from django.conf import settings
    from django.db import connection

    calibration_before = cpu_calibration_ms()
    lead, members = agents(args.workers)
    runs = {}
    plan = [("single", 1)] + [(f"batch_{args.batch}" + (f"_run{i + 1}" if args.repeat > 1 else ""), args.batch)
                              for i in range(args.repeat if args.batch > 1 else 0)]
    for mode, batch in plan:
        print(f"{mode}: {args.tasks} tasks, {args.workers} workers…", flush=True)
        runs[mode] = measure(lead, members, args, batch)
        connection.close()
    profiled = None
    if args.profile_cycles:
        print("profiling one process alone…", flush=True)
        profiled = profile(lead, members[0], args.profile_cycles)

    batch_rates = [run["claims_per_second"] for mode, run in runs.items() if mode != "single"] or [
        runs["single"]["claims_per_second"]]
    proof_ok = all(run["proof"]["ok"] for run in runs.values())
    rate = min(batch_rates)  # the slowest run is the figure: the target must hold every time, not on a good run
    result = {
        "tasks": args.tasks, "workers": args.workers, "batch": args.batch, "repeat": args.repeat,
        "claims_per_second": rate, "batch_runs_claims_per_second": batch_rates,
        "batch_median_claims_per_second": statistics.median(batch_rates),
        "single_task_claims_per_second": runs["single"]["claims_per_second"],
        "target_claims_per_second": TARGET_CLAIMS_PER_SECOND, "met": rate >= TARGET_CLAIMS_PER_SECOND and proof_ok,
        "double_claims": sum(run["double_claims"] for run in runs.values()),
        "note": "claims_per_second is the slowest of the batch runs (each on a fresh, vacuumed board), where each worker claims up to `batch` tasks per call (task_claim_many: "
                "each task claimed as by task_claim, with its own lock and claimed event) and completes them in one "
                "call (task_complete_many); single_task_claims_per_second is one task per claim and per complete",
        "runs": runs,
        "synchronous_commit": args.synchronous_commit,
        "events": {"delivery": settings.EVENTS_DELIVERY, "channel_layer": settings.CHANNEL_LAYERS["default"]["BACKEND"]},
        "machine_cores": os.cpu_count(),
        "cpu_calibration_ms": {"before": calibration_before, "after": cpu_calibration_ms()},
        "profile": profiled,
    }
    for mode, run in runs.items():
        print(f"{mode}: {run['claims']} claims by {args.workers} workers in {run['seconds']:.2f}s: "
              f"{run['claims_per_second']:.1f} claims/s, double claims {run['double_claims']}, proof "
              f"{'ok' if run['proof']['ok'] else 'FAILED'}", flush=True)
    print(f"headline (slowest batch run) {rate:.1f} claims/s (target {TARGET_CLAIMS_PER_SECOND})", flush=True)
    if args.no_write:
        import json

        print(json.dumps(result, indent=2))
    else:
        write_result("team_claims", result)
    if not proof_ok:
        sys.exit(f"double claims or lost tasks: {[run['proof'] for run in runs.values()]}")


def measure(lead, members, args, batch: int) -> dict:
    """One run: a fresh board of args.tasks tasks, the workers claiming (`batch` per call) and completing until it
    is empty, the proof on the database, CPU per cycle."""
    from django.db import connection

    team = fresh_team(TEAM, lead, members)
    setup = fill(team, args.tasks, SERVICE_CREATED)
    connection.close()  # the parent holds no connection while the workers run
    reports, timing = run_workers(team, members, args.synchronous_commit, batch)
    failed = [r for r in reports if "setup_error" in r]
    if failed or len(reports) < args.workers:
        sys.exit(f"workers failed: {[r.get('setup_error') for r in failed]}; {len(reports)}/{args.workers} reported")

    seconds = max(r["finished"] for r in reports) - min(r["started"] for r in reports)
    claims = sum(len(r["claims"]) for r in reports)
    completions = sum(r["completed"] for r in reports)
    proof = prove(team, reports, args.tasks)
    client_cpu = sum(r["cpu_s"] for r in reports)
    pg = timing["postgres_cpu"]
    main_cpu = sum(r["main_thread_cpu_s"] for r in reports)
    per_cycle = 1000 / max(1, claims)
    cpu = {"workers_cpu_s": round(client_cpu, 2), "workers_main_thread_cpu_s": round(main_cpu, 2),
           "ms_per_cycle_workers": round(client_cpu * per_cycle, 3),
           "ms_per_cycle_workers_main_thread": round(main_cpu * per_cycle, 3)}
    if pg.get("available"):
        total = client_cpu + pg["backends"] + pg["others"]
        cpu |= {"postgres_worker_backends_cpu_s": round(pg["backends"], 2),
                "postgres_other_processes_cpu_s": round(pg["others"], 2),
                "ms_per_cycle_postgres_worker_backends": round(pg["backends"] * per_cycle, 3),
                "ms_per_cycle_postgres_others": round(pg["others"] * per_cycle, 3),
                "ms_per_cycle_total": round(total * per_cycle, 3),
                "ceiling_cycles_per_second_on_this_machine": round((os.cpu_count() or 1) / (total / max(1, claims)), 1),
                "note": "CPU from the release to the last report; a cycle = one task claimed and completed; ceiling = "
                        "cores / CPU seconds per cycle (what the figure could reach with the machine to itself)"}
    rate = claims / seconds if seconds > 0 else 0.0
    all_claim_s = [s for r in reports for s in r["claim_s"]]
    all_complete_s = [s for r in reports for s in r["complete_s"]]
    per_worker = sorted(len(r["claims"]) for r in reports)
    return {
        "batch": batch, "seconds": round(seconds, 3), "claims": claims, "completions": completions,
        "claims_per_second": round(rate, 1), "completions_per_second": round(completions / seconds, 1),
        "double_claims": proof["double_claims"], "proof": proof,
        "claim_call_latency": summary_ms(all_claim_s) if all_claim_s else None,
        "complete_call_latency": summary_ms(all_complete_s) if all_complete_s else None,
        "claims_per_worker": {"min": per_worker[0], "median": per_worker[len(per_worker) // 2],
                              "max": per_worker[-1]},
        "worker_errors": dict(sum((Counter(r["errors"]) for r in reports), Counter())),
        "worker_error_samples": [s for r in reports for s in r["error_samples"]][:10],
        "empty_rechecks": sum(r["empty_rechecks"] for r in reports),
        "release_to_results_collected_s": round(timing["collected"] - timing["released"], 3),
        "cpu": cpu,
        "loadavg_at_release": timing["loadavg_at_release"], "loadavg_at_end": timing["loadavg_at_end"],
        "set_up": setup | {"note": "not measured: tasks after the first through task_create are bulk-inserted with "
                                   "consecutive numbers and task_counter set (no `created` events for them)"},
    }


if __name__ == "__main__":
    main()
