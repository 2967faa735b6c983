"""The kernels stay right under other compiler tunings than this machine's ``-march=native``.

The vector width, the compiler's tuning and the vector types the renderer writes must agree on
every CPU (issue 24: on an Intel Xeon, gcc's tuning for rocketlake prefers 256-bit vectors and
split the 64-byte types written for AVX-512: 15 GFLOP/s matmuls). Each tuning below builds and
runs the CPU's share of the backend suite, the reductions and the convolutions in a child process
with a cache of its own (``CORVID_CC_FLAGS`` is appended to corvid's flags); with clang too where
it is installed.
"""

import os
import platform
import shutil
import subprocess
import sys

import pytest

_SUITE = ["tests/test_backends.py", "tests/test_ops_reduce.py", "tests/test_conv.py", "tests/test_accuracy.py",
          "-k", "not CL and not WEBGPU and not CUDA and not hundred_million"]
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(tmp_path, **env: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, CORVID_CACHE_DIR=str(tmp_path / "cache"), **env)
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q", *_SUITE],
                          env=env, cwd=_ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("flags", ["-mprefer-vector-width=256", "-march=x86-64-v3"])
def test_the_suite_passes_under_another_tuning(tmp_path, flags):
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"x86-64 tunings ({platform.machine()})")
    done = _run(tmp_path, CORVID_CC_FLAGS=flags)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_suite_passes_with_clang(tmp_path):
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("clang is not installed (apt-get install clang)")
    done = _run(tmp_path, CC=clang)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
