"""Windows command forms: cmd.exe built-ins and PowerShell cmdlets, however they arrive.

A Windows command can reach us bare (`del /f /s /q C:\\`), through `cmd /c TEXT`, through `pwsh -c TEXT` or
`powershell TEXT`, or base64-encoded (`powershell -EncodedCommand ..`, UTF-16LE, decoded by `wrappers.inline_program`).
`windows_statements` turns all of them into statements (argv lists with lower-cased program names) so that the
Windows rules in the rule groups judge what each statement does, not how it was delivered.

The unquoted shell parse removes backslashes (`C:\\Windows` reaches us as `C:Windows`); path checks accept both.
"""
from __future__ import annotations

import re

from .command import why_critical
from .vocabulary import interpreter_name
from .wrappers import decoded_powershell

# Program names that start a Windows statement worth looking at (lower case, without .exe).
WINDOWS_ENTRY = frozenset(
    "cmd pwsh powershell del erase rd rmdir format diskpart cipher vssadmin wmic wbadmin bcdedit shutdown taskkill "
    "tskill psshutdown rundll32 remove-item stop-computer restart-computer format-volume clear-disk initialize-disk "
    "remove-partition stop-process".split())
DELETE_NAMES = frozenset("del erase rd rmdir remove-item ri rm".split())
MAX_NESTING = 4

_PS_VALUE_OPTS = frozenset("-executionpolicy -ep -ex -exec -windowstyle -w -workingdirectory -wd -configurationname -version -v "
                           "-inputformat -if -outputformat -of -settingsfile -custompipename".split())
_CMD_SPLIT = re.compile(r'"[^"]*"|&&|\|\||[&|]|[^\s"&|]+')
_PS_SPLIT = re.compile(r"'[^']*'|\"[^\"]*\"|&&|\|\||[;|\n{}()]|[^\s;|\n{}()'\"]+")
_WINDOWS_DIRS = ("windows", "program files", "program files (x86)", "programdata", "users", "boot", "recovery",
                 "system volume information", "documents and settings", "$recycle.bin")
_ENV_ROOTS = re.compile(r"^(%(systemroot|windir|systemdrive|programfiles|programfiles\(x86\)|programdata|userprofile|homedrive|"
                        r"allusersprofile|public|appdata|localappdata)%|\$env:(systemroot|windir|systemdrive|programfiles|"
                        r"programdata|userprofile|homedrive|public|appdata|localappdata)|\$home)(?P<rest>/.*)?$")


def _name(word: str) -> str:
    return word.strip("'\"").replace("\\", "/").rsplit("/", 1)[-1].lower().removesuffix(".exe")


def _split(text: str, pattern: re.Pattern, separators: frozenset) -> list[list[str]]:
    """Statements of a cmd.exe or PowerShell line: words between separators, outer quotes removed."""
    out, cur = [], []
    for tok in pattern.findall(text):
        if tok in separators:
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(tok[1:-1] if len(tok) >= 2 and tok[0] == tok[-1] and tok[0] in "'\"" else tok)
    if cur:
        out.append(cur)
    return out


def _after_switch(args: list, switches: tuple) -> str | None:
    """Text after cmd's `/c` or `/k` (case-insensitive), or None."""
    for i, a in enumerate(args):
        if a.lower() in switches:
            return " ".join(args[i + 1:])
    return None


def _powershell_code(args: list) -> str:
    """The script a powershell/pwsh invocation runs: the -Command text, the decoded -EncodedCommand text, or the
    positional command (`powershell Stop-Computer`). PowerShell accepts unambiguous prefixes (`-Comm`, `-EncodedC`)."""
    skip = False
    for i, a in enumerate(args):
        al = a.lower()
        if skip:
            skip = False
        elif al in ("-c", "-ec", "-e") or (len(al) > 2 and "-command".startswith(al)) or (len(al) > 3 and "-encodedcommand".startswith(al)):
            if al == "-c" or "-command".startswith(al):
                return " ".join(args[i + 1:])
            try:
                return decoded_powershell(args[i + 1]).split("IEX base64 ", 1)[-1] if i + 1 < len(args) else ""
            except Exception:
                return ""
        elif al in ("-file", "-f"):
            return ""  # a script file: its content is not on the command line
        elif al.startswith("-"):
            skip = al in _PS_VALUE_OPTS
        else:
            return " ".join(args[i:])
    return ""


def _expand(stmt: list, depth: int) -> list[list[str]]:
    """A statement, or the statements inside it when it is itself a cmd/powershell launcher."""
    if not stmt:
        return []
    nm = _name(stmt[0])
    if depth < MAX_NESTING and nm == "cmd":
        text = _after_switch(stmt[1:], ("/c", "/k", "/r"))
        return [s for part in _split(text or "", _CMD_SPLIT, frozenset({"&", "&&", "||", "|"})) for s in _expand(part, depth + 1)]
    if depth < MAX_NESTING and nm in ("powershell", "pwsh"):
        code = _powershell_code(stmt[1:])
        parts = _split(code, _PS_SPLIT, frozenset({";", "|", "\n", "{", "}", "(", ")", "&&", "||"}))
        return [s for part in parts for s in _expand(part, depth + 1)]
    return [[nm] + stmt[1:]]


def windows_statements(c) -> list[list[str]]:
    """Statements (lower-cased program name first) that this command runs as cmd.exe or PowerShell would. Empty for
    ordinary commands. Memoized on the command: four rule groups ask."""
    cached = c.__dict__.get("_windows_statements")
    if cached is not None:
        return cached
    nm = _name(c.argv[0]) if c.argv and not c.unknown else ""
    out: list = []
    if nm in WINDOWS_ENTRY:
        if nm in ("pwsh", "powershell") or interpreter_name(nm) in ("pwsh", "powershell"):
            code = _powershell_code(c.args)
            out = [s for part in _split(code, _PS_SPLIT, frozenset({";", "|", "\n", "{", "}", "(", ")", "&&", "||"}))
                   for s in _expand(part, 1)]
        else:
            out = _expand([nm] + list(c.args), 0)
        if nm in ("rmdir", "rm") and not any(a.startswith("/") and a.lower() in ("/s", "/q") for a in c.args):
            out = [s for s in out if s[0] not in ("rmdir", "rm")]  # the Unix programs, judged by destructive_ops
    c.__dict__["_windows_statements"] = out
    return out


def windows_pipeline(c) -> list[list[list[str]]]:
    """PowerShell pipelines of this command (`Get-Process | Stop-Process`), as lists of statements."""
    nm = _name(c.argv[0]) if c.argv and not c.unknown else ""
    if nm not in ("pwsh", "powershell"):
        return []
    code = _powershell_code(c.args)
    return [_split(part, _PS_SPLIT, frozenset({"|"})) for part in re.split(r"[;\n]", code)]


def windows_critical(path: str) -> str | None:
    """Why deleting `path` on Windows is catastrophic: a drive root, the Windows or Program Files folders, a user
    profile (or its top-level folders), a system environment folder (`%SystemRoot%`, `$env:USERPROFILE`). Unix paths
    (`/`, `~`) given to PowerShell on Linux are judged like `rm`. None for project and temporary paths."""
    p = path.strip("'\"").replace("\\", "/").lower()
    if not p:
        return None
    if p.startswith(("%systemroot%", "%windir%", "$env:systemroot", "$env:windir")):
        return "Windows system folder"
    env = _ENV_ROOTS.match(p)
    if env:
        return "system or profile folder" if (env.group("rest") or "").strip("/") in ("", "*", "*.*") else None
    m = re.match(r"^([a-z]):(.*)$", p)
    if not m:
        return why_critical(p) if p.startswith(("/", "~")) else None
    rel = m.group(2).strip("/")
    parts = [x for x in rel.split("/") if x]
    if not parts or parts[0] in ("*", "*.*", "."):
        return "drive root"
    if parts[0] == "windows" or (parts[0] in _WINDOWS_DIRS and len(parts) <= (3 if parts[0] == "users" else 2)):
        return "Windows system or profile folder"
    return None
