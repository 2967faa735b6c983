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


def _clang() -> str | None:
    """clang's path: ``clang``, else the newest versioned one (Debian installs ``clang-15``)."""
    found = shutil.which("clang")
    if found:
        return found
    versions = [(int(name.rsplit("-", 1)[1]), os.path.join(folder, name))
                for folder in os.environ.get("PATH", "").split(os.pathsep) if os.path.isdir(folder)
                for name in os.listdir(folder) if name.startswith("clang-") and name[6:].isdigit()]
    return max(versions)[1] if versions else None


def test_the_suite_passes_with_clang(tmp_path):
    clang = _clang()
    if clang is None:
        pytest.skip("clang is not installed (apt-get install clang)")
    used = subprocess.run([sys.executable, "-c", "from corvid.runtime.compiler import find_toolchain as f; print(f().cc)"],
                          env=dict(os.environ, CC=clang), cwd=_ROOT, capture_output=True, text=True, timeout=120)
    assert used.stdout.strip() == clang, used.stdout + used.stderr  # (not another compiler in its place)
    done = _run(tmp_path, CC=clang)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


# In a child process under each tuning: the peak probe's one-core rate with the vectors kernels
# are written with (corvid.codegen.opt.vector_bytes) against the fastest width measured. A wrong
# width runs many times slower (64-byte vectors under gcc's 256-bit tuning: 17x), so a mismatch
# fails every try, while a busy machine's noise (up to ~1.5x) passes one of them.
_WIDTH_CHECK = """
import os
from corvid.runtime.compiler import find_toolchain
assert os.environ.get("CC", "") in ("", find_toolchain().cc), f"CC is not used: {find_toolchain().cc}"
from corvid.codegen.opt import vector_bytes
from corvid.info import WIDTH_MARGIN
from corvid.runtime.peak import _measure
for attempt in range(3):
    widths = dict(_measure().widths)
    chosen, best = widths[vector_bytes()], max(widths.values())
    if chosen >= WIDTH_MARGIN * best:
        break
print(vector_bytes(), widths)
assert chosen >= WIDTH_MARGIN * best, f"{vector_bytes()}-byte vectors: {chosen} GFLOP/s, the fastest width {best}"
"""


@pytest.mark.parametrize("tuning", [{}, {"CORVID_CC_FLAGS": "-mprefer-vector-width=256"},
                                    {"CORVID_CC_FLAGS": "-mprefer-vector-width=512"},
                                    {"CORVID_CC_FLAGS": "-march=x86-64-v3"}, {"CC": "clang"}],
                         ids=["native", "prefer-256", "prefer-512", "x86-64-v3", "clang"])
def test_the_chosen_vector_width_is_the_fastest(tmp_path, tuning):
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"x86-64 tunings ({platform.machine()})")
    if tuning.get("CC") == "clang":
        if _clang() is None:
            pytest.skip("clang is not installed (apt-get install clang)")
        tuning = {"CC": _clang()}
    env = dict(os.environ, CORVID_CACHE_DIR=str(tmp_path / "cache"), **tuning)
    env.pop("CORVID_PEAK", None)
    done = subprocess.run([sys.executable, "-c", _WIDTH_CHECK], env=env, cwd=_ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
