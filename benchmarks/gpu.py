"""The GPU report: ``python -m benchmarks --gpu``, everything a lent GPU machine should check, in
one command whose parts share a 225 s time limit (meant to finish within 4 minutes on an
H100/H200 with an empty kernel cache).

Parts, in this order, each with a time budget (a part that runs out is stopped and the report
says what it skipped), each in child processes of its own: a crash, a hang or a CUDA error that
poisons the context costs that part's current row, not the report (the table goes on in a new
child from the next row, and the failure's output tail is printed).

1. **Environment**: corvid's device (CUDA: GPU name, compute capability, memory, driver and NVRTC
   versions; else what it is), nvidia-smi's line, torch and torch.cuda, corvid's commit. A device
   that does not start ends the report there with its start error (exit status 2).
2. **CUDA tests**: pytest over the backend/GPU test files with ``-k "CUDA or cuda"`` (the tests
   with a stand-in driver and compile-only sm_90 builds, and on a GPU the real device's), in a
   subprocess with a time limit: the counts and the failing test ids.
3. **corvid vs PyTorch** (:data:`ROWS`): matmul 4096² in float32/bfloat16/float16 and in float32
   with TF32 allowed on both sides (``cv.matmul_precision("high")``), the 5-op
   elementwise chain and the sum on 64M float32, softmax and layer norm over 8192², conv2d
   32×64×56² 3×3 → 64, ``x + 1`` on 1024 elements (dispatch latency), the MNIST CNN's training
   step (batch 128, Adam; corvid jitted, torch eager), a GPT-2 block's forward (8×256×768, 12
   heads; corvid jitted, torch eager under inference_mode) and GPT-2 small's training step in
   bfloat16 mixed precision (batch 8×1024, AdamW; corvid's autocast, torch.autocast). corvid on ``--device`` and PyTorch on
   the same GPU (the CPU when corvid's device is not CUDA or torch has no CUDA), in one process,
   on the same inputs; every timed call ends in a device synchronize. PyTorch runs with TF32 off
   (matmul and cuDNN): both sides compute in float32. The first call of each (compilation, with
   the cold cache) is timed alone; then the steady-state samples of the two take turns
   (:func:`benchmarks.harness.time_interleaved`) and the table shows medians. corvid's result is
   checked against PyTorch's (numpy's without torch). ``% limit``: bandwidth rows over the
   device-to-device copy bandwidth measured in the same run (bytes read plus written, torch's
   ``copy_`` of 1 GiB), compute rows over a peak: the datasheet's dense figure for an H100/H200
   (:data:`SPEC_TFLOPS`), the CPU's measured roofline (float32, corvid/runtime/peak.py), or else
   the best PyTorch rate of that dtype in the run; the notes under the table say which.
   ``torch.compile`` runs beside eager where it compiles within its budget (its column says why
   not elsewhere). Row sizes come from the existing workloads (:mod:`benchmarks.workloads`,
   :mod:`benchmarks.training`, :mod:`benchmarks.blocks`) where they match; ``--quick`` uses
   their tiny sizes.
4. **Examples**: one epoch of ``examples/mnist.py`` on the device (``--mnist-data``, offline;
   judged against the CPU's accuracy after the same epoch), a few training steps of
   ``examples/gpt.py``'s ``GPT``/``Trainer`` (the example's small config; the loss must fall),
   then GPT-2-small (12×768) for 2 steps when time is left.

Everything is printed as it comes and written to ``--out`` (default ``gpu_report.txt``).
Exit status: 0 when everything ran and passed, 1 when a test, a check or a part failed, 2 when
the device did not start.

Without a GPU: ``--device CPU`` or ``--device CL`` runs the same report with corvid there and
PyTorch on the CPU (corvid alone, with a note, when torch is not installed); ``--quick`` uses
tiny sizes and a small test selection (tests/test_gpu_report.py runs it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import pathlib
import platform
import queue
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
PREFIX = "@@gpu-report "  # a worker's protocol lines: PREFIX + one JSON object
MB = 1 << 20
UNCHECKED = "unchecked"  # a row's check when there is nothing to check against (no torch, no numpy form)

# The test selection of part 2 (those that exist are run; the others are named in the report).
TEST_FILES = ("tests/test_backends.py", "tests/test_gpu_style.py", "tests/test_fp8.py", "tests/test_narrow_rounding.py",
              "tests/test_sharding.py", "tests/test_cuda.py", "tests/test_cuda_runtime.py",
              "tests/test_cuda_scatter.py", "tests/test_data_devices.py", "tests/test_indexing.py",
              "tests/test_devices.py", "tests/test_jit_symbolic.py", "tests/test_cublaslt.py",
              "tests/test_attention_tc.py")
QUICK_TEST_FILES = ("tests/test_cuda_runtime.py", "tests/test_data_devices.py")  # (seconds, not a minute)
TEST_FILTER = "CUDA or cuda"

# Datasheet peaks, dense (no sparsity), at the boost clock, in TFLOP/s: float32 on the CUDA cores
# (what a float32 product with TF32 off can reach), TF32, bfloat16, float16 and float8 on the tensor cores.
# Matched against the GPU's name in this order (first match wins).
SPEC_TFLOPS: list[tuple[tuple[str, ...], str, dict[str, float]]] = [
    (("H100", "NVL"), "H100 NVL", {"float32": 60.0, "tf32": 418.0, "bfloat16": 835.0, "float16": 835.0,
                                   "float8_e4m3fn": 1671.0}),
    (("H100", "PCIE"), "H100 PCIe", {"float32": 51.0, "tf32": 378.0, "bfloat16": 756.0, "float16": 756.0,
                                     "float8_e4m3fn": 1513.0}),
    (("H100",), "H100 SXM", {"float32": 67.0, "tf32": 494.0, "bfloat16": 989.0, "float16": 989.0,
                             "float8_e4m3fn": 1979.0}),
    (("H200", "NVL"), "H200 NVL", {"float32": 60.0, "tf32": 418.0, "bfloat16": 835.0, "float16": 835.0,
                                   "float8_e4m3fn": 1671.0}),
    (("H200",), "H200 SXM", {"float32": 67.0, "tf32": 494.0, "bfloat16": 989.0, "float16": 989.0,
                             "float8_e4m3fn": 1979.0}),
]

# The offline data: beside the repository (../shared/data, as here), or inside a copy of it that
# carries shared/ along (as a GPU machine's copy of the working tree may).
DATA_DIRS = (ROOT.parent / "shared" / "data", ROOT / "shared" / "data")


def _data(name: str) -> pathlib.Path:
    """The first of :data:`DATA_DIRS` holding ``name`` (else the first's path, which is absent)."""
    return next((d / name for d in DATA_DIRS if (d / name).exists()), DATA_DIRS[0] / name)


# examples/mnist.py, one epoch on the offline files (the test split: 9,000 images to train on, the
# last 1,000 to evaluate), --device CPU, seed 0: corvid's initialization draws the same values on
# every device, so a GPU's epoch should land within float rounding of this.
MNIST_CPU_ONE_EPOCH = 0.928
MNIST_SLACK = 0.01  # the GPU's accuracy may be this much lower (rounding drifts over 70 Adam steps)


# =================================================================================================
# The report (parent process)
# =================================================================================================


class Report:
    """Lines to stdout and to the ``--out`` file, as they come (the file is flushed each line, so
    a report cut short still holds everything printed)."""

    def __init__(self, path: str | None) -> None:
        self.file = open(path, "w", encoding="utf-8") if path else None
        self.problems: list[str] = []  # what makes the exit status 1

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        if self.file:
            self.file.write(text + "\n")
            self.file.flush()

    def section(self, title: str) -> None:
        self()
        self(f"== {title} ==")

    def problem(self, what: str) -> None:
        self.problems.append(what)

    def close(self) -> None:
        if self.file:
            self.file.close()


@dataclass
class ChildResult:
    rc: int | None  # None: killed (timed out)
    timed_out: bool
    seconds: float
    log: list[str]  # the last lines it printed that were not protocol messages

    def tail(self, n: int = 12) -> str:
        return "\n".join("    | " + line for line in self.log[-n:]) or "    | (no output)"


def _child_env(cache_dir: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TQDM_DISABLE", "1")
    if cache_dir:
        env["CORVID_CACHE_DIR"] = cache_dir
    return env


def run_child(cmd: list[str], timeout_s: float, env: dict[str, str],
              on_message: Callable[[dict], float | None] | None = None,
              on_line: Callable[[str], None] | None = None) -> ChildResult:
    """Run ``cmd`` (in the repository root, its own process group), reading its output as it
    comes: protocol lines go to ``on_message`` (which may return a new deadline, as a
    ``time.monotonic()`` value, e.g. when a worker starts its next row), other lines to
    ``on_line`` and to the log tail. Killed (the whole group) when the deadline passes."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    def kill() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    log: deque[str] = deque(maxlen=200)
    timed_out = False
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        try:
            line = lines.get(timeout=5.0 if timed_out else min(max(0.0, deadline - now), 1.0))
        except queue.Empty:
            now = time.monotonic()
            if timed_out:  # (killed, yet its output does not end: stop reading)
                break
            if proc.poll() is not None:  # it exited, but a process it started holds its output open
                exited_at = exited_at or now
                if now - exited_at > 2.0:
                    kill()
                    break
            elif now >= deadline:
                timed_out = True  # kill it, then read what it left (a last line without its newline)
                kill()
            continue
        if line is None:
            break
        line = line.rstrip("\n").split("\r")[-1]  # (a progress bar redraws its line with \r)
        if line.startswith(PREFIX):
            try:
                msg = json.loads(line[len(PREFIX):])
            except json.JSONDecodeError:
                log.append(line)
                continue
            new = on_message(msg) if on_message else None
            if new is not None and not timed_out:
                deadline = new
        else:
            log.append(line)
            if on_line:
                on_line(line)
    try:
        rc = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # (the group would not die: leave it, report it)
        rc = None
    return ChildResult(None if timed_out else rc, timed_out, time.monotonic() - t0, list(log))


def _worker_cmd(part: str, args: argparse.Namespace, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "benchmarks.gpu", "--worker", part, "--device", args.device]
    if args.quick:
        cmd.append("--quick")
    return cmd + list(extra)


class Clock:
    """The report's overall time limit, shared out among the parts."""

    def __init__(self, limit_s: float) -> None:
        self.t0 = time.monotonic()
        self.limit_s = limit_s

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.limit_s - self.elapsed()

    def budget(self, wanted: float, keep: float = 0.0) -> float:
        """``wanted`` seconds, or less so that ``keep`` seconds remain for the parts after."""
        return max(0.0, min(wanted, self.left() - keep))


# --- part 1: environment ------------------------------------------------------------------------


def _git_commit() -> str:
    """git's commit of the checkout; else ``$CORVID_COMMIT`` (a copy of the working tree without
    its .git, as a GPU machine may get, can be told which commit it is). A ``$CORVID_COMMIT`` that
    git's answer does not match comes first, with git's beside it (a copy with a stale .git)."""
    given = os.environ.get("CORVID_COMMIT")
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return f"{given} ($CORVID_COMMIT)" if given else "unknown (no git; set CORVID_COMMIT)"
    if out.returncode != 0:
        return f"{given} ($CORVID_COMMIT)" if given else "unknown (not a git checkout; set CORVID_COMMIT)"
    found = out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    if given and not found.startswith(given) and not given.startswith(out.stdout.strip()):
        # (a copy of the working tree whose .git is another commit's, as a lent GPU machine's was:
        # the files are the given commit's, and git's answer alone named an older one)
        return f"{given} ($CORVID_COMMIT; git in this copy says {found})"
    return found


def _nvidia_smi() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError) as e:
        return f"failed: {e}"
    return out.stdout.strip() or out.stderr.strip()


def part_environment(report: Report, args: argparse.Namespace, env: dict[str, str], clock: Clock,
                     cache_note: str) -> dict | None:
    """The header. None when corvid's device did not start (printed with its error)."""
    info: dict = {}

    def got(msg: dict) -> None:
        info.update(msg)

    res = run_child(_worker_cmd("env", args), clock.budget(args.env_timeout), env, got)
    report(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; host: {platform.node()} ({platform.machine()}, "
           f"{os.cpu_count()} cores), Python {platform.python_version()}")
    report(f"corvid {info.get('corvid', '?')} at commit {_git_commit()}; kernel cache: {cache_note}")
    smi = _nvidia_smi()
    if smi:
        report(f"nvidia-smi: {smi}")
    if "torch" in info:
        report(f"torch: {info['torch']}")
    if not info.get("started"):
        why = info.get("error") or ("timed out" if res.timed_out else f"the worker exited with {res.rc}:\n{res.tail()}")
        report(f"corvid's device {args.device} did not start: {why}")
        return None
    report(f"corvid device: {info['device_line']}")
    if info.get("blas_line"):
        report(info["blas_line"])
        if info["blas_line"].startswith("FAIL"):
            report.problem("cuBLASLt's first product failed")
    if info.get("attention_line"):
        report(info["attention_line"])
    if info.get("smoke_error"):
        report(f"FAIL first kernel on {info['device']}: {info['smoke_error']}")
        report.problem("the first kernel on the device failed")
    else:
        report(f"first kernel on {info['device']}: ok ({info['smoke_s'] * 1e3:.0f} ms, compile included)")
    return info


# --- part 2: the CUDA test selection --------------------------------------------------------------


_STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")


def part_tests(report: Report, args: argparse.Namespace, env: dict[str, str], clock: Clock) -> None:
    files = QUICK_TEST_FILES if args.quick else TEST_FILES
    present = [f for f in files if (ROOT / f).is_file()]
    missing = [f for f in files if f not in present]
    budget = clock.budget(args.tests_budget, keep=args.reserve_after_tests)
    if args.no_tests or budget < 10 or not present:
        why = "--no-tests" if args.no_tests else "no time left" if budget < 10 else "none of the files exists"
        report(f"skipped ({why})")
        return
    # (-o addopts=: the project's own options, -q among them, would hide the per-test lines read here)
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-v", "-p", "no:cacheprovider", "-rfE", "--tb=line", "--color=no",
           "-k", TEST_FILTER, *present]
    workers = 0
    if not args.quick and importlib.util.find_spec("xdist") is not None and (os.cpu_count() or 1) >= 8:
        workers = min(8, (os.cpu_count() or 8) // 2)
        cmd[5:5] = ["-n", str(workers)]
    report(f"pytest -k \"{TEST_FILTER}\" over {len(present)} files"
           + (f" ({workers} xdist workers)" if workers else "") + f", time limit {budget:.0f} s"
           + (f"; not in this checkout: {', '.join(missing)}" if missing else ""))
    outcomes: dict[str, str] = {}
    summary: list[str] = []
    expected: list[int] = []
    started: list[str] = []

    def line(text: str) -> None:
        m = re.search(r"(\d+) selected", text) or re.search(r"\[(\d+) items?\]", text) or \
            re.search(r"collected (\d+) items?\s*$", text)
        if m and not expected:
            expected.append(int(m.group(1)))
        if text.startswith(("FAILED ", "ERROR ")) and "::" in text:
            summary.append(text)
            return
        words = "|".join(_STATUSES)  # "tests/a.py::t PASSED [ 5%]", or with xdist "[gw0] [ 5%] PASSED tests/a.py::t"
        m = re.search(rf"(\S+::\S+) ({words})\b", text)
        if m:
            outcomes[m.group(1)] = m.group(2)
        elif m := re.search(rf"\b({words}) (\S+::\S+)", text):
            outcomes[m.group(2)] = m.group(1)
        elif m := re.fullmatch(r"(\S+::\S+)\s*", text):  # started (its outcome follows, or it hangs)
            started.append(m.group(1))

    res = run_child(cmd, budget, env, on_line=line)
    counts = {s: sum(1 for v in outcomes.values() if v == s) for s in _STATUSES}
    shown = ", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n) or "no test ran"
    if res.timed_out:
        total = expected[0] if expected else None
        left = f"; {total - len(outcomes)} of {total} not run" if total is not None else ""
        report(f"STOPPED after {res.seconds:.0f} s (time limit): {shown}{left}")
        running = [n for n in dict.fromkeys(started) if n not in outcomes]
        if running:
            report("  still running when stopped: " + ", ".join(running[:10]))
        report.problem("the CUDA test selection did not finish")
    else:
        report(f"{shown} in {res.seconds:.0f} s (pytest exit status {res.rc})")
        if res.rc not in (0, 5) and not counts["FAILED"] and not counts["ERROR"]:
            report(f"pytest failed without a failing test:\n{res.tail()}")
            report.problem("pytest failed")
    failed = [n for n, s in outcomes.items() if s in ("FAILED", "ERROR")]
    if failed:
        report.problem(f"{len(failed)} CUDA tests failed")
        for text in summary[:25] or [f"FAILED {n}" for n in failed[:25]]:
            report(f"  {text[:300]}")
        if len(failed) > 25:
            report(f"  ... and {len(failed) - 25} more")


# --- part 3: the table ------------------------------------------------------------------------------


@dataclass
class RowResult:
    name: str
    description: str = ""
    kind: str = ""  # bandwidth, compute, latency, step
    dtype: str = "float32"
    work: float = 0.0  # bytes or flops per call
    times: dict[str, float] = field(default_factory=dict)  # framework -> median seconds
    first: dict[str, float] = field(default_factory=dict)  # framework -> first call seconds
    samples: dict[str, int] = field(default_factory=dict)
    host: float | None = None  # seconds of corvid's host time per eager call (HOST_CALLS)
    check: str | None = None  # None: ok
    compiled: str | None = None  # what the torch.compile column says when it has no time
    errors: list[str] = field(default_factory=list)  # corvid's: the row fails
    peer_errors: list[str] = field(default_factory=list)  # torch's (torch.compile's): reported, not corvid's failure
    stopped: bool = False  # cut short by the table's time budget (not a failure of its own)


def _fmt_time(seconds: float | None, kind: str) -> str:
    if seconds is None:
        return "-"
    if kind == "latency" or seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms" if seconds < 0.1 else f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.0f} s"


def _rate(r: RowResult, who: str) -> float | None:
    t = r.times.get(who)
    if t is None or not r.work or r.kind not in ("bandwidth", "compute"):
        return None
    return r.work / t / 1e9  # GB/s or GFLOP/s


def _peaks(env_info: dict, rows: list[RowResult]) -> dict[str, tuple[float, str]]:
    """dtype -> (GFLOP/s, where the figure comes from) for the compute rows' % column."""
    peaks: dict[str, tuple[float, str]] = {}
    name = str(env_info.get("gpu_name") or "").upper()
    if env_info.get("family") == "CUDA":
        for keys, label, figures in SPEC_TFLOPS:
            if all(k in name for k in keys):
                for dtype, tflops in figures.items():
                    peaks[dtype] = (tflops * 1e3, f"{label} datasheet, dense")
                break
    elif env_info.get("cpu_peak_gflops"):
        peaks["float32"] = (env_info["cpu_peak_gflops"], "this CPU's measured roofline (corvid/runtime/peak.py)")
    best: dict[str, tuple[float, str]] = {}  # else: the best PyTorch rate of the dtype in this run
    for r in rows:
        rate = _rate(r, "torch")
        if r.kind == "compute" and rate and rate > best.get(r.dtype, (0.0, ""))[0]:
            best[r.dtype] = (rate, f"PyTorch's best {r.dtype} rate in this run ({r.name})")
    for dtype, figure in best.items():
        peaks.setdefault(dtype, figure)
    return peaks


def _limit(r: RowResult, who: str, copy_gbps: float | None, peaks: dict[str, tuple[float, str]]) -> str:
    rate = _rate(r, who)
    if rate is None:
        return "-"
    limit = copy_gbps if r.kind == "bandwidth" else peaks.get(r.dtype, (None, ""))[0]
    return f"{rate / limit * 100:.0f}%" if limit else "-"


def format_rows(rows: list[RowResult], has_torch: bool, compile_on: bool, copy_gbps: float | None,
                peaks: dict[str, tuple[float, str]]) -> str:
    header = ["workload", "corvid", "torch", "torch.compile", "vs torch", "corvid rate", "corvid % limit",
              "torch % limit", "corvid 1st call", "check"]
    if not has_torch:
        header = [h for h in header if "torch" not in h]
    if not compile_on and "torch.compile" in header:
        header.remove("torch.compile")
    lines = []
    for r in rows:
        c, t, tc = r.times.get("corvid"), r.times.get("torch"), r.times.get("torch.compile")
        rate = _rate(r, "corvid")
        unit = "GB/s" if r.kind == "bandwidth" else "GFLOP/s"
        cells = {
            "workload": r.name,
            "corvid": _fmt_time(c, r.kind) if c is not None else "ERROR" if r.errors else "stopped" if r.stopped
            else "-",
            "torch": _fmt_time(t, r.kind) if t is not None or not r.peer_errors else "ERROR",
            "torch.compile": _fmt_time(tc, r.kind) if tc is not None else (r.compiled or "-"),
            "vs torch": f"{t / c:.2f}x" if c and t else "-",
            "corvid rate": f"{rate:,.0f} {unit}" if rate else "-",
            "corvid % limit": _limit(r, "corvid", copy_gbps, peaks),
            "torch % limit": _limit(r, "torch", copy_gbps, peaks),
            "corvid 1st call": _fmt_time(r.first.get("corvid"), "step"),
            "check": "FAIL" if _failed(r) else "-" if c is None else "ok" if r.check is None else r.check,
        }
        lines.append([cells[h] for h in header])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = lambda cells: "| " + " | ".join(x.ljust(w) for x, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, lines)])


def _failed(r: RowResult) -> bool:
    return bool(r.errors or r.check not in (None, UNCHECKED))


def _row_line(r: RowResult) -> str:
    c, t = r.times.get("corvid"), r.times.get("torch")
    return (f"  {r.name:<22} corvid {_fmt_time(c, r.kind):>10}"
            + (f"  torch {_fmt_time(t, r.kind):>10}  ({t / c:.2f}x)" if c and t else "")
            + f"  first call {_fmt_time(r.first.get('corvid'), 'step')}"
            + ("" if r.host is None else f"  host {r.host * 1e6:.1f} us/call")
            + ("" if r.check is None else "  (unchecked)" if r.check == UNCHECKED else f"  CHECK FAILED: {r.check}")
            + "".join(f"  ERROR {e}" for e in r.errors) + "".join(f"  ({e})" for e in r.peer_errors))


class _Table:
    """The parent's side of part 3: runs the workers, keeps their results."""

    def __init__(self, report: Report, args: argparse.Namespace, env: dict[str, str], deadline: float) -> None:
        self.report, self.args, self.env, self.deadline = report, args, env, deadline
        self.results: dict[str, RowResult] = {}
        self.ref: dict | None = None  # the first worker's "ready": devices, copy bandwidth, CPU peak
        self.current: str | None = None
        self.phase = ""  # what the current row was doing, as its worker last said

    def _extra(self) -> list[str]:
        if self.ref is None:
            return []
        return ["--copy-gbps", str(self.ref.get("copy_gbps") or 0), "--copy-how", self.ref.get("copy_how") or "",
                "--cpu-peak", str(self.ref.get("cpu_peak_gflops") or 0)]

    def on_message(self, msg: dict) -> float | None:
        kind, now, report = msg["kind"], time.monotonic(), self.report
        if kind == "ready":
            if self.ref is None:
                self.ref = msg
                report(f"corvid on {msg['device']}, PyTorch on {msg.get('torch_device') or '- (not installed)'}"
                       + (f" ({msg['torch_note']})" if msg.get("torch_note") else "")
                       + (f"; copy bandwidth {msg['copy_gbps']:,.0f} GB/s ({msg['copy_how']})"
                          if msg.get("copy_gbps") else ""))
            return None
        if kind == "phase":
            self.phase = msg["what"]
            return None
        if kind == "first":
            if msg["row"] in self.results:
                self.results[msg["row"]].first[msg["who"]] = msg["seconds"]
            return None
        if kind == "start":
            self.current, self.phase = msg["row"], ""
            if msg["row"] not in self.results:
                self.results[msg["row"]] = RowResult(msg["row"], msg["description"], msg["kind_of_row"], msg["dtype"])
            if msg.get("compile"):
                return min(now + self.args.compile_limit + 30, self.deadline)
            timeout = self.args.row_timeout * (2 if msg["kind_of_row"] == "step" else 1)
            return min(now + timeout, self.deadline)
        r = self.results.get(msg.get("row", ""))
        if r is None:
            return None
        self.current = None
        if kind == "row":
            r.work, r.check = msg["work"], msg["check"]
            r.times.update(msg["times"])
            r.first.update(msg["first"])
            r.samples.update(msg["samples"])
            r.host = msg.get("host")
            r.peer_errors += msg["peer_errors"]
            report(_row_line(r))
        elif kind == "compile":
            if msg.get("time") is not None:
                r.times["torch.compile"] = msg["time"]
                r.first["torch.compile"] = msg["compile_s"]
                report(f"  {r.name:<22} torch.compile {_fmt_time(msg['time'], r.kind):>10}  "
                       f"(compiled in {msg['compile_s']:.1f} s)"
                       + (f"  CHECK FAILED: {msg['check']}" if msg.get("check") else ""))
                if msg.get("check"):
                    r.peer_errors.append(f"torch.compile: {msg['check']}")
            else:
                r.compiled = msg["why"]
                report(f"  {r.name:<22} torch.compile: {msg['why']}")
        elif kind == "profile":
            report(f"  {r.name}: corvid's kernels, one call under cv.profile (device time)\n"
                   + "\n".join("    " + line for line in msg["table"].splitlines()))
        elif kind == "variants":
            report(f"  {r.name}: each tensor-core kernel's variants (CORVID_BEAM picks the fastest per shape), "
                   "device time, fastest of 5\n" + "\n".join("    " + line for line in msg["table"].splitlines()))
        elif kind == "error":
            r.errors.append(msg["error"])
            report(f"  {r.name:<22} ERROR {msg['error']}\n" + "\n".join("    | " + x for x in msg["tail"]))
        return None

    def run(self, mode: str, names: list[str], *extra: str) -> list[str]:
        """Run ``names`` through workers of ``mode`` ("rows": eager, "compile": torch.compile), a
        new worker after each one that fails; returns the names not reached. A compile worker that
        fails ends the compile pass (its rows say why)."""
        left = list(names)
        while left and self.deadline - time.monotonic() >= 10:
            self.current = None
            res = run_child(_worker_cmd(mode, self.args, "--rows", ",".join(left), *self._extra(), *extra),
                            min(self.args.start_timeout, self.deadline - time.monotonic()), self.env,
                            self.on_message)
            done = [n for n in left if n in self.results and (
                (mode == "rows" and (self.results[n].times or self.results[n].errors or self.results[n].check
                                     or self.results[n].peer_errors))
                or (mode == "compile" and ("torch.compile" in self.results[n].times or self.results[n].compiled)))]
            left = [n for n in left if n not in done]
            if res.rc == 0 and not res.timed_out:
                break
            cur = self.current
            if cur is None or cur not in self.results:
                self.report(f"  the {mode} worker failed before a row ({'timed out' if res.timed_out else res.rc}):"
                            f"\n{res.tail()}")
                self.report.problem(f"the table's {mode} worker failed")
                break
            r = self.results[cur]
            budget_out = res.timed_out and time.monotonic() >= self.deadline - 1
            limit = self.args.compile_limit + 30 if mode == "compile" else \
                self.args.row_timeout * (2 if r.kind == "step" else 1)
            during = f" during {self.phase}" if self.phase else ""
            why = (f"stopped{during}: the table's time budget ran out" if budget_out else
                   f"timed out{during} (its limit: {limit:.0f} s)" if res.timed_out else
                   f"the worker died{during} (exit status {res.rc})")
            if mode == "compile":
                r.compiled = why if not budget_out else "not finished in the table's time"
                self.report(f"  {cur:<22} torch.compile {why}; not tried on later rows\n{res.tail(6)}")
                return [n for n in left if n != cur]
            if budget_out:  # (not the row's failure: the time ran out while it ran)
                r.stopped = True
                self.report(f"  {cur:<22} {why}")
                return left
            if self.phase.startswith("torch"):  # (torch's call hung or crashed: not corvid's failure)
                r.peer_errors.append(why)
                self.report(f"  {cur:<22} corvid's first call {_fmt_time(r.first.get('corvid'), 'step')}; "
                            f"{why}; output tail:\n{res.tail()}")
            else:
                r.errors.append(why)
                self.report(f"  {cur:<22} ERROR {why}; output tail:\n{res.tail()}")
            left.remove(cur)
        return left


def part_table(report: Report, args: argparse.Namespace, env: dict[str, str], clock: Clock, env_info: dict) -> None:
    """corvid vs PyTorch: the eager rows first, then (when on) torch.compile on the rows it
    applies to, in the table's time that is left."""
    by_name = {r.name: r for r in ROWS}
    names = [r.name for r in ROWS if not args.rows or any(r.name.startswith(p) for p in args.rows.split(","))]
    budget = clock.budget(args.table_budget, keep=args.reserve_after_table)
    if budget < 15 or not names:
        report(f"skipped ({'no time left' if names else 'no row matches --rows'})")
        return
    table = _Table(report, args, env, time.monotonic() + budget)
    left = table.run("rows", names)
    if left:
        report(f"  not run or not finished (the table's time budget of {budget:.0f} s was spent, or its worker failed): "
               f"{', '.join(left)}")
        report.problem(f"{len(left)} table rows skipped")
    ref = table.ref or {}
    has_torch = bool(ref.get("torch_device"))
    compile_on = bool(args.torch_compile and has_torch)
    if compile_on:
        for n in names:
            if n in table.results and not by_name[n].compiles:
                table.results[n].compiled = by_name[n].compile_note
        todo = [n for n in names if by_name[n].compiles and "torch" in table.results.get(n, RowResult(n)).times]
        if todo:
            report(f"torch.compile, in the table's time left ({table.deadline - time.monotonic():.0f} s; "
                   f"at most {args.compile_budget:g} s of compiling):")
            for n in table.run("compile", todo, "--compile-budget", f"{args.compile_budget:g}",
                               "--compile-limit", f"{args.compile_limit:g}"):
                table.results[n].compiled = table.results[n].compiled or "not reached (table time spent)"
    done = [table.results[n] for n in names if n in table.results]
    if not done:
        return
    peaks = _peaks({**env_info, "cpu_peak_gflops": ref.get("cpu_peak_gflops")}, done)
    report()
    report(format_rows(done, has_torch, compile_on, ref.get("copy_gbps"), peaks))
    notes = ["times: medians of the steady-state calls, each ending in a device synchronize, corvid's and PyTorch's "
             "taken in turns; 'vs torch': torch's time / corvid's (>1: corvid faster); '1st call': the first call "
             "(tracing, scheduling, compiling; cold cache unless --warm-cache)"]
    if args.quick:
        notes.append("--quick: tiny sizes under the full sizes' names; the times, rates and % limits mean nothing")
    if ref.get("copy_gbps"):
        notes.append(f"% limit of the bandwidth rows: of the copy bandwidth measured in this run, "
                     f"{ref['copy_gbps']:,.0f} GB/s ({ref['copy_how']}; bytes read plus written)")
    for dtype in sorted({r.dtype for r in done if r.kind == "compute"}):
        if dtype in peaks:
            notes.append(f"% limit of the {dtype} compute rows: of {peaks[dtype][0]:,.0f} GFLOP/s ({peaks[dtype][1]})")
    if any(r.host is not None for r in done):
        notes.append(f"host (the progress lines of the array rows): corvid's call repeated {HOST_CALLS} times without a "
                     "synchronize between them, per call: on a GPU the host's share (graph, plan, launch) that each "
                     "synchronized call adds to its kernels; on a CPU, which computes as it is called, the whole call")
    if not has_torch:
        notes.append("PyTorch is not installed: corvid alone, checked against numpy where a numpy form exists")
    elif compile_on:
        notes.append(f"torch.compile (default mode): after the eager rows, in the table's time left, at most "
                     f"{args.compile_budget:g} s of compiling, none over {args.compile_limit:g} s")
    else:
        notes.append("torch.compile: off (--torch-compile to try it; on by default when PyTorch runs on CUDA)")
    for n in notes:
        report(f"  {n}")
    for r in done:
        if _failed(r):
            report.problem(f"table row {r.name} failed")


# --- part 4: the examples -------------------------------------------------------------------------------


def _example_part(report: Report, title: str, part: str, args: argparse.Namespace, env: dict[str, str],
                  budget: float, extra: tuple[str, ...] = ()) -> dict:
    """Run one example worker, echoing its output; returns its result message (empty if none)."""
    result: dict = {}
    if budget < 10:
        report(f"{title}: skipped (no time left)")
        return result

    def on_message(msg: dict) -> None:
        if msg["kind"] == "line":
            report(f"  {msg['text']}")
        elif msg["kind"] in ("result", "skip"):
            result.update(msg)

    def on_line(text: str) -> None:
        if text.strip():
            report(f"  {text}")

    report(f"{title} (time limit {budget:.0f} s):")
    res = run_child(_worker_cmd(part, args, *extra), budget, env, on_message, on_line)
    if result.get("kind") == "skip":
        report(f"  skipped: {result['why']}")
    elif res.timed_out:
        report(f"  STOPPED after {res.seconds:.0f} s (time limit)")
        result["stopped"] = True
    elif res.rc != 0:
        report(f"  FAILED (exit status {res.rc}); output tail:\n{res.tail()}")
        result["failed"] = True
    return result


def part_examples(report: Report, args: argparse.Namespace, env: dict[str, str], clock: Clock) -> None:
    mnist = _example_part(report, "MNIST, one epoch of examples/mnist.py", "mnist", args, env,
                          clock.budget(args.mnist_budget, keep=args.gpt_budget / 2), ("--mnist-data", args.mnist_data))
    if "accuracy" in mnist:
        acc = mnist["accuracy"]
        if args.quick:
            report(f"  accuracy {acc:.2%} (quick: a small subset, not judged)")
        else:
            need = MNIST_CPU_ONE_EPOCH - MNIST_SLACK
            ok = acc >= need
            report(f"  accuracy {acc:.2%}: {'ok' if ok else 'FAIL'} (the CPU's epoch reaches {MNIST_CPU_ONE_EPOCH:.1%}; "
                   f"at least {need:.1%} expected)")
            if not ok:
                report.problem("MNIST accuracy below the CPU's")
    elif mnist.get("failed") or mnist.get("stopped"):
        report.problem("MNIST example did not finish")
    gpt = _example_part(report, "GPT, a few training steps of examples/gpt.py", "gpt", args, env,
                        clock.budget(args.gpt_budget))
    if gpt.get("kind") == "result" and not gpt.get("falling"):
        report.problem("GPT loss did not fall")
    elif gpt.get("failed") or gpt.get("stopped"):
        report.problem("GPT example did not finish")
    why_not = ("--no-gpt2" if args.no_gpt2 else "--quick" if args.quick else
               "not on a GPU; --gpt2 runs it anyway" if args.cpu_kind and not args.gpt2 else None)
    budget = clock.budget(clock.left())
    if why_not is None and budget < args.gpt2_min:
        why_not = f"{budget:.0f} s left of the report's {clock.limit_s:.0f} s; it needs {args.gpt2_min:.0f}"
    if why_not:
        report(f"GPT-2-small: skipped ({why_not})")
        return
    gpt2 = _example_part(report, "GPT-2-small (12x768), 2 training steps", "gpt2", args, env, budget)
    if gpt2.get("failed"):
        report.problem("GPT-2-small failed")


# --- the command ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def _cache(warm: bool) -> Iterator[tuple[str | None, str]]:
    if warm:
        yield None, "warm (the on-disk cache)"
        return
    with tempfile.TemporaryDirectory(prefix="corvid-gpu-report-cache-") as d:
        yield d, "cold (a fresh temporary cache: first calls include compiling)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks --gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="CUDA", help="corvid's device (default CUDA; CPU or CL to try the report "
                                                    "without a GPU)")
    p.add_argument("--quick", action="store_true", help="tiny sizes and a small test selection (a smoke test)")
    p.add_argument("--out", default="gpu_report.txt", help="also write the report here (default gpu_report.txt)")
    p.add_argument("--mnist-data", default=str(_data("mnist")),
                   help="folder of the offline MNIST files (default: ../shared/data/mnist from the repository root, "
                        "else shared/data/mnist inside it)")
    p.add_argument("--warm-cache", action="store_true", help="use the on-disk kernel cache instead of an empty one")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="the whole report's time limit (default 225 s; --quick 150 s)")
    p.add_argument("--rows", default="", help="table rows whose name starts with one of these (comma separated)")
    p.add_argument("--no-tests", action="store_true", help="skip the CUDA test selection")
    p.add_argument("--torch-compile", dest="torch_compile", action="store_true", default=None,
                   help="the torch.compile column (default: on when PyTorch runs on CUDA)")
    p.add_argument("--no-torch-compile", dest="torch_compile", action="store_false")
    p.add_argument("--gpt2", action="store_true", help="run GPT-2-small even off a GPU")
    p.add_argument("--no-gpt2", action="store_true", help="skip GPT-2-small")
    # budgets (seconds); the defaults fit 4 minutes on an H100 with a cold cache
    p.add_argument("--env-timeout", type=float, default=40, help=argparse.SUPPRESS)
    p.add_argument("--tests-budget", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--table-budget", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--row-timeout", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--start-timeout", type=float, default=60, help=argparse.SUPPRESS)
    p.add_argument("--compile-budget", type=float, default=60, help=argparse.SUPPRESS)
    p.add_argument("--compile-limit", type=float, default=60, help=argparse.SUPPRESS)
    p.add_argument("--mnist-budget", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--gpt-budget", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--gpt2-min", type=float, default=25, help=argparse.SUPPRESS)
    # the parts' own processes
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--copy-gbps", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--copy-how", default="", help=argparse.SUPPRESS)
    p.add_argument("--cpu-peak", type=float, default=0.0, help=argparse.SUPPRESS)
    return p


def _defaults(args: argparse.Namespace) -> None:
    q = args.quick
    pick = lambda v, full, quick: v if v is not None else quick if q else full  # noqa: E731
    args.time_limit = pick(args.time_limit, 225.0, 150.0)
    args.tests_budget = pick(args.tests_budget, 60.0, 40.0)
    args.table_budget = pick(args.table_budget, 100.0, 80.0)
    args.row_timeout = pick(args.row_timeout, 40.0, 60.0)
    args.mnist_budget = pick(args.mnist_budget, 40.0, 40.0)
    args.gpt_budget = pick(args.gpt_budget, 25.0, 30.0)
    args.reserve_after_tests = 90.0 if not q else 40.0  # what the table and the examples need at least
    args.reserve_after_table = 35.0 if not q else 25.0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    if args.worker:
        return worker_main(args)
    _defaults(args)
    clock = Clock(args.time_limit)
    report = Report(args.out)
    try:
        with _cache(args.warm_cache) as (cache_dir, cache_note):
            env = _child_env(cache_dir)
            report(f"corvid GPU report: corvid on {args.device}{' (--quick: tiny sizes)' if args.quick else ''}; "
                   f"time limit {args.time_limit:.0f} s; command: python -m benchmarks --gpu {shlex.join(argv)}".rstrip())
            report.section("1. environment")
            info = part_environment(report, args, env, clock, cache_note)
            if info is None:
                report.section(f"stopped after {clock.elapsed():.0f} s: the device did not start")
                if args.out:
                    report(f"(written to {args.out})")
                return 2
            args.cpu_kind = info.get("kind") != "gpu"
            if args.torch_compile is None:
                args.torch_compile = bool(info.get("torch_cuda")) and info.get("family") == "CUDA"
            for title, run in (("2. CUDA test selection", lambda: part_tests(report, args, env, clock)),
                               ("3. corvid vs PyTorch", lambda: part_table(report, args, env, clock, info)),
                               ("4. examples", lambda: part_examples(report, args, env, clock))):
                report.section(title)
                started = time.monotonic()
                try:
                    run()
                except Exception as e:  # the report's own bug: say so, go on with the next part
                    report(f"the report itself failed in this part: {type(e).__name__}: {e}")
                    report("\n".join("    | " + x for x in traceback.format_exc().splitlines()[-8:]))
                    report.problem(f"part {title} crashed")
                report(f"({title.split('. ')[1]}: {time.monotonic() - started:.0f} s)")
            report.section(f"done in {clock.elapsed():.0f} s")
            if report.problems:
                report(f"{len(report.problems)} problems: " + "; ".join(report.problems))
            else:
                report("everything ran and passed")
            if args.out:
                report(f"(written to {args.out})")
            return 1 if report.problems else 0
    finally:
        report.close()


# =================================================================================================
# The workers (child processes): each prints protocol lines (PREFIX + JSON) for the parent
# =================================================================================================


def emit(**msg: Any) -> None:
    print(PREFIX + json.dumps(msg), flush=True)


def _tail(e: BaseException, n: int = 8) -> list[str]:
    lines = traceback.format_exception(type(e), e, e.__traceback__)
    return "".join(lines).rstrip().splitlines()[-n:]


def worker_main(args: argparse.Namespace) -> int:
    part = {"env": worker_env, "rows": worker_rows, "compile": worker_compile, "mnist": worker_mnist, "gpt": worker_gpt,
            "gpt2": worker_gpt2}[args.worker]
    return part(args)


def _torch_info() -> tuple[Any, str]:
    """(torch or None, a line describing it)."""
    if importlib.util.find_spec("torch") is None:
        return None, "not installed"
    try:
        import torch
    except Exception as e:
        return None, f"import failed: {type(e).__name__}: {e}"
    line = f"{torch.__version__}"
    if torch.cuda.is_available():
        line += (f", CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
                 f"{torch.cuda.get_device_name(0)}")
    else:
        line += f" (no CUDA{'' if torch.version.cuda is None else ': ' + str(torch.version.cuda) + ' build, no GPU'})"
    return torch, line


def _blas_line(dev: Any) -> str:
    """The CUDA device's matrix-product route: cuBLASLt's version and a first product checked
    against numpy, or why the library is not used."""
    import corvid as cv

    try:
        blas = dev.blas()
    except Exception as e:  # (blas() itself reports failures as None; this is a bug's trace)
        return f"FAIL cuBLASLt: {type(e).__name__}: {e}"
    if blas is None:
        return f"matrix products: corvid's own kernels (no cuBLASLt: {dev.blas_error})"
    v = blas.lt.version
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 192)).astype(np.float32), rng.standard_normal((160, 192)).astype(np.float32)
    try:
        t0 = time.perf_counter()
        got = (cv.Tensor(a, device=dev.name) @ cv.Tensor(b, device=dev.name).T).numpy()
        seconds = time.perf_counter() - t0
        err = float(np.abs(got - a.astype(np.float64) @ b.T.astype(np.float64)).max())
    except Exception as e:
        return f"FAIL cuBLASLt {v // 10000}.{v // 100 % 100}.{v % 100}: first product: {type(e).__name__}: {e}"
    verdict = "ok" if err < 1e-3 else f"FAIL (max error {err:.3g})"
    return (f"matrix products: cuBLASLt {v // 10000}.{v // 100 % 100}.{v % 100}; first product (256x192 @ 192x160 "
            f"float32) {verdict}, {seconds * 1e3:.0f} ms")


def worker_env(args: argparse.Namespace) -> int:
    import corvid as cv
    from corvid.runtime.device import canonical_device, get_device

    torch, torch_line = _torch_info()
    base = {"kind": "env", "corvid": cv.__version__, "torch": torch_line,
            "torch_cuda": bool(torch is not None and torch.cuda.is_available())}
    try:
        name = canonical_device(args.device)
        dev = get_device(name)
    except Exception as e:
        emit(**base, started=False, error=f"{type(e).__name__}: {e}")
        return 0
    from corvid.runtime.cuda import CUDADevice  # (imports without cuda-bindings)

    info = {**base, "started": True, "device": dev.name, "family": dev.family, "kind": dev.kind}
    if isinstance(dev, CUDADevice):
        version = dev.call("cuDriverGetVersion")
        total = dev.call("cuDeviceTotalMem", dev.cu_device)
        try:
            from importlib.metadata import version as pkg_version

            bindings = pkg_version("cuda-bindings")
        except Exception:
            bindings = "?"
        info.update(gpu_name=dev.gpu_name, device_line=(
            f"CUDA: {dev.gpu_name}, {dev.arch}, {int(total) / 2 ** 30:.0f} GiB; driver API "
            f"{version // 1000}.{version % 1000 // 10}; NVRTC {dev.compiler.version}; cuda-bindings {bindings}"))
        info["blas_line"] = _blas_line(dev)
        try:
            info["attention_line"] = ("bfloat16 attention: tensor cores (mma.sync)" if dev.attention_tensor_cores else
                                      f"bfloat16 attention: float32 kernels ({dev.attention_tc_error})")
        except Exception as e:
            info["attention_line"] = f"bfloat16 attention: FAIL {type(e).__name__}: {e}"
    else:
        what = getattr(dev, "cl_device", None)
        detail = f"{what.name.strip()} ({what.platform.name.strip()})" if what is not None else ""
        adapter = getattr(dev, "adapter", None)
        if adapter is not None:
            detail = str(adapter.info.get("device", ""))
        info["device_line"] = f"{dev.name} ({dev.kind}{': ' + detail if detail else ''})"
    t0 = time.perf_counter()
    try:
        got = (cv.Tensor(np.arange(8, dtype=np.float32), device=dev.name) * 2 + 1).numpy()
        if not np.array_equal(got, np.arange(8) * 2 + 1):
            raise AssertionError(f"x * 2 + 1 gave {got}")
        info["smoke_s"] = time.perf_counter() - t0
    except Exception as e:
        info["smoke_error"] = f"{type(e).__name__}: {e}"
    emit(**info)
    return 0


# --- the rows ----------------------------------------------------------------------------------------


@dataclass
class Ctx:
    """What a row's setup needs: corvid's device, torch (None without it) and its device, and
    whether corvid's side is wanted (not in the torch.compile pass)."""
    device: str
    quick: bool
    torch: Any
    tdev: Any  # torch.device or None
    with_corvid: bool = True

    def cv_sync(self) -> None:
        from corvid.runtime.device import get_device

        get_device(self.device).synchronize()

    def t_sync(self) -> None:
        if self.tdev is not None and self.tdev.type == "cuda":
            self.torch.cuda.synchronize()


@dataclass
class Bench:
    """One row, set up: each framework's call (one computation, synchronized, returning its
    result), the work per call, the check of the results, torch.compile's call."""
    calls: dict[str, Callable[[], Any]]
    work: float
    check: Callable[[dict[str, Any]], str | None]
    compiled: Callable[[], Callable[[], Any]] | None = None  # builds torch.compile's call
    host: Callable[[], Any] | None = None  # corvid's call without the synchronize (its host time: see HOST_CALLS)


@dataclass(frozen=True)
class GPURow:
    name: str
    description: str  # the full size's
    kind: str  # bandwidth | compute | latency | step
    make: Callable[[Ctx], Bench]
    dtype: str = "float32"
    repeat: int = 20  # steady-state samples at most (a quarter with --quick)
    compile_note: str = ""  # why torch.compile is not tried on it ("": it is)
    profile: bool = False  # after the timed calls, one more of corvid's under cv.profile: its costliest kernels
    variants: bool = False  # then each tensor-core attention kernel's variants, timed (_variant_table)

    @property
    def compiles(self) -> bool:
        return not self.compile_note


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _torch_call(ctx: Any, fn: Callable, args: list[Any]) -> Callable[[], Any]:
    """A call of torch's ``fn(*args)`` under inference mode that ends in a device synchronize."""
    def call() -> Any:
        with ctx.torch.inference_mode():
            out = fn(*args)
        ctx.t_sync()
        return out
    return call


def _to_numpy(x: Any) -> np.ndarray:
    if type(x).__module__.startswith("torch"):
        return x.detach().float().cpu().numpy()
    import corvid as cv

    if x.dtype in (cv.bfloat16, cv.float16):
        x = x.astype(cv.float32)
    return x.numpy()


def _compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, scaled: bool) -> str | None:
    """None when ``got`` matches ``want``: elementwise ``|got - want| <= atol + rtol * |want|``, or
    with ``scaled`` ``max |got - want| <= rtol * max |want|`` (products, whose rounding errors scale
    with the largest values)."""
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    err = np.abs(got64 - want64)
    if scaled:
        scale = float(np.abs(want64).max()) if want64.size else 0.0
        worst = float(err.max()) if err.size else 0.0
        return None if worst <= rtol * max(scale, 1e-30) else f"max error {worst:.3g} > {rtol:g} x max |value| {scale:.3g}"
    bad = ~(err <= atol + rtol * np.abs(want64))
    if not bad.any():
        return None
    i = np.unravel_index(int(np.argmax(np.where(bad, err, -1))), err.shape) if err.ndim else ()
    return f"{int(bad.sum())} of {bad.size} elements differ (rtol {rtol:g}, atol {atol:g}); worst {got[i]!r} vs {want[i]!r}"


def _array_bench(ctx: Ctx, inputs: list[np.ndarray], cv_fn: Callable, torch_fn: Callable, work: float,
                 rtol: float, atol: float, scaled: bool = False, dtype: str | None = None,
                 numpy_fn: Callable | None = None) -> Bench:
    """A row computing ``cv_fn`` / ``torch_fn`` on the same inputs (``dtype``: cast on the device,
    from the same float32 values, as each framework rounds them)."""
    import corvid as cv

    calls: dict[str, Callable[[], Any]] = {}
    if ctx.with_corvid:
        xs = [cv.Tensor(a, device=ctx.device) for a in inputs]
        if dtype:
            xs = [x.astype(getattr(cv, dtype)) for x in xs]
        xs = [x.realize() for x in xs]

        def corvid_call() -> Any:
            out = cv_fn(*xs).realize()
            ctx.cv_sync()
            return out

        calls["corvid"] = corvid_call
        host = lambda: cv_fn(*xs).realize()  # noqa: E731
    compiled = None
    if ctx.torch is not None:
        torch = ctx.torch
        ts = [torch.from_numpy(a).to(ctx.tdev) for a in inputs]
        if dtype:
            ts = [t.to(getattr(torch, dtype)) for t in ts]

        calls["torch"] = _torch_call(ctx, torch_fn, ts)
        compiled = lambda: _torch_call(ctx, torch.compile(torch_fn), ts)  # noqa: E731

    def check(outs: dict[str, Any]) -> str | None:
        if "torch" in outs:
            want = _to_numpy(outs["torch"])
        elif numpy_fn is not None:
            want = np.asarray(numpy_fn(*inputs))
        else:
            return UNCHECKED
        return _compare(_to_numpy(outs["corvid"]), want, rtol, atol, scaled)

    return Bench(calls, work, check, compiled, host if ctx.with_corvid else None)


def _matmul_row(dtype: str, tol: float) -> GPURow:
    def make(ctx: Ctx) -> Bench:
        n = 64 if ctx.quick else 4096
        rng = _rng()
        a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
        mm = lambda x, y: x @ y  # noqa: E731
        return _array_bench(ctx, [a, b], mm, mm, 2.0 * n ** 3, tol, 0.0, scaled=True,
                            dtype=None if dtype == "float32" else dtype,
                            numpy_fn=mm if dtype == "float32" else None)

    short = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}[dtype]
    return GPURow(f"matmul_4096_{short}", f"a @ b, 4096x4096 {dtype}", "compute", make, dtype,
                  compile_note="not tried (cuBLAS either way)")


def _matmul_tf32(ctx: Ctx) -> Bench:
    """The float32 product with TF32 tensor cores allowed on both sides: corvid's
    ``cv.matmul_precision("high")``, PyTorch's ``torch.set_float32_matmul_precision("high")``
    (set for its call only: the other rows compare exact float32)."""
    import corvid as cv

    n = 64 if ctx.quick else 4096
    rng = _rng()
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)

    def corvid_mm(x: Any, y: Any) -> Any:
        with cv.matmul_precision("high"):
            return x @ y

    def torch_mm(x: Any, y: Any) -> Any:
        torch = ctx.torch
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high")
        try:
            return x @ y
        finally:
            torch.set_float32_matmul_precision(before)

    # (TF32 rounds the operands to 10 mantissa bits: compared at 1e-2 of the largest value)
    return _array_bench(ctx, [a, b], corvid_mm, torch_mm, 2.0 * n ** 3, 1e-2, 0.0, scaled=True,
                        numpy_fn=lambda x, y: x @ y)


def _matmul_fp8(ctx: Ctx) -> Bench:
    """A float8_e4m3fn product written in bfloat16, the layout 8-bit tensor cores take (``x @
    w.T``): corvid's ``x8.astype(bfloat16) @ w8.astype(bfloat16).T`` (one 8-bit product, see
    corvid/ops/blas.py) against PyTorch's ``torch._scaled_mm`` with unit scales."""
    import corvid as cv

    n = 64 if ctx.quick else 4096
    rng = _rng()
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)

    def corvid_mm(x: Any, w: Any) -> Any:
        return x.astype(cv.bfloat16) @ w.astype(cv.bfloat16).T

    def torch_mm(x: Any, w: Any) -> Any:
        torch = ctx.torch
        one = torch.ones((), dtype=torch.float32, device=x.device)
        return torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    def numpy_mm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        import ml_dtypes

        f8 = lambda v: v.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)  # noqa: E731
        return f8(x) @ f8(w).T

    return _array_bench(ctx, [a, b], corvid_mm, torch_mm, 2.0 * n ** 3, 1e-2, 0.0, scaled=True,
                        dtype="float8_e4m3fn", numpy_fn=numpy_mm)


def _attention_row(route: str, make_bench: Callable[[Ctx], Bench] | None = None) -> Callable[[Ctx], Bench]:
    """``make_bench`` (:func:`_attention` by default) with ``CORVID_ATTENTION=route`` while
    corvid's step is traced and run: the float32 kernels, or the composite of products and a
    softmax, against the same PyTorch call (so one report compares corvid's routes too)."""
    def make(ctx: Ctx) -> Bench:
        bench = (make_bench or _attention)(ctx)
        inner = bench.calls.get("corvid")
        if inner is not None:
            def call() -> Any:
                before = os.environ.get("CORVID_ATTENTION")
                os.environ["CORVID_ATTENTION"] = route
                try:
                    return inner()
                finally:
                    if before is None:
                        del os.environ["CORVID_ATTENTION"]
                    else:
                        os.environ["CORVID_ATTENTION"] = before

            bench.calls["corvid"] = call
        return bench

    return make


def _attention(ctx: Ctx) -> Bench:
    """``scaled_dot_product_attention`` forward and backward at GPT-2's shape (batch 8, 12 heads,
    1024 tokens of 64), bfloat16, causal: corvid's step jitted (on CUDA, its tensor-core kernels),
    PyTorch's eager with autograd (its flash kernels). The result compared is the first head's
    gradients of the three operands (the whole backward runs for them)."""
    import corvid as cv

    b, h, t, d = (1, 2, 64, 64) if ctx.quick else (8, 12, 1024, 64)
    rng = _rng()
    q, k, v, w = (rng.standard_normal((b, h, t, d), dtype=np.float32) for _ in range(4))
    flops = 3.5 * 2 * b * h * t * t * d  # forward 4*b*h*t*t*d halved by the causal mask; backward 2.5 times that
    calls: dict[str, Callable[[], Any]] = {}
    if ctx.with_corvid:
        F = cv.nn.functional
        xs = [cv.Tensor(a, device=ctx.device).astype(cv.bfloat16).realize() for a in (q, k, v)]
        wt = cv.Tensor(w, device=ctx.device).realize()

        def loss(q: Any, k: Any, v: Any) -> Any:
            return (F.scaled_dot_product_attention(q, k, v, is_causal=True).astype(cv.float32) * wt).sum()

        @cv.jit
        def step(q: Any, k: Any, v: Any) -> Any:
            grads = cv.grad(loss, argnums=(0, 1, 2))(q, k, v)
            return cv.concat([g[0, 0].astype(cv.float32).reshape(-1) for g in grads])

        def corvid_call() -> Any:
            out = step(*xs).realize()
            ctx.cv_sync()
            return out

        calls["corvid"] = corvid_call
    if ctx.torch is not None:
        torch = ctx.torch
        ts = [torch.from_numpy(a).to(ctx.tdev).to(torch.bfloat16).requires_grad_() for a in (q, k, v)]
        tw = torch.from_numpy(w).to(ctx.tdev)

        def torch_call() -> Any:
            for x in ts:
                x.grad = None
            out = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=True)
            (out.float() * tw).sum().backward()
            result = torch.cat([x.grad[0, 0].float().reshape(-1) for x in ts])
            ctx.t_sync()
            return result

        calls["torch"] = torch_call

    def check(outs: dict[str, Any]) -> str | None:
        if "corvid" in outs and "torch" in outs:
            # (bfloat16 probabilities and gradients on both sides, rounded in different places)
            return _compare(_to_numpy(outs["corvid"]), _to_numpy(outs["torch"]), 5e-2, 0.0, True)
        return UNCHECKED

    return Bench(calls, flops, check)


def _chain(ctx: Ctx) -> Bench:
    from .workloads import CHAIN

    x = _rng().standard_normal(4096 if ctx.quick else 64 * MB, dtype=np.float32)
    return _array_bench(ctx, [x], CHAIN.ops["corvid"], CHAIN.ops["torch"], 2 * x.nbytes, 2e-5, 1e-6,
                        numpy_fn=CHAIN.ops["numpy"])


def _sum(ctx: Ctx) -> Bench:
    from .workloads import SUM

    x = _rng().random(4096 if ctx.quick else 64 * MB, dtype=np.float32)
    return _array_bench(ctx, [x], SUM.ops["corvid"], SUM.ops["torch"], x.nbytes, 1e-4, 0.0,
                        numpy_fn=lambda a: a.astype(np.float64).sum())


def _square(ctx: Ctx) -> np.ndarray:
    n = 64 if ctx.quick else 8192
    return _rng().standard_normal((n, n), dtype=np.float32)


def _softmax(ctx: Ctx) -> Bench:
    from .workloads import SOFTMAX

    x = _square(ctx)
    return _array_bench(ctx, [x], SOFTMAX.ops["corvid"], SOFTMAX.ops["torch"], 2 * x.nbytes, 1e-4, 1e-7,
                        numpy_fn=SOFTMAX.ops["numpy"])


def _layer_norm(ctx: Ctx) -> Bench:
    from corvid.nn import functional as F

    x = _square(ctx)
    n = x.shape[-1]

    def np_ln(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.float64)
        mu = a.mean(-1, keepdims=True)
        return (a - mu) / np.sqrt(((a - mu) ** 2).mean(-1, keepdims=True) + 1e-5)

    return _array_bench(ctx, [x], lambda a: F.layer_norm(a, (n,)),
                        lambda a: ctx.torch.nn.functional.layer_norm(a, (n,)), 2 * x.nbytes, 1e-4, 1e-5,
                        numpy_fn=np_ln)


def _conv(ctx: Ctx) -> Bench:
    from .workloads import CONV2D, _conv_inputs

    x, w = _conv_inputs(_rng(), ctx.quick)
    amount, _ = CONV2D.rate((x, w))
    return _array_bench(ctx, [x, w], CONV2D.ops["corvid"], CONV2D.ops["torch"], amount, 1e-4, 0.0, scaled=True,
                        numpy_fn=CONV2D.ops["numpy"])


def _add_one(ctx: Ctx) -> Bench:
    x = _rng().standard_normal(1024, dtype=np.float32)
    add = lambda a: a + 1  # noqa: E731
    return _array_bench(ctx, [x], add, add, 0.0, 0.0, 0.0, numpy_fn=add)


def _step_bench(steps: dict[str, Callable[[], Any]], traces: Callable[[], int]) -> Bench:
    """A training-step row: each framework's step (its loss, synchronized), the first loss kept;
    the check says whether corvid's step was traced once and whether each loss fell."""
    losses: dict[str, list[float]] = {who: [] for who in steps}
    calls: dict[str, Callable[[], Any]] = {}
    for who, step in steps.items():
        def call(step: Callable[[], Any] = step, who: str = who) -> Any:
            loss = step()
            if not losses[who]:
                losses[who].append(float(loss.item()))
            return loss

        calls[who] = call

    def check(outs: dict[str, Any]) -> str | None:
        if "corvid" in outs and traces() != 1:
            return f"corvid's step was traced {traces()} times, expected once"
        for who, first in losses.items():
            if who in outs:
                last = float(outs[who].item())
                if not (math.isfinite(last) and last < first[0]):
                    return f"{who}'s loss did not fall: {first[0]:.4f} -> {last:.4f}"
        return None

    return Bench(calls, 0.0, check)


def _cnn_step(ctx: Ctx) -> Bench:
    """The MNIST CNN's training step: corvid as examples/mnist.py runs it (its ``CNN`` and jitted
    ``make_step``), torch eager (:func:`benchmarks.training.torch_cnn`, ``torch.optim.Adam``);
    the same batch every step (the loss must fall)."""
    import corvid as cv
    from examples.mnist import CNN, make_step

    from .training import _LR, _batch, torch_cnn

    xn, yn = _batch(False)  # (batch 128 with --quick too: the MNIST example then finds its kernels compiled)
    cv.manual_seed(0)
    with cv.default_device(ctx.device):
        model = CNN()
    tx = cv.optim.Adam.functional(lr=_LR)
    state = {"model": model, "opt": tx.init(model)}
    x, y = cv.Tensor(xn, device=ctx.device).realize(), cv.Tensor(yn, device=ctx.device).realize()
    step = make_step(tx)

    def corvid_step() -> Any:
        state["model"], state["opt"], loss = step(state["model"], state["opt"], x, y)
        loss.realize()
        ctx.cv_sync()
        return loss

    steps: dict[str, Callable[[], Any]] = {"corvid": corvid_step}
    if ctx.torch is not None:
        torch = ctx.torch
        torch.manual_seed(0)
        tmodel = torch_cnn().to(ctx.tdev)
        opt = torch.optim.Adam(tmodel.parameters(), lr=_LR)
        tx_, ty = torch.from_numpy(xn).to(ctx.tdev), torch.from_numpy(yn).to(ctx.tdev)

        def torch_step() -> Any:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(tmodel(tx_), ty)
            loss.backward()
            opt.step()
            ctx.t_sync()
            return loss

        steps["torch"] = torch_step
    return _step_bench(steps, lambda: step.traces)


def _block(ctx: Ctx) -> Bench:
    """One GPT-2 block's forward (:mod:`benchmarks.blocks`: the same modules, weights, input
    and float64 check), corvid jitted, torch eager under inference_mode."""
    import corvid as cv

    from .blocks import block_input, block_sizes, block_weights, check_block, corvid_block, torch_block

    s = block_sizes(ctx.quick)
    calls: dict[str, Callable[[], Any]] = {}
    forward = cv.jit(lambda m, a: m(a))
    if ctx.with_corvid:
        with cv.default_device(ctx.device):
            model = corvid_block(s.d, s.heads)
        model.load_state_dict({k: cv.Tensor(v, device=ctx.device) for k, v in block_weights(ctx.quick).items()})
        model.eval()
        x = cv.Tensor(block_input(ctx.quick), device=ctx.device).realize()

        def corvid_call() -> Any:
            out = forward(model, x).realize()
            ctx.cv_sync()
            return out

        calls["corvid"] = corvid_call
    compiled = None
    if ctx.torch is not None:
        torch = ctx.torch
        tmodel = torch_block(s.d, s.heads)
        tmodel.load_state_dict({k: torch.from_numpy(v) for k, v in block_weights(ctx.quick).items()})
        tmodel = tmodel.to(ctx.tdev).eval()
        tx_ = torch.from_numpy(block_input(ctx.quick).copy()).to(ctx.tdev)

        calls["torch"] = _torch_call(ctx, tmodel, [tx_])
        compiled = lambda: _torch_call(ctx, torch.compile(tmodel), [tx_])  # noqa: E731

    def check(outs: dict[str, Any]) -> str | None:
        if "corvid" in outs and forward.traces != 1:
            return f"corvid's forward was traced {forward.traces} times, expected once"
        for who in ("corvid", "torch"):
            if who in outs:
                problem = check_block(_to_numpy(outs[who]), ctx.quick)
                if problem:
                    return f"{who}: {problem}"
        return None

    return Bench(calls, 0.0, check, compiled)


def _gpt2_train(ctx: Ctx) -> Bench:
    """GPT-2 small's training step in bfloat16 mixed precision, the same batch every step (the
    loss must fall): corvid as examples/gpt.py trains (``Trainer(amp=cv.bfloat16)``: cv.autocast,
    float32 weights and AdamW state, one jitted step), torch eager under
    ``torch.autocast(dtype=torch.bfloat16)`` with ``torch.optim.AdamW`` (the same architecture:
    :func:`benchmarks.models._torch_gpt`, scaled dot-product attention). 12 layers, width 768,
    12 heads, GPT-2's vocabulary, batch 8 x 1024 tokens; --quick: 2 layers, width 64, 2 x 64."""
    import corvid as cv
    import examples.gpt as gpt

    from .models import _Sizes, _torch_gpt

    s = _Sizes(512, 64, 64, 2, 2, 2) if ctx.quick else _Sizes(50257, 1024, 768, 12, 12, 8)
    ids = _rng().integers(0, s.vocab, (s.batch, s.ctx + 1))
    steps: dict[str, Callable[[], Any]] = {}
    trainer = None
    if ctx.with_corvid:
        cv.manual_seed(0)
        config = gpt.GPTConfig(vocab_size=s.vocab, block_size=s.ctx, n_embd=s.d, n_head=s.heads, n_layer=s.layers)
        with cv.default_device(ctx.device):
            trainer = gpt.Trainer(gpt.GPT(config), lr=3e-4, amp=cv.bfloat16)
        x = cv.Tensor(ids[:, :-1], device=ctx.device).realize()
        y = cv.Tensor(ids[:, 1:], device=ctx.device).realize()

        def corvid_step() -> Any:
            loss = trainer.step(x, y).realize()
            ctx.cv_sync()
            return loss

        steps["corvid"] = corvid_step
    if ctx.torch is not None:
        torch = ctx.torch
        torch.manual_seed(0)
        tmodel = _torch_gpt(s).to(ctx.tdev)
        opt = torch.optim.AdamW(tmodel.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
        tx_ = torch.from_numpy(ids[:, :-1]).to(ctx.tdev)
        ty = torch.from_numpy(ids[:, 1:]).to(ctx.tdev)
        kind = "cuda" if str(ctx.tdev).startswith("cuda") else "cpu"

        def torch_step() -> Any:
            opt.zero_grad(set_to_none=True)
            with torch.autocast(kind, dtype=torch.bfloat16):
                logits = tmodel(tx_)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, s.vocab), ty.reshape(-1))
            loss.backward()
            opt.step()
            ctx.t_sync()
            return loss

        steps["torch"] = torch_step
    return _step_bench(steps, lambda: trainer._step.traces if trainer is not None else 1)


ROWS: list[GPURow] = [
    _matmul_row("float32", 1e-4),
    _matmul_row("bfloat16", 1.5e-2),
    _matmul_row("float16", 2e-3),
    GPURow("matmul_4096_tf32", "a @ b, 4096x4096 float32, TF32 allowed (corvid: cv.matmul_precision('high'); "
           "torch: set_float32_matmul_precision('high'))", "compute", _matmul_tf32, "tf32",
           compile_note="not tried (cuBLAS either way)"),
    GPURow("matmul_4096_fp8", "x @ w.T, 4096x4096 float8_e4m3fn written as bfloat16 (corvid: the bfloat16 "
           "widenings' product; torch: _scaled_mm)", "compute", _matmul_fp8, "float8_e4m3fn",
           compile_note="not tried (cuBLAS either way)"),
    GPURow("attention_bf16", "scaled_dot_product_attention forward + backward, 8x12x1024x64 bfloat16, causal "
           "(corvid: jit; torch: eager autograd)", "compute", _attention, "bfloat16",
           compile_note="not tried (a backward pass)", profile=True, variants=True),
    GPURow("attention_bf16_f32", "the same, corvid with CORVID_ATTENTION=float32 (its float32 kernels)", "compute",
           _attention_row("float32"), "bfloat16", repeat=5, compile_note="not tried (a backward pass)"),
    GPURow("attention_bf16_composite", "the same, corvid with CORVID_ATTENTION=composite (products and a "
           "softmax: the scores stored)", "compute", _attention_row("composite"), "bfloat16", repeat=5,
           compile_note="not tried (a backward pass)"),
    GPURow("elementwise_chain", "((x*1.5+0.5).relu()*x).exp(), 64M float32", "bandwidth", _chain),
    GPURow("sum", "x.sum(), 64M float32", "bandwidth", _sum),
    GPURow("softmax", "x.softmax(-1), 8192x8192 float32", "bandwidth", _softmax),
    GPURow("layer_norm", "layer_norm(x, (8192,)), 8192x8192 float32, no affine", "bandwidth", _layer_norm),
    GPURow("conv2d", "conv2d 32x64x56x56, 3x3 -> 64, padding 1, float32", "compute", _conv),
    GPURow("add_1024", "x + 1, 1024 float32: dispatch latency", "latency", _add_one, repeat=200),
    GPURow("cnn_train_step", "MNIST CNN training step, batch 128, Adam (corvid: jit; torch: eager)", "step",
           _cnn_step, compile_note="not tried (a training step)", profile=True),
    GPURow("transformer_block", "GPT-2 block forward 8x256x768, 12 heads (corvid: jit; torch: eager)", "step", _block,
           profile=True),
    # (a float32 block takes the float32 attention kernels, four work items per query row: 98,304 here;
    # the composite stores the scores and runs library products; this row says which route the block wants)
    GPURow("transformer_block_composite", "the same, corvid with CORVID_ATTENTION=composite (its float32 "
           "attention as library products and a softmax)", "step", _attention_row("composite", _block)),
    GPURow("gpt2_train_bf16", "GPT-2 small training step, batch 8x1024, bfloat16 autocast, AdamW (corvid: jit; "
           "torch: eager)", "step", _gpt2_train, dtype="bfloat16", repeat=5,
           compile_note="not tried (a training step)", profile=True),
]


def _copy_bandwidth(ctx: Ctx) -> tuple[float, str]:
    """GB/s of a device-to-device copy (bytes read plus written): torch's ``copy_`` of 1 GiB on a
    GPU (64 MiB on the CPU; 4 MiB with --quick), else corvid's ``-x``."""
    n = (1 << 20) if ctx.quick else (1 << 28) if ctx.tdev is not None and ctx.tdev.type == "cuda" else (16 << 20)
    times = []
    if ctx.torch is not None:
        torch = ctx.torch
        src = torch.ones(n, device=ctx.tdev)
        dst = torch.empty_like(src)
        for _ in range(13):
            t0 = time.perf_counter()
            dst.copy_(src)
            ctx.t_sync()
            times.append(time.perf_counter() - t0)
        how = f"torch copy_ of {n * 4 / MB:,.0f} MiB on {ctx.tdev}"
    else:
        import corvid as cv

        x = cv.Tensor(np.ones(n, np.float32), device=ctx.device).realize()
        for _ in range(13):
            t0 = time.perf_counter()
            (-x).realize()
            ctx.cv_sync()
            times.append(time.perf_counter() - t0)
        how = f"corvid's -x over {n * 4 / MB:,.0f} MiB on {ctx.device} (no torch)"
    return 2 * n * 4 / statistics.median(times[3:]) / 1e9, how


def _setup(args: argparse.Namespace, with_corvid: bool) -> tuple[Ctx, Any, str]:
    """The worker's context (torch on the GPU when corvid is on CUDA and torch has CUDA, else on
    the CPU; TF32 off), the corvid device, and a note when the comparison is not like for like."""
    from corvid.runtime.device import canonical_device, get_device

    device = canonical_device(args.device)
    dev = get_device(device)
    torch, _ = _torch_info()
    tdev, note = None, ""
    if torch is not None:
        if dev.family == "CUDA" and torch.cuda.is_available():
            tdev = torch.device("cuda")
        else:
            tdev = torch.device("cpu")
            if dev.kind == "gpu":
                note = "PyTorch has no CUDA here: its column runs on the CPU, not like for like"
        # both sides compute float32 products in float32 (no TF32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    return Ctx(device, args.quick, torch, tdev, with_corvid), dev, note


def _samples(args: argparse.Namespace, row: GPURow) -> tuple[int, float]:
    """(steady-state samples at most, seconds per framework at most)."""
    return (max(3, row.repeat // 4), 0.2) if args.quick else (row.repeat, 2.0)


PROFILE_TOP = 12  # kernel names a row's profile lists


def _profile_table(call: Callable[[], Any]) -> str:
    """corvid's ``call()`` once more under :func:`corvid.profile` (kernel by kernel, no device
    graph: each kernel's device time from CUDA events), as the profile's table of the costliest
    kernels; the reason instead where it fails."""
    import corvid as cv

    try:
        with cv.profile() as prof:
            call()
        return prof.table(top=PROFILE_TOP)
    except Exception as e:  # (the row's figures stand; only its profile is missing)
        return f"(no profile: {type(e).__name__}: {e})"


def _variant_table(ctx: Ctx) -> str:
    """Each variant of the tensor-core attention kernels (corvid/render/cuda_attention.py:
    ``variants``) timed on the GPU at the attention row's shape, causal (the device's
    ``time_attention_variants``): the default's split against the others, so that a run says which
    split to make the default; with ``CORVID_BEAM`` the device picks the fastest itself."""
    from corvid.render import cuda_attention as CA
    from corvid.render.gpu import attention_shapes
    from corvid.runtime.device import get_device

    dev = get_device(ctx.device)
    if not hasattr(dev, "time_attention_variants") or not dev.attention_tensor_cores:
        return f"(none: {getattr(dev, 'attention_tc_error', None) or 'not a CUDA device with tensor-core attention'})"
    b, h, t, d = (1, 2, 64, 64) if ctx.quick else (8, 12, 1024, 64)
    lines = []
    try:
        for kind in ("fwd_tc", "dq_tc", "dkdv_tc"):
            shapes = [(b, h, t, d)] * 3 if kind == "fwd_tc" else [(b, h, t, d)] * 4 + [(b, h, t)] * 2
            params = {"kind": kind, "causal": True, "scale": d ** -0.5, "has_mask": False}
            flops = CA.render("count", params, shapes, {})[3]
            timed = dev.time_attention_variants(kind, params, shapes, attention_shapes("fwd", shapes, False))
            base = timed[0][1] if isinstance(timed[0][1], float) else None
            for variant, took in timed:
                if isinstance(took, float):
                    lines.append(f"{kind:<8} {str(variant):<34} {took * 1e6:9.1f} us {flops / took / 1e12:7.1f} TFLOP/s"
                                 + (f"  {base / took:5.2f}x the default" if base else ""))
                else:
                    lines.append(f"{kind:<8} {str(variant):<34} {took}")
            ok = [(took, str(variant)) for variant, took in timed if isinstance(took, float)]
            if ok and base:
                lines.append(f"{kind:<8} fastest: {min(ok)[1]} ({base / min(ok)[0]:.2f}x the default)")
    except Exception as e:  # (the row's figures stand; only this table is missing)
        lines.append(f"(stopped: {type(e).__name__}: {str(e)[:300]})")
    return "\n".join(lines)


def worker_rows(args: argparse.Namespace) -> int:
    """Run the rows named by ``--rows`` in order (eager: corvid and torch); after an error, exit
    (status 3) so that the parent goes on with a fresh process (a CUDA error can leave the
    context unusable)."""
    from .harness import time_interleaved

    ctx, dev, note = _setup(args, with_corvid=True)
    if args.copy_gbps:
        copy_gbps, how, peak = args.copy_gbps, args.copy_how, args.cpu_peak or None
    else:
        copy_gbps, how = _copy_bandwidth(ctx)
        peak = None
        if dev.kind == "cpu" and not args.quick:  # (measured in seconds with a cold cache: not for tiny sizes)
            with contextlib.suppress(Exception):
                from corvid.runtime.peak import cpu_peak

                peak = cpu_peak().gflops
    emit(kind="ready", device=ctx.device, torch_device=str(ctx.tdev) if ctx.tdev is not None else None,
         torch_note=note, copy_gbps=copy_gbps, copy_how=how, cpu_peak_gflops=peak)
    by_name = {r.name: r for r in ROWS}
    for name in filter(None, args.rows.split(",")):
        row = by_name[name]
        emit(kind="start", row=name, description=row.description, kind_of_row=row.kind, dtype=row.dtype)
        try:
            emit(kind="phase", row=name, what="setting up its inputs")
            bench = row.make(ctx)
            outs: dict[str, Any] = {}
            first: dict[str, float] = {}
            peer_errors: list[str] = []
            for who, call in bench.calls.items():  # first calls (compiling), one framework at a time
                emit(kind="phase", row=name, what=f"{who}'s first call")
                t0 = time.perf_counter()
                try:
                    outs[who] = call()
                except Exception as e:
                    if who == "corvid":
                        raise
                    peer_errors.append(f"{who}: {type(e).__name__}: {e}")
                    continue
                first[who] = time.perf_counter() - t0
                emit(kind="first", row=name, who=who, seconds=first[who])

            def keep(who: str) -> Callable[[], None]:
                def run() -> None:
                    outs[who] = bench.calls[who]()
                return run

            def failed(who: str, e: Exception) -> None:
                if who == "corvid":
                    raise e
                peer_errors.append(f"{who}: {type(e).__name__}: {e}")

            emit(kind="phase", row=name, what="the timed calls")
            timings = time_interleaved({w: keep(w) for w in list(outs)}, *_samples(args, row), failed)
            emit(kind="phase", row=name, what="the check of the results")
            emit(kind="row", row=name, work=bench.work, check=bench.check(outs), peer_errors=peer_errors,
                 times={w: t.median_s for w, t in timings.items()}, first=first,
                 samples={w: len(t.runs_s) for w, t in timings.items()},
                 host=_host_time(bench.host, ctx.cv_sync) if bench.host is not None else None)
            if row.profile and "corvid" in outs:
                emit(kind="profile", row=name, table=_profile_table(bench.calls["corvid"]))
            if row.variants and "corvid" in outs:
                emit(kind="variants", row=name, table=_variant_table(ctx))
        except Exception as e:
            emit(kind="error", row=name, error=f"{type(e).__name__}: {e}", tail=_tail(e))
            return 3
    return 0


HOST_CALLS = 20  # eager calls timed without a synchronize between them (their host time)


def _host_time(call: Callable[[], Any], sync: Callable[[], None]) -> float:
    """Seconds per call of ``call`` queued back to back, the device synchronized only before and
    after: the host's share of an eager row (building, planning, launching), which the row's time
    adds to the kernels' when each call ends in a synchronize. The best of three rounds."""
    best = float("inf")
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        for _ in range(HOST_CALLS):
            call()
        best = min(best, (time.perf_counter() - t0) / HOST_CALLS)
    sync()
    return best


def worker_compile(args: argparse.Namespace) -> int:
    """torch.compile on the rows named by ``--rows``: each row's torch side set up again, its
    eager result the reference, the compiled function's first call (compiling) timed alone, then
    its steady state. Stops trying once ``--compile-budget`` seconds went into compiling, or one
    compile took over ``--compile-limit``."""
    from .harness import time_calls

    ctx, _, _ = _setup(args, with_corvid=False)
    left = args.compile_budget
    by_name = {r.name: r for r in ROWS}
    for name in filter(None, args.rows.split(",")):
        row = by_name[name]
        if left <= 0:
            emit(kind="compile", row=name, compile_s=0.0, time=None, why="skipped (its compile budget is spent)")
            continue
        emit(kind="start", row=name, description=row.description, kind_of_row=row.kind, dtype=row.dtype, compile=True)
        t0 = time.perf_counter()
        try:
            bench = row.make(ctx)
            want = _to_numpy(bench.calls["torch"]())
            t0 = time.perf_counter()
            call = bench.compiled()
            out = call()
            compile_s = time.perf_counter() - t0
            left -= compile_s
            if compile_s > args.compile_limit:
                emit(kind="compile", row=name, compile_s=compile_s, time=None,
                     why=f"compiled in {compile_s:.0f} s, over {args.compile_limit:g} s: not timed, not tried further")
                left = 0.0
                continue
            t = time_calls(call, *_samples(args, row))
            problem = _compare(_to_numpy(out), want, 1e-3, 1e-3 * max(float(np.abs(want).max()), 1.0), False)
            emit(kind="compile", row=name, compile_s=compile_s, time=t.median_s, check=problem)
        except Exception as e:
            first_line = (str(e).strip().splitlines() or [""])[0][:160]
            emit(kind="compile", row=name, compile_s=time.perf_counter() - t0, time=None,
                 why=f"failed ({type(e).__name__}: {first_line}); not tried further")
            return 3
    return 0


# --- the examples ----------------------------------------------------------------------------------------


def worker_mnist(args: argparse.Namespace) -> int:
    """examples/mnist.py's main, one epoch on the device (quick: 512 images to train on, 250 to
    evaluate)."""
    folder = pathlib.Path(args.mnist_data)
    if not (folder / "t10k-images-idx3-ubyte.gz").is_file() and not (folder / "train-images-idx3-ubyte.gz").is_file():
        emit(kind="skip", why=f"no MNIST files in {folder} (--mnist-data)")
        return 0
    import corvid as cv
    import examples.mnist as example

    example.progress = lambda items, total, desc: items  # (no progress bar in a report)
    if args.quick:
        load = example.load_data

        def small(path: str | None) -> tuple[Any, Any, str]:
            train, test, what = load(path)
            return (cv.data.Subset(train, range(512)), cv.data.Subset(test, range(250)),
                    f"{what}; quick: 512 of them to train on, 250 to evaluate")

        example.load_data = small
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        accuracy = example.main(["--data", str(folder), "--epochs", "1", "--device", args.device,
                                 "--checkpoint", os.path.join(d, "mnist.safetensors")])
    emit(kind="result", accuracy=accuracy, seconds=time.perf_counter() - t0)
    return 0


def _gpt_run(args: argparse.Namespace, config: Any, steps: int, batch: int, tokens: np.ndarray | None,
             same_batch: bool) -> int:
    """``steps`` AdamW steps of examples/gpt.py's ``Trainer`` on the device; prints each loss and
    time; the result says whether the loss fell and the steady ms/step."""
    import corvid as cv
    import examples.gpt as gpt

    from corvid.runtime.device import canonical_device

    device = canonical_device(args.device)
    rng = np.random.default_rng(0)
    cv.manual_seed(0)
    with cv.default_device(device):
        model = gpt.GPT(config)
        trainer = gpt.Trainer(model, lr=3e-3 if config.n_layer <= 4 else 3e-4)
        n_params = sum(p.size for p in model.parameters())
        emit(kind="line", text=f"{config}: {n_params:,} parameters, batch {batch}, on {device}")
        fixed = None
        losses, times = [], []
        for i in range(1, steps + 1):
            if tokens is not None and not same_batch:
                x, y = gpt.get_batch(tokens, batch, config.block_size, rng)
            else:
                if fixed is None:
                    ids = rng.integers(0, config.vocab_size, size=(batch, config.block_size + 1))
                    fixed = cv.Tensor(ids[:, :-1]), cv.Tensor(ids[:, 1:])
                x, y = fixed
            t0 = time.perf_counter()
            loss = trainer.step(x, y).item()  # (.item(): waits for the step)
            times.append(time.perf_counter() - t0)
            losses.append(loss)
            if i <= 2 or i == steps or i % max(steps // 5, 1) == 0:
                emit(kind="line", text=f"step {i:3d}: loss {loss:.4f}  ({times[-1] * 1e3:,.0f} ms"
                                       f"{', compile included' if i == 1 else ''})")
    steady = statistics.median(times[1:]) if len(times) > 1 else None
    falling = all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    emit(kind="line", text=f"loss {losses[0]:.4f} -> {losses[-1]:.4f}: {'falling, ok' if falling else 'NOT FALLING'}"
                          + (f"; {steady * 1e3:,.1f} ms/step after the first (first {times[0]:.1f} s)" if steady else ""))
    emit(kind="result", falling=falling, ms_per_step=steady * 1e3 if steady else None, first_s=times[0])
    return 0


def worker_gpt(args: argparse.Namespace) -> int:
    """The example's default small model (4 layers, width 128, 64 characters, batch 16) on
    tinyshakespeare (a repeated pangram without it); quick: 2 layers, width 32."""
    import examples.gpt as gpt

    path = _data("tinyshakespeare/input.txt")
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        emit(kind="line", text=f"data: {path} ({len(text):,} characters)")
    else:
        text = "the quick brown fox jumps over the lazy dog. " * 2000
        emit(kind="line", text=f"data: a repeated pangram (no {path})")
    tok = gpt.CharTokenizer(text)
    tokens = np.array(tok.encode(text), dtype=np.int64)
    if args.quick:
        config = gpt.GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_embd=32, n_head=2, n_layer=2)
        return _gpt_run(args, config, 6, 4, tokens, same_batch=False)
    config = gpt.GPTConfig(vocab_size=tok.vocab_size)
    return _gpt_run(args, config, 30, 16, tokens, same_batch=False)


def worker_gpt2(args: argparse.Namespace) -> int:
    """GPT-2-small's sizes (12 layers, width 768, 12 heads, GPT-2's vocabulary), 2 steps on one
    batch of 4 x 256 random tokens (the position table is 256 long, not 1024)."""
    import examples.gpt as gpt

    config = gpt.GPTConfig(vocab_size=50257, block_size=256, n_embd=768, n_head=12, n_layer=12)
    return _gpt_run(args, config, 2, 4, None, same_batch=True)


if __name__ == "__main__":
    raise SystemExit(main())
