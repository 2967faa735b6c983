"""Running a markdown notebook: every cell in order, in one namespace, in this process, with
what each cell prints, returns, draws and raises written back under it.

A run is like ``python`` running the cells as one script (``__name__ == "__main__"``, the
notebook's folder as the working directory and first on ``sys.path``), with Jupyter's habits:
the value of a cell's last expression is shown unless the cell ends with ``;``, and matplotlib
figures left open at the end of a cell (or passed to ``plt.show()``) are saved as PNG files in
``<stem>_files/`` (``cell3_1.png``: cell 3's first figure) and closed.

A failing cell stops the run: the file gets the outputs up to and including that cell (with the
traceback, trimmed to the cell's code and what it called), and the cells after it lose their
old outputs, so the file only ever shows what one run produced. The file is replaced
atomically (:func:`corvid._files.write_atomic`: a temporary file, then ``os.replace``), and not
at all if it changed while the cells ran (an editor saved it): the run reports that instead of
overwriting the edit.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import dataclasses
import io
import linecache
import os
import pathlib
import re
import sys
import time
import tokenize
import traceback
import types
import urllib.parse
from collections.abc import Iterator
from typing import Any, TextIO

import numpy as np

from .. import _files as files
from .document import Cell, Notebook, Output, parse

__all__ = ["RunReport", "clean", "files_dir", "run", "write_atomic"]

IMAGE_NAME = re.compile(r"^cell\d+_\d+\.png$")  # the images a run writes (and only those are deleted)
MAX_LINES = 400  # an output longer than this keeps its first and last MAX_LINES // 2 lines
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclasses.dataclass
class RunReport:
    """What :func:`run` did: the notebook ``path``, its number of ``cells``, how many ran, the
    1-based number of the ``failed`` cell (None when all succeeded) with its ``error``
    (traceback text) and file ``line``, the wall time, the images written, and whether the file
    was ``written`` (False when it changed during the run). ``ok``: every cell ran and the file
    was written.

    >>> import pathlib
    >>> cells = ["print('one')", "1 / 0", "print('three')"]
    >>> _ = pathlib.Path("failing.md").write_text("\\n".join(f"```python\\n{c}\\n```\\n" for c in cells))
    >>> report = cv.notebook.run("failing.md")
    >>> report.ok, report.cells, report.ran, report.failed, report.line, report.written
    (False, 3, 2, 2, 5, True)
    >>> report.error.splitlines()[-1]
    'ZeroDivisionError: division by zero'
    """

    path: pathlib.Path
    cells: int
    ran: int = 0
    failed: int | None = None
    line: int | None = None
    error: str = ""
    seconds: float = 0.0
    images: int = 0
    written: bool = False

    @property
    def ok(self) -> bool:
        return self.failed is None and self.written


def files_dir(path: pathlib.Path) -> pathlib.Path:
    """The folder next to the notebook holding its images: ``mnist.md`` -> ``mnist_files/``."""
    return path.with_name(f"{path.stem}_files")


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Replace ``path`` by ``text`` (UTF-8, its line ends unchanged) in one step: readers see the old
    file or the new one, never a partial one. As :func:`corvid._files.write_atomic`: the permissions
    ``open`` would give (an existing file keeps its mode) and symbolic links written through."""
    files.write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def _remove_images(folder: pathlib.Path) -> None:
    if folder.is_dir():
        for f in folder.iterdir():
            if IMAGE_NAME.match(f.name):
                f.unlink()


def _read(path: pathlib.Path) -> tuple[str, Notebook]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such notebook file")
    text = path.read_text(encoding="utf-8")
    return text, parse(text)


def clean(path: str | os.PathLike) -> int:
    """Remove every cell's outputs from the notebook at ``path`` and the images runs wrote (the
    ``<stem>_files/`` folder too when that leaves it empty). Returns the number of cells whose
    outputs were removed. FileNotFoundError when there is no such file.

    >>> import pathlib
    >>> text = "# Plot\\n\\n```python\\nimport corvid as cv\\ncv.plot.line([1.0, 2.0])\\n```\\n"
    >>> _ = pathlib.Path("plot.md").write_text(text)
    >>> report = cv.notebook.run("plot.md")
    >>> report.images, sorted(p.name for p in pathlib.Path("plot_files").iterdir())
    (1, ['cell1_1.png'])
    >>> clean("plot.md")
    1
    >>> pathlib.Path("plot.md").read_text() == text, pathlib.Path("plot_files").exists()
    (True, False)
    """
    path = pathlib.Path(path)
    text, nb = _read(path)
    cleaned = sum(bool(c.outputs) for c in nb.cells)
    for cell in nb.cells:
        cell.outputs = []
    if nb.render() != text:
        write_atomic(path, nb.render())
    folder = files_dir(path)
    _remove_images(folder)
    with contextlib.suppress(OSError):
        folder.rmdir()  # only when empty
    return cleaned


class _Stream(io.TextIOBase):
    """A stand-in for sys.stdout/sys.stderr: records what a cell writes (and echoes it to ``echo``)."""

    def __init__(self, name: str, events: list[tuple[str, str]], echo: TextIO | None):
        super().__init__()
        self.name, self.events, self.echo = name, events, echo

    @property
    def encoding(self) -> str:
        return "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.events.append((self.name, s))
        if self.echo is not None:
            self.echo.write(s)
            self.echo.flush()
        return len(s)


def _terminal_text(s: str) -> str:
    """Text as a terminal would leave it: no colour codes, and a carriage return overwriting its
    line (progress bars), so only each line's last state is kept."""
    s = _ANSI.sub("", s.replace("\r\n", "\n"))
    lines = [ln.rsplit("\r", 1)[-1] if "\r" in ln.rstrip("\r") else ln.rstrip("\r") for ln in s.split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) > MAX_LINES:
        half = MAX_LINES // 2
        lines = lines[:half] + [f"... ({len(lines) - 2 * half} lines not shown) ..."] + lines[-half:]
    return "\n".join(ln.rstrip() for ln in lines)


def _ends_with_semicolon(source: str) -> bool:
    """Whether the cell's last token is ``;`` (Jupyter's way to hide the last value)."""
    last = None
    with contextlib.suppress(tokenize.TokenError, SyntaxError):
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER,
                                tokenize.INDENT, tokenize.DEDENT):
                last = tok.string
    return last == ";"


def _is_matplotlib(value: Any) -> bool:
    """A figure, axes or artist (or a list or array of them), whose picture is saved instead of a repr."""
    if isinstance(value, np.ndarray) and value.dtype == object:
        items = list(value.flat)
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    return bool(items) and all(type(v).__module__.startswith(("matplotlib.", "mpl_toolkits.")) for v in items)


def _execute(source: str, filename: str, namespace: dict[str, Any]) -> Any:
    """Run ``source``; the value of its last statement when that is an expression, else None."""
    tree = ast.parse(source, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, filename, "exec"), namespace)  # noqa: S102  (running the cells is the point)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), filename, "eval"), namespace)


def _traceback(e: BaseException, filename: str) -> str:
    """The traceback from the cell's own frame down (the runner's frames are not the user's)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb)).rstrip("\n")


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class _Session:
    """The state of one run: the namespace, the captured events of the current cell, the figures."""

    def __init__(self, path: pathlib.Path, echo: bool):
        self.path = path
        self.echo = (sys.stdout, sys.stderr) if echo else (None, None)  # the streams before any redirection
        self.folder = files_dir(path)
        self.module = types.ModuleType("__main__")
        self.module.__dict__["__builtins__"] = builtins
        self.plt = _pyplot()
        self.old_figures = set(self.plt.get_fignums()) if self.plt else set()
        self.events: list[tuple[str, str]] = []
        self.cell_number = 0
        self.images = 0

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The process state a run needs, restored afterwards: cwd, sys.path, sys.argv, __main__, plt.show."""
        saved = (os.getcwd(), list(sys.path), sys.argv, sys.modules.get("__main__"))
        show = self.plt.show if self.plt else None
        os.chdir(self.path.parent)
        sys.path.insert(0, str(self.path.parent))
        sys.argv = [str(self.path)]
        sys.modules["__main__"] = self.module
        if self.plt:
            self.plt.show = lambda *args, **kwargs: self.save_figures()
        try:
            yield
        finally:
            os.chdir(saved[0])
            sys.path[:], sys.argv = saved[1], saved[2]
            if saved[3] is not None:
                sys.modules["__main__"] = saved[3]
            if self.plt:
                self.plt.show = show
                for num in set(self.plt.get_fignums()) - self.old_figures:
                    self.plt.close(num)

    def save_figures(self) -> None:
        """Save every figure opened since the run began as the current cell's next images; close them."""
        if self.plt is None:
            return
        for num in sorted(set(self.plt.get_fignums()) - self.old_figures):
            self.folder.mkdir(exist_ok=True)
            number = sum(kind == "image" for kind, _ in self.events) + 1
            name = f"cell{self.cell_number}_{number}.png"
            fig = self.plt.figure(num)
            fig.savefig(self.folder / name, format="png", bbox_inches="tight")
            self.plt.close(fig)
            self.events.append(("image", urllib.parse.quote(f"{self.folder.name}/{name}")))
            self.images += 1

    def run_cell(self, cell: Cell, number: int) -> str | None:
        """Run one cell, setting ``cell.outputs``; the traceback text when it raised."""
        self.cell_number, self.events = number, []
        filename = f"<cell {number}>"
        linecache.cache[filename] = (len(cell.source), None, cell.source.splitlines(True), filename)
        error = None
        out, err = _Stream("output", self.events, self.echo[0]), _Stream("stderr", self.events, self.echo[1])
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                value = _execute(cell.source, filename, self.module.__dict__)
                if value is not None and not _ends_with_semicolon(cell.source) and not _is_matplotlib(value):
                    self.events.append(("result", repr(value)))
                self.save_figures()
            except BaseException as e:  # noqa: BLE001  (a cell's exception, even SystemExit, ends the run)
                error = _traceback(e, filename)
                with contextlib.suppress(Exception):
                    self.save_figures()  # what the cell drew before it failed
        cell.outputs = _outputs(self.events)
        if error is not None:
            cell.outputs.append(Output("error", _terminal_text(error)))
        return error


def _outputs(events: list[tuple[str, str]]) -> list[Output]:
    """A cell's outputs in the order they happened, consecutive writes to one stream joined."""
    outputs: list[Output] = []
    for i, (kind, text) in enumerate(events):
        if kind in ("output", "stderr"):
            if i and events[i - 1][0] == kind:
                continue  # joined into the first write of the run, below
            j = i
            while j < len(events) and events[j][0] == kind:
                j += 1
            text = _terminal_text("".join(t for _, t in events[i:j]))
            if not text.strip():
                continue
        outputs.append(Output(kind, text))
    return outputs


def run(path: str | os.PathLike, *, echo: bool = False) -> RunReport:
    """Run the notebook at ``path`` and write each cell's outputs under it (see the module
    documentation for the rules). ``echo=True`` also shows what the cells print as they print it,
    on this process's stdout and stderr, and one line on stderr as each cell starts.

    Returns a :class:`RunReport` (``report.ok``); a failing cell is reported there, not raised.
    FileNotFoundError when there is no such file; ValueError for a malformed notebook (a block
    that is never closed).

    >>> import pathlib
    >>> _ = pathlib.Path("demo.md").write_text("# Demo\\n\\n```python\\nx = 6 * 7\\nprint('x is', x)\\nx\\n```\\n")
    >>> report = run("demo.md")
    >>> report.ok, report.cells
    (True, 1)
    >>> print(pathlib.Path("demo.md").read_text())   # the printed text, then the last value
    # Demo
    <BLANKLINE>
    ```python
    x = 6 * 7
    print('x is', x)
    x
    ```
    <BLANKLINE>
    <!-- corvid:output -->
    ```output
    x is 42
    ```
    <BLANKLINE>
    ```result
    42
    ```
    <!-- corvid:end -->
    <BLANKLINE>
    """
    path = pathlib.Path(path).resolve()
    text, nb = _read(path)
    report = RunReport(path, len(nb.cells))
    started = time.perf_counter()
    _remove_images(files_dir(path))
    session = _Session(path, echo)
    with session.active():
        for number, cell in enumerate(nb.cells, 1):
            if report.failed is not None:
                cell.outputs = []
                continue
            if echo:
                print(f"{path.name}: cell {number}/{len(nb.cells)} (line {cell.line})", file=sys.stderr, flush=True)
            error = session.run_cell(cell, number)
            report.ran += 1
            if error is not None:
                report.failed, report.line, report.error = number, cell.line, error
    report.seconds = time.perf_counter() - started
    report.images = session.images
    if path.read_text(encoding="utf-8") == text:
        write_atomic(path, nb.render())
        report.written = True
    with contextlib.suppress(OSError):
        files_dir(path).rmdir()  # only when empty: no cell drew anything
    return report
