"""Converting between markdown notebooks and Jupyter's ``.ipynb``, through nbformat (an optional
extra: ``pip install "corvid[notebook]"``), so one notebook opens in Jupyter too.

Markdown between cells becomes markdown cells; each ``python`` cell becomes a code cell
with its outputs: ``output``/``stderr`` as stream outputs, ``result`` as the execution result,
images as ``image/png`` display data (the file's bytes, base64), ``error`` as an error output.
Back from ``.ipynb``, images are written to ``<stem>_files/`` as a run would write them. A
markdown notebook laid out as these conversions write it (one blank line between parts)
survives the round trip ``.md -> .ipynb -> .md`` unchanged.
"""

from __future__ import annotations

import base64
import os
import pathlib
import urllib.parse
from typing import Any

from .document import Cell, Output, _fence_for, parse, render_outputs
from .runner import _remove_images, _terminal_text, files_dir, write_atomic

__all__ = ["from_ipynb", "to_ipynb"]


def _nbformat() -> Any:
    try:
        import nbformat
    except ImportError as e:
        raise ImportError('converting notebooks to and from .ipynb needs nbformat, an optional extra: '
                          'pip install "corvid[notebook]" (or pip install nbformat)') from e
    return nbformat


def _lines(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _code_cell(nbf: Any, cell: Cell, number: int, folder: pathlib.Path) -> Any:
    outputs = []
    for o in cell.outputs:
        if o.kind in ("output", "stderr"):
            outputs.append(nbf.v4.new_output("stream", name="stdout" if o.kind == "output" else "stderr",
                                             text=_lines(o.text)))
        elif o.kind == "result":
            outputs.append(nbf.v4.new_output("execute_result", data={"text/plain": o.text}, execution_count=number))
        elif o.kind == "image":
            image = folder / urllib.parse.unquote(o.text)
            if not image.is_file():
                raise FileNotFoundError(f"{image}: the image of cell {number} (line {cell.line}) is missing; "
                                        "run the notebook again")
            data = base64.b64encode(image.read_bytes()).decode("ascii")
            outputs.append(nbf.v4.new_output("display_data", data={"image/png": data}))
        else:
            last = o.text.rsplit("\n", 1)[-1]
            ename, _, evalue = last.partition(": ")
            outputs.append(nbf.v4.new_output("error", ename=ename, evalue=evalue, traceback=o.text.split("\n")))
    source = cell.source.removesuffix("\n")
    return nbf.v4.new_code_cell(source, outputs=outputs, execution_count=number if cell.outputs else None)


def to_ipynb(path: str | os.PathLike, output: str | os.PathLike | None = None) -> pathlib.Path:
    """Write the markdown notebook ``path`` as a Jupyter notebook (default: the same name with
    ``.ipynb``), outputs and images included; returns the path written. FileNotFoundError when
    the notebook, or an image it links, is missing.

    >>> import json, pathlib
    >>> _ = pathlib.Path("demo.md").write_text("# Demo\\n\\n```python\\nprint(6 * 7)\\n```\\n")
    >>> _ = cv.notebook.run("demo.md")
    >>> path = to_ipynb("demo.md")
    >>> cells = json.loads(path.read_text())["cells"]
    >>> path, [c["cell_type"] for c in cells]
    (PosixPath('demo.ipynb'), ['markdown', 'code'])
    >>> cells[1]["source"], cells[1]["outputs"]
    (['print(6 * 7)'], [{'name': 'stdout', 'output_type': 'stream', 'text': ['42\\n']}])
    >>> from_ipynb(path, "copy.md").read_text() == pathlib.Path("demo.md").read_text()   # the round trip
    True
    """
    nbf = _nbformat()
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such notebook file")
    nb = parse(path.read_text(encoding="utf-8"))
    cells, number = [], 0
    for part in nb.parts:
        if isinstance(part, Cell):
            number += 1
            cells.append(_code_cell(nbf, part, number, path.parent))
        elif part.strip():
            cells.append(nbf.v4.new_markdown_cell(part.strip("\n")))
    notebook = nbf.v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})
    nbf.validate(notebook)
    target = pathlib.Path(output) if output is not None else path.with_suffix(".ipynb")
    write_atomic(target, nbf.writes(notebook) + "\n")
    return target


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _outputs_from(cell: Any, number: int, folder: pathlib.Path) -> list[Output]:
    outputs: list[Output] = []
    for o in cell.get("outputs", []):
        kind = o["output_type"]
        data = o.get("data", {})
        if kind == "stream":
            text = _terminal_text(_text(o["text"]))
            if text.strip():
                outputs.append(Output("output" if o["name"] == "stdout" else "stderr", text))
        elif kind == "error":
            outputs.append(Output("error", _terminal_text("\n".join(o["traceback"]))))
        elif "image/png" in data:
            folder.mkdir(exist_ok=True)
            name = f"cell{number}_{sum(x.kind == 'image' for x in outputs) + 1}.png"
            (folder / name).write_bytes(base64.b64decode(_text(data["image/png"])))
            outputs.append(Output("image", urllib.parse.quote(f"{folder.name}/{name}")))
        elif "text/plain" in data:
            outputs.append(Output("result" if kind == "execute_result" else "output", _text(data["text/plain"])))
    return outputs


def from_ipynb(path: str | os.PathLike, output: str | os.PathLike | None = None) -> pathlib.Path:
    """Write the Jupyter notebook ``path`` as a markdown notebook (default: the same name with
    ``.md``), its outputs included (PNG images into ``<stem>_files/``); returns the path written.
    FileNotFoundError when there is no such file; nbformat's errors for an invalid notebook.

    >>> import nbformat, pathlib
    >>> result = nbformat.v4.new_output("execute_result", data={"text/plain": "2"}, execution_count=1)
    >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# From Jupyter"),
    ...                                      nbformat.v4.new_code_cell("1 + 1", outputs=[result])])
    >>> nbformat.write(nb, "jupyter.ipynb")
    >>> path = from_ipynb("jupyter.ipynb")
    >>> print(path.read_text())
    # From Jupyter
    <BLANKLINE>
    ```python
    1 + 1
    ```
    <BLANKLINE>
    <!-- corvid:output -->
    ```result
    2
    ```
    <!-- corvid:end -->
    <BLANKLINE>
    """
    nbf = _nbformat()
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such notebook file")
    notebook = nbf.read(str(path), as_version=4)
    target = pathlib.Path(output) if output is not None else path.with_suffix(".md")
    folder = files_dir(target)
    _remove_images(folder)
    parts, number = [], 0
    for cell in notebook.cells:
        source = _text(cell.source).strip("\n")
        if cell.cell_type != "code":
            if source.strip():
                parts.append(source + "\n")
            continue
        number += 1
        fence = _fence_for(source)
        block = f"{fence}python\n{source}\n{fence}\n"
        outputs = _outputs_from(cell, number, folder)
        parts.append(block + ("\n" + render_outputs(outputs) if outputs else ""))
    write_atomic(target, "\n".join(parts))
    return target
