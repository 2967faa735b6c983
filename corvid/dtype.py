"""Device-neutral dtypes and type promotion for corvid.

Every supported element type is a single :class:`DType` instance (compare with
``is``). Promotion follows the Python Array API standard, extended to mixed
kinds by a lattice ``bool < integers < floats < complex`` (see :func:`result_type`).
Python scalars are *weak*: they only contribute their kind, never their width.

``ALL_DTYPES`` lists the real dtypes; ``COMPLEX_DTYPES`` the two complex ones
(``complex64``: two float32, ``complex128``: two float64, numpy's layout). bfloat16 and the two
8-bit floats (``float8_e4m3fn``: 4 exponent bits, 3 mantissa bits, no infinity, max 448;
``float8_e5m2``: IEEE-style with infinities, max 57344) are ml_dtypes' formats of those names.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = [
    "DType", "DTypeLike", "ALL_DTYPES", "FLOAT8_DTYPES",
    "bool_", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
    "float8_e4m3fn", "float8_e5m2", "float16", "bfloat16", "float32", "float64",
    "complex64", "complex128", "COMPLEX_DTYPES",
    "default_float", "default_int", "default_complex",
    "to_dtype", "from_numpy", "python_scalar_dtype", "result_type",
    "promote_types", "can_cast", "finfo", "iinfo", "FInfo", "IInfo",
    "reduce_identity", "sum_dtype", "min_value", "max_value",
]


@dataclass(frozen=True, eq=False)
class DType:
    """An element type. Equality is identity; use the module singletons.

    ``kind`` is ``'b'`` (bool), ``'i'`` (signed int), ``'u'`` (unsigned int)
    ``'f'`` (real floating point) or ``'c'`` (complex floating point); ``itemsize`` is in bytes.
    The singletons are ``cv.bool``, ``cv.int8`` ... ``cv.uint64``, ``cv.float8_e4m3fn``,
    ``cv.float8_e5m2``, ``cv.float16``, ``cv.bfloat16``, ``cv.float32``, ``cv.float64``,
    ``cv.complex64`` and ``cv.complex128``; functions that take a dtype also accept its name, a
    numpy dtype or ``bool``/``int``/``float``/``complex``.

    >>> d = cv.asarray([1.0, 2.0]).dtype
    >>> d, d.name, d.itemsize, d.kind
    (corvid.float32, 'float32', 4, 'f')
    >>> d is cv.float32, d.is_float, d.np
    (True, True, dtype('float32'))
    """

    name: str
    itemsize: int
    kind: str

    @property
    def np(self) -> np.dtype:
        """The equivalent numpy dtype (ml_dtypes' type of the same name for bfloat16 and the 8-bit floats)."""
        return _NUMPY[self]

    @property
    def is_float(self) -> bool:
        """True for floating-point dtypes (including bfloat16 and the 8-bit floats)."""
        return self.kind == "f"

    @property
    def is_complex(self) -> bool:
        """True for complex64 and complex128 (``is_float`` is False for them)."""
        return self.kind == "c"

    @property
    def real_dtype(self) -> DType:
        """The dtype of the real and imaginary parts (float32 for complex64); self for real dtypes."""
        return _REAL_PART.get(self, self)

    @property
    def is_int(self) -> bool:
        """True for signed and unsigned integers (not bool)."""
        return self.kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        """True for unsigned integers."""
        return self.kind == "u"

    @property
    def is_bool(self) -> bool:
        """True for the boolean dtype."""
        return self.kind == "b"

    def __repr__(self) -> str:
        return f"corvid.{self.name}"

    def __reduce__(self) -> tuple:
        # Unpickling and copying yield the same singleton.
        return (to_dtype, (self.name,))


bool_ = DType("bool", 1, "b")
int8 = DType("int8", 1, "i")
int16 = DType("int16", 2, "i")
int32 = DType("int32", 4, "i")
int64 = DType("int64", 8, "i")
uint8 = DType("uint8", 1, "u")
uint16 = DType("uint16", 2, "u")
uint32 = DType("uint32", 4, "u")
uint64 = DType("uint64", 8, "u")
float8_e4m3fn = DType("float8_e4m3fn", 1, "f")
float8_e5m2 = DType("float8_e5m2", 1, "f")
float16 = DType("float16", 2, "f")
bfloat16 = DType("bfloat16", 2, "f")
float32 = DType("float32", 4, "f")
float64 = DType("float64", 8, "f")
complex64 = DType("complex64", 8, "c")
complex128 = DType("complex128", 16, "c")

ALL_DTYPES: tuple[DType, ...] = (
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float8_e4m3fn, float8_e5m2, float16, bfloat16, float32, float64,
)
COMPLEX_DTYPES: tuple[DType, ...] = (complex64, complex128)
default_float = float32
default_int = int64
default_complex = complex64
_REAL_PART = {complex64: float32, complex128: float64}
_COMPLEX_OF = {float8_e4m3fn: complex64, float8_e5m2: complex64, float16: complex64, bfloat16: complex64,
               float32: complex64, float64: complex128}
FLOAT8_DTYPES: tuple[DType, ...] = (float8_e4m3fn, float8_e5m2)

DTypeLike = DType | str | np.dtype | type

# the dtypes numpy itself lacks, as ml_dtypes' types of the same names
_ML_DTYPES: dict[DType, np.dtype] = {d: np.dtype(getattr(ml_dtypes, d.name)) for d in (bfloat16, *FLOAT8_DTYPES)}
_FROM_ML: dict[np.dtype, DType] = {v: k for k, v in _ML_DTYPES.items()}
_NUMPY: dict[DType, np.dtype] = {d: _ML_DTYPES.get(d, np.dtype(d.name)) for d in ALL_DTYPES + COMPLEX_DTYPES}
_BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES + COMPLEX_DTYPES}
_BY_KIND_SIZE: dict[tuple[str, int], DType] = {
    (d.kind, d.itemsize): d for d in ALL_DTYPES + COMPLEX_DTYPES if d not in _ML_DTYPES
}
_SUPPORTED = ", ".join(d.name for d in ALL_DTYPES + COMPLEX_DTYPES)


def _unsupported(x: object) -> TypeError:
    return TypeError(f"unsupported dtype {x!r}; supported dtypes are: {_SUPPORTED}")


def from_numpy(np_dtype: np.dtype | type) -> DType:
    """Return the DType for a numpy dtype or numpy scalar type.

    Accepts a ``np.dtype`` or a numpy scalar type (e.g. ``np.float32``,
    ``np.dtype('int8')``, ``ml_dtypes.bfloat16``, ``ml_dtypes.float8_e4m3fn``) denoting a
    supported dtype in native byte order. Raises TypeError for anything else (clongdouble,
    object, strings, datetimes, byte-swapped, other ml_dtypes formats such as float8_e4m3fnuz, ...).
    """
    if not (isinstance(np_dtype, np.dtype)
            or (isinstance(np_dtype, type) and issubclass(np_dtype, np.generic))):
        raise _unsupported(np_dtype)
    dt = np.dtype(np_dtype)
    if dt in _FROM_ML:
        return _FROM_ML[dt]
    found = _BY_KIND_SIZE.get((dt.kind, dt.itemsize))
    if found is None or not dt.isnative:
        raise _unsupported(np_dtype)
    return found


def to_dtype(x: DTypeLike) -> DType:
    """Convert a dtype-like value to a DType singleton.

    Accepted: a DType; a canonical name (``'bool'``, ``'int8'``, ...,
    ``'bfloat16'``, ``'float8_e4m3fn'``, ``'float64'``); a numpy dtype or numpy scalar type (see
    :func:`from_numpy`); the Python types ``bool``, ``int``, ``float``
    (mapped to bool_, default_int, default_float). Anything else raises
    TypeError naming the input and listing the supported dtypes. ``complex``
    maps to default_complex (complex64).
    """
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        found = _BY_NAME.get(x)
        if found is None:
            raise _unsupported(x)
        return found
    if x is bool:
        return bool_
    if x is int:
        return default_int
    if x is float:
        return default_float
    if x is complex:
        return default_complex
    return from_numpy(x)


def _is_weak_scalar(x: object) -> bool:
    # numpy scalars such as np.float64 subclass Python float but are not weak.
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)


def python_scalar_dtype(x: bool | int | float | complex) -> DType:
    """The default DType for a Python scalar: bool_, default_int, default_float or default_complex."""
    if isinstance(x, bool):
        return bool_
    if isinstance(x, int):
        return default_int
    if isinstance(x, float):
        return default_float
    if isinstance(x, complex):
        return default_complex
    raise TypeError(f"expected a Python bool, int, float or complex, got {x!r}")


# Promotion lattice: each node lists the nodes directly above it. "float*" is a
# virtual node above every integer and below every float; it is the join of
# integer types with no common integer supertype (e.g. uint64 and int64) and
# stands for float64 when it is the final answer. "float8*" is the virtual join
# of the two 8-bit formats, below every wider float: as a final answer it is a
# TypeError (neither format holds the other; PyTorch and JAX refuse it too), but
# with a wider float present the wider float wins. Joins in a lattice are
# associative and commutative, so result_type is independent of argument order.
_ABOVE: dict[str, tuple[str, ...]] = {
    "bool": ("uint8", "int8"),
    "uint8": ("uint16", "int16"),
    "uint16": ("uint32", "int32"),
    "uint32": ("uint64", "int64"),
    "uint64": ("float*",),
    "int8": ("int16",),
    "int16": ("int32",),
    "int32": ("int64",),
    "int64": ("float*",),
    "float*": ("float8_e4m3fn", "float8_e5m2"),
    "float8_e4m3fn": ("float8*",),
    "float8_e5m2": ("float8*",),
    "float8*": ("float16", "bfloat16"),
    "float16": ("float32",),
    "bfloat16": ("float32",),
    "float32": ("float64", "complex64"),
    "float64": ("complex128",),
    "complex64": ("complex128",),
    "complex128": (),
}


def _upper_set(node: str) -> frozenset[str]:
    """All nodes >= ``node`` in the promotion lattice."""
    return frozenset({node}).union(*(_upper_set(n) for n in _ABOVE[node]))


_UPPER: dict[str, frozenset[str]] = {n: _upper_set(n) for n in _ABOVE}


@functools.lru_cache(maxsize=None)
def _join(dtypes: frozenset[DType]) -> DType:
    """Least upper bound of a non-empty set of dtypes in the promotion lattice."""
    common = frozenset.intersection(*(_UPPER[d.name] for d in dtypes))
    (least,) = [n for n in common if _UPPER[n] == common]
    if least == "float8*":
        raise TypeError("no implicit promotion between float8_e4m3fn and float8_e5m2 (neither holds the "
                        "other's values); cast one of them explicitly with astype")
    return float64 if least == "float*" else _BY_NAME[least]


def result_type(*args: DTypeLike | bool | int | float) -> DType:
    """Return the dtype of an operation combining ``args``.

    Each argument is a dtype-like value (strong, see :func:`to_dtype`) or a
    Python bool/int/float (weak). Strong dtypes are joined in the promotion
    lattice: Array API rules within a kind, ``bool < integers < floats``
    across kinds (int32 + float16 -> float16), integers without a common
    integer type give float64 (uint64 + int64), bfloat16 + float16 -> float32.
    An 8-bit float joins below every wider float (float8_e4m3fn + float16 -> float16) and above
    bool and the integers (int32 + float8_e5m2 -> float8_e5m2); float8_e4m3fn with float8_e5m2
    and no wider float raises TypeError (cast one of them with ``astype``).
    Real floats sit below complex: float32 + complex64 -> complex64,
    float64 + complex64 -> complex128.
    Weak scalars then contribute only their kind: an int turns bool into
    default_int, a float turns bool/int into default_float, a complex turns a
    real float into the complex dtype of its width (float32 -> complex64,
    float64 -> complex128, 8- and 16-bit floats -> complex64) and bool/int into
    default_complex; otherwise the strong result is kept. With only weak
    scalars the result is :func:`python_scalar_dtype` of the highest kind
    (bool < int < float < complex).
    The result does not depend on argument order. No arguments: TypeError.
    """
    if not args:
        raise TypeError("result_type() requires at least one argument")
    weak = [python_scalar_dtype(a) for a in args if _is_weak_scalar(a)]
    strong = frozenset(to_dtype(a) for a in args if not _is_weak_scalar(a))
    if not strong:
        return _join(frozenset(weak))
    result = _join(strong)
    if any(w.is_complex for w in weak) and not result.is_complex:
        return _COMPLEX_OF.get(result, default_complex)
    if any(w.is_float for w in weak) and not (result.is_float or result.is_complex):
        return default_float
    if any(w.is_int for w in weak) and result.is_bool:
        return default_int
    return result


def promote_types(a: DTypeLike, b: DTypeLike) -> DType:
    """Promote two strong dtypes; same as ``result_type(a, b)`` for dtypes (TypeError for
    float8_e4m3fn with float8_e5m2).

    >>> cv.promote_types(cv.int8, cv.uint8), cv.promote_types("float16", "bfloat16")
    (corvid.int16, corvid.float32)
    >>> cv.promote_types(cv.int32, cv.float16)  # the float, as PyTorch (numpy: float64)
    corvid.float16
    """
    return _join(frozenset((to_dtype(a), to_dtype(b))))


_KIND_ORDER = {"b": 0, "u": 1, "i": 2, "f": 3, "c": 4}


def _promotes_to(src: DType, dst: DType) -> bool:
    return dst.name in _UPPER[src.name]


def can_cast(from_: DTypeLike, to: DTypeLike, casting: str = "safe") -> bool:
    """Whether values of ``from_`` may be cast to ``to`` under ``casting``.

    * ``'no'``: only the identical dtype.
    * ``'safe'``: ``promote_types(from_, to) is to`` (Array API meaning; False between the two
      8-bit float formats, which do not promote).
    * ``'same_kind'``: safe, or a cast that does not go down the kind order
      bool < unsigned < signed < float < complex (e.g. float64 -> float16, int64 -> int8),
      matching numpy.
    * ``'unsafe'``: always.

    Raises ValueError for any other ``casting``.
    """
    src, dst = to_dtype(from_), to_dtype(to)
    if casting == "no":
        return src is dst
    if casting == "safe":
        return _promotes_to(src, dst)
    if casting == "same_kind":
        return _promotes_to(src, dst) or _KIND_ORDER[src.kind] <= _KIND_ORDER[dst.kind]
    if casting == "unsafe":
        return True
    raise ValueError(f"casting must be 'no', 'safe', 'same_kind' or 'unsafe', got {casting!r}")


@dataclass(frozen=True)
class FInfo:
    """Machine limits of a floating-point dtype (values as Python floats)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: DType


@dataclass(frozen=True)
class IInfo:
    """Machine limits of an integer dtype (values as Python ints)."""

    bits: int
    max: int
    min: int
    dtype: DType


def finfo(dtype: DTypeLike) -> FInfo:
    """Limits of a floating-point dtype; TypeError for non-float dtypes.

    For a complex dtype, the limits of its real part (as numpy and the Array API: ``finfo(complex64)``
    describes float32, and its ``dtype`` is float32)."""
    d = to_dtype(dtype).real_dtype
    if not d.is_float:
        raise TypeError(f"finfo() requires a floating-point dtype, got {d!r}")
    info = ml_dtypes.finfo(d.np)
    return FInfo(
        bits=int(info.bits),
        eps=float(info.eps),
        max=float(info.max),
        min=float(info.min),
        smallest_normal=float(info.smallest_normal),
        dtype=d,
    )


def iinfo(dtype: DTypeLike) -> IInfo:
    """Limits of an integer dtype; TypeError for bool and float dtypes."""
    d = to_dtype(dtype)
    if not d.is_int:
        raise TypeError(f"iinfo() requires an integer dtype, got {d!r}")
    return _iinfo(d)


@functools.cache
def _iinfo(d: DType) -> IInfo:  # (numpy's iinfo costs ~2 us; every integer scalar operand asks)
    info = np.iinfo(d.np)
    return IInfo(bits=int(info.bits), max=int(info.max), min=int(info.min), dtype=d)


def _ordered(dtype: DTypeLike) -> DType:
    d = to_dtype(dtype)
    if d.is_complex:
        raise TypeError(f"{d.name} values are not ordered: max, min and their identities are undefined")
    return d


_NO_INF = (float8_e4m3fn,)  # float formats without infinities: their extremes are ±finfo.max


def min_value(dtype: DTypeLike) -> bool | int | float:
    """Smallest value of ``dtype``: -inf for floats (-448.0 for float8_e4m3fn, which has no
    infinity), iinfo.min for ints, False for bool.

    TypeError for complex dtypes, which are not ordered."""
    d = _ordered(dtype)
    if d in _NO_INF:
        return -finfo(d).max
    if d.is_float:
        return float("-inf")
    if d.is_bool:
        return False
    return iinfo(d).min


def max_value(dtype: DTypeLike) -> bool | int | float:
    """Largest value of ``dtype``: +inf for floats (448.0 for float8_e4m3fn), iinfo.max for ints,
    True for bool.

    TypeError for complex dtypes, which are not ordered."""
    d = _ordered(dtype)
    if d in _NO_INF:
        return finfo(d).max
    if d.is_float:
        return float("inf")
    if d.is_bool:
        return True
    return iinfo(d).max


def reduce_identity(dtype: DTypeLike, op: str) -> bool | int | float:
    """Identity element of reduction ``op`` over ``dtype`` as a Python value.

    ``'sum'`` -> 0 and ``'prod'`` -> 1 (False/True for bool, 0.0/1.0 for
    floats, 0j/(1+0j) for complex); ``'max'`` -> :func:`min_value`;
    ``'min'`` -> :func:`max_value` (TypeError for complex).
    Raises ValueError for any other ``op``.
    """
    d = to_dtype(dtype)
    scalar_type = bool if d.is_bool else float if d.is_float else complex if d.is_complex else int
    if op == "sum":
        return scalar_type(0)
    if op == "prod":
        return scalar_type(1)
    if op == "max":
        return min_value(d)
    if op == "min":
        return max_value(d)
    raise ValueError(f"op must be 'sum', 'prod', 'max' or 'min', got {op!r}")


def sum_dtype(dtype: DTypeLike) -> DType:
    """Accumulation dtype numpy uses for sum/prod of ``dtype``.

    bool and signed ints -> int64, unsigned ints -> uint64, floats and complex unchanged
    (kernels accumulate 8- and 16-bit floats in float32 and round the result once).
    """
    d = to_dtype(dtype)
    if d.is_unsigned:
        return uint64
    if d.is_bool or d.is_int:
        return int64
    return d
