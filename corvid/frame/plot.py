"""``frame.plot``: charts of a frame's columns through :mod:`corvid.plot` (matplotlib).

Each method reads the named columns (nulls become NaN, so matplotlib leaves gaps), labels the
axes with the column names and returns the matplotlib Axes, as :mod:`corvid.plot` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["FramePlot"]


def _values(frame: Any, name: str) -> np.ndarray:
    return frame[name].to_numpy()


class FramePlot:
    """Charts of ``frame``'s columns (``df.plot.line(x="day", y=["oslo", "lima"])``...).

    >>> import matplotlib.pyplot as plt, corvid.frame as cf
    >>> df = cf.DataFrame({"day": [1, 2, 3], "temp": [3.0, None, 5.0], "city": ["a", "b", "c"]})
    >>> ax = df.plot.line(x="day", y="temp")
    >>> ax.get_xlabel(), ax.lines[0].get_ydata().tolist()[::2]
    ('day', [3.0, 5.0])
    >>> plt.close(ax.figure)
    >>> ax = df.plot.bar(x="city", y="temp")
    >>> [t.get_text() for t in ax.get_xticklabels()]
    ['a', 'b', 'c']
    >>> plt.close(ax.figure)
    """

    def __init__(self, frame: Any):
        self.frame = frame

    def _ys(self, y: str | Sequence[str] | None, x: str | None) -> list[str]:
        if y is None:
            return [k for k, c in self.frame._cols.items() if k != x and c.type.kind in ("int", "float")]
        return [y] if isinstance(y, str) else list(y)

    def line(self, x: str | None = None, y: str | Sequence[str] | None = None, **kwargs: Any) -> Any:
        """One line per ``y`` column (every numeric one when None) against ``x`` (the row number
        when None); datetimes on the x axis are shown as dates."""
        from .. import plot

        ys = self._ys(y, x)
        values = np.stack([_values(self.frame, k).astype(np.float64) for k in ys], axis=1)
        xs = _values(self.frame, x) if x is not None else np.arange(len(values))
        dates = xs.dtype.kind == "M"
        if dates:  # (corvid.plot draws numbers: matplotlib's day numbers, shown as dates)
            from matplotlib.dates import date2num

            xs = date2num(xs)
        kwargs.setdefault("xlabel", x)
        if len(ys) == 1:
            kwargs.setdefault("ylabel", ys[0])
            ax = plot.line(xs, values[:, 0], **kwargs)
        else:
            ax = plot.line(xs, values, label=ys, **kwargs)
        if dates:
            ax.xaxis_date()
        return ax

    def scatter(self, x: str, y: str, c: str | None = None, **kwargs: Any) -> Any:
        """Points of ``(x, y)``, coloured by the column ``c`` when given."""
        from .. import plot

        kwargs.setdefault("xlabel", x)
        kwargs.setdefault("ylabel", y)
        colour = None if c is None else _values(self.frame, c).astype(np.float64)
        if c is not None:
            kwargs.setdefault("colorbar", True)
        return plot.scatter(_values(self.frame, x), _values(self.frame, y), c=colour, **kwargs)

    def bar(self, x: str, y: str, **kwargs: Any) -> Any:
        """Bars of ``y`` at each value of ``x`` (category names or numbers)."""
        from .. import plot

        kwargs.setdefault("xlabel", x)
        kwargs.setdefault("ylabel", y)
        labels = _values(self.frame, x)
        return plot.bar([str(v) for v in labels] if labels.dtype == object else labels,
                        _values(self.frame, y).astype(np.float64), **kwargs)

    def hist(self, column: str, bins: int = 30, **kwargs: Any) -> Any:
        """A histogram of the non-null values of ``column``."""
        from .. import plot

        values = self.frame.drop_nulls(column)[column].to_numpy()
        kwargs.setdefault("xlabel", column)
        return plot.hist(values.astype(np.float64), bins=bins, **kwargs)
