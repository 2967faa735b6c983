"""``python -m corvid.info`` / ``cv.show_config()``: what corvid sees on this machine."""

import io
import os
import subprocess
import sys

import corvid as cv
from corvid.info import environment
from corvid.runtime import device as registry


def _info(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "corvid.info"], env=dict(os.environ, **env),
                          capture_output=True, text=True, timeout=300)


def test_the_command_prints_versions_compiler_vectors_roofline_and_devices():
    done = _info(CORVID_PEAK="123.5,45.25")  # (a given roofline: no measurement in the test)
    assert done.returncode == 0, done.stderr
    assert "RuntimeWarning" not in done.stderr
    out = done.stdout
    assert f"corvid {cv.__version__}" in out and "numpy" in out
    assert "C compiler: " in out and "-march=native" in out
    assert "vectors kernels use: " in out and "roofline: 123.5 GFLOP/s float32, 45.2 GB/s read" in out
    assert "cache directory: " in out and "  CPU: starts" in out


def test_the_vector_width_shown_is_the_one_kernels_use():
    done = _info(CORVID_PEAK="1,1", CORVID_CC_FLAGS="-mprefer-vector-width=128")
    assert done.returncode == 0, done.stderr
    if "tuning prefers vectors of: 128 bits" not in done.stdout:  # (a compiler that does not say: clang)
        assert "any width" in done.stdout
        return
    assert "vectors kernels use: 128 bits" in done.stdout


def test_a_device_that_does_not_start_says_why(monkeypatch):
    monkeypatch.setitem(registry._BACKENDS, "NOPE", "corvid_no_such_backend_module:Device")
    info = environment(peak=False)
    assert info["devices"]["CPU"] == "starts"
    assert info["devices"]["NOPE"].startswith("does not start:") and "corvid_no_such_backend_module" in info["devices"]["NOPE"]
    buf = io.StringIO()
    cv.show_config(buf, peak=False)
    assert "  NOPE: does not start:" in buf.getvalue() and "roofline" not in buf.getvalue()
