"""corvid's documentation site: its pages, the API reference's grouping (:mod:`docs.reference`)
and its builder (:mod:`docs.build`). Build it with ``python -m docs``."""
