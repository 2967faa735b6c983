"""corvid.notebook: markdown files whose fenced ``python`` code blocks are cells, run in
order in one Python process with each cell's output written back under it: text, errors with their
traceback, and matplotlib figures as PNG files next to the notebook.

    python -m corvid.notebook run examples/mnist.md          # run every cell, write the outputs
    python -m corvid.notebook run examples/mnist.md --watch  # ... again when its code or text changes
    python -m corvid.notebook edit examples/mnist.md         # edit and run it in the browser
    python -m corvid.notebook clean examples/mnist.md        # remove the outputs and images
    python -m corvid.notebook to-ipynb examples/mnist.md     # -> examples/mnist.ipynb, for Jupyter
    python -m corvid.notebook from-ipynb analysis.ipynb      # -> analysis.md
    python -m corvid.notebook to-html examples/mnist.md      # -> examples/mnist.html, one page to share

The file format is described in :mod:`corvid.notebook.document`, how a run behaves (its
namespace, figures, failures) in :mod:`corvid.notebook.runner`, and the ``.ipynb`` conversion
(which needs ``pip install "corvid[notebook]"``) in :mod:`corvid.notebook.ipynb`, the editor
in :mod:`corvid.notebook.editor` (its kernel, also from that extra, in
:mod:`corvid.notebook.kernel`) and the HTML rendering and export in :mod:`corvid.notebook.html`.
Running needs nothing beyond corvid; saving figures needs matplotlib.
"""

from .document import Cell, Notebook, Output, parse
from .editor import edit
from .html import to_html
from .ipynb import from_ipynb, to_ipynb
from .runner import RunReport, clean, run
from .watch import watch

__all__ = ["Cell", "Notebook", "Output", "RunReport", "clean", "edit", "from_ipynb", "parse", "run", "to_html",
           "to_ipynb", "watch"]
