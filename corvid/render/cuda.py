"""Render a linearized kernel as CUDA C (the ``CUDA`` backend, :mod:`corvid.runtime.cuda`).

CUDA C is C++ with a grid of thread blocks, so :class:`CUDARenderer` keeps the C renderer's
statements and values and the work-group structure it shares with OpenCL
(:mod:`corvid.render.gpu`: launch geometry, work-group reduces through ``__shared__`` memory and
``__syncthreads()``, stores gated to the first thread of a shared reduce). What is CUDA's own:

* the signature: ``extern "C" __global__ void __launch_bounds__(256) name(float* __restrict__ p0,
  const float* __restrict__ p1, ...)`` (``const __restrict__`` inputs may go through the
  read-only cache);
* the grid (:func:`cuda_launch`): CUDA's grid is 2^31-1 blocks along x but only 65535 along y and
  z, so the grid loops are flattened into one index and taken apart by division. With
  ``"local"`` loops, that index is the block (``blockIdx.x``) and the ``"local"`` loops are
  ``threadIdx.x/y/z``. Without any, the renderer chooses the block: :data:`BLOCK_THREADS`
  threads, each one grid point (``blockIdx.x * 256 + threadIdx.x``), and the spare threads of
  the last block return at once -- safe because such a kernel has no barrier;
* no headers: NVRTC ships no C library and no ``cuda_fp16.h`` (those come with a full toolkit),
  so the prelude typedefs the ``<stdint.h>`` names and converts float16 with PTX's ``cvt``
  instructions, except a nan, which every float conversion (float16, float32, float64) writes
  on its bits as x86 converts it -- sign and the payload's top bits kept, quieted -- where
  ``cvt`` gives the GPU's canonical nan (ml_dtypes' fp8 tables differed on an H200); float16 is stored as ``cv_half``, a 16-bit struct that reads as a float (the C
  renderer writes ``(float)p1[i]``), bfloat16 as ``uint16_t``, float8_e4m3fn and float8_e5m2 as
  ``uint8_t`` (converted on the bits by the C renderer's helpers,
  :func:`corvid.render.c.float8_helpers`: CUDA's own fp8 header is part of the toolkit); all are
  computed in float, as on the CPU, and rounded to nearest even when stored;
* math: ``expf``, ``logf``... for float, ``exp``, ``log``... for double (CUDA's, within the
  documented ulp bounds of its math library; IEEE division and square root: kernels are built
  without fast math, and with ``--fmad=false``: multiply-adds are fused only where the IR says,
  so a value computed in two kernels is the same in both, as on the CPU);
* numpy's semantics kept where CUDA's differ: a float converted to a narrow or unsigned integer
  goes through a wider signed integer and wraps, as numpy's does on x86 (CUDA's own conversion
  saturates); integer arithmetic wraps through unsigned types, as in the C renderer.

Complex values are the structs ``cv_complex64``/``cv_complex128`` (real part ``x``, imaginary
``y``), computed by the helpers of :mod:`corvid.render.gpu` (numpy's product and quotient; exp,
log, sqrt, the trigonometric and hyperbolic functions; the inverse ones and complex powers raise
NotImplementedError). Vectorized kernels are not rendered (the CUDA device applies no CPU actions);
CUDA's vectors are the compiler's: every kernel states that its buffers are 16-byte aligned
(:meth:`CUDARenderer._assumptions`), so neighbouring loads of a work item's outputs
(:func:`corvid.codegen.opt.wide_items`) become one ``ld.global.v4`` where their indices keep
that alignment, and stay single loads where they do not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from ..codegen.ir import Kernel, U
from ..dtype import DType
from ..graph.node import Op
from ..graph.symbolic import Sym, upper
from .c import _MATH, FLOAT8, compute_type
from .gpu import GPURenderer, Launch, launch

BLOCK_THREADS = 256  # threads per block of a kernel without "local" loops
WARP = 32
# accumulator types __shfl_down_sync takes (CUDA's overloads: 32- and 64-bit integers and floats)
_SHUFFLED = frozenset({"float", "double", "int32_t", "uint32_t", "int64_t", "uint64_t"})
VECTOR_BYTES = 16  # the widest load and store of one instruction (ld.global.v4.f32): wide_items's target
BUFFER_ALIGN = 16  # the alignment kernels are told their buffers have (cuMemAlloc gives 256)
MAX_BLOCKS = (1 << 31) - 1  # gridDim.x
MAX_THREADS = (1024, 1024, 64)  # blockDim.x, .y, .z (and at most 1024 in all) on every GPU since sm_20

_CUDA_TYPES = {"bool": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
               "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
               "float16": "cv_half", "bfloat16": "uint16_t", "float32": "float", "float64": "double",
               "float8_e4m3fn": "uint8_t", "float8_e5m2": "uint8_t", "complex64": "cv_complex64",
               "complex128": "cv_complex128"}

_PRELUDE = """typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
static inline __device__ long long cv_floordiv(long long a, long long b) { long long q = a / b; return q - ((a % b != 0) & ((a < 0) != (b < 0))); }
static inline __device__ long long cv_clampi(long long i, long long hi) { return i < 0 ? 0 : (i > hi ? hi : i); }
static inline __device__ long long cv_floormod(long long a, long long b) { long long r = a % b; return r + (((r != 0) & ((r < 0) != (b < 0))) ? b : 0); }
// float conversions keep a nan's sign and the top bits of its payload, quieted, as x86's do (and
// so numpy and ml_dtypes); the GPU's cvt instructions give their canonical nan instead
static inline __device__ float cv_f16_f32(uint16_t x) {
  if ((x & 0x7fffu) > 0x7c00u) return __uint_as_float(((uint32_t)(x & 0x8000u) << 16) | 0x7fc00000u | ((uint32_t)(x & 0x3ffu) << 13));
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x)); return f;
}
struct cv_half {  // a float16 in memory, read as a float
  uint16_t bits;
  __device__ operator float() const { return cv_f16_f32(bits); }
};
static inline __device__ cv_half cv_f32_f16(float f) {
  cv_half h; uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) { h.bits = (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu)); return h; }
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f)); return h;
}
static inline __device__ double cv_f32_f64(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return __longlong_as_double((long long)(((uint64_t)(u & 0x80000000u) << 32) | 0x7ff8000000000000ULL | ((uint64_t)(u & 0x7fffffu) << 29)));
  return (double)f;
}
static inline __device__ float cv_f64_f32(double d) {
  uint64_t u = (uint64_t)__double_as_longlong(d);
  if ((u & 0x7fffffffffffffffULL) > 0x7ff0000000000000ULL)
    return __uint_as_float((uint32_t)((u >> 32) & 0x80000000u) | 0x7fc00000u | (uint32_t)((u >> 29) & 0x7fffffu));
  return (float)d;
}
static inline __device__ float cv_bf16_f32(uint16_t x) { return __uint_as_float((uint32_t)x << 16); }
static inline __device__ uint16_t cv_f32_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
struct cv_complex64 { float x, y; };  // complex values: (real, imaginary), as numpy stores them
struct __align__(16) cv_complex128 { double x, y; };
static inline __device__ uint64_t cv_f2u64(double x) {  // as x86 converts (numpy): wraps below 0
  return x < 9223372036854775808.0 ? (uint64_t)(long long)x : ((uint64_t)(long long)(x - 9223372036854775808.0)) ^ 0x8000000000000000ULL;
}
"""

# C spellings the inherited C renderer writes, and their CUDA equivalents (applied to the rendered
# body and helpers; the prelude above is written in CUDA C already). Helpers become device
# functions; nan and inf are written as their bits (NVRTC has no math_constants.h).
_C_TO_CUDA = (("_Bool", "bool"), ("static inline ", "static inline __device__ "),
              ("__builtin_fmaf(", "fmaf("), ("__builtin_fma(", "fma("),
              ('(-__builtin_nanf(""))', "__int_as_float(0xffc00000)"),
              ('(-__builtin_nan(""))', "__longlong_as_double(0xfff8000000000000LL)"),
              ('__builtin_nanf("")', "__int_as_float(0x7fc00000)"),
              ('__builtin_nan("")', "__longlong_as_double(0x7ff8000000000000LL)"),
              ("__builtin_inff()", "__int_as_float(0x7f800000)"),
              ("__builtin_inf()", "__longlong_as_double(0x7ff0000000000000LL)"),
              ("#pragma GCC unroll", "#pragma unroll"),
              ("copysign(0, ", "copysign(0.0, "),
              ("float _Complex", "cv_complex64"), ("double _Complex", "cv_complex128"), ("__builtin_complex(", "cv_complex("))  # (an int 0 picks a host-only C++ overload)


@dataclass(frozen=True)
class CUDALaunch:
    """How a kernel launches on CUDA: ``blocks`` along x (the grid loops flattened) of
    ``threads`` = (x, y, z) each. ``geometry`` names the loops; ``points`` is the number of grid
    points (one per thread without ``"local"`` loops, one per block with them)."""

    geometry: Launch
    blocks: int
    threads: tuple[int, int, int]
    points: int

    @property
    def guarded(self) -> bool:
        """Whether the last block has spare threads that must do nothing (a symbolic count: maybe)."""
        if isinstance(self.points, Sym):
            return not self.geometry.local
        return not self.geometry.local and self.blocks * self.threads[0] > self.points

    @classmethod
    def of(cls, geometry: Launch) -> CUDALaunch:
        """The blocks and threads for ``geometry``; NotImplementedError past CUDA's limits."""
        points = math.prod(lp.size for lp in geometry.grid)
        if isinstance(points, Sym):  # (symbolic sizes: whole blocks, the count of them computed per launch)
            if geometry.local:
                sizes = [lp.size for lp in geometry.local] + [1] * (3 - len(geometry.local))
                if any(isinstance(s, Sym) for s in sizes):
                    raise NotImplementedError("CUDA renderer: a block over a symbolic size")
                return cls(geometry, points, (sizes[0], sizes[1], sizes[2]), points)
            return cls(geometry, (points + BLOCK_THREADS - 1) // BLOCK_THREADS, (BLOCK_THREADS, 1, 1), points)
        if geometry.local:
            sizes = [lp.size for lp in geometry.local] + [1] * (3 - len(geometry.local))
            threads = (sizes[0], sizes[1], sizes[2])
            blocks = points
        else:
            threads = (max(min(BLOCK_THREADS, points), 1), 1, 1)
            blocks = -(-points // threads[0])
        if any(t > m for t, m in zip(threads, MAX_THREADS)) or math.prod(threads) > MAX_THREADS[0]:
            raise NotImplementedError(f"CUDA renderer: a block of {threads} threads (at most {MAX_THREADS}, "
                                      f"{MAX_THREADS[0]} in all)")
        if blocks > MAX_BLOCKS:
            raise NotImplementedError(f"CUDA renderer: {blocks} blocks (at most {MAX_BLOCKS})")
        return cls(geometry, blocks, threads, points)


def scatter_launch(items: int) -> CUDALaunch:
    """The launch of a SCATTER kernel of ``items`` work items (one per output column and range of
    rows, :meth:`corvid.render.gpu.GPURenderer.scatter_work_items`): blocks of
    :data:`BLOCK_THREADS` threads, the last block's spare threads returning at once."""
    threads = max(min(BLOCK_THREADS, items), 1)
    blocks = -(-items // threads)
    if blocks > MAX_BLOCKS:
        raise NotImplementedError(f"CUDA renderer: {blocks} blocks (at most {MAX_BLOCKS})")
    return CUDALaunch(Launch((), ()), blocks, (threads, 1, 1), items)


def cuda_launch(k: Kernel) -> CUDALaunch:
    """The launch of ``k`` as :class:`CUDARenderer` renders it (the runtime launches with it)."""
    return CUDALaunch.of(launch(k, max_grid=None))


class CUDARenderer(GPURenderer):
    """Kernel IR → CUDA C (see the module docstring), for NVRTC."""

    dialect, device, types, long_type = "CUDA", "CUDA", _CUDA_TYPES, "long long"
    shared, barrier = "__shared__", "__syncthreads();"
    complex_types = {"complex64": "cv_complex64", "complex128": "cv_complex128"}
    function = "static inline __device__"
    math_suffix = "f"
    max_grid = None  # every grid loop may be flattened into the block index
    spellings = _C_TO_CUDA
    bits_helpers = ("static inline uint32_t cv_f32_u32(float f) { return __float_as_uint(f); }\n"
                    "static inline float cv_u32_f32(uint32_t u) { return __uint_as_float(u); }\n")
    # (kind, params, shapes, mask_info) -> the tensor-core attention kernel's Variant; a device's
    # own (the CUDA device times them under a beam width); None: the default variant
    attention_variant: Callable[..., Any] | None = None

    # a scatter's work items: a GPU of 132 SMs runs some 270,000 threads at once; at the default
    # 4096 an embedding table's gradient (GPT-2's 50257 x 768) ran on 4608 threads, each copying
    # 8376 rows of its column with a few loads in flight (some 0.1 TB/s). The index reads this
    # allows cost a warp one broadcast load each (the 32 threads of a warp read the same index),
    # and no thread reads more of them than before: only more threads run side by side
    scatter_items = 1 << 16
    scatter_scans = 1 << 30

    def _render(self, k: Kernel) -> str:
        self.dims: CUDALaunch | None = None
        return super()._render(k)

    def _launch(self) -> CUDALaunch:
        if self.dims is None:
            self.dims = CUDALaunch.of(self.launch)
        return self.dims

    def _signature(self, k: Kernel) -> str:
        args = ", ".join(f"{'' if p.output else 'const '}{_CUDA_TYPES[p.dtype.name]}* __restrict__ p{i}"
                         for i, p in enumerate(k.params))
        return f'extern "C" __global__ void __launch_bounds__({math.prod(self._launch().threads)}) {k.name}({args})'

    def _prelude(self) -> str:
        return _PRELUDE

    def _assumptions(self, k: Kernel) -> list[str]:
        # every buffer a kernel gets is a whole cuMemAlloc block (runtime/cuda.py: CUDAAllocator;
        # corvid's buffers have no offsets), which the driver aligns to 256 bytes: said here, the
        # compiler merges a work item's neighbouring loads and stores into 16-byte instructions
        # (wide_items in codegen/opt.py) -- and only where the indices keep that alignment
        return [f"  __builtin_assume(((unsigned long long)p{i} & {BUFFER_ALIGN - 1}) == 0);" for i in range(len(k.params))]

    def _ids(self) -> list[str]:
        lines = super()._ids()
        dims = self._launch()
        if not self.launch.grid:
            return lines
        if self.launch.local:  # a block per grid point
            return [*lines, "  int cv_point = (int)blockIdx.x;"]
        t = "long long" if upper(dims.blocks * dims.threads[0]) >= 1 << 31 else "int"
        lines.append(f"  {t} cv_point = ({t})blockIdx.x * {dims.threads[0]} + ({t})threadIdx.x;")
        if dims.guarded:
            lines.append(f"  if (cv_point >= {dims.points}) return;  // (the last block's spare threads; no barrier follows)")
        return lines

    def _grid_index(self, pos: int) -> str:
        grid = self.launch.grid
        stride = math.prod(lp.size for lp in grid[pos + 1:])
        out = "cv_point" if stride == 1 else f"cv_point / {stride}"
        return out if pos == 0 else f"({out} % {grid[pos].size})"

    def _local_id(self, dim: int) -> str:
        return f"threadIdx.{'xyz'[dim]}"

    def _emit_shared_reduce(self, u: U, pad: str) -> None:
        """A work-group reduce whose work items are whole warps of ``threadIdx.x`` (its width a
        multiple of 32) and whose accumulator a warp can shuffle: each warp's partials meet in
        registers (``__shfl_down_sync``, a tree of 5 steps into lane 0), and only the warps'
        partials go through shared memory, each work item combining them in the same order, so
        every item holds the same total. Two barriers per reduce, where the tree through shared
        memory (:meth:`GPURenderer._emit_shared_reduce`, kept for the rest) takes one per step:
        9 for a block of 256. The sum is still a pairwise tree."""
        lp = next(x for x in u.arg[1] if x.kind == "local")
        dims = self.launch.local
        own = self._alias.get(lp.var, lp.var)
        t = self._type(u)
        if not dims or dims[0].var != own or dims[0].size % WARP or t not in _SHUFFLED:
            super()._emit_shared_reduce(u, pad)
            return
        stride = {x.var: math.prod(y.size for y in dims[j + 1:]) for j, x in enumerate(dims)}
        first = " + ".join(f"{self._var(x.var)} * {stride[x.var]}" for x in dims[1:]) or "0"
        acc, lid, step, warps = self._name(u), self._var(lp.var), stride[own], dims[0].size // WARP
        other = f"{acc}_o"
        self.lines += [
            f"{pad}for (int o = {WARP // 2}; o > 0; o >>= 1) {{  // (the warp's partials, into lane 0)",
            f"{pad}  {t} {other} = __shfl_down_sync(0xffffffffu, {acc}, o);",
            f"{pad}  {acc} = {self._combine(u, acc, other)};",
            f"{pad}}}",
        ]
        if warps == 1:
            self.lines.append(f"{pad}{acc} = __shfl_sync(0xffffffffu, {acc}, 0);")
            return
        arr = f"{acc}_warps"
        self.shared_decls.append(f"  {self.shared} {t} {arr}[{warps * step}];")
        self.lines += [
            f"{pad}if (({lid} & {WARP - 1}) == 0) {arr}[({lid} >> 5) * {step} + {first}] = {acc};",
            f"{pad}{self.barrier}",
            f"{pad}{acc} = {arr}[{first}];",
            f"{pad}for (int w = 1; w < {warps}; w++) {{",
            f"{pad}  {t} {other} = {arr}[w * {step} + {first}];",
            f"{pad}  {acc} = {self._combine(u, acc, other)};",
            f"{pad}}}",
            f"{pad}{self.barrier}  // (before the array is written again)",
        ]

    def _math_name(self, op: Op, dt: DType) -> str:
        return _MATH[op] + ("f" if compute_type(dt) == "float" else "")

    # SCATTER (corvid/render/gpu.py: _render_scatter), launched by scatter_launch ---------------
    def _scatter_signature(self, name: str, t: str, x: bool = True) -> str:
        return (f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {name}({t}* __restrict__ out, '
                f"{f'const {t}* __restrict__ x, ' if x else ''}const int64_t* __restrict__ idx, const {t}* __restrict__ src)")

    def _template_signature(self, name: str, n_inputs: int, threads: int) -> str:
        args = ", ".join(["float* __restrict__ p0"] + [f"const float* __restrict__ p{i + 1}" for i in range(n_inputs)])
        return f'extern "C" __global__ void __launch_bounds__({threads}) {name}({args})'

    def _group_id(self) -> str:
        return "blockIdx.x"

    def render_attention(self, name: str, params: dict, shapes: list[tuple[int, ...]]) -> tuple[str, int, int, int]:
        """The attention kernels of :class:`GPURenderer`; ``fwd_tc``, ``dq_tc`` and ``dkdv_tc``
        (bfloat16 operands) are the tensor-core kernels of :mod:`corvid.render.cuda_attention`, in
        the variant ``attention_variant(kind, params, shapes, mask_info)`` picks (the CUDA
        device's: :meth:`corvid.runtime.cuda.CUDADevice.attention_variant`; the default without one)."""
        if params["kind"].endswith("_tc"):
            from .cuda_attention import DEFAULT, render
            from .gpu import attention_shapes

            info = attention_shapes("fwd", shapes, params["has_mask"])
            choose = self.attention_variant  # (the device's choice of split: timed with a beam width)
            variant = DEFAULT if choose is None else choose(params["kind"], params, shapes, info)
            return render(name, params, shapes, info, variant=variant)
        return super().render_attention(name, params, shapes)

    def _scatter_id(self) -> str:
        return f"(long long)blockIdx.x * {BLOCK_THREADS} + (long long)threadIdx.x"

    def _scatter_store_narrow(self, dtype: DType) -> str:
        if dtype.name == "float16":
            return "{p}[{i}] = cv_f32_f16({v}).bits;"
        return "{p}[{i}] = cv_f32_bf16({v});"

    def _to_storage(self, expr: str, dt: DType) -> str:
        return f"cv_f32_f16({expr})" if dt.name == "float16" else super()._to_storage(expr, dt)

    def _cast(self, x: str, src: DType, dst: DType) -> str:
        if src.is_float and not src.is_complex and dst.is_float and not dst.is_complex:
            s, d = compute_type(src), compute_type(dst)
            if (s, d) == ("float", "double"):
                return f"cv_f32_f64({x})"
            if (s, d) == ("double", "float"):
                return f"cv_f64_f32({x})"
        if src.is_float and src.name not in FLOAT8 and dst.is_int and (dst.itemsize < 4 or dst.is_unsigned):
            if dst.name == "uint64":
                return f"cv_f2u64({x})"
            wide = "int" if dst.itemsize < 4 else "long long"  # (x86 converts through these, then wraps)
            return f"({compute_type(dst)})({wide})({x})"
        return super()._cast(x, src, dst)

    def _bitcast(self, u) -> str:
        s, d = u.src[0].dtype, u.dtype
        if s.is_bool or d.is_bool or s.itemsize != d.itemsize:
            raise NotImplementedError(f"CUDA renderer: bitcast from {s.name} to {d.name}")
        x, bits = self._ref(u.src[0]), f"uint{8 * s.itemsize}_t"
        raw = {"float32": f"__float_as_uint({x})", "float64": f"(uint64_t)__double_as_longlong({x})",
               "float16": f"cv_f32_f16({x}).bits"}.get(s.name, f"({bits})({self._to_storage(x, s)})")
        return {"float32": f"__uint_as_float({raw})", "float64": f"__longlong_as_double((long long)({raw}))",
                "float16": f"cv_f16_f32({raw})"}.get(d.name, self._from_storage(f"({_CUDA_TYPES[d.name]})({raw})", d))
