"""corvid.frame's files and exchange: CSV (both engines, line numbers of bad lines, progress),
Parquet, Arrow without copies, pandas and polars round trips; a frame feeding a DataLoader, a
model's features, plots; corvid importing without the optional packages."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import corvid as cv
import corvid.frame as cf
from corvid.dlpack import export_view
from corvid.frame import col

ENGINES = ["pyarrow", "python"]
ROOT = pathlib.Path(__file__).resolve().parent.parent

CSV = ("city,temp,count,ok,day\n"
       "Oslo,3.5,10,true,2024-01-02\n"
       "Lima,,7,false,2024-01-03\n"
       '"Rome, IT",19.25,,true,\n')


@pytest.mark.parametrize("engine", ENGINES)
def test_read_csv_infers_types_and_nulls(tmp_path, engine):
    path = tmp_path / "t.csv"
    path.write_text(CSV)
    df = cf.read_csv(path, engine=engine)
    assert df.schema == {"city": "str", "temp": "float64", "count": "int64", "ok": "bool", "day": "datetime[s]"}
    assert df.to_dict()["city"] == ["Oslo", "Lima", "Rome, IT"]
    assert df["temp"].to_list() == [3.5, None, 19.25]
    assert df["count"].to_list() == [10, 7, None]
    assert df["day"].dt.day().to_list() == [2, 3, None]
    want = pd.read_csv(path)
    assert df["temp"].sum() == want["temp"].sum() and df["count"].mean() == want["count"].mean()
    typed = cf.read_csv(path, engine=engine, dtypes={"count": "float32", "temp": "str"}, columns=["temp", "count"])
    assert typed.schema == {"temp": "str", "count": "float32"}


@pytest.mark.parametrize("engine", ENGINES)
def test_malformed_csv_lines_give_their_line_number(tmp_path, engine):
    path = tmp_path / "bad.csv"
    path.write_text("a,b\n" + "".join(f"{i},{i}\n" for i in range(5000)) + "1,2,3\n7,8\n")
    with pytest.raises(cf.CSVError, match=r"bad.csv, line 5002: expected 2 fields, got 3: '1,2,3'") as e:
        cf.read_csv(path, engine=engine)
    assert e.value.line == 5002
    skipped = cf.read_csv(path, engine=engine, bad_lines="skip")
    assert len(skipped) == 5001 and skipped["a"].to_list()[-1] == 7
    path.write_text("a,b\n1,x\n2,y\n")
    with pytest.raises(cf.CSVError, match="column 'b'"):
        cf.read_csv(path, engine=engine, dtypes={"b": "int64"})
    with pytest.raises(KeyError, match="did you mean 'b'"):
        cf.read_csv(path, engine=engine, columns=["bb"])


@pytest.mark.parametrize("engine", ENGINES)
def test_csv_round_trip_and_headerless(tmp_path, engine):
    df = cf.DataFrame({"x": [0.1, None, 1e300], "s": ['say "hi"', "a,b", None], "i": [1, 2, 3],
                       "t": np.array(["2024-01-02T03:04:05", "NaT", "1999-12-31T00:00:00"], dtype="datetime64[s]")})
    path = tmp_path / "round.csv"
    df.write_csv(path)
    back = cf.read_csv(path, engine=engine)
    assert back.equals(df), (back.to_dict(), df.to_dict())
    path.write_text("1,2\n3,4\n")
    assert cf.read_csv(path, engine=engine, header=False).to_dict() == {"column_0": [1, 3], "column_1": [2, 4]}
    path.write_text("# a comment\na,b\n1,2\n")
    assert cf.read_csv(path, engine=engine, skip_rows=1).to_dict() == {"a": [1], "b": [2]}


def test_large_csv_shows_a_progress_bar_and_reads_in_blocks(tmp_path, capsys):
    path = tmp_path / "big.csv"
    rng = np.random.default_rng(0)
    x = rng.random(200_000)
    k = rng.integers(0, 100, 200_000)
    with open(path, "w") as f:
        f.write("k,x\n")
        f.write("".join(f"{a},{float(b)!r}\n" for a, b in zip(k, x)))
    df = cf.read_csv(path, progress=True, block_size=1 << 18)  # ~30 blocks
    assert "big.csv" in capsys.readouterr().err  # tqdm's bar
    assert len(df) == 200_000 and df["x"].to_numpy().tolist() == x.tolist()
    got = df.group_by("k").agg(col("x").sum())
    want = pd.DataFrame({"k": k, "x": x}).groupby("k")["x"].sum()
    np.testing.assert_allclose(got["x"].to_numpy(), want.to_numpy(), rtol=1e-12)


def test_parquet_and_arrow_share_memory(tmp_path):
    df = cf.DataFrame({"x": np.arange(5, dtype=np.float64), "n": [1, None, 3, 4, 5], "s": ["a", "b", "a", None, "c"],
                       "b": [True, False, None, True, True],
                       "t": np.arange(5).astype("datetime64[D]").astype("datetime64[ms]"),
                       "d": np.arange(5).astype("timedelta64[s]")})
    path = tmp_path / "t.parquet"
    df.write_parquet(path)
    assert cf.read_parquet(path).equals(df)
    assert cf.read_parquet(path, columns=["s"]).to_dict() == {"s": ["a", "b", "a", None, "c"]}
    table = df.to_arrow()
    # to Arrow: the numbers are the tensor's own buffer
    x_buf = table.column("x").chunk(0).buffers()[1]
    assert np.shares_memory(np.frombuffer(x_buf, np.float64), export_view(df._cols["x"].values))
    # from Arrow: the tensor is over Arrow's buffer
    source = pa.table({"v": pa.array(np.arange(1000, dtype=np.int64))})
    back = cf.from_arrow(source)
    assert np.shares_memory(export_view(back._cols["v"].values), np.frombuffer(source.column("v").chunk(0).buffers()[1],
                                                                               np.int64))
    assert back["v"].sum() == 499500
    with pytest.raises(TypeError, match="Arrow type list<item: int64> is not supported"):
        cf.from_arrow(pa.table({"l": [[1], [2]]}))


def test_pandas_and_polars_round_trips():
    pdf = pd.DataFrame({"i": pd.array([1, None, 3], dtype="Int64"), "f": [1.5, np.nan, 2.0],
                        "s": ["x", None, "y"], "c": pd.Categorical(["u", "v", "u"]), "b": [True, False, True],
                        "t": pd.to_datetime(["2024-01-01", None, "2024-01-03"])})
    df = cf.from_pandas(pdf)
    assert df.schema["i"] == "int64" and df.schema["c"] == "str" and df.schema["t"].startswith("datetime")
    assert df.to_dict()["f"] == [1.5, None, 2.0]
    back = df.to_pandas()
    assert back["i"].dtype == "Int64" and back["i"].tolist()[0] == 1 and back["i"].isna().tolist() == [False, True, False]
    assert back["s"].tolist()[0] == "x" and pd.isna(back["s"].tolist()[1])
    assert df.to_pandas(categories=True)["c"].dtype == "category"
    assert cf.DataFrame(pdf).equals(df)
    plf = pl.DataFrame({"a": [1, None, 3], "s": ["p", "q", None], "f": [0.5, 1.5, None]})
    df = cf.from_polars(plf)
    assert df.to_dict() == {"a": [1, None, 3], "s": ["p", "q", None], "f": [0.5, 1.5, None]}
    out = df.to_polars()
    assert out["a"].to_list() == [1, None, 3] and out["s"].cast(pl.String).to_list() == ["p", "q", None]
    assert cf.Series("x", pd.Series([1.0, np.nan])).to_list() == [1.0, None]


def test_frame_feeds_a_model_and_a_data_loader():
    df = cf.DataFrame({"a": [0.0, 1.0, 2.0, 3.0], "b": [1, 0, 1, None], "city": ["x", "y", "x", "y"],
                       "y": [0, 1, 1, 0]})
    with pytest.raises(ValueError, match="'b' have nulls|'b' has nulls|columns 'b' have nulls"):
        df.to_tensor(["a", "b"])
    with pytest.raises(TypeError, match="'city' is str; encode it first"):
        df.to_tensor(["a", "city"])
    features = df.fill_null(0).to_dummies("city")
    x = features.to_tensor(["a", "b", "city_x", "city_y"])
    assert x.shape == (4, 4) and x.dtype == cv.float32
    assert x.tolist()[3] == [3.0, 0.0, 0.0, 1.0]
    ds = features.to_dataset(target="y")
    assert ds.feature_names == ["a", "b", "city_x", "city_y"] and len(ds) == 4
    batches = list(cv.data.DataLoader(ds, batch_size=3, shuffle=True, seed=0))
    assert [b[0].shape for b in batches] == [(3, 4), (1, 4)]
    assert sorted(v for _, y in batches for v in y.tolist()) == [0, 0, 1, 1]
    model = cv.nn.Linear(4, 2)
    logits = model(batches[0][0])
    assert logits.shape == (3, 2)


def test_frame_plot_draws_columns():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    df = cf.DataFrame({"t": np.arange(4).astype("datetime64[D]"), "a": [1.0, None, 3.0, 4.0], "b": [2, 2, 1, 0],
                       "s": ["x", "y", "x", "z"]})
    ax = df.plot.line(x="t", y=["a", "b"])
    assert [line.get_label() for line in ax.lines] == ["a", "b"] and ax.get_xlabel() == "t"
    assert np.isnan(ax.lines[0].get_ydata()[1])
    plt.close(ax.figure)
    ax = df.plot.hist("a", bins=3)
    assert sum(p.get_height() for p in ax.patches) == 3
    plt.close(ax.figure)
    ax = df.plot.scatter("a", "b", c="b")
    assert len(ax.collections[0].get_offsets()) == 4
    plt.close(ax.figure)


def test_core_imports_without_the_optional_packages(tmp_path):
    """corvid and corvid.frame import and work with pandas, pyarrow, polars and tqdm missing;
    what needs pyarrow says what to install."""
    code = (
        "import sys\n"
        "for m in ('pandas', 'pyarrow', 'polars', 'tqdm'): sys.modules[m] = None\n"
        "import corvid, corvid.frame as cf\n"
        "df = cf.DataFrame({'k': [1, 2, 1], 'x': [1.0, 2.0, 3.0]})\n"
        "assert df.group_by('k').sum().to_dict() == {'k': [1, 2], 'x': [4.0, 2.0]}\n"
        "open('t.csv', 'w').write('a,b\\n1,x\\n')\n"
        "assert cf.read_csv('t.csv').to_dict() == {'a': [1], 'b': ['x']}\n"
        "try:\n"
        "    cf.read_parquet('t.parquet')\n"
        "except ImportError as e:\n"
        "    print(e)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert 'pip install "corvid[frame]"' in out.stdout
