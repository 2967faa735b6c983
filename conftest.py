"""pytest setup shared by the test suite and the docstring examples (``--doctest-modules``):
the examples may use ``cv`` and ``np`` without importing them."""

import numpy as np
import pytest

import corvid as cv


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    doctest_namespace["cv"] = cv
    doctest_namespace["np"] = np
