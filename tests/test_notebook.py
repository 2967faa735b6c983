"""Markdown notebooks (issue 7): parsing, running (outputs, figures, errors, idempotence),
cleaning, the command line, --watch, .ipynb conversion, and the MNIST notebook end to end."""

import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import time

import pytest

import corvid as cv
from corvid.notebook import Output, clean, parse, run
from corvid.notebook.runner import write_atomic

ROOT = pathlib.Path(__file__).resolve().parents[1]
CANDIDATES = [ROOT.parent / "shared" / "data" / "mnist", pathlib.Path("/work/shared/data/mnist")]
MNIST_DIR = next((p for p in CANDIDATES if (p / "t10k-images-idx3-ubyte.gz").is_file()), None)

NOTEBOOK = '''# A notebook

Text before.

```python
import sys
values = [1, 2, 3]
print("sum", sum(values))
print("careful", file=sys.stderr)
values
```

```bash
echo "not a cell"
```

````markdown
```python
print("an example inside a longer fence: not a cell")
```
````

```python
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot(values)
for i in range(3):
    print(f"\\rprogress {i}", end="")
print()
len(values);
```

The end.
'''


def _png_size(path):
    """(width, height) from the PNG header; fails unless the file is a PNG."""
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def _write(tmp_path, text, name="nb.md"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _cli(*args, cwd=None, env=None, timeout=120):
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "corvid.notebook", *map(str, args)], check=False, capture_output=True,
                          text=True, cwd=cwd, env=full, timeout=timeout)


def test_parse_finds_python_cells_only_and_renders_the_same_text():
    nb = parse(NOTEBOOK)
    assert [c.line for c in nb.cells] == [5, 23]
    assert nb.cells[0].source.startswith("import sys\n") and nb.cells[1].source.endswith("len(values);\n")
    assert nb.render() == NOTEBOOK
    with pytest.raises(ValueError, match="line 3: this ```python block is not closed"):
        parse("text\n\n```python\nx = 1\n")


def test_run_writes_outputs_and_figures_under_each_cell(tmp_path):
    path = _write(tmp_path, NOTEBOOK)
    report = run(path)
    assert report.ok and report.ran == 2 and report.images == 1
    first, second = parse(path.read_text()).cells
    assert first.outputs == [Output("output", "sum 6"), Output("stderr", "careful"), Output("result", "[1, 2, 3]")]
    # the carriage returns of a progress line collapse to its last state; `;` hides the last value
    assert second.outputs == [Output("output", "progress 2"), Output("image", "nb_files/cell2_1.png")]
    assert _png_size(tmp_path / "nb_files" / "cell2_1.png")[0] > 100
    text = path.read_text()
    assert "Text before." in text and text.endswith("The end.\n") and "not a cell\")\n```\n````" in text
    assert "<!-- corvid:output -->\n```output\nsum 6\n```" in text


def test_rerun_is_idempotent_and_clean_restores_the_original(tmp_path):
    path = _write(tmp_path, NOTEBOOK)
    run(path)
    once = path.read_text()
    image = (tmp_path / "nb_files" / "cell2_1.png").read_bytes()
    run(path)
    assert path.read_text() == once
    assert (tmp_path / "nb_files" / "cell2_1.png").read_bytes() == image
    assert clean(path) == 2
    assert path.read_text() == NOTEBOOK
    assert not (tmp_path / "nb_files").exists()
    assert clean(path) == 0 and path.read_text() == NOTEBOOK


def test_cells_share_one_namespace_as_a_main_script_in_the_notebook_folder(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 41\n")
    path = _write(tmp_path, "```python\nimport helper, os\nx = helper.VALUE + 1\n```\n\n"
                            "```python\nprint(x, __name__, os.getcwd() == os.path.dirname(os.path.abspath('nb.md')))\n"
                            "class Point:\n    pass\nprint(Point.__module__)\nNone\n```\n")
    cwd = os.getcwd()
    assert run(path).ok
    assert os.getcwd() == cwd and "__main__" in sys.modules and sys.modules["__main__"].__name__ == "__main__"
    assert parse(path.read_text()).cells[1].outputs == [Output("output", "42 __main__ True\n__main__")]


def test_a_failing_cell_stops_the_run_with_a_trimmed_traceback(tmp_path):
    source = ("```python\nprint('before')\n```\n\n"
              "```python\ndef inverse(v):\n    return 1 / v\n\ninverse(0)\n```\n\n"
              "```python\nprint('never')\n```\n\n"
              "<!-- corvid:output -->\n```output\nan old output\n```\n<!-- corvid:end -->\n")
    path = _write(tmp_path, source)
    report = run(path)
    assert not report.ok and (report.failed, report.line, report.ran) == (2, 5, 2)
    cells = parse(path.read_text()).cells
    assert cells[0].outputs == [Output("output", "before")]
    (error,) = cells[1].outputs
    assert error.kind == "error" and error.text == report.error
    lines = [ln for ln in error.text.splitlines() if ln.strip(" ~^")]  # Python 3.11+ adds lines of carets
    assert lines == ["Traceback (most recent call last):",
                     '  File "<cell 2>", line 4, in <module>', "    inverse(0)",
                     '  File "<cell 2>", line 2, in inverse', "    return 1 / v",
                     "ZeroDivisionError: division by zero"]  # from the cell's own frame: no runner frames
    assert cells[2].outputs == []  # the old output of a cell that did not run is gone
    assert "never" not in path.read_text().split("print('never')")[1]


def test_figures_are_saved_in_order_with_the_text_even_when_the_cell_fails(tmp_path):
    path = _write(tmp_path, "```python\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\n```\n\n"
                            "```python\nfor k in range(2):\n    print('figure', k)\n    plt.plot([k, 1])\n"
                            "    plt.show()\nplt.figure()\nraise ValueError('after a figure')\n```\n")
    report = run(path)
    assert report.failed == 2 and report.images == 4
    first, second = parse(path.read_text()).cells
    assert first.outputs == [Output("image", "nb_files/cell1_1.png")]  # a plot's return value is not shown
    assert [(o.kind, o.text if o.kind != "error" else o.text.splitlines()[-1]) for o in second.outputs] == [
        ("output", "figure 0"), ("image", "nb_files/cell2_1.png"), ("output", "figure 1"),
        ("image", "nb_files/cell2_2.png"), ("image", "nb_files/cell2_3.png"), ("error", "ValueError: after a figure")]
    assert sorted(p.name for p in (tmp_path / "nb_files").iterdir()) == [
        "cell1_1.png", "cell2_1.png", "cell2_2.png", "cell2_3.png"]


def test_syntax_errors_and_a_bad_repr_are_reported(tmp_path):
    path = _write(tmp_path, "```python\nx = = 1\n```\n")
    report = run(path)
    assert report.failed == 1 and "SyntaxError" in report.error and '"<cell 1>", line 1' in report.error

    class_cell = "```python\nclass Bad:\n    def __repr__(self):\n        raise RuntimeError('no repr')\nBad()\n```\n"
    report = run(_write(tmp_path, class_cell))
    assert report.failed == 1 and report.error.endswith("RuntimeError: no repr")


def test_the_file_is_left_alone_when_it_changes_during_the_run(tmp_path):
    source = "```python\nwith open('nb.md', 'a') as f:\n    f.write('edited by hand\\n')\n```\n"
    path = _write(tmp_path, source)
    report = run(path)
    assert not report.written and not report.ok
    assert path.read_text() == source + "edited by hand\n"


def test_write_atomic_never_leaves_a_partial_file(tmp_path, monkeypatch):
    path = _write(tmp_path, "original\n")
    write_atomic(path, "new\n")
    assert path.read_text() == "new\n"

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "never\n")
    assert path.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["nb.md"]


def test_missing_files_raise_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such notebook file"):
        run(tmp_path / "absent.md")
    with pytest.raises(FileNotFoundError, match="no such notebook file"):
        clean(tmp_path / "absent.md")


def test_command_line_run_fail_clean_and_missing_file(tmp_path):
    path = _write(tmp_path, "```python\nprint('hello')\n```\n\n```python\nraise KeyError('boom')\n```\n")
    done = _cli("run", "--quiet", path)
    assert done.returncode == 1
    assert "nb.md: cell 2 (line 5) failed:" in done.stderr and "KeyError: 'boom'" in done.stderr
    assert "hello" in path.read_text() and "KeyError: 'boom'" in path.read_text()
    done = _cli("clean", path)
    assert done.returncode == 0 and "outputs of 2 cells removed" in done.stderr
    assert "corvid:output" not in path.read_text()
    done = _cli("run", tmp_path / "absent.md")
    assert done.returncode == 2 and "no such notebook file" in done.stderr


def test_watch_runs_again_after_each_save(tmp_path):
    path = _write(tmp_path, "```python\nprint('first')\n```\n")
    proc = subprocess.Popen([sys.executable, "-m", "corvid.notebook", "run", "--watch", "--quiet", "--interval",
                             "0.1", "--max-runs", "2", str(path)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while "corvid:output" not in path.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "first" in path.read_text()
        path.write_text(path.read_text() + "\n```python\nprint('second')\n```\n")
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, proc.stderr.read()
    assert [c.outputs for c in parse(path.read_text()).cells] == [[Output("output", "first")],
                                                                  [Output("output", "second")]]


def test_ipynb_round_trip_keeps_cells_outputs_and_images(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="the .ipynb conversion needs nbformat (the [notebook] extra)")
    source = ("# Title\n\nSome text.\n\n```python\nprint('out')\n1 + 1\n```\n\n"
              "```python\nimport matplotlib.pyplot as plt\nplt.plot([1, 2]);\n```\n\n"
              "More text.\n\n```python\n1 / 0\n```\n")
    path = _write(tmp_path, source)
    run(path)
    ran = path.read_text()
    ipynb = cv.notebook.to_ipynb(path)
    nb = nbformat.read(str(ipynb), as_version=4)
    nbformat.validate(nb)
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code", "markdown", "code"]
    _, first, plot, _, fail = nb.cells
    assert [o.output_type for o in first.outputs] == ["stream", "execute_result"]
    assert first.outputs[1].data["text/plain"] == "2"
    assert plot.outputs[0].output_type == "display_data" and "image/png" in plot.outputs[0].data
    assert fail.outputs[0].output_type == "error" and fail.outputs[0].ename == "ZeroDivisionError"

    back = tmp_path / "back"
    back.mkdir()
    md = cv.notebook.from_ipynb(ipynb, back / "nb.md")
    assert md.read_text() == ran
    assert (back / "nb_files" / "cell2_1.png").read_bytes() == (tmp_path / "nb_files" / "cell2_1.png").read_bytes()


def test_missing_nbformat_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "nbformat", None)
    with pytest.raises(ImportError, match=re.escape('pip install "corvid[notebook]"')):
        cv.notebook.to_ipynb(_write(tmp_path, "```python\n1\n```\n"))


@pytest.mark.skipif(MNIST_DIR is None, reason=f"the offline MNIST files are not in any of {CANDIDATES}")
def test_mnist_notebook_runs_offline_and_reaches_97_percent(tmp_path):
    for name in ("mnist.md", "mnist.py"):
        shutil.copy(ROOT / "examples" / name, tmp_path / name)
    done = _cli("run", "--quiet", tmp_path / "mnist.md", env={"CORVID_DATA_DIR": str(MNIST_DIR)}, timeout=600)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "mnist.md").read_text()
    nb = parse(text)
    assert all(c.outputs for c in nb.cells) and not any(o.kind == "error" for c in nb.cells for o in c.outputs)
    assert "training on its first 9,000 images" in text
    images = re.findall(r"!\[[^\]]*\]\((mnist_files/cell\d+_\d+\.png)\)", text)
    assert len(images) >= 4  # the digits, the curves, the predictions, the mistakes
    for image in images:
        width, height = _png_size(tmp_path / image)
        assert width > 200 and height > 100
    accuracy = float(re.findall(r"test accuracy: (\d+\.\d+)%", text)[-1])
    assert accuracy >= 97.0, text


def test_a_cell_that_prints_the_end_marker_runs_again(tmp_path):
    """The end marker inside a fenced output (a cell showing another notebook) does not end the
    output block: the file could be neither run nor cleaned again."""
    path = _write(tmp_path, '# t\n\n```python\nprint("<!-- corvid:end -->")\nprint("after")\n```\n')
    assert cv.notebook.run(path).ok
    first = path.read_text()
    nb = parse(first)
    assert [o.text for o in nb.cells[0].outputs] == ["<!-- corvid:end -->\nafter"]
    assert cv.notebook.run(path).ok and path.read_text() == first
    cv.notebook.clean(path)
    assert path.read_text() == '# t\n\n```python\nprint("<!-- corvid:end -->")\nprint("after")\n```\n'
