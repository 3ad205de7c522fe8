"""Rule group `env_dump`: Dumping the environment: env, printenv, set, export -p, /proc/*/environ.
"""
from __future__ import annotations

from ..command import operands
from ..vocabulary import ASSIGNMENT, INLINE_PATTERNS
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "env_dump",
    "Dumping the environment: env, printenv, set, export -p, /proc/*/environ.",
)


def dumps_environment(analysis, c):
    nm, a = c.name, c.args
    dump = (nm == "env" and not c.wrappers[-1:] == ["env"] and all(x.startswith("-") or "=" in x for x in a)) or \
        (nm == "printenv" and not operands(a)) or (nm == "set" and not a) or (nm == "export" and a in ([], ["-p"])) or \
        (nm in ("declare", "typeset") and (not a or any(x in ("-x", "-p", "-px", "-xp") for x in a) and not any(ASSIGNMENT.match(x) or not x.startswith("-") for x in a))) or \
        (nm == "compgen" and any(x in ("-v", "-e") for x in a))
    if any("/proc/" in x and "environ" in x for x in a + [t for _, t in c.redirs]) or (c.icode and INLINE_PATTERNS["envdump"].search(c.icode)):
        return [("reads process environment", True)]
    if not dump:
        return []
    later = sorted((u for u in analysis.pipes.get(c.pipe, []) if u.stage > c.stage), key=lambda u: u.stage)
    # `env | sort | grep -i path`: pass-through sorting before the grep shows no more than the grep alone
    while later and later[0].name in ("sort", "uniq") and not later[0].redirs:
        later = later[1:]
    if later and later[0].name in ("grep", "egrep", "fgrep", "rg") and not any(">" in op for op, _ in c.redirs):
        return [(f"{nm} output filtered through grep (still exposes matching variables)", False)]
    if later and later[0].name == "wc" and len(later) == 1 and not any(">" in op for op, _ in c.redirs):
        return []  # `env | wc -l` prints a count
    return [(f"{nm} dumps the environment", True)]


RULES = (
    Rule(
        "dumps_environment",
        GROUP.name,
        "env/printenv/set/export -p/declare -x and /proc/*/environ reads (grep-filtered dumps are observe).",
        dumps_environment,
    ),
)
