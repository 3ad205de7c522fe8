"""The check: run the enabled rule groups over an analysis and turn their hits into a verdict. Also the
public `check_command` (memoized by `_check_cached`) and `extract_simple_commands`.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .analysis import analyse, normalize_text
from .classify import is_information_request
from .rules import RULES_BY_GROUP
from .rules.common import use_evaluator
from .vocabulary import PROCESS_PATH, UNKNOWN_OUTPUT, UNKNOWN_VALUE

if TYPE_CHECKING:
    from .analysis import CommandAnalysis


@dataclass(frozen=True)
class CommandVerdict:
    verdict: str
    observe: bool
    reasons: list[str]
    groups: tuple[str, ...]


def evaluate(analysis: CommandAnalysis, disabled: frozenset) -> list:
    """Hits `(group, reason, deny)` of every enabled rule: group by group in RULE_GROUPS order, per-command rules over
    each analysed command, then the group's whole-line rules. The order is kept stable because reasons are reported
    in it. A bare help/version request (`shutdown --help`) is not judged by what the tool does in other modes."""
    hits = [h for h in analysis.hits if h[0] not in disabled]
    acting = [c for c in analysis.cmds if not is_information_request(c)]
    for group, per_command, whole_line in RULES_BY_GROUP:
        if group in disabled:
            continue
        for c in acting:
            name = c.name
            for rule in per_command:
                if rule.commands is not None and name not in rule.commands:
                    continue
                found = rule.predicate(analysis, c)
                if found:
                    hits += [(group, r, d) for r, d in found]
        for rule in whole_line:
            found = rule.predicate(analysis)
            if found:
                hits += [(group, r, d) for r, d in found]
    return hits


use_evaluator(evaluate)


def verdict_from_hits(hits: list) -> CommandVerdict:
    seen, reasons, groups = set(), [], []
    deny = any(d for _, _, d in hits)
    for g, r, d in sorted(hits, key=lambda h: not h[2]):
        line = f"{g}: {r}"
        if line not in seen:
            seen.add(line)
            reasons.append(line)
            if g not in groups:
                groups.append(g)
    return CommandVerdict("deny" if deny else "allow", any(not d for _, _, d in hits), reasons, tuple(groups))


def check_command(command: str, disabled_groups: frozenset[str] | set[str] = frozenset()) -> CommandVerdict:
    """Decide allow/deny for a shell command. Never raises. The verdict depends only on its inputs, so it is
    memoized: the pipeline's security hook and exec's own defence-in-depth check pay for one analysis."""
    if not isinstance(command, str):
        return check(command, frozenset(disabled_groups or ()))
    return _check_cached(command, frozenset(disabled_groups or ()))


@functools.lru_cache(maxsize=2048)
def _check_cached(command: str, disabled: frozenset[str]) -> CommandVerdict:
    return check(command, disabled)


def check(command: str, disabled_groups: frozenset[str]) -> CommandVerdict:
    try:
        if not isinstance(command, str) or not command.strip():
            return CommandVerdict("deny", True, ["code_injection: empty command"], ("code_injection",))
        if "\x00" in command:
            return CommandVerdict("deny", True, ["code_injection: NUL byte in command"], ("code_injection",))
        disabled = frozenset(disabled_groups or ())
        analysis = analyse(command)
        hits = evaluate(analysis, disabled)
        if "unbalanced" in analysis.flags and not any(d for _, _, d in hits):
            flat = re.sub(r"[\"'`\\]", " ", normalize_text(command)[0])
            extra = [h for h in evaluate(analyse(flat), disabled) if h[2]]
            if extra:
                hits.append((extra[0][0], "unparseable command with dangerous content: " + extra[0][1], True))
        return verdict_from_hits(hits)
    except Exception as exc:  # fail closed only when the text looks dangerous
        danger = re.search(r"\b(rm|mkfs|dd|curl|wget|nc|bash|sh|eval|base64|sudo|chmod|python\d?|perl)\b|/dev/|>", str(command))
        return CommandVerdict("deny" if danger else "allow", True, [f"code_injection: internal error ({type(exc).__name__})"], ("code_injection",))


def extract_simple_commands(command: str) -> list[list[str]]:
    """Every simple command that would run, after unquoting/expansion, with wrappers and sh -c/eval unwrapped."""
    try:
        if not isinstance(command, str) or "\x00" in command:
            return []
        analysis = analyse(command)
        tr = str.maketrans({UNKNOWN_VALUE: "${?}", UNKNOWN_OUTPUT: "$(?)", PROCESS_PATH: "/dev/fd/63"})
        return [[a.translate(tr) for a in c.argv] for c in analysis.cmds if c.argv and c.code is None and c.name != "eval"]
    except Exception:
        return []
