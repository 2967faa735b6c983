"""Run a CUDA C kernel on the CPU, for tests: the kernel's source, compiled by the host's C++
compiler with an emulation of the CUDA built-ins it uses, each of a block's threads an OS thread.

Emulated: ``threadIdx``/``blockIdx`` (x), ``__shared__`` (one array for all threads; blocks run
one after another), ``__syncthreads``, ``__shfl_xor_sync`` (whole warps), ``__float_as_uint`` and
the like, and ``CV_MMA`` (``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32``, warp-wide) with
the PTX ISA's fragment layouts (and ``__shfl_down_sync``/``__shfl_sync`` of any value up to 8
bytes, for work-group reduces; :func:`kernel_source` makes a whole rendered kernel buildable): lane ``l``, ``g = l / 4``, ``c = l % 4``; A registers hold
(g, 2c..2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..) of the 16x16 A; B registers (2c..2c+1, g)
and (2c+8..2c+9, g) of the 16x8 B (k, n); C/D (g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1); the
lower-index element in the lower 16 bits. So a kernel that misplaces a fragment element gives
wrong values here as it would on a GPU. ``CV_LDSM_X4``/``_X2``/``_X4_T`` are ``ldmatrix``
(``.m8n8.x4``/``.x2``/``.x4.trans``, ``.b16``): lanes ``8i .. 8i+7`` give the row addresses of
matrix ``i``; lane ``l`` receives row ``g``'s elements ``2c``, ``2c+1`` of each (``.trans``:
column ``g``'s elements at rows ``2c``, ``2c+1``). ``CV_CP_ASYNC`` (``cp.async``) copies at once,
so its waits are no-ops: a kernel that reads a stage before waiting for it is not caught here.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

PRELUDE = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
struct cv_uint3 { unsigned x, y, z; };
static thread_local cv_uint3 threadIdx, blockIdx;
static thread_local unsigned cv_tid;  // the thread's linear id in its block (x fastest): warps are 32 of them
static std::barrier<>* cv_block_barrier;
static std::barrier<>* cv_warp_barrier[32];
static float cv_slots[32][32];
static unsigned cv_mma_a[32][32][4], cv_mma_b[32][32][2];
static float cv_mma_c[32][32][4];
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
static inline void __syncthreads() { cv_block_barrier->arrive_and_wait(); }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __shfl_xor_sync(unsigned, float v, int m) {
  const int w = cv_tid / 32, l = cv_tid % 32;
  cv_slots[w][l] = v;
  cv_warp_barrier[w]->arrive_and_wait();
  const float r = cv_slots[w][l ^ m];
  cv_warp_barrier[w]->arrive_and_wait();
  return r;
}
static unsigned long long cv_slots64[32][32];
template <class T> static inline T cv_exchange(T v, int from) {  // (a warp-wide exchange of values up to 8 bytes)
  static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
  const int w = cv_tid / 32, l = cv_tid % 32;
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  cv_slots64[w][l] = bits;
  cv_warp_barrier[w]->arrive_and_wait();
  bits = cv_slots64[w][from];
  cv_warp_barrier[w]->arrive_and_wait();
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
template <class T> static inline T __shfl_down_sync(unsigned, T v, unsigned d) {  // (past the warp: its own value)
  const int l = cv_tid % 32;
  return cv_exchange(v, l + (int)d < 32 ? l + (int)d : l);
}
template <class T> static inline T __shfl_sync(unsigned, T v, int src) { return cv_exchange(v, src & 31); }
static inline double __longlong_as_double(long long u) { double f; std::memcpy(&f, &u, 8); return f; }
static inline long long __double_as_longlong(double f) { long long u; std::memcpy(&u, &f, 8); return u; }
#define __builtin_assume(x) ((void)0)
static inline float cv_bf16(unsigned bits16) { return __uint_as_float((bits16 & 0xffffu) << 16); }
static inline void cv_emu_mma(float* d, const unsigned* a, unsigned b0, unsigned b1) {
  const int w = cv_tid / 32, l = cv_tid % 32;
  for (int i = 0; i < 4; i++) { cv_mma_a[w][l][i] = a[i]; cv_mma_c[w][l][i] = d[i]; }
  cv_mma_b[w][l][0] = b0; cv_mma_b[w][l][1] = b1;
  cv_warp_barrier[w]->arrive_and_wait();
  float A[16][16], B[16][8], C[16][8];
  for (int x = 0; x < 32; x++) {
    const int g = x / 4, c = x % 4;
    const unsigned* ra = cv_mma_a[w][x];
    const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * c, 2 * c, 2 * c + 8, 2 * c + 8};
    for (int i = 0; i < 4; i++) { A[rows[i]][cols[i]] = cv_bf16(ra[i]); A[rows[i]][cols[i] + 1] = cv_bf16(ra[i] >> 16); }
    B[2 * c][g] = cv_bf16(cv_mma_b[w][x][0]); B[2 * c + 1][g] = cv_bf16(cv_mma_b[w][x][0] >> 16);
    B[2 * c + 8][g] = cv_bf16(cv_mma_b[w][x][1]); B[2 * c + 9][g] = cv_bf16(cv_mma_b[w][x][1] >> 16);
    C[g][2 * c] = cv_mma_c[w][x][0]; C[g][2 * c + 1] = cv_mma_c[w][x][1];
    C[g + 8][2 * c] = cv_mma_c[w][x][2]; C[g + 8][2 * c + 1] = cv_mma_c[w][x][3];
  }
  cv_warp_barrier[w]->arrive_and_wait();
  const int g = l / 4, c = l % 4;
  const int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * c, 2 * c + 1, 2 * c, 2 * c + 1};
  for (int i = 0; i < 4; i++) {
    float acc = C[rr[i]][cc[i]];
    for (int k = 0; k < 16; k++) acc += A[rr[i]][k] * B[k][cc[i]];
    d[i] = acc;
  }
}
#define CV_MMA(d, a, b0, b1) cv_emu_mma((d), (a), (b0), (b1))
static const unsigned short* cv_ldsm_rows[32][32];
static inline void cv_emu_ldsm(unsigned* r, const unsigned short* p, int count, bool trans) {
  /* ldmatrix .m8n8 .b16: lanes 8i..8i+7 give the rows of matrix i; lane l gets row l/4's elements
     2(l%4), 2(l%4)+1 (trans: column l/4's elements at rows 2(l%4), 2(l%4)+1), lower one low */
  const int w = cv_tid / 32, l = cv_tid % 32, g = l / 4, c = l % 4;
  cv_ldsm_rows[w][l] = p;
  cv_warp_barrier[w]->arrive_and_wait();
  for (int i = 0; i < count; i++) {
    const unsigned lo = trans ? cv_ldsm_rows[w][8 * i + 2 * c][g] : cv_ldsm_rows[w][8 * i + g][2 * c];
    const unsigned hi = trans ? cv_ldsm_rows[w][8 * i + 2 * c + 1][g] : cv_ldsm_rows[w][8 * i + g][2 * c + 1];
    r[i] = lo | (hi << 16);
  }
  cv_warp_barrier[w]->arrive_and_wait();
}
#define CV_LDSM_X4(r, p) cv_emu_ldsm((r), (p), 4, false)
#define CV_LDSM_X2(r, p) cv_emu_ldsm((r), (p), 2, false)
#define CV_LDSM_X4_T(r, p) cv_emu_ldsm((r), (p), 4, true)
/* cp.async at once (its wait is then a no-op): 16 bytes, or zeros */
#define CV_CP_ASYNC(dst, src, ok) do { if (ok) std::memcpy((dst), (src), 16); else std::memset((dst), 0, 16); } while (0)
#define CV_CP_COMMIT() ((void)0)
#define CV_CP_WAIT(n) ((void)0)
"""

RUN = r"""
template <class F> static void cv_run(F call, int blocks, int tx, int ty, int tz) {
  const int threads = tx * ty * tz;
  std::barrier<> block(threads);
  std::vector<std::barrier<>*> warps;
  for (int w = 0; w < (threads + 31) / 32; w++) warps.push_back(new std::barrier<>(threads - 32 * w < 32 ? threads - 32 * w : 32));
  cv_block_barrier = &block;
  for (int w = 0; w < (int)warps.size(); w++) cv_warp_barrier[w] = warps[w];
  for (int b = 0; b < blocks; b++) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++)
      pool.emplace_back([=] {
        threadIdx = {(unsigned)(t % tx), (unsigned)(t / tx % ty), (unsigned)(t / (tx * ty))};
        blockIdx = {(unsigned)b, 0, 0};
        cv_tid = (unsigned)t;
        call();
      });
    for (auto& th : pool) th.join();
  }
  for (auto* w : warps) delete w;
}
"""
LAUNCH = RUN + r"""
extern "C" void cv_launch(void** args, int blocks, int threads) { cv_run([=] { CALL; }, blocks, threads, 1, 1); }
"""


_HOST_F16 = {  # the CUDA prelude's two PTX conversions, as the host's _Float16 does them
    'asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));': "_Float16 h; std::memcpy(&h, &x, 2); f = (float)h;",
    'asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));': "_Float16 v = (_Float16)f; std::memcpy(&h.bits, &v, 2);",
}


def kernel_source(src: str) -> tuple[str, str]:
    """(a rendered CUDA kernel's source as the emulation builds it, the name to call): its
    float16 conversions the host's, the whole in a namespace (its prelude's typedefs would clash
    with the host's ``<cstdint>``)."""
    import re

    for ptx, host in _HOST_F16.items():
        src = src.replace(ptx, host)
    name = re.search(r"__launch_bounds__\(\d+\) (\w+)\(", src).group(1)
    return f"namespace cvk0 {{\n{src}}}\n", f"cvk0::{name}"


def param_types(kernel) -> list[str]:
    """The C++ parameter types of a rendered kernel's params (corvid's own types, such as the
    bfloat16 struct, live in the kernel's namespace ``cvk0``)."""
    from corvid.render.cuda import _CUDA_TYPES

    out = []
    for p in kernel.params:
        t = _CUDA_TYPES[p.dtype.name]
        out.append(f"{'' if p.output else 'const '}{'cvk0::' if t.endswith('_t') or t.startswith('cv_') else ''}{t}*")
    return out


def compiler() -> str | None:
    """A C++ compiler with C++20's ``<barrier>``, or None."""
    return shutil.which("g++") or shutil.which("clang++")


def build(source: str, name: str, arg_types: list[str]) -> ctypes.CDLL:
    """The kernel ``name`` of ``source`` as a library with ``cv_launch(args, blocks, threads)``;
    ``arg_types``: the C types of its parameters, in order."""
    call = f"{name}(" + ", ".join(f"({t})args[{i}]" for i, t in enumerate(arg_types)) + ")"
    text = PRELUDE + source + LAUNCH.replace("CALL", call)
    key = hashlib.sha1(text.encode()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), "corvid-cuda-emulator")
    os.makedirs(folder, exist_ok=True)
    lib = os.path.join(folder, f"{key}.so")
    if not os.path.exists(lib):
        src = os.path.join(folder, f"{key}.cpp")
        with open(src, "w") as f:
            f.write(text)
        tmp = f"{lib}.{os.getpid()}"
        subprocess.run([compiler() or "g++", "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", src, "-o", tmp],
                       check=True, capture_output=True, text=True)
        os.replace(tmp, lib)
    return ctypes.CDLL(lib)


def launch(lib: ctypes.CDLL, arrays: list, blocks: int, threads: int) -> None:
    """Run the kernel over numpy arrays (their buffers, in parameter order)."""
    ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    lib.cv_launch(ptrs, blocks, threads)


def build_many(kernels: list[tuple[str, list[str]]], folder: str) -> ctypes.CDLL:
    """Several rendered CUDA kernels (``(source, C types of its parameters)``, each source as
    the renderer gives it) as one library in ``folder``: kernel ``i`` runs as
    ``cv_launch_<i>(args, blocks, tx, ty, tz)`` (a block of ``tx * ty * tz`` threads)."""
    import re

    parts = [PRELUDE, RUN]
    for i, (src, types) in enumerate(kernels):
        for ptx, host in _HOST_F16.items():
            src = src.replace(ptx, host)
        name = re.search(r"__launch_bounds__\(\d+\) (\w+)\(", src).group(1)
        src = src.replace('extern "C" ', "")  # (C names are global: the kernels of one library would clash)
        call = f"cvk{i}::{name}(" + ", ".join(f"({t.replace('cvk0::', f'cvk{i}::')})args[{j}]"
                                               for j, t in enumerate(types)) + ")"
        parts.append(f"namespace cvk{i} {{\n{src}}}\n"
                     f'extern "C" void cv_launch_{i}(void** args, int b, int tx, int ty, int tz) '
                     f"{{ cv_run([=] {{ {call}; }}, b, tx, ty, tz); }}\n")
    path, lib = os.path.join(folder, "kernels.cpp"), os.path.join(folder, "kernels.so")
    with open(path, "w") as f:
        f.write("".join(parts))
    done = subprocess.run([compiler() or "g++", "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", "-w", path,
                           "-o", lib], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr[:6000])
    return ctypes.CDLL(lib)


def launch_many(lib: ctypes.CDLL, i: int, arrays: list, blocks: int, threads: tuple[int, int, int]) -> None:
    """Run kernel ``i`` of a :func:`build_many` library over numpy arrays."""
    ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    getattr(lib, f"cv_launch_{i}")(ptrs, blocks, *threads)
