"""Table workloads of issue 31: corvid.frame against pandas and polars, in the same process.

* ``frame_groupby_1k`` / ``frame_groupby_1m``: the sum of a float64 column grouped by an int64
  key, 10M rows over 1k and over 1M distinct keys (uniform);
* ``frame_filter``: the rows of a 10M-row, 3-column table where a float column is above 0.5
  (half of them), every column gathered;
* ``frame_join``: an inner join of 1M rows with 1M keys drawn from [0, 1M) onto a 1M-row table
  whose keys are a permutation of [0, 1M), a payload column on each side;
* ``frame_csv``: reading a ~1 GB CSV file (an int, two floats and a string column of 100
  distinct values) into a table.

``--quick`` sizes are 1/100 (10 MB of CSV). Each call builds the result from the inputs and
computes it fully (corvid: ``realize``). The steady-state calls of the three libraries take turns
(:func:`benchmarks.harness.time_interleaved`), and corvid's result is checked against pandas'.
The target is corvid at least as fast as pandas on every row (``vs pandas`` >= 1.0); polars'
figure is printed as the one to chase.

Run only these: ``python -m benchmarks --only frame`` (``--quick`` for a smoke run); a plain
``python -m benchmarks`` runs them after the other sections (the harness calls :func:`measure`
then :func:`report`, as for every report section of its own).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from .harness import Timing, time_interleaved

PEERS = ("pandas", "polars")
TARGET = 1.0  # pandas' time / corvid's, on every row


@dataclass
class FrameWorkload:
    name: str
    description: str
    # (quick, scratch folder) -> {library: call}, each call returning its finished result
    prepare: Callable[[bool, str], dict[str, Callable[[], Any]]]
    # (corvid's result, pandas' result) -> None when they agree, else what differs
    check: Callable[[Any, Any], str | None]


@dataclass
class FrameRow:
    workload: FrameWorkload
    timings: dict[str, Timing] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def ratio(self, peer: str) -> float | None:
        if peer not in self.timings or "corvid" not in self.timings:
            return None
        return self.timings[peer].median_s / self.timings["corvid"].median_s


def _rows(quick: bool, full: int) -> int:
    return full // 100 if quick else full


def _libraries() -> dict[str, Any]:
    libs = {}
    for name in PEERS:
        if importlib.util.find_spec(name) is not None:
            libs[name] = __import__(name)
    return libs


# --- workloads ----------------------------------------------------------------------------------
def _groupby(keys: int) -> Callable[[bool, str], dict[str, Callable[[], Any]]]:
    def prepare(quick: bool, scratch: str) -> dict[str, Callable[[], Any]]:
        import corvid.frame as cf

        n = _rows(quick, 10_000_000)
        k = min(keys, n)
        rng = np.random.default_rng(0)
        key, x = rng.integers(0, k, n), rng.random(n)
        df = cf.DataFrame({"k": key, "x": x}).realize()
        calls = {"corvid": lambda: df.group_by("k").agg(cf.col("x").sum()).realize()}
        libs = _libraries()
        if "pandas" in libs:
            pdf = libs["pandas"].DataFrame({"k": key, "x": x})
            calls["pandas"] = lambda: pdf.groupby("k")["x"].sum()
        if "polars" in libs:
            pl = libs["polars"]
            plf = pl.DataFrame({"k": key, "x": x})
            calls["polars"] = lambda: plf.group_by("k").agg(pl.col("x").sum())
        return calls

    return prepare


def _check_groupby(got: Any, want: Any) -> str | None:
    if got["k"].to_list() != want.index.tolist():
        return "the groups differ from pandas'"
    if not np.allclose(got["x"].to_numpy(), want.to_numpy(), rtol=1e-9):
        return "the sums differ from pandas'"
    return None


def _filter(quick: bool, scratch: str) -> dict[str, Callable[[], Any]]:
    import corvid.frame as cf

    n = _rows(quick, 10_000_000)
    rng = np.random.default_rng(1)
    data = {"k": rng.integers(0, 1000, n), "x": rng.random(n), "y": rng.random(n).astype(np.float32)}
    df = cf.DataFrame(data).realize()
    calls = {"corvid": lambda: df.filter(cf.col("x") > 0.5).realize()}
    libs = _libraries()
    if "pandas" in libs:
        pdf = libs["pandas"].DataFrame(data)
        calls["pandas"] = lambda: pdf[pdf["x"] > 0.5]
    if "polars" in libs:
        pl = libs["polars"]
        plf = pl.DataFrame(data)
        calls["polars"] = lambda: plf.filter(pl.col("x") > 0.5)
    return calls


def _check_filter(got: Any, want: Any) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} rows, pandas {len(want)}"
    if not (np.array_equal(got["x"].to_numpy(), want["x"].to_numpy())
            and np.array_equal(got["k"].to_numpy(), want["k"].to_numpy())):
        return "the rows differ from pandas'"
    return None


def _join(quick: bool, scratch: str) -> dict[str, Callable[[], Any]]:
    import corvid.frame as cf

    n = _rows(quick, 1_000_000)
    rng = np.random.default_rng(2)
    left = {"k": rng.integers(0, n, n), "a": rng.random(n)}
    right = {"k": rng.permutation(n), "b": rng.random(n)}
    lf, rf = cf.DataFrame(left).realize(), cf.DataFrame(right).realize()
    calls = {"corvid": lambda: lf.join(rf, on="k").realize()}
    libs = _libraries()
    if "pandas" in libs:
        pd = libs["pandas"]
        lp, rp = pd.DataFrame(left), pd.DataFrame(right)
        calls["pandas"] = lambda: lp.merge(rp, on="k", how="inner")
    if "polars" in libs:
        pl = libs["polars"]
        ll, rl = pl.DataFrame(left), pl.DataFrame(right)
        calls["polars"] = lambda: ll.join(rl, on="k", how="inner")
    return calls


def _check_join(got: Any, want: Any) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} rows, pandas {len(want)}"
    g = np.lexsort((got["b"].to_numpy(), got["k"].to_numpy()))
    w = np.lexsort((want["b"].to_numpy(), want["k"].to_numpy()))
    if not (np.array_equal(got["k"].to_numpy()[g], want["k"].to_numpy()[w])
            and np.array_equal(got["a"].to_numpy()[g], want["a"].to_numpy()[w])):
        return "the joined rows differ from pandas'"
    return None


def _write_csv(path: str, rows: int) -> None:
    """~45 bytes a row: an int, two floats (one of full precision), a name of 100."""
    rng = np.random.default_rng(3)
    names = np.array([f"name_{i:03d}" for i in range(100)])
    chunk = 1_000_000
    with open(path, "w") as f:
        f.write("id,x,y,name\n")
        for start in range(0, rows, chunk):
            m = min(chunk, rows - start)
            ids = np.arange(start, start + m)
            x = rng.random(m)
            y = np.round(rng.normal(0, 100, m), 3)
            s = names[rng.integers(0, 100, m)]
            lines = np.char.add(np.char.add(np.char.add(np.char.add(np.char.add(np.char.add(
                ids.astype(str), ","), x.astype(str)), ","), y.astype(str)), ","), s)
            f.write("\n".join(lines.tolist()))
            f.write("\n")


def _csv(quick: bool, scratch: str) -> dict[str, Callable[[], Any]]:
    import corvid.frame as cf

    path = os.path.join(scratch, "frame_bench.csv")
    rows = _rows(quick, 22_000_000)
    if not os.path.exists(path):
        _write_csv(path, rows)
    calls = {"corvid": lambda: cf.read_csv(path, progress=False).realize()}
    libs = _libraries()
    if "pandas" in libs:
        calls["pandas"] = lambda: libs["pandas"].read_csv(path)
    if "polars" in libs:
        calls["polars"] = lambda: libs["polars"].read_csv(path)
    return calls


def _check_csv(got: Any, want: Any) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} rows, pandas {len(want)}"
    if not (np.array_equal(got["x"].to_numpy(), want["x"].to_numpy())
            and got["name"].to_list()[:1000] == want["name"].tolist()[:1000]):
        return "the values differ from pandas'"
    return None


WORKLOADS = [
    FrameWorkload("frame_groupby_1k", "group-by sum, 10M rows, 1k int64 keys", _groupby(1_000), _check_groupby),
    FrameWorkload("frame_groupby_1m", "group-by sum, 10M rows, 1M int64 keys", _groupby(1_000_000), _check_groupby),
    FrameWorkload("frame_filter", "filter x > 0.5 of 10M rows x 3 columns", _filter, _check_filter),
    FrameWorkload("frame_join", "inner join, 1M x 1M rows (unique right keys)", _join, _check_join),
    FrameWorkload("frame_csv", "read a CSV of 22M rows (~1 GB), 4 columns", _csv, _check_csv),
]


# --- running and reporting ---------------------------------------------------------------------
def run_workload(wl: FrameWorkload, repeat: int, budget_s: float, quick: bool, scratch: str, log: TextIO) -> FrameRow:
    row = FrameRow(wl)
    calls = wl.prepare(quick, scratch)
    results: dict[str, Any] = {}

    def keep(name: str, call: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            results[name] = call()
        return run

    def failed(name: str, e: Exception) -> None:
        print(f"  {wl.name:<18} {name:<7} ERROR {type(e).__name__}: {e}", file=log)
        if name == "corvid":
            row.failures.append(f"raised {type(e).__name__}: {e}")

    row.timings = time_interleaved({k: keep(k, c) for k, c in calls.items()}, repeat, budget_s, failed)
    for name, t in row.timings.items():
        note = " (one call only: slower than --budget)" if t.only_first else ""
        print(f"  {wl.name:<18} {name:<7} first {t.first_s * 1e3:10.1f} ms   median {t.median_s * 1e3:10.1f} ms"
              f"  ({len(t.runs_s)} runs){note}", file=log, flush=True)
    if "corvid" in results and "pandas" in results:
        problem = wl.check(results["corvid"], results["pandas"])
        if problem:
            row.failures.append(problem)
            print(f"FAIL {wl.name}: corvid {problem}", file=log, flush=True)
    return row


def format_table(rows: list[FrameRow]) -> str:
    header = ["workload", "corvid ms", "pandas ms", "polars ms", "vs pandas", "vs polars",
              f"target >= {TARGET:g}x pandas", "first call ms (corvid)", "check"]
    lines = []

    def ms(r: FrameRow, n: str) -> str:
        return f"{r.timings[n].median_s * 1e3:.1f}" if n in r.timings else "-"

    def ratio(r: FrameRow, p: str) -> str:
        return "-" if r.ratio(p) is None else f"{r.ratio(p):.2f}x"

    for r in rows:
        met = r.ratio("pandas")
        goal = "-" if met is None else "met" if met >= TARGET else "MISSED"
        first = f"{r.timings['corvid'].first_s * 1e3:.1f}" if "corvid" in r.timings else "-"
        lines.append([r.workload.name, ms(r, "corvid"), ms(r, "pandas"), ms(r, "polars"), ratio(r, "pandas"),
                      ratio(r, "polars"),
                      goal, first, "FAIL" if r.failures else "ok"])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    return "\n".join([fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [fmt(x) for x in lines])


def measure(quick: bool, repeat: int = 5, budget_s: float = 10.0, out: TextIO = sys.stdout,
            only: list[str] | None = None) -> list[FrameRow]:
    """Run the table workloads (``only``: those whose name starts with one of these), printing
    each library's timings as they come; the harness then prints :func:`report`."""
    libs = _libraries()
    versions = ", ".join(f"{n} {m.__version__}" for n, m in libs.items())
    print(f"corvid.frame on {platform.machine()} with {os.cpu_count()} cores; {versions or 'no peers'}; "
          f"{'quick (1/100) sizes' if quick else 'full sizes'}", file=out, flush=True)
    missing = [p for p in PEERS if p not in libs]
    if missing:
        print(f"skipped: {', '.join(missing)} (not installed)", file=out)
    chosen = [w for w in WORKLOADS if not only or any(w.name.startswith(t) for t in only)]
    with tempfile.TemporaryDirectory(prefix="corvid-frame-bench-") as scratch:
        return [run_workload(w, repeat, budget_s, quick, scratch, out) for w in chosen]


def report(rows: list[FrameRow], out: TextIO) -> None:
    """The table of :func:`measure`'s rows; RuntimeError (the harness prints it as a FAIL line)
    when corvid's result differed from pandas' or corvid raised."""
    print(format_table(rows), file=out)
    print("ms: median of the steady-state calls (libraries taking turns). vs X: X's time / corvid's (>1: corvid "
          f"is faster). Target: >= {TARGET:g}x pandas on every row; polars' figure is the one to chase.", file=out,
          flush=True)
    failed = [f"{r.workload.name}: {'; '.join(r.failures)}" for r in rows if r.failures]
    if failed:
        raise RuntimeError("corvid.frame results differ from pandas': " + " | ".join(failed))
