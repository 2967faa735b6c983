"""What is particular to the WEBGPU device (corvid/render/wgsl.py, corvid/runtime/webgpu.py): the
dtypes WGSL lacks (int64/uint64 emulated on word pairs, float16/bfloat16/8- and 16-bit integers
packed into 32-bit words, float64 and complex128 refused with a clear error), float results where
WGSL leaves them open (nan, inf, exact fmod, the math functions written in WGSL), grids past one
dispatch dimension and kernels with many buffers. The shared checks are in test_backends.py.

Skipped, with the reason, where wgpu or a WebGPU adapter is missing (CI installs Mesa's lavapipe).
"""

import os
import sys

import ml_dtypes
import numpy as np
import pytest

import corvid as cv
from corvid.runtime.device import get_device

try:
    get_device("WEBGPU")
except (ImportError, RuntimeError) as e:
    pytest.skip(f"WEBGPU not available: {e}", allow_module_level=True)

D = "WEBGPU"
RNG = np.random.default_rng(1)
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
F32_SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -2.5, 1e30, -1e-30,
                         88.5, -90.0, 1e-3, 0.9999, 1.0001, 20.0], np.float32)


def on(a) -> cv.Tensor:
    return cv.Tensor(np.asarray(a), device=D)


def ulps(got: np.ndarray, want: np.ndarray) -> float:
    """The largest error in float32 ulps of ``want`` (nan and inf must match exactly). Subnormal
    results are left out: WGSL lets a device flush them to zero, and lavapipe does."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want) & ~((np.abs(want) < np.finfo(np.float32).tiny) & (want != 0))
    np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    spacing = np.spacing(np.abs(want[fin]).astype(np.float32)).astype(np.float64)
    return float(np.max(np.abs(got[fin].astype(np.float64) - want[fin]) / spacing, initial=0.0))


# --- float32: specials and the functions WGSL leaves open -----------------------------------------------
@pytest.mark.parametrize("name, lo, hi, max_ulps", [
    ("exp", -87, 88, 16), ("log", 1e-30, 1e30, 4), ("log2", 1e-30, 1e30, 4), ("log1p", -0.999, 1e6, 4),
    ("expm1", -20, 88, 16), ("tanh", -12, 12, 8), ("sinh", -89, 89, 16), ("cosh", -89, 89, 16),
    ("arcsinh", -1e6, 1e6, 6), ("arccosh", 1, 1e6, 6), ("arctanh", -0.9999, 0.9999, 6),
    ("arctan", -1e4, 1e4, 4), ("arcsin", -1, 1, 6), ("arccos", -1, 1, 6), ("sqrt", 0, 1e30, 1),
    ("exp2", -126, 127, 8), ("sin", -100, 100, 4), ("cos", -100, 100, 4), ("tan", -1.5, 1.5, 4),
])
def test_math_is_accurate_and_keeps_specials(name, lo, hi, max_ulps):
    x = np.concatenate([RNG.uniform(lo, hi, 3000), np.geomspace(max(lo, 1e-6), hi, 500) if hi > 0 else []])
    x = np.concatenate([x.astype(np.float32), F32_SPECIALS])
    if name in ("sin", "cos", "tan"):  # (exact argument reduction up to |x| = 102900 only)
        x = x[~(np.abs(x) > 102900)]
    fn = {"arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "arctan": "atan", "arcsin": "asin",
          "arccos": "acos"}.get(name, name)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x.astype(np.float64)).astype(np.float32)
        got = getattr(on(x), fn)().numpy()
    assert ulps(got, want) <= max_ulps


def test_float_specials_survive_the_compiler():
    a = F32_SPECIALS
    x = on(a)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((x * 0).numpy(), a * 0)  # (inf * 0 is nan: not folded to 0)
        np.testing.assert_array_equal((x - x).numpy(), a - a)
        np.testing.assert_array_equal((x != x).numpy(), a != a)  # noqa: PLR0124
        np.testing.assert_array_equal((x == x).numpy(), a == a)  # noqa: PLR0124
        np.testing.assert_array_equal(cv.maximum(x, 1.0).numpy(), np.maximum(a, 1.0))
        np.testing.assert_array_equal(cv.minimum(1.0, x).numpy(), np.minimum(1.0, a))
        np.testing.assert_array_equal(x.astype(cv.bool).numpy(), a.astype(bool))
        assert ulps((x ** 3).numpy(), a ** np.float32(3)) <= 2  # (by squaring: two roundings)
        np.testing.assert_array_equal((x ** 0).numpy(), a ** np.float32(0))


def test_pow_and_atan2_special_cases():
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0], np.float32)
    a, b = np.meshgrid(v, v)
    with np.errstate(all="ignore"):
        assert ulps(cv.pow(on(a), on(b)).numpy(), np.power(a, b)) <= 2
        assert ulps(cv.atan2(on(a), on(b)).numpy(), np.arctan2(a, b)) <= 2


def test_float_floor_division_and_remainder_are_numpys():
    a = np.concatenate([RNG.standard_normal(2000) * 1e3, RNG.standard_normal(200) * 1e30, F32_SPECIALS]).astype(np.float32)
    b = np.concatenate([RNG.standard_normal(2000) * 10, RNG.standard_normal(200) * 1e-3, F32_SPECIALS[::-1]]).astype(np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((on(a) % on(b)).numpy(), np.remainder(a, b))  # exact
        want = np.where(np.isinf(a) != np.isinf(b), a / b, np.floor_divide(a, b))  # (the Array API's at infinities)
        np.testing.assert_array_equal((on(a) // on(b)).numpy(), want)


# --- integers: narrow ones wrap at their width, 64-bit ones are emulated ------------------------------
@pytest.mark.parametrize("npdt", INTS)
def test_integer_arithmetic_matches_numpy(npdt):
    info = np.iinfo(npdt)
    edge = [info.min, info.max, 0, 1, 2, 3, 7, 31, 63, 100, info.max // 3, info.min // 3 if info.min else 5]
    a = np.concatenate([np.array(edge, npdt), RNG.integers(info.min, info.max, 200, dtype=npdt, endpoint=True)])
    b = np.concatenate([np.array(edge[::-1], npdt), RNG.integers(info.min, info.max, 200, dtype=npdt, endpoint=True)])
    x, y = on(a), on(b)
    with np.errstate(all="ignore"):
        for got, want in [(x + y, a + b), (x - y, a - b), (x * y, a * b), (-x, -a), (abs(x), np.abs(a)),
                          (cv.maximum(x, y), np.maximum(a, b)), (cv.minimum(x, y), np.minimum(a, b)),
                          (x < y, a < b), (x == y, a == b), (x & y, a & b), (x | y, a | b), (x ^ y, a ^ b)]:
            np.testing.assert_array_equal(got.numpy(), want)
        nz = np.where(b == 0, 1, b).astype(npdt)  # (numpy's x // 0 warns and gives 0, as corvid)
        np.testing.assert_array_equal((x // on(nz)).numpy(), a // nz)
        np.testing.assert_array_equal((x % on(nz)).numpy(), a % nz)
        s = (b % (8 * a.itemsize)).astype(npdt)
        np.testing.assert_array_equal((x << on(s)).numpy(), a << s)
        np.testing.assert_array_equal((x >> on(s)).numpy(), a >> s)
        e = (b % 5).astype(npdt)
        np.testing.assert_array_equal((x ** on(e)).numpy(), a ** e)
        np.testing.assert_array_equal(x.sum().numpy(), a.sum())
        np.testing.assert_array_equal(x.max().numpy(), a.max())


def test_int64_is_the_default_and_works():
    np.testing.assert_array_equal(cv.arange(5, device=D).numpy(), np.arange(5))
    assert cv.arange(5, device=D).dtype is cv.int64
    a = np.array([2**62 + 5, -(2**63), 2**40, -7], np.int64)
    np.testing.assert_array_equal((on(a) * 3 // 7).numpy(), a * 3 // 7)
    np.testing.assert_array_equal(on(a).argmax().numpy(), a.argmax())


@pytest.mark.parametrize("src", INTS + [np.bool_, np.float16, ml_dtypes.bfloat16, np.float32])
def test_casts_match_numpy(src):
    floats = (np.float16, ml_dtypes.bfloat16, np.float32)
    if src in floats:
        vals = np.concatenate([RNG.standard_normal(300) * 100, [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, 127.9, -128.9, 255.5]])
    elif np.dtype(src) == np.bool_:
        vals = RNG.standard_normal(300) > 0
    else:
        info = np.iinfo(src)
        vals = np.concatenate([RNG.integers(info.min, info.max, 300, dtype=src, endpoint=True),
                               np.array([info.min, info.max, 0], src)])
    a = np.asarray(vals).astype(src)
    for dst in INTS + [np.bool_, np.float16, ml_dtypes.bfloat16, np.float32]:
        if src in floats and dst in INTS:
            ok = (a.astype(np.float64) > np.iinfo(dst).min - 1) & (a.astype(np.float64) < np.iinfo(dst).max + 1)
            a_in = np.where(ok, a, 0).astype(src)  # (out of range is undefined in C: x86's value is not numpy's)
        else:
            a_in = a
        got = on(a_in).astype(dst).numpy()
        assert got.dtype == np.dtype(dst)
        with np.errstate(all="ignore"):
            want = a_in.astype(dst)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=f"{src} -> {dst}")


def test_int64_to_float32_rounds_to_nearest_even():
    a = np.concatenate([np.array([2**24 + 1, 2**24 + 3, 2**53 + 1, -(2**63), 2**63 - 1, (1 << 40) + (1 << 16)]),
                        RNG.integers(-(2**63), 2**63 - 1, 2000, dtype=np.int64)])
    np.testing.assert_array_equal(on(a).astype(cv.float32).numpy(), a.astype(np.float32))
    u = a.view(np.uint64)  # (numpy warns that values near 2**64 round to it: they do)
    np.testing.assert_array_equal(on(u).astype(cv.float32).numpy(), u.astype(np.float32))


def test_every_float16_and_bfloat16_round_trips():
    bits = np.arange(1 << 16, dtype=np.uint16)
    for npdt in (np.float16, ml_dtypes.bfloat16):
        h = bits.view(npdt)
        f = on(h).astype(cv.float32).numpy()
        np.testing.assert_array_equal(f.view(np.uint32), h.astype(np.float32).view(np.uint32))
        back = (on(h) * 1).numpy()  # float32 -> 16-bit: exact for values that came from 16 bits
        real = ~np.isnan(h.astype(np.float32))
        np.testing.assert_array_equal(back.view(np.uint16)[real], bits[real])


def test_float32_to_float16_rounds_like_numpy():
    f = np.concatenate([RNG.standard_normal(5000).astype(np.float32) * np.float32(10.0) ** RNG.integers(-9, 6, 5000),
                        np.array([65504, 65519.99, 65520, 1e9, 2**-25, 2**-24 * 1.5, 2**-25 * 1.01, 6e-8, np.inf,
                                  -np.inf], np.float32)]).astype(np.float32)
    for npdt in (np.float16, ml_dtypes.bfloat16):
        with np.errstate(over="ignore"):
            want = f.astype(npdt)
        np.testing.assert_array_equal(on(f).astype(npdt).numpy().view(np.uint16), want.view(np.uint16))


# --- float64 and complex128: stored and copied, never computed on --------------------------------------
def test_float64_is_refused_with_a_clear_error():
    a = RNG.standard_normal((3, 4))
    x = on(a)
    np.testing.assert_array_equal(x.numpy(), a)  # storage is only bytes
    np.testing.assert_array_equal(x.T.contiguous().numpy(), a.T)  # so is a copy
    with pytest.raises(TypeError, match="WEBGPU has no float64"):
        (x + 1).numpy()
    with pytest.raises(TypeError, match="WEBGPU has no float64"):
        on(a.astype(np.float32)).astype(cv.float64).numpy()
    with pytest.raises(TypeError, match="WEBGPU has no complex128"):
        on(np.ones(3, np.complex128)).sum().numpy()
    assert on(np.ones(3, np.complex64)).sum().item() == 3  # (complex64 is vec2<f32>)


def test_float64_casts_to_float32_exactly():
    d = np.concatenate([RNG.standard_normal(3000) * 10.0 ** RNG.integers(-50, 50, 3000),
                        [np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4028235677973366e38, 3.4028235e38 * 1.0000001, 1e-45,
                         7e-46, 2.1e-45, 1.401298464324817e-45 * 0.5, 1e-320, 1 + 2**-24, 1 + 2**-24 + 2**-40]])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(on(d).astype(cv.float32).numpy().view(np.uint32),
                                      d.astype(np.float32).view(np.uint32))


# --- grids, buffers, shapes ----------------------------------------------------------------------------
def test_grids_past_one_dispatch_dimension():
    n = 65535 * 64 + 1000  # more invocations than one dimension of 65535 workgroups of 64
    x = cv.arange(n, dtype=cv.int32, device=D)
    got = (x * 3 + 1).numpy()
    assert got[0] == 1 and got[-1] == 3 * (n - 1) + 1 and np.all(np.diff(got) == 3)
    b = (cv.arange(2 * n, dtype=cv.int32, device=D) % 3 == 0).numpy()  # (packed bools: 4 per invocation)
    np.testing.assert_array_equal(b, np.arange(2 * n) % 3 == 0)


def test_long_reduces_are_exact_and_a_loop_limit_is_never_silent():
    """lavapipe leaves an invocation's loops after 65535 iterations in all, without an error: a
    long reduce runs as partials then their reduce (each invocation well within the limit), and a
    kernel that would still pass it is refused, never truncated."""
    n = (1 << 17) + 3 * 1024
    np.testing.assert_array_equal(on(np.ones(n, np.float32)).sum().numpy(), np.float32(n))
    a = RNG.standard_normal((3, 1 << 16)).astype(np.float32)
    np.testing.assert_allclose(on(a).max(axis=1).numpy(), a.max(axis=1))
    np.testing.assert_allclose(on(a).sum().numpy(), a.astype(np.float64).sum(), rtol=1e-4)
    limit = get_device(D).renderer.loop_limit
    if limit is None:
        pytest.skip("this adapter has no loop limit")
    y = on(np.ones(40000, np.float32))  # two loops of 40000 in one invocation: 80000 iterations
    with pytest.raises(NotImplementedError, match="loop limit"):
        (y.max() + y.sum()).numpy()


def test_register_tiled_matmul():
    """The device's heuristics give a matmul's invocations 8x8 output tiles (gpu_heuristics)."""
    from corvid.codegen.opt import gpu_heuristics
    from tests.test_opt import _base

    a, b = RNG.standard_normal((256, 64)).astype(np.float32), RNG.standard_normal((64, 128)).astype(np.float32)
    k = _base(cv.Tensor(a) @ cv.Tensor(b))
    assert [str(o) for o in get_device(D).heuristics(k).opts] == [str(o) for o in gpu_heuristics(k).opts] != []
    np.testing.assert_allclose((on(a) @ on(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_kernels_with_many_buffers():
    limit = get_device(D).renderer.max_buffers
    arrays = [RNG.standard_normal(5).astype(np.float32) for _ in range(limit)]
    xs = [on(a) for a in arrays]

    def total(n: int) -> cv.Tensor:
        out = xs[0]
        for x in xs[1:n]:
            out = out + x
        return out

    # limit - 1 inputs and the output: fits (one kernel)
    np.testing.assert_allclose(total(limit - 1).numpy(), np.sum(arrays[:limit - 1], axis=0), rtol=1e-5)
    with pytest.raises(NotImplementedError, match=f"binds at most {limit} storage buffers"):
        total(limit).numpy()


@pytest.mark.parametrize("npdt", [np.bool_, np.uint8, np.int16, np.float16])
def test_packed_outputs_of_odd_sizes_and_orders(npdt):
    a = (RNG.standard_normal((3, 5, 7)) * 50).astype(npdt)
    x = on(a)
    np.testing.assert_array_equal(x.permute(2, 0, 1).contiguous().numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(x[1:, ::2, 3].contiguous().numpy(), a[1:, ::2, 3])
    np.testing.assert_array_equal(x.flip(1).reshape(-1)[:13].contiguous().numpy(), a[:, ::-1].reshape(-1)[:13])


def test_empty_and_zero_d_tensors():
    z = on(np.float32(2.5))
    np.testing.assert_array_equal((z * 2).numpy(), np.float32(5.0))
    e = on(np.zeros((0, 3), np.float32))
    assert (e + 1).numpy().shape == (0, 3)
    np.testing.assert_array_equal(e.sum(axis=0).numpy(), np.zeros(3, np.float32))
    np.testing.assert_array_equal(on(np.zeros((2, 0), np.uint8)).sum(axis=1).numpy(), np.zeros(2, np.uint64))


@pytest.mark.parametrize("npdt", [np.int64, np.int32, np.uint8])
def test_gather_and_take_with_index_dtypes(npdt):
    a = RNG.standard_normal((6, 4)).astype(np.float32)
    idx = np.array([[5, 0, 3, 2], [1, 1, 0, 5]], npdt)
    np.testing.assert_array_equal(cv.gather(on(a), 0, on(idx)).numpy(), np.take_along_axis(a, idx, axis=0))
    np.testing.assert_array_equal(cv.take(on(a), on(idx[0]), axis=0).numpy(), a[idx[0]])


def test_missing_wgpu_names_what_to_install(monkeypatch):
    from corvid.runtime import webgpu

    monkeypatch.setitem(sys.modules, "wgpu", None)
    with pytest.raises(ImportError, match=r'pip install "corvid\[webgpu\]".*mesa-vulkan-drivers'):
        webgpu.WebGPUDevice()


# --- random samplers: computed in float32 where the device has no float64 -----------------------------
def test_random_samplers_run_in_float32_and_agree_with_the_cpu():
    k = cv.random.key(7)
    kw = k.to(D)
    for name, draw in [("uniform", lambda key: cv.random.uniform(key, (4096,), minval=-2.0, maxval=3.0)),
                       ("normal", lambda key: cv.random.normal(key, (4096,))),
                       ("bernoulli", lambda key: cv.random.bernoulli(key, 0.3, (4096,))),
                       ("categorical", lambda key: cv.random.categorical(
                           key, cv.Tensor(np.log([0.2, 0.3, 0.5]).astype(np.float32), device=key.device),
                           shape=(4096,)))]:
        with cv.default_device(D):  # (samples are drawn on the default device, the key is their seed)
            got = draw(kw)
        want = draw(k)
        assert got.device == D, name
        g, w = got.numpy(), want.numpy()
        if g.dtype.kind == "f":  # the same draws, rounded once more on the way (float32, not float64)
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-5, err_msg=name)
        else:  # booleans and indices: equal but for a draw that lands within rounding of a boundary
            assert (g != w).mean() < 1e-3, name
    with cv.default_device(D):
        x = cv.randn(65536).numpy()
    assert abs(x.mean()) < 0.02 and abs(x.std() - 1) < 0.02
    # truncated_normal goes through erfinv, which (as the other special functions) computes in float64
    with pytest.raises(TypeError, match="WEBGPU has no float64"):
        cv.random.truncated_normal(kw, -1.0, 2.0, (16,), device=D).numpy()


# --- scatter ------------------------------------------------------------------------------------------
def test_scatter_past_the_loop_limit_is_dispatched_in_chunks():
    """lavapipe leaves a loop silently after 65535 iterations per invocation: a scatter of more
    updates per column runs as one dispatch per chunk of them, in order (the CPU's bits)."""
    from corvid.ops.indexing import scatter_prim

    rng = np.random.default_rng(7)
    n, m = 1000, 150_000
    x, i, v = rng.standard_normal(n).astype(np.float32), rng.integers(-5, n + 5, m), rng.standard_normal(m)
    for reduce in ("sum", "set", "amax"):
        want = scatter_prim(cv.Tensor(x), 0, cv.Tensor(i), cv.Tensor(v.astype(np.float32)), reduce).numpy()
        got = scatter_prim(on(x), 0, on(i), on(v.astype(np.float32)), reduce).numpy()
        assert got.tobytes() == want.tobytes(), reduce
    b, c = rng.integers(0, 2, n).astype(bool), rng.integers(0, 4, m).astype(bool)  # (packed: through atomics)
    want = scatter_prim(cv.Tensor(b), 0, cv.Tensor(i), cv.Tensor(c), "amin").numpy()
    assert scatter_prim(on(b), 0, on(i), on(c), "amin").numpy().tobytes() == want.tobytes()


# --- an OpenGL adapter (wgpu's fallback where there is no Vulkan driver) ------------------------------
_GL_CHECK = """
import numpy as np, corvid as cv
from corvid.runtime.device import get_device
info = get_device("WEBGPU").adapter.info
if str(info.get("backend_type")) != "OpenGL":
    print("skip", info.get("backend_type")); raise SystemExit(0)
a = np.array([-7, 7, -7, 7, -10, 2**31 - 1, -2**31], np.int32)
b = np.array([2, -2, -2, 2, 3, -3, 7], np.int32)
for dt in (np.int32, np.int16, np.int8):
    x, y = cv.Tensor(a.astype(dt), device="WEBGPU"), cv.Tensor(b.astype(dt), device="WEBGPU")
    np.testing.assert_array_equal((x // y).numpy(), a.astype(dt) // b.astype(dt))
    np.testing.assert_array_equal((x % y).numpy(), a.astype(dt) % b.astype(dt))
print("ok")
"""


def test_integer_division_is_numpys_on_an_opengl_adapter():
    """Without a Vulkan driver wgpu serves WebGPU through OpenGL, where naga writes WGSL's % as
    GLSL's, undefined for negative operands (llvmpipe: -10 // 3 gave -3, -7 % 2 gave -7)."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", _GL_CHECK], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, WGPU_BACKEND_TYPE="OpenGL"))
    if done.returncode == 0 and done.stdout.startswith("skip"):
        pytest.skip(f"wgpu gave no OpenGL adapter here ({done.stdout.strip()})")
    assert done.returncode == 0 and "ok" in done.stdout, done.stdout + done.stderr[-3000:]
