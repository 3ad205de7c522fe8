"""Custom tools' command templates (docs/custom-tools.md): checking and rendering them. The tool a `CustomTool` row
becomes and the tool source live in `tools_app.builtin.custom`; writes in `tools_app.services.custom_tools`.

Rendering: every `{{.key}}` becomes `shlex.quote` of the argument (JSON first for a non-string value, `''` for an
optional argument left out), so a value always reaches the command as one literal word, whatever it contains.
"""
from __future__ import annotations

import json
import re
import shlex
from typing import Any

# `{{.key}}`, spaces allowed inside the braces (`{{ .key }}`), Go-template style.
PLACEHOLDER_RE = re.compile(r"\{\{\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class TemplateError(ValueError):
    """The command template or an argument cannot be rendered into a command."""


def template_placeholders(template: str) -> list[str]:
    """The argument names a template uses, in order of first use. A `{{` that is not a well-formed placeholder is
    an error: it would otherwise reach the shell as literal text the author did not mean."""
    names: list[str] = []
    for match in PLACEHOLDER_RE.finditer(template):
        if match.group(1) not in names:
            names.append(match.group(1))
    leftover = PLACEHOLDER_RE.sub("", template)
    if "{{" in leftover or "}}" in leftover:
        raise TemplateError("malformed placeholder: write {{.name}} with a parameter name (letters, digits, _)")
    return names


def template_problems(template: str, parameters: dict[str, Any]) -> list[str]:
    """What is wrong with `template` for this parameters schema (empty: it renders for every valid call)."""
    try:
        used = template_placeholders(template)
    except TemplateError as exc:
        return [str(exc)]
    declared = set((parameters or {}).get("properties") or {})
    problems = [f"placeholder {{{{.{name}}}}} names no declared parameter" for name in used if name not in declared]
    return problems + [f"placeholder {{{{.{name}}}}} is inside quotes: goclaw quotes every value itself, and a value "
                       "quoted twice can end the author's quotes and run as shell code — write it bare"
                       for name in quoted_placeholders(template)]


def quoted_placeholders(template: str) -> list[str]:
    """Placeholders that sit inside '…', "…" or `…` in the template (checked at save time: inside quotes, the
    quoted value would close the author's quote and the rest of it would reach the shell unquoted)."""
    found: list[str] = []
    quote, i, matches = "", 0, {m.start(): m for m in PLACEHOLDER_RE.finditer(template)}
    while i < len(template):
        match = matches.get(i)
        if match is not None:
            if quote and match.group(1) not in found:
                found.append(match.group(1))
            i = match.end()
            continue
        ch = template[i]
        if ch == "\\" and quote != "'":
            i += 2
            continue
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        i += 1
    return found


def render_value(value: Any) -> str:
    """One argument as a single shell word: strings as they are, anything else as JSON; missing → ''."""
    if value is None:
        return "''"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    if "\x00" in text:
        raise TemplateError("an argument contains a NUL byte, which no command can receive")
    return shlex.quote(text)


def render_command(template: str, args: dict[str, Any]) -> str:
    """The command a call runs: `template` with every placeholder replaced by its quoted argument."""
    def replace(match: re.Match) -> str:
        name = match.group(1)
        try:
            return render_value(args.get(name))
        except TemplateError as exc:
            raise TemplateError(f"argument {name}: {exc}") from None

    return PLACEHOLDER_RE.sub(replace, template)


def env_seal_context(pk: Any) -> str:
    """The associated data a custom tool's env is sealed with: it binds the ciphertext to this row and field."""
    return f"tools_app.CustomTool:{pk}:env"


def sample_arguments(parameters: dict[str, Any]) -> dict[str, Any]:
    """Plausible arguments for a preview: each property's first example, default or enum value, else a typed
    placeholder (`<name>` for a string)."""
    samples: dict[str, Any] = {}
    for name, schema in ((parameters or {}).get("properties") or {}).items():
        schema = schema if isinstance(schema, dict) else {}
        if isinstance(schema.get("examples"), list) and schema["examples"]:
            samples[name] = schema["examples"][0]
        elif "default" in schema:
            samples[name] = schema["default"]
        elif isinstance(schema.get("enum"), list) and schema["enum"]:
            samples[name] = schema["enum"][0]
        else:
            kind = schema.get("type")
            samples[name] = {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}.get(
                kind if isinstance(kind, str) else "", f"<{name}>")
    return samples
