"""The dependency contracts of DESIGN.md §2 (`.importlinter`, run by `make check`): they hold on the real tree, and
each one fails, naming itself and the offending import, when a copy of the tree gets a violating import."""
from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = ("goclaw", "tools_app", "sandbox_app", "mcp_app", "teams_app", "runtime_app", "config_app", "console_app")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path, *contracts: str) -> subprocess.CompletedProcess:
    """lint-imports with the repository's configuration, on the tree at `cwd` (only the named contracts, if any)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["COLUMNS"] = "300"  # one line per contract, so a contract's name and its verdict stay together
    args = [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(cwd / ".importlinter")]
    for contract in contracts:
        args += ["--contract", contract]
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of the apps' source and of the contracts, to add a violating import to."""
    for app in APPS:
        shutil.copytree(ROOT / app, tmp_path / app, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def add_module(tree: Path, dotted: str, source: str) -> None:
    path = tree.joinpath(*dotted.split(".")).with_suffix(".py")
    path.write_text(source)


def assert_broken(tree: Path, contract: str, *evidence: str) -> None:
    """Checked on `tree`, `contract` (its id in .importlinter) is reported broken by name, with `evidence`."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    name = config[f"importlinter:contract:{contract}"]["name"]
    result = lint_imports(tree, contract)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert f"{name} BROKEN" in output, output
    for text in evidence:
        assert text in output, output


def test_the_real_tree_keeps_every_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_goclaw_importing_an_app_even_inside_a_function_breaks_its_contract(tree):
    add_module(tree, "goclaw.leak", "def token(raw):\n    from tools_app.services.agents import token_authenticate\n"
                                    "    return token_authenticate(raw)\n")
    assert_broken(tree, "goclaw-imports-no-app",
                  "goclaw is not allowed to import tools_app", "goclaw.leak -> tools_app.services.agents (l.2)")


def test_sandbox_app_importing_tools_app_breaks_its_contract(tree):
    add_module(tree, "sandbox_app.leak", "from tools_app.models import Agent\n")
    assert_broken(tree, "sandbox-app-imports-no-other-app",
                  "sandbox_app is not allowed to import tools_app", "sandbox_app.leak -> tools_app.models (l.1)")


def test_tools_app_importing_mcp_app_breaks_its_contract(tree):
    add_module(tree, "mcp_app.servers", "SERVERS = {}\n")
    add_module(tree, "tools_app.leak", "from mcp_app.servers import SERVERS\n")
    assert_broken(tree, "tools-app-never-imports-its-dependents",
                  "tools_app is not allowed to import mcp_app", "tools_app.leak -> mcp_app.servers (l.1)")


def test_an_app_importing_config_app_breaks_its_contract(tree):
    add_module(tree, "teams_app.leak", "from config_app.services import config_export\n")
    assert_broken(tree, "no-app-imports-config-app",
                  "teams_app is not allowed to import config_app", "teams_app.leak -> config_app.services (l.1)")


def test_a_cycle_hidden_in_a_function_local_import_breaks_the_acyclic_contract(tree):
    add_module(tree, "teams_app.board", "from teams_app.tasks import claim\n")
    add_module(tree, "teams_app.tasks", "def claim():\n    from teams_app import board\n    return board\n")
    assert_broken(tree, "no-cycles-inside-an-app",
                  "No cycles are allowed in teams_app")
