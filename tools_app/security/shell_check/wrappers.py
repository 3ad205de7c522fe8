"""Wrapper unwrapping: commands that run another command (`sudo`, `env`, `timeout`, `xargs`, `docker exec`,
`ssh host CMD`) or a code string (`sh -c`, `su -c`, `trap`), and the inline programs of interpreters
(`python -c`, `awk '..'`, `pwsh -EncodedCommand`) and tools with shell escapes (sqlite3 `.shell`, git `rebase -x`).
"""
from __future__ import annotations

import base64
import re
from typing import TYPE_CHECKING

from .command import operands
from .vocabulary import (
    ASSIGNMENT,
    AWKS,
    INLINE_PATTERNS,
    INTERPRETERS,
    interpreter_name,
    word_set,
)

if TYPE_CHECKING:
    from .analysis import CommandAnalysis
    from .command import SimpleCommand


def shell_args(args: list) -> tuple:
    """(code for -c or None, script operand or None) for sh/bash/zsh style argv."""
    has_c, i = False, 0
    while i < len(args):
        a = args[i]
        if a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if a == "--":
            i += 1
            break
        if a.startswith("--command"):
            return (a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")), None
        if a[:1] in "-+" and len(a) > 1:
            has_c = has_c or (a[0] == "-" and not a.startswith("--") and "c" in a)
            i += 1
            continue
        break
    rest = args[i:]
    if has_c:
        return (rest[0] if rest else ""), None
    return None, (rest[0] if rest else None)


PWSH_VALUE_OPTS = word_set("-w -windowstyle -executionpolicy -ep -ex -exec -version -v -inputformat -if -outputformat -of -configurationname -workingdirectory -wd -settingsfile -custompipename")


def decoded_powershell(encoded: str) -> str:
    """The script of `powershell -EncodedCommand B64` (base64 of UTF-16LE text), to be judged like `-Command` text.

    A script that itself runs or downloads code (IEX, Invoke-Expression, DownloadString ...) or that does not decode to
    readable text keeps the `IEX base64` marker, which code_injection denies: hiding such a payload in base64 is the
    point of the encoding. A readable script without those (`Get-ChildItem | Measure-Object`) is judged by what it does."""
    decoded = base64.b64decode(encoded).decode("utf-16-le", "ignore")
    raw = base64.b64decode(encoded, validate=True) if re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", encoded) and len(encoded) % 4 == 0 else b""
    readable = bool(raw) and len(raw) % 2 == 0 and not any(raw[1::2]) and bool(decoded.strip()) and \
        all(ch.isprintable() or ch in "\r\n\t" for ch in decoded)  # ASCII text as UTF-16LE: every high byte is zero
    if not readable or INLINE_PATTERNS["run"].search(decoded) or INLINE_PATTERNS["remote"].search(decoded):
        return "IEX base64 " + decoded
    return decoded


def inline_program(cmd: SimpleCommand) -> str | None:
    """Inline program of python -c / perl -e / awk '...' / pwsh -enc, or a heredoc fed to an interpreter."""
    nm, args = cmd.name, cmd.args
    if nm in AWKS:
        ops = operands(args, word_set("-F -v -W --assign --field-separator"))
        return None if "-f" in args or not ops else ops[0]
    base = interpreter_name(nm)
    flags = INTERPRETERS.get(base)
    if flags is None:
        return None
    skip = False
    for i, a in enumerate(args):
        al = a.lower() if base in ("pwsh", "powershell") else a
        if skip:
            skip = False
            continue
        if base in ("pwsh", "powershell") and al in PWSH_VALUE_OPTS:
            skip = True  # -w hidden, -ExecutionPolicy Bypass ... precede the code
            continue
        if al in flags or (base in ("perl", "ruby") and re.fullmatch(r"-[a-zA-Z]*[eE]", a)):
            code = args[i + 1] if i + 1 < len(args) else ""
            if base in ("pwsh", "powershell") and al.startswith(("-e", "-enc")) and al != "-command":
                try:
                    code = decoded_powershell(code)
                except Exception:
                    code = "IEX base64 " + code
            return " ".join(args[:i]) + " " + code
        if len(a) > 2 and a[:2] in flags:
            return " ".join(args[:i]) + " " + a[2:]
        if a in ("-m", "-f") or not a.startswith("-"):
            return None
    return next((t for op, t in cmd.redirs if op in ("<<", "<<<")), None)


# ---------------------------------------------------------------- wrappers

WRAPPER_OPTIONS = {  # wrapper -> (options taking a value, extra operands before the command)
    "sudo": ("-u -g -C -D -h -p -r -t -T -U --user --group --chdir --prompt --role --type --host --other-user --close-from", 0),
    "doas": ("-u -C", 0), "pkexec": ("--user", 0), "run0": ("-u --user -D --setenv", 0), "nohup": ("", 0),
    "nice": ("-n --adjustment", 0), "ionice": ("-c -n --class --classdata", 0), "timeout": ("-s -k --signal --kill-after", 1),
    "stdbuf": ("-i -o -e --input --output --error", 0), "setsid": ("", 0), "time": ("-f -o --format --output", 0),
    "command": ("", 0), "builtin": ("", 0), "exec": ("-a", 0), "chroot": ("--userspec --groups", 1),
    "strace": ("-e -o -p -s -u -E -a -b -I -O -P -S -X", 0), "ltrace": ("-e -o -p -s -u -a -n", 0), "taskset": ("", 1),
    "unbuffer": ("", 0), "rlwrap": ("-a -f -H -p -S", 0), "proxychains": ("-f", 0), "proxychains4": ("-f", 0),
    "torsocks": ("-u -p -a -P", 0), "catchsegv": ("", 0), "firejail": ("", 0), "chrt": ("", 1), "caffeinate": ("-t -w", 0),
    "nsenter": ("-t --target -S -G --setuid --setgid -r -w --root --wd", 0), "cgexec": ("-g", 0),
    "unshare": ("--propagation --setgroups -R --root -w --wd -S -G --map-user --map-group", 0),
    "numactl": ("-C -N -m -p -i --cpunodebind --membind --physcpubind --preferred --interleave", 0),
    "systemd-run": ("-u --unit -p --property -E --setenv --description --slice -M --machine --uid --gid --working-directory", 0),
    "busybox": ("", 0), "toybox": ("", 0), "flock": ("-w -E --timeout --conflict-exit-code", 1), "xargs": ("-I -n -P -L -l -d -E -e -s -a --arg-file --delimiter --max-args --max-procs --max-lines --replace --eof --max-chars --process-slot-var", 0),
    "doas-": ("", 0), "runuser": ("-u -g -G -s -w --user --group --shell", 0), "watch": ("-n --interval -d -g -q", 0),
}
CODE_OPTIONS = {"su": ("-c", "--command"), "runuser": ("-c", "--command"), "flock": ("-c", "--command"), "script": ("-c", "--command"), "sg": ("-c",)}


def skip_options(args: list, with_arg: frozenset) -> int:
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return i + 1
        if not a.startswith("-") or a == "-" or ASSIGNMENT.match(a):
            return i
        if a in with_arg or (len(a) == 2 and a in with_arg):
            i += 2
        else:
            i += 1
    return i


DOCKER_VALUE_OPTIONS = word_set(
    "-e --env --env-file -u --user -w --workdir --detach-keys -v --volume --mount -p --publish --name --network --net --entrypoint "
    "-l --label --label-file --cpus -m --memory --memory-swap --platform --restart --add-host --cap-add --cap-drop --device --dns "
    "--dns-search --hostname -h --ipc --pid --security-opt --tmpfs --ulimit --log-driver --log-opt --gpus --shm-size --runtime "
    "--userns --uts --cidfile --cgroupns --cgroup-parent --cpu-shares -c --cpuset-cpus --health-cmd --volumes-from --link --expose "
    "--pull --network-alias --ip --ip6 --group-add --sysctl --pids-limit --index -f --file -H --host --context --project-name "
    "--project-directory --profile --stop-signal --stop-timeout --annotation -a --attach --mac-address --domainname --oom-score-adj")


KUBECTL_VALUE_OPTIONS = word_set("-c --container -n --namespace --context --cluster --kubeconfig -f --filename --pod-running-timeout --image --restart -l --selector --as --user -s --server")


def container_payload(nm: str, args: list) -> list | None:
    """Command run inside a container by `docker exec/run`, `docker compose exec/run`, `kubectl exec/run/debug -- CMD`.

    The payload runs with the container's (often root) privileges and mounts, so it is judged like a local command."""
    if nm in ("kubectl", "oc"):
        k = next((i for i, a in enumerate(args) if a in ("exec", "run", "debug")), None)
        if k is None:
            return None
        rest = args[k + 1:]
        if "--" in rest:
            return rest[rest.index("--") + 1:] or None
        return after_first_operand(rest, KUBECTL_VALUE_OPTIONS) if args[k] == "exec" else None
    i = 0
    while i < len(args) and args[i].startswith("-"):  # global options: docker -H x / compose -f x.yml
        i += 2 if args[i] in DOCKER_VALUE_OPTIONS else 1
    if args[i:i + 1] in (["container"], ["compose"]):
        i += 1
        while i < len(args) and args[i].startswith("-"):
            i += 2 if args[i] in DOCKER_VALUE_OPTIONS else 1
    if args[i:i + 1] not in (["exec"], ["run"]):
        return None
    return after_first_operand(args[i + 1:], DOCKER_VALUE_OPTIONS)


def after_first_operand(args: list, with_arg: frozenset) -> list | None:
    """Everything after the first operand (container/image/pod), skipping leading options; inner options stay intact."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        i += 2 if args[i] in with_arg else 1
    if i < len(args) and args[i] == "--":
        i += 1
    return args[i + 1:] or None


TOOL_SHELLS = word_set("sqlite3 sqlite mysql mariadb psql gdb make gmake gcc cc g++ c++ clang clang++ emacs expect tclsh wish julia")


def commands_run_by_tool(cmd) -> list:
    """Shell commands that non-shell tools run for you: sqlite3 `.shell`/`.system`, mysql `\\!`/`system`, psql `\\!` and
    `COPY .. TO/FROM PROGRAM '..'`, gdb `-ex '!..'`/`shell ..`/`python ..`, `make --eval` recipes, `gcc -wrapper`,
    emacs `(shell-command ..)`, expect `spawn`, tcl `exec`, julia backticks."""
    nm, a = cmd.name, cmd.args
    texts = a + [t for op, t in cmd.redirs if op in ("<<", "<<<")]
    out = []
    if nm in ("sqlite3", "sqlite"):
        out += [m.group(2) for t in texts for m in re.finditer(r"(?m)^\s*\.(shell|system)\s+(.+)$", t)]
    elif nm in ("mysql", "mariadb"):
        out += [m.group(2) for t in texts for m in re.finditer(r"(?im)(^|;)\s*(?:\\!|system)\s+([^;]+)", t)]
    elif nm == "psql":
        out += [m.group(1) for t in texts for m in re.finditer(r"(?m)\\!\s*(.+)$", t)]
        out += [m.group(1).replace("''", "'") for t in texts for m in re.finditer(r"(?i)\bPROGRAM\s+(?:E)?'((?:''|[^'])*)'", t)]
    elif nm == "gdb":
        for i, x in enumerate(a):
            v = a[i + 1] if x in ("-ex", "--ex", "-eval-command", "--eval-command", "-iex") and i + 1 < len(a) else x.split("=", 1)[1] if x.startswith("--eval-command=") else None
            m = re.match(r"^\s*(?:!|shell\s+|pipe\s+.*?\|\s*)(.+)$", v or "", re.S)
            if m:
                out.append(m.group(1))
            elif v and re.match(r"^\s*(python|py|pi)\b", v):
                out += [m.group(2) for m in INLINE_PATTERNS["call"].finditer(v)]
    elif nm in ("make", "gmake"):
        for i, x in enumerate(a):
            v = a[i + 1] if x == "--eval" and i + 1 < len(a) else x.split("=", 1)[1] if x.startswith("--eval=") else None
            out += [ln.lstrip("\t-@+ ") for ln in (v or "").split("\n") if ln.startswith("\t")]
    elif nm in ("gcc", "cc", "g++", "c++", "clang", "clang++"):
        out += [" ".join(a[i + 1].split(",")) for i, x in enumerate(a[:-1]) if x == "-wrapper"]
    elif nm == "emacs":
        out += [m.group(1) for t in a for m in re.finditer(r"(?:shell-command|call-process-shell-command|start-process-shell-command)[^\"]*\"((?:\\.|[^\"])*)\"", t)]
        out += [m.group(1) for t in a for m in re.finditer(r"\((?:term|ansi-term|shell)\s+\"([^\"]+)\"", t)]
    elif nm in ("expect", "tclsh", "wish"):
        out += [m.group(2) for t in texts for m in re.finditer(r"(?m)(^|[;{\[])\s*(?:spawn|exec|open\s+\|)\s+([^;\]}\n]+)", t)]
    elif nm == "julia":
        out += [m.group(1) for t in a for m in INLINE_PATTERNS["tick"].finditer(t)]
    return [re.sub(r"\s*\d?[<>]@\w+", "", x).strip() for x in out if x and x.strip()]


GIT_GLOBAL_VALUE_OPTIONS = word_set("-C -c --git-dir --work-tree --namespace --exec-path --config-env")


def git_subcommand(args: list) -> tuple:
    """(subcommand, its arguments) of a git argv, skipping global options such as `-C dir` and `-c k=v`."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in GIT_GLOBAL_VALUE_OPTIONS else 1
    return (args[i], args[i + 1:]) if i < len(args) else ("", [])


def git_code(args: list) -> list:
    """Shell code git itself will run: `rebase -x CMD`, `bisect run CMD..`, `submodule foreach CMD`, `!` aliases."""
    out = []
    sub, rest = git_subcommand(args)
    for i, x in enumerate(args):  # git -c alias.x='!cmd'
        if x == "-c" and i + 1 < len(args) and re.match(r"^alias\.[^=]+=\s*!", args[i + 1], re.I):
            out.append(args[i + 1].split("!", 1)[1])
    if sub == "rebase":
        for i, x in enumerate(rest):
            if x in ("-x", "--exec") and i + 1 < len(rest):
                out.append(rest[i + 1])
            elif x.startswith("--exec="):
                out.append(x.split("=", 1)[1])
    elif sub == "bisect" and rest[:1] == ["run"] and rest[1:]:
        out.append(" ".join(shell_quote(x) for x in rest[1:]))
    elif sub == "submodule" and "foreach" in rest:
        cmd = [x for x in rest[rest.index("foreach") + 1:] if x not in ("--recursive", "-q", "--quiet")]
        if cmd:
            out.append(" ".join(cmd) if len(cmd) == 1 else " ".join(shell_quote(x) for x in cmd))
    elif sub == "config":
        ops = operands(rest, word_set("-f --file --blob --type --default --comment"))
        if len(ops) >= 2 and re.match(r"^alias\.", ops[0], re.I) and ops[1].lstrip().startswith("!"):
            out.append(ops[1].lstrip()[1:])
    return out


def shell_quote(x: str) -> str:
    return x if re.fullmatch(r"[\w./:=@%+,-]+", x) else "'" + x.replace("'", "'\\''") + "'"


def unwrap(analysis: CommandAnalysis, cmd: SimpleCommand):
    """Return ('argv', inner_argv) / ('code', shell_text) for wrapper commands, else None."""
    nm, args = cmd.name, cmd.args
    if nm in CODE_OPTIONS:
        for i, a in enumerate(args):
            for f in CODE_OPTIONS[nm]:
                if a == f and i + 1 < len(args):
                    return ("code", args[i + 1])
                if a.startswith(f + "=") and f.startswith("--"):
                    return ("code", a.split("=", 1)[1])
        if nm == "sg" and len(args) >= 2:
            return ("code", " ".join(args[1:]))
        if nm in ("su", "script", "sg"):
            return None
    if nm == "env":
        i = 0
        while i < len(args):
            a = args[i]
            if a in ("-u", "-C", "--unset", "--chdir"):
                i += 2
            elif a in ("-S", "--split-string") or a.startswith(("-S", "--split-string=")):
                s = args[i + 1] if a in ("-S", "--split-string") and i + 1 < len(args) else a.split("=", 1)[-1] if "=" in a else a[2:]
                return ("argv", s.split() + args[i + 2 if a in ("-S", "--split-string") else i + 1:])
            elif a.startswith("-") and a != "-":
                i += 1
            elif ASSIGNMENT.match(a):
                k, v = a.split("=", 1)
                cmd.assigns[k] = v
                i += 1
            else:
                return ("argv", args[i:])
        return None
    if nm == "trap" and args and args[0] not in ("-p", "-l"):
        return ("code", args[0])
    if nm in ("docker", "podman", "nerdctl", "docker-compose", "kubectl", "oc"):
        inner = container_payload(nm, args)
        return ("argv", inner) if inner else None
    if nm == "ssh":
        ops = operands(args, word_set("-b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w -B"))
        return ("code", " ".join(ops[1:])) if len(ops) > 1 else None
    spec = WRAPPER_OPTIONS.get(nm)
    if spec is None:
        return None
    if nm == "command" and any(a in ("-v", "-V") for a in args):
        return None
    if nm in ("sudo", "doas", "sudoedit") and any(re.fullmatch(r"-[a-zA-Z]*[lvkKe][a-zA-Z]*", a) for a in args[:1]):
        return None
    i = skip_options(args, word_set(spec[0])) + spec[1]
    rest = args[i:]
    if nm == "sudo" and any(a in ("-s", "-i") for a in args[:i]) and rest:
        return ("code", " ".join(rest))
    if nm == "watch" and "-x" not in args[:i] and rest:
        return ("code", " ".join(rest))
    if nm == "xargs":
        rest = (rest or ["echo"]) + [w for op, t in cmd.redirs if op == "<<<" for w in t.split()]
        ups = [u for u in analysis.cmds if u.pipe == cmd.pipe and u.stage == cmd.stage - 1]
        for u in ups:
            if u.name in ("echo", "printf"):
                rest = rest + [a for a in u.args if not a.startswith("-")]
            elif u.name == "find":
                rest = rest + [next((a for a in u.args if not a.startswith("-")), ".")]
    if nm == "chroot" and not rest:
        return None
    return ("argv", rest) if rest else None
