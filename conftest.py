"""pytest setup shared by the test suite and the docstring examples (``--doctest-modules``):
the examples may use ``cv`` and ``np`` without importing them."""

import numpy as np
import pytest

import corvid as cv


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace, request, tmp_path, monkeypatch):
    doctest_namespace["cv"] = cv
    doctest_namespace["np"] = np
    if isinstance(request.node, pytest.DoctestItem):
        # examples that write files (a notebook, a checkpoint, a figure) write them in a fresh
        # folder, not in the checkout the suite runs from
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("MPLBACKEND", "Agg")


def _missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


# corvid.plot needs matplotlib (the [plot] extra, part of [test]): without it, its docstring
# examples are not collected (tests/test_plot.py skips with the reason instead)
collect_ignore_glob = ["corvid/plot/*"] if _missing("matplotlib") else []
# corvid.distributed needs mpi4py (the [distributed] extra, not part of [test]): likewise, its
# docstring examples need it (tests/test_distributed.py skips with the reason)
if _missing("mpi4py"):
    collect_ignore_glob.append("corvid/distributed/*")
