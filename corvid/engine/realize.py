"""Run a schedule: allocate outputs (from the pool), launch kernels, attach results to nodes.

``CORVID_DEBUG`` (environment variable, read on every realize) selects what is printed:
1 = kernel count and time per realize; 2 = each kernel's name, shape, time, GFLOP/s, GB/s, the
fraction of the device's roofline it reaches (``corvid/runtime/peak.py``; measured once per
machine and cached) and the optimization actions applied to it; 3 = also the generated source;
4 = also the graph (Graphviz dot).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .. import dtype as dt
from .. import profiler as _profiler
from ..graph.node import IDENTITY, MOVEMENT, Node, Op, graph_dot, node
from ..runtime.device import Buffer, get_device
from .schedule import (_SHARDED, HOST_VIEW_MAX, ScheduledKernel, _const_input, host_view, plan_for,
                       reshaped_buffer, schedule_from, stored_under_reshape, view_base_to_compute)


# os.environ's own mapping (bytes to bytes on POSIX): ``os.environ.get`` runs several Python
# functions (encode the key, decode the value), which cost ~15 us per realize when the caches are
# cold after a large kernel; one dict lookup costs a fraction. (Falls back to os.environ where it
# has no such mapping.)
_ENVIRON = getattr(os.environ, "_data", None)
_DEBUG_KEY = os.environ.encodekey("CORVID_DEBUG") if _ENVIRON is not None and hasattr(os.environ, "encodekey") else None


def debug_level() -> int:
    raw = _ENVIRON.get(_DEBUG_KEY) if _DEBUG_KEY is not None else os.environ.get("CORVID_DEBUG")
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        return 0


def holder(n: Node) -> Node:
    """The node whose buffer holds ``n``'s computed value: ``n`` itself, except for a literal
    (CONST) or a view of one (a sum's cotangent is a broadcast CONST), which gets a CONTIGUOUS
    copy. Nodes are shared (hash-consed): a buffer on the literal ``1.0``, or on its broadcast,
    would make every later kernel that uses 1.0 that way read it from memory."""
    m = n
    while m.buffer is None and (m.op in MOVEMENT or m.op is Op.DETACH) and m.src:
        m = m.src[0]
    return node(Op.CONTIGUOUS, (n,), None, n.dtype, n.shape) if m.op is Op.CONST and m.buffer is None else n


def realize(roots: list[Node], device: Any, root_devices: list[Any] | None = None) -> None:
    """Compute every node in ``roots`` that has no buffer yet, on ``device`` (or each on its entry
    of ``root_devices``; a device set for sharded values). A literal (CONST) root is left alone:
    pass its :func:`holder` (and keep a reference to it: nodes are weakly interned)."""
    if root_devices is None:
        if len(roots) == 1:  # (the common case: Tensor.realize)
            todo = roots if roots[0].buffer is None and roots[0].op is not Op.CONST else []
        else:
            todo = [r for r in roots if r.buffer is None and r.op is not Op.CONST]
        if not todo:
            return
        for r in todo:
            if r.numel == 0:
                r.buffer = empty_value(r, device)
            elif r.op in _SAME_EVERYWHERE and (value := _host_literal(r, device)) is not None:  # a small literal: numpy fills it
                b = Buffer(device, r.dtype, r.numel).copyin(np.full(r.shape, value, r.dtype.np))
                if r.buffer is None:
                    r.buffer = b
            elif (r.op in MOVEMENT or r.op in IDENTITY) and r.src:  # a view of a computed value:
                # (a small one of a small lazy value, or any reshape of a value stored whole
                # anyway, such as a library product's: all of that value first)
                base = view_base_to_compute(r, device) or stored_under_reshape(r)
                if base is not None:
                    realize([base], device)
                b = reshaped_buffer(r, device)                        # the same buffer, or a numpy copy
                if b is None:
                    a = host_view(r, device)
                    b = None if a is None else Buffer(device, r.dtype, r.numel).copyin(a)
                if b is not None and r.buffer is None:  # (never None over another thread's value)
                    r.buffer = b
        todo = [r for r in todo if r.buffer is None]
        if not todo:
            return
        devices = None
    else:
        pairs = [(r, d) for r, d in zip(roots, root_devices) if r.buffer is None and r.op is not Op.CONST]
        if not pairs:
            return
        todo, devices = [r for r, _ in pairs], [d for _, d in pairs]
        for r, d in pairs:
            if r.numel == 0:
                r.buffer = empty_value(r, d)
    dbg = debug_level()
    if dbg >= 4:
        print(graph_dot(todo), file=sys.stderr)
    found = plan_for(todo, device, devices, store_views=True)
    if found is None:
        return
    if dbg == 0 and found[3] is not _SHARDED and _run_plan(found[2], found[3]):
        return
    schedule = schedule_from(found)
    run_schedule(schedule, dbg)
    finish = getattr(schedule, "assemble", None)  # a partitioned (sharded) schedule's results
    if finish is not None:
        finish()


_SAME_EVERYWHERE = (MOVEMENT | IDENTITY | {Op.CONTIGUOUS}) - {Op.PAD}  # a literal under these stays one value


def _host_literal(r: Node, device: Any) -> Any:
    """The value of ``r`` when it is a small literal (a copy or view of a CONST) on a CPU that
    numpy fills as the kernel would: integers, bool and the 32/64-bit floats (numpy rounds a value
    to 16-bit floats in one step, the kernel's literal through float32); else None."""
    if r.numel > HOST_VIEW_MAX or type(device) is not str or not device.startswith("CPU") \
            or not (r.dtype.itemsize >= 4 or r.dtype.is_int or r.dtype is dt.bool_):
        return None
    n = r
    while n.op in _SAME_EVERYWHERE and n.src and n.buffer is None:
        n = n.src[0]
    return n.arg if n.op is Op.CONST and n.dtype is r.dtype else None


def _run_plan(every: list[Node], plan: list) -> bool:
    """Run ``plan``'s kernels straight from the plan: what :func:`run_schedule` does, without its
    reports and without building ScheduledKernels (this is the whole cost of a realize of a small
    graph). False, running nothing, when a kernel still needs compiling: the caller then goes
    through the schedule, which compiles several kernels at a time."""
    for _, _, compiled, _, dev in plan:
        if dev not in compiled.programs:
            return False
    for rs, ins, compiled, consts, dev in plan:
        out_node = every[rs[0]]
        out = Buffer(dev, out_node.dtype, out_node.numel)
        handles = [out.handle]
        if len(rs) > 1:  # (a kernel of several outputs: params 0..k-1)
            outs = [(out_node, out)] + [(every[r], Buffer(dev, every[r].dtype, every[r].numel)) for r in rs[1:]]
            handles = [b.handle for _, b in outs]
        # every input Buffer stays referenced until the kernel has returned, not only its handle:
        # a Buffer's last reference returns its memory to the pool, where another thread takes it
        # and writes it (a runtime-constants buffer made here, or a shared node's buffer that
        # another thread's realize replaced, freed under this kernel)
        held = []
        for i in ins:
            b = every[i].buffer
            if b is None:  # an empty input: no kernel computes it (schedule.py: _fill_empty)
                b = every[i].buffer = Buffer(dev, every[i].dtype, 0)
            elif b.device != dev and type(b) is Buffer and out_node.op is not Op.COPY:
                b = _moved(b, dev)
            held.append(b)
            handles.append(b.handle)
        if consts:
            b = _const_input([every[i] for i in consts], dev)[0].buffer
            held.append(b)
            handles.append(b.handle)
        if _profiler._ACTIVE is None:
            compiled.programs[dev](handles)
        else:
            _profiler._ACTIVE.record(compiled.kernel.name, dev, compiled.kernel,
                                     functools.partial(compiled.programs[dev], handles))
        if len(rs) > 1:
            for n, b in outs:
                if n.buffer is None:
                    n.buffer = b
        elif out_node.buffer is None:  # (another thread may have computed it meanwhile: keep one buffer)
            out_node.buffer = out
    return True


def empty_value(n: Node, device: Any) -> Any:
    """The buffer of an empty value on ``device`` (one empty part per device of a device set)."""
    if type(device) is tuple:
        from ..sharding import replicated_buffer

        return replicated_buffer([Buffer(d, n.dtype, 0) for d in device], n.shape)
    return Buffer(device, n.dtype, 0)


def compile_schedule(schedule: list[ScheduledKernel]) -> None:
    """Compile every kernel of ``schedule`` that has no program yet, several at a time (the C
    compiler runs as separate processes, so a thread per core keeps every core busy)."""
    todo = list({(id(sk.compiled), sk.device): sk for sk in schedule
                 if sk.device not in sk.compiled.programs}.values())
    if len(todo) < 2:
        return
    workers = min(len(todo), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    if workers < 2:
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(lambda sk: sk.program, todo):
            pass


def run_schedule(schedule: list[ScheduledKernel], dbg: int | None = None) -> None:
    dbg = debug_level() if dbg is None else dbg
    compile_schedule(schedule)
    start = time.perf_counter()
    for sk in schedule:
        program = sk.program
        outs = [Buffer(sk.device, n.dtype, n.numel) for n in sk.outputs]
        handles = [b.handle for b in outs]
        held = []  # the input Buffers, referenced until the kernel has returned (see _run_plan)
        for n in sk.inputs:
            b = n.buffer
            if b.device != sk.device and type(b) is Buffer and sk.output.op is not Op.COPY:
                b = _moved(b, sk.device)  # (a copy step reads its source device's buffer: that is its job)
            held.append(b)
            handles.append(b.handle)
        t0 = time.perf_counter()
        if _profiler._ACTIVE is None:
            program(handles)
        else:
            _profiler._ACTIVE.record(sk.name, sk.device, sk.kernel, functools.partial(program, handles))
        if dbg >= 2:
            get_device(sk.device).synchronize()
            _report(sk, time.perf_counter() - t0, dbg)
        for n, b in zip(sk.outputs, outs):
            if n.buffer is None:  # (another thread may have computed it meanwhile: keep one buffer)
                n.buffer = b
    if dbg >= 1 and schedule:
        get_device(schedule[0].device).synchronize()
        ms = (time.perf_counter() - start) * 1e3
        print(f"realize: {len(schedule)} kernel{'s' if len(schedule) != 1 else ''} in {ms:.3f} ms", file=sys.stderr)


def _moved(b: Buffer, device: str) -> Buffer:
    """A copy of ``b`` on ``device``, through host memory. Only a graph of constants (``zeros``,
    ``arange``) reaches a kernel with its value on another device: such a graph mentions no
    buffer, so one node serves every device, and it keeps the buffer of the device that computed
    it first (see ``Tensor.realize``)."""
    return Buffer(device, b.dtype, b.size).copyin(b.numpy())


def _report(sk: ScheduledKernel, seconds: float, dbg: int) -> None:
    flops, nbytes = sk.kernel.estimates()
    s = max(seconds, 1e-9)
    shape = "x".join(str(lp.size) for lp in sk.kernel.loops) or "1"
    peak = get_device(sk.device).peak()
    roof = ""
    if peak is not None:
        frac = peak.fraction(flops, nbytes, s, sk.output.dtype.name in ("float64", "complex128"))
        limit = "compute" if flops / peak.gflops > nbytes / peak.gbps else "memory"
        roof = f"  {frac * 100:5.1f}% of {limit} peak"
    opts = " ".join(str(o) for o in getattr(sk.kernel, "opts", ()))
    print(f"  {sk.name:<28} [{shape:>14}] {s * 1e6:10.1f} us  {flops / s / 1e9:8.2f} GFLOP/s  "
          f"{nbytes / s / 1e9:8.2f} GB/s{roof}{'  ' + opts if opts else ''}", file=sys.stderr)
    if dbg >= 3:
        print(sk.source, file=sys.stderr)
