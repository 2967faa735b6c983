"""Fuzz: random chains of elementwise, movement and reduce ops, compared against numpy."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import corvid as cv

DTYPES = [np.float32, np.float64, np.int32]


def _input(draw, shape, dtype):
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    if dtype == np.int32:
        return rng.integers(-5, 6, size=shape).astype(np.int32)
    return rng.uniform(-3, 3, size=shape).astype(dtype)


def _reshape_target(draw, shape):
    n = int(np.prod(shape))
    divs = [d for d in range(1, n + 1) if n % d == 0]
    a = draw(st.sampled_from(divs))
    b = draw(st.sampled_from([d for d in divs if (n // a) % d == 0]))
    return tuple(x for x in (a, b, n // a // b))


@st.composite
def programs(draw):
    dtype = draw(st.sampled_from(DTYPES))
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    arrays = [_input(draw, shape, dtype)]
    steps = []
    cur = shape
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reshape", "permute", "expand", "pad", "shrink",
                                     "flip", "slice", "reduce"]))
        nd = len(cur)
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(["neg", "abs", "exp", "square", "relu", "tanh"]))))
        elif kind == "binary":
            # the other operand broadcasts: drop leading dims and set some to 1
            k = draw(st.integers(0, nd))
            oshape = tuple(1 if draw(st.booleans()) else s for s in cur[k:])
            arrays.append(_input(draw, oshape, draw(st.sampled_from(DTYPES))))
            steps.append(("binary", draw(st.sampled_from(["add", "sub", "mul", "max", "min"])), len(arrays) - 1,
                          draw(st.booleans())))
        elif kind == "reshape":
            new = _reshape_target(draw, cur) if nd else (1,)
            steps.append(("reshape", new))
        elif kind == "permute" and nd:
            steps.append(("permute", tuple(draw(st.permutations(range(nd))))))
        elif kind == "expand":
            pos = draw(st.integers(0, nd))
            steps.append(("expand", pos, draw(st.integers(1, 3))))
        elif kind == "pad" and nd:
            steps.append(("pad", tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in cur)))
        elif kind == "shrink" and nd:
            bounds = []
            for s in cur:
                lo = draw(st.integers(0, s - 1))
                bounds.append((lo, draw(st.integers(lo + 1, s))))
            steps.append(("shrink", tuple(bounds)))
        elif kind == "flip" and nd:
            steps.append(("flip", tuple(sorted(set(draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd)))))))
        elif kind == "slice" and nd:
            steps.append(("slice", tuple(slice(draw(st.sampled_from([None, 0, 1, -1])), None,
                                               draw(st.sampled_from([1, 2, 3, -1, -2]))) for _ in cur)))
        elif kind == "reduce" and nd:
            axes = tuple(sorted(set(draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd)))))
            steps.append(("reduce", draw(st.sampled_from(["sum", "max", "min", "prod"])), axes, draw(st.booleans())))
        else:
            continue
        cur = _apply(np, steps[-1], np.zeros(cur), [np.zeros(a.shape) for a in arrays]).shape
        if 0 in cur or np.prod(cur) > 512:
            steps.pop()
            cur = _shape_after(shape, steps, arrays)
    return arrays, steps


def _shape_after(shape, steps, arrays):
    x = np.zeros(shape)
    zs = [np.zeros(a.shape) for a in arrays]
    for s in steps:
        x = _apply(np, s, x, zs)
    return x.shape


def _apply(lib, step, x, arrays):
    """Apply one step; ``lib`` is np for numpy arrays and None for corvid tensors."""
    is_np = lib is np
    kind = step[0]
    if kind == "unary":
        f = step[1]
        if f == "neg":
            return -x
        if f == "abs":
            return abs(x)
        if f == "square":
            return x * x
        if f == "relu":
            return np.maximum(x, 0) if is_np else x.relu()
        if is_np:
            return getattr(np, f)(x if x.dtype.kind == "f" else x.astype(np.float32))
        return getattr(x, f)()
    if kind == "binary":
        _, f, i, swap = step
        y = arrays[i]
        a, b = (y, x) if swap else (x, y)
        if f in ("max", "min"):
            if is_np:
                return (np.maximum if f == "max" else np.minimum)(a, b)
            a = a if not isinstance(a, np.ndarray) else cv.Tensor(a)
            return a.maximum(b) if f == "max" else a.minimum(b)
        if not is_np and isinstance(a, np.ndarray):
            a = cv.Tensor(a)
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b}[f]()
    if kind == "reshape":
        return x.reshape(step[1])
    if kind == "permute":
        return x.transpose(step[1]) if is_np else x.permute(step[1])
    if kind == "expand":
        _, pos, n = step
        shape = x.shape[:pos] + (n,) + x.shape[pos:]
        y = x.reshape(x.shape[:pos] + (1,) + x.shape[pos:])
        return np.broadcast_to(y, shape) if is_np else y.expand(shape)
    if kind == "pad":
        return np.pad(x, step[1]) if is_np else x.pad(step[1])
    if kind == "shrink":
        return x[tuple(slice(lo, hi) for lo, hi in step[1])] if is_np else x.shrink(step[1])
    if kind == "flip":
        return np.flip(x, step[1]) if is_np else x.flip(step[1])
    if kind == "slice":
        return x[step[1]]
    if kind == "reduce":
        _, f, axes, keep = step
        if is_np:
            if f in ("sum", "prod") and x.dtype.kind in "iub":
                return getattr(np, f)(x, axis=axes, keepdims=keep, dtype=np.int64)
            return getattr(np, f if f not in ("max", "min") else "a" + f)(x, axis=axes, keepdims=keep)
        return getattr(x, f)(axis=axes, keepdims=keep)
    raise AssertionError(kind)


@settings(max_examples=int(__import__("os").environ.get("CORVID_FUZZ_EXAMPLES", 200)), deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_random_chains_match_numpy(prog):
    arrays, steps = prog
    x_np, x_cv = arrays[0], cv.Tensor(arrays[0])
    low = any(a.dtype == np.float32 for a in arrays)  # float32 anywhere bounds the precision
    for s in steps:
        x_np = np.asarray(_apply(np, s, x_np, arrays))
        x_cv = _apply(None, s, x_cv, arrays)
        assert x_cv.shape == x_np.shape, (s, x_cv.shape, x_np.shape)
        # promotion rules are corvid's (Array API, tested elsewhere): follow its dtype in the reference
        x_np = x_np.astype(x_cv.dtype.np)
        low = low or x_np.dtype == np.float32  # e.g. exp of an int gives float32
    got = x_cv.numpy()
    assert got.shape == x_np.shape
    if x_np.dtype.kind == "f" or got.dtype.kind == "f":
        low = low or np.float32 in (got.dtype.type, x_np.dtype.type)
        tol = 2e-3 if low else 1e-9
        np.testing.assert_allclose(got.astype(np.float64), x_np.astype(np.float64), rtol=tol, atol=tol,
                                   equal_nan=True, err_msg=str(steps))
    else:
        np.testing.assert_array_equal(got, x_np, err_msg=str(steps))
