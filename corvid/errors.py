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
    element count, a layer's expected input).

    A ValueError (numpy's type) and a RuntimeError (PyTorch's).

    >>> try:
    ...     cv.ones(2).reshape(3)
    ... except ValueError as e:
    ...     print(type(e).__name__, "-", e)
    ShapeError - cannot reshape tensor of shape (2,) (size 2) into (3,)
    """


class ArgumentError(ValueError, RuntimeError):
    """An argument the operation cannot take. PyTorch raises RuntimeError for these (``clamp()``
    without bounds, ``flip((0, 0))``, an integer to a negative integer power) and numpy ValueError,
    so this is both: code written for either catches it.

    >>> try:
    ...     cv.asarray([2, 3]) ** -1
    ... except RuntimeError as e:
    ...     print(type(e).__name__, isinstance(e, ValueError))
    ArgumentError True
    """


class AxisError(IndexError, ValueError):
    """An axis (dimension) out of range: PyTorch's IndexError, numpy's AxisError (a ValueError
    and an IndexError).

    >>> try:
    ...     cv.ones(2, 3).sum(axis=2)
    ... except IndexError as e:
    ...     print(type(e).__name__, "-", e)
    AxisError - axis 2 is out of range for a tensor with 2 dimensions
    """


__all__ = ["ArgumentError", "AxisError", "ShapeError"]
