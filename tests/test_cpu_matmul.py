"""bfloat16 dot-product products on the CPU (corvid/nn/cpu_matmul.py): values against float64,
the quantized weights' exact products, rounding, when linear layers take them, symbolic rows.

On a CPU without AVX512-BF16 the same calls run the op's numpy reference (the dispatch tests
then check that linear layers keep the float32 product)."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corvid as cv
import corvid.nn.functional as F
from corvid import quant
from corvid.nn import cpu_matmul

rng = np.random.default_rng(0)


def bf16(a):
    return cv.Tensor(np.asarray(a, np.float32)).astype(cv.bfloat16)


def as64(t):
    return t.astype(cv.float32).numpy().astype(np.float64)


def round_bf16(a):
    """float32 values rounded to bfloat16 (nearest even), as float32."""
    return cv.Tensor(np.asarray(a, np.float32)).astype(cv.bfloat16).astype(cv.float32).numpy()


def kernels(t):
    return [sk.name for sk in t.schedule()]


@pytest.mark.parametrize("m,k,n", [(1, 2, 1), (7, 30, 47), (8, 64, 48), (9, 128, 49), (33, 256, 100), (100, 64, 96)])
def test_values_match_float64(m, k, n):
    x, w = bf16(rng.standard_normal((m, k))), bf16(rng.standard_normal((n, k)))
    ref = as64(x) @ as64(w).T
    y = cpu_matmul.matmul(x, w)
    assert y.dtype == cv.float32 and y.shape == (m, n)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    yb = cpu_matmul.matmul(x, w, cv.bfloat16)
    assert yb.dtype == cv.bfloat16  # (the float32 sums rounded once)
    np.testing.assert_array_equal(yb.astype(cv.float32).numpy(), round_bf16(y.numpy()))


def test_nan_and_infinity_stay_in_their_rows():
    x = rng.standard_normal((40, 64)).astype(np.float32)
    x[3, 5], x[7, 0] = np.nan, np.inf
    w = rng.standard_normal((50, 64)).astype(np.float32)
    y = cpu_matmul.matmul(bf16(x), bf16(w)).numpy()
    assert np.all(np.isnan(y[3])) and np.all(~np.isfinite(y[7]))
    others = np.delete(y, [3, 7], axis=0)
    ref = np.delete(as64(bf16(x)) @ as64(bf16(w)).T, [3, 7], axis=0)
    np.testing.assert_allclose(others, ref, rtol=1e-5, atol=1e-4)
    yb = cpu_matmul.matmul(bf16(x), bf16(w), cv.bfloat16).astype(cv.float32).numpy()
    assert np.all(np.isnan(yb[3]))


@pytest.mark.parametrize("mode", ["int8", "int4"])
@pytest.mark.parametrize("out,n,group", [(192, 256, 128), (96, 128, 32), (10, 64, 2), (50, 96, 16)])
@pytest.mark.parametrize("rows", [37, 1, 5])
def test_quantized_products_are_exact(mode, out, n, group, rows):
    """Every product of a bfloat16 input and an integer is exact, each group's sum is scaled: the
    result is the float64 product of the dequantized weight up to float32 sums. (Fewer than 8
    rows of int4 in blocks of 64: the kernel reading the bytes as stored.)"""
    lin = cv.nn.Linear(n, out, bias=False)
    q = quant.QuantizedLinear.from_linear(lin, mode=mode, group_size=group)
    x = bf16(rng.standard_normal((rows, n)))
    ref = as64(x) @ quant.dequantize_weight(q.qweight, q.scales).numpy().astype(np.float64).T
    qw, sc = quant._as_blocks(q.qweight), quant._as_blocks(q.scales)
    y = cpu_matmul.matmul_quantized(x, qw, sc, mode, group)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    yb = cpu_matmul.matmul_quantized(x, qw, sc, mode, group, cv.bfloat16)
    np.testing.assert_array_equal(yb.astype(cv.float32).numpy(), round_bf16(y.numpy()))


def test_the_numpy_reference_agrees():
    """The op's numpy function (what another device runs) computes the same products."""
    lin = cv.nn.Linear(64, 96, bias=False)
    for mode in ("int8", "int4"):
        q = quant.QuantizedLinear.from_linear(lin, mode=mode, group_size=32)
        x = bf16(rng.standard_normal((5, 64)))
        qw, sc = quant._as_blocks(q.qweight).numpy(), quant._as_blocks(q.scales).numpy()
        got = cpu_matmul._reference(x.numpy(), qw, sc, kind=mode, n=96, block=qw.shape[2], group=32, out="float32",
                                    act=None)
        ref = as64(x) @ quant.dequantize_weight(q.qweight, q.scales).numpy().astype(np.float64).T
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_linear_layers_take_it_for_many_bfloat16_rows():
    x, w, b = bf16(rng.standard_normal((2, 40, 64))), bf16(rng.standard_normal((48, 64))), bf16(rng.standard_normal(48))
    with cv.no_grad():
        y = F.linear(x, w, b)
        few = F.linear(x[:, :3], w, b)
    assert any("matmul_bf16" in n for n in kernels(y)) == cpu_matmul.available()
    assert not any("matmul_bf16" in n for n in kernels(few))  # (fewer than MIN_ROWS rows)
    assert y.dtype == cv.bfloat16
    want = round_bf16(round_bf16(as64(x) @ as64(w).T) + as64(b))  # (the product rounded, then the bias added)
    np.testing.assert_allclose(y.astype(cv.float32).numpy(), want, rtol=2 ** -7, atol=1e-2)


def test_gradients_and_transforms_keep_the_float32_product():
    w = cv.Tensor(rng.standard_normal((48, 64)).astype(np.float32)).astype(cv.bfloat16)
    x = bf16(rng.standard_normal((40, 64)))
    wl = w.detach().requires_grad_()
    y = F.linear(x, wl)
    assert not any("matmul_bf16" in n for n in kernels(y))  # (a leaf being trained)
    y.astype(cv.float32).sum().backward()
    np.testing.assert_allclose(wl.grad.astype(cv.float32).numpy(), np.broadcast_to(as64(x).sum(0), (48, 64)),
                               rtol=2e-2, atol=0.5)
    vm = cv.vmap(lambda a: F.linear(a, w))(x.reshape(2, 20, 64).astype(cv.bfloat16))
    np.testing.assert_allclose(as64(vm).reshape(40, 48), as64(x) @ as64(w).T, rtol=2e-2, atol=0.1)
    _, t = cv.jvp(lambda a: F.linear(a, w), (x,), (x,))
    np.testing.assert_allclose(as64(t), as64(x) @ as64(w).T, rtol=2e-2, atol=0.1)


def test_symbolic_rows_in_jit():
    """The kernel reads a symbolic row count when it runs. (Without AVX512-BF16 the numpy function
    runs instead, which needs constant sizes: a clear JitError.)"""
    traces = []
    w = bf16(rng.standard_normal((96, 64)))
    if not cpu_matmul.available():
        from corvid.transforms.jit import JitError

        with pytest.raises(JitError, match="constant sizes"):
            cv.jit(lambda x: cpu_matmul.matmul(x, w), dynamic={0: {0: "rows"}})(bf16(np.ones((40, 64))))
        return

    @cv.jit(dynamic={0: {0: "rows"}})
    def f(x):
        traces.append(1)
        with cv.no_grad():
            return cpu_matmul.matmul(x, w)

    for m in (40, 77, 200):
        x = bf16(rng.standard_normal((m, 64)))
        np.testing.assert_allclose(f(x).numpy(), as64(x) @ as64(w).T, rtol=1e-5, atol=1e-4)
    assert len(traces) == 1


def test_threads():
    x, w = bf16(rng.standard_normal((64, 128))), bf16(rng.standard_normal((96, 128)))
    want = as64(x) @ as64(w).T
    errors = []

    def run():
        for _ in range(3):
            errors.append(float(np.abs(cpu_matmul.matmul(x, w).numpy() - want).max()))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 12 and max(errors) < 1e-3


def test_bad_output_dtype():
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        cpu_matmul.matmul(bf16(np.ones((2, 2))), bf16(np.ones((2, 2))), cv.float16)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40).map(lambda h: 2 * h), st.integers(1, 130), st.integers(0, 2 ** 31 - 1))
def test_fuzz_shapes(m, k, n, seed):
    r = np.random.default_rng(seed)
    x, w = bf16(r.standard_normal((m, k))), bf16(r.standard_normal((n, k)))
    np.testing.assert_allclose(cpu_matmul.matmul(x, w).numpy(), as64(x) @ as64(w).T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("activation", ["silu", "gelu_pytorch_tanh"])
@pytest.mark.parametrize("mode", [None, "int8", "int4"])
def test_gated_mlp_in_one_kernel(activation, mode, monkeypatch):
    """A SwiGLU/GeGLU block's gate and up projections in one kernel: the products rounded to
    bfloat16 as the layers give them, the activation in float32, the result rounded once. (On a
    CPU without AVX512-BF16 the op's numpy function runs: the same values.)"""
    from corvid.nn.decoder import GatedMLP

    monkeypatch.setattr(cpu_matmul, "available", lambda: True)

    cv.manual_seed(1)
    mlp = GatedMLP(64, 80, activation, dtype=cv.bfloat16)
    if mode is not None:
        mlp = quant.quantize(mlp, mode, group_size=16)
    x = bf16(rng.standard_normal((3, 12, 64)))
    with cv.no_grad():
        both = cpu_matmul.gated(x, mlp.gate_proj, mlp.up_proj, activation)
        gate = mlp.gate_proj(x).astype(cv.float32).numpy().astype(np.float64)
        up = mlp.up_proj(x).astype(cv.float32).numpy().astype(np.float64)
        y = mlp(x)
    names = kernels(y)
    assert any("matmul_bf16" in n and ("silu" in n or "gelu" in n) for n in names)
    act = {"silu": lambda g: g / (1 + np.exp(-g)),
           "gelu_pytorch_tanh": lambda g: 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))}
    ref = act[activation](gate) * up
    got = both.astype(cv.float32).numpy()
    assert both.dtype == cv.bfloat16 and both.shape == (3, 12, 80)
    np.testing.assert_allclose(got, ref, rtol=2 ** -8, atol=1e-6)  # (the result's own rounding)
    want = mlp.down_proj(cv.Tensor(round_bf16(ref)).astype(cv.bfloat16))
    np.testing.assert_allclose(y.astype(cv.float32).numpy(), want.astype(cv.float32).numpy(), rtol=3e-2, atol=3e-2)


def test_gated_keeps_the_layers_where_it_does_not_apply():
    from corvid.nn.decoder import GatedMLP

    mlp = GatedMLP(64, 96, "gelu", dtype=cv.bfloat16)  # (erf gelu: not fused)
    x = bf16(rng.standard_normal((16, 64)))
    with cv.no_grad():
        assert cpu_matmul.gated(x, mlp.gate_proj, mlp.up_proj, "gelu") is None
        silu = GatedMLP(64, 96, "silu", dtype=cv.bfloat16)
        silu.gate_proj.register_forward_hook(lambda m, a, out: out * 2)
        assert cpu_matmul.gated(x, silu.gate_proj, silu.up_proj, "silu") is None  # (a hook must run)
        assert cpu_matmul.gated(x[:4], GatedMLP(64, 96).gate_proj, GatedMLP(64, 96).up_proj, "silu") is None


# --- float32 products under cv.set_float32_matmul_precision("medium") ------------------------------------

def test_medium_precision_computes_float32_linear_products_in_bfloat16():
    x, w = rng.standard_normal((2, 40, 64)).astype(np.float32), rng.standard_normal((48, 64)).astype(np.float32)
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    rounded = round_bf16(x).astype(np.float64) @ round_bf16(w).astype(np.float64).T
    with cv.matmul_precision("medium"):
        y = cv.Tensor(x) @ cv.Tensor(w).T
        took = any("matmul_bf16" in n for n in kernels(y))
        got = y.numpy()
    assert took == cpu_matmul.available() and y.dtype == cv.float32
    want = rounded if took else exact  # (the bfloat16 products where the CPU has them, else exact)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    if took:
        assert np.abs(got - exact).max() > 1e-4 * np.abs(exact).max()  # (visibly rounded operands)
    with cv.matmul_precision("high"):  # (the CPU keeps "high" exact)
        np.testing.assert_allclose((cv.Tensor(x) @ cv.Tensor(w).T).numpy(), exact, rtol=1e-5, atol=1e-5)


def test_medium_precision_leaves_gradients_few_rows_and_small_plain_products_exact():
    x, w = rng.standard_normal((40, 64)).astype(np.float32), rng.standard_normal((48, 64)).astype(np.float32)
    with cv.matmul_precision("medium"):
        g = cv.grad(lambda a: (a @ cv.Tensor(w).T).square().sum())(cv.Tensor(x)).numpy()
        few = cv.Tensor(x[:3]) @ cv.Tensor(w).T
        plain = cv.Tensor(x) @ cv.Tensor(w.T.copy())  # (a stored (k, m) operand: its transposed copy does not pay)
        assert not any("matmul_bf16" in n for n in kernels(few) + kernels(plain))
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(g, 2 * exact @ w.astype(np.float64), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(plain.numpy(), exact, rtol=1e-5, atol=1e-5)
