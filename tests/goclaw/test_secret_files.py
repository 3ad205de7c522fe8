"""Secrets kept in files (SECRET_KEY, the sealing key, the database password when not provisioned): every process of
a start-up that finds none agrees on one, and the file is never seen half-written."""
from __future__ import annotations

import multiprocessing
import secrets
import stat

from goclaw.env import read_or_create_secret_file


def _create(path, barrier, results):
    barrier.wait()
    results.put(read_or_create_secret_file(path, lambda: secrets.token_urlsafe(32)))


def test_processes_starting_together_all_get_the_one_secret_written(tmp_path):
    path = tmp_path / "var" / "secret-key.txt"
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_create, args=(path, barrier, results)) for _ in range(8)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    assert [proc.exitcode for proc in procs] == [0] * 8
    values = {results.get(timeout=5) for _ in procs}
    assert values == {path.read_text().strip()}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret-key.txt"]  # no temporary file left behind


def test_an_existing_secret_is_kept(tmp_path):
    path = tmp_path / "secret.txt"
    first = read_or_create_secret_file(path, lambda: "one")
    assert first == "one"
    assert read_or_create_secret_file(path, lambda: "two") == "one"
