"""Shell-command safety check for commands an agent wants to run with ``sh -c``.

Pipeline: normalize -> parse (bashlex, else our own tolerant lexer) into raw simple commands -> expand words
statically (quotes, ``$'..'``, variables assigned earlier, ``$IFS``, ``~``/``$HOME``, brace lists, ``$(echo ..)``)
-> unwrap wrappers (sudo, env, timeout, xargs, ``sh -c``, ``eval``, ``find -exec``, interpreter shell-outs ...)
-> run the rule groups per command and over the whole command line. See docs/shell-safety.md.

Modules: ``vocabulary`` (shared names and patterns), ``lexer`` (fallback tokenizer, word decoders), ``command``
(the analysed simple command and path classification), ``wrappers`` (unwrapping), ``analysis`` (parse and expand),
``classify`` (fetch/decode/exec predicates), ``rules`` (one module per rule group), ``check`` (verdicts) and
``rule_views`` (read-only views for approval rules). This package re-exports the public names.
"""
from __future__ import annotations

from .check import CommandVerdict, _check_cached, check_command, extract_simple_commands
from .rule_views import (
    RuleAnalysis,
    RuleCommandView,
    analyse_for_rules,
    unquoted_shell_syntax,
)
from .rules import RULE_GROUPS, RULES, Rule, RuleGroup

__all__ = [
    "CommandVerdict", "RULES", "RULE_GROUPS", "Rule", "RuleAnalysis", "RuleCommandView", "RuleGroup", "_check_cached",
    "analyse_for_rules", "check_command", "extract_simple_commands", "unquoted_shell_syntax",
]
