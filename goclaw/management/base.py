"""The base of goclaw's operational commands (create_agent, issue_token, config_import, …)."""
from django.core.management.base import BaseCommand


class OperationalCommand(BaseCommand):
    """A command people run by hand and in scripts: it skips Django's system checks, which load the whole URLconf
    (every view, the admin, the MCP SDK: ~1.5 s of each run). `manage.py check`, `migrate` and `up` run them, so a
    misconfiguration still stops the server from starting."""

    requires_system_checks = []
