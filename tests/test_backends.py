"""The backend suite: one set of checks that every executing device runs, compared with numpy.

A new backend is verified by running this file: every test is parametrized by device, over the
executing devices registered in ``corvid.runtime.device`` (NULL computes nothing, so it is left
out). A device that cannot start here (no driver, no pyopencl) is skipped with the reason, e.g.
``SKIPPED ... CL not available: the CL device needs pyopencl ...``. Sizes are small and the
kernels few: OpenCL drivers compile each kernel when it is first used (PoCL takes ~0.1-0.5 s).
"""

import numpy as np
import pytest

import corvid as cv
from corvid.runtime.device import get_device

RNG = np.random.default_rng(0)
# dtypes a device has no arithmetic for (WGSL has no 64-bit floats, so no float64 and no complex128,
# whose parts are float64): where a test computes in one of them, it asserts the device's clear error instead
NO_ARITHMETIC = {"WEBGPU": ("float64", "complex128")}


def lacks(device: str, npdt) -> bool:
    return np.dtype(npdt).name in NO_ARITHMETIC.get(device, ())


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def close(got: cv.Tensor, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    got_np = got.numpy()
    assert got_np.dtype == want.dtype, (got_np.dtype, want.dtype)
    assert got_np.shape == want.shape, (got_np.shape, want.shape)
    np.testing.assert_allclose(got_np, want, rtol=rtol, atol=atol)


def test_the_device_runs_the_kernels(device):
    x = cv.Tensor(np.arange(6, dtype=np.float32), device=device)
    y = x * 2 + 1
    assert y.device == device
    np.testing.assert_array_equal(y.numpy(), np.arange(6, dtype=np.float32) * 2 + 1)


# --- elementwise, per dtype ---------------------------------------------------------------------------
def test_float_math(device):
    for npdt in (np.float32, np.float64):
        a, b = rand(3, 5, dtype=npdt), np.abs(rand(3, 5, dtype=npdt)) + 0.5
        x, y = cv.Tensor(a, device=device), cv.Tensor(b, device=device)
        if lacks(device, npdt):
            with pytest.raises(TypeError, match=f"{device} has no float64"):
                (x * y).numpy()
            np.testing.assert_array_equal(x.numpy(), a)  # (stored and read back unchanged)
            continue
        tol = {"rtol": 2e-6, "atol": 1e-6} if npdt == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
        close(x.exp() * y.log() + (x / y).sin() - y.sqrt(), np.exp(a) * np.log(b) + np.sin(a / b) - np.sqrt(b), **tol)
        close(cv.maximum(x, y) - cv.minimum(x, 0.0) + x // y + x % y,
              np.maximum(a, b) - np.minimum(a, 0) + a // b + a % b, **tol)
        close(cv.where(x > 0, x.tanh(), -x), np.where(a > 0, np.tanh(a), -a), **tol)


def test_float_specials_are_not_lost(device):
    a = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0], dtype=np.float32)
    x = cv.Tensor(a, device=device)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((x * 2).numpy(), a * 2)
        np.testing.assert_array_equal(cv.maximum(x, 0.5).numpy(), np.maximum(a, 0.5))
        np.testing.assert_array_equal((x * 0 + np.inf).numpy(), a * 0 + np.inf)
    assert x.max().numpy().item() != x.max().numpy().item()  # nan propagates through max


@pytest.mark.parametrize("npdt", [np.int32, np.int64, np.uint8])
def test_integer_ops_wrap_like_numpy(device, npdt):
    info = np.iinfo(npdt)
    a = np.array([info.max, info.min, 7, -7 if info.min < 0 else 9, 3, 0], dtype=npdt)
    b = np.array([1, 1, 2, 3, -2 if info.min < 0 else 5, 4], dtype=npdt)
    x, y = cv.Tensor(a, device=device), cv.Tensor(b, device=device)
    with np.errstate(all="ignore"):
        want = (a + b) * b - a // b + a % b
        np.testing.assert_array_equal(((x + y) * y - x // y + x % y).numpy(), want)
        np.testing.assert_array_equal((x ^ y | (x & 6)).numpy(), a ^ b | (a & 6))
        np.testing.assert_array_equal((x < y).numpy(), a < b)


def test_int64_values_beyond_32_bits(device):
    a = np.array([2**40 + 3, -(2**50), 2**62], dtype=np.int64)
    x = cv.Tensor(a, device=device)
    np.testing.assert_array_equal((x * 3 + 1).numpy(), a * 3 + 1)
    np.testing.assert_array_equal(x.sum().numpy(), a.sum())


def test_bool_logic_and_casts(device):
    a, b = rand(4, 3) > 0, rand(4, 3) > 0
    x, y = cv.Tensor(a, device=device), cv.Tensor(b, device=device)
    np.testing.assert_array_equal((x & ~y | (x ^ y)).numpy(), a & ~b | (a ^ b))
    np.testing.assert_array_equal(x.astype(cv.float32).numpy(), a.astype(np.float32))
    np.testing.assert_array_equal(x.astype(cv.int64).sum(axis=0).numpy(), a.astype(np.int64).sum(axis=0))
    f = rand(4, 3) * 100
    np.testing.assert_array_equal(cv.Tensor(f, device=device).astype(cv.int32).numpy(), f.astype(np.int32))
    np.testing.assert_array_equal(cv.Tensor(f, device=device).astype(cv.uint8).numpy(),
                                  f.astype(np.int64).astype(np.uint8))  # (wraps through int, as numpy on x86)


def test_broadcasting(device):
    a, b, c = rand(4, 1, 3), rand(5, 1), rand(3)
    x, y, z = (cv.Tensor(v, device=device) for v in (a, b, c))
    close(x * y + z, a * b + c)


# --- reductions, matmul, softmax -----------------------------------------------------------------------
def test_reductions_over_several_axes(device):
    a = rand(4, 5, 6)
    x = cv.Tensor(a, device=device)
    close(x.sum(), a.sum(), rtol=1e-5)
    close(x.sum(axis=(0, 2)), a.sum(axis=(0, 2)), rtol=1e-5)
    close(x.max(axis=1), a.max(axis=1))
    close(x.min(axis=(1, 2), keepdims=True), a.min(axis=(1, 2), keepdims=True))
    np.testing.assert_array_equal(x.argmax(axis=2).numpy(), a.argmax(axis=2))
    np.testing.assert_array_equal(x.argmax().numpy(), a.argmax())
    i = (a * 10).astype(np.int32)
    np.testing.assert_array_equal(cv.Tensor(i, device=device).sum(axis=1).numpy(), i.sum(axis=1))


def test_matmul_and_softmax(device):
    a, b = rand(17, 33), rand(33, 9)
    x, y = cv.Tensor(a, device=device), cv.Tensor(b, device=device)
    close(x @ y, a @ b, rtol=1e-5, atol=1e-5)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    close(x.softmax(axis=1), e / e.sum(axis=1, keepdims=True), rtol=1e-5)


# --- movement, fusion, indexing ------------------------------------------------------------------------
def test_movement_ops(device):
    a = rand(2, 3, 4)
    x = cv.Tensor(a, device=device)
    close(x.reshape(6, 4).permute(1, 0) + 0, a.reshape(6, 4).T)
    close(x.pad(((1, 0), (0, 2), (1, 1))) * 1, np.pad(a, ((1, 0), (0, 2), (1, 1))))
    close(x.shrink(((0, 1), (1, 3), (2, 4))).flip(2) + 1, a[0:1, 1:3, 2:4][:, :, ::-1] + 1)
    close(x[:, :1].expand(2, 5, 4) * 2, np.broadcast_to(a[:, :1], (2, 5, 4)) * 2)


def test_a_fused_chain_is_one_kernel(device):
    a = rand(8, 16)
    x = cv.Tensor(a, device=device)
    y = ((x * 2).exp() + 1).log().sum(axis=1)
    assert len(y.schedule()) == 1
    close(y, np.log(np.exp(a * 2) + 1).sum(axis=1), rtol=1e-5)


def test_indexing_and_gather(device):
    a = rand(6, 5)
    x = cv.Tensor(a, device=device)
    idx = np.array([[0, 4], [2, 2], [3, 1]])
    close(x[1:5:2, ::-1] + 0, a[1:5:2, ::-1])
    close(cv.take(x, cv.Tensor(np.array([5, 0, 3]), device=device), axis=0), a[[5, 0, 3]])
    close(cv.gather(x[:3], 1, cv.Tensor(idx, device=device)), np.take_along_axis(a[:3], idx, axis=1))
    # gathers that read through views (a transpose, a flip, a one-column slice) with negative indices
    i = np.array([[-1, 0], [3, -6], [5, 2], [-2, 1], [0, 0]])
    close(cv.take_along_axis(x.T, cv.Tensor(i, device=device), axis=1), np.take_along_axis(a.T, i, axis=1))
    close(cv.take_along_axis(x.flip(0).T, cv.Tensor(i, device=device), axis=1),
          np.take_along_axis(a[::-1].T, i, axis=1))
    close(cv.take_along_axis(x[:, 2:3], cv.Tensor(np.array([[0], [-1]] * 3), device=device), axis=1), a[:, 2:3])
    close(x[cv.Tensor(np.array([4, -6, 1]), device=device)], a[[4, -6, 1]])


# --- indirect writes (SCATTER): every mode and dtype, bitwise the CPU's --------------------------------
SCATTER_DTYPES = ("float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "bool", "int8", "uint8", "int16",
                  "uint16", "int32", "uint32", "int64", "uint64", "complex64", "complex128")


def _scatter_operands(name: str, reduce: str, rng, shape=(2, 6, 3), m: int = 9):
    """x, src of dtype ``name`` (random normals, nans among them for max/min; small integers)."""
    import ml_dtypes

    o, n, r = shape
    npdt = np.dtype(getattr(ml_dtypes, name)) if name in ("bfloat16", "float8_e4m3fn") else np.dtype(name)
    if npdt.kind in "fcV" or name.startswith(("bfloat", "float8")):
        x, src = rng.standard_normal((o, n, r)), rng.standard_normal((o, m, r))
        if npdt.kind == "c":
            x, src = x + 1j * rng.standard_normal(x.shape), src - 1j * rng.standard_normal(src.shape)
        if reduce in ("amax", "amin"):
            x.flat[::7], src.flat[::5] = np.nan, np.nan  # (nan wins, its bits copied)
            src.flat[1::11] = -0.0
    else:
        x, src = rng.integers(-3, 4, (o, n, r)), rng.integers(-3, 4, (o, m, r))
        if reduce in ("sum", "prod") and npdt.itemsize <= 2:  # products that wrap
            x, src = x * 37, src * 53
    return x.astype(npdt), src.astype(npdt)


@pytest.mark.parametrize("reduce", ["set", "sum", "prod", "amax", "amin"])
def test_scatter_every_mode_and_dtype_matches_the_cpu_bitwise(device, reduce):
    from corvid.ops.indexing import scatter_prim  # (the primitive: out-of-range indices are dropped)

    rng = np.random.default_rng(5)
    for name in SCATTER_DTYPES:
        if name.startswith("complex") and reduce in ("amax", "amin"):
            continue  # (no order: TypeError on every device, tests/test_indexing.py)
        x, src = _scatter_operands(name, reduce, rng)
        for idx in (rng.integers(-2, 8, (2, 9, 3)), rng.integers(-1, 7, (2, 9))):  # per element, per row
            args = [cv.Tensor(x, device=device), cv.Tensor(idx, device=device), cv.Tensor(src, device=device)]
            got = scatter_prim(*args[:1], 1, *args[1:], reduce)
            if lacks(device, name) and reduce != "set":
                with pytest.raises(TypeError, match=f"{device} has no {name}"):
                    got.numpy()
                continue
            want = scatter_prim(cv.Tensor(x), 1, cv.Tensor(idx), cv.Tensor(src), reduce).numpy()
            got_np = got.numpy()
            assert got_np.dtype == want.dtype and got_np.shape == want.shape
            assert got_np.tobytes() == want.tobytes(), (name, reduce, got_np, want)
    if reduce == "sum":  # and numpy's: duplicates accumulate, in index order
        a, i, v = rand(5, 4), np.array([3, 0, 3, 3, 4, 0]), rand(6, 4)
        want = a.copy()
        np.add.at(want, i, v)
        got = cv.scatter_reduce(cv.Tensor(a, device=device), 0, cv.Tensor(np.repeat(i[:, None], 4, 1), device=device),
                                cv.Tensor(v, device=device), "sum")
        close(got, want)



def test_a_long_1d_scatter_runs_on_many_work_items_in_index_order(device):
    """A 1-D scatter splits its one column into ranges of rows, a work item each
    (corvid/render/gpu.py: scatter_ranges); every update still reaches its element in index
    order, past lavapipe's loop limit too (70,000 updates), bitwise as on the CPU."""
    from corvid.ops.indexing import scatter_prim

    rng = np.random.default_rng(11)
    n, m = 100_003, 70_000
    x, src = rng.standard_normal(n).astype(np.float32), rng.standard_normal(m).astype(np.float32)
    idx = rng.integers(-3, n + 3, m)
    idx[:500] = idx[500:1000]  # (duplicates, whose sums and last writes depend on the order)
    for reduce in ("set", "sum"):
        got = scatter_prim(cv.Tensor(x, device=device), 0, cv.Tensor(idx, device=device), cv.Tensor(src, device=device),
                           reduce).numpy()
        want = scatter_prim(cv.Tensor(x), 0, cv.Tensor(idx), cv.Tensor(src), reduce).numpy()
        assert got.tobytes() == want.tobytes(), reduce

def test_setitem_and_accumulate(device):
    a = rand(7, 3)
    x = cv.Tensor(a, device=device)
    i = np.array([5, -1, 2, 5, 0])
    v = rand(5, 3)
    x[cv.Tensor(i, device=device)] = cv.Tensor(v, device=device)  # duplicates: the last write wins
    want = a.copy()
    for k, row in zip(i, v):
        want[k] = row
    assert x.device == device and any(k.name.startswith("scatter_set") for k in x.schedule())
    np.testing.assert_array_equal(x.numpy(), want)
    x[cv.Tensor(np.array([1, 1]), device=device), 2] = 9.0
    want[1, 2] = 9.0
    np.testing.assert_array_equal(x.numpy(), want)
    # index_put(accumulate=True): a sum scatter; ints wrap like numpy
    b = np.array([120, -7, 3], np.int8)
    got = cv.scatter_reduce(cv.Tensor(b, device=device), 0, cv.Tensor(np.array([0, 0, 2, 0]), device=device),
                            cv.Tensor(np.array([5, 9, -4, 100], np.int8), device=device), "sum")
    want_b = b.copy()
    np.add.at(want_b, [0, 0, 2, 0], np.array([5, 9, -4, 100], np.int8))
    np.testing.assert_array_equal(got.numpy(), want_b)
    put = cv.put_along_axis(cv.Tensor(a, device=device), cv.Tensor(np.array([[2], [0], [1]] * 2 + [[2]]), device=device),
                            -1.0, axis=1)
    want_p = a.copy()
    np.put_along_axis(want_p, np.array([[2], [0], [1]] * 2 + [[2]]), -1.0, axis=1)
    np.testing.assert_array_equal(put.numpy(), want_p)


def test_embedding_gradient_and_a_training_step(device):
    w, g = rand(10, 4), rand(2, 3, 4)
    ids = np.array([[1, 3, 1], [9, 0, 1]])
    tid = cv.Tensor(ids, device=device)

    def loss(wt):
        return (cv.nn.functional.embedding(tid, wt) * cv.Tensor(g, device=device)).sum()

    got = cv.grad(loss)(cv.Tensor(w, device=device))
    want = np.zeros_like(w)
    np.add.at(want, ids.reshape(-1), g.reshape(-1, 4))  # the gradient of a lookup: a scatter-add
    assert any(k.name.startswith("scatter_sum") for k in got.schedule())
    close(got, want)
    cv.random.manual_seed(0)
    emb = cv.nn.Embedding(10, 4, device=device)
    opt = cv.optim.SGD(emb.parameters(), lr=0.5)
    before = emb.weight.numpy().copy()
    out = emb(tid)
    (out * cv.Tensor(g, device=device)).sum().backward()
    opt.step()
    np.testing.assert_allclose(emb.weight.numpy(), before - 0.5 * want, rtol=1e-6, atol=1e-6)
    assert emb.weight.device == device


# --- random numbers and transforms ---------------------------------------------------------------------
def test_random_keys_give_the_same_numbers_on_every_device(device):
    cv.random.manual_seed(3)
    bits = cv.rand(2, 40, device=device).numpy()  # (float32 from the generator's uint32 words)
    cv.random.manual_seed(3)
    np.testing.assert_array_equal(bits, cv.rand(2, 40, device="CPU").numpy())
    k = cv.random.key(7, device=device)
    got = cv.random.normal(k, (3, 50)).numpy()
    want = cv.random.normal(cv.random.key(7, device="CPU"), (3, 50)).numpy()
    # (normal and uniform compute in float64, for the same last bit everywhere; in float32 on a
    # device with no float64, which then matches to float32 rounding)
    tol = 1e-5 if lacks(device, np.float64) else 1e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    u = cv.random.uniform(cv.random.split(k)[1], (1000,)).numpy()
    assert 0.0 <= u.min() and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.05


def test_grad_and_jit(device):
    a, w = rand(4, 3), rand(3)

    def loss(w, x):
        return ((x @ w).tanh() ** 2).sum()

    x, wt = cv.Tensor(a, device=device), cv.Tensor(w, device=device)
    t = np.tanh(a @ w)
    want = a.T @ (2 * t * (1 - t * t))
    close(cv.grad(loss)(wt, x), want, rtol=1e-5, atol=1e-6)
    jitted = cv.jit(cv.grad(loss))
    for _ in range(2):
        close(jitted(wt, x), want, rtol=1e-5, atol=1e-6)


def test_half_precision_floats(device):
    import ml_dtypes

    a = rand(3, 7)
    for npdt in (np.float16, ml_dtypes.bfloat16):
        h = a.astype(npdt)
        x = cv.Tensor(h, device=device)
        want = h * npdt(3) + npdt(1)  # (computed in float, rounded after each op, as numpy's ufuncs)
        np.testing.assert_array_equal((x * 3 + 1).numpy().astype(np.float32), want.astype(np.float32))
        got = x.exp().sum(axis=1).numpy()
        assert got.dtype == npdt
        np.testing.assert_allclose(got.astype(np.float32), np.exp(h.astype(np.float32)).sum(axis=1), rtol=2e-2)
        np.testing.assert_array_equal(x.pad(((1, 0), (0, 0)))[0].numpy().astype(np.float32), np.zeros(7))


def test_unsupported_dtype_raises_instead_of_computing_garbage(device):
    x = cv.Tensor(np.array([1 + 2j, 3 - 1j], dtype=np.complex64), device=device)
    if lacks(device, np.complex64):
        with pytest.raises(TypeError, match=f"{device} has no complex64"):
            (x * 2).numpy()
        return
    close(x * 2, np.array([2 + 4j, 6 - 2j], dtype=np.complex64))


@pytest.mark.parametrize("npdt", [np.complex64, np.complex128])
def test_complex_arithmetic_math_and_fft(device, npdt):
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((3, 8)) + 1j * rng.standard_normal((3, 8))).astype(npdt)
    b = (rng.standard_normal((3, 8)) + 1j * rng.standard_normal((3, 8))).astype(npdt)
    x, y = cv.Tensor(a, device=device), cv.Tensor(b, device=device)
    if lacks(device, npdt):  # (WGSL has no complex types, and no 64-bit floats for complex128's parts)
        with pytest.raises(TypeError, match=f"{device} has no {np.dtype(npdt).name}"):
            (x * y).numpy()
        np.testing.assert_array_equal(x.numpy(), a)  # (stored and read back unchanged)
        return
    tol = {"rtol": 3e-5, "atol": 3e-6} if npdt == np.complex64 else {"rtol": 1e-12, "atol": 1e-12}
    close(x * y + x / y - y * 2, a * b + a / b - b * 2, **tol)
    close((-x).conj() + y.real + 1j * y.imag.astype(y.real.dtype), np.conj(-a) + b.real + 1j * b.imag, **tol)
    for name in ("exp", "log", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh"):
        close(getattr(x, name)(), getattr(np, name)(a), **tol)
    inverse = {"rtol": 5e-5, "atol": 5e-6} if npdt == np.complex64 else {"rtol": 1e-12, "atol": 1e-12}
    on_cuts = np.array([2 + 0j, 2 - 0.0j, -2 + 0j, -2 - 0.0j, 0.5j, -0.0 + 3j, 0 - 3j, 1e-3 + 1e-3j, -3 + 0.5j,
                        5000 + 3000j, 1e5 + 0j, -1e5 - 0.0j, -1e5j], npdt)
    z = cv.Tensor(on_cuts, device=device)
    for name in ("asin", "acos", "atan", "asinh", "acosh", "atanh"):  # (branch cuts on the axes' signed zeros)
        close(getattr(x, name)(), getattr(np, "arc" + name[1:])(a), **inverse)
        close(getattr(z, name)(), getattr(np, "arc" + name[1:])(on_cuts), **inverse)
    for p in (2, 3, -2, 0.5, 1 + 1j, 0):  # numpy's pow: a ** 2 a square, small integers repeated products
        close(x ** p, a ** p, **inverse)
    close(x.abs(), np.abs(a), **tol)
    close(x.sum(axis=1), a.sum(axis=1), **tol)
    close(x.prod(axis=0), a.prod(axis=0), **tol)
    close(x @ y.T, a @ b.T, **tol)
    np.testing.assert_array_equal((x == y).numpy(), a == b)
    other = np.complex128 if npdt == np.complex64 else np.complex64
    if not lacks(device, other):
        close(x.astype(cv.Tensor(np.zeros(1, other)).dtype), a.astype(other), **tol)
    close(x.real.astype(x.dtype) * 2, a.real.astype(npdt) * 2, **tol)
    close(cv.fft.fft(x, axis=1), np.fft.fft(a, axis=1).astype(npdt), **tol)
    close(cv.fft.ifft(x), np.fft.ifft(a).astype(npdt), **tol)
    # numpy's product (fused on an FMA machine) and Smith's quotient, bitwise: infinities, nans and
    # zeros included; a product reduce multiplies as numpy's multiply.reduce (the plain formula)
    sp = np.array([np.inf + 1j, 1 + np.nan * 1j, 0j, -0.0 + 1e-30j, 1e30 - 1e30j, 3 - 4j], npdt)
    s = cv.Tensor(sp, device=device)
    with np.errstate(all="ignore"):
        if device == "WEBGPU":  # (WGSL's fma may round twice, as lavapipe's does: within an ulp)
            close(x * y, a * b, rtol=2.5e-7, atol=0)
        else:
            np.testing.assert_array_equal((x * y).numpy(), a * b)
            np.testing.assert_array_equal((s.reshape(6, 1) * s.reshape(1, 6)).numpy(), sp.reshape(6, 1) * sp.reshape(1, 6))
        np.testing.assert_array_equal((x / y).numpy(), a / b)
        np.testing.assert_array_equal(x.prod(axis=1).numpy(), a.prod(axis=1))
        np.testing.assert_array_equal((s.reshape(6, 1) / s.reshape(1, 6)).numpy(), sp.reshape(6, 1) / sp.reshape(1, 6))


def test_synchronize_waits_for_launched_work(device):
    """What a benchmark or a timer calls after launching kernels (launches are asynchronous on
    GPU-style devices): it returns, and the results are there."""
    x = cv.Tensor(np.arange(1 << 16, dtype=np.float32), device=device)
    y = (x * 2 + 1).realize()
    get_device(device).synchronize()
    np.testing.assert_array_equal(y.numpy(), np.arange(1 << 16, dtype=np.float32) * 2 + 1)
