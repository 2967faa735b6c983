"""corvid.frame against pandas on the same inputs: hypothesis-generated frames with nulls,
duplicate keys and groups left without values, plus empty frames and the error messages.

Frame sizes are drawn from a few fixed row counts: every new length compiles new kernels (about
0.1 s each), so a handful of sizes keeps the suite fast while covering 0 rows, 1 row and many."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import corvid as cv
import corvid.frame as cf
from corvid.frame import col

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True)
SIZES = [0, 1, 6, 13]


# --- helpers -------------------------------------------------------------------------------------
def _missing(v) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v))


def same_values(got: list, want: list, rtol: float = 1e-9) -> bool:
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if _missing(a) or _missing(b):
            if not (_missing(a) and _missing(b)):
                return False
        elif isinstance(a, float) or isinstance(b, float):
            if not math.isclose(float(a), float(b), rel_tol=rtol, abs_tol=1e-12):
                return False
        elif a != b:
            return False
    return True


def assert_matches(frame: cf.DataFrame, want: pd.DataFrame, rtol: float = 1e-9) -> None:
    """Same columns, same rows, values equal (nulls = NaN/NA/None, floats within rtol)."""
    got = frame.to_dict()
    assert list(got) == [str(c) for c in want.columns], (list(got), list(want.columns))
    for name in got:
        expected = [None if _missing(v) else v for v in want[name].tolist()]
        assert same_values(got[name], expected, rtol), f"column {name}: {got[name]} != {expected}"


def pandas_of(data: dict) -> pd.DataFrame:
    """The pandas frame of the same lists (nullable integers as Int64, floats with NaN)."""
    out = {}
    for k, v in data.items():
        if v and all(isinstance(x, int) or x is None for x in v) and not all(x is None for x in v):
            out[k] = pd.array(v, dtype="Int64")
        elif v and all(isinstance(x, str) or x is None for x in v):
            out[k] = pd.Series(v, dtype=object)
        else:
            out[k] = pd.Series([np.nan if x is None else x for x in v], dtype="float64")
    return pd.DataFrame(out)


def _column(n: int, values: st.SearchStrategy, nulls: bool = True) -> st.SearchStrategy:
    item = st.one_of(st.none(), values) if nulls else values
    return st.lists(item, min_size=n, max_size=n)


@st.composite
def tables(draw, n=None, key_nulls=True):
    """k (int keys 0..3), s (str keys), x (floats), i (ints); nulls everywhere."""
    n = draw(st.sampled_from(SIZES)) if n is None else n
    return {
        "k": draw(_column(n, st.integers(0, 3), key_nulls)),
        "s": draw(_column(n, st.sampled_from(["a", "b", "c"]), key_nulls)),
        "x": draw(_column(n, st.floats(-100, 100, allow_nan=False).map(lambda v: round(v, 3)))),
        "i": draw(_column(n, st.integers(-50, 50))),
    }


def frame_of(data: dict) -> cf.DataFrame:
    types = {"k": "int64", "s": "str", "x": "float64", "i": "int64"}
    return cf.DataFrame({k: cf.Series(k, v, dtype=types[k]) for k, v in data.items()})


# --- construction and types ---------------------------------------------------------------------------
def test_columns_hold_types_and_null_masks():
    df = cf.DataFrame({"i": [1, None, 3], "f": np.array([1.5, 2.5, np.nan]), "b": [True, None, False],
                       "s": ["x", "y", None], "t": np.array(["2024-01-01", "NaT", "2024-03-01"], dtype="datetime64[s]"),
                       "c": cv.arange(3)})
    assert df.schema == {"i": "int64", "f": "float64", "b": "bool", "s": "str", "t": "datetime[s]", "c": "int64"}
    assert df["i"].to_list() == [1, None, 3]
    assert math.isnan(df["f"].to_list()[2])  # NaN is a value, not a null
    assert df["f"].null_count() == 0 and df["i"].null_count() == 1
    assert df["s"]._col.categories.tolist() == ["x", "y"]  # the sorted dictionary
    assert df["t"].to_list()[1] is None
    assert df["b"].to_list() == [True, None, False]


def test_construction_errors_name_the_column():
    with pytest.raises(ValueError, match="column 'b' has 2 rows, expected 3"):
        cf.DataFrame({"a": [1, 2, 3], "b": [1, 2]})
    with pytest.raises(TypeError, match="share one type"):
        cf.DataFrame({"a": [1, "x"]})
    df = cf.DataFrame([{"a": 1, "b": "x"}, {"a": 2}])
    assert df.to_dict() == {"a": [1, 2], "b": ["x", None]}
    assert cf.DataFrame({"a": [1, 2], "one": 1.5}).to_dict()["one"] == [1.5, 1.5]


def test_unknown_columns_suggest_the_closest_name():
    df = cf.DataFrame({"price": [1.0], "quantity": [2]})
    for fn in (lambda: df["prise"], lambda: df.select("quantty"), lambda: df.filter(col("prce") > 1),
               lambda: df.group_by("pric").sum(), lambda: df.sort("quantiti"), lambda: df.drop("prices")):
        with pytest.raises(KeyError, match="did you mean") as e:
            fn()
        assert isinstance(e.value, cf.ColumnNotFoundError) and e.value.suggestion in ("price", "quantity")
    with pytest.raises(KeyError, match="no column named 'zzz'; \\(|no column named 'zzz' \\(") as e:
        df["zzz"]
    assert e.value.suggestion is None


# --- elementwise ------------------------------------------------------------------------------------
def test_arithmetic_follows_pandas_types():
    df = cf.DataFrame({"i": np.array([1, 2, 3]), "j": np.array([2, 2, 0]), "f": np.array([1.0, 2.0, 3.0], np.float32)})
    assert (df.i / df.j).dtype.name == "float64"
    assert (df.i / df.j).to_list() == [0.5, 1.0, float("inf")]
    assert (df.i + 0.5).dtype.name == "float64"
    assert (df.f + 0.5).dtype.name == "float32"
    assert (df.i * 2).dtype.name == "int64"
    assert (df.i // df.j).to_list()[:2] == [0, 1]
    assert (2 - df.i).to_list() == [1, 0, -1]
    with pytest.raises(TypeError, match="cannot apply \\+ to str and int64"):
        cf.DataFrame({"s": ["a"], "i": [1]}).select(col("s") + col("i"))


@SETTINGS
@given(tables())
def test_elementwise_and_kleene_logic_against_pandas(data):
    df, pdf = frame_of(data), pandas_of(data)
    got = df.select((col("x") * 2 + col("i")).alias("y"), (col("i") > 0).alias("pos"),
                    ((col("k") > 1) & (col("i") < 10)).alias("both"), ((col("k") > 1) | (col("i") < 10)).alias("any"),
                    col("s").is_null().alias("null"), col("x").fill_null(-1.0).alias("filled"),
                    col("s").is_in(["a", "c"]).alias("isin"), (col("s") == "b").alias("eq"))
    k = pdf["k"].astype("Int64")
    i = pdf["i"].astype("Int64")
    want = pd.DataFrame({
        "y": pdf["x"] * 2 + i.astype("Float64"),
        "pos": i > 0,
        "both": (k > 1) & (i < 10),
        "any": (k > 1) | (i < 10),
        "null": pdf["s"].isna(),
        "filled": pdf["x"].fillna(-1.0),
        "isin": pdf["s"].isin(["a", "c"]).where(pdf["s"].notna(), None),
        "eq": (pdf["s"] == "b").where(pdf["s"].notna(), None),
    })
    assert_matches(got, want)


# --- filter -----------------------------------------------------------------------------------------
@SETTINGS
@given(tables())
def test_filter_against_pandas(data):
    df, pdf = frame_of(data), pandas_of(data)
    got = df.filter(col("x") > 0, col("s") != "c")
    mask = ((pdf["x"] > 0) & (pdf["s"] != "c") & pdf["s"].notna()).fillna(False).astype(bool)
    assert_matches(got, pdf[mask].reset_index(drop=True))
    assert_matches(df[df.i >= 0], pdf[(pdf["i"] >= 0).fillna(False).astype(bool)].reset_index(drop=True))


def test_filter_then_group_by_never_moves_rows(monkeypatch):
    """The filter stays a mask through the group-by: no compaction (which would synchronize and
    gather every column) happens; the rows filtered out are dropped inside the scatters."""
    import corvid.frame.frame as frame_module

    df = cf.DataFrame({"k": [1, 2, 1, 2, 3], "x": [1.0, 2.0, 3.0, 4.0, 5.0]})
    monkeypatch.setattr(frame_module, "compact_index", lambda keep: (_ for _ in ()).throw(AssertionError("compacted")))
    out = df.filter(col("x") > 1.5).group_by("k").agg(col("x").sum(), n=("x", "count"))
    assert out.to_dict() == {"k": [1, 2, 3], "x": [3.0, 6.0, 5.0], "n": [1, 2, 1]}
    filtered = df.filter(col("x") > 1.5)
    assert filtered._keep is not None  # still a mask


# --- group-by ---------------------------------------------------------------------------------------
AGGS = ["sum", "mean", "min", "max", "count", "std", "var", "first", "last", "median"]


@SETTINGS
@given(tables(), st.sampled_from([["k"], ["s"], ["k", "s"]]), st.booleans())
def test_group_by_against_pandas(data, keys, filtered):
    df, pdf = frame_of(data), pandas_of(data)
    if filtered:  # a filter first: groups whose rows were all filtered out disappear
        df = df.filter(col("i") > -20)
        pdf = pdf[(pdf["i"] > -20).fillna(False).astype(bool)]
    got = df.group_by(*keys).agg(**{f"x_{a}": ("x", a) for a in AGGS}, i_sum=("i", "sum"), i_max=("i", "max"),
                                  s_n=("s", "count"))
    grouped = pdf.groupby(keys, dropna=True, sort=True)
    want = grouped.agg(**{f"x_{a}": ("x", a) for a in AGGS}, i_sum=("i", "sum"), i_max=("i", "max"),
                       s_n=("s", "count")).reset_index()
    assert_matches(got, want, rtol=1e-7)


@SETTINGS
@given(tables())
def test_group_by_keeps_null_keys_with_dropna_false_and_first_appearance_order(data):
    df, pdf = frame_of(data), pandas_of(data)
    got = df.group_by("s", dropna=False).agg(col("x").sum(), n=("k", "size"))
    want = pdf.groupby("s", dropna=False, sort=True).agg(x=("x", "sum"), n=("k", "size")).reset_index()
    assert_matches(got, want)
    got = df.group_by("k", sort=False).agg(col("i").max())
    want = pdf.groupby("k", sort=False).agg(i=("i", "max")).reset_index()
    assert_matches(got, want)


def test_group_by_shortcuts_expressions_and_sparse_keys():
    df = cf.DataFrame({"id": [10**12, 5, 10**12, 5, 7], "x": [1.0, 2.0, 3.0, 4.0, 5.0], "y": [1, 1, 1, 1, 2]})
    assert df.group_by("id").sum().to_dict() == {"id": [5, 7, 10**12], "x": [6.0, 5.0, 4.0], "y": [2, 2, 2]}
    out = df.group_by((col("y") * 10).alias("yy")).agg((col("x").sum() / col("x").count()).alias("avg"))
    assert out.to_dict() == {"yy": [10, 20], "avg": [2.5, 5.0]}
    f = cf.DataFrame({"g": [0.5, -0.0, 0.0, 0.5], "v": [1, 2, 3, 4]})  # float keys: -0.0 equals 0.0
    assert f.group_by("g").sum().to_dict() == {"g": [0.0, 0.5], "v": [5, 5]}
    with pytest.raises(ValueError, match="does not aggregate"):
        df.group_by("id").agg(col("x"))
    with pytest.raises(TypeError, match="mean of a str column"):
        cf.DataFrame({"k": [1], "s": ["a"]}).group_by("k").agg(col("s").mean())


def test_empty_frames_group_sort_join_describe():
    df = cf.DataFrame({"k": cf.Series("k", [], dtype="int64"), "x": cf.Series("x", [], dtype="float64")})
    assert df.shape == (0, 2)
    assert df.group_by("k").agg(col("x").sum()).to_dict() == {"k": [], "x": []}
    assert df.sort("x").to_dict() == {"k": [], "x": []}
    assert df.join(cf.DataFrame({"k": [1], "y": [2]}), on="k", how="left").to_dict() == {"k": [], "x": [], "y": []}
    assert df.describe()["x"].to_list()[:2] == [0.0, 0.0]
    assert df.filter(col("x") > 0).shape == (0, 2)
    assert "0 rows" in repr(df)
    assert df["x"].sum() == 0.0 and df["x"].mean() is None and df["x"].max() is None


# --- sort -------------------------------------------------------------------------------------------
@SETTINGS
@given(tables(), st.sampled_from([(["k"], [False]), (["s", "x"], [True, False]), (["i", "k"], [False, True])]))
def test_sort_against_pandas(data, spec):
    keys, desc = spec
    df, pdf = frame_of(data), pandas_of(data)
    got = df.sort(keys, descending=desc)
    want = pdf.sort_values(keys, ascending=[not d for d in desc], kind="stable", na_position="last")
    assert_matches(got, want.reset_index(drop=True))


# --- joins ------------------------------------------------------------------------------------------
@SETTINGS
@given(tables(key_nulls=False), tables(key_nulls=False), st.sampled_from(["inner", "left", "right", "outer"]),
       st.sampled_from([["k"], ["k", "s"]]))
def test_join_against_pandas(left, right, how, on):
    lf, rf = frame_of(left), frame_of(right).rename({"x": "y", "i": "j"})
    lp, rp = pandas_of(left), pandas_of(right).rename(columns={"x": "y", "i": "j"})
    got = lf.join(rf, on=on, how=how)
    want = lp.merge(rp, on=on, how=how, suffixes=("", "_right"))
    order = list(want.columns)
    assert got.columns == order
    by = order
    got_sorted = got.sort(by)
    want_sorted = want.sort_values(by, kind="stable", na_position="last").reset_index(drop=True)
    assert_matches(got_sorted, want_sorted)


def test_join_order_nulls_and_type_errors():
    left = cf.DataFrame({"k": [3, 1, None, 1], "v": [1, 2, 3, 4]})
    right = cf.DataFrame({"k": [1, None, 3], "w": ["a", "n", "c"]})
    assert left.join(right, on="k").to_dict() == {"k": [3, 1, 1], "v": [1, 2, 4], "w": ["c", "a", "a"]}
    # a null key matches nothing, not even a null
    assert left.join(right, on="k", how="left")["w"].to_list() == ["c", "a", None, "a"]
    assert left.join(right, on="k", how="semi")["v"].to_list() == [1, 2, 4]
    assert left.join(right, on="k", how="anti")["v"].to_list() == [3]
    dates = cf.DataFrame({"k": np.array(["2024-01-01"], dtype="datetime64[s]")})
    with pytest.raises(TypeError, match="'k' is int64 on the left but 'k' is datetime\\[s\\] on the right"):
        left.join(dates, on="k")
    with pytest.raises(TypeError, match="str on the right"):
        left.join(cf.DataFrame({"k": ["1"]}), on="k")
    with pytest.raises(KeyError, match="did you mean 'k'"):
        left.join(right, left_on="kk", right_on="k")
    other = cf.DataFrame({"key": [1, 3], "v": [10, 30]})  # different key names: both kept, suffixes
    out = left.join(other, left_on="k", right_on="key")
    assert out.columns == ["k", "v", "key", "v_right"] and out["v_right"].to_list() == [30, 10, 10]


def test_join_on_strings_merges_the_dictionaries():
    a = cf.DataFrame({"city": ["Oslo", "Lima", "Rome"], "x": [1, 2, 3]})
    b = cf.DataFrame({"city": ["Rome", "Bern", "Oslo"], "pop": [2.8, 0.1, 0.7]})
    assert a.join(b, on="city").to_dict() == {"city": ["Oslo", "Rome"], "x": [1, 3], "pop": [0.7, 2.8]}


# --- reshaping --------------------------------------------------------------------------------------
@SETTINGS
@given(tables(), tables())
def test_concat_against_pandas(a, b):
    got = cf.concat([frame_of(a), frame_of(b)])
    want = pd.concat([pandas_of(a), pandas_of(b)], ignore_index=True)
    assert_matches(got, want)


def test_concat_errors_and_diagonal():
    with pytest.raises(ValueError, match="missing \\['b'\\]"):
        cf.concat([cf.DataFrame({"a": [1], "b": [2]}), cf.DataFrame({"a": [1]})])
    with pytest.raises(TypeError, match="cannot combine columns of types int64, str"):
        cf.concat([cf.DataFrame({"a": [1]}), cf.DataFrame({"a": ["x"]})])
    out = cf.concat([cf.DataFrame({"a": [1]}), cf.DataFrame({"b": ["x"]})], how="diagonal")
    assert out.to_dict() == {"a": [1, None], "b": [None, "x"]}


@SETTINGS
@given(tables(key_nulls=False))
def test_pivot_and_melt_against_pandas(data):
    df, pdf = frame_of(data), pandas_of(data)
    got = df.pivot(index="k", columns="s", values="x", aggregate="sum")
    want = pdf.pivot_table(index="k", columns="s", values="x", aggfunc="sum", dropna=False)
    want = want.reindex(columns=sorted(set(pdf["s"]))).reset_index()
    want.columns = [str(c) for c in want.columns]
    # pandas fills a (k, s) pair without rows with NaN, and one whose values are all null with 0
    present = pdf.groupby(["k", "s"]).size()
    for name in want.columns[1:]:
        want[name] = [v if (k, name) in present.index else np.nan for k, v in zip(want["k"], want[name])]
    assert_matches(got, want)
    long = df.melt(id_vars="k", value_vars=["x", "i"])
    want = pdf.melt(id_vars="k", value_vars=["x", "i"])
    assert_matches(long, want)


def test_unique_and_dummies():
    df = cf.DataFrame({"a": [2, 1, 2, 1], "b": ["x", "y", "x", None]})
    assert df.unique().to_dict() == {"a": [2, 1, 1], "b": ["x", "y", None]}
    assert df.unique("a", keep="last").to_dict() == {"a": [2, 1], "b": ["x", None]}
    assert df.to_dummies().to_dict() == {"a": [2, 1, 2, 1], "b_x": [1, 0, 1, 0], "b_y": [0, 1, 0, 0]}
    assert df["a"].unique().to_list() == [1, 2]
    assert df["b"].value_counts().to_dict() == {"b": ["x", "y", None], "count": [2, 1, 1]}


# --- nulls, describe, windows ----------------------------------------------------------------------------
@SETTINGS
@given(tables())
def test_nulls_against_pandas(data):
    df, pdf = frame_of(data), pandas_of(data)
    assert_matches(df.drop_nulls(), pdf.dropna().reset_index(drop=True))
    assert_matches(df.drop_nulls(["x", "s"]), pdf.dropna(subset=["x", "s"]).reset_index(drop=True))
    assert_matches(df.fill_null(strategy="forward"), pdf.ffill())
    assert_matches(df.fill_null(strategy="backward"), pdf.bfill())
    assert_matches(df.fill_null({"x": 0.0, "i": 7}), pdf.fillna({"x": 0.0, "i": 7}))
    assert df.null_count().to_dict() == {k: [int(v)] for k, v in pdf.isna().sum().items()}


@SETTINGS
@given(tables())
def test_describe_against_pandas(data):
    df, pdf = frame_of(data), pandas_of(data)
    got = df.describe().to_dict()
    for name in ("x", "i", "k"):
        s = pdf[name].astype("float64")
        if s.notna().sum() == 0:
            continue
        want = s.describe()
        stats = dict(zip(got["statistic"], got[name]))
        for stat in ("count", "mean", "std", "min", "25%", "50%", "75%", "max"):
            assert same_values([stats[stat]], [float(want[stat])], 1e-9), (name, stat, stats[stat], want[stat])
        assert stats["null_count"] == float(s.isna().sum())


@SETTINGS
@given(tables(), st.sampled_from([1, 2, 3]))
def test_rolling_against_pandas(data, window):
    df, pdf = frame_of(data), pandas_of(data)
    for how in ("sum", "mean", "min", "max", "std", "count"):
        got = getattr(df.rolling(window), how)(["x"])["x"].to_list()
        want = getattr(pdf["x"].rolling(window), how)().tolist()
        assert same_values(got, want, 1e-7), (how, got, want)
    t = np.cumsum(np.arange(len(data["x"])) % 3)  # a sorted column with repeats and gaps
    timed = df.with_columns(t=cf.Series("t", t.astype("datetime64[D]").astype("datetime64[s]")))
    ptimed = pdf.assign(t=t.astype("datetime64[D]").astype("datetime64[s]")).set_index("t")
    for how in ("sum", "mean", "max", "count"):
        got = getattr(timed.rolling("2d", on="t"), how)(["x"])["x"].to_list()
        want = getattr(ptimed["x"].rolling("2D"), how)().tolist()
        assert same_values(got, want, 1e-7), (how, got, want)


def test_rolling_needs_a_sorted_column():
    df = cf.DataFrame({"t": [3, 1, 2], "x": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="'t' is not sorted ascending"):
        df.rolling(2, on="t").sum()
    with pytest.raises(ValueError, match="number of rows"):
        df.rolling(0).sum()


# --- strings, datetimes --------------------------------------------------------------------------------
def test_string_and_datetime_functions_against_pandas():
    values = ["Oslo ", "lima", None, "Oslo ", "Bern"]
    s, p = cf.Series("c", values), pd.Series(values, dtype=object)
    assert s.str.strip().str.upper().to_list() == [None if _missing(v) else v for v in p.str.strip().str.upper()]
    assert same_values(s.str.len().to_list(), p.str.len().tolist())
    assert same_values(s.str.contains("li").to_list(), p.str.contains("li").tolist())
    stamps = np.array(["2024-02-29T13:45:07", "1969-12-31T23:59:59", "2000-01-01T00:00:00", "1900-03-01T06:00:00",
                       "NaT"], dtype="datetime64[s]")
    t, pt = cf.Series("t", stamps), pd.Series(stamps)
    for part in ("year", "month", "day", "hour", "minute", "second", "weekday", "day_of_year"):
        got = getattr(t.dt, part)().to_list()
        want = getattr(pt.dt, {"weekday": "day_of_week"}.get(part, part)).tolist()
        assert same_values(got, want), (part, got, want)
    df = cf.DataFrame({"t": stamps})
    gap = df.select((col("t") - col("t").min()).alias("gap"))["gap"]
    assert gap.dtype.name == "duration[s]"
    days = (stamps[:4] - stamps[:4].min()) // np.timedelta64(1, "D")
    assert gap.dt.days().to_list()[:4] == days.tolist()
    assert df.filter(col("t") >= "2000-01-01")["t"].dt.year().to_list() == [2024, 2000]


# --- display -----------------------------------------------------------------------------------------
def test_display_computes_only_the_rows_it_shows():
    df = cf.DataFrame({"x": cv.arange(100_000).astype(cv.float64) / 4, "s": ["ab"] * 100_000})
    text = repr(df)
    assert text.splitlines()[0] == "DataFrame: 100,000 rows x 2 columns"
    assert "…" in text and "24999.8" in text and "null" not in text
    html = df.filter(col("x") > 24_999)._repr_html_()
    assert "<table" in html and "float64" in html and "3 rows x 2 columns" in html
    s = cf.Series("v", [1.5, None])
    assert "null" in repr(s) and "Series 'v'" in repr(s)


def test_shift_and_diff_follow_the_kept_rows_against_pandas():
    data = {"x": [1.0, 4.0, None, 9.0, 16.0], "k": [1, 2, 3, 4, 5]}
    df, pdf = cf.DataFrame(data), pd.DataFrame(data)
    got = df.select(col("x").shift().alias("a"), col("x").shift(-2).alias("b"), col("x").diff().alias("c"))
    want = pd.DataFrame({"a": pdf["x"].shift(), "b": pdf["x"].shift(-2), "c": pdf["x"].diff()})
    assert_matches(got, want)
    kept = df.filter(col("k") != 2).with_columns(prev=col("k").shift())  # neighbours among the kept rows
    assert kept["prev"].to_list() == [None, 1, 3, 4]
    assert df["k"].shift(7).to_list() == [None] * 5
