"""Hypothesis profiles: the default run is reproducible (the same examples on every machine,
so a CI result means the code, not the draw); ``HYPOTHESIS_PROFILE=explore`` draws fresh
random examples to hunt for new bugs, e.g.
``HYPOTHESIS_PROFILE=explore CORVID_FUZZ_EXAMPLES=2000 python -m pytest tests/test_fuzz.py``."""

import os

from hypothesis import settings

settings.register_profile("default", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
