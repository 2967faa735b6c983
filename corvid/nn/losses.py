"""Loss functions (being written; see issue 6)."""

__all__: list[str] = []
