"""A notebook as HTML: markdown rendered, Python highlighted, outputs shown (a tensor as a table),
and the static export ``python -m corvid.notebook to-html FILE.md``.

One renderer serves both the editor (the server renders what the page shows, so the page holds
no second markdown parser) and the export, so a notebook reads the same in both. The markdown
is the CommonMark subset notebooks use: headings, paragraphs, emphasis, code spans and fenced
code, links and images, lists, block quotes, tables (GitHub's), rules and line breaks. Raw HTML
in the file is shown as text, not interpreted, and links with a scheme other than http(s) or
mailto are dropped: the editor's page holds the token that runs code, so a notebook from
elsewhere must not be able to script it. Python is highlighted with :mod:`tokenize`, so the
colours follow Python's own grammar (f-strings, decorators, soft keywords aside).

The export is one file: the styles inline, every image as a ``data:`` URI, no script.
"""

from __future__ import annotations

import base64
import builtins
import html
import io
import keyword
import mimetypes
import os
import pathlib
import re
import tokenize
import urllib.parse
from collections.abc import Callable

from .document import Cell, Output, parse

__all__ = ["STATIC", "highlight_python", "render_markdown", "render_outputs", "tensor_table", "to_html"]

STATIC = pathlib.Path(__file__).resolve().parent / "static"  # the editor's page; notebook.css is shared

Link = Callable[[str, bool], str]  # (url, is_image) -> the URL the page uses

_PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_ENTITY = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#\d{1,7}|#[xX][0-9A-Fa-f]{1,6});")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_ITEM = re.compile(r"^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+|$)")
_TABLE_DELIMITER = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_EMPHASIS = [  # on escaped text, after code spans and links are set aside
    (re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)"), r"<strong>\1</strong>"),
    (re.compile(r"\*(?=[^\s*])([^*]*?)(?<=[^\s*])\*"), r"<em>\1</em>"),
    (re.compile(r"\*(?=[^\s*])([^*])\*"), r"<em>\1</em>"),
    (re.compile(r"(?<![\w_])_(?=[^\s_])([^_]*?)(?<=[^\s_])_(?![\w_])"), r"<em>\1</em>"),
    (re.compile(r"~~(?=\S)(.+?)(?<=\S)~~"), r"<del>\1</del>"),
]


def _escape(text: str) -> str:
    """HTML-escaped text that keeps the character references markdown allows (``&amp;``, ``&#169;``)."""
    out, pos = [], 0
    for m in _ENTITY.finditer(text):
        out += [html.escape(text[pos:m.start()], quote=False), m.group(0)]
        pos = m.end()
    return "".join(out) + html.escape(text[pos:], quote=False)


def _attr(text: str) -> str:
    return html.escape(text, quote=True)


def _keep_url(url: str, image: bool, link: Link) -> str | None:
    """The URL the page uses, or None for a scheme that could run script (``javascript:``, ``data:``)."""
    m = _SCHEME.match(url)
    if m and m.group(1).lower() not in ("http", "https", "mailto"):
        return None
    return link(url, image)


def _plain_link(url: str, image: bool) -> str:
    return url


def _closing_bracket(text: str, i: int) -> int:
    """The index of the ``]`` matching the ``[`` at ``i`` (brackets nest, escapes and code spans skipped), or -1."""
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "`":
            run = len(text[j:]) - len(text[j:].lstrip("`"))
            end = text.find("`" * run, j + run)
            j = j + run if end < 0 else end + run
            continue
        depth += c == "["
        depth -= c == "]"
        if depth == 0:
            return j
        j += 1
    return -1


def _destination(text: str, i: int) -> tuple[str, str, int] | None:
    """(url, title, index after the ``)``) of a link destination starting at ``text[i] == "("``."""
    m = re.compile(r"\(\s*(<[^<>\n]*>|[^\s()<>]*(?:\([^\s()<>]*\)[^\s()<>]*)*)"
                   r"(?:\s+(\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)").match(text, i)
    if not m:
        return None
    url = m.group(1)[1:-1] if m.group(1).startswith("<") else m.group(1)
    return url, (m.group(2) or "")[1:-1], m.end()


def _inline(text: str, link: Link) -> str:
    """Inline markdown to HTML: code spans, escapes, links, images, autolinks, emphasis, line breaks."""
    kept: list[str] = []

    def keep(fragment: str) -> str:
        kept.append(fragment)
        return f"\x00{len(kept) - 1}\x00"

    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in _PUNCT:
            out.append(keep(_escape(text[i + 1])))
            i += 2
        elif c == "\\" and text[i + 1:i + 2] == "\n":
            out.append(keep("<br>\n"))
            i += 2
        elif c == "`":
            run = len(text[i:]) - len(text[i:].lstrip("`"))
            m = re.compile(rf"(?<!`)`{{{run}}}(?!`)").search(text, i + run)
            if m is None:
                out.append(keep("`" * run))
                i += run
                continue
            code = text[i + run:m.start()].replace("\n", " ")
            if code.startswith(" ") and code.endswith(" ") and code.strip():
                code = code[1:-1]
            out.append(keep(f"<code>{html.escape(code, quote=False)}</code>"))
            i = m.end()
        elif c == "<" and (m := re.compile(r"<((?:https?://|mailto:)[^\s<>]+)>").match(text, i)):
            url = m.group(1)
            out.append(keep(f'<a href="{_attr(url)}">{_escape(url.removeprefix("mailto:"))}</a>'))
            i = m.end()
        elif c == "[" or (c == "!" and text[i + 1:i + 2] == "["):
            image = c == "!"
            start = i + image
            close = _closing_bracket(text, start)
            target = _destination(text, close + 1) if close > 0 else None
            if target is None:
                out.append(c)
                i += 1
                continue
            url, title, i = target
            label = text[start + 1:close]
            safe = _keep_url(url, image, link)
            title_attr = f' title="{_attr(title)}"' if title else ""
            if safe is None:
                out.append(keep(_inline(label, link)))
            elif image:
                alt = re.sub(r"[\[\]*_`]", "", label)
                out.append(keep(f'<img src="{_attr(safe)}" alt="{_attr(alt)}"{title_attr}>'))
            else:
                out.append(keep(f'<a href="{_attr(safe)}"{title_attr}>{_inline(label, link)}</a>'))
        else:
            out.append(c)
            i += 1
    result = _escape("".join(out))
    for pattern, replacement in _EMPHASIS:
        result = pattern.sub(replacement, result)
    result = re.sub(r" {2,}\n", "<br>\n", result)
    while "\x00" in result:
        result = re.sub(r"\x00(\d+)\x00", lambda m: kept[int(m.group(1))], result)
    return result


def _slug(text: str) -> str:
    """The anchor of a heading, as MyST makes it: lowercase, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _starts_block(line: str) -> bool:
    """Whether ``line`` interrupts a paragraph (a heading, fence, rule, quote or bullet starts)."""
    return bool(_HEADING.match(line) or _FENCE.match(line) or _RULE.match(line) or line.lstrip().startswith(">")
                or re.match(r"^ {0,3}([-*+]|1[.)])[ \t]+\S", line))


def _cells(row: str) -> list[str]:
    row = row.strip()
    row = row.removeprefix("|")
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)]


class _Blocks:
    """The block structure of markdown lines, rendered in one pass."""

    def __init__(self, lines: list[str], link: Link):
        self.lines, self.link, self.i = lines, link, 0

    def render(self) -> str:
        out = []
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if not line.strip():
                self.i += 1
            elif (m := _FENCE.match(line)) and not (m.group(2)[0] == "`" and "`" in m.group(3)):
                out.append(self.fenced(m))
            elif m := _HEADING.match(line):
                self.i += 1
                level, title = len(m.group(1)), (m.group(2) or "")
                out.append(f'<h{level} id="{_attr(_slug(title))}">{_inline(title, self.link)}</h{level}>')
            elif _RULE.match(line):
                self.i += 1
                out.append("<hr>")
            elif line.lstrip().startswith("<!--"):
                self.comment()
            elif line.lstrip().startswith(">"):
                out.append(self.quote())
            elif _ITEM.match(line):
                out.append(self.list())
            elif line.startswith(("    ", "\t")):
                out.append(self.indented())
            elif "|" in line and self.i + 1 < len(self.lines) and _TABLE_DELIMITER.match(self.lines[self.i + 1]) \
                    and len(_cells(line)) == len(_cells(self.lines[self.i + 1])):
                out.append(self.table())
            else:
                out.append(self.paragraph())
        return "\n".join(out)

    def fenced(self, m: re.Match) -> str:
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        body, self.i = [], self.i + 1
        while self.i < len(self.lines):
            close = _FENCE.match(self.lines[self.i])
            if close and close.group(2)[0] == fence[0] and len(close.group(2)) >= len(fence) \
                    and not close.group(3).strip():
                self.i += 1
                break
            line = self.lines[self.i]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))):])
            self.i += 1
        code = "\n".join(body) + ("\n" if body else "")
        language = info.split()[0] if info else ""
        shown = highlight_python(code) if language in ("python", "py", "pycon", "python3") \
            else html.escape(code, quote=False)
        cls = f' class="language-{_attr(language)}"' if language else ""
        return f"<pre><code{cls}>{shown}</code></pre>"

    def comment(self) -> None:
        while self.i < len(self.lines) and "-->" not in self.lines[self.i]:
            self.i += 1
        self.i += 1

    def quote(self) -> str:
        inner = []
        while self.i < len(self.lines) and self.lines[self.i].strip():
            line = self.lines[self.i]
            stripped = line.lstrip()
            if stripped.startswith(">"):
                inner.append(stripped[2:] if stripped.startswith("> ") else stripped[1:])
            elif _starts_block(line):
                break
            else:
                inner.append(line)  # a lazy continuation of the quoted paragraph
            self.i += 1
        return f"<blockquote>\n{_Blocks(inner, self.link).render()}\n</blockquote>"

    def list(self) -> str:
        first = _ITEM.match(self.lines[self.i])
        ordered = first.group(2)[-1] in ".)"
        items, loose = [], False
        while self.i < len(self.lines):
            m = _ITEM.match(self.lines[self.i])
            if not m or (m.group(2)[-1] in ".)") != ordered or m.group(2)[-1] != first.group(2)[-1]:
                break
            width = len(m.group(0)) if m.group(3) and len(m.group(3)) <= 4 else len(m.group(1) + m.group(2)) + 1
            content = [self.lines[self.i][width:]]
            self.i += 1
            while self.i < len(self.lines):
                line = self.lines[self.i]
                if not line.strip():
                    following = next((ln for ln in self.lines[self.i + 1:] if ln.strip()), None)
                    if following is None or len(following) - len(following.lstrip(" ")) < width:
                        loose = loose or (following is not None and bool(_ITEM.match(following)))
                        break
                    content.append("")
                    loose = True
                elif len(line) - len(line.lstrip(" ")) >= width:
                    content.append(line[width:])
                elif not _starts_block(line) and not _ITEM.match(line) and content[-1].strip():
                    content.append(line.lstrip())  # a lazy continuation line
                else:
                    break
                self.i += 1
            items.append(content)
            while self.i < len(self.lines) and not self.lines[self.i].strip() and loose:
                self.i += 1
        rendered = []
        for content in items:
            body = _Blocks(content, self.link).render()
            if not loose:  # a tight list: its paragraphs are not wrapped in <p>
                body = re.sub(r"<p>(.*?)</p>", r"\1", body, flags=re.DOTALL)
            rendered.append(f"<li>{body}</li>")
        if ordered:
            start = int(first.group(2)[:-1])
            attr = f' start="{start}"' if start != 1 else ""
            return f"<ol{attr}>\n" + "\n".join(rendered) + "\n</ol>"
        return "<ul>\n" + "\n".join(rendered) + "\n</ul>"

    def indented(self) -> str:
        body = []
        while self.i < len(self.lines) and (not self.lines[self.i].strip() or self.lines[self.i].startswith(("    ", "\t"))):
            line = self.lines[self.i]
            body.append(line[1:] if line.startswith("\t") else line[4:])
            self.i += 1
        while body and not body[-1].strip():
            body.pop()
        return f"<pre><code>{html.escape(chr(10).join(body) + chr(10), quote=False)}</code></pre>"

    def table(self) -> str:
        header = _cells(self.lines[self.i])
        aligns = []
        for cell in _cells(self.lines[self.i + 1]):
            left, right = cell.startswith(":"), cell.endswith(":")
            aligns.append(' class="center"' if left and right else ' class="right"' if right
                          else ' class="left"' if left else "")  # classes: the editor's page allows no inline style
        self.i += 2
        rows = []
        while self.i < len(self.lines) and self.lines[self.i].strip() and "|" in self.lines[self.i] \
                and not _starts_block(self.lines[self.i]):
            rows.append(_cells(self.lines[self.i]))
            self.i += 1

        def row(cells: list[str], tag: str) -> str:
            cells = (cells + [""] * len(aligns))[:len(aligns)]
            return "<tr>" + "".join(f"<{tag}{a}>{_inline(c, self.link)}</{tag}>" for c, a in zip(cells, aligns)) + "</tr>"

        body = "".join(row(r, "td") for r in rows)
        return f"<table>\n<thead>{row(header, 'th')}</thead>\n<tbody>{body}</tbody>\n</table>"

    def paragraph(self) -> str:
        lines = [self.lines[self.i]]
        self.i += 1
        while self.i < len(self.lines) and self.lines[self.i].strip():
            line = self.lines[self.i]
            if re.match(r"^ {0,3}=+[ \t]*$", line):  # a setext heading
                self.i += 1
                return self.setext(lines, 1)
            if re.match(r"^ {0,3}-+[ \t]*$", line):
                self.i += 1
                return self.setext(lines, 2)
            if _starts_block(line):
                break
            lines.append(line)
            self.i += 1
        text = "\n".join(ln.lstrip() for ln in lines).rstrip()
        trailing = re.search(r" +$", lines[-1])  # two spaces at the end of the last line break nothing
        return f"<p>{_inline(text if not trailing else text.rstrip(), self.link)}</p>"

    def setext(self, lines: list[str], level: int) -> str:
        title = " ".join(ln.strip() for ln in lines)
        return f'<h{level} id="{_attr(_slug(title))}">{_inline(title, self.link)}</h{level}>'


def render_markdown(text: str, link: Link = _plain_link) -> str:
    """HTML for the markdown ``text``. ``link(url, is_image)`` gives the address the page uses for
    each link and image (the editor points relative ones at its file server, the export inlines
    images); links whose scheme could run script are dropped, raw HTML is shown as text.

    >>> print(render_markdown("# Title\\n\\nSome *new* `code`, a [link](https://x.org)."))
    <h1 id="title">Title</h1>
    <p>Some <em>new</em> <code>code</code>, a <a href="https://x.org">link</a>.</p>
    >>> print(render_markdown("snake_case names stay <b>as typed</b>; [no](javascript:alert(1))"))
    <p>snake_case names stay &lt;b&gt;as typed&lt;/b&gt;; no</p>
    """
    return _Blocks(text.replace("\r\n", "\n").split("\n"), link).render()


_PUNCTUATION = frozenset("()[]{},:.;")  # left plain: colouring every bracket makes code harder to read
_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))
_STRING_TOKENS = {tokenize.STRING} | {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
                                      if hasattr(tokenize, n)}


def highlight_python(source: str) -> str:
    """``source`` as HTML with ``<span class="...">`` around its tokens: ``kw`` (keywords), ``const``
    (True, False, None), ``builtin``, ``def`` (the name a def or class defines), ``deco``
    (decorators), ``str``, ``num``, ``com`` (comments), ``op`` (operators; brackets and commas
    stay plain). Code that does not tokenize
    (an unclosed string while typing) is highlighted up to that point and escaped after it.

    >>> highlight_python("def f(x):  # hi\\n    return 'a' < x")
    '<span class="kw">def</span> <span class="def">f</span>(x):  <span class="com"># hi</span>\\n    \
<span class="kw">return</span> <span class="str">&#x27;a&#x27;</span> <span class="op">&lt;</span> x'
    """
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(row_col: tuple[int, int]) -> int:
        row, col = row_col
        return min(starts[min(row - 1, len(starts) - 1)] + col, len(source))

    out, pos, previous, decorator = [], 0, None, False
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            cls = None
            if tok.type == tokenize.NAME:
                if tok.string in ("True", "False", "None"):
                    cls = "const"
                elif keyword.iskeyword(tok.string):
                    cls = "kw"
                elif previous is not None and previous.string in ("def", "class"):
                    cls = "def"
                elif decorator:
                    cls = "deco"
                elif tok.string in _BUILTINS:
                    cls = "builtin"
            elif tok.type in _STRING_TOKENS:
                cls = "str"
            elif tok.type == tokenize.NUMBER:
                cls = "num"
            elif tok.type == tokenize.COMMENT:
                cls = "com"
            elif tok.type == tokenize.OP:
                at_line_start = previous is None or previous.type in (
                    tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT)
                cls = "deco" if tok.string == "@" and at_line_start else None if tok.string in _PUNCTUATION else "op"
            decorator = cls == "deco" and tok.string == "@"
            if tok.type != tokenize.COMMENT:
                previous = tok
            if cls is None:
                continue
            start, end = offset(tok.start), offset(tok.end)
            if start < pos or end <= start:
                continue
            out += [html.escape(source[pos:start]), f'<span class="{cls}">{html.escape(source[start:end])}</span>']
            pos = end
    except (tokenize.TokenError, SyntaxError):
        pass  # incomplete code: what follows stays plain
    return "".join(out) + html.escape(source[pos:])


_TENSOR = re.compile(r"^(Tensor|array)\((\[.*\])(?:,\s*dtype=([\w.]+))?\)$", re.DOTALL)


def tensor_table(text: str) -> str | None:
    """An HTML table for a 1-d or 2-d tensor or numpy array as its repr shows it
    (``Tensor([[1, 2], [3, 4]])``), with ``...`` where the repr abbreviates; None for any other text.
    Taken from the text, so a result reads the same live, after a reload and in the export.

    >>> print(tensor_table("Tensor([[1, 2],\\n        [3, 4]], dtype=int32)"))
    <table class="tensor"><caption>Tensor, 2 &times; 2, int32</caption><tbody><tr><td>1</td><td>2</td></tr><tr>\
<td>3</td><td>4</td></tr></tbody></table>
    >>> tensor_table("Tensor(3.5)") is None, tensor_table("[1, 2]") is None
    (True, True)
    """
    m = _TENSOR.match(text.strip())
    if not m or m.group(2).startswith("[[["):
        return None
    body = m.group(2)
    if body.startswith("[["):
        parts = re.findall(r"\[([^\[\]]*)\]|(\.\.\.)", body[1:-1])
        rows = [["\u22ee"] if gap else [v.strip() for v in values.split(",") if v.strip()] for values, gap in parts]
    else:
        rows = [[v.strip() for v in body[1:-1].split(",") if v.strip()]]
    if not rows or not all(rows) or any(re.search(r"[\[\]()=]", v) for row in rows for v in row):
        return None
    width = max(len(r) for r in rows)
    size = "" if any("..." in row or row == ["\u22ee"] for row in rows) else \
        f", {len(rows)} &times; {width}" if body.startswith("[[") else f", {width}"
    dtype = f", {html.escape(m.group(3))}" if m.group(3) else ""
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(v.replace('...', chr(0x22ef)))}</td>" for v in row)
                    + "</tr>" for row in rows)
    return f'<table class="tensor"><caption>{m.group(1)}{size}{dtype}</caption><tbody>{cells}</tbody></table>'


def render_outputs(outputs: list[Output], image_src: Callable[[str], str]) -> str:
    """HTML for a cell's outputs: text in ``<pre>`` (``output``, ``stderr``, ``error``), a result as a
    table when it is a tensor, an image with ``src=image_src(output.text)``.

    >>> render_outputs([Output("output", "1 < 2"), Output("image", "a_files/cell1_1.png")], lambda s: s)
    '<pre class="output output-output">1 &lt; 2</pre><img class="output output-image" src="a_files/cell1_1.png" \
alt="figure">'
    """
    out = []
    for o in outputs:
        if o.kind == "image":
            out.append(f'<img class="output output-image" src="{_attr(image_src(o.text))}" alt="figure">')
        elif o.kind == "result" and (table := tensor_table(o.text)) is not None:
            out.append(f'<div class="output output-result" title="{_attr(o.text)}">{table}</div>')
        else:
            out.append(f'<pre class="output output-{_attr(o.kind)}">{html.escape(o.text, quote=False)}</pre>')
    return "".join(out)


def _data_uri(path: pathlib.Path) -> str:
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{kind};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _exported_link(folder: pathlib.Path) -> Link:
    """Links for a page with no server: local images inlined, everything else as written."""
    def link(url: str, image: bool) -> str:
        if not image or _SCHEME.match(url) or url.startswith("/"):
            return url
        path = folder / urllib.parse.unquote(url.split("#")[0].split("?")[0])
        return _data_uri(path) if path.is_file() else url
    return link


def to_html(path: str | os.PathLike, output: str | os.PathLike | None = None) -> pathlib.Path:
    """Write the notebook at ``path`` as one self-contained HTML page (default: the same name with
    ``.html``): rendered prose, highlighted code, outputs, images inlined as ``data:`` URIs, the
    styles inline and no script. Returns the path written. FileNotFoundError when the notebook,
    or an image one of its cells shows, is missing; ValueError for a malformed notebook.

    >>> import pathlib
    >>> _ = pathlib.Path("demo.md").write_text("# Demo\\n\\n```python\\nprint(6 * 7)\\n```\\n")
    >>> _ = cv.notebook.run("demo.md")
    >>> page = to_html("demo.md").read_text()
    >>> '<h1 id="demo">Demo</h1>' in page, '<pre class="output output-output">42</pre>' in page
    (True, True)
    """
    from .runner import write_atomic

    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such notebook file")
    folder = path.resolve().parent
    nb = parse(path.read_text(encoding="utf-8"))
    link = _exported_link(folder)
    body, number = [], 0
    for part in nb.parts:
        if isinstance(part, str):
            body.append(f'<div class="prose">{render_markdown(part, link)}</div>')
            continue
        number += 1
        body.append(_cell_html(part, number, folder))
    title = next((re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<h1[^>]*>(.*?)</h1>", "\n".join(body))), path.stem)
    style = (STATIC / "notebook.css").read_text(encoding="utf-8")
    page = (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{title}</title>\n<style>\n{style}</style>\n</head>\n"
            f'<body class="export">\n<main class="notebook">\n' + "\n".join(body) + "\n</main>\n</body>\n</html>\n")
    target = pathlib.Path(output) if output is not None else path.with_suffix(".html")
    write_atomic(target, page)
    return target


def _cell_html(cell: Cell, number: int, folder: pathlib.Path) -> str:
    def image_src(link: str) -> str:
        image = folder / urllib.parse.unquote(link)
        if not image.is_file():
            raise FileNotFoundError(f"{image}: the image of cell {number} (line {cell.line}) is missing; "
                                    "run the notebook again")
        return _data_uri(image)

    outputs = render_outputs(cell.outputs, image_src)
    return (f'<section class="cell"><pre class="code"><code class="language-python">'
            f"{highlight_python(cell.source)}</code></pre>"
            + (f'<div class="outputs">{outputs}</div>' if outputs else "") + "</section>")
