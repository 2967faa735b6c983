"""corvid.nn: modules, layers, losses (being written; see issue 6)."""

from . import losses  # noqa: F401
