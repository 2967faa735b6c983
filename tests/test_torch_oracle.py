"""Every public ``Tensor`` method and ``corvid.nn.functional`` function that PyTorch also has,
checked against PyTorch from one table.

Each :class:`Case` names the corvid/PyTorch name it covers, builds its inputs from :class:`Arg`
specs (shape, dtype, value range, an optional view applied after the leaf is made, so a case can
feed a transpose or a strided slice), and calls ``fn(m, *tensors)`` once with ``m`` = corvid's
namespace and once with PyTorch's. The harness compares structure, dtypes, shapes and values
(exact for integers and bools) and, for float inputs, the gradients of a weighted sum of the float
outputs. Families (unary, binary, reductions, scans, activations, in-place forms) generate most
cases; explicit cases cover the rest.

``test_every_shared_name_has_an_oracle`` fails when a name that corvid and PyTorch share has
neither a case nor an :data:`EXCLUDED` reason. :data:`PENDING` lists names still without a case:
work left, not a pass; the registry test fails when one of them gains a case, so it only shrinks.
"""

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import corvid as cv
import corvid.nn.functional as cvF
from corvid.dtype import DType

torch = pytest.importorskip("torch")
import torch.nn.functional as tF  # noqa: E402  (after the importorskip)

from tests.test_torch_methods import _flat, _np  # noqa: E402  (results flattened; either library's as numpy)

pytestmark = [pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0"),  # torch's, std/var of one item
              pytest.mark.filterwarnings("ignore:Using torch.cross without specifying the dim")]  # the case checks it

NAN, INF = float("nan"), float("inf")
_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
           "complex64", "complex128")
CV = SimpleNamespace(F=cvF, lib=cv, **{d: getattr(cv, d) for d in _DTYPES})
TORCH = SimpleNamespace(F=tF, lib=torch, **{d: getattr(torch, d) for d in _DTYPES})


# --- the harness ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Arg:
    """An input: random values of ``shape`` and ``dtype`` in [lo, hi) (ints in [lo, hi], bools
    fair coins), or the fixed ``value``; ``view`` is applied to the leaf of both libraries."""
    shape: tuple = (2, 3)
    dtype: str = "float32"
    lo: float = -3.0
    hi: float = 3.0
    value: Any = None
    view: Callable | None = None
    grad: bool = True


@dataclass
class Case:
    """One comparison: ``fn(m, *inputs)`` (``torch_fn`` on torch's side, if given) for the shared ``name``."""
    name: str
    fn: Callable
    args: list
    grad: bool = True
    rtol: float = 1e-5
    atol: float = 1e-6
    torch_fn: Callable | None = None
    label: str = ""


def A(*shape, dtype="float32", lo=-3.0, hi=3.0, view=None, grad=True):
    """A random input of ``shape``."""
    return Arg(tuple(shape), dtype, lo, hi, None, view, grad)


def V(value, dtype=None, grad=False):
    """A fixed input (indices, masks, hand-picked values)."""
    return Arg(np.shape(value), dtype or np.asarray(value).dtype.name, value=value, grad=grad)


def TR(*shape, **kw):
    """A non-contiguous input: a leaf of the reversed shape, transposed."""
    return A(*shape[::-1], view=lambda x: x.transpose(0, 1) if x.ndim == 2 else x.permute(*range(x.ndim)[::-1]),
             **kw)


def SL(*shape, **kw):
    """A non-contiguous input: every other column of a leaf twice as wide."""
    return A(*shape[:-1], 2 * shape[-1], view=lambda x: x[..., ::2], **kw)


def _values(arg, rng):
    if arg.value is not None:
        return np.asarray(arg.value, dtype=arg.dtype)
    if arg.dtype == "bool":
        return rng.random(arg.shape) < 0.5
    if "int" in arg.dtype:
        return rng.integers(int(arg.lo), int(arg.hi) + 1, size=arg.shape).astype(arg.dtype)
    a = rng.uniform(arg.lo, arg.hi, size=arg.shape)
    if "complex" in arg.dtype:
        a = a + 1j * rng.uniform(arg.lo, arg.hi, size=arg.shape)
    return a.astype(np.float32 if arg.dtype == "bfloat16" else arg.dtype)


def _leaves(case):
    rng = np.random.default_rng(0)
    cs, ts, cleaf, tleaf = [], [], [], []
    for arg in case.args:
        if not isinstance(arg, Arg):  # a plain Python value, passed as is
            cs.append(arg)
            ts.append(arg)
            continue
        a = _values(arg, rng)
        g = case.grad and arg.grad and arg.dtype.startswith(("float", "bfloat"))
        if arg.dtype == "bfloat16":
            c = cv.Tensor(a.astype(ml_dtypes.bfloat16), requires_grad=g)
            t = torch.tensor(a).to(torch.bfloat16).requires_grad_(g)
        else:
            c, t = cv.Tensor(a, requires_grad=g), torch.tensor(a, requires_grad=g)
        cleaf.append(c)
        tleaf.append(t)
        cs.append(arg.view(c) if arg.view else c)
        ts.append(arg.view(t) if arg.view else t)
    return cs, ts, cleaf, tleaf


def _scalar(v):
    """torch's and corvid's metadata values in one spelling: a dtype by its name."""
    if isinstance(v, torch.dtype):
        return str(v).removeprefix("torch.")
    if isinstance(v, DType):
        return v.name
    return v


def _same(got, want, rtol, atol):
    g, w = _flat(got), _flat(want)
    assert len(g) == len(w), f"{len(g)} results, torch gives {len(w)}: {got!r} vs {want!r}"
    for a, b in zip(g, w):
        if isinstance(b, torch.Tensor):
            assert isinstance(a, cv.Tensor), f"got {type(a).__name__}, torch gives a tensor"
            assert a.dtype.name == _scalar(b.dtype), f"dtype {a.dtype.name}, torch {b.dtype}"
            assert a.shape == tuple(b.shape), f"shape {a.shape}, torch {tuple(b.shape)}"
            _close(_np(a), _np(b), rtol, atol)
        elif isinstance(b, np.ndarray):
            assert isinstance(a, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, (a, b)
            _close(a, b, rtol, atol)
        else:
            a, b = _scalar(a), _scalar(b)
            if isinstance(b, float):
                assert type(a) is float and (a == b or abs(a - b) <= atol + rtol * abs(b) or a != a and b != b), (a, b)
            else:
                assert type(a) is type(b) and a == b, f"{a!r}, torch gives {b!r}"


def _close(a, b, rtol, atol):
    if a.dtype.kind in "biu":
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)


def check(case):
    """Run ``case`` on corvid and torch: the same results and the same gradients."""
    cs, ts, cleaf, tleaf = _leaves(case)
    want = (case.torch_fn or case.fn)(TORCH, *ts)
    got = case.fn(CV, *cs)
    _same(got, want, case.rtol, case.atol)
    outs = [(a, b) for a, b in zip(_flat(got), _flat(want))
            if isinstance(b, torch.Tensor) and b.requires_grad and b.is_floating_point()]
    if not outs or not any(t.requires_grad for t in tleaf):
        return
    rng = np.random.default_rng(1)
    weights = [rng.uniform(0.5, 1.5, tuple(b.shape)).astype(np.float32) for _, b in outs]
    sum((a.float() * cv.Tensor(w)).sum() for (a, _), w in zip(outs, weights)).backward()
    sum((b.float() * torch.tensor(w)).sum() for (_, b), w in zip(outs, weights)).backward()
    for i, (c, t) in enumerate(zip(cleaf, tleaf)):
        if t.requires_grad:
            want_g = np.zeros(t.shape, np.float32) if t.grad is None else _np(t.grad)
            got_g = np.zeros(c.shape, np.float32) if c.grad is None else _np(c.grad)
            np.testing.assert_allclose(got_g, want_g, rtol=case.rtol * 10, atol=case.atol * 10,
                                       err_msg=f"gradient of input {i}")


CASES: list[Case] = []


def case(name, fn, *args, **kw):
    CASES.append(Case(name, fn, list(args), **kw))


def _resolve(m, v):
    return getattr(m, v[2:]) if isinstance(v, str) and v.startswith("m.") else v


def method(name, *a, **k):
    """``x.name(*tensors, *a, **k)``, with ``"m.<dtype>"`` strings in ``a``/``k`` resolved per library."""
    def fn(m, x, *tensors, **more):
        return getattr(x, name)(*tensors, *(_resolve(m, v) for v in a), **{kk: _resolve(m, v) for kk, v in k.items()},
                                **more)
    return fn


# --- unary elementwise ------------------------------------------------------------------------------------------
# name: (lo, hi) of a domain where values and gradients are smooth; None: no int64 input (torch refuses it)
UNARY = {
    "abs": (0.2, 3), "absolute": (0.2, 3), "acos": (-0.9, 0.9), "acosh": (1.1, 3), "asin": (-0.9, 0.9),
    "asinh": (-3, 3), "atan": (-3, 3), "atanh": (-0.9, 0.9), "ceil": (-3, 3), "cos": (-3, 3), "cosh": (-3, 3),
    "deg2rad": (-3, 3), "erf": (-3, 3), "exp": (-3, 3), "exp2": (-3, 3), "expm1": (-3, 3), "floor": (-3, 3),
    "frac": (-3, 3), "log": (0.1, 3), "log10": (0.1, 3), "log1p": (0.1, 3), "log2": (0.1, 3), "neg": (-3, 3),
    "negative": (-3, 3), "positive": (-3, 3), "rad2deg": (-3, 3), "reciprocal": (0.5, 3), "round": (-3, 3),
    "rsqrt": (0.1, 3), "sigmoid": (-3, 3), "sign": (-3, 3), "sgn": (-3, 3), "signbit": (-3, 3), "sin": (-3, 3),
    "sinh": (-3, 3), "sqrt": (0.1, 3), "square": (-3, 3), "tan": (-1.2, 1.2), "tanh": (-3, 3), "trunc": (-3, 3),
    "relu": (-3, 3), "isfinite": (-3, 3), "isinf": (-3, 3), "isnan": (-3, 3), "isneginf": (-3, 3),
    "isposinf": (-3, 3), "nan_to_num": (-3, 3), "angle": (0.2, 3), "conj": (-3, 3),
}
NO_INT = {"frac"}
NO_BOOL = {"abs", "absolute", "ceil", "floor", "frac", "neg", "negative", "positive", "round", "trunc", "relu"}
BF16 = {"exp", "sin", "tanh", "sigmoid", "sqrt", "abs", "neg", "log", "relu"}
SPECIAL = [NAN, INF, -INF, 0.0, -0.0, 1.5, -2.5, 0.5]

for name, (lo, hi) in UNARY.items():
    f = method(name)
    case(name, f, A(2, 3, lo=lo, hi=hi))
    case(name, f, TR(3, 2, dtype="float64", lo=lo, hi=hi), label="transposed")
    case(name, f, SL(2, 2, lo=lo, hi=hi), label="strided")
    case(name, f, A(lo=lo, hi=hi), label="0-d")
    case(name, f, A(0, 3), label="empty")
    case(name, f, V(np.array(SPECIAL, np.float32)), label="nan/inf")
    if name not in NO_INT:
        case(name, f, A(2, 3, dtype="int64", lo=np.ceil(lo), hi=np.floor(hi)), label="int64")
        case(name, f, A(4, dtype="int32", lo=np.ceil(lo), hi=np.floor(hi)), label="int32")
    if name not in NO_BOOL:
        case(name, f, A(2, 3, dtype="bool"), label="bool")
    if name in BF16:
        case(name, f, A(2, 3, dtype="bfloat16", lo=lo, hi=hi), rtol=1e-2, atol=1e-2, label="bfloat16")
        case(name, f, A(2, 3, dtype="float16", lo=lo, hi=hi), rtol=2e-3, atol=2e-3, label="float16")

for name in ("logical_not", "bitwise_not"):
    case(name, method(name), A(2, 3, dtype="int64"))
    case(name, method(name), A(3, dtype="int8"))
    case(name, method(name), A(2, 3, dtype="bool"))
    case(name, method(name), A(dtype="bool"), label="0-d")
    case(name, method(name), A(0, dtype="int32"), label="empty")
case("logical_not", method("logical_not"), A(2, 3))
case("nan_to_num", method("nan_to_num", nan=1.0, posinf=9.0, neginf=-9.0), V(np.array(SPECIAL)))
case("nan_to_num", method("nan_to_num", 2.0), A(2, 3))
case("round", method("round", decimals=2), A(2, 3, dtype="float64"))
for name in ("real", "imag"):
    case(name, lambda m, x, name=name: getattr(x, name), A(2, 3, dtype="complex64"), grad=False)
    case(name, lambda m, x, name=name: getattr(x, name), A(dtype="complex128"), grad=False, label="0-d")
case("real", lambda m, x: x.real, A(2, 3), label="real input")
for name in ("conj", "angle", "abs", "sgn"):
    case(name, method(name), A(2, 3, dtype="complex64"), grad=False, label="complex64")

# --- binary elementwise -----------------------------------------------------------------------------------------
# name: (lo, hi) of the second operand; the first is in [-3, 3) except for pow
BINARY = {
    "add": (-3, 3), "sub": (-3, 3), "mul": (-3, 3), "div": (0.5, 3), "divide": (0.5, 3), "multiply": (-3, 3),
    "subtract": (-3, 3), "true_divide": (0.5, 3), "floor_divide": (0.5, 3), "remainder": (0.5, 3),
    "fmod": (0.5, 3), "pow": (-2, 2), "atan2": (-3, 3), "hypot": (-3, 3), "copysign": (-3, 3), "fmax": (-3, 3),
    "fmin": (-3, 3), "maximum": (-3, 3), "minimum": (-3, 3), "logaddexp": (-3, 3), "xlogy": (0.1, 3),
    "eq": (-3, 3), "ne": (-3, 3), "lt": (-3, 3), "le": (-3, 3), "gt": (-3, 3), "ge": (-3, 3),
    "logical_and": (-3, 3), "logical_or": (-3, 3), "logical_xor": (-3, 3),
}
BINARY_NO_INT = {"hypot", "logaddexp"}
BINARY_TENSOR_ONLY = {"atan2", "hypot", "fmax", "fmin", "maximum", "minimum", "logaddexp", "logical_and",
                      "logical_or", "logical_xor"}  # torch takes no Python number as the second operand
BINARY_NO_BOOL = {"sub", "subtract", "floor_divide", "remainder", "fmod", "pow", "hypot", "logaddexp"}

for name, (lo, hi) in BINARY.items():
    f = method(name)
    x_lo, x_hi = (0.5, 2) if name == "pow" else (-3, 3)
    ilo, ihi = max(int(np.ceil(lo)), 1 if lo > 0 else -3), int(np.floor(hi))
    grad = name != "floor_divide"  # torch has no derivative for it
    case(name, f, A(2, 1, 3, lo=x_lo, hi=x_hi), A(4, 3, lo=lo, hi=hi), grad=grad, label="broadcast")
    case(name, f, TR(2, 3, dtype="float64", lo=x_lo, hi=x_hi), SL(2, 3, dtype="float64", lo=lo, hi=hi),
         grad=grad, label="views")
    case(name, f, A(lo=x_lo, hi=x_hi), A(0, 3, lo=lo, hi=hi), grad=grad, label="0-d and empty")
    case(name, f, A(2, 3, dtype="int32", lo=0, hi=3), A(3, lo=lo, hi=hi), grad=grad, label="int32 with float32")
    case(name, f, A(2, 3, dtype="float16", lo=x_lo, hi=x_hi), A(2, 3, dtype="float16", lo=lo, hi=hi),
         rtol=2e-3, atol=2e-3, grad=grad, label="float16")
    if name not in BINARY_TENSOR_ONLY:
        case(name, f, A(2, 3, lo=x_lo, hi=x_hi), 2.0, grad=grad, label="python float")
    if name not in BINARY_NO_INT:
        case(name, f, A(2, 3, dtype="int64", lo=0 if name == "pow" else -3), A(3, dtype="int64", lo=ilo, hi=ihi),
             label="int64")
        if name not in BINARY_TENSOR_ONLY:
            case(name, f, A(2, 3, dtype="int64", lo=0), 2, label="python int")
    if name not in BINARY_NO_BOOL:
        case(name, f, A(2, 3, dtype="bool"), A(2, 3, dtype="bool"), label="bool")

for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"):
    shift = "shift" in name
    case(name, method(name), A(2, 3, dtype="int64", lo=-50, hi=50), A(3, dtype="int64", lo=0, hi=3 if shift else 50))
    case(name, method(name), A(4, dtype="int32", lo=0, hi=100), 2, label="python int")
    case(name, method(name), A(dtype="int8", lo=-20, hi=20), A(0, dtype="int8", lo=0, hi=3), label="0-d and empty")
    if not shift:
        case(name, method(name), A(2, 3, dtype="bool"), A(2, 3, dtype="bool"), label="bool")

for name, lo in (("lerp", -3), ("addcmul", -3), ("addcdiv", 0.5)):
    case(name, method(name), A(2, 3), A(3), A(2, 1, lo=lo), label="broadcast")
    case(name, method(name), TR(2, 3, dtype="float64"), A(2, 3, dtype="float64"), A(2, 3, dtype="float64", lo=lo),
         label="transposed")
case("lerp", method("lerp"), A(2, 3), A(2, 3), 0.25, label="python weight")
case("addcmul", lambda m, x, a, b: x.addcmul(a, b, value=0.5), A(2, 3), A(2, 3), A(2, 3), label="value")
case("addcdiv", lambda m, x, a, b: x.addcdiv(a, b, value=-2), A(2, 3), A(2, 3), A(2, 3, lo=0.5), label="value")

# --- in-place forms: the result and the tensor it changed ------------------------------------------------------
def in_place(name, *rest):
    def fn(m, x, *args, **kw):
        y = x * 1  # a non-leaf, so the in-place change is differentiable in both libraries
        r = getattr(y, name)(*args, *rest, **kw)
        return r, y
    return fn


for name in ("abs_", "ceil_", "cos_", "exp_", "floor_", "log_", "neg_", "reciprocal_", "relu_", "round_",
             "rsqrt_", "sigmoid_", "sin_", "sqrt_", "tanh_", "trunc_", "nan_to_num_"):
    lo, hi = UNARY[name[:-1]]
    case(name, in_place(name), A(2, 3, lo=lo, hi=hi))
    case(name, in_place(name), A(lo=lo, hi=hi), label="0-d")
for name in ("add_", "sub_", "mul_", "div_", "pow_", "fmod_", "remainder_", "copysign_"):
    lo, hi = BINARY[name[:-1]]
    case(name, in_place(name), A(2, 3, lo=0.5 if name == "pow_" else -3), A(3, lo=lo, hi=hi), label="broadcast")
    if name not in ("div_", "copysign_"):  # an integer tensor cannot hold their float results
        case(name, in_place(name), A(2, 3, dtype="int64", lo=0), 2, label="int64, python int")
for name, lo in (("lerp_", -3), ("addcmul_", -3), ("addcdiv_", 0.5)):
    case(name, in_place(name), A(2, 3), A(3), A(2, 1, lo=lo))

# --- reductions -------------------------------------------------------------------------------------------------
# name: (takes a tuple of dims, takes keepdim, takes ints, takes bools, may be called without a dim)
REDUCE = {
    "sum": (True, True, True, True, True), "mean": (True, True, False, False, True),
    "prod": (False, True, True, True, True), "amax": (True, True, True, True, True),
    "amin": (True, True, True, True, True), "logsumexp": (True, True, False, False, False),
    "nansum": (True, True, True, False, True), "nanmean": (True, True, False, False, True),
    "std": (True, True, False, False, True), "var": (True, True, False, False, True),
    "all": (True, True, True, True, True), "any": (True, True, True, True, True),
    "count_nonzero": (True, False, True, True, True), "argmax": (False, True, True, False, True),
    "argmin": (False, True, True, False, True), "max": (False, True, True, True, True),
    "min": (False, True, True, True, True),
}
for name, (tuples, keepdim, ints, bools, whole) in REDUCE.items():
    if whole:
        case(name, method(name), A(2, 3, 4), label="whole")
        case(name, method(name), A(), label="0-d")
    case(name, method(name, 1), A(2, 3, 4), label="dim")
    case(name, method(name, 0), A(), label="0-d, dim 0")
    case(name, method(name, -1), TR(3, 4, dtype="float64"), label="transposed")
    case(name, method(name, 1), A(0, 3), label="empty")
    if keepdim:
        case(name, method(name, dim=-1, keepdim=True), A(2, 1, 3), label="keepdim")
    if tuples:
        case(name, method(name, dim=(0, 2)), A(2, 3, 4), label="dims")
    if ints:
        case(name, method(name, 1), A(3, 4, dtype="int64", lo=-1000, hi=1000), label="int64")
        if whole:
            case(name, method(name), A(3, 4, dtype="int32", lo=-1000, hi=1000), label="int32 whole")
    if bools:
        case(name, method(name, 0), A(3, 4, dtype="bool"), label="bool")
for name in ("sum", "prod", "nansum", "all", "any", "count_nonzero"):
    case(name, method(name, 0), A(0, 3), label="over an empty axis")
for name in ("sum", "mean"):
    case(name, method(name, 1), A(2, 8, dtype="bfloat16"), rtol=1e-2, atol=1e-2, label="bfloat16")
    case(name, method(name, dtype="m.float64"), A(2, 3), label="dtype")
for name in ("nansum", "nanmean"):
    case(name, method(name, 1), V(np.array([[1.0, NAN, 2.0], [NAN, NAN, 3.0]], np.float32), grad=True), label="nan")
for name in ("std", "var"):
    case(name, method(name, 1, unbiased=False), A(2, 3), label="unbiased=False")
    case(name, method(name, dim=1, correction=0, keepdim=True), A(2, 3), label="correction")
case("aminmax", lambda m, x: x.aminmax(), A(3, 4, dtype="int64", lo=-1000, hi=1000))
case("aminmax", lambda m, x: x.aminmax(dim=1, keepdim=True), A(2, 3))
case("aminmax", lambda m, x: x.aminmax(dim=0), A(2, 3, dtype="int32"))
case("max", method("max"), A(2, 3), A(3), label="binary max")
case("min", method("min"), A(2, 3), A(3), label="binary min")

# --- scans ------------------------------------------------------------------------------------------------------
for name, ints in (("cumsum", True), ("cumprod", True), ("cummax", True), ("cummin", True), ("logcumsumexp", False)):
    case(name, method(name, 1), A(2, 4, lo=0.5 if name == "cumprod" else -3))
    case(name, method(name, 0), TR(3, 2, dtype="float64"), label="transposed")
    case(name, method(name, 0), A(), label="0-d")
    case(name, method(name, 0), A(0, 3), label="empty")
    if ints:
        case(name, method(name, -1), A(2, 4, dtype="int64", lo=-1000, hi=1000), label="int64")
        case(name, method(name, 0), A(5, dtype="bool"), label="bool")
case("cumsum", method("cumsum", 1, dtype="m.float64"), A(2, 3), label="dtype")


# --- activations (corvid.nn.functional) -------------------------------------------------------------------------
ACTIVATIONS = {
    "celu": {"alpha": 0.5}, "elu": {"alpha": 0.7}, "gelu": {"approximate": "tanh"}, "hardsigmoid": {},
    "hardswish": {}, "hardtanh": {"min_val": -0.5, "max_val": 2.0}, "leaky_relu": {"negative_slope": 0.2},
    "logsigmoid": {}, "mish": {}, "relu": {}, "relu6": {}, "selu": {}, "sigmoid": {}, "silu": {},
    "softplus": {"beta": 2.0, "threshold": 3.0}, "softsign": {}, "tanh": {},
}
for name, kwargs in ACTIVATIONS.items():
    f = (lambda name: lambda m, x, **k: getattr(m.F, name)(x, **k))(name)
    case(f"F.{name}", f, A(2, 3, lo=-7, hi=7))
    case(f"F.{name}", f, TR(3, 2, dtype="float64", lo=-7, hi=7), label="transposed")
    case(f"F.{name}", f, A(), label="0-d")
    case(f"F.{name}", f, A(0, 3), label="empty")
    if kwargs:
        case(f"F.{name}", (lambda name, kwargs: lambda m, x: getattr(m.F, name)(x, **kwargs))(name, kwargs),
             A(2, 3, lo=-7, hi=7), label="keywords")
case("F.prelu", lambda m, x, w: m.F.prelu(x, w), A(2, 3, 4), A(3, lo=0, hi=1))
case("F.prelu", lambda m, x, w: m.F.prelu(x, w), A(2, 3), A(1, lo=0, hi=1), label="one weight")

for name in ("softmax", "log_softmax", "softmin"):
    fn = (lambda name: lambda m, x, *a, **k: getattr(m.F, name)(x, *a, **k))(name)
    case(f"F.{name}", lambda m, x, fn=fn: fn(m, x, dim=1), A(2, 3, 4))
    case(f"F.{name}", lambda m, x, fn=fn: fn(m, x, dim=-1), TR(3, 2, dtype="float64"), label="transposed")
    case(f"F.{name}", lambda m, x, fn=fn: fn(m, x, dim=0), A(), label="0-d")
    case(f"F.{name}", lambda m, x, fn=fn: fn(m, x, dim=1), A(0, 3), label="empty")
    case(f"F.{name}", lambda m, x, fn=fn: fn(m, x, dim=1, dtype=m.float64), A(2, 3), label="dtype")
for name in ("softmax", "log_softmax"):
    case(name, method(name, 1), A(2, 3, 4))
    case(name, method(name, -1), TR(3, 2, dtype="float64"), label="transposed")
    case(name, method(name, dim=0), A(), label="0-d")

# --- shapes, views and copies -----------------------------------------------------------------------------------
SHAPE = [  # (name, fn, inputs)
    ("reshape", method("reshape", 3, -1), [A(2, 3, 2)]), ("reshape", method("reshape", (6,)), [TR(2, 3)]),
    ("reshape", method("reshape", ()), [A(1, 1)]), ("reshape", method("reshape", 0, 5), [A(5, 0)]),
    ("view", method("view", -1, 2), [A(2, 3, 2)]), ("view", method("view", 1), [A()]),
    ("flatten", method("flatten"), [A(2, 3, 2)]), ("flatten", method("flatten", 1), [TR(2, 3, 2)]),
    ("flatten", method("flatten"), [A()]), ("flatten", method("flatten", 0, 1), [A(0, 2, 3)]),
    ("unflatten", method("unflatten", 1, (2, 3)), [A(2, 6)]), ("unflatten", method("unflatten", -1, (-1, 2)), [A(4)]),
    ("squeeze", method("squeeze"), [A(2, 1, 3, 1)]), ("squeeze", method("squeeze", 1), [A(2, 1, 3)]),
    ("squeeze", method("squeeze", 0), [A(2, 3)]), ("squeeze", method("squeeze"), [A()]),
    ("unsqueeze", method("unsqueeze", 0), [A(2, 3)]), ("unsqueeze", method("unsqueeze", -1), [TR(2, 3)]),
    ("unsqueeze", method("unsqueeze", 0), [A()]),
    ("permute", method("permute", 2, 0, 1), [A(2, 3, 4)]), ("permute", method("permute", (1, 0)), [SL(2, 3)]),
    ("transpose", method("transpose", 0, 2), [A(2, 3, 4)]), ("transpose", method("transpose", -1, 0), [A(0, 3)]),
    ("swapaxes", method("swapaxes", 0, 1), [A(2, 3)]), ("swapdims", method("swapdims", 1, 2), [A(2, 3, 4)]),
    ("moveaxis", method("moveaxis", 0, -1), [A(2, 3, 4)]), ("movedim", method("movedim", (0, 1), (2, 0)), [A(2, 3, 4)]),
    ("t", method("t"), [A(2, 3)]), ("t", method("t"), [A(3)]), ("t", method("t"), [A()]),
    ("T", lambda m, x: x.T, [A(2, 3)]), ("mT", lambda m, x: x.mT, [A(2, 3, 4)]), ("H", lambda m, x: x.H, [A(2, 3)]),
    ("mH", lambda m, x: x.mH, [A(2, 3, 4)]), ("adjoint", method("adjoint"), [A(2, 3, 4)]),
    ("H", lambda m, x: x.H, [A(2, 3, dtype="complex64")]),
    ("mH", lambda m, x: x.mH, [A(3, 2, dtype="complex128")]),
    ("expand", method("expand", 2, 3, 4), [A(3, 1)]), ("expand", method("expand", -1, 4), [A(3, 1)]),
    ("expand", method("expand", 2, 3), [A()]),
    ("expand_as", method("expand_as"), [A(3, 1), A(2, 3, 4, grad=False)]),
    ("broadcast_to", method("broadcast_to", (2, 3, 4)), [A(3, 1)]),
    ("broadcast_to", method("broadcast_to", (0, 3)), [A(3)]),
    ("view_as", method("view_as"), [A(2, 3), A(3, 2, grad=False)]),
    ("reshape_as", method("reshape_as"), [TR(2, 3), A(6, grad=False)]),
    ("flip", method("flip", 0), [A(2, 3)]), ("flip", method("flip", (0, 1)), [TR(2, 3)]),
    ("flip", method("flip", 0, 2), [A(2, 3, 4)]),
    ("fliplr", method("fliplr"), [A(2, 3)]), ("flipud", method("flipud"), [A(2, 3)]),
    ("roll", method("roll", 1), [A(2, 3)]), ("roll", method("roll", (1, -2), (0, 1)), [A(2, 3)]),
    ("roll", method("roll", 2, 1), [TR(2, 3)]),
    ("rot90", method("rot90"), [A(2, 3)]), ("rot90", method("rot90", -1, (1, 2)), [A(2, 3, 4)]),
    ("rot90", method("rot90", 2), [A(2, 3)]),
    ("narrow", method("narrow", 1, 1, 2), [A(2, 3)]), ("narrow", method("narrow", 0, 0, 0), [A(2, 3)]),
    ("select", method("select", 1, -1), [A(2, 3)]), ("select", method("select", 0, 1), [TR(2, 3)]),
    ("chunk", method("chunk", 2, 1), [A(2, 5)]), ("chunk", method("chunk", 3), [A(3, 2)]),
    ("split", method("split", 2, 1), [A(2, 5)]), ("split", method("split", [1, 3], 1), [A(2, 4)]),
    ("tensor_split", method("tensor_split", 3, 1), [A(2, 5)]),
    ("tensor_split", method("tensor_split", [1, 4]), [A(5, 2)]),
    ("unbind", method("unbind", 1), [A(2, 3)]), ("unbind", method("unbind"), [A(0, 2)]),
    ("unfold", method("unfold", 1, 3, 1), [A(2, 5)]), ("unfold", method("unfold", 0, 2, 2), [A(5)]),
    ("tile", method("tile", 2, 1), [A(2, 3)]), ("tile", method("tile", (2,)), [A(2, 3)]),
    ("repeat", method("repeat", 2, 1, 2), [A(2, 3)]), ("repeat", method("repeat", 3), [A()]),
    ("repeat_interleave", method("repeat_interleave", 2), [A(2, 3)]),
    ("repeat_interleave", method("repeat_interleave", 2, dim=1), [A(2, 3)]),
    ("repeat_interleave", method("repeat_interleave", dim=0), [A(3, 2), V(np.array([1, 0, 2]))]),
    ("diag", method("diag"), [A(3)]), ("diag", method("diag", 1), [A(3, 3)]), ("diag", method("diag", -1), [A(2)]),
    ("diagonal", method("diagonal"), [A(3, 4)]), ("diagonal", method("diagonal", 1, 0, 2), [A(3, 2, 4)]),
    ("tril", method("tril"), [A(3, 4)]), ("tril", method("tril", -1), [A(2, 3, 3)]),
    ("triu", method("triu"), [A(3, 4)]), ("triu", method("triu", 1), [TR(3, 3)]),
    ("trace", method("trace"), [A(3, 4)]), ("trace", method("trace"), [A(3, 3, dtype="int64")]),
    ("contiguous", method("contiguous"), [TR(2, 3)]), ("clone", method("clone"), [SL(2, 3)]),
    ("clone", method("clone"), [A(dtype="int32")]),
    ("detach", lambda m, x: x.detach() * 2, [A(2, 3)]),
    ("diff", method("diff"), [A(2, 5)]), ("diff", method("diff", 2, 0), [A(4, 3)]),
    ("diff", method("diff", dim=0), [A(3, dtype="int64")]),
]
for name, fn, args in SHAPE:
    case(name, fn, *args)
for name in ("tril_", "triu_"):
    case(name, in_place(name, 0), A(3, 4))

# --- linear algebra ---------------------------------------------------------------------------------------------
LINALG = [
    ("matmul", [A(2, 3), A(3, 4)]), ("matmul", [A(3), A(3)]), ("matmul", [A(2, 1, 2, 3), A(4, 3, 2)]),
    ("matmul", [A(3), TR(3, 2)]), ("matmul", [A(2, 3, dtype="int64"), A(3, dtype="int64")]),
    ("matmul", [A(0, 3), A(3, 2)]), ("mm", [A(2, 3, dtype="float64"), TR(3, 4, dtype="float64")]),
    ("bmm", [A(2, 2, 3), A(2, 3, 4)]), ("mv", [A(2, 3), A(3)]), ("dot", [A(3), A(3)]),
    ("dot", [A(3, dtype="int32"), A(3, dtype="int32")]), ("outer", [A(3), A(2)]),
    ("kron", [A(2, 2), A(2, 3)]), ("cross", [A(2, 3), A(2, 3)]),
]
for name, args in LINALG:
    case(name, method(name), *args, rtol=1e-4, atol=1e-5)
case("addmm", method("addmm"), A(2, 4), A(2, 3), A(3, 4), rtol=1e-4, atol=1e-5)
case("addmm", lambda m, x, a, b: x.addmm(a, b, beta=0.5, alpha=2), A(4), A(2, 3), A(3, 4), rtol=1e-4, atol=1e-5)
case("cross", lambda m, x, y: x.cross(y, dim=0), A(3, 2), A(3, 2), label="dim")


# --- clamping and comparison ------------------------------------------------------------------------------------
for name in ("clamp", "clip"):
    case(name, method(name, -1.0, 1.5), A(2, 3))
    case(name, method(name, min=0.0), TR(2, 3, dtype="float64"), label="min only")
    case(name, method(name, max=1), A(2, 3, dtype="int64"), label="int64")
    case(name, method(name), A(2, 3), A(3, lo=-3, hi=0), A(2, 1, lo=0, hi=3), label="tensor bounds")
    case(name, method(name, -1.0, 1.0), A(), label="0-d")
    case(name + "_", in_place(name + "_", -1.0, 1.0), A(2, 3))
case("clamp_min", method("clamp_min", 0.5), A(2, 3))
case("clamp_min", method("clamp_min"), A(2, 3), A(3), label="tensor")
case("clamp_max", method("clamp_max", 0.5), A(2, 3))
case("clamp_max", method("clamp_max", 1), A(2, 3, dtype="int32"), label="int32")
case("clamp_min_", in_place("clamp_min_", 0.5), A(2, 3))
case("clamp_max_", in_place("clamp_max_", 0.5), A(2, 3))
case("isclose", method("isclose"), V(np.array([1.0, 2.0, NAN, INF, 1.0])),
     V(np.array([1.0 + 1e-9, 2.1, NAN, INF, 1.5])))
case("isclose", method("isclose", rtol=0.1, equal_nan=True), V(np.array([1.0, 2.0, NAN])),
     V(np.array([1.05, 2.5, NAN])), label="keywords")
case("allclose", method("allclose"), V(np.array([1.0, 2.0])), V(np.array([1.0, 2.0 + 1e-9])))
case("allclose", method("allclose", atol=0.1), V(np.array([1.0, 2.0])), V(np.array([1.0, 2.5])), label="false")
case("equal", method("equal"), V(np.array([1, 2])), V(np.array([1, 2])))
case("equal", method("equal"), V(np.array([1, 2])), V(np.array([1, 3])), label="false")
case("equal", method("equal"), V(np.array([1, 2])), V(np.array([[1, 2]])), label="shapes")
case("where", lambda m, x, c, y: x.where(c, y), A(2, 3), A(2, 3, dtype="bool"), A(3))
case("where", lambda m, x, c: x.where(c, 0.0), A(2, 3), A(2, 3, dtype="bool"), label="python other")

# --- sorting and selection --------------------------------------------------------------------------------------
case("sort", method("sort", 1), A(2, 5))
case("sort", method("sort", dim=0, descending=True), TR(2, 4, dtype="float64"), label="descending")
case("sort", method("sort"), A(5, dtype="int64", lo=-1000, hi=1000), label="int64")
case("sort", method("sort", 0), A(0), label="empty")
case("argsort", method("argsort", 1), A(2, 5))
case("argsort", method("argsort", dim=0, descending=True), A(5, dtype="int32", lo=-1000, hi=1000), label="int32")
case("topk", method("topk", 2), A(2, 5))
case("topk", method("topk", 2, 0, largest=False), TR(4, 3), label="smallest")
case("topk", method("topk", 0), A(3), label="k=0")
case("unique", method("unique"), V(np.array([3, 1, 2, 3, 1])))
case("unique", method("unique", return_inverse=True, return_counts=True), V(np.array([[2.0, 1.0], [2.0, 5.0]])),
     label="inverse and counts")
case("nonzero", method("nonzero"), V(np.array([[0, 1, 2], [3, 0, 0]])))
case("nonzero", method("nonzero", as_tuple=True), V(np.array([[0.0, 1.0], [2.0, 0.0]])), label="tuple")
case("nonzero", method("nonzero"), A(dtype="bool"), label="0-d")
case("argwhere", method("argwhere"), V(np.array([[False, True], [True, True]])))
case("masked_select", method("masked_select"), A(2, 3), A(3, dtype="bool"))

# --- indexing ---------------------------------------------------------------------------------------------------
IDX = V(np.array([2, 0, 2]))
case("index_select", method("index_select"), A(4, 3), 0, IDX, torch_fn=lambda m, x, d, i: x.index_select(d, i))
case("index_select", lambda m, x, i: x.index_select(1, i), TR(3, 4), V(np.array([1, 1])), label="transposed")
case("gather", lambda m, x, i: x.gather(1, i), A(2, 3), V(np.array([[0, 0], [2, 1]])))
case("gather", lambda m, x, i: x.gather(0, i), A(3), V(np.array([], dtype=np.int64)), label="empty")
case("take", method("take"), A(2, 3), V(np.array([[5, 0], [1, 1]])))
case("take_along_dim", lambda m, x, i: x.take_along_dim(i, dim=1), A(2, 3), V(np.array([[2], [0]])))
case("take_along_dim", method("take_along_dim"), A(2, 3), V(np.array([4, 0])), label="flat")
for name in ("masked_fill", "masked_fill_"):
    f = method(name) if name == "masked_fill" else in_place(name)
    case(name, lambda m, x, c, f=f: f(m, x, c, -1.5), A(2, 3), A(3, dtype="bool"))
    case(name, lambda m, x, c, f=f: f(m, x, c, 7), A(2, 3, dtype="int64"), A(2, 3, dtype="bool"), label="int64")
case("masked_fill", lambda m, x, c, v: x.masked_fill(c, v), A(2, 3), A(2, 3, dtype="bool"), A(grad=False),
     label="0-d tensor value")
for name in ("index_add", "index_add_", "index_copy", "index_copy_"):
    f = method(name) if not name.endswith("_") else in_place(name)
    case(name, lambda m, x, i, s, f=f: f(m, x, 0, i, s), A(4, 3), V(np.array([3, 0])), A(2, 3))
    case(name, lambda m, x, i, s, f=f: f(m, x, 1, i, s), A(2, 4, dtype="int64"), V(np.array([1])),
         A(2, 1, dtype="int64"), label="int64")
case("index_add", lambda m, x, i, s: x.index_add(0, i, s, alpha=2.0), A(3), V(np.array([1, 1])), A(2),
     label="alpha, duplicates")
for name in ("index_fill", "index_fill_"):
    f = method(name) if name == "index_fill" else in_place(name)
    case(name, lambda m, x, i, f=f: f(m, x, 1, i, -2.0), A(2, 4), V(np.array([0, 3])))
for name in ("scatter", "scatter_", "scatter_add", "scatter_add_"):
    f = method(name) if not name.endswith("_") else in_place(name)
    idx = V(np.array([[0, 1, 2], [2, 0, 1]]))  # no duplicates: torch leaves their order undefined
    case(name, lambda m, x, i, s, f=f: f(m, x, 0, i, s), A(3, 3), idx, A(2, 3))
    case(name, lambda m, x, i, s, f=f: f(m, x, 1, i, s), A(2, 4, dtype="int64"), V(np.array([[3], [0]])),
         A(2, 1, dtype="int64"), label="int64")
case("scatter", lambda m, x, i: x.scatter(1, i, 5.0), A(2, 3), V(np.array([[2], [0]])), label="python value")
case("scatter_add", lambda m, x, i, s: x.scatter_add(0, i, s), A(3), V(np.array([1, 1, 0])), A(3),
     label="duplicates")
for name in ("scatter_reduce", "scatter_reduce_"):
    f = method(name) if name == "scatter_reduce" else in_place(name)
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        case(name, lambda m, x, i, s, f=f, r=reduce: f(m, x, 0, i, s, r), A(3), V(np.array([0, 2, 0, 2])),
             A(4, lo=0.5), label=reduce)
    case(name, lambda m, x, i, s, f=f: f(m, x, 0, i, s, "amax", include_self=False), A(3, dtype="int64"),
         V(np.array([0, 2, 0])), A(3, dtype="int64"), label="include_self=False")
# (grad=False: the result no longer depends on the input; corvid's backward then raises where torch gives zeros)
case("fill_", in_place("fill_", 2.5), A(2, 3), grad=False)
case("fill_", in_place("fill_", 3), A(dtype="int32"), label="0-d int32")
case("zero_", in_place("zero_"), A(2, 3), grad=False)
case("copy_", in_place("copy_"), A(2, 3), A(3), label="broadcast")
case("copy_", in_place("copy_"), A(2, 3, dtype="float64"), A(2, 3, dtype="float32"), label="cast")

# --- dtypes, conversions and metadata ---------------------------------------------------------------------------
for name in ("float", "double", "half", "bfloat16", "int", "long", "short", "char", "byte", "bool"):
    case(name, method(name), A(2, 3, lo=0, hi=100))
    case(name, method(name), A(dtype="int64", lo=0, hi=100), label="0-d int64")
    case(name, method(name), A(3, dtype="bool"), label="bool")
for name in ("cfloat", "cdouble"):
    case(name, method(name), A(2, 3), grad=False)
case("to", lambda m, x: x.to(m.float64), A(2, 3))
case("to", lambda m, x: x.to(dtype=m.int32), A(2, 3), label="dtype keyword")
case("to", lambda m, x, y: x.to(y), A(2, 3, dtype="int64"), A(2, dtype="float16"), label="like a tensor")
case("type_as", method("type_as"), A(2, 3, dtype="int32"), A(2, dtype="float64"))
case("cpu", lambda m, x: x.cpu() * 1, A(2, 3))
case("item", method("item"), A(), label="float")
case("item", method("item"), A(1, 1, dtype="int64"), label="int")
case("item", method("item"), A(dtype="bool"), label="bool")
case("tolist", method("tolist"), A(2, 3))
case("tolist", method("tolist"), A(2, dtype="int32"), label="int")
case("tolist", method("tolist"), A(), label="0-d")
case("numpy", method("numpy"), A(2, 3, dtype="int16"), grad=False)
case("numpy", lambda m, x: x.detach().numpy(), A(2, 3), label="float")
case("dtype", lambda m, x: x.dtype, A(2, dtype="float16"))
case("dtype", lambda m, x: (x * 1.5).dtype, A(2, dtype="int8"), label="promoted")
case("shape", lambda m, x: tuple(x.shape), A(2, 0, 3))
case("shape", lambda m, x: tuple(x.shape), A(), label="0-d")
for name in ("dim", "ndimension", "nelement", "numel", "element_size", "is_complex", "is_floating_point",
             "is_contiguous", "stride"):
    for dtype in ("float32", "int16", "bool", "complex64"):
        case(name, method(name), A(2, 1, 3, dtype=dtype), grad=False, label=dtype)
    case(name, method(name), A(), grad=False, label="0-d")
case("stride", method("stride", 1), A(2, 3, 4), label="dim")
# (corvid's x.size is the Array API's int, also callable as PyTorch's method)
case("size", lambda m, x: tuple(x.size()), A(2, 0, 3), grad=False)
case("size", lambda m, x: (x.size(0), x.size(-1)), A(2, 5, 3), grad=False, label="dim")
case("size", lambda m, x: tuple(x.size()), A(), grad=False, label="0-d")
for name in ("ndim", "itemsize", "nbytes"):
    for dtype in ("float64", "int8", "bool"):
        case(name, lambda m, x, name=name: getattr(x, name), A(2, 3, dtype=dtype), grad=False, label=dtype)
    case(name, lambda m, x, name=name: getattr(x, name), A(0, 3), label="empty")
case("requires_grad", lambda m, x, y: (x.requires_grad, y.requires_grad, (x * y).requires_grad), A(2),
     A(2, grad=False))
case("is_leaf", lambda m, x, y: (x.is_leaf, y.is_leaf, (x * 2).is_leaf, (y * 2).is_leaf), A(2), A(2, grad=False))
case("requires_grad_", lambda m, x: x.detach().requires_grad_().requires_grad, A(2))
case("requires_grad_", lambda m, x: x.detach().requires_grad_(False).requires_grad, A(2), label="False")


def _backward_grads(m, x, y):
    (x * y).sum().backward()
    return x.grad, y.grad


def _backward_with_gradient(m, x):
    y = x * x
    y.backward(y.detach() * 0 + 2)
    return x.grad


case("backward", _backward_grads, A(2, 3), A(3))
case("backward", _backward_with_gradient, A(2, 3), label="gradient")
case("grad", lambda m, x: (x.grad is None, ((x * 3).sum().backward(), x.grad)[1]), A(2))

case("new_zeros", lambda m, x: x.new_zeros((2, 3)), A(4, dtype="int32"))
case("new_ones", lambda m, x: x.new_ones(2, 1), A(4, dtype="float64"))
case("new_full", lambda m, x: x.new_full((2,), 7), A(4, dtype="int64"))
case("new_full", lambda m, x: x.new_full((2,), 1.5, dtype=m.float16), A(4), label="dtype")
case("new_tensor", lambda m, x: x.new_tensor([1, 2]), A(4, dtype="float64"))
case("new_tensor", lambda m, x: x.new_tensor([[1.5]], dtype=m.float32), A(4, dtype="int32"), label="dtype")
case("new_empty", lambda m, x: (tuple(x.new_empty((2, 3)).shape), x.new_empty(2).dtype), A(4, dtype="int16"))


# --- layers (corvid.nn.functional) ------------------------------------------------------------------------------
def fn_(name, *a, **k):
    """``F.name(*tensors, *a, **k)``."""
    return lambda m, *tensors: getattr(m.F, name)(*tensors, *a, **k)


TOL = {"rtol": 1e-4, "atol": 1e-5}
for d in (1, 2, 3):
    sp = (5,) * d if d < 3 else (4,) * d
    case(f"F.conv{d}d", fn_(f"conv{d}d"), A(2, 3, *sp), A(4, 3, *(3,) * d), A(4), **TOL)
    case(f"F.conv{d}d", fn_(f"conv{d}d", stride=2, padding=1, dilation=1, groups=3), A(1, 3, *sp),
         A(6, 1, *(2,) * d), **TOL, label="stride, padding, groups")
    case(f"F.conv_transpose{d}d", fn_(f"conv_transpose{d}d"), A(2, 3, *(3,) * d), A(3, 2, *(2,) * d), A(2), **TOL)
    case(f"F.conv_transpose{d}d", fn_(f"conv_transpose{d}d", stride=2, padding=1, output_padding=1),
         A(1, 2, *(3,) * d), A(2, 3, *(3,) * d), **TOL, label="stride, padding")
    case(f"F.avg_pool{d}d", fn_(f"avg_pool{d}d", 2), A(2, 3, *sp), **TOL)
    case(f"F.avg_pool{d}d", fn_(f"avg_pool{d}d", 3, stride=2, padding=1, count_include_pad=False), A(1, 2, *sp),
         **TOL, label="padding")
    case(f"F.max_pool{d}d", fn_(f"max_pool{d}d", 2), A(2, 3, *sp))
    case(f"F.max_pool{d}d", fn_(f"max_pool{d}d", 3, stride=2, padding=1), A(1, 2, *sp), label="padding")
    case(f"F.adaptive_avg_pool{d}d", fn_(f"adaptive_avg_pool{d}d", 3), A(2, 3, *sp), **TOL)
    case(f"F.adaptive_max_pool{d}d", fn_(f"adaptive_max_pool{d}d", 2), A(2, 3, *sp))
    case(f"F.adaptive_max_pool{d}d", fn_(f"adaptive_max_pool{d}d", 2, return_indices=True), A(1, 2, *sp),
         label="indices")

    def unpool(m, x, d=d):
        y, i = getattr(m.F, f"max_pool{d}d")(x, 2, return_indices=True)
        return getattr(m.F, f"max_unpool{d}d")(y, i, 2)
    case(f"F.max_unpool{d}d", unpool, A(1, 2, *(4,) * d))
case("F.conv2d", fn_("conv2d", padding="same"), TR(1, 1, 5, 5), A(2, 1, 3, 3), **TOL, label="same, transposed")

case("F.linear", fn_("linear"), A(2, 3), A(4, 3), A(4), **TOL)
case("F.linear", fn_("linear"), A(3), TR(4, 3), **TOL, label="1-d, no bias")
case("F.embedding", lambda m, i, w: m.F.embedding(i, w), V(np.array([[0, 2], [2, 1]])), A(3, 4))
case("F.embedding", lambda m, i, w: m.F.embedding(i, w, padding_idx=0), V(np.array([0, 2, 0])), A(3, 4),
     label="padding_idx")
case("F.one_hot", fn_("one_hot"), V(np.array([0, 2, 1])))
case("F.one_hot", fn_("one_hot", 4), V(np.array([[0], [3]])), label="num_classes")
case("F.pad", fn_("pad", (1, 2)), A(2, 3))
case("F.pad", fn_("pad", (1, 0, 0, 2), value=-1.0), A(1, 2, 3), label="value")
for mode in ("reflect", "replicate", "circular"):
    case("F.pad", fn_("pad", (1, 2), mode=mode), A(1, 2, 4), label=mode)
case("F.normalize", fn_("normalize"), A(2, 3))
case("F.normalize", fn_("normalize", p=1.0, dim=0), TR(2, 3), label="p=1, dim 0")
case("F.layer_norm", fn_("layer_norm", (3,)), A(2, 3), **TOL)
case("F.layer_norm", lambda m, x, w, b: m.F.layer_norm(x, (2, 3), w, b, eps=1e-3), A(2, 2, 3), A(2, 3), A(2, 3),
     **TOL, label="affine")
case("F.rms_norm", fn_("rms_norm", (3,)), A(2, 3), **TOL)
case("F.rms_norm", lambda m, x, w: m.F.rms_norm(x, (3,), w, eps=1e-3), A(2, 3), A(3), **TOL, label="weight")
case("F.group_norm", fn_("group_norm", 2), A(2, 4, 3), **TOL)
case("F.group_norm", lambda m, x, w, b: m.F.group_norm(x, 1, w, b), A(2, 2, 3), A(2), A(2), **TOL, label="affine")
case("F.instance_norm", fn_("instance_norm"), A(2, 3, 4), **TOL)
case("F.instance_norm", lambda m, x, w, b: m.F.instance_norm(x, weight=w, bias=b), A(2, 2, 3, 3), A(2), A(2), **TOL,
     label="affine")
case("F.batch_norm", lambda m, x, rm, rv, w, b: m.F.batch_norm(x, rm, rv, w, b, training=True), A(4, 3),
     A(3, grad=False), A(3, lo=0.5, grad=False), A(3), A(3), **TOL, label="training")
case("F.batch_norm", lambda m, x, rm, rv: m.F.batch_norm(x, rm, rv), A(2, 3, 4), A(3, grad=False),
     A(3, lo=0.5, grad=False), **TOL, label="running statistics")
case("F.scaled_dot_product_attention", fn_("scaled_dot_product_attention"), A(2, 3, 4), A(2, 5, 4), A(2, 5, 4),
     **TOL)
case("F.scaled_dot_product_attention", fn_("scaled_dot_product_attention", is_causal=True), A(1, 2, 3, 4),
     A(1, 2, 3, 4), A(1, 2, 3, 4), **TOL, label="causal")
case("F.scaled_dot_product_attention", fn_("scaled_dot_product_attention"), A(2, 3, 4), A(2, 5, 4), A(2, 5, 4),
     A(3, 5, dtype="bool"), **TOL, label="bool mask")
case("F.interpolate", fn_("interpolate", scale_factor=2), A(1, 2, 3))
case("F.interpolate", fn_("interpolate", size=(5, 3), mode="bilinear"), A(1, 2, 3, 4), **TOL, label="bilinear")
case("F.interpolate", fn_("interpolate", scale_factor=2, mode="bilinear", align_corners=True), A(1, 1, 2, 3), **TOL,
     label="align_corners")

# --- losses -----------------------------------------------------------------------------------------------------
for name in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"):
    case(f"F.{name}", fn_(name), A(2, 3), A(2, 3), **TOL)
    case(f"F.{name}", fn_(name, reduction="none"), TR(2, 3), A(2, 3), **TOL, label="none")
    case(f"F.{name}", fn_(name, reduction="sum"), A(4), A(4), **TOL, label="sum")
case("F.smooth_l1_loss", fn_("smooth_l1_loss", beta=0.5), A(4), A(4), **TOL, label="beta")
case("F.huber_loss", fn_("huber_loss", delta=2.0), A(4), A(4), **TOL, label="delta")
case("F.binary_cross_entropy", fn_("binary_cross_entropy"), A(2, 3, lo=0.05, hi=0.95), A(2, 3, lo=0, hi=1), **TOL)
case("F.binary_cross_entropy", lambda m, x, y, w: m.F.binary_cross_entropy(x, y, w, reduction="sum"),
     A(4, lo=0.05, hi=0.95), A(4, lo=0, hi=1), A(4, lo=0, hi=1, grad=False), **TOL, label="weight")
case("F.binary_cross_entropy_with_logits", fn_("binary_cross_entropy_with_logits"), A(2, 3), A(2, 3, lo=0, hi=1),
     **TOL)
case("F.binary_cross_entropy_with_logits", lambda m, x, y, p: m.F.binary_cross_entropy_with_logits(x, y, pos_weight=p),
     A(2, 3), A(2, 3, lo=0, hi=1), A(3, lo=0.5, grad=False), **TOL, label="pos_weight")
case("F.cross_entropy", fn_("cross_entropy"), A(3, 4), V(np.array([0, 3, 1])), **TOL)
case("F.cross_entropy", fn_("cross_entropy", label_smoothing=0.1, reduction="sum"), A(2, 4, 3),
     V(np.array([[0, 1, 3], [2, 2, 0]])), **TOL, label="spatial, smoothing")
case("F.cross_entropy", lambda m, x, t, w: m.F.cross_entropy(x, t, w, ignore_index=1), A(3, 4),
     V(np.array([0, 1, 3])), A(4, lo=0.5, grad=False), **TOL, label="weight, ignore_index")
case("F.cross_entropy", fn_("cross_entropy"), A(3, 4), A(3, 4, lo=0, hi=1), **TOL, label="probabilities")
case("F.nll_loss", fn_("nll_loss"), A(3, 4), V(np.array([0, 3, 1])), **TOL)
case("F.nll_loss", fn_("nll_loss", reduction="none", ignore_index=0), A(3, 4), V(np.array([0, 3, 1])), **TOL,
     label="none, ignore_index")
case("F.kl_div", fn_("kl_div", reduction="batchmean"), A(2, 3), A(2, 3, lo=0.1, hi=1), **TOL)
case("F.kl_div", fn_("kl_div", reduction="sum", log_target=True), A(2, 3), A(2, 3), **TOL, label="log_target")
case("F.margin_ranking_loss", fn_("margin_ranking_loss", margin=0.5), A(4), A(4),
     V(np.array([1.0, -1, 1, -1], np.float32)), **TOL)
case("F.margin_ranking_loss", fn_("margin_ranking_loss"), A(4), A(4), V(np.array([1.0, -1, 1, -1])), **TOL,
     label="float64 target")
case("F.cosine_embedding_loss", fn_("cosine_embedding_loss", margin=0.2), A(3, 4), A(3, 4),
     V(np.array([1.0, -1, -1])), **TOL)
case("F.triplet_margin_loss", fn_("triplet_margin_loss"), A(3, 4), A(3, 4), A(3, 4), **TOL)
case("F.triplet_margin_loss", fn_("triplet_margin_loss", margin=0.5, p=1.0, swap=True), A(3, 4), A(3, 4), A(3, 4),
     **TOL, label="swap")


def ctc(m, logits, targets, reduction="mean"):
    log_probs = logits.log_softmax(2)
    return m.F.ctc_loss(log_probs, targets, (6, 5), (3, 2), reduction=reduction)


case("F.ctc_loss", ctc, A(6, 2, 4), V(np.array([[1, 2, 2], [3, 1, 0]])), **TOL)
case("F.ctc_loss", lambda m, x, t: ctc(m, x, t, "sum"), A(6, 2, 4), V(np.array([[1, 2, 2], [3, 1, 0]])), **TOL,
     label="sum")


# --- the registry -----------------------------------------------------------------------------------------------
# Names corvid and torch share where a comparison means nothing or corvid differs on purpose (docs/pytorch.md).
EXCLUDED: dict[str, str] = {
    "device": "corvid names devices by string ('CPU', 'CUDA'); torch.device objects have no corvid counterpart",
    "F.dropout": "random: corvid's and torch's mask streams differ (p=0 and training=False are checked in "
                 "test_dropout_without_randomness)",
}

# Shared names without a case yet: work left, not a pass.
PENDING: set[str] = set()


def shared_names() -> set[str]:
    """Public ``Tensor`` attributes and ``corvid.nn.functional`` functions (as ``F.<name>``) torch also has."""
    methods = {n for n in dir(cv.Tensor) if not n.startswith("_") and hasattr(torch.Tensor, n)}
    functions = {f"F.{n}" for n in cvF.__all__ if hasattr(tF, n)}
    return methods | functions


# --- the tests --------------------------------------------------------------------------------------------------
# (name, label): the corvid bug that case shows
XFAIL: dict[tuple[str, str], str] = {}  # (name, case label) -> the corvid bug a case shows: a strict xfail (none open)


def _id(c):
    return f"{c.name}[{c.label}]" if c.label else c.name


def _marks(c):
    reason = XFAIL.get((c.name, c.label))
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


@pytest.mark.parametrize("case", [pytest.param(c, id=_id(c), marks=_marks(c)) for c in CASES])
def test_oracle(case):
    check(case)


def test_backward_from_an_empty_leaf():
    """A reduce over an empty axis stays in its input's graph (as torch's), so the leaf gets its
    (empty) gradient; before, the identity was a constant and backward raised."""
    torch = pytest.importorskip("torch")
    for op in ("sum", "prod", "mean"):
        x, t = cv.zeros((0, 3), requires_grad=True), torch.zeros((0, 3), requires_grad=True)
        (getattr(x, op)(0) * cv.Tensor([1.0, 2.0, 3.0])).sum().backward()
        (getattr(t, op)(0) * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
        assert x.grad is not None and x.grad.shape == tuple(t.grad.shape) == (0, 3)
    assert cv.grad(lambda a: a.sum(axis=(0, 1)))(cv.zeros((0, 2))).shape == (0, 2)


def test_every_shared_name_has_an_oracle():
    covered = {c.name for c in CASES}
    shared = shared_names()
    missing = shared - covered - set(EXCLUDED) - PENDING
    assert not missing, f"shared with torch but neither covered, EXCLUDED nor PENDING: {sorted(missing)}"
    done = PENDING & covered
    assert not done, f"covered now: remove from PENDING: {sorted(done)}"
    both = set(EXCLUDED) & (covered | PENDING)
    assert not both, f"EXCLUDED and also covered or PENDING: {sorted(both)}"
    stale = (set(EXCLUDED) | PENDING | covered) - shared
    assert not stale, f"not a name corvid and torch share (renamed or removed?): {sorted(stale)}"


@pytest.mark.parametrize("p, training", [(0.0, True), (0.5, False)])
def test_dropout_without_randomness(p, training):
    a = np.random.default_rng(0).uniform(-1, 1, (2, 3)).astype(np.float32)
    want = tF.dropout(torch.tensor(a), p, training)
    np.testing.assert_array_equal(cvF.dropout(cv.Tensor(a), p, training).numpy(), want.numpy())
