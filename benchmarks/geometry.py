"""The launch geometry of a workload's kernels on an NVIDIA GPU, without one.

``python -m benchmarks --geometry gpt2`` schedules one step of a workload on ``GEOMETRY``, a
device that runs nothing (the NULL device) but chooses and renders kernels as the CUDA device
does (its heuristics, its renderer, its launch of each kernel), and lists the kernels worst
first: those that move the most data with the fewest threads. A GPU of 132 SMs wants hundreds of
thousands of threads; a kernel of a few thousand threads over megabytes, or whose neighbouring
threads read far apart, is where a step's time goes. Two such kernels were found this way
before any GPU ran them: the loss per row over GPT-2's vocabulary and the norms' sums over its
8192 rows of 768, each one thread per row (corvid/codegen/opt.py: ``reduces_local``,
``GPU_LONG_ROW``).

What this cannot see: times (nothing runs), and the matrix products, which on a GPU go to
cuBLASLt (here the device has no library, so they are corvid kernels and are left out of the
list: ``--products`` lists them too). Workloads: ``gpt2`` (a bfloat16 training step of GPT-2
small, ``--layers`` of its 12 blocks, batch ``--batch`` x ``--tokens``), ``cnn`` (the MNIST CNN's
Adam step, batch 128), ``block`` (a GPT-2 block's forward, 8 x 256).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, TextIO

import numpy as np

from corvid.runtime.null import NullDevice, NullProgram

NAME = "GEOMETRY"
FEW_THREADS = 32768  # threads below which a kernel that moves data is listed as starved
MANY_BYTES = 2 << 20  # bytes a kernel moves before its thread count matters


@dataclass
class Launched:
    name: str
    kind: str  # "kernel", "template" (attention), "scatter", "host" (a library call or numpy)
    blocks: int
    threads: int  # per block
    flops: int
    nbytes: int
    opts: tuple[str, ...]
    product: bool  # a matrix product (a reduce whose inputs do not depend on an output loop): the library's on a GPU
    scattered: bool = False  # a work-group reduce whose neighbouring work items read elements far apart (scattered())

    @property
    def total(self) -> int:
        return self.blocks * self.threads


class GeometryDevice(NullDevice):
    """The NULL device with the CUDA device's heuristics, renderer and launch; records each
    kernel it is asked to compile (:data:`LAUNCHED`)."""

    optimization_actions = False
    attention_tensor_cores = True  # (an sm_90 GPU's: bfloat16 attention takes the tensor-core kernels)

    def __init__(self, index: int = 0) -> None:
        from corvid.render.cuda import CUDARenderer
        from corvid.runtime.cuda import CUDADevice

        super().__init__(index)
        self.name = NAME
        self.renderer = CUDARenderer()
        self.sum_block, self.split_reduces = CUDADevice.sum_block, CUDADevice.split_reduces
        self.max_threads = 1024

    def heuristics(self, kernel: Any) -> Any:
        from corvid.codegen.opt import gpu_heuristics
        from corvid.render.cuda import VECTOR_BYTES

        return gpu_heuristics(kernel, self.max_threads, vector_bytes=VECTOR_BYTES)

    def compile(self, kernel: Any, source: str) -> NullProgram:
        LAUNCHED.append(_launched(kernel))
        return NullProgram()


LAUNCHED: list[Launched] = []


def _launched(kernel: Any) -> Launched:
    from corvid.codegen.ir import Kernel
    from corvid.codegen.opt import reduce_loops
    from corvid.engine.host import TemplateKernel
    from corvid.render.cuda import cuda_launch

    from corvid.engine.schedule import ScatterKernel
    from corvid.render.cuda import CUDARenderer, scatter_launch

    flops, nbytes = kernel.estimates() if hasattr(kernel, "estimates") else (0, 0)
    if isinstance(kernel, TemplateKernel):
        return Launched(kernel.name, "template", kernel.groups, kernel.threads, flops, nbytes, (), False)
    if isinstance(kernel, ScatterKernel):  # (the CUDA renderer's scatter template: a thread per column and range)
        dims = scatter_launch(CUDARenderer().scatter_work_items(*kernel.shape))
        return Launched(kernel.name, "scatter", int(dims.blocks), dims.threads[0], flops, nbytes, (), False)
    if not isinstance(kernel, Kernel):
        return Launched(kernel.name, "host", 0, 0, flops, nbytes, (), False)
    dims = cuda_launch(kernel)
    nbytes = _moved(kernel)
    opts = tuple(str(o) for o in getattr(kernel, "opts", ()))
    # (register tiles are what gpu_heuristics gives a product-like reduce: its operands reused across outputs)
    product = bool(reduce_loops(kernel)) and any(o.startswith("upcast(") for o in opts)
    return Launched(kernel.name, "kernel", int(dims.blocks), math.prod(dims.threads), flops, nbytes, opts, product,
                    scattered(kernel))


def scattered(kernel: Any) -> bool:
    """Whether a work-group reduce's work items read a load's elements far apart: a load whose
    index moves by more than one element per step of the work-group loop (``group_local`` on a
    column: each warp's load then touches 32 rows, a sector each, for 4 bytes of each). Such a
    kernel has threads enough and is not starved, but reads at a fraction of the bandwidth. A step
    of up to 16 bytes is a work item reading a vector of its own (``vector_reduce``: a sum's items
    each take 4 neighbouring floats, one ``ld.global.v4``), neighbours' vectors side by side."""
    from corvid.codegen.opt import _stride
    from corvid.render.cuda import VECTOR_BYTES

    local = [lp.var for lp in kernel.reduce_loops() if lp.kind == "local"]
    for u in kernel.values():
        if u.op == "load":
            item = kernel.params[u.arg[0]].dtype.itemsize
            for v in local:
                step = _stride(u.arg[1], v)
                if isinstance(step, int) and abs(step) > 1 and abs(step) * item > VECTOR_BYTES:
                    return True
    return False




def _moved(kernel: Any) -> int:
    """The bytes a kernel reads and writes: each buffer's loads (and gathers) and stores as
    often as they run, but no more than the whole buffer (read through the caches once). A
    kernel's own ``estimates()`` counts every buffer whole, which made a copy of 98,304 elements
    out of a 26 MB buffer look like a kernel that moves 26 MB."""
    from corvid.codegen.ir import _trip_counts

    trips = _trip_counts(kernel)
    touched = [0] * len(kernel.params)
    for u in kernel.values():
        if u.op in ("load", "gather"):
            touched[u.arg[0]] += trips[id(u)]  # (a gather too: one element of its axis per trip)
    outputs = math.prod(lp.size for lp in kernel.loops)
    for st in kernel.stores:
        touched[st.param] += outputs
    return sum(min(n, p.size) * p.dtype.itemsize for n, p in zip(touched, kernel.params))


def _ready(*trees: Any) -> None:
    """Realize every tensor of ``trees`` (a workload's setup: its parameters and state), so that
    the step's kernels are the only ones listed."""
    import corvid as cv
    from corvid.tree import tree_flatten

    leaves = [t for tree in trees for t in tree_flatten(tree)[0] if isinstance(t, cv.Tensor)]
    if leaves:
        cv.realize(*leaves)


def _gpt2(args: argparse.Namespace) -> Callable[[], Any]:
    import corvid as cv

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import gpt

    with cv.default_device(NAME):
        cfg = gpt.GPTConfig(vocab_size=50257, block_size=args.tokens, n_embd=768, n_head=12, n_layer=args.layers)
        trainer = gpt.Trainer(gpt.GPT(cfg), amp=cv.bfloat16)
        x = cv.Tensor(np.zeros((args.batch, args.tokens), np.int64), device=NAME)
    _ready(trainer.params, trainer.state, x)

    def step() -> Any:
        with cv.default_device(NAME):
            return trainer.step(x, x)

    return step


def _cnn(args: argparse.Namespace) -> Callable[[], Any]:
    import corvid as cv

    from .latency import cnn_params, cnn_step

    rng = np.random.default_rng(0)
    ps = [cv.Tensor(a, device=NAME) for a in cnn_params(rng)]
    m, v = [cv.zeros(p.shape, device=NAME) for p in ps], [cv.zeros(p.shape, device=NAME) for p in ps]
    x = cv.Tensor(np.zeros((128, 1, 28, 28), np.float32), device=NAME)
    y = cv.Tensor(np.zeros(128, np.int64), device=NAME)
    _ready(ps, m, v, x, y)
    return lambda: cv.realize(cv.jit(cnn_step(cv))(ps, m, v, x, y, 1)[0])


def _block(args: argparse.Namespace) -> Callable[[], Any]:
    import corvid as cv

    from .blocks import block_input, block_sizes, block_weights, corvid_block

    s = block_sizes(False)
    with cv.default_device(NAME):
        model = corvid_block(s.d, s.heads)
    model.load_state_dict({k: cv.Tensor(w, device=NAME) for k, w in block_weights(False).items()})
    model.eval()
    a = cv.Tensor(block_input(False), device=NAME)
    _ready(model.state_dict(), a)
    return lambda: cv.jit(lambda m, a: m(a))(model, a).realize()


WORKLOADS = {"gpt2": _gpt2, "cnn": _cnn, "block": _block}


def geometry(workload: str, args: argparse.Namespace) -> list[Launched]:
    """The kernels one step of ``workload`` launches on :class:`GeometryDevice` (registered for
    the run only: ``cv.devices()`` does not list it afterwards); not those of its setup (the
    parameters' initialization, the optimizer's state), which is realized first."""
    from corvid.runtime import device as registry

    registry.register_backend(NAME, f"{__name__}:GeometryDevice")
    try:
        step = WORKLOADS[workload](args)  # (the setup: parameters, state and inputs, realized)
        LAUNCHED.clear()
        step()
        return list(LAUNCHED)
    finally:
        registry.unregister_backend(NAME)


def starved(k: Launched) -> bool:
    """A kernel that moves :data:`MANY_BYTES` or more with fewer than :data:`FEW_THREADS` threads."""
    return k.kind != "host" and k.nbytes >= MANY_BYTES and k.total < FEW_THREADS


def slow(k: Launched) -> bool:
    """A kernel that moves :data:`MANY_BYTES` or more starved, or scattered (see :func:`scattered`)."""
    return starved(k) or (k.scattered and k.nbytes >= MANY_BYTES)


def report(kernels: list[Launched], out: TextIO, products: bool = False) -> None:
    shown = [k for k in kernels if products or not k.product]
    shown.sort(key=lambda k: (not slow(k), -k.nbytes))
    out.write(f"{len(kernels)} kernels ({sum(k.product for k in kernels)} matrix products, the library's on a "
              f"GPU{'' if products else ': not listed'}); {sum(starved(k) for k in shown)} starved (>= "
              f"{MANY_BYTES >> 20} MiB over < {FEW_THREADS} threads) and "
              f"{sum(slow(k) and not starved(k) for k in shown)} scattered (a work-group's neighbours reading "
              f"elements apart) first\n")
    out.write(f"{'MB':>9} {'GFLOP':>7} {'blocks':>8} {'x threads':>9}  kernel  [actions]\n")
    for k in shown:
        mark = "  STARVED" if starved(k) else "  SCATTERED" if slow(k) else ""
        out.write(f"{k.nbytes / 1e6:9.1f} {k.flops / 1e9:7.2f} {k.blocks:8d} x {k.threads:7d}  {k.name}"
                  f"{' [' + ', '.join(k.opts) + ']' if k.opts else ''}{' (' + k.kind + ')' if k.kind != 'kernel' else ''}"
                  f"{mark}\n")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks --geometry", description=__doc__.split("\n\n")[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--layers", type=int, default=1, help="GPT-2 blocks (of 12; every block launches the same kernels)")
    p.add_argument("--products", action="store_true", help="list the matrix products too")
    args = p.parse_args(argv)
    kernels = geometry(args.workload, args)
    report(kernels, sys.stdout, args.products)
    return 0
