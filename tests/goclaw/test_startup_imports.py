"""Starting fast. A management command (`create_agent`, `issue_token`, `config_import`, …) loads the apps and nothing
it does not use: the admin's screens, the MCP SDK, numpy, tree-sitter, twisted, bashlex and the scrubber's compiled
table load where they are used, and a server loads them before its first request (goclaw.warm; test_web_servers.py).
`up` collects static files only when they changed."""
import json
import os
import subprocess
import sys
import time

from tests.servers import ROOT

HEAVY = ("mcp", "mcp_types", "numpy", "tree_sitter", "tree_sitter_bash", "twisted", "daphne", "bashlex",
         "tools_app.admin", "mcp_app.admin", "mcp_app.bridge.manager")

PROBE = f"""
import json, sys, django
django.setup()
from tools_app.security.scrub.scrubber import default_engine
print(json.dumps({{"loaded": [name for name in {HEAVY!r} if name in sys.modules],
                  "scrubber_compiled": default_engine.cache_info().currsize}}))
"""


def _probe(*argv: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DJANGO_SETTINGS_MODULE": "goclaw.settings"})  # a test process: no database
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_loading_the_apps_imports_no_heavy_package_and_compiles_nothing():
    assert _probe() == {"loaded": [], "scrubber_compiled": 0}


def test_runserver_alone_brings_daphne_for_websockets():
    # daphne's app replaces runserver with its ASGI server (WebSockets in development); every other command skips it
    assert "daphne" in _probe("runserver")["loaded"]


def test_up_collects_static_files_again_only_when_a_source_changed(tmp_path, settings):
    """A restart skips collectstatic (whitenoise compresses every file again, ~1.5 s) unless a source file was added,
    changed or removed, or the collected directory is gone."""
    import shutil

    from goclaw.services import static_collect

    source = tmp_path / "src"
    source.mkdir()
    (source / "app.css").write_text("a{}")
    settings.STATICFILES_FINDERS = ["django.contrib.staticfiles.finders.FileSystemFinder"]
    settings.STATICFILES_DIRS = [source]
    settings.STATIC_ROOT = tmp_path / "static"
    collected = tmp_path / "static" / "app.css"

    assert static_collect() is True and collected.read_text() == "a{}"
    assert static_collect() is False
    (source / "app.css").write_text("b{ }")
    later = time.time() + 5  # collectstatic copies a source newer than its copy by the second: an edit made later
    os.utime(source / "app.css", (later, later))
    assert static_collect() is True and collected.read_text() == "b{ }"
    (source / "new.js").write_text("1")
    assert static_collect() is True and (tmp_path / "static" / "new.js").read_text() == "1"
    assert static_collect() is False
    shutil.rmtree(tmp_path / "static")
    assert static_collect() is True and collected.read_text() == "b{ }"
