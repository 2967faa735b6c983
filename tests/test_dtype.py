import copy
import itertools
import pickle

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import corvid.dtype as cd
from corvid.dtype import (
    ALL_DTYPES, bfloat16, bool_, float8_e4m3fn, float8_e5m2, float16, float32, float64, int8, int16, int32,
    int64, uint8, uint16, uint32, uint64,
)

SIGNED = (int8, int16, int32, int64)
UNSIGNED = (uint8, uint16, uint32, uint64)
INTS = SIGNED + UNSIGNED
IEEE_FLOATS = (float16, float32, float64)
FP8 = (float8_e4m3fn, float8_e5m2)
FLOATS = IEEE_FLOATS + (bfloat16,) + FP8

dtypes = st.sampled_from(ALL_DTYPES)
weak_scalars = st.one_of(st.booleans(), st.integers(-(2**70), 2**70), st.floats())


# --- DType objects -----------------------------------------------------------

def test_singletons_have_expected_attributes():
    assert len(set(ALL_DTYPES)) == 15
    for d in ALL_DTYPES:
        assert d.itemsize == d.np.itemsize
        assert repr(d) == f"corvid.{d.name}"
    assert bool_.name == "bool" and bool_.kind == "b"
    assert [d.kind for d in INTS] == ["i"] * 4 + ["u"] * 4
    assert all(d.kind == "f" for d in FLOATS)
    assert cd.default_float is float32 and cd.default_int is int64


def test_predicates():
    for d in ALL_DTYPES:
        assert d.is_bool == (d is bool_)
        assert d.is_int == (d in INTS)
        assert d.is_unsigned == (d in UNSIGNED)
        assert d.is_float == (d in FLOATS)


def test_identity_equality_hash_and_pickle():
    assert cd.DType("float32", 4, "f") != float32
    table = {d: d.name for d in ALL_DTYPES}
    assert table[bfloat16] == "bfloat16"
    for d in ALL_DTYPES:
        assert pickle.loads(pickle.dumps(d)) is d
        assert copy.deepcopy(d) is d


def test_dtype_is_frozen():
    with pytest.raises(AttributeError):
        float32.name = "x"


# --- conversion --------------------------------------------------------------

@pytest.mark.parametrize("d", ALL_DTYPES, ids=lambda d: d.name)
def test_numpy_round_trip(d):
    assert cd.to_dtype(d) is d
    assert cd.to_dtype(d.name) is d
    assert cd.to_dtype(d.np) is d
    assert cd.to_dtype(d.np.type) is d
    assert cd.from_numpy(d.np) is d
    assert cd.from_numpy(d.np.type) is d
    assert cd.to_dtype(d).np == np.dtype(d.np.type)


def test_numpy_dtype_mapping():
    assert bfloat16.np == np.dtype(ml_dtypes.bfloat16)
    assert cd.to_dtype(ml_dtypes.bfloat16) is bfloat16
    assert bool_.np == np.dtype(np.bool_)
    assert cd.to_dtype(np.bool_) is bool_
    assert cd.to_dtype(np.dtype("int8")) is int8
    assert cd.to_dtype(np.longlong) is int64
    assert cd.to_dtype(np.intc) is int32
    assert float64.np == np.dtype(np.float64)


def test_python_types():
    assert cd.to_dtype(bool) is bool_
    assert cd.to_dtype(int) is cd.default_int
    assert cd.to_dtype(float) is cd.default_float


@pytest.mark.parametrize("bad", [
    np.clongdouble, np.dtype(">c8"), object, np.dtype(object), str,
    np.dtype("U3"), np.dtype("S2"), np.dtype("datetime64[s]"), np.longdouble,
    np.dtype(">f4"), ml_dtypes.float8_e4m3fnuz, "f32", "float", "bool_", "complex32",
    "nonsense", None, 3, np.float32(1.0), list,
], ids=repr)
def test_unsupported_raises_type_error_naming_input(bad):
    with pytest.raises(TypeError) as info:
        cd.to_dtype(bad)
    message = str(info.value)
    assert repr(bad) in message
    assert "float32" in message and "bfloat16" in message


def test_from_numpy_rejects_non_numpy_inputs():
    for bad in ("float32", float, float32, np.dtype("c32")):
        with pytest.raises(TypeError):
            cd.from_numpy(bad)


def test_python_scalar_dtype():
    assert cd.python_scalar_dtype(True) is bool_
    assert cd.python_scalar_dtype(3) is cd.default_int
    assert cd.python_scalar_dtype(3.5) is cd.default_float
    with pytest.raises(TypeError):
        cd.python_scalar_dtype("3")


# --- promotion ---------------------------------------------------------------

NUMPY_AGREES = [
    (a, b) for a, b in itertools.product(ALL_DTYPES, repeat=2)
    if {a, b} <= {bool_, *INTS} or {a, b} <= {bool_, *IEEE_FLOATS}
]


@pytest.mark.parametrize("a,b", NUMPY_AGREES, ids=repr)
def test_promotion_matches_numpy(a, b):
    expected = np.promote_types(a.np, b.np)
    assert cd.result_type(a, b).np == expected
    assert cd.promote_types(a, b).np == expected


@pytest.mark.parametrize("a,b,expected", [
    (int8, int16, int16), (uint8, int8, int16), (uint16, int16, int32),
    (uint32, int32, int64), (uint64, int64, float64), (uint64, int8, float64),
    (uint8, int64, int64), (float16, float32, float32), (bool_, int8, int8),
    (bool_, uint64, uint64), (bool_, float16, float16), (int32, float16, float16),
    (int64, float16, float16), (uint64, float32, float32), (bfloat16, float16, float32),
    (bfloat16, float32, float32), (bfloat16, float64, float64), (bfloat16, int64, bfloat16),
    (bfloat16, uint8, bfloat16), (bfloat16, bool_, bfloat16),
], ids=repr)
def test_explicit_promotion_rules(a, b, expected):
    assert cd.result_type(a, b) is expected
    assert cd.result_type(b, a) is expected
    assert cd.promote_types(a, b) is expected


def test_promote_types_is_reflexive_and_accepts_dtype_likes():
    for d in ALL_DTYPES:
        assert cd.promote_types(d, d) is d
    assert cd.promote_types("int8", np.uint8) is int16


def result_or_error(*args):
    """result_type(*args), or "TypeError" where it raises (the two 8-bit floats with no wider float)."""
    try:
        return cd.result_type(*args)
    except TypeError:
        return "TypeError"


@given(st.lists(dtypes, min_size=1, max_size=6), st.randoms())
def test_result_type_ignores_argument_order(args, rnd):
    shuffled = list(args)
    rnd.shuffle(shuffled)
    assert result_or_error(*args) is result_or_error(*shuffled)


@pytest.mark.parametrize("a,b", itertools.product(ALL_DTYPES, repeat=2), ids=repr)
def test_promotion_is_least_upper_bound(a, b):
    if {a, b} == set(FP8):  # (neither holds the other and nothing between them is a dtype)
        with pytest.raises(TypeError, match="astype"):
            cd.promote_types(a, b)
        return
    r = cd.promote_types(a, b)
    assert r is cd.promote_types(b, a)
    assert cd.can_cast(a, r) and cd.can_cast(b, r)
    if r.is_float and not (a.is_float or b.is_float):
        # Integers without a common integer type: the join is below every
        # float and is reported as float64.
        assert r is float64
        assert {a, b} & set(UNSIGNED) and {a, b} & set(SIGNED)
        return
    for c in ALL_DTYPES:
        if cd.can_cast(a, c) and cd.can_cast(b, c):
            assert cd.can_cast(r, c), f"{c} is above {a} and {b} but not above {r}"


def test_result_type_order_independent_for_all_triples():
    for triple in itertools.product(ALL_DTYPES, repeat=3):
        results = {result_or_error(*p) for p in itertools.permutations(triple)}
        assert len(results) == 1, triple


def test_result_type_reads_all_arguments_at_once():
    # Joining first and converting at the end keeps order independence.
    assert cd.result_type(uint64, int64, float16) is float16
    assert cd.result_type(uint64, int64) is float64
    assert cd.result_type(int8, uint8, bfloat16, float16) is float32


@pytest.mark.parametrize("args,expected", [
    ((int8, 1), int8), ((uint8, 300), uint8), ((bool_, 1), int64),
    ((int32, 1.0), float32), ((uint64, 1.0), float32), ((bool_, 1.0), float32),
    ((float16, 1.0), float16), ((bfloat16, 2.5), bfloat16), ((float64, 1), float64),
    ((float16, 1), float16), ((int8, True), int8), ((bool_, True), bool_),
    ((float16, False), float16), ((int8, 1, 1.0), float32), ((bool_, 1, True), int64),
    ((int8, int16, 1.0), float32), ((int8, float16, 1.0), float16),
    ((True,), bool_), ((1,), int64), ((1.0,), float32), ((True, 1), int64),
    ((1, 2.0, False), float32),
], ids=repr)
def test_weak_python_scalars(args, expected):
    assert cd.result_type(*args) is expected
    assert cd.result_type(*reversed(args)) is expected


@given(dtypes, weak_scalars)
def test_weak_scalar_only_matters_by_kind(d, scalar):
    r = cd.result_type(d, scalar)
    if isinstance(scalar, bool):
        assert r is d
    elif isinstance(scalar, int):
        assert r is (cd.default_int if d is bool_ else d)
    else:
        assert r is (d if d.is_float else cd.default_float)


def test_result_type_accepts_dtype_likes_but_numpy_scalars_are_strong():
    assert cd.result_type("int8", np.int16) is int16
    assert cd.result_type(float, int8) is float32
    with pytest.raises(TypeError):
        cd.result_type(np.float64(1.0), int8)


def test_result_type_requires_arguments():
    with pytest.raises(TypeError):
        cd.result_type()
    with pytest.raises(TypeError):
        cd.result_type(int8, "nonsense")


# --- casting -----------------------------------------------------------------

def test_can_cast_safe():
    assert cd.can_cast(int8, int16)
    assert not cd.can_cast(int16, int8)
    assert cd.can_cast(uint8, int16)
    assert not cd.can_cast(uint8, int8)
    assert not cd.can_cast(uint64, int64)
    assert cd.can_cast(bool_, float16)
    assert not cd.can_cast(float32, int64)
    assert not cd.can_cast(bfloat16, float16)
    assert cd.can_cast(bfloat16, float32)
    assert cd.can_cast(int32, float16)  # follows the promotion lattice


@pytest.mark.parametrize("a,b", NUMPY_AGREES, ids=repr)
def test_can_cast_safe_matches_numpy_where_promotion_agrees(a, b):
    assert cd.can_cast(a, b) == np.can_cast(a.np, b.np, "safe")


@pytest.mark.parametrize("a,b", [
    (a, b) for a, b in itertools.product(ALL_DTYPES, repeat=2)
    if not {a, b} & {bfloat16, *FP8}  # (ml_dtypes' own casting table says no to float8 -> float16)
], ids=repr)
def test_can_cast_same_kind_matches_numpy(a, b):
    assert cd.can_cast(a, b, "same_kind") == np.can_cast(a.np, b.np, "same_kind")


def test_can_cast_other_modes():
    assert cd.can_cast(float64, bool_, "unsafe")
    assert cd.can_cast(int8, int8, "no")
    assert not cd.can_cast(int8, int16, "no")
    assert cd.can_cast(bfloat16, float16, "same_kind")
    assert not cd.can_cast(bfloat16, int8, "same_kind")
    with pytest.raises(ValueError):
        cd.can_cast(int8, int16, "equiv")


# --- limits and reductions ---------------------------------------------------

@pytest.mark.parametrize("d", FLOATS, ids=lambda d: d.name)
def test_finfo_matches_numpy(d):
    info = cd.finfo(d)
    ref = np.finfo(d.np) if d in IEEE_FLOATS else ml_dtypes.finfo(d.np)
    assert info.dtype is d
    assert info.bits == ref.bits == 8 * d.itemsize
    assert info.eps == float(ref.eps)
    assert info.max == float(ref.max)
    assert info.min == float(ref.min) == -info.max
    assert info.smallest_normal == float(ref.smallest_normal)
    assert all(type(v) is float for v in (info.eps, info.max, info.min, info.smallest_normal))


def test_finfo_bfloat16_values():
    info = cd.finfo("bfloat16")
    assert info.eps == 2.0**-7
    assert info.smallest_normal == float(np.finfo(np.float32).smallest_normal)


@pytest.mark.parametrize("d", INTS, ids=lambda d: d.name)
def test_iinfo_matches_numpy(d):
    info = cd.iinfo(d)
    ref = np.iinfo(d.np)
    assert info.dtype is d
    assert (info.bits, info.min, info.max) == (ref.bits, int(ref.min), int(ref.max))
    assert type(info.max) is int and type(info.min) is int


def test_info_rejects_wrong_kinds():
    for d in (bool_, *INTS):
        with pytest.raises(TypeError):
            cd.finfo(d)
    for d in (bool_, *FLOATS):
        with pytest.raises(TypeError):
            cd.iinfo(d)


def test_info_is_frozen():
    with pytest.raises(AttributeError):
        cd.iinfo(int8).max = 0


@pytest.mark.parametrize("d", ALL_DTYPES, ids=lambda d: d.name)
def test_min_max_value(d):
    if d is float8_e4m3fn:  # (no infinity)
        assert (cd.min_value(d), cd.max_value(d)) == (-448.0, 448.0)
    elif d.is_float:
        assert (cd.min_value(d), cd.max_value(d)) == (float("-inf"), float("inf"))
    elif d.is_bool:
        assert cd.min_value(d) is False and cd.max_value(d) is True
    else:
        assert cd.min_value(d) == int(np.iinfo(d.np).min)
        assert cd.max_value(d) == int(np.iinfo(d.np).max)


@pytest.mark.parametrize("d", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op,ufunc", [
    ("sum", np.add), ("prod", np.multiply), ("max", np.maximum), ("min", np.minimum),
])
def test_reduce_identity_is_neutral(d, op, ufunc):
    identity = cd.reduce_identity(d, op)
    expected_type = bool if d.is_bool else float if d.is_float else int
    assert type(identity) is expected_type
    values = np.array([0, 1, 2] if not d.is_bool else [False, True], dtype=d.np)
    if d.is_float:
        extremes = [-448.0, 448.0] if d is float8_e4m3fn else [float("inf"), float("-inf")]
        values = np.concatenate([values, [-3.5, *extremes]]).astype(d.np)
    for v in values:
        combined = ufunc(v, np.array(identity).astype(d.np))
        assert combined == v


def test_reduce_identity_values():
    assert cd.reduce_identity(bool_, "sum") is False
    assert cd.reduce_identity(bool_, "prod") is True
    assert cd.reduce_identity(int8, "max") == -128
    assert cd.reduce_identity(uint16, "min") == 65535
    assert cd.reduce_identity(float16, "max") == float("-inf")
    with pytest.raises(ValueError):
        cd.reduce_identity(int8, "mean")


@pytest.mark.parametrize("d", ALL_DTYPES, ids=lambda d: d.name)
def test_sum_dtype_matches_numpy(d):
    if d is bfloat16:
        assert cd.sum_dtype(d) is bfloat16
        return
    expected = np.add.reduce(np.ones(2, dtype=d.np)).dtype
    assert cd.sum_dtype(d).np == expected
    assert cd.sum_dtype(d).np == np.multiply.reduce(np.ones(2, dtype=d.np)).dtype
