"""Rich display in Jupyter (issue 7): tensors and modules as HTML."""

import html
import re

import numpy as np
import pytest

import corvid as cv
from corvid import display, nn
from corvid.nn import Parameter


def _values(page):
    return html.unescape(re.search(r"<pre[^>]*>(.*)</pre>", page, re.DOTALL).group(1))


def _rows(page):
    pairs = re.findall(r"<th[^>]*>(\w+)</th><td[^>]*>([^<]*)</td>", page)
    return {html.unescape(k): html.unescape(v) for k, v in pairs}


def test_small_tensor_shows_shape_dtype_device_and_all_values():
    t = cv.Tensor([[1.5, -2.0], [3.0, 4.25]])
    page = t._repr_html_()
    assert _rows(page) == {"shape": "(2, 2)", "dtype": "float32", "device": "CPU"}
    assert _values(page) == np.array2string(t.numpy(), separator=", ")
    assert "requires_grad" in cv.ones(2, requires_grad=True)._repr_html_()
    assert _values(cv.Tensor(7)._repr_html_()) == "7"


@pytest.mark.parametrize("shape", [(5000,), (100, 100), (3, 400, 5), (9, 8, 7, 6)])
def test_big_tensor_is_abbreviated_exactly_as_numpy_prints_it(shape):
    t = cv.arange(int(np.prod(shape))).reshape(shape) * 2 - 7
    expected = np.array2string(t.numpy(), separator=", ", threshold=display.THRESHOLD, edgeitems=display.EDGE)
    assert "..." in expected
    assert _values(t._repr_html_()) == expected


def test_big_tensor_computes_only_the_corners(monkeypatch):
    computed = []
    numpy = cv.Tensor.numpy

    def recording(self):
        computed.append(self.size)
        return numpy(self)

    monkeypatch.setattr(cv.Tensor, "numpy", recording)
    t = cv.arange(3_000_000).reshape(1000, 3000).astype(cv.float32).exp()  # lazy: nothing computed yet
    text = display.tensor_values_text(t)
    assert computed == [(2 * display.EDGE + 1) ** 2]  # a 7x7 corner array, not 3 million values
    assert text.startswith("[[1.") and "..." in text


def test_tensor_html_escapes_and_null_device_shows_no_values():
    page = cv.Tensor([1.0, 2.0], device="NULL")._repr_html_()
    assert "NULL device runs nothing" in page and "<pre" in page
    assert "<b>Parameter</b>" in Parameter(cv.ones(2))._repr_html_()


class Tagged(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = Parameter(cv.ones(2, 3))

    def extra_repr(self):
        return "<script>"


def test_module_table_lists_layers_with_parameter_counts_and_totals():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 2), Tagged()))
    model[2][0].weight.requires_grad_(False)
    page = model._repr_html_()
    rows = re.findall(r"<tr><td.*?</tr>", page)
    assert len(rows) == len(list(model.named_modules())) == 6
    cells = [[html.unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", r)] for r in rows]
    assert cells[1] == ["0", "Linear(in_features=4, out_features=3, bias=True)", "15", "weight (3, 4), bias (3,)",
                        "yes"]
    assert cells[2][:3] == ["1", "ReLU()", ""]
    assert cells[4][0] == "2.0" and cells[4][2:] == ["8", "weight (2, 3), bias (2,)", "partly"]
    assert cells[5][1] == "Tagged(<script>)" and "<script>" not in page  # escaped
    assert "29 parameters (23 trainable)" in page and "(training mode)" in page
    assert "(eval mode)" in model.eval()._repr_html_()


def test_jupyter_displays_figures_inline_and_tensors_as_html():
    """What a Jupyter kernel does with a cell's value: IPython's display formatter (with the
    inline PNG format selected, as ``%matplotlib inline`` does) renders a corvid figure as a PNG
    and a tensor as HTML. (In a child process: an IPython shell changes matplotlib's global state.)"""
    pytest.importorskip("matplotlib", reason="figures need matplotlib (the [plot] extra)")
    pytest.importorskip("IPython", reason="the display check needs IPython (as Jupyter kernels have)")
    code = """
import base64
import corvid as cv
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.pylabtools import select_figure_formats
shell = InteractiveShell.instance()
select_figure_formats(shell, {"png"})
ax = cv.plot.line(cv.arange(5.0), title="inline")
data, _ = shell.display_formatter.format(ax.figure)
png = data["image/png"]
png = png if isinstance(png, bytes) else base64.b64decode(png)
assert png[:8] == b"\\x89PNG\\r\\n\\x1a\\n" and len(png) > 1000, png[:16]
data, _ = shell.display_formatter.format(cv.arange(6.0).reshape(2, 3))
assert "float32" in data["text/html"] and "(2, 3)" in data["text/html"]
print("ok")
"""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
