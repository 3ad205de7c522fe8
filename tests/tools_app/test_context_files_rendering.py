"""Context files are written by agents, so the admin's Markdown preview renders hostile text: whatever an agent
writes, the change page and the live preview answer (no RecursionError on deep nesting, no text silently dropped),
and nothing in the rendered HTML can run script: no script element, no event-handler or style attribute, no link
whose scheme a browser would execute. The HTML is read with a real HTML parser, not searched for substrings."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from goclaw.markdown import markdown_to_html
from tests.factories import make_agent
from tools_app.models.context_files import AgentContextFile
from tools_app.services.context_files import ContextActor, context_file_write

pytestmark = pytest.mark.django_db

FILES = "/admin/tools_app/agentcontextfile/"
PREVIEW_ID = "context-file-live-preview"
# What rendered Markdown may contain: text structure and links, nothing that loads or runs anything.
RENDERED_TAGS = {"p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "code", "pre", "blockquote",
                 "ul", "ol", "li", "a"}
SAFE_SCHEMES = {"http", "https", "mailto"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "xlink:href", "data", "poster", "background", "srcset", "ping"}


class Rendered(HTMLParser):
    """The elements (tag, attributes with entities decoded) and the text of an HTML fragment as a browser's tokenizer
    reads them; with `inside`, only what is within the div of that id (the change page's preview)."""

    def __init__(self, html: str, inside: str | None = None) -> None:
        super().__init__(convert_charrefs=True)
        self.inside, self.depth = inside, 0 if inside else 1
        self.found = inside is None
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []
        self.feed(html)
        self.close()
        assert self.found, f"no element with id {inside!r} in the page"

    def handle_starttag(self, tag, attrs):
        if self.depth == 0:
            if tag == "div" and dict(attrs).get("id") == self.inside:
                self.depth, self.found = 1, True
            return
        self.elements.append((tag, dict(attrs)))
        if tag == "div":
            self.depth += 1

    def handle_startendtag(self, tag, attrs):
        if self.depth:
            self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if self.depth and tag == "div" and self.inside:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.texts.append(data)

    @property
    def text(self) -> str:
        return "".join(self.texts)


def browser_scheme(url: str) -> str | None:
    """The scheme a browser would use for this attribute value (it ignores ASCII whitespace and control characters
    around and tabs/newlines inside a URL); None for a relative URL. Stricter than a browser: every control
    character is dropped."""
    cleaned = re.sub(r"[\x00-\x20\x7f]", "", url).lower()
    match = re.match(r"([a-z][a-z0-9+.\-]*):", cleaned)
    return match.group(1) if match else None


def assert_nothing_executable(rendered: Rendered) -> None:
    for tag, attrs in rendered.elements:
        assert tag in RENDERED_TAGS, f"<{tag} {attrs}> rendered"
        for name, value in attrs.items():
            assert not name.startswith("on"), f"event handler {name}={value!r} on <{tag}>"
            assert name not in ("style", "srcdoc", "formaction"), f"{name} on <{tag}>"
            if name in URL_ATTRIBUTES:
                assert browser_scheme(value or "") in SAFE_SCHEMES | {None}, f"{name}={value!r} on <{tag}>"
        if tag == "a":
            assert {"noopener", "noreferrer", "nofollow"} <= set((attrs.get("rel") or "").split()), attrs


def rendered_both_ways(admin_client, content: str) -> list[Rendered]:
    """An agent writes `content` as its SOUL.md; a person opens it in the admin (the change page's preview) and
    the editor asks for the live preview of the same text."""
    agent = make_agent()
    context_file_write(agent=agent, name="SOUL.md", content=content, actor=ContextActor.of_agent(agent))
    row = AgentContextFile.objects.get(agent=agent, name="SOUL.md")
    page = admin_client.get(f"{FILES}{row.pk}/change/")
    assert page.status_code == 200
    preview = admin_client.post(f"{FILES}preview/", {"content": content})
    assert preview.status_code == 200
    return [Rendered(page.content.decode(), inside=PREVIEW_ID), Rendered(preview.content.decode())]


XSS = {
    "script element": "<script>alert(1)</script>",
    "script in a paragraph": "hello <script>alert(1)</script> world",
    "img onerror": "<img src=x onerror=alert(1)>",
    "svg onload": "<svg/onload=alert(1)>",
    "svg with script": "<svg><script>alert(1)</script></svg>",
    "math xlink": '<math><mi xlink:href="javascript:alert(1)">x</mi></math>',
    "iframe": "<iframe src=javascript:alert(1)></iframe>",
    "iframe srcdoc": '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    "details ontoggle": "<details open ontoggle=alert(1)>",
    "style element": "<style>body{background:url(javascript:alert(1))}</style>",
    "raw html block": "<div>\n<script>alert(1)</script>\n</div>",
    "html comment then script": "<!-- x --><script>alert(1)</script>",
    "anchor with javascript": '<a href="javascript:alert(1)">x</a>',
    "anchor with entity-encoded javascript": '<a href="&#x6A;avascript:alert(1)">x</a>',
    "anchor with onclick": "<a href=https://example.org onclick=alert(1)>x</a>",
    "object data": '<object data="javascript:alert(1)"></object>',
    "form action": '<form action="javascript:alert(1)"><button>go</button></form>',
    "link javascript": "[x](javascript:alert(1))",
    "link mixed case": "[x](JaVaScRiPt:alert(1))",
    "link leading space": "[x]( javascript:alert(1))",
    "link in angle brackets": "[x](<javascript:alert(1)>)",
    "link entity colon": "[x](javascript&#58;alert(1))",
    "link entity letter": "[x](&#106;avascript:alert(1))",
    "link entity tab": "[x](java&#x09;script:alert(1))",
    "link entity newline": "[x](java&#10;script:alert(1))",
    "link percent scheme": "[x](%6Aavascript:alert(1))",
    "link named entity colon": "[x](javascript&colon;alert(1))",
    "link named entity tab": "[x](java&Tab;script:alert(1))",
    "link named entity newline": "[x](java&NewLine;script:alert(1))",
    "link percent-encoded colon": "[x](javascript%3Aalert(1))",
    "link vbscript": "[x](vbscript:msgbox(1))",
    "link data html": "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "link file": "[x](file:///etc/passwd)",
    "link title breaking out": '[x](https://example.org "\\" onmouseover=\\"alert(1)")',
    "link destination with a quote": '[x](" onmouseover=alert(1))',
    "link title single quotes": "[x](https://example.org 'x\" onclick=\"alert(1)')",
    "link label with html": "[<img src=x onerror=alert(1)>](https://example.org)",
    "image javascript": "![x](javascript:alert(1))",
    "image data svg": "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    "image data png": "![x](data:image/png;base64,iVBORw0KGgo=)",
    "image alt breaking out": '![x" onerror="alert(1)](https://example.org/a.png)',
    "image title breaking out": '![x](https://example.org/a.png "t\\" onerror=\\"alert(1)")',
    "autolink javascript": "<javascript:alert(1)>",
    "autolink upper case": "<JAVASCRIPT:alert(1)>",
    "autolink vbscript": "<vbscript:msgbox(1)>",
    "autolink data": "<data:text/html,alert(1)>",
    "reference javascript": "[x][r]\n\n[r]: javascript:alert(1)",
    "reference angle brackets": "[r]\n\n[r]: <javascript:alert(1)> \"t\"",
    "reference image": "![x][r]\n\n[r]: javascript:alert(1)",
    "escaped entities": "&lt;script&gt;alert(1)&lt;/script&gt; &#60;script&#62;alert(1)&#60;/script&#62;",
    "code span closing": "`</code><script>alert(1)</script>`",
    "fenced code with html": "```html\n<script>alert(1)</script>\n```",
    "indented html": "    <script>alert(1)</script>",
    "heading with html": "# <img src=x onerror=alert(1)>",
    "list item with html": "- <svg onload=alert(1)>\n- [x](javascript:alert(1))",
    "quote with html": "> <script>alert(1)</script>\n> [x](javascript:alert(1))",
    "emphasis around html": "*<img src=x onerror=alert(1)>* **<script>alert(1)</script>**",
    "unicode line separator scheme": "[x](javascript\u2028:alert(1))",
    "control character in scheme": "[x](\u0001javascript:alert(1))",
}


@pytest.mark.parametrize("content", XSS.values(), ids=XSS.keys())
def test_hostile_markdown_renders_nothing_executable(content):
    assert_nothing_executable(Rendered(markdown_to_html(content)))


def test_the_change_page_and_the_live_preview_show_hostile_text_safely(admin_client):
    """The pages embed the same renderer: every spelling above at once, as an agent's SOUL.md."""
    for rendered in rendered_both_ways(admin_client, "\n\n".join(XSS.values())):
        assert_nothing_executable(rendered)
        assert "alert(1)" in rendered.text  # shown as text, not dropped


def test_images_are_links_so_the_page_fetches_nothing_the_text_points_at(admin_client):
    for rendered in rendered_both_ways(admin_client, "![pixel](https://tracker.example/p.gif)"):
        assert_nothing_executable(rendered)
        assert [attrs["href"] for tag, attrs in rendered.elements if tag == "a"] == ["https://tracker.example/p.gif"]
        assert "pixel" in rendered.text


def test_the_everyday_constructs_render_as_markdown(admin_client):
    text = ("# Soul\n\nIntro with **bold**, *word*, `code` and [docs](https://example.org/a).\n\n> quoted\n\n"
            "```\n<raw> & code\n```\n\n1. first\n2. second\n\n- one\n\n---\n\nsnake_case_name [rel](notes/x.md)\n")
    for rendered in rendered_both_ways(admin_client, text):
        assert_nothing_executable(rendered)
        tags = [tag for tag, _ in rendered.elements]
        for tag in ("h1", "strong", "em", "code", "blockquote", "pre", "ol", "ul", "li", "hr", "a"):
            assert tag in tags, tag
        assert "<raw> & code" in rendered.text and "snake_case_name" in rendered.text
        assert [attrs["href"] for tag, attrs in rendered.elements if tag == "a"] == ["https://example.org/a", "notes/x.md"]


END = "END-OF-THE-TEXT"
DEEP = {
    "2000 nested quotes": ">" * 2000 + " " + END,
    "2000 spaced nested quotes": "> " * 2000 + END,
    "1000 lines of growing quotes": "\n".join(">" * i + " line" for i in range(1, 1001)) + "\n\n" + END,
    "500 nested bullet lists": "\n".join("  " * i + "- item" for i in range(500)) + " " + END,
    "300 nested ordered lists": "\n".join("   " * i + "1. item" for i in range(300)) + " " + END,
    "2000 list markers on one line": "- " * 2000 + END,
    "quotes and lists interleaved": "> - " * 1000 + END,
    "2000 nested emphasis": "*" * 2000 + "x" + "*" * 2000 + " " + END,
    "nested strong and emphasis": "*a **b " * 2000 + "c** d*" * 2000 + " " + END,
    "2000 nested links": "[" * 2000 + "x" + "](y)" * 2000 + " " + END,
    "5000 nested brackets": "[" * 5000 + "a" + "]" * 5000 + " " + END,
    "links in link labels": "[a [b [c " * 1000 + "](d)" * 1000 + " " + END,
    "100k-character line": "a" * 100_000 + " " + END,
    "100k open brackets": "[" * 100_000 + END,
    "100k image openers": "![" * 50_000 + END,
    "100k asterisks": "*" * 100_000 + END,
    "100k underscores and letters": "_a" * 50_000 + " " + END,
    "100k backticks": "x" + "`" * 100_000 + END,  # at a line's start they would open a fence (END its info string)
    "100k angle brackets": "<" * 100_000 + END,
    "100k entity starts": "&#" * 50_000 + " " + END,
    "100k backslashes": "\\" * 100_000 + " " + END,
    "100k unclosed link destinations": "[a](b" * 20_000 + " " + END,
}


@pytest.mark.parametrize("content", DEEP.values(), ids=DEEP.keys())
def test_deep_nesting_and_very_long_lines_render_without_error_and_drop_nothing(content):
    rendered = Rendered(markdown_to_html(content))
    assert_nothing_executable(rendered)
    assert END in rendered.text  # the deepest / last part of the text is still shown


def test_the_change_page_and_the_live_preview_answer_for_deeply_nested_text(admin_client):
    """The finding: 2,000 nested quotes in an agent's file made the admin page fail with RecursionError."""
    for rendered in rendered_both_ways(admin_client, DEEP["2000 nested quotes"] + "\n\n" + DEEP["2000 nested links"]):
        assert_nothing_executable(rendered)
        assert END in rendered.text


def test_past_the_rendered_length_the_rest_of_a_file_is_shown_as_plain_text(admin_client):
    """An agent's 1 MB file of slow-to-parse markdown: the page answers in bounded time, and nothing is lost."""
    content = "# title\n\n" + "![" * 300_000 + "<script>alert(1)</script> " + END
    for rendered in rendered_both_ways(admin_client, content):
        assert_nothing_executable(rendered)
        assert "the remaining" in rendered.text and "<script>alert(1)</script>" in rendered.text and END in rendered.text
