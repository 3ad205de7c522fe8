"""Custom tools' command templates (docs/custom-tools.md): checking, compiling and rendering them. The tool a
`CustomTool` row becomes and the tool source live in `tools_app.builtin.custom`; writes in
`tools_app.services.custom_tools`.

Arguments reach the command as data, never as text in the script: every `{{.key}}` becomes a reference to an
environment variable (`GOCLAW_ARG_key`) that holds the argument, quoted for where it stands (`"${GOCLAW_ARG_key}"` in
a word, `${GOCLAW_ARG_key}` inside the author's double quotes or an unquoted here-document). The shell never parses
an expansion's result, so `$(id)`, backquotes, quotes or newlines in a value stay text. Where a reference could
still be read as code (single quotes, arithmetic, `eval`, `sh -c`, a command name, …) the template is refused when
it is saved (`tools_app.security.template_check`).

`render_command` writes the values into the template instead, quoted for their place: that text is what the shell
safety check, the approval prompt and the audit judge; it means exactly what the script does with the values.
"""
from __future__ import annotations

import functools
import json
import logging
import re
import shlex
from dataclasses import dataclass
from typing import Any

from tools_app.security.template_check import (
    DQUOTE,
    WORD,
    Site,
    TemplateRefused,
    check_template,
    cross_check,
    verify_script,
)

logger = logging.getLogger("goclaw.custom_tools")

# `{{.key}}`, spaces allowed inside the braces (`{{ .key }}`), Go-template style.
PLACEHOLDER_RE = re.compile(r"\{\{\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# The environment variables that carry the arguments: generated from the placeholder's parameter name, never from
# a caller; a tool's own env may not use the prefix (refused at save time), and the arguments are set last.
ARG_ENV_PREFIX = "GOCLAW_ARG_"
# Linux refuses a single environment string ("NAME=value" and its NUL) longer than MAX_ARG_STRLEN (32 pages).
MAX_ENV_STRING_BYTES = 32 * 4096


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


def argument_env_name(name: str) -> str:
    """The environment variable that carries the argument a `{{.name}}` placeholder stands for."""
    return ARG_ENV_PREFIX + name


@dataclass(frozen=True)
class CompiledTemplate:
    """A checked template: the script that runs (placeholders replaced by references), and where each placeholder
    stands, for rendering the same command with the values written in."""

    template: str
    script: str
    sites: tuple[tuple[int, int, str, str], ...]  # (start, end, parameter name, context) in the template
    names: tuple[str, ...]                        # parameter names, in order of first use

    def environment(self, args: dict[str, Any]) -> dict[str, str]:
        """The environment variables that carry this call's arguments (an optional argument left out: empty)."""
        env = {}
        for name in self.names:
            text = argument_text(name, args.get(name))
            key = argument_env_name(name)
            if len(f"{key}={text}".encode()) + 1 > MAX_ENV_STRING_BYTES:
                raise TemplateError(f"argument {name} is longer than a process environment can carry "
                                    f"({MAX_ENV_STRING_BYTES - len(key) - 2} bytes at most)")
            env[key] = text
        return env

    def render(self, args: dict[str, Any]) -> str:
        """The command with every value written in, quoted for its place: what the safety check, approvals and
        the audit see. It means what the script does; it is never what runs."""
        out, pos = [], 0
        for start, end, name, context in self.sites:
            out.append(self.template[pos:start])
            text = argument_text(name, args.get(name))
            if context == WORD:
                out.append(shlex.quote(text))
            elif context == DQUOTE:
                out.append(re.sub(r'([\\"$`])', r"\\\1", text))
            else:  # HEREDOC: \, $ and ` are the only characters special there
                out.append(re.sub(r"([\\$`])", r"\\\1", text))
            pos = end
        out.append(self.template[pos:])
        return "".join(out)


def argument_text(name: str, value: Any) -> str:
    """One argument as the text the command receives: strings as they are, anything else as JSON; missing: ''."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    if "\x00" in text:
        raise TemplateError(f"argument {name}: an argument contains a NUL byte, which no command can receive")
    return text


@functools.lru_cache(maxsize=512)
def compile_template(template: str) -> CompiledTemplate:
    """Check `template` and build the script it runs. Raises TemplateError naming every placeholder that stands
    where a value could be read as code (or would not expand at all), and why."""
    names = template_placeholders(template)
    if ARG_ENV_PREFIX in template:
        raise TemplateError(f"names starting with {ARG_ENV_PREFIX} are reserved for the variables goclaw passes the "
                            "arguments in: use {{.name}} placeholders")
    if not PLACEHOLDER_RE.search(template):
        return CompiledTemplate(template, template, (), ())  # no value reaches it: nothing to place
    # Browsers send textarea lines with CRLF; /bin/sh would read each CR as part of a word, tree-sitter as a blank.
    template = template.replace("\r\n", "\n")
    control = next((ch for ch in template if ch < " " and ch not in "\n\t" or ch == "\x7f"), None)
    if control is not None:
        raise TemplateError(f"the command holds a control character ({control!r}), which /bin/sh and goclaw's "
                            "parser read differently: remove it")
    matches = list(PLACEHOLDER_RE.finditer(template))
    sites = [Site(m.start(), m.end(), m.group(1), argument_env_name(m.group(1))) for m in matches]
    try:
        contexts = check_template(template, sites)
    except TemplateRefused as exc:
        raise TemplateError("; ".join(exc.problems)) from None
    except Exception:  # the analysis must never pass a template it could not finish: refuse instead
        logger.exception("custom tool template analysis failed")
        raise TemplateError("goclaw could not analyse where the placeholders land; simplify the command") from None
    script, pos = [], 0
    for site, context in zip(sites, contexts):
        script.append(template[pos:site.start])
        script.append(f'"${{{site.reference}}}"' if context == WORD else f"${{{site.reference}}}")
        pos = site.end
    script.append(template[pos:])
    text = "".join(script)
    problems = verify_script(text, sites, contexts) + cross_check(text, sorted({s.reference for s in sites}))
    if problems:
        raise TemplateError("; ".join(problems))
    return CompiledTemplate(template, text, tuple((s.start, s.end, s.name, c) for s, c in zip(sites, contexts)),
                            tuple(names))


def template_problems(template: str, parameters: dict[str, Any]) -> list[str]:
    """What is wrong with `template` for this parameters schema (empty: it renders for every valid call)."""
    try:
        used = template_placeholders(template)
    except TemplateError as exc:
        return [str(exc)]
    declared = set((parameters or {}).get("properties") or {})
    problems = [f"placeholder {{{{.{name}}}}} names no declared parameter" for name in used if name not in declared]
    try:
        compile_template(template)
    except TemplateError as exc:
        problems.append(str(exc))
    return problems


def render_command(template: str, args: dict[str, Any]) -> str:
    """The command a call means, with every argument written in and quoted for its place (see CompiledTemplate.render);
    what runs is `compile_template(template).script` with `environment(args)`."""
    return compile_template(template).render(args if isinstance(args, dict) else {})


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
