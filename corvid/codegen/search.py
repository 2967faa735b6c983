"""Beam search over optimization actions, and the on-disk cache of its results. Every kernel,
searched or not, then gets the IR passes of :mod:`corvid.codegen.passes` (:func:`optimize`).

``CORVID_BEAM=N`` (or ``with corvid.beam(N):``) replaces the default heuristics: each new kernel
structure is searched once per (kernel, device) and the winning actions are stored in a sqlite
database in the cache directory (``search.sqlite``), so later processes apply them without
searching. A row that does not parse is a miss; a database that sqlite reports corrupt is moved
aside and rebuilt; a read-only one is read, not written; one locked by another process for more
than ``LOCK_TIMEOUT_S`` is left alone for the rest of the process (see :class:`SearchCache`).

Candidates are timed in a child process on the CPU (:mod:`corvid.codegen.sandbox`), so one
that crashes or hangs (killed past a hard time limit) costs only itself. A device without the
CPU's actions (``optimization_actions = False``) is searched only when it names its own
(``candidate_opts(kernel)``: CUDA's are :func:`gpu_candidate_opts`); its ``heuristics(kernel)``
is then the start that competes with the unoptimized kernel, and its candidates run in this
process, timed by its own clock where it has one (``elapsed(work)``: CUDA events, GPU time). Its
``search_identity()`` keys the cache (CUDA: the GPU model, compute capability and NVRTC version),
so that a cache filled on one GPU model is not used on another.

The search (:func:`beam_search`) runs the unoptimized kernel once for the reference result and
starts from it and the heuristics' choice (a start ``CUTOFF`` times slower than the best is
dropped: its neighbours are as slow). Each round applies every legal next action
(:func:`candidate_opts`) to each kernel of the beam, compiles the new candidates in parallel (the
compiler runs as separate processes from a thread pool), runs each on the same random inputs,
drops a candidate whose result differs from the unoptimized kernel's or whose first run takes
``CUTOFF`` times longer than the fastest so far (the time limit), and keeps the ``N`` fastest. It
stops when a round brings no candidate faster than the best by ``MIN_GAIN``, after
``MAX_ROUNDS``, or once it has run ``CORVID_BEAM_SECONDS`` (default 30 s: the best found so far
is kept; candidates are compiled and timed in batches, the budget checked between them). The
winner is stored under the kernel's key and under its family's (:func:`family_key`: the same
source with every number left out), so the same kernel at another size (the next layer, another
batch) starts from its sibling's actions and, when they still win, refines them for one round
instead of searching again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import pathlib
import re
import sqlite3
import stat
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runtime.device import Buffer, Program, get_device
from .ir import Kernel, Opt
from .opt import (ACTIONS, OptError, apply_heuristics, apply_opt, apply_opts, can_vectorize,
                  reduce_loops, vector_bytes)
from .passes import finalize
from ..graph.symbolic import SymbolicSizeError, strict_sizes

MAX_ROUNDS = 8
SEARCH_SECONDS = 30.0  # a kernel's search stops once it has run this long (CORVID_BEAM_SECONDS)
MIN_GAIN = 0.01      # a round must beat the best time by 1% to go on
CUTOFF = 4.0         # a candidate whose first run is this many times slower than the best is dropped
RUNS = 5             # timed runs per candidate (the minimum counts)
SANDBOX = True       # CPU candidates are timed in a child process (see corvid/codegen/sandbox.py)
UPCASTS = (2, 3, 4, 8)
SPLITS = (4, 8, 16, 32, 64)
UNROLLS = (2, 4, 8)
GROUPS = (16, 256)
REDUCE_UPCASTS = (2, 4, 8)  # accumulators side by side in one reduce loop (upcast_reduce)
PADS = (8, 16)

class _Widths(threading.local):
    """The widths of the ``beam()`` blocks a thread is in, innermost last (per thread, as
    ``default_device`` blocks are: a block in one thread does not change another's kernels)."""

    def __init__(self) -> None:
        self.stack: list[int] = []


_override = _Widths()


@contextlib.contextmanager
def beam(width: int) -> Iterator[None]:
    """``with corvid.beam(4): ...``: kernels first built in the block (by this thread) are
    optimized by beam search of that width (0: the heuristics), whatever ``CORVID_BEAM`` says.

    The search compiles and times candidate kernels, so building them takes longer; the actions
    it finds are cached. ValueError for a negative or non-int width.

    >>> with cv.beam(2):
    ...     print(beam_width())
    2
    >>> with cv.beam(0):  # the heuristics only, even if CORVID_BEAM is set
    ...     (cv.arange(4.0) * 2).tolist()
    [0.0, 2.0, 4.0, 6.0]
    """
    if not isinstance(width, int) or width < 0:
        raise ValueError(f"beam: width must be a non-negative int, got {width!r}")
    _override.stack.append(width)
    try:
        yield
    finally:
        _override.stack.pop()


def beam_width() -> int:
    """The beam width in force: the innermost ``beam()`` block, else ``CORVID_BEAM``, else 0."""
    if _override.stack:
        return _override.stack[-1]
    raw = os.environ.get("CORVID_BEAM", "0").strip() or "0"
    try:
        return max(int(raw), 0)
    except ValueError:
        raise ValueError(f"CORVID_BEAM must be an integer, got {raw!r}") from None


def search_seconds() -> float:
    """How long one kernel's search may run (``CORVID_BEAM_SECONDS``, default :data:`SEARCH_SECONDS`):
    past it the search keeps the best found so far. ValueError for a value that is not a
    non-negative number."""
    raw = os.environ.get("CORVID_BEAM_SECONDS", "").strip()
    if not raw:
        return SEARCH_SECONDS
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"CORVID_BEAM_SECONDS must be a number of seconds, got {raw!r}") from None
    if not value >= 0:
        raise ValueError(f"CORVID_BEAM_SECONDS must be >= 0, got {raw!r}")
    return value


def optimize(k: Kernel, device: str) -> Kernel:
    """``k`` (lowered, loops merged, no actions yet) with its actions: the heuristics', or, with a
    beam width, the cached or newly searched ones."""
    dev = get_device(device)
    block = getattr(dev, "sum_block", None)  # (cascaded sums: see corvid.codegen.cascade)
    if not getattr(dev, "optimization_actions", True) and not hasattr(dev, "candidate_opts"):
        # a device whose renderer takes no CPU actions (vectors, threads) and that names no
        # actions of its own to search: its own heuristics
        heuristics = getattr(dev, "heuristics", None)
        if heuristics is not None and k.symbolic():  # (no choice may depend on a traced size: see opt.py)
            try:
                with strict_sizes():
                    return finalize(heuristics(k), block=block)
            except (SymbolicSizeError, OptError, NotImplementedError):
                return finalize(k, block=block)
        return finalize(heuristics(k) if heuristics is not None else k, block=block)
    width = beam_width()
    if width == 0 or not k.params or k.params[0].size == 0 or k.symbolic():
        return finalize(_actions(dev)[1](k), block=block)
    db = SearchCache()
    key = search_key(k, device)
    opts = db.get(key)
    if opts is not None:
        try:
            return finalize(apply_opts(k, opts), block=block)
        except Exception:  # noqa: BLE001 -- a row is data from disk: stale (actions changed meaning) or junk
            pass
    return finalize(apply_opts(k, _search_once(k, device, width, db, key)), block=block)


_searches: dict[str, Future] = {}  # search key -> the search under way in this process (its waiters)
_searches_lock = threading.Lock()


def _search_once(k: Kernel, device: str, width: int, db: SearchCache, key: str) -> tuple[Opt, ...]:
    """The actions :func:`beam_search` finds for ``k``, stored in ``db`` under ``key``. One thread
    of the process searches a key at a time; others asking for it meanwhile wait for its result
    (or its error)."""
    with _searches_lock:
        pending = _searches.get(key)
        ours = pending is None
        if ours:
            pending = _searches[key] = Future()
    if not ours:
        return pending.result()
    try:
        # a search that ended between our lookup and taking the key has stored its result
        opts = db.get(key)
        if opts is None or not _applies(k, opts):
            family = family_key(k, device)
            sibling = db.get(family)  # (the same kernel at other sizes: its actions start the search)
            seeded = sibling is not None and _applies(k, sibling)
            result = beam_search(k, device, width, seed=sibling) if seeded else beam_search(k, device, width)
            opts = result.opts
            db.put(key, opts, result.seconds)
            db.put(family, opts, result.seconds)
    except BaseException as exc:
        with _searches_lock:
            del _searches[key]
        pending.set_exception(exc)
        raise
    with _searches_lock:
        del _searches[key]
    pending.set_result(opts)
    return opts


def _applies(k: Kernel, opts: tuple[Opt, ...]) -> bool:
    try:
        apply_opts(k, opts)
    except Exception:  # noqa: BLE001 -- see optimize
        return False
    return True


def search_key(k: Kernel, device: str) -> str:
    """What identifies a (kernel, device) pair across processes: the unoptimized kernel's source
    and the device's identity (for the CPU: compiler, flags and CPU model; a device with a
    ``search_identity()``: that, e.g. the GPU model and compute capability)."""
    dev = get_device(device)
    ident = device
    identity = getattr(dev, "search_identity", None)
    if identity is not None:
        ident = identity()
    elif device.startswith("CPU"):
        from ..runtime.compiler import find_toolchain

        ident += find_toolchain().key()
    return hashlib.sha256((ident + "\0" + dev.renderer.render(k)).encode()).hexdigest()


def family_key(k: Kernel, device: str) -> str:
    """What identifies a kernel's family on a device: :func:`search_key` with every number of
    the unoptimized source (sizes, strides, constants) left out, so that the same kernel at
    another size (a matmul of another width, the next layer's norm) finds the actions searched
    for a sibling and starts from them."""
    dev = get_device(device)
    identity = getattr(dev, "search_identity", None)
    ident = identity() if identity is not None else device
    shape_free = re.sub(r"\b\d+(\.\d*)?([eE][-+]?\d+)?[fFuUlL]*\b", "#", dev.renderer.render(k))
    return "family:" + hashlib.sha256((ident + "\0" + shape_free).encode()).hexdigest()


# --- candidates ---------------------------------------------------------------------------------------
def candidate_opts(k: Kernel) -> list[Opt]:
    """The actions worth trying next on ``k`` (each may still raise OptError when applied)."""
    out: list[Opt] = []
    n = len(k.loops)
    for a, lp in enumerate(k.loops):
        out += [Opt("upcast", a, u) for u in UPCASTS if lp.size % u == 0 and u < lp.size]
        if 1 < lp.size <= 16:
            out.append(Opt("upcast", a, lp.size))
        width = vector_bytes() // max(k.params[0].dtype.itemsize, 1)
        if k.vector_width == 1 and can_vectorize(k, a, width):
            out.append(Opt("vectorize", a, width))
        out += [Opt("split", a, s) for s in SPLITS if lp.size % s == 0 and s < lp.size]
        out += [Opt("pad", a, m) for m in PADS if lp.size % m and lp.size > m]
        if k.parallel is None and lp.kind == "global":
            out.append(Opt("thread", a))
        if a + 1 < n:
            order = list(range(n))
            order[a], order[a + 1] = order[a + 1], order[a]
            out.append(Opt("permute", 0, tuple(order)))
    if k.parallel is None:
        out.append(Opt("thread", -1))
    for r, lp in enumerate(reduce_loops(k)):
        if lp.unroll == 1:
            out += [Opt("unroll", r, u) for u in UNROLLS if u < lp.size]
        out += [Opt("group", r, g) for g in GROUPS if lp.size % g == 0 and g < lp.size]
        out += [Opt("upcast_reduce", r, s) for s in REDUCE_UPCASTS if lp.size % s == 0 and s < lp.size]
    # (no stream: a sum long enough to stream is cascaded, which drops it; see corvid.codegen.cascade)
    return out


GPU_UPCASTS = (2, 4, 8)              # register tiles of a work item
GPU_LOCALS = (8, 16, 32, 64, 128, 256)  # work-group sizes along an output loop
GPU_GROUPS = (16, 32, 64, 128, 256)   # work items sharing a reduce (group_local)


def gpu_candidate_opts(k: Kernel, max_group: int = 1024) -> list[Opt]:
    """The GPU-style actions worth trying next on ``k`` (each may still raise OptError when
    applied, or give a kernel the renderer refuses): register tiles (``upcast``), work-group
    dimensions (``local``), a reduce shared by a work-group (``group_local``), a row shared by
    one (``rows_local``, where the reduces are hoisted out of the innermost loop), every reduce
    of a row shared by one (``reduces_local``), the loop order
    (``permute``: which loop neighbouring threads walk) and ``pad``; work-groups of at most
    ``max_group`` work items and 3 dimensions. None of the CPU's vectors, threads or unrolls
    (GPU renderers print none of them)."""
    local = [lp for lp in k.loops if lp.kind == "local"] + [lp for lp in reduce_loops(k) if lp.kind == "local"]
    items = math.prod(lp.size for lp in local)
    room = len(local) < 3  # (a work-group has at most 3 dimensions)
    out: list[Opt] = []
    for a, lp in enumerate(k.loops):
        if a + 1 < len(k.loops):
            order = list(range(len(k.loops)))
            order[a], order[a + 1] = order[a + 1], order[a]
            out.append(Opt("permute", 0, tuple(order)))
        if lp.kind == "local":
            continue
        out += [Opt("upcast", a, u) for u in GPU_UPCASTS if lp.size % u == 0 and u < lp.size]
        if room:
            out += [Opt("local", a, g) for g in GPU_LOCALS if lp.size % g == 0 and g < lp.size and items * g <= max_group]
        out += [Opt("pad", a, m) for m in PADS if lp.size % m and lp.size > m]
    if room and not any(lp.kind == "local" for lp in k.reduce_loops()):
        for r, lp in enumerate(reduce_loops(k)):
            out += [Opt("group_local", r, g) for g in GPU_GROUPS
                    if lp.size % g == 0 and g < lp.size and items * g <= max_group]
    if not local and k.loops and reduce_loops(k):  # (a work-group per row; OptError unless the reduces are hoisted)
        out += [Opt("rows_local", len(k.loops) - 1, g) for g in GPU_GROUPS
                if k.loops[-1].size % g == 0 and g < k.loops[-1].size and g <= max_group]
    if not local and len(reduce_loops(k)) > 1:  # (every reduce of a row shared; OptError unless several follow one another)
        out += [Opt("reduces_local", 0, g) for g in GPU_GROUPS if g <= max_group]
    return out


def _actions(dev: Any) -> tuple[Callable[[Kernel], list[Opt]], Callable[[Kernel], Kernel]]:
    """(the candidate actions, the heuristics) that a search on ``dev`` starts from and tries:
    the CPU's, or a device's own."""
    if getattr(dev, "optimization_actions", True):
        return candidate_opts, apply_heuristics
    if not hasattr(dev, "candidate_opts"):
        raise ValueError(f"the {dev.name} device takes no optimization actions to search over")
    return dev.candidate_opts, dev.heuristics


# --- running candidates -------------------------------------------------------------------------------
def _outputs(k: Kernel) -> int:
    """How many outputs ``k`` stores (its first params)."""
    n = 1
    while n < len(k.params) and k.params[n].output:
        n += 1
    return n


def random_inputs(k: Kernel, seed: int = 0) -> list[np.ndarray]:
    """One array per input param of ``k``: normal floats, small non-negative ints (valid indices
    for most gathers), random booleans."""
    rng = np.random.default_rng(seed)
    arrays = []
    for p in k.params[_outputs(k):]:
        if p.dtype.is_bool:
            a = rng.random(p.size) < 0.5
        elif p.dtype.is_int:
            a = rng.integers(0, 8, p.size)
        elif p.dtype.is_complex:
            a = rng.standard_normal(p.size) + 1j * rng.standard_normal(p.size)
        else:
            a = rng.standard_normal(p.size)
        arrays.append(np.asarray(a).astype(p.dtype.np))
    return arrays


@dataclass
class _Runner:
    """Runs compiled candidates of one kernel on fixed inputs."""

    device: str
    kernel: Kernel
    inputs: list[Buffer]

    @classmethod
    def make(cls, k: Kernel, device: str) -> _Runner:
        bufs = [Buffer(device, p.dtype, p.size).copyin(a) for p, a in zip(k.params[_outputs(k):], random_inputs(k))]
        return cls(device, k, bufs)

    def run(self, program: Program, limit: float | None, runs: int = RUNS) -> tuple[np.ndarray, float] | None:
        """(output, best time of ``runs`` runs), or None when the first run exceeds ``limit`` seconds.
        A kernel of several outputs gives them one after the other, flattened, as float64 (complex128
        where one is complex), so :func:`_same` compares them all.

        On a device with its own clock (``elapsed``: CUDA events) each timed run is queued
        behind an untimed one, so that the device is busy while the host launches it: the
        events then measure the kernel, not the gap before its launch reaches the device."""
        dev = get_device(self.device)
        outs = [Buffer(self.device, p.dtype, p.size) for p in self.kernel.params[:_outputs(self.kernel)]]
        handles = [b.handle for b in outs] + [b.handle for b in self.inputs]
        elapsed = getattr(dev, "elapsed", None)
        best = float("inf")
        for i in range(runs):
            if elapsed is not None:
                program(handles)
                took = elapsed(lambda: program(handles))
            else:
                t0 = time.perf_counter()
                program(handles)
                dev.synchronize()
                took = time.perf_counter() - t0
            best = min(best, took)
            if i == 0 and limit is not None and best > limit:
                return None
        if len(outs) == 1:
            return outs[0].numpy(), best
        got = [b.numpy().reshape(-1) for b in outs]
        wide = np.complex128 if any(g.dtype.kind == "c" for g in got) else np.float64
        return np.concatenate([g.astype(wide) for g in got]), best


def _make_runner(k: Kernel, device: str) -> Any:
    """The CPU's candidates run in a child process (:mod:`corvid.codegen.sandbox`: a crash or a
    hang costs the candidate, not the search); other devices' in this one (a GPU candidate that
    faults can end the process's use of the GPU: every candidate is a legal transformation of
    the kernel, so none should)."""
    if get_device(device).name == "CPU" and SANDBOX:
        from .sandbox import ChildRunner

        return ChildRunner([(np.dtype(p.dtype.np), p.size) for p in k.params[:_outputs(k)]], len(k.params),
                           random_inputs(k))
    return _Runner.make(k, device)


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    if got.dtype.kind in "fc":
        return bool(np.allclose(got.astype(np.complex128 if got.dtype.kind == "c" else np.float64),
                                want.astype(np.complex128 if want.dtype.kind == "c" else np.float64),
                                rtol=1e-3, atol=1e-3, equal_nan=True))
    return bool(np.array_equal(got, want))


@dataclass
class SearchResult:
    opts: tuple[Opt, ...]
    seconds: float       # the winner's time
    baseline: float      # the unoptimized kernel's time
    candidates: int      # kernels compiled and timed
    stopped: str = ""    # why the search ended early: "time" (its budget), "" otherwise
    seeded: bool = False  # whether a sibling's actions (the same kernel at another size) were a start


def beam_search(k: Kernel, device: str, width: int, rounds: int = MAX_ROUNDS, seed: tuple[Opt, ...] | None = None,
                seconds: float | None = None) -> SearchResult:
    """The fastest action sequence found for ``k`` on ``device`` (see the module docstring).
    ``seed``: actions found for a sibling (:func:`family_key`), a start beside the heuristics';
    when they win at the start, one round refines them. ``seconds``: the budget
    (:func:`search_seconds`): past it, no new round starts and no new candidate is timed."""
    deadline = time.monotonic() + (search_seconds() if seconds is None else seconds)
    dev = get_device(device)
    candidates, heuristics = _actions(dev)
    runner = _make_runner(k, device)

    def render(c: Kernel) -> tuple[Kernel, str]:
        c = finalize(c)
        return c, dev.renderer.render(c)

    def compile_one(c: Kernel) -> Program:
        return dev.compile(*render(c))

    def compile_rendered(job: tuple[Kernel, str] | None) -> Program | None:
        return None if job is None else dev.compile(*job)

    ref = runner.run(compile_one(k), None, runs=1)  # the reference result (an unoptimized matmul is slow: once)
    assert ref is not None
    want, base = ref
    start = [(base, k)]
    h = heuristics(k)
    if h.opts:  # the heuristics' choice competes from the start
        got = _safe(runner.run)(compile_one(h), CUTOFF * base)
        if got is not None and _same(got[0], want):
            start.append((got[1], h))
    seeded = False
    if seed and seed != h.opts:
        try:
            s = apply_opts(k, seed)
        except OptError:
            s = None
        got = None if s is None else _safe(runner.run)(compile_one(s), CUTOFF * base)
        if got is not None and _same(got[0], want):
            start.append((got[1], s))
            seeded = True
    start.sort(key=lambda x: x[0])
    best_t, best = start[0]
    if seeded and best.opts == seed:
        rounds = min(rounds, 1)  # (a sibling's winner wins here too: refine it, do not search again)
    # a kernel CUTOFF times slower than the best is no starting point (its neighbours are as slow)
    beam_ = [x for x in start if x[0] <= CUTOFF * best_t][:width]
    seen = {x[1].opts for x in start}
    tried = len(start)
    pool = ThreadPoolExecutor(max_workers=max(os.cpu_count() or 1, 1))
    stopped = ""
    try:
        for _ in range(rounds):
            if time.monotonic() >= deadline:
                stopped = "time"
                break
            cands: list[Kernel] = []
            for _, kb in beam_:
                for opt in candidates(kb):
                    try:
                        c = apply_opt(kb, opt)
                    except OptError:
                        continue
                    if c.opts not in seen:
                        seen.add(c.opts)
                        cands.append(c)
            if not cands:
                break
            timed: list[tuple[float, Kernel]] = []
            fastest = best_t
            batch = 2 * max(os.cpu_count() or 1, 2)  # (compiled side by side; the budget is checked between batches)
            for first in range(0, len(cands), batch):
                if time.monotonic() >= deadline:
                    stopped = "time"
                    break
                part = cands[first:first + batch]
                # rendered in this thread (a renderer keeps per-kernel state while it renders),
                # then compiled side by side
                jobs = [_safe(render)(c) for c in part]
                programs = list(pool.map(_safe(compile_rendered), jobs))
                for c, prog in zip(part, programs):
                    if prog is None:
                        continue
                    tried += 1
                    got = _safe(runner.run)(prog, CUTOFF * fastest)  # the time limit: CUTOFF x the fastest so far
                    if got is None or not _same(got[0], want):
                        continue
                    timed.append((got[1], c))
                    fastest = min(fastest, got[1])
            if not timed:
                break
            timed.sort(key=lambda x: x[0])
            beam_ = [x for x in timed[:width] if x[0] <= CUTOFF * timed[0][0]]
            if timed[0][0] < best_t * (1 - MIN_GAIN):
                best_t, best = timed[0]
            else:
                break
    finally:
        pool.shutdown()
    return SearchResult(best.opts, best_t, base, tried, stopped, seeded)


def _safe(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` returning None where it raises: a candidate that the renderer or the compiler
    rejects, or whose launch fails (a GPU refusing its block), is skipped, not fatal."""
    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:
            return None
    return call


# --- the disk cache -----------------------------------------------------------------------------------
LOCK_TIMEOUT_S = 5.0  # how long to wait for another process's lock on search.sqlite (see SearchCache)
_MAX_ACTIONS = 64     # more actions than any search applies (MAX_ROUNDS deep): a row with more is junk


def _encode(opts: tuple[Opt, ...]) -> str:
    return json.dumps([[o.op, o.axis, list(o.arg) if isinstance(o.arg, tuple) else o.arg] for o in opts])


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31


def _decode(text: Any) -> tuple[Opt, ...]:
    """The actions a row stores. Raises ValueError unless ``text`` is a JSON list of at most
    ``_MAX_ACTIONS`` ``[action, axis, argument]`` triples with a known action, an int axis and an
    argument that is None, a non-negative int or a list of them (what :func:`_encode` writes)."""
    if not isinstance(text, str):
        raise ValueError(f"not text: {type(text).__name__}")
    try:
        items = json.loads(text)
    except RecursionError:  # (nested past the parser's depth)
        raise ValueError("nested too deep") from None
    if not isinstance(items, list) or len(items) > _MAX_ACTIONS:
        raise ValueError("not a list of actions")
    out = []
    for item in items:
        if not isinstance(item, list) or len(item) != 3:
            raise ValueError(f"not an [action, axis, argument] triple: {item!r}")
        op, axis, arg = item
        if not isinstance(op, str) or op not in ACTIONS:
            raise ValueError(f"unknown action {op!r}")
        if isinstance(axis, bool) or not isinstance(axis, int) or abs(axis) > _MAX_ACTIONS:
            raise ValueError(f"bad axis {axis!r}")
        if isinstance(arg, list) and all(_is_count(a) for a in arg):
            arg = tuple(arg)
        elif arg is not None and not _is_count(arg):
            raise ValueError(f"bad argument {arg!r}")
        out.append(Opt(op, axis, arg))
    return tuple(out)


def _problem(exc: sqlite3.Error) -> str:
    """What a sqlite error means for the cache: 'busy' (another connection holds a lock),
    'read-only', 'corrupt' (sqlite finds the file damaged or not a database) or 'other'."""
    code = getattr(exc, "sqlite_errorcode", None)  # (Python 3.11+)
    if code is not None:
        return {5: "busy", 6: "busy", 8: "read-only", 11: "corrupt", 26: "corrupt"}.get(code & 0xFF, "other")
    text = str(exc).lower()
    if "locked" in text:
        return "busy"
    if "readonly" in text:
        return "read-only"
    if "malformed" in text or "not a database" in text:
        return "corrupt"
    return "other"


class SearchCache:
    """The sqlite table ``best(key, opts, seconds)`` at ``path`` (default: ``search.sqlite`` in
    the cache directory), shared by processes. Safe from several threads (one connection at a
    time per process); lookups open the file read-only, stores read-write.

    What it does with trouble, so that one process's problem never costs the results saved:

    - a row that does not parse (:func:`_decode`) is a miss;
    - a file that sqlite reports corrupt (damaged, or not a database) is moved aside to
      ``<path>.corrupt`` and the table rebuilt;
    - a file its owner made read-only (no owner write bit, or not writable), or that sqlite cannot
      write (a read-only folder), is read, never written: new results of this process are
      dropped, after one warning;
    - a database another process keeps locked past ``LOCK_TIMEOUT_S`` (5 s: a corvid write is one
      INSERT, milliseconds; a lock held longer is a stuck process or an open transaction in a
      database browser), or one sqlite rejects otherwise (another schema), is left as it is and
      not used again by this process, after one warning: kernels are searched instead.
    """

    _lock = threading.Lock()
    _skipped: set[str] = set()     # paths this process no longer uses (warned)
    _unwritable: set[str] = set()  # paths this process no longer writes (warned)

    def __init__(self, path: str | os.PathLike | None = None):
        if path is None:
            from ..runtime.compiler import cache_dir

            path = cache_dir() / "search.sqlite"
        self.path = os.fspath(path)

    def get(self, key: str) -> tuple[Opt, ...] | None:
        """The actions stored for ``key``; None when there are none, the row does not parse, or
        the database is not in use (see the class docstring)."""
        text = self.get_text(key)
        if text is None:
            return None
        try:
            return _decode(text)
        except ValueError:
            return None

    def get_text(self, key: str) -> Any:
        """The row stored for ``key`` as it is stored (a search's JSON; another choice's own
        encoding, such as an attention kernel's variant: ``runtime/cuda.py``), or None."""
        def read(con: sqlite3.Connection) -> Any:
            if con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'best'").fetchone() is None:
                return None
            return con.execute("SELECT opts FROM best WHERE key = ?", (key,)).fetchone()

        with self._lock:
            if self.path in self._skipped or not os.path.exists(self.path):
                return None
            row = self._run(read, write=False)
        return None if row is None else row[0]

    def put(self, key: str, opts: tuple[Opt, ...], seconds: float) -> None:
        """Store ``opts`` (found in ``seconds``) for ``key``, unless the database is read-only or
        not in use (see the class docstring)."""
        self.put_text(key, _encode(opts), seconds)

    def put_text(self, key: str, text: str, seconds: float) -> None:
        """Store the encoded ``text`` for ``key`` (:meth:`get_text` reads it back), unless the
        database is read-only or not in use."""
        def write(con: sqlite3.Connection) -> None:
            with con:
                con.execute("CREATE TABLE IF NOT EXISTS best (key TEXT PRIMARY KEY, opts TEXT NOT NULL, seconds REAL)")
                con.execute("INSERT OR REPLACE INTO best VALUES (?, ?, ?)", (key, text, seconds))

        with self._lock:
            if self.path in self._skipped:
                return
            if self.path in self._unwritable or self._read_only():
                self._stop_writing()
                return
            self._run(write, write=True)

    def _read_only(self) -> bool:
        """The file (or, before it exists, its folder) is not to be written: the owner write bit
        as well as access(), since root may write anywhere, but a file its owner made read-only
        is a request not to."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return not os.access(os.path.dirname(os.path.abspath(self.path)), os.W_OK)
        return not st.st_mode & stat.S_IWUSR or not os.access(self.path, os.W_OK)

    def _run(self, fn: Callable[[sqlite3.Connection], Any], write: bool) -> Any:
        """``fn(connection)`` (called with the lock held), or None when sqlite fails: see the class
        docstring for what each failure does."""
        for attempt in range(2):
            try:
                if write:
                    con = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S)
                else:
                    uri = pathlib.Path(os.path.abspath(self.path)).as_uri() + "?mode=ro"
                    con = sqlite3.connect(uri, uri=True, timeout=LOCK_TIMEOUT_S)
                try:
                    return fn(con)
                finally:
                    con.close()
            except sqlite3.Error as exc:
                problem = _problem(exc)
                if problem == "corrupt" and attempt == 0 and not self._read_only():
                    with contextlib.suppress(OSError):
                        os.replace(self.path, self.path + ".corrupt")
                    if write:
                        continue
                    return None
                if problem == "read-only":
                    if write:
                        self._stop_writing()
                    return None  # (a reader meeting a crashed writer's journal: a miss until a writer recovers it)
                self._skipped.add(self.path)
                why = (f"another process kept it locked for more than {LOCK_TIMEOUT_S:g} s" if problem == "busy"
                       else f"sqlite reports {exc}")
                warnings.warn(f"corvid: not using the beam-search cache {self.path} for the rest of this process: "
                              f"{why}. The file is left as it is; kernels are searched instead of looked up.",
                              stacklevel=4)
                return None
        return None

    def _stop_writing(self) -> None:
        if self.path not in self._unwritable:
            self._unwritable.add(self.path)
            warnings.warn(f"corvid: the beam-search cache {self.path} is read-only: its results are used, "
                          "but those found by this process are not saved.", stacklevel=4)
