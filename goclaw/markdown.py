"""Markdown written by untrusted authors (agents write context files) rendered for people's pages. Two maintained
layers: markdown-it-py parses CommonMark with raw HTML off (HTML in the text is shown as text), then nh3 (the
ammonia sanitizer) keeps only a small allowlist of tags, attributes and URL schemes, so a gap in one layer is
caught by the other. Neither recurses on the input's depth: the parser stops nesting at MAX_NESTING, and a text
that reaches that depth is shown whole as plain text instead (the parser would silently drop what lies deeper)."""
from __future__ import annotations

import nh3
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

# markdown-it's CommonMark preset nests at most 20 levels (blocks and inline alike): bounded recursion.
MAX_NESTING = 20

ALLOWED_TAGS = frozenset({"p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "code", "pre",
                          "blockquote", "ul", "ol", "li", "a"})
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}}
# Anything else (javascript:, vbscript:, data:, file:, …) loses its href; relative links stay.
URL_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "noopener noreferrer nofollow"

_parser = MarkdownIt("commonmark", {"html": False, "maxNesting": MAX_NESTING})


def _image_as_link(renderer, tokens, idx, options, env) -> str:
    """An image becomes a link to it: a page showing hostile text must not fetch what that text points at (a
    tracking pixel, a GET on an internal URL)."""
    token = tokens[idx]
    alt = renderer.renderInlineAsText(token.children or [], options, env)
    return f'<a href="{escapeHtml(token.attrGet("src") or "")}">{escapeHtml("image: " + alt if alt else "image")}</a>'


_parser.add_render_rule("image", _image_as_link)
_cleaner = nh3.Cleaner(tags=set(ALLOWED_TAGS), attributes={k: set(v) for k, v in ALLOWED_ATTRIBUTES.items()},
                       url_schemes=set(URL_SCHEMES), link_rel=LINK_REL, strip_comments=True)


# Parsing is linear but slow on adversarial text (~1 s per 50,000 characters of "![" here): past this, the rest is
# shown as plain text, so a page showing an agent's 1 MB file answers in bounded time.
MAX_RENDERED_CHARS = 50_000


def markdown_to_html(text: str) -> SafeString:
    """CommonMark as sanitized HTML, safe to put in a page whoever wrote `text`."""
    if len(text) > MAX_RENDERED_CHARS:
        head, rest = text[:MAX_RENDERED_CHARS], text[MAX_RENDERED_CHARS:]
        return mark_safe(markdown_to_html(head) + f'\n<p class="markdown-rest">The preview renders the first '
                         f'{MAX_RENDERED_CHARS:,} characters; the remaining {len(rest):,} are shown as plain text.</p>\n'
                         f'<pre class="markdown-as-text">{escape(rest)}</pre>')
    tokens = _parser.parse(text)
    if any(token.level >= MAX_NESTING - 1 for token in tokens):
        return mark_safe('<p class="markdown-too-deep">This text nests deeper than the preview renders; it is shown '
                         f'as plain text.</p>\n<pre class="markdown-as-text">{escape(text)}</pre>')
    return mark_safe(_cleaner.clean(_parser.renderer.render(tokens, _parser.options, {})))
