"""The markdown notebook format: reading a ``.md`` file into cells and writing it back.

A cell is a fenced code block whose info string starts with ``python``. Its outputs follow it,
after one blank line, between two marker comments, so that a run can replace them and
``clean`` can remove them exactly::

    ```python
    print(6 * 7)
    ```

    <!-- corvid:output -->
    ```output
    42
    ```
    <!-- corvid:end -->

Inside the markers, each output is a fenced block whose info string says what it is: ``output``
(standard output), ``stderr``, ``result`` (the value of a cell's last expression, as Jupyter's
``Out[n]``) or ``error`` (a traceback); or an image link ``![...](nb_files/cell3_1.png)``.
Everything else in the file is kept exactly as written: parsing then rendering a file gives
back the same text, and a file whose outputs are removed is the file as it was before its first
run. Other fenced blocks (a ``bash`` block, or a longer fence around an example notebook) are
text, not cells.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["OUTPUT_END", "OUTPUT_KINDS", "OUTPUT_START", "Cell", "Notebook", "Output", "parse", "render_outputs"]

OUTPUT_START = "<!-- corvid:output -->"
OUTPUT_END = "<!-- corvid:end -->"
OUTPUT_KINDS = ("output", "stderr", "result", "error")  # info strings of the text outputs; "image" is a link

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_IMAGE = re.compile(r"^!\[([^\]]*)\]\((\S+)\)\s*$")


@dataclasses.dataclass
class Output:
    """One output of a cell: ``kind`` is one of :data:`OUTPUT_KINDS` with ``text`` the text (no
    trailing newline), or ``"image"`` with ``text`` the link to the image file, relative to the
    notebook's folder.

    >>> nb = parse("```python\\nx = 'hi'\\nx\\n```\\n")
    >>> nb.cells[0].outputs = [Output("result", "'hi'"), Output("image", "demo_files/cell1_1.png")]
    >>> print(nb.render())
    ```python
    x = 'hi'
    x
    ```
    <BLANKLINE>
    <!-- corvid:output -->
    ```result
    'hi'
    ```
    <BLANKLINE>
    ![cell1_1.png](demo_files/cell1_1.png)
    <!-- corvid:end -->
    <BLANKLINE>
    """

    kind: str
    text: str


@dataclasses.dataclass
class Cell:
    """A fenced ``python`` code block of a notebook: ``source`` is its code, ``fence`` its text in
    the file (from the opening fence line through the closing one), ``line`` the 1-based line of
    the opening fence, ``outputs`` what its last run wrote.

    >>> text = ("Intro\\n\\n```python\\nprint(42)\\n```\\n\\n"
    ...         "<!-- corvid:output -->\\n```output\\n42\\n```\\n<!-- corvid:end -->\\n")
    >>> cell = parse(text).cells[0]
    >>> cell.source, cell.line, cell.outputs
    ('print(42)\\n', 3, [Output(kind='output', text='42')])
    >>> cell.fence
    '```python\\nprint(42)\\n```\\n'
    """

    source: str
    fence: str
    line: int
    outputs: list[Output] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Notebook:
    """A parsed file: its ``parts`` in order, markdown text (str) and cells; ``cells`` lists the
    cells alone, ``render()`` gives the file's text back.

    >>> nb = parse("# Title\\n\\n```python\\nx = 1\\n```\\n\\n```bash\\nls\\n```\\n")
    >>> [type(part).__name__ for part in nb.parts], len(nb.cells)   # the bash block is text
    (['str', 'Cell', 'str'], 1)
    >>> nb.cells[0].outputs = [Output("output", "done")]
    >>> print(nb.render())
    # Title
    <BLANKLINE>
    ```python
    x = 1
    ```
    <BLANKLINE>
    <!-- corvid:output -->
    ```output
    done
    ```
    <!-- corvid:end -->
    <BLANKLINE>
    ```bash
    ls
    ```
    <BLANKLINE>
    """

    parts: list[str | Cell]

    @property
    def cells(self) -> list[Cell]:
        return [p for p in self.parts if isinstance(p, Cell)]

    def render(self) -> str:
        """The file's text: the markdown as it was, each cell followed by its outputs."""
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            elif part.outputs:
                out.append(part.fence if part.fence.endswith("\n") else part.fence + "\n")
                out.append("\n" + render_outputs(part.outputs))
            else:
                out.append(part.fence)
        return "".join(out)


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a block opened by ``fence`` (same character, at least as long)."""
    m = _FENCE.match(line.rstrip("\n"))
    return bool(m) and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence) and not m.group(3).strip()


def _fence_for(text: str) -> str:
    """Backticks enough to fence ``text`` (longer than any run of backticks starting one of its lines)."""
    runs = [len(m.group(1)) for m in re.finditer(r"^ {0,3}(`{3,})", text, re.MULTILINE)]
    return "`" * max([3] + [r + 1 for r in runs])


def render_outputs(outputs: list[Output]) -> str:
    """The marker-delimited block holding ``outputs``, ending with a newline."""
    items = []
    for o in outputs:
        if o.kind == "image":
            items.append(f"![{o.text.rsplit('/', 1)[-1]}]({o.text})\n")
        else:
            fence = _fence_for(o.text)
            items.append(f"{fence}{o.kind}\n{o.text}\n{fence}\n")
    return f"{OUTPUT_START}\n" + "\n".join(items) + f"{OUTPUT_END}\n"


def _parse_outputs(lines: list[str], first_line: int) -> list[Output]:
    outputs, i = [], 0
    while i < len(lines):
        line = lines[i].rstrip("\n")
        fence, image = _FENCE.match(line), _IMAGE.match(line)
        if fence and fence.group(3).strip() in OUTPUT_KINDS:
            j = i + 1
            while j < len(lines) and not _closes(lines[j], fence.group(2)):
                j += 1
            if j == len(lines):
                raise ValueError(f"line {first_line + i}: the {fence.group(3).strip()} block is not closed")
            outputs.append(Output(fence.group(3).strip(), "".join(lines[i + 1:j]).removesuffix("\n")))
            i = j
        elif image:
            outputs.append(Output("image", image.group(2)))
        i += 1
    return outputs


def _output_end(lines: list[str], start: int) -> int | None:
    """The line of the OUTPUT_END that closes an output block starting at ``start``: the first
    one outside the block's fenced outputs (a cell may print the marker itself, as a cell that
    shows another notebook does), or None."""
    e = start
    while e < len(lines):
        if lines[e].strip() == OUTPUT_END:
            return e
        m = _FENCE.match(lines[e].rstrip("\n"))
        if m:
            e += 1
            while e < len(lines) and not _closes(lines[e], m.group(2)):
                e += 1
        e += 1
    return None


def parse(text: str) -> Notebook:
    """Split markdown ``text`` into markdown parts and cells (with the outputs written under
    them). ``parse(text).render() == text``.

    ValueError, naming the line, for a ``python`` code block or an output block that is never
    closed.

    >>> nb = parse("# Title\\n\\n```python\\nx = 1\\n```\\n")
    >>> [c.source for c in nb.cells], nb.cells[0].line
    (['x = 1\\n'], 3)
    """
    lines = text.splitlines(keepends=True)
    parts: list[str | Cell] = []
    markdown: list[str] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i].rstrip("\n"))
        if not m:
            markdown.append(lines[i])
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        j = i + 1
        while j < len(lines) and not _closes(lines[j], fence):
            j += 1
        if info.split()[:1] != ["python"]:
            markdown.extend(lines[i:j + 1])  # another code block, kept as text (unclosed: to the end)
            i = j + 1
            continue
        if j == len(lines):
            raise ValueError(f"line {i + 1}: this ```python block is not closed")
        if markdown:
            parts.append("".join(markdown))
            markdown = []
        body = [ln[min(indent, len(ln) - len(ln.lstrip(" "))):] for ln in lines[i + 1:j]]
        cell = Cell("".join(body), "".join(lines[i:j + 1]), i + 1)
        k = j + 1
        if k + 1 < len(lines) and not lines[k].strip() and lines[k + 1].strip() == OUTPUT_START:
            k += 1
        if k < len(lines) and lines[k].strip() == OUTPUT_START:
            end = _output_end(lines, k + 1)
            if end is None:
                raise ValueError(f"line {k + 1}: the output block of the cell at line {i + 1} has no {OUTPUT_END}")
            cell.outputs = _parse_outputs(lines[k + 1:end], k + 2)
            j = end
        parts.append(cell)
        i = j + 1
    if markdown:
        parts.append("".join(markdown))
    return Notebook(parts)
