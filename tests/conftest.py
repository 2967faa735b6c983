"""Hypothesis profiles: the default run is reproducible (the same examples on every machine,
so a CI result means the code, not the draw); ``HYPOTHESIS_PROFILE=explore`` draws fresh
random examples to hunt for new bugs, e.g.
``HYPOTHESIS_PROFILE=explore CORVID_FUZZ_EXAMPLES=2000 python -m pytest tests/test_fuzz.py``."""

import os

import pytest
from hypothesis import settings

from corvid.runtime.device import _BACKENDS, get_device

settings.register_profile("default", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# CPU, CL, WEBGPU, CUDA and any plugin registered first: the devices that execute kernels
EXECUTING_DEVICES = [name for name in _BACKENDS if name != "NULL"]


@pytest.fixture(params=EXECUTING_DEVICES)
def device(request) -> str:
    """Each executing device in turn; one that cannot start here is skipped with the reason."""
    try:
        get_device(request.param)
    except (ImportError, RuntimeError, OSError) as e:
        pytest.skip(f"{request.param} not available: {e}")
    return request.param
