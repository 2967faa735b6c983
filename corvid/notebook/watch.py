"""``run --watch``: run a notebook again each time its cells or text change.

The file's modification time is polled (no file-watching dependency); when it moves, the file
is compared with what the last run started from, outputs left aside, so the run's own write
(only outputs change) does not start another run, and neither does a save that changed
nothing. Each run is a fresh ``python -m corvid.notebook run`` process, so it starts from a
clean interpreter as the first one did (modules the cells import are loaded anew; compiled
kernels stay cached on disk). A save during a run makes that run leave the file alone (see
:mod:`corvid.notebook.runner`) and the next one start at once.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

from .document import parse

__all__ = ["CHANGED_DURING_RUN", "watch"]

CHANGED_DURING_RUN = 3  # exit status of `run` when the file changed while it ran (nothing written)


def _mtime(path: pathlib.Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:  # an editor replacing the file: it is back in a moment
        return None


def _without_outputs(path: pathlib.Path) -> str | None:
    """The file's text with every cell's outputs removed (None while the file is missing)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        nb = parse(text)
    except ValueError:
        return text  # malformed: a run reports why
    for cell in nb.cells:
        cell.outputs = []
    return nb.render()


def watch(path: str | os.PathLike, *, interval: float = 0.5, max_runs: int | None = None,
          quiet: bool = False) -> int:
    """Run the notebook at ``path`` now and after every save that changes its cells or text,
    until interrupted (Ctrl-C) or, with ``max_runs``, after that many runs. Returns the exit
    status of the last run (0: every cell succeeded). FileNotFoundError when there is no such file.

    Each run is a separate ``python -m corvid.notebook run`` process; ``quiet=True`` keeps its
    cells' output off the terminal.

    >>> import pathlib
    >>> _ = pathlib.Path("demo.md").write_text("```python\\nprint(6 * 7)\\n```\\n")
    >>> watch("demo.md", max_runs=1, quiet=True)   # one run, then return its exit status
    0
    >>> "```output\\n42\\n```" in pathlib.Path("demo.md").read_text()
    True
    """
    path = pathlib.Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such notebook file")
    root = str(pathlib.Path(__file__).resolve().parents[2])  # the folder holding the corvid package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "corvid.notebook", "run", str(path)] + (["--quiet"] if quiet else [])
    runs, status, seen, last_source = 0, 0, None, None
    print(f"watching {path.name} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        while max_runs is None or runs < max_runs:
            stamp = _mtime(path)
            source = _without_outputs(path) if stamp != seen else last_source
            seen = stamp
            if source is None or source == last_source:
                time.sleep(interval)
                continue
            last_source = source
            status = subprocess.run(command, env=env, check=False).returncode
            runs += 1
    except KeyboardInterrupt:
        pass
    return status
