"""The 8-bit floats float8_e4m3fn and float8_e5m2, checked against ml_dtypes bit for bit.

Both are stored as bytes and computed in float32, rounded to 8 bits after every op
(corvid/render/c.py: narrow_rounded), which is how ml_dtypes' numpy ufuncs compute them: single
ops and chains of them give numpy's bytes. A sum reduce (and so a matmul) accumulates exact
products in float32 and rounds once. Conversions are checked over every bit pattern, every other
dtype, and random and edge float32 values, on every executing device (CPU, CL, WEBGPU; a device
that cannot start is skipped with the reason); tests/test_cuda.py compiles the kernels of
:func:`workload` for CUDA.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corvid as cv
import corvid.dtype as cd

FP8 = [cv.float8_e4m3fn, cv.float8_e5m2]
E4, E5 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
NO_FLOAT64 = ("WEBGPU",)  # (stores float64 and converts it, but has no float64 arithmetic)
# (numpy warns about the nans and overflows these tests make on purpose)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def ids(d: cd.DType) -> str:
    return d.name


def every(d: cd.DType) -> np.ndarray:
    """All 256 values of an 8-bit float, nans included."""
    return np.arange(256, dtype=np.uint8).view(d.np)


def bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype != np.bool_ else a


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    bad = np.flatnonzero(bits(got) != bits(want))
    assert bad.size == 0, f"{bad.size} differ, first at {bad[:8]}: {got.ravel()[bad[:8]]} != {want.ravel()[bad[:8]]}"


def same_values(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit except the sign of a nan (which sign a fresh nan gets is the hardware's choice)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    same_bits(got[~nan], want[~nan])


# --- the dtypes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("d", FP8, ids=ids)
def test_dtype_objects(d):
    assert (d.itemsize, d.kind, d.is_float) == (1, "f", True) and d in cd.ALL_DTYPES
    assert cd.to_dtype(d.name) is d and getattr(cv, d.name) is d
    assert d.np == np.dtype(getattr(ml_dtypes, d.name))
    assert cd.from_numpy(d.np) is d and cd.from_numpy(d.np.type) is d and cd.to_dtype(d.np.type) is d
    info, ref = cv.finfo(d), ml_dtypes.finfo(d.np)
    assert (info.bits, info.eps, info.max, info.min, info.smallest_normal) == \
        (8, float(ref.eps), float(ref.max), float(ref.min), float(ref.smallest_normal))
    assert cd.sum_dtype(d) is d and cd.result_type(d, 2.5) is d and cd.result_type(d, 1j) is cv.complex64


def test_other_8_bit_formats_are_refused():
    for other in (ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3b11fnuz):
        with pytest.raises(TypeError, match="float8_e4m3fn"):
            cd.from_numpy(other)


def test_e4m3fn_has_no_infinity_so_its_extremes_are_finite():
    assert cd.max_value(cv.float8_e4m3fn) == 448.0 == -cd.min_value(cv.float8_e4m3fn)
    assert cd.reduce_identity(cv.float8_e4m3fn, "max") == -448.0
    assert cd.max_value(cv.float8_e5m2) == math.inf


@pytest.mark.parametrize("a,b,want", [
    (cv.float8_e4m3fn, cv.float16, cv.float16), (cv.float8_e5m2, cv.bfloat16, cv.bfloat16),
    (cv.float8_e4m3fn, cv.float32, cv.float32), (cv.float8_e5m2, cv.float64, cv.float64),
    (cv.float8_e4m3fn, cv.int64, cv.float8_e4m3fn), (cv.float8_e5m2, cv.uint8, cv.float8_e5m2),
    (cv.float8_e4m3fn, cv.bool, cv.float8_e4m3fn), (cv.float8_e5m2, cv.complex128, cv.complex128),
    (cv.float8_e4m3fn, cv.float8_e4m3fn, cv.float8_e4m3fn),
], ids=repr)
def test_promotion(a, b, want):
    assert cv.result_type(a, b) is want and cv.result_type(b, a) is want and cv.promote_types(a, b) is want
    assert cv.can_cast(a, want) and cv.can_cast(b, want)


def test_the_two_formats_do_not_promote():
    e4, e5 = cv.float8_e4m3fn, cv.float8_e5m2
    for args in ((e4, e5), (e5, e4), (e4, e5, cv.int8), (e4, e5, 1.0)):
        with pytest.raises(TypeError, match="astype"):
            cv.result_type(*args)
    assert cv.result_type(e4, e5, cv.float16) is cv.float16  # a wider float holds both
    assert not cv.can_cast(e4, e5) and not cv.can_cast(e5, e4) and cv.can_cast(e4, e5, "same_kind")
    x, y = cv.Tensor([1.0], dtype=e4), cv.Tensor([1.0], dtype=e5)
    with pytest.raises(TypeError, match="no implicit promotion between float8_e4m3fn and float8_e5m2"):
        x + y
    assert (x + y.astype(e4)).dtype is e4


def test_python_scalars_are_weak_and_tensors_promote():
    x = cv.Tensor(np.array([1.5, -2.0], E4))
    assert (x * 2.0).dtype is cv.float8_e4m3fn and (x + 1).dtype is cv.float8_e4m3fn
    assert (x + cv.Tensor([1.0])).dtype is cv.float32
    assert (x + cv.Tensor([1], dtype=cv.int8)).dtype is cv.float8_e4m3fn
    assert (x + cv.Tensor([1.0], dtype=cv.bfloat16)).dtype is cv.bfloat16


# --- conversions, on every device --------------------------------------------------------------
@pytest.mark.parametrize("d", FP8, ids=ids)
def test_every_value_converts_to_every_dtype(device, d):
    a = every(d)
    x = cv.Tensor(a, device=device)
    for other in cd.ALL_DTYPES:
        if other is cv.float64 and device in NO_FLOAT64:
            with pytest.raises(TypeError, match=f"{device} has no float64"):
                x.astype(other).numpy()
            continue
        same_bits(x.astype(other).numpy(), a.astype(other.np))


@pytest.mark.parametrize("d", FP8, ids=ids)
def test_every_dtype_converts_to_8_bits(device, d):
    rng = np.random.default_rng(1)
    sources = []
    for other in cd.ALL_DTYPES:
        if other.is_bool:
            sources.append(np.array([True, False]))
        elif other.is_int:
            info = np.iinfo(other.np)
            sources.append(np.concatenate([rng.integers(info.min, info.max, 500, dtype=other.np, endpoint=True),
                                           rng.integers(max(info.min, -600), 600, 500).astype(other.np),
                                           np.array([info.min, info.max], other.np)]))
        else:
            values = np.concatenate([every(d).astype(np.float32), rng.standard_normal(1000) * 100])
            sources.append(values.astype(other.np))
    for i in range(0, len(sources), 6):  # (6 inputs a kernel: WebGPU binds few buffers)
        group = sources[i:i + 6]
        got = cv.cat([cv.Tensor(src, device=device).astype(d) for src in group]).numpy()
        same_bits(got, np.concatenate([src.astype(d.np) for src in group]))


def edge_float32() -> np.ndarray:
    """float32 values around everything the conversions decide on: every 8-bit value and the
    midpoints between neighbours (ties), one float32 ulp either side of those, the subnormal
    range, overflow, infinities, nans with payloads, both zeros; and random bit patterns."""
    fp8 = np.concatenate([every(d).astype(np.float32) for d in FP8])
    fp8 = np.unique(fp8[np.isfinite(fp8)])
    mid = (fp8[:-1].astype(np.float64) + fp8[1:]) / 2
    near = np.concatenate([fp8, mid.astype(np.float32), [464.0, 480.0, 61440.0, 65536.0, 1e30, 2.0**-10, 2.0**-17]])
    near = np.concatenate([near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))])
    specials = np.array([0x7F800000, 0x7F800001, 0x7FC00000, 0x7FBFFFFF, 0x00000001, 0x007FFFFF], np.uint32).view(np.float32)
    random = np.random.default_rng(0).integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    both = np.concatenate([near.astype(np.float32), specials, random])
    return np.concatenate([both, -both])


@pytest.mark.parametrize("d", FP8, ids=ids)
def test_float32_rounds_as_ml_dtypes(device, d):
    f = edge_float32()
    same_bits(cv.Tensor(f, device=device).astype(d).numpy(), f.astype(d.np))
    g = f.astype(np.float64) * (1 + 2.0**-40)  # (float64 goes through float32, as in ml_dtypes)
    same_bits(cv.Tensor(g, device=device).astype(d).numpy(), g.astype(d.np))


@pytest.mark.parametrize("d", FP8, ids=ids)
@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(width=32), min_size=64, max_size=64))
def test_any_float32_rounds_as_ml_dtypes(d, values):
    f = np.array(values, np.float32)
    same_bits(cv.Tensor(f).astype(d).numpy(), f.astype(d.np))


def test_overflow_and_nan():
    f = np.array([448, 464, 480, 57344, 61439, 61440, np.inf, -np.inf, np.nan], np.float32)
    assert bits(cv.Tensor(f).astype(cv.float8_e4m3fn).numpy()).tolist() == [0x7E, 0x7E] + [0x7F] * 5 + [0xFF, 0x7F]
    assert bits(cv.Tensor(f).astype(cv.float8_e5m2).numpy()).tolist() == [0x5F, 0x5F, 0x60, 0x7B, 0x7B, 0x7C, 0x7C,
                                                                            0xFC, 0x7E]
    inf_nan = np.array([0x7C, 0xFC, 0x7E], np.uint8).view(E5)  # e5m2 inf -> int max/min, nan -> 0 (ml_dtypes)
    assert cv.Tensor(inf_nan).astype(cv.int16).tolist() == [32767, -32768, 0] == inf_nan.astype(np.int16).tolist()
    x = cv.Tensor(np.array([448.0, 57344.0], np.float32))
    assert np.isnan((x[:1].astype(cv.float8_e4m3fn) * 2).numpy().astype(np.float32)).all()  # e4m3fn: nan
    assert (x[1:].astype(cv.float8_e5m2) * 2).numpy().astype(np.float32).tolist() == [math.inf]


def test_astype_quantizes_inside_a_fused_kernel():
    f = np.array([1.001, 3.3, 0.3, 500.0], np.float32)
    for d in FP8:
        y = cv.Tensor(f).astype(d).astype(cv.float32)
        assert len(y.schedule()) == 1
        same_bits(y.numpy(), f.astype(d.np).astype(np.float32))


@pytest.mark.parametrize("d", FP8, ids=ids)
def test_bitcast_to_and_from_bytes(device, d):
    """Exact but for the payload of float8_e5m2 nans: a value is held as a float32 while it is
    computed, and every float32 nan converts to 0x7e (with its sign), as in ml_dtypes."""
    a = every(d)
    canonical = a.astype(np.float32).astype(d.np)
    x = cv.Tensor(a, device=device)
    same_bits(x.bitcast(cv.uint8).numpy(), canonical.view(np.uint8))
    same_bits(cv.Tensor(a.view(np.int8), device=device).bitcast(d).numpy(), canonical)
    assert (d is cv.float8_e5m2) == (not np.array_equal(bits(canonical), bits(a)))


# --- arithmetic ----------------------------------------------------------------------------------
BINARY = {"add": (lambda x, y: x + y, np.add), "sub": (lambda x, y: x - y, np.subtract),
          "mul": (lambda x, y: x * y, np.multiply), "div": (lambda x, y: x / y, np.divide),
          "maximum": (cv.maximum, np.maximum), "minimum": (cv.minimum, np.minimum)}


@pytest.mark.parametrize("d", FP8, ids=ids)
def test_binary_ops_on_every_pair_of_values(device, d):
    a = every(d)
    x, y = cv.Tensor(a, device=device).reshape(256, 1), cv.Tensor(a, device=device).reshape(1, 256)
    fa, fb = a.astype(np.float32)[:, None], a.astype(np.float32)[None, :]
    got = cv.stack([op(x, y) for op, _ in BINARY.values()]).numpy()  # (one kernel)
    for (name, (_, ref)), g in zip(BINARY.items(), got):
        want = ref(fa, fb).astype(d.np)
        if name in ("maximum", "minimum"):  # (of 0 and -0, corvid's maximum keeps the first, numpy's the second)
            g, want = g.astype(np.float32) + 0, want.astype(np.float32) + 0
        same_values(g, want)
    np.testing.assert_array_equal(cv.stack([x < y, x == y, x != y]).numpy(), [fa < fb, fa == fb, fa != fb])


UNARY = {"neg": (lambda x: -x, np.negative), "abs": (cv.abs, np.abs), "sqrt": (cv.sqrt, np.sqrt),
         "floor": (cv.floor, np.floor), "ceil": (cv.ceil, np.ceil), "trunc": (cv.trunc, np.trunc),
         "square": (lambda x: x * x, np.square), "exp": (cv.exp, np.exp), "log": (cv.log, np.log),
         "sin": (cv.sin, np.sin), "tanh": (cv.tanh, np.tanh)}


@pytest.mark.parametrize("d", FP8, ids=ids)
def test_unary_ops_on_every_value(device, d):
    a = every(d)
    x, f = cv.Tensor(a, device=device), a.astype(np.float32)
    got = cv.stack([op(x) for op, _ in UNARY.values()]).numpy()  # (one kernel)
    for (_, ref), g in zip(UNARY.values(), got):
        same_values(g, ref(f).astype(d.np))


@pytest.mark.parametrize("d", FP8, ids=ids)
def test_a_fused_chain_rounds_after_every_op(device, d):
    a = every(d)
    x = cv.Tensor(a, device=device)
    y = cv.where(x > 1, (x * 3 + 1.5).exp() - x, x / 4)
    assert len(y.schedule()) == 1
    r = (a * d.np.type(3) + d.np.type(1.5)).astype(np.float32)
    want = np.where(a > 1, (np.exp(r).astype(d.np) - a), a / d.np.type(4))  # (ml_dtypes: each op rounds)
    same_values(y.numpy(), want.astype(d.np))
    same_values((x + cv.Tensor(np.int8(3), device=device)).numpy(), a + d.np.type(3))


# --- reductions and matmul: float32 accumulation, one rounding -----------------------------------
def small_values(d: cd.DType, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values whose float32 sums are exact in any order (multiples of 1/16 below 16), so that a
    sum's one rounding is comparable bit for bit."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-16, 16, shape) * rng.choice([1.0, 0.5, 0.25, 0.125, 0.0625], shape)).astype(d.np)


@pytest.mark.parametrize("d", FP8, ids=ids)
def test_reductions(device, d):
    a = small_values(d, (6, 40))
    x, f = cv.Tensor(a, device=device), a.astype(np.float32)
    same_bits(x.sum(axis=1).numpy(), f.sum(axis=1).astype(d.np))
    same_bits(x.sum().numpy(), f.sum().astype(d.np))
    same_bits(x.max(axis=0).numpy(), a.max(axis=0))
    same_bits(x.min(axis=1).numpy(), a.min(axis=1))
    same_bits(x[:, :32].mean(axis=1).numpy(), (f[:, :32].sum(axis=1).astype(d.np).astype(np.float32) / 32).astype(d.np))
    np.testing.assert_array_equal(x.argmax(axis=1).numpy(), f.argmax(axis=1))
    nan = every(d)[[0x7F, 0x10, 0x20]]
    assert np.isnan(cv.Tensor(nan, device=device).max().numpy().astype(np.float32))


@pytest.mark.parametrize("d", FP8, ids=ids)
def test_matmul_accumulates_exact_products_in_float32(device, d):
    a, b = small_values(d, (9, 24), 1) / d.np.type(4), small_values(d, (24, 7), 2)
    x, y = cv.Tensor(a, device=device), cv.Tensor(b, device=device)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(d.np)
    same_bits((x @ y).numpy(), want)
    same_bits((y.T @ x.T).numpy(), want.T)


@pytest.mark.parametrize("d", FP8, ids=ids)
def test_matmul_on_the_cpu_tiles(d):
    a, b = small_values(d, (64, 96), 3) / d.np.type(16), small_values(d, (96, 72), 4) / d.np.type(16)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(d.np)
    same_bits((cv.Tensor(a) @ cv.Tensor(b)).numpy(), want)
    same_bits((cv.Tensor(a) @ cv.Tensor(np.ascontiguousarray(b.T)).T).numpy(), want)


def test_an_8_bit_operand_of_a_vectorized_float32_kernel():
    """The CPU's register tiles read an 8-bit operand lane by lane (it is no vector type)."""
    a = small_values(cv.float8_e5m2, (64, 128), 8)
    w = np.random.default_rng(9).standard_normal((128, 96)).astype(np.float32)
    y = cv.Tensor(a).astype(cv.float32) @ cv.Tensor(w)
    assert any(o.op == "vectorize" for o in y.schedule()[-1].kernel.opts)
    # against float64, within float32 rounding of the terms' magnitudes (a float32 reference
    # differs by up to 2e-5 where terms of ~100 cancel to 0.55, depending on OpenBLAS's kernel)
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    assert np.all(np.abs(y.numpy() - a64 @ w64) <= 1e-6 * (np.abs(a64) @ np.abs(w64)))


@pytest.mark.parametrize("d", FP8, ids=ids)
def test_nextafter_and_signbit_on_every_value(d):
    a = every(d)
    x, y = cv.Tensor(a).reshape(256, 1), cv.Tensor(a).reshape(1, 256)
    same_values(cv.nextafter(x, y).numpy(), np.nextafter(a[:, None], a[None, :]))
    np.testing.assert_array_equal(cv.signbit(cv.Tensor(a)).numpy(), np.signbit(a.astype(np.float32)))


def test_gradients_are_8_bit():
    a = small_values(cv.float8_e4m3fn, (4, 6), 5)
    w = small_values(cv.float8_e4m3fn, (6, 3), 6)
    x, y = cv.Tensor(a), cv.Tensor(w)
    g = cv.grad(lambda m: (m * m).sum())(x)
    same_bits(g.numpy(), (2 * a.astype(np.float32)).astype(E4))
    gm = cv.grad(lambda m: (m @ y).sum())(x)
    assert gm.dtype is cv.float8_e4m3fn
    same_bits(gm.numpy(), np.broadcast_to(w.astype(np.float32).sum(axis=1), (4, 6)).astype(E4))
    leaf = cv.Tensor(a, requires_grad=True)
    (leaf * 3).sum().backward()
    same_bits(leaf.grad.numpy(), np.full((4, 6), 3, E4))


def test_indexing_sorting_and_scatter():
    a = small_values(cv.float8_e5m2, (12,), 7)
    x = cv.Tensor(a)
    same_bits(cv.sort(x).numpy(), np.sort(a.astype(np.float32)).astype(E5))
    same_bits(x[cv.Tensor([3, 0, 3])].numpy(), a[[3, 0, 3]])
    same_bits(x[::-2].numpy(), a[::-2])
    got = cv.scatter_reduce(cv.zeros(4, dtype=cv.float8_e5m2), 0, cv.Tensor([0, 0, 2]), x[:3], "sum").numpy()
    f = a.astype(np.float32)
    same_bits(got, np.array([f[0] + f[1], 0, f[2], 0], np.float32).astype(E5))
    same_bits(cv.cumsum(x).numpy()[:4], np.cumsum(f)[:4].astype(E5))


# --- values in and out ---------------------------------------------------------------------------
def test_numpy_round_trip_and_printing():
    a = np.array([1.5, 448, np.nan, -0.0, 2.0**-9], E4)
    x = cv.asarray(a)
    assert x.dtype is cv.float8_e4m3fn and x.numpy().dtype == E4
    same_bits(x.numpy(), a)
    assert repr(x) == "Tensor([1.5, 448, nan, -0, 0.00195312], dtype=float8_e4m3fn)"
    assert repr(cv.Tensor([[1.0, 57344.0], [math.inf, 0.25]], dtype=cv.float8_e5m2)) == \
        "Tensor([[1, 57344],\n        [inf, 0.25]], dtype=float8_e5m2)"
    assert x[0].item() == 1.5 and type(x[0].item()) is float
    assert cv.Tensor([1.0, 1000.0], dtype="float8_e4m3fn").numpy().astype(np.float32)[0] == 1.0


def test_safetensors_round_trip(tmp_path):
    a, b = every(cv.float8_e4m3fn).reshape(16, 16), every(cv.float8_e5m2)
    cv.save(tmp_path / "w.safetensors", {"a": cv.Tensor(a), "b": cv.Tensor(b)})
    back = cv.load(tmp_path / "w.safetensors")
    same_bits(back["a"].numpy(), a)
    same_bits(back["b"].numpy(), b)
    ours = (tmp_path / "w.safetensors").read_bytes()
    assert b'"dtype":"F8_E4M3"' in ours[:200] and b'"dtype":"F8_E5M2"' in ours[:200]
    st_numpy = pytest.importorskip("safetensors.numpy")
    st_numpy.save_file({"a": a, "b": b}, str(tmp_path / "theirs.safetensors"))
    assert (tmp_path / "theirs.safetensors").read_bytes() == ours


def test_numpy_files_and_dlpack_refuse_clearly(tmp_path):
    x = cv.Tensor(np.array([1.0], E5))
    with pytest.raises(TypeError, match="float8_e5m2.*safetensors"):
        cv.save(tmp_path / "a.npy", x)
    with pytest.raises(TypeError, match="float8_e5m2.*safetensors"):
        cv.save(tmp_path / "a.npz", {"x": x})
    with pytest.raises(BufferError, match="float8_e5m2"):
        np.from_dlpack(x)
    same_bits(np.from_dlpack(x.bitcast(cv.uint8)), np.array([1.0], E5).view(np.uint8))


# --- the kernels tests/test_cuda.py compiles -------------------------------------------------------
def workload(device: str) -> None:
    """fp8 computations through every path a GPU renderer takes: conversions to and from every
    dtype, bit casts, fused elementwise ops, reductions (long ones too: split and work-group
    reduces), matmul (register tiles), softmax and a gradient."""
    for d in FP8:
        a = every(d)
        x = cv.Tensor(a, device=device)
        for other in cd.ALL_DTYPES:
            cv.realize(x.astype(other), cv.Tensor(a.astype(np.float32), device=device).astype(other).astype(d))
        cv.realize(x.bitcast(cv.uint8), cv.Tensor(a.view(np.uint8), device=device).bitcast(d),
                   cv.where(x > 1, (x * 3 + 1.5).exp() - x, x / 4), x.max(), x.sum(), (x < 2).any())
        m = cv.Tensor(small_values(d, (128, 64)), device=device)
        cv.realize(m @ m.T, m.softmax(axis=1), m.sum(axis=0), cv.grad(lambda t: (t @ t.T).sum())(m))
        cv.realize(cv.Tensor(small_values(d, (2, 1 << 16)), device=device).sum(axis=1),
                   cv.Tensor(small_values(d, (64, 4096)), device=device).max(axis=1))
