"""The exception types corvid raises where numpy and PyTorch disagree on the type.

numpy raises ValueError for a shape that does not fit and an argument it cannot take, and
AxisError (a ValueError and an IndexError) for an axis out of range; PyTorch raises RuntimeError
for the first two and IndexError for the third. corvid's are subclasses of both, so code written
for either library catches them unchanged.

>>> import corvid as cv
>>> try:
...     cv.ones(2, 3) @ cv.ones(2, 3)
... except RuntimeError as e:  # (PyTorch's type; ValueError catches it too)
...     print(type(e).__name__)
ShapeError
"""

from __future__ import annotations


class ShapeError(ValueError, RuntimeError):
    """Shapes that do not fit together (broadcasting, a product's inner sizes, a reshape's
    element count, a layer's expected input)."""


class ArgumentError(ValueError, RuntimeError):
    """An argument the operation cannot take. PyTorch raises RuntimeError for these (``clamp()``
    without bounds, ``flip((0, 0))``, an integer to a negative integer power) and numpy ValueError,
    so this is both: code written for either catches it."""


class AxisError(IndexError, ValueError):
    """An axis (dimension) out of range: PyTorch's IndexError, numpy's AxisError (a ValueError
    and an IndexError)."""


__all__ = ["ArgumentError", "AxisError", "ShapeError"]
