"""Tests for corvid.runtime.compiler: building, caching and loading C kernels."""

import ctypes
import hashlib
import os
import pathlib
import platform
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest

from corvid.runtime import compiler

ADD1 = """
void add1(float* out, const float* x, long n) {
    for (long i = 0; i < n; ++i) out[i] = x[i] + 1.0f;
}
"""

VEXP = """
__attribute__((simd("notinbranch"))) float expf(float);
void vexp(float* restrict out, const float* restrict x, long n) {
    #pragma omp simd
    for (long i = 0; i < n; ++i) out[i] = expf(x[i]);
}
"""

ARGS = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CORVID_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CORVID_NO_DISK_CACHE", raising=False)
    compiler._clear_memory_cache()
    yield tmp_path
    compiler._clear_memory_cache()


def run_unary(lib, fname, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    lib.function(fname, ARGS)(out.ctypes.data, x.ctypes.data, x.size)
    return out


def check_add1(lib):
    x = np.arange(1003, dtype=np.float32) * 0.5
    np.testing.assert_array_equal(run_unary(lib, "add1", x), x + 1)


def entry(tmp_path, ext):
    (path,) = tmp_path.glob(f"kernels/*/*.{ext}")
    return path


def no_compiler(*args, **kwargs):
    raise AssertionError("the compiler must not be invoked")


def test_compile_and_run():
    check_add1(compiler.compile_kernel(ADD1, "add1"))


def test_memory_then_disk_cache(tmp_path, monkeypatch):
    lib = compiler.compile_kernel(ADD1, "add1")
    monkeypatch.setattr(subprocess, "run", no_compiler)
    assert compiler.compile_kernel(ADD1, "add1") is lib
    compiler._clear_memory_cache()
    again = compiler.compile_kernel(ADD1, "add1")
    assert again is not lib and again.path == lib.path
    check_add1(again)


def test_private_permissions(tmp_path):
    lib = compiler.compile_kernel(ADD1, "add1")
    for folder in (tmp_path, tmp_path / "kernels", lib.path.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for ext in ("so", "c", "sha256"):
        assert stat.S_IMODE(entry(tmp_path, ext).stat().st_mode) == 0o600


def replace_file(path, data):
    # Never rewrite a loaded .so in place: that would corrupt the live mapping.
    path.unlink()
    path.write_bytes(data)
    path.chmod(0o600)


def corrupt_truncate(so, sidecar):
    replace_file(so, so.read_bytes()[:1000])


def corrupt_garbage(so, sidecar):
    # Matching sidecar, so the entry is only caught by the dlopen failure.
    garbage = b"\x7fELF garbage" * 100
    replace_file(so, garbage)
    replace_file(sidecar, hashlib.sha256(garbage).hexdigest().encode())


def corrupt_sidecar(so, sidecar):
    replace_file(sidecar, b"0" * 64)


def corrupt_missing_sidecar(so, sidecar):
    sidecar.unlink()


def corrupt_world_writable(so, sidecar):
    so.chmod(0o666)


@pytest.mark.parametrize("corrupt", [corrupt_truncate, corrupt_garbage, corrupt_sidecar,
                                     corrupt_missing_sidecar, corrupt_world_writable])
def test_corrupt_entry_is_rebuilt(tmp_path, corrupt):
    compiler.compile_kernel(ADD1, "add1")
    so, sidecar = entry(tmp_path, "so"), entry(tmp_path, "sha256")
    corrupt(so, sidecar)
    compiler._clear_memory_cache()
    check_add1(compiler.compile_kernel(ADD1, "add1"))
    assert stat.S_IMODE(so.stat().st_mode) == 0o600
    compiler._clear_memory_cache()
    # Rebuilt entry is intact again: served from disk with no compiler run.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(subprocess, "run", no_compiler)
        check_add1(compiler.compile_kernel(ADD1, "add1"))


def test_syntax_error_raises_compile_error(tmp_path):
    with pytest.raises(compiler.CompileError) as info:
        compiler.compile_kernel("void broken(float* x) { x[0] = ; }\n", "broken_kernel")
    message = str(info.value)
    src = entry(tmp_path, "c")
    assert "broken_kernel" in message and str(src) in message
    assert "issue tracker" in message
    assert src.read_text().startswith("void broken")
    assert not list(tmp_path.glob("kernels/*/*.so"))


def test_no_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CORVID_NO_DISK_CACHE", "1")
    lib = compiler.compile_kernel(ADD1, "add1")
    check_add1(lib)
    assert not lib.path.is_relative_to(tmp_path)
    assert not list(tmp_path.glob("kernels/*/*"))


def test_no_compiler_found(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/corvid-cc")
    monkeypatch.setenv("PATH", "")
    compiler.find_toolchain.cache_clear()
    try:
        with pytest.raises(compiler.CompilerNotFoundError, match="apt-get install gcc"):
            compiler.find_toolchain()
    finally:
        compiler.find_toolchain.cache_clear()


def test_toolchain_probe():
    tc = compiler.find_toolchain()
    assert os.path.isabs(tc.cc) and tc.version
    assert "-fno-math-errno" in tc.flags and "-ffast-math" not in tc.flags
    assert tc.key() == compiler.find_toolchain().key()


def test_vectorized_expf_keeps_ieee_semantics():
    tc = compiler.find_toolchain()
    lib = compiler.compile_kernel(VEXP, "vexp")
    rng = np.random.default_rng(0)
    x = rng.uniform(-80, 80, 1003).astype(np.float32)
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, 100.0, -200.0]
    out = run_unary(lib, "vexp", x)
    with np.errstate(over="ignore"):
        expected = np.exp(x)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=0)
    assert np.isnan(out[0]) and out[1] == np.inf and out[2] == 0.0
    if tc.libmvec and "clang" not in tc.version and platform.machine() == "x86_64":
        assert b"_ZGV" in lib.path.read_bytes(), "expf loop was not vectorized via libmvec"


def test_fallback_without_openmp_and_libmvec(tmp_path, monkeypatch):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("needs gcc")
    wrapper = tmp_path / "fake-cc"
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in -fopenmp|-lmvec) exit 1;; esac; done\n'
        f'exec {gcc} "$@"\n')
    wrapper.chmod(0o700)
    monkeypatch.setenv("CC", str(wrapper))
    compiler.find_toolchain.cache_clear()
    try:
        tc = compiler.find_toolchain()
        assert tc.cc == str(wrapper)
        assert not tc.openmp and not tc.libmvec
        assert "-fopenmp-simd" in tc.flags and "-lmvec" not in tc.libs
        check_add1(compiler.compile_kernel(ADD1, "add1"))
    finally:
        compiler.find_toolchain.cache_clear()


def test_concurrent_processes_share_cache(tmp_path):
    script = (
        "import numpy as np, ctypes\n"
        "from corvid.runtime import compiler\n"
        f"lib = compiler.compile_kernel({ADD1!r}, 'add1')\n"
        "x = np.arange(100, dtype=np.float32); out = np.empty_like(x)\n"
        "lib.function('add1', [ctypes.c_void_p] * 2 + [ctypes.c_long])"
        "(out.ctypes.data, x.ctypes.data, x.size)\n"
        "assert (out == x + 1).all()\n")
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(compiler.__file__).parents[2])}
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env) for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    compiler._clear_memory_cache()
    check_add1(compiler.compile_kernel(ADD1, "add1"))
    assert not list(tmp_path.glob("kernels/*/.*"))  # no temp files left behind


def test_gated_broadcast_copy_is_not_miscompiled():
    """gcc 12.2 at -O3 vectorized this pad+expand copy wrongly (element [1, 0, 1] came out 2.0);
    the kernel flags avoid it. Found by the fuzz test."""
    import corvid as cv

    a = np.arange(1, 7, dtype=np.float32).reshape(3, 2)
    x = cv.Tensor(a).pad(((1, 0), (0, 1))).reshape(4, 3, 1).expand(4, 3, 2)
    ref = np.broadcast_to(np.pad(a, ((1, 0), (0, 1))).reshape(4, 3, 1), (4, 3, 2))
    np.testing.assert_array_equal(x.numpy(), ref)


def test_gated_load_of_a_broadcast_row_is_not_miscompiled():
    """gcc 12.2's vectorizer (with -mtune for this CPU) compiled the gated load
    ``p[idx * (i < 1)]`` as a reversed vector load one element before the buffer, dropping
    ``y`` from the sum. Gated loads now clamp their index instead. Found by the fuzz test."""
    import corvid as cv

    x = np.array([[0.5, -1.5], [-2.75, -2.9]], dtype=np.float32)
    y = np.array([[10.0], [100.0]], dtype=np.float32)
    got = (-((cv.Tensor(x) + cv.Tensor(y))[1:, :].reshape(2, 1, 1))).pad(((0, 0), (0, 0), (0, 1)))
    ref = np.pad(-((x + y)[1:].reshape(2, 1, 1)), ((0, 0), (0, 0), (0, 1)))
    np.testing.assert_array_equal(got.numpy(), ref)


def test_a_value_computed_in_two_kernels_is_bit_identical():
    """``mag == mag.max(...)`` recomputes ``mag`` in two kernels (a vectorized column max and an
    elementwise test): kernels are built with -ffp-contract=off and fuse multiply-adds only where
    the IR says, so both see the same bits and every column finds its maximum."""
    import corvid as cv

    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float64):
        re, im = (cv.Tensor(rng.standard_normal((3, 40, 48)).astype(dtype)) for _ in range(2))
        mag = re * re + im * im
        rows = cv.arange(40).reshape(1, 40, 1)
        first = cv.where(mag == mag.max(1, keepdims=True), rows, 40).min(axis=1)
        np.testing.assert_array_equal(first.numpy(), mag.numpy().argmax(1))


def test_kernels_take_the_vector_width_the_compilers_tuning_prefers():
    """gcc tuned for a CPU that prefers 256-bit vectors (-march=rocketlake, skylake-avx512, or
    -mprefer-vector-width=256) splits the 64-byte vector types an AVX-512 CPU would otherwise get
    into slow code (a 1024^2 matmul: 15 GFLOP/s instead of 435 on a Zen 4). The renderer's vectors
    follow the compiler's preferred width, read from the compiler itself."""
    import subprocess
    import sys

    from corvid.runtime.compiler import _preferred_vector_bits, find_toolchain

    tc = find_toolchain()
    reported = _preferred_vector_bits(tc.cc, tc.flags + ("-mprefer-vector-width=256",))
    if reported is None and "clang" in tc.version:
        pytest.skip(f"clang does not report its preferred vector width ({tc.version})")
    assert reported == 256
    assert _preferred_vector_bits(tc.cc, tc.flags + ("-mprefer-vector-width=none",)) is None
    code = ("import numpy as np, corvid as cv\n"
            "from corvid.codegen.opt import vector_bytes\n"
            "a = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)\n"
            "b = np.random.default_rng(1).standard_normal((256, 128)).astype(np.float32)\n"
            "y = cv.Tensor(a) @ cv.Tensor(b)\n"
            "src = y.schedule()[-1].source\n"
            "assert np.allclose(y.numpy(), a @ b, rtol=1e-4, atol=1e-4)\n"
            "print(vector_bytes(), 'vector_size(64)' in src, 'vector_size(32)' in src)\n")
    env = dict(os.environ, CORVID_CC_FLAGS="-mprefer-vector-width=256")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    width, wide, narrow = done.stdout.split()
    assert (width, wide, narrow) == ("32", "False", "True")


def _wide_target():
    """(cc, flags, preferred, target) of this machine's toolchain before any width was asked for,
    or a skip where the tuning prefers its target's widest vectors already."""
    from corvid.runtime.compiler import _preferred_vector_bits, _target_vector_bits, find_toolchain

    tc = find_toolchain()
    flags = tuple(f for f in tc.flags if not f.startswith("-mprefer-vector-width"))
    preferred, target = _preferred_vector_bits(tc.cc, flags), _target_vector_bits(tc.cc, flags)
    if preferred is None or target is None or preferred >= target:
        pytest.skip(f"this compiler's tuning prefers its target's widest vectors ({preferred} of {target} bits)")
    return tc.cc, tc.version, flags, preferred, target


def test_wider_vectors_are_asked_for_where_they_measure_faster_once_per_machine(monkeypatch):
    """An AVX-512 core that gcc tunes for 256-bit vectors: one core's multiply-adds are timed at
    both widths, and the kernels are built with -mprefer-vector-width=512 when the wider ones
    are 1.3 times as fast (on a 2-core Xeon: 248 against 134 GFLOP/s). The answer is cached in the
    cache folder, keyed by compiler, flags and CPU."""
    import json

    cc, version, flags, preferred, target = _wide_target()
    pays = compiler._wider_vectors_pay(cc, version, flags, preferred, target)
    path = compiler.cache_dir() / "vector_width.json"
    table = json.loads(path.read_text())
    assert list(table.values()) == [pays] and os.stat(path).st_mode & 0o077 == 0
    tc = compiler._probe_toolchain(cc, ())
    assert (f"-mprefer-vector-width={target}" in tc.flags) == pays
    assert tc.preferred_vector_bits == (target if pays else preferred)

    def no_measuring(*a, **kw):
        raise AssertionError("measured again")

    monkeypatch.setattr(compiler, "_probe", no_measuring)  # (the second answer comes from the file)
    assert compiler._wider_vectors_pay(cc, version, flags, preferred, target) == pays
    key = next(iter(table))
    path.write_text(json.dumps({key: not pays}))  # (the file decides: a cached answer is used as it is)
    assert compiler._wider_vectors_pay(cc, version, flags, preferred, target) == (not pays)
    path.write_text(json.dumps({key: "yes"}))  # not a bool: measured again
    with pytest.raises(AssertionError, match="measured again"):
        compiler._wider_vectors_pay(cc, version, flags, preferred, target)


def test_a_vector_width_the_user_asks_for_is_kept():
    cc, _, _, preferred, target = _wide_target()
    tc = compiler._probe_toolchain(cc, ("-mprefer-vector-width=256",))
    assert f"-mprefer-vector-width={target}" not in tc.flags and tc.preferred_vector_bits == 256


def test_the_vector_width_follows_the_compilers_target_not_the_cpu():
    """``-march=x86-64-v3`` builds AVX2 code even on an AVX-512 CPU: 32-byte vectors and 16 vector
    registers, read from the compiler's predefined macros, not from /proc/cpuinfo."""
    import platform
    import subprocess
    import sys

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"an x86-64 target ({platform.machine()})")
    code = ("from corvid.codegen.opt import vector_bytes, vector_registers\n"
            "from corvid.runtime.compiler import find_toolchain\n"
            "print(find_toolchain().target_vector_bits, vector_bytes(), vector_registers())\n")
    env = dict(os.environ, CORVID_CC_FLAGS="-march=x86-64-v3")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["256", "32", "16"]
