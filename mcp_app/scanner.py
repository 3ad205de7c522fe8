"""The tool-description scanner: finds content in a tool's definition aimed at the model rather than describing the
tool (tool poisoning: hidden instructions, requests to read secrets or send them away, instructions about other tools,
invisible or encoded text). Its flags go to the reviewer and keep the tool quarantined until someone approves it.

Rules are data (`RULES`). Text rules run on a normalized copy of every string (format characters and variation
selectors removed, NFKC-folded, common look-alike letters mapped to Latin, markdown emphasis dropped), and on text
smuggled in invisible characters or base64 once decoded; the `invisible_unicode` rules look at the raw text. Rules
addressed at the model (`folded`) also read a leetspeak-folded copy. The tool's name is read too, as the words it
spells.
"""
from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from mcp_app.config import ToolDefinition

EXCERPT_CHARS = 120
MAX_SCAN_CHARS = 200_000  # a description longer than this is scanned up to here (and flagged by `oversized`)


@dataclass(frozen=True)
class Rule:
    """One detector: a regular expression (case-insensitive; a space in it means "any whitespace") or a function
    returning (start, end) spans. `raw` rules see the text as listed, the others its normalized form; `folded` rules
    (instructions to the model) also read a copy with leetspeak folded back to letters ("1gn0re" → "ignore")."""

    id: str
    category: str
    description: str
    pattern: str = ""
    check: Callable[[str], list[tuple[int, int]]] | None = None
    raw: bool = False
    folded: bool = False

    def spans(self, text: str) -> list[tuple[int, int]]:
        if self.check is not None:
            return self.check(text)
        return [m.span() for m in _compiled(self.pattern).finditer(text)]


_COMPILED: dict[str, re.Pattern] = {}


def _compiled(pattern: str) -> re.Pattern:
    if pattern not in _COMPILED:
        _COMPILED[pattern] = re.compile(pattern.replace(" ", r"\s+"), re.IGNORECASE | re.DOTALL)
    return _COMPILED[pattern]


# --- invisible characters (raw text) ------------------------------------------------------------------------------
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff\u180e\u2061\u2062\u2063\u2064"
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
JOINERS = "\u200c\u200d"  # legitimate inside emoji sequences and in scripts that need them (Persian, Indic …)


def _is_tag(ch: str) -> bool:
    return 0xE0000 <= ord(ch) <= 0xE007F


def _is_variation_selector(ch: str) -> bool:
    cp = ord(ch)
    return 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF


def _invisible(ch: str) -> bool:
    """Characters a reader does not see (shown as escapes in excerpts)."""
    return unicodedata.category(ch) in ("Cf", "Co", "Cn") or _is_variation_selector(ch) or _is_tag(ch)


def _runs(text: str, member: Callable[[int, str], bool]) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, ch in enumerate(text):
        if member(i, text):
            start = i if start is None else start
        elif start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(text)))
    return spans


def _joiner_allowed(text: str, i: int) -> bool:
    """A ZWJ/ZWNJ between two non-ASCII characters (emoji sequences, Arabic or Indic script) is ordinary text;
    one between ASCII letters hides something."""
    before = text[i - 1] if i > 0 else ""
    after = text[i + 1] if i + 1 < len(text) else ""
    return bool(before and after) and ord(before) > 0x7F and ord(after) > 0x7F


def _zero_width(text: str) -> list[tuple[int, int]]:
    return _runs(text, lambda i, t: t[i] in ZERO_WIDTH and not (t[i] in JOINERS and _joiner_allowed(t, i))
                 and not (i == 0 and t[i] == "\ufeff"))


def _bidi(text: str) -> list[tuple[int, int]]:
    return _runs(text, lambda i, t: t[i] in BIDI)


def _flag_tag_sequence(text: str, i: int) -> bool:
    """Subdivision flags (🏴 + tag letters + cancel tag, e.g. England's) are the one legitimate use of tags."""
    j = i
    while j > 0 and _is_tag(text[j - 1]):
        j -= 1
    k = i
    while k < len(text) and _is_tag(text[k]):
        k += 1
    return j > 0 and text[j - 1] == "\U0001F3F4" and k - j <= 7 and text[k - 1] == "\U000E007F"


def _tags(text: str) -> list[tuple[int, int]]:
    return _runs(text, lambda i, t: _is_tag(t[i]) and not _flag_tag_sequence(t, i))


def _variation_smuggling(text: str) -> list[tuple[int, int]]:
    """Runs of two or more variation selectors (no script stacks them: it is how bytes are hidden behind an emoji),
    or a selector after an ASCII letter (nothing there has a variant)."""
    spans = []
    for start, end in _runs(text, lambda i, t: _is_variation_selector(t[i])):
        prev = text[start - 1] if start else ""
        if end - start >= 2 or (prev.isascii() and prev.isalpha()):
            spans.append((start, end))
    return spans


def _other_format(text: str) -> list[tuple[int, int]]:
    """Format characters not covered above (soft hyphen, invisible math operators, Arabic number signs, interlinear
    annotations …); LRM/RLM/ALM are fine in text that has right-to-left letters."""
    has_rtl = any(unicodedata.bidirectional(ch) in ("R", "AL") for ch in text)
    covered = set(ZERO_WIDTH + BIDI)

    def member(i: int, t: str) -> bool:
        ch = t[i]
        if ch in covered or _is_tag(ch) or unicodedata.category(ch) != "Cf":
            return False
        return not (has_rtl and ch in "\u200e\u200f\u061c")

    return _runs(text, member)


def _private_use(text: str) -> list[tuple[int, int]]:
    return _runs(text, lambda i, t: unicodedata.category(t[i]) == "Co")


# --- encoded payloads (normalized text) ---------------------------------------------------------------------------
_B64_RE = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{32,}={0,2}(?![A-Za-z0-9+/=_-])")
_HEX_RE = re.compile(r"(?<![0-9A-Za-z])(?:0x)?[0-9a-fA-F]{96,}(?![0-9A-Za-z])|(?:\\x[0-9a-fA-F]{2}){16,}")


def _base64_text(blob: str) -> str | None:
    """The text a base64 blob decodes to, when it is mostly readable words (hidden prose), else None."""
    data = blob.rstrip("=")
    if len(data) < 32 or not re.search(r"[A-Z]", data) or not re.search(r"[a-z]", data):
        return None
    padded = data + "=" * (-len(data) % 4)
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            raw = decode(padded)
            text = raw.decode("utf-8")
        except (binascii.Error, ValueError, UnicodeDecodeError):
            continue
        printable = sum(ch.isprintable() or ch in "\n\t" for ch in text)
        if text and printable / len(text) > 0.95 and " " in text:
            return text
    return None


def _looks_random(blob: str) -> bool:
    """Long and mixing upper case, lower case and digits: a blob, not an identifier or a path."""
    core = blob.rstrip("=")
    return (len(core) >= 64 and re.search(r"[A-Z]", core) is not None and re.search(r"[a-z]", core) is not None
            and len(re.findall(r"[0-9]", core)) >= 4)


def _in_url(text: str, start: int) -> bool:
    """The blob is part of a link (`https://github.com/o/r/blob/<sha>/…`), whose paths and hashes look random."""
    return re.search(r"[a-z][a-z0-9+.-]*://\S*$", text[max(0, start - 300):start], re.IGNORECASE) is not None


def _base64(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _B64_RE.finditer(text)
            if _base64_text(m.group()) is not None or (_looks_random(m.group()) and not _in_url(text, m.start()))]


def _hex(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _HEX_RE.finditer(text)]


def _oversized(text: str) -> list[tuple[int, int]]:
    return [(MAX_SCAN_CHARS - 1, MAX_SCAN_CHARS)] if len(text) >= MAX_SCAN_CHARS else []


# --- vocabulary shared by the text rules --------------------------------------------------------------------------
def _alt(*words: str) -> str:
    return "(?:" + "|".join(words) + ")"


# Secrets that have no business leaving: naming them next to "send / include / pass" is enough.
_HARD_SECRETS = _alt(
    r"(?:(?:the|this|our|your|current|entire|full|whole|complete) )?(?:user'?s'? )?(?:conversation|chat|dialog(?:ue)?)"
    r" (?:history|log|transcript|so far|context|thread contents|contents)",
    r"(?:entire|full|whole|complete) (?:conversation|chat|dialog(?:ue)?|transcript)",
    r"(?:user'?s'? )?(?:full |entire |whole |complete )?(?:message|chat|conversation) history", r"transcript of",
    r"(?:previous|prior|earlier|past|all|other|the user's|preceding) (?:user |chat )?messages", "system prompt",
    r"(?:your|the) (?:instructions|prompt)", r"(?:your|the assistant's|the model's) (?:context window|memory)",

    r"contents? of (?:the )?(?:file )?(?:at )?[`'\"]?(?:~|\$\{?\w|%\w|/(?:etc|home|root|Users|proc|var|run)\b|\.\w+/)",
    r"id_(?:rsa|ed25519|ecdsa|dsa)",
    r"\.env\b", r"mcp\.json", r"/etc/(?:passwd|shadow)",
    r"(?:everything|all|anything|whatever|each thing) (?:that )?(?:the user|you) (?:has |have )?(?:typed|wrote|written"
    r"|said|asked|shared|pasted|entered|sent|told you|uploaded)")
# Secrets a tool may legitimately take as input ("pass the API key", "requires a token"): suspicious only when they
# are someone else's or whatever the model happens to hold ("all", "the user's", "… you have seen").
_SOFT_SECRET = (r"(?:secrets?|credentials|passwords?|passphrases?|environment variables|env vars|cookies|ssh keys?"
                r"|(?:api|access|auth|bearer|secret|oauth|refresh|session|github|aws|openai|private) (?:keys?|tokens?)"
                r")(?! (?:reset|policy|policies|strength|length|field|prompt|manager|protected|change|rotation|expir\w*"
                r"|scopes?|permissions?|type|name|ids?|usage|count|limit|budget|file path|path|format)\b)")
_HELD_SECRET = rf"(?:{_SOFT_SECRET}|tokens|keys)"
_SECRET_OWNER = (r"(?:all|every|each|any other|other|stored|saved|cached|known|collected|harvested|discovered"
                 r"|(?:the )?users?'s?'?|the host's|the machine's|the server's|the process's)")
_SECRET_HELD = (r" (?:that |which )?(?:you|the (?:assistant|model|agent|ai|llm)) (?:currently )?(?:hold|have|has|had|know"
                r"|saw|see|can see|can access|have access to|found|received|were given|came across|come across"
                r"|encounter\w*|remember|stored|collected|are holding|are aware of)\b"
                r"| (?:from|of|stored in|available in|found in|present in) (?:the |this |your |its )?(?:context|conversation"
                r"|chat|environment|session|memory|history|machine|host|system|workspace|home directory|disk"
                r"|config(?:uration)? files?|keychain|keyring|browser)\b")
_SOFT_SECRETS = (rf"(?:{_SECRET_OWNER} (?:\w+ ){{0,2}}?{_SOFT_SECRET}"
                 rf"|(?:\w+ ){{0,2}}?{_HELD_SECRET}(?:(?:,| and| or| &) (?:\w+ ){{0,2}}?{_HELD_SECRET})*{_SECRET_HELD})")
_SEND = (r"(?:pass|include|put|insert|add|send|attach|embed|append|encode|copy|forward|upload|post|leak|exfiltrate"
         r"|transmit|provide|supply|share|submit|paste|place|report)")
# What lies between a verb and its object: a preposition there means the secret is a destination, not the cargo.
_OBJECT_GAP = r"(?:(?!\b(?:to|into|in|on|onto|for|from|with|via|at|by|about)\b)(?:[^.\n]|\.(?=\S))){0,100}?"
# Within one clause: a full stop ends it, a dot inside a path or file name (`~/.config/gh/hosts.yml`) does not.
_CLAUSE = r"(?:[^.\n]|\.(?=\S))"
# "before any search", "prior to each call", "before answering the user": the moment a pre-call errand is tied to.
_PRE_CALL_WHEN = (r"(?:(?:making |doing |running |performing |sending )?(?:any|each|every|all|the first|your first)"
                  r"(?: \w+){0,2}? (?:search|call|query|request|lookup|answer|response|reply|use|invocation|operation|task"
                  r"|action|step|question|message|tool call|run)(?:e?s)?|(?:answering|responding|replying|returning"
                  r"|starting)(?: \w+){0,3}?)")
_TOOL_CALL = r"(?:using|calling|invoking|running|executing|you use|you call|you invoke|use|call)"
_TAGS = (r"important|system|instructions?|hidden|admin|sys|critical|assistant|directive|override"
         r"|note[ _-]?to[ _-]?(?:ai|assistant|model|llm|agent)|ai[ _-]?instructions?|model[ _-]?instructions?")
_MODEL = r"(?:ai|assistant|model|llm|agent|claude|chatgpt|gpt|copilot|gemini)"

# "ignore … instructions": the verb in any form, the instructions qualified as the ones the model already has.
_IGNORE = (r"(?:ignor\w*|disregard\w*|forget\w*|forgot|overrid\w*|overrul\w*|bypass\w*|abandon\w*|skip\w*|neglect\w*"
           r"|discard\w*|ditch\w*|supersed\w*|nullif\w*|set aside|put aside|throw out"
           r"|pay no (?:attention|heed|mind) to|stop (?:following|obeying|observing)"
           r"|(?:do not|don't|never|no longer) (?:follow|obey|observe|adhere to|comply with|listen to|respect|apply))")
_PRIOR = (r"(?:previous|previously given|prior|above|earlier|preceding|former|foregoing|original|initial|system|safety"
          r"|security|developer|operator|standing|built-in|other|old)")
_STRONG = (r"(?:instructions?|prompts?|system prompts?|guidelines|guidance|directives|directions|guardrails|programming"
           r"|training|system messages?)")
_WEAK = r"(?:messages|context|constraints|restrictions|policies|limitations|safeguards|filters)"
_GIVEN = (r"(?:(?:that |which )?(?:you|i|we) (?:were|have been|'ve been|are|got|received|had|was|have)(?: \w+)?"
          r"|(?:that |which )?(?:were )?given (?:to you|earlier|before|above|previously)|above|so far|until now"
          r"|up to now|before this(?: one)?|earlier(?! than)|previously"
          r"|from (?:the|your) (?:user|developer|operator|system|creators?"
          r"|owners?|company)|in (?:your|the) (?:system )?prompt)")
_IGNORE_PATTERN = "|".join([
    rf"\b(?!overrid\w* (?:the )?system ){_IGNORE} (?:(?:all|any|of|the|your|these|those|every|my|our|each) )*{_PRIOR}"
    rf" (?:\w+ )?{_STRONG}\b",
    rf"\b(?:ignor\w*|disregard\w*|forget\w*|overrid\w*|overrul\w*|bypass\w*) (?:(?:all|any|of|the|these|those) )*"
    rf"(?:previous|prior|above|earlier|preceding|initial|original|system|safety) (?:\w+ )?{_WEAK}\b",
    rf"\b{_IGNORE} (?:(?:all|any|of|every) )*your (?:\w+ )?(?:{_STRONG}|{_WEAK}|rules)\b"
    r"(?! (?:file|files|config\w*|section|engine|set|list|table|chain|directory|folder)\b)",
    rf"\b{_IGNORE} (?:of )?(?:all|any|every) (?:of )?(?:the |your )?(?:\w+ )?(?:instructions|system prompts?|guidelines"
    r"|directives|guardrails)\b(?! (?:in|from|of|for|that|which|whose|listed|matching|below)\b)",
    rf"\b{_IGNORE} (?:(?:all|any|of|the|these|those|whatever|whichever) )*(?:\w+ )?(?:{_STRONG}|rules|polic(?:y|ies)"
    rf"|persona|role) {_GIVEN}\b",
    r"\b(?:ignor\w*|forget\w*|forgot|disregard\w*) (?:about )?(?:everything|anything|all(?: of)? (?:that|this)|what(?:ever)?)"
    r" (?:you (?:were|have been|'ve been|are|was) (?:told|given|instructed|taught)|(?:i|we|they|it) (?:said|told you"
    r"|wrote)|(?:written |said |stated |mentioned )?(?:above|before|previously|so far|earlier|until now))",
    rf"\b(?:{_PRIOR} (?:\w+ )?(?:{_STRONG}|rules)|(?:{_STRONG}|rules) {_GIVEN}) (?:(?:now |hereby )?no longer (?:apply"
    r"|applies|holds?|matters?|counts?|stands?)\b|(?:are|is|have been|were)"
    r" (?:now |hereby )?(?:void|null|invalid|cancel+ed|revoked|obsolete|outdated|superseded|suspended"
    r"|no longer (?:valid|in effect|applicable|apply|relevant|binding)))\b",
    rf"\b(?:these|the following|my|our|this tool's|the tool's|these new) (?:instructions|rules|directives) (?:override"
    rf"|overrule|supersede|replace|take precedence over|have priority over|outrank|trump) (?:(?:all|any|your|the) )*"
    rf"(?:\w+ )?(?:{_STRONG}|{_WEAK})\b",
    r"\b(?:treat|consider|use|take|regard|adopt|accept) (?:\w+ ){0,4}?as (?:your|the model's|the assistant's) (?:new"
    r" |real |actual |updated |true |only )?(?:system prompt|instructions|directives|guidelines|rules|orders)\b"
    r"|\b(?:system|admin|developer|security|priority|emergency) (?:override|directive)s?\s*:"
    r"|\bnew (?:system )?instructions?\s*:|\b(?:your|the) (?:real|true|actual|new|updated) instructions (?:are|follow)",
])

RULES: tuple[Rule, ...] = (
    # invisible_unicode: on the raw text
    Rule("zero_width_characters", "invisible_unicode",
         "zero-width characters (spaces, joiners between Latin letters, word joiners, BOM inside the text)",
         check=_zero_width, raw=True),
    Rule("bidi_controls", "invisible_unicode",
         "bidirectional embedding/override/isolate controls that reorder what a reader sees (U+202A–202E, U+2066–2069)",
         check=_bidi, raw=True),
    Rule("unicode_tag_characters", "invisible_unicode",
         "Unicode tag characters (U+E0000–E007F): invisible ASCII a model still reads", check=_tags, raw=True),
    Rule("variation_selector_smuggling", "invisible_unicode",
         "stacked variation selectors, the way bytes are hidden behind an emoji", check=_variation_smuggling, raw=True),
    Rule("format_characters", "invisible_unicode", "other invisible format (Cf) characters", check=_other_format,
         raw=True),
    Rule("private_use_characters", "invisible_unicode", "private-use characters (no meaning a reviewer can see)",
         check=_private_use, raw=True),
    Rule("oversized_text", "encoded_payload", "a text so long only its beginning is scanned", check=_oversized,
         raw=True),
    # hidden_instruction
    Rule("instruction_tag", "hidden_instruction", "<IMPORTANT>, <system>, <instructions> … tags addressed to the model",
         rf"<\s*/?\s*(?:{_TAGS})\b[^<>]{{0,60}}>|\{{\{{\s*(?:system|instructions?)\s*\}}\}}", folded=True),
    Rule("system_marker", "hidden_instruction", "[SYSTEM], [INST], <<SYS>>, <|im_start|> and similar chat markers",
         r"\[\s*/?\s*(?:system|inst|admin|instructions?|important|assistant)\s*\]|<<\s*/?\s*sys\s*>>"
         r"|<\|\s*(?:im_start|im_end|system|endoftext|assistant|user)\s*\|>"),
    Rule("role_marker", "hidden_instruction", "text pretending to be a chat turn (`assistant:`, `### system`)",
         r"\n[^\S\n]*>?[^\S\n]*(?:#{1,6}[^\S\n]*)?(?:system|assistant|developer)[^\S\n]*(?::|\n)"
         r"|#{2,6}[^\S\n]*(?:system|assistant|developer)(?: (?:prompt|message|instructions?))?\b"),
    Rule("ignore_instructions", "hidden_instruction",
         "\"ignore / disregard / forget / override the instructions you were given\" in any phrasing",
         _IGNORE_PATTERN, folded=True),
    Rule("role_override", "hidden_instruction", "tells the model it is now something else (\"you are now in … mode\")",
         r"\byou are now (?:in (?:\w+ ){0,2}mode|a |an |acting|operating|free|unrestricted|unfiltered|jailbroken"
         r"|no longer|dan\b|in charge|allowed|permitted|authori[sz]ed)|\bfrom now on,? (?:you|the assistant|always|never"
         r"|ignore|respond|answer|reply|act|only)\b|\bact as (?:if you (?:were|are|had) )?(?:an? )?(?:unrestricted"
         r"|unfiltered|jailbroken|dan\b|evil|root|no restrictions)", folded=True),
    Rule("conceal_from_user", "hidden_instruction", "asks the model to keep something from the user",
         r"\b(?:do\s*n[o']?t|never|don't|avoid|without|refrain from) (?:ever )?(?:tell|mention|inform|notify|reveal|show"
         r"|alert|disclose|let|display|explain|say|report|warn)(?:ing)? (?:\w+ ){0,4}?users?\b(?!')"
         r"|\b(?:hide|conceal|keep) (?:this|it|that|these|the \w+) (?:\w+ )?(?:from|secret from) (?:the )?users?\b"
         r"|\busers? (?:must|should|need|will|does|do|can)\s*(?:not|n't|never) (?:know|see|notice|be told|find out|learn)"
         r"|\bwithout (?:the )?user'?s? (?:knowledge|knowing|noticing|consent|approval)"
         r"|\b(?:silently|secretly|quietly|covertly|discreetly|invisibly) (?:\w+ )?(?:read|send|call|include|pass"
         r"|forward|copy|add|upload|execute|run|invoke|fetch|attach|append|collect)\b", folded=True),
    Rule("precondition", "hidden_instruction",
         "\"before using this tool, read / pass / include …\": steps the tool itself does not need",
         rf"\bbefore {_TOOL_CALL} (?:this|the|that|any|these) (?:\w+ )?(?:tools?|functions?)\b{_CLAUSE}{{0,160}}?"
         r"\b(?:read|pass|include|send|attach|upload|cat|open|fetch|append|copy|collect|visit|post)\b"
         rf"|\bbefore {_TOOL_CALL} (?:this|the|that|any) (?:\w+ )?(?:tools?|functions?),? (?:you )?"
         r"(?:must|should|always|first|need to) (?:first |always )?call\b", folded=True),
    Rule("pre_call_action", "hidden_instruction",
         "\"prior to any search / before each call, fetch / read / send …\": an errand run before the real work",
         rf"\b(?:prior to|before|ahead of) {_PRE_CALL_WHEN}(?:[,:;]|\s[—–-]|(?= (?:you|the assistant|the model|the agent)"
         r" (?:must|should|need to|have to|shall|will)\b)) (?:(?:you|the assistant|the model|the agent) (?:must|should"
         r"|need to|have to|shall|will|are to) |please |first |always |make sure (?:to |you )|be sure to |remember to"
         r" |silently |quietly |also )*(?:fetch|call|read|send|visit|open|load|post|upload|include|attach|invoke|run"
         r"|execute|query|collect|ping|curl|navigate to|browse to|submit|download|cat|append|pass|forward)\b"
         r"|\bat the (?:start|beginning) of (?:every|each|the|a|any) (?:conversation|session|chat|turn|response|reply)"
         r",? (?:(?:you|the assistant) (?:must|should) |please |first |always |silently )*(?:fetch|call|read|send|visit"
         r"|open|load|post|upload|invoke|run|execute|collect|ping)\b", folded=True),
    Rule("you_must", "hidden_instruction", "\"you must first / always …\" addressed to the model",
         r"\byou (?:must|have to|are required to|shall|need to|are instructed to) (?:first|always|never|absolutely)\b"
         r"|\b(?:always|first) (?:make sure|ensure) (?:to|that) you\b", folded=True),
    Rule("html_comment", "hidden_instruction", "an HTML comment (hidden when the description is rendered)",
         r"<!--.*?(?:-->|$)"),
    Rule("addressed_to_model", "hidden_instruction",
         "a note addressed to the AI / assistant / model reading it (\"Note to the model:\", \"AI instructions:\")",
         rf"\b(?:note|notes|memo|reminder|notice|warning|directive|psa|nb|instructions?) (?:to|for) (?:the |any |all "
         rf"|you,? )?{_MODEL}s?\s?[:,\-—!)\]]"
         rf"|\b(?:hey|dear|attention|listen),? {_MODEL}\b|\bas an? (?:ai|llm|language model|assistant),? you (?:must|should"
         rf"|will)\b|(?:^|[\n.!?:(\[*>-]\s?)(?:important )?(?:the )?{_MODEL}'?s? (?:note|notes|memo|reminder|directive"
         rf"|only|eyes only)\s*[:\-—]|\b(?:ai|assistant|llm)'?s? instructions?\s*[:\-—]"
         r"|\b(?:the |this |any |an? )?(?:assistant|ai|llm|language model|chatbot|ai agent)s? (?:must|shall"
         r"|is required to|has to|needs to|is (?:instructed|obliged|authori[sz]ed|allowed|permitted) to"
         r"|will now|is now|may now)\b(?! (?:not )?(?:be|have|exist|belong|support|implement|provide|handle|let|tell|inform"
         r"|notify|ask|warn|confirm|show|explain|respect|follow|use|treat|interpret|consider|regard)\b)", folded=True),
    # sensitive_files
    Rule("ssh_keys", "sensitive_files", "SSH keys and config",
         r"~?[/\\]?\.ssh\b|\bid_(?:rsa|ed25519|ecdsa|dsa)\b|\bauthorized_keys\b"),
    Rule("system_credentials", "sensitive_files", "/etc/passwd, /etc/shadow, sudoers, process environments, "
         "mounted service-account secrets",
         r"/etc/(?:passwd|shadow|sudoers|gshadow|master\.passwd)\b|/proc/(?:self|\d+|\*)/environ\b"
         r"|/(?:var/)?run/secrets\b"),
    Rule("cloud_credentials", "sensitive_files", "cloud and tool credential files",
         r"\.aws[/\\]credentials|\.netrc\b|\.pgpass\b|\.git-credentials\b|\.docker[/\\]config\.json"
         r"|\.kube[/\\]config\b|\.npmrc\b|\.pypirc\b|\.gnupg\b|gcloud[/\\](?:credentials|application_default|legacy_cred"
         r"|access_tokens)|application_default_credentials\.json|\.azure[/\\]|\bwallet\.dat\b"
         r"|\.(?:bash|zsh|psql|mysql|python|node_repl|sh|fish)_history\b|\.histfile\b|\.dockercfg\b|\.vault-token\b"
         r"|\.s3cfg\b|\.boto\b|\.oci[/\\]config\b|\.terraform\.d[/\\]credentials|\.(?:cargo|gem)[/\\]credentials"
         r"|\.composer[/\\]auth\.json|\.m2[/\\]settings(?:-security)?\.xml|\.config[/\\]git[/\\]credentials"),
    Rule("cli_token_files", "sensitive_files", "config directories where CLIs keep their login tokens",
         r"\.config[/\\](?:gh|hub|glab-cli|gcloud|doctl|rclone|op|heroku|netlify|vercel|configstore|github-copilot"
         r"|stripe|flyctl|railway|ngrok|twilio|firebase|helm|argocd|gitlab)\b|\bgh[/\\]hosts\.ya?ml\b"
         r"|\.(?:fly|railway|netlify|vercel|ngrok2|heroku|stripe|firebase|circleci|travis|codecov|sentryclirc"
         r"|wrangler)[/\\]"),
    Rule("home_secret_path", "sensitive_files", "a file in someone's home directory whose name says it holds secrets",
         r"(?:~|\$\{?HOME\}?|%USERPROFILE%|%HOMEPATH%|%APPDATA%|%LOCALAPPDATA%|/home/[^/\s]+|/root|/Users/[^/\s]+"
         r"|[A-Z]:\\Users\\[^\\\s]+)[/\\](?:[^\s'\"`]*?[/\\])?[^\s'\"`/\\]*?(?:credential|secret|token|passw|auth|cookie"
         r"|wallet|keychain|keyring|private|\.pem\b|\.key\b|\.p12\b|\.pfx\b|\.kdbx\b|\.env\b)"),
    Rule("dotenv_file", "sensitive_files", "a .env file", r"(?:^|[\s`'\"(/\\])\.env(?:\.[a-z]+)?(?![\w-])"),
    Rule("agent_config_files", "sensitive_files", "MCP / AI-client configuration (holds other servers' secrets)",
         r"\bmcp\.json\b|claude_desktop_config\.json|\.cursor[/\\]|\.claude[/\\]|\.continue[/\\]config"
         r"|\.codeium[/\\]|\.vscode[/\\](?:settings|mcp)\.json|windsurf[/\\]mcp_config"),
    Rule("browser_secrets", "sensitive_files", "browser profiles, cookies, saved passwords, keychains, password stores",
         r"\b(?:browser|chrome|chromium|firefox|edge|safari|brave)'?s? (?:saved |stored )?(?:passwords|logins|autofill"
         r"|password manager)\b|\b(?:export|dump|steal|extract|harvest|exfiltrate|decrypt|collect|grab)\w* (?:(?:all|the"
         r"|every|your|the user's|of) )*(?:browser|chrome|chromium|firefox|edge|safari|brave)'?s? (?:session )?(?:cookies"
         r"|history|profiles?|local storage|session data)\b|\bcookies\.sqlite\b|\bLogin Data\b"
         r"|\bkey[34]\.db\b|\blogins\.json\b|\bLocal State\b|\b(?:saved|stored) passwords\b"
         r"|\b(?:unlock|dump|export|read|open|access|query|search|extract|copy|decrypt)\w* (?:(?:the|your|a|user'?s?"
         r"|system|login|os|macos|gnome|kde|windows) ){0,3}(?:keychains?|keyrings?|credential (?:manager|store|vault)"
         r"|password (?:store|vault|database|manager))\b|\blogin\.keychain|\bLibrary[/\\](?:Keychains|Cookies)\b"
         r"|\.password-store\b|\.kdbx\b|\.local[/\\]share[/\\]keyrings\b|\.mozilla[/\\]firefox\b|Firefox[/\\]Profiles"
         r"|(?:Google[/\\]Chrome|Chromium|BraveSoftware[/\\]Brave-Browser|Microsoft[/\\]Edge)[/\\](?:User Data|Default)"
         r"|\bsecurity (?:find|dump)-(?:generic-password|internet-password|keychain)\b|\bsecret-tool lookup\b"
         r"|Microsoft[/\\](?:Credentials|Protect)\b"),
    # exfiltration
    Rule("secret_exfiltration", "exfiltration",
         "send / include / pass the conversation, or secrets the model holds, into a parameter or elsewhere",
         rf"\b{_SEND}\b{_CLAUSE}{{0,100}}?\b{_HARD_SECRETS}|\b{_SEND}\b{_OBJECT_GAP}\b{_SOFT_SECRETS}"),
    Rule("conversation_placeholder", "exfiltration",
         "a template slot for the conversation or secrets (`?q={conversation}`): fills a URL or argument with them",
         r"(?:\$?\{\{?|%\(|\[\[)\s*(?:conversation|conversation_history|chat|chat_history|chat_log|history|messages"
         r"|message_history|previous_messages|transcript|dialog(?:ue)?|system_prompt|secrets?|credentials|passwords?"
         r"|cookies|api_keys|tokens|env_vars|environment_variables|user_data|memories)\s*(?:\}\}?|\)s|\]\])"),
    Rule("file_into_parameter", "exfiltration", "read something and pass its content along",
         rf"\b(?:read|cat|open|load|get|collect|gather|fetch)\b{_CLAUSE}{{0,100}}?\b(?:and|then)\b{_CLAUSE}{{0,40}}?"
         rf"\b(?:pass|include|put|send|add|append|attach|insert|embed|provide|place|encode)\b{_CLAUSE}{{0,30}}?"
         r"\b(?:its|their|the|this|that|whole|full|entire) (?:\w+ )?(?:content|contents|text|data|value|output)s?\b"
         rf"|\b(?:read|cat|open|load|collect|gather|fetch)\b{_CLAUSE}{{0,100}}?\b(?:and|then)\b (?:\w+ ){{0,2}}?(?:pass|include"
         r"|put|send|add|append|attach|insert|embed|place|encode|paste|stuff)\b (?:it|them|this|that|those)\b (?:\w+ ){0,2}?"
         r"(?:to|into|in|as|inside|onto) (?:the |a |your |each )?(?:\w+ )?(?:query|url|parameters?|param|arguments?"
         r"|field|request|notes?|sidenote|context|metadata|headers?|payload|link|string|query string|search terms?)\b"),
    Rule("encode_and_send", "exfiltration", "encode data before handing it over",
         r"\b(?:base64|hex|url|rot13)?[- ]?encode (?:it|them|this|that|the|its|their|all|every|your)\b[^.\n]{0,80}?"
         r"\b(?:and|then)\b[^.\n]{0,20}?\b(?:pass|send|include|put|add|append|attach|insert|embed)\b"),
    Rule("exfil_endpoint", "exfiltration", "curl / wget commands, webhook catchers, sending data to a URL",
         r"\b(?:curl|wget|nc|netcat|ncat)\b(?: -{1,2}[\w-]+(?: \S+)?)* ['\"]?(?:https?://|-d\b|--data|-F\b|--upload"
         r"|[\w.-]+:\d+)|\bwebhook\.site\b|\brequestbin|\bpipedream\.net|\bngrok(?:-free)?\.(?:io|app|dev)\b"
         r"|\bburpcollaborator|\binteract\.sh\b|\boast\.(?:fun|me|pro|live|site|online)\b|\bcanarytokens"
         r"|\b(?:send|post|upload|forward|transmit|exfiltrate|report|leak|beacon|ping)\b[^.\n]{0,60}?\b(?:to|at) "
         r"[`'\"]?https?://|\$\(\s*cat\b|`cat [~/.]"),
    Rule("reveal_prompt", "exfiltration", "asks for the system prompt or hidden instructions",
         r"\b(?:reveal|print|output|repeat|show|dump|return|echo|leak|recite)\b (?:\w+ ){0,2}?(?:your|the) (?:full |entire "
         r"|complete |original )?(?:system prompt|system message|hidden instructions|initial instructions)", folded=True),
    # tool_shadowing
    Rule("other_tool_behaviour", "tool_shadowing", "instructions about how other tools must behave",
         r"\b(?:when|whenever|if|every time|each time|while|after)\b[^.\n]{0,80}?\b(?:any|other|another|every|all"
         r"|the other) (?:tools?|functions?|servers?|mcp servers?)\b[^.\n]{0,80}?\b(?:also|instead|additionally"
         r"|must|always|make sure|first|should|has to|have to)\b"
         r"|\b(?:the|this) [`'\"]?\w+_\w+[`'\"]? (?:tool|function) (?:must|should|has to|will now|is required to)\b"
         r"|\b(?:also|additionally|secretly|silently|always) (?:call|invoke|use|run|execute|trigger) (?:the )?"
         r"(?!(?:this|that|these|the|our|its)\b)[`'\"]?\w+"
         r"[`'\"]? (?:tool|function)\b"),
    Rule("redirect_messages", "tool_shadowing", "\"all emails must be sent to …\"",
         r"\b(?:all|every|any|each) (?:outgoing )?(?:e-?mails?|messages?|payments?|transfers?|transactions?|invoices?"
         r"|notifications?|uploads?|files?|replies|funds|money) (?:must|should|shall|need to|have to|are to|will)"
         r" (?:always )?(?:also )?(?:be )?(?:sent|forwarded|cc'?d|bcc'?d|routed|redirected|copied|addressed|delivered"
         r"|uploaded|transferred|paid|mirrored) (?:also )?(?:to|via)\b"),
    Rule("change_recipient", "tool_shadowing", "change the recipient / destination of another action",
         r"\b(?:change|replace|modify|override|rewrite|redirect|swap|substitute|alter)\b (?:the |any |every |all )?"
         r"(?:recipients?|receivers?|destination|to[- ]address|to field|target (?:account|address)|beneficiar(?:y|ies)"
         r"|iban|account numbers?|wallet address(?:es)?|bcc|cc|email address(?:es)?)\b"
         r"|\b(?:add|include|insert|put)\b [`'\"]?[\w.+-]+@[\w-]+\.[\w.]+[`'\"]? (?:as|to|in|into) (?:the |a )?"
         r"(?:bcc|cc|recipients?)\b|\b(?:bcc|cc)\b:? (?:to )?[`'\"]?[\w.+-]+@[\w-]+\.[a-z]{2,}"),
    # encoded_payload
    Rule("base64_blob", "encoded_payload", "a long base64 blob (or base64 that decodes to hidden text)",
         check=_base64),
    Rule("hex_blob", "encoded_payload", "a long hex blob", check=_hex),
)

CATEGORIES = tuple(dict.fromkeys(rule.category for rule in RULES))

# --- normalization --------------------------------------------------------------------------------------------------
# Cyrillic and Greek letters that look like Latin ones: "іgnore" must read as "ignore" for the text rules.
_CONFUSABLES = str.maketrans({
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s", "һ": "h",
    "ԁ": "d", "ɡ": "g", "ӏ": "l", "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
    "С": "C", "Т": "T", "Х": "X", "І": "I", "Ј": "J", "Ѕ": "S", "α": "a", "ο": "o", "ν": "v", "ρ": "p", "τ": "t",
    "ι": "i", "κ": "k", "Α": "A", "Β": "B", "Ε": "E", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Χ": "X", "Υ": "Y", "Ζ": "Z", "ı": "i", "ɩ": "i", "ɑ": "a", "ʏ": "y", "ᴀ": "a", "ᴇ": "e",
    "ɪ": "i", "ᴏ": "o", "ꜱ": "s", "ᴛ": "t", "ᴜ": "u", "ɴ": "n", "ʀ": "r", "ᴅ": "d", "ɢ": "g", "ʜ": "h", "ʟ": "l",
    "ᴍ": "m", "ᴘ": "p", "ᴄ": "c", "ᴋ": "k", "ᴠ": "v", "ᴡ": "w", "ᴢ": "z", "ᴊ": "j", "ꞯ": "q",
})
# Leetspeak, folded only inside words that mix letters with these symbols ("1gn0re", "pr3v!ous"), and only on the copy
# the instruction rules read: "3 files" or "$HOME" elsewhere stay as written.
_LEET_I = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "!": "i",
                         "|": "l", "8": "b", "9": "g"})
_LEET_L = str.maketrans({"0": "o", "1": "l", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "!": "i",
                         "|": "l", "8": "b", "9": "g"})
_LEET_WORD_RE = re.compile(r"[A-Za-z0-9@$!|]*[A-Za-z][A-Za-z0-9@$!|]*")
_LEET_CHARS = set("013457@$!|89")
_EMPHASIS_RE = re.compile(r"(?<!\w)(?:[*_]{1,3}|~~)|(?:[*_]{1,3}|~~)(?!\w)|`")
_HSPACE_RE = re.compile(r"[^\S\n]+")
_NEWLINES_RE = re.compile(r" ?\n[\s]*")


def normalize(text: str) -> str:
    """The text the text rules read: invisible characters removed, NFKC-folded, look-alikes mapped to Latin,
    markdown emphasis dropped, runs of spaces and of newlines collapsed."""
    text = "".join(ch for ch in text if not _invisible(ch))
    text = unicodedata.normalize("NFKC", text).translate(_CONFUSABLES)
    text = _EMPHASIS_RE.sub("", text)
    text = _HSPACE_RE.sub(" ", text)
    return _NEWLINES_RE.sub("\n", text).strip()


def fold_leetspeak(text: str) -> list[str]:
    """Copies of `text` with leetspeak folded back to letters (one reading "1" as i, one as l); empty when there is
    nothing to fold. Words of digits alone ("3", "2024") and words without a letter are left as they are."""
    def fold(table: dict[int, str]) -> str:
        def word(match: re.Match) -> str:
            w = match.group()
            core = w.rstrip("!|")  # "Hello!" keeps its exclamation mark
            if not _LEET_CHARS.intersection(core) or not re.search(r"[A-Za-z]", core):
                return w
            return core.translate(table) + w[len(core):]
        return _LEET_WORD_RE.sub(word, text)

    variants = []
    for table in (_LEET_I, _LEET_L):
        folded = fold(table)
        if folded != text and folded not in variants:
            variants.append(folded)
    return variants


def _hidden_texts(raw: str) -> Iterator[tuple[str, str]]:
    """(label, text) smuggled in invisible characters: tag characters map to ASCII, variation selectors to bytes."""
    tags = "".join(chr(ord(ch) - 0xE0000) for ch in raw if 0xE0020 <= ord(ch) <= 0xE007E)
    if tags.strip():
        yield "hidden in tag characters", tags
    data = bytearray()
    for ch in raw:
        cp = ord(ch)
        if 0xFE00 <= cp <= 0xFE0F:
            data.append(cp - 0xFE00)
        elif 0xE0100 <= cp <= 0xE01EF:
            data.append(cp - 0xE0100 + 16)
    if len(data) >= 4:
        decoded = data.decode("utf-8", errors="ignore")
        if sum(ch.isprintable() for ch in decoded) > len(decoded) * 0.9:
            yield "hidden in variation selectors", decoded


def _escaped(text: str) -> str:
    out = []
    for ch in text:
        if _invisible(ch):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        elif ch in "\n\r\t":
            out.append(" ")
        else:
            out.append(ch)
    return "".join(out)


def excerpt(text: str, start: int, end: int, label: str = "") -> str:
    """At most EXCERPT_CHARS of `text` around [start, end), invisible characters as \\u escapes."""
    prefix = f"[{label}] " if label else ""
    budget = EXCERPT_CHARS - len(prefix)
    match = _escaped(text[start:end])
    if len(match) >= budget:
        return (prefix + match[:budget - 1] + "…")[:EXCERPT_CHARS]
    room = budget - len(match)
    before = _escaped(text[max(0, start - room):start])
    after = _escaped(text[end:end + room])
    left = min(len(before), max(room // 2, room - len(after)))
    before = before[len(before) - left:] if left else ""
    after = after[:room - len(before)]
    body = before + match + after
    if start - len(before) > 0 and before:
        body = "…" + body[1:]
    if end + len(after) < len(text) and after:
        body = body[:-1] + "…"
    return prefix + re.sub(r" {2,}", " ", body)


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string in a JSON value with its location (property names included)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            key = str(key)
            yield f"{path}.{key}(name)", key.replace("_", " ")
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


def text_flags(text: str, where: str = "description", skip: frozenset[str] = frozenset()) -> list[dict[str, str]]:
    """The flags of one string: raw rules on it, text rules on its normalized form and on any smuggled text, the
    instruction rules also on its leetspeak-folded copies. Rules of the categories in `skip` do not run."""
    text = text[:MAX_SCAN_CHARS + 1]
    flags: list[dict[str, str]] = []
    seen: set[str] = set()

    def add(rule: Rule, source: str, label: str) -> None:
        if rule.id in seen:
            return
        spans = rule.spans(source)
        if spans:
            seen.add(rule.id)
            flags.append({"rule": rule.id, "category": rule.category, "excerpt": excerpt(source, *spans[0], label),
                          "where": where})

    normalized = normalize(text)
    variants = [("", normalized)] + [(label, normalize(hidden)) for label, hidden in _hidden_texts(text)]
    for match in _B64_RE.finditer(normalized):
        decoded = _base64_text(match.group())
        if decoded:
            variants.append(("decoded from base64", normalize(decoded)))
    folded = [("leetspeak folded", copy) for _, variant in variants for copy in fold_leetspeak(variant)]
    for rule in RULES:
        if rule.category in skip:
            continue
        if rule.raw:
            add(rule, text, "")
            continue
        for label, variant in variants + (folded if rule.folded else []):
            add(rule, variant, label)
    return flags


# A tool name is an identifier, and names such as `change_email_address` or `send_message` are ordinary: only the rules
# that find words addressed to the model, secret files, invisible characters or encoded blobs read it.
_NAME_SKIPS = frozenset({"tool_shadowing"})


def name_words(name: str) -> str:
    """A tool name as the words it spells: `ignorePrevious_instructions-now` → "ignore Previous instructions now"."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", name)
    return re.sub(r"[_\-]+", " ", words)


def description_flags(definition: ToolDefinition) -> list[dict[str, str]]:
    """Instruction-like, secret-seeking or invisible content in a tool's name, its description and anywhere in its
    input schema: `[{"rule", "category", "excerpt", "where"}]` (one flag per rule and place; empty = nothing found)."""
    flags = text_flags(name_words(definition.name or ""), "name", _NAME_SKIPS)
    flags.extend(text_flags(definition.description or "", "description"))
    for where, value in _strings(definition.input_schema or {}, "input_schema"):
        flags.extend(text_flags(value, where))
    return flags
