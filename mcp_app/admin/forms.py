"""Form pieces the MCP admin screens share: write-only `Name: value` / `NAME=value` lines that are never rendered
again, and a service's per-field problems shown on the form."""
from __future__ import annotations

from django import forms

from goclaw.errors import ApplicationError
from tools_app.admin.base import WriteOnlyTextarea


def write_only_lines(label: str, help_text: str) -> forms.CharField:
    return forms.CharField(required=False, label=label, help_text=help_text,
                           widget=WriteOnlyTextarea(attrs={"rows": 3, "autocomplete": "off"}))


def parse_lines(form: forms.Form, field: str, separator: str) -> dict[str, str]:
    """`name<separator>value` lines of a write-only field; a malformed line is a form error that never echoes it."""
    values: dict[str, str] = {}
    for number, line in enumerate((form.cleaned_data.get(field) or "").splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.partition(separator)
        if not sep or not name.strip():
            form.add_error(field, f"line {number}: write name{separator}value")  # the line may hold a value
            continue
        values[name.strip()] = value.strip() if separator == ":" else value
    return values


def add_service_error(form: forms.Form, exc: ApplicationError, fields: dict[str, str] | None = None) -> None:
    """Show a service's problem on the form: per field where `details` names a form field, else for the form."""
    details = exc.details if isinstance(exc.details, dict) else {}
    placed = False
    for name, message in details.items():
        target = (fields or {}).get(name, name)
        if target in form.fields and target not in form.errors:
            form.add_error(target, message if isinstance(message, str) else str(message))
            placed = True
    if not placed:
        form.add_error(None, exc.message)
