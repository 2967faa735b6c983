"""Attention on tensor cores: CUDA C with ``mma.sync`` (sm_80 and later), for bfloat16 queries,
keys and values (corvid/nn/flash.py routes ``scaled_dot_product_attention`` here; the fused
float32 template of :mod:`corvid.render.gpu` serves every other case).

The three kernels are flash attention's, in the form FlashAttention-2 gave them, with corvid's
split of the backward (a kernel for ``dq``, one for ``dk`` and ``dv``: no atomics, each output
row written by one warp, deterministic). A block of 4 warps takes 64 rows (queries; keys for
``dk``/``dv``), each warp 16 of them, kept in registers as the instruction's A fragments for the
whole kernel. The other side (keys and values; queries and output gradients) comes through
shared memory in tiles, as bfloat16, row-major, in two stages: the next tile's copies
(``cp.async``, 16 bytes each) are in flight while a tile is computed. B registers come from the
tiles by ``ldmatrix`` (``.trans`` where a product reads a tile by columns: the values in
``p @ v``, so no tile is ever transposed in memory). The forward computes a warp's
16 x 64 scores (16 x 32 for heads over 64) with ``mma.sync.m16n8k16``, applies the scale, the mask and the causal limit in
the accumulator registers, updates its rows' running maximum and sum (the four lanes that hold a
row's columns combine theirs with ``__shfl_xor_sync``), rescales its output accumulators, and
multiplies the probabilities (the score accumulators rounded to bfloat16, which are laid out as
the next product's A fragments) by the values. The backward recomputes the probabilities from
the forward's log-sum-exp the same way. Sums are float32 throughout; the output and log-sum-exp
are written in float32, the gradients in bfloat16 (each the one rounding of its float32 sum).
Scores are kept in base 2 (the scale times log2(e)), so that each probability is one ``ex2.approx.ftz`` (``cv_exp2``); a tile wholly inside the causal limit and the lengths, with
no mask, skips the per-score tests.

Fragment layouts (PTX ISA, ``mma.m16n8k16`` with 16-bit A/B and float32 C/D): lane ``l`` has
``g = l / 4`` and ``c = l % 4``. A (16x16, row-major), four 32-bit registers of two elements:
(g, 2c..2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..). B (16x8, k x n): (2c..2c+1, g) and
(2c+8..2c+9, g). C and D (16x8): (g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1). The element of
lower index is the lower half of a register.

Tested without a GPU (tests/test_attention_tc.py): the same source, compiled by the host's C++
compiler with an emulation of the CUDA built-ins it uses (threads, barriers, shuffles, the
``mma`` instruction with the layouts above, ``ldmatrix`` and its ``.trans`` with theirs, and
``cp.async`` as an immediate copy), against numpy's float64 attention and gradients;
and compiled for sm_90 with ``nvcc`` where it is installed (tests/test_cuda.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

WARPS = 4  # warps per block by default (16 rows each: a block takes 64 rows)
SHARED_BYTES = 48 * 1024  # static shared memory a kernel may declare
MAX_HEAD = 128  # head sizes (multiples of 16) the kernel takes; the two stages of tiles stay under 48 KiB
LOG2E, LN2 = 1.4426950408889634, 0.6931471805599453
PAD = 8  # bfloat16 elements after each shared row: ldmatrix's 8 rows (16 bytes each) then hit distinct banks

# the instruction, as inline PTX; the host emulation defines CV_MMA as a function instead
MMA = """#ifndef CV_MMA
#define CV_MMA(d, a, b0, b1) asm volatile( \\
  "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" \\
  : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]) \\
  : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"(b0), "r"(b1))
#endif
#ifdef __CUDA_ARCH__
/* a generic pointer into shared memory as the 32-bit shared address the instructions below take */
static __device__ __forceinline__ unsigned cv_smem(const void* p) {
  unsigned a; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p)); return a;
}
#endif
#ifndef CV_LDSM_X4
/* ldmatrix: lanes 8i..8i+7 give the rows (16 bytes each) of 8x8 matrix i; lane l gets, of each,
   row l/4's elements 2(l%4) and 2(l%4)+1 (.trans: column l/4's), the lower in the lower half */
#define CV_LDSM_X4(r, p) asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" \
  : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3]) : "r"(cv_smem(p)))
#define CV_LDSM_X2(r, p) asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" \
  : "=r"((r)[0]), "=r"((r)[1]) : "r"(cv_smem(p)))
#define CV_LDSM_X4_T(r, p) asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" \
  : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3]) : "r"(cv_smem(p)))
/* 16 bytes from global to shared memory without passing through registers; zeros where !ok */
#define CV_CP_ASYNC(dst, src, ok) asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" \
  :: "r"(cv_smem(dst)), "l"(src), "r"((ok) ? 16 : 0) : "memory")
#define CV_CP_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define CV_CP_WAIT(n) asm volatile("cp.async.wait_group %0;" :: "n"(n) : "memory")
#endif
static __device__ __forceinline__ unsigned cv_pack_bf16_out(float lo, float hi) {  /* nearest even; nan kept */
  unsigned a = __float_as_uint(lo), b = __float_as_uint(hi);
  a = (a & 0x7fffffffu) > 0x7f800000u ? (a >> 16) | 0x40u : (a + 0x7fffu + ((a >> 16) & 1u)) >> 16;
  b = (b & 0x7fffffffu) > 0x7f800000u ? (b >> 16) | 0x40u : (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  return a | (b << 16);
}
#ifdef __CUDA_ARCH__
/* 2^x by the GPU's one exponential instruction, flushing subnormals: what exp2f does after a test
   and two multiplies that keep a subnormal result (a probability under 2^-126, next to the row's
   largest, 1: nothing a float32 sum or a bfloat16 operand keeps) */
static __device__ __forceinline__ float cv_exp2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
/* two floats rounded to bfloat16 (nearest even) and packed, lo in the lower half: one instruction
   (sm_80; its first source goes to the upper half). The emulation's form below is the same
   rounding written out (a nan there may come out with another payload: still a nan) */
static __device__ __forceinline__ unsigned cv_pack_bf16(float lo, float hi) {
  unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
#else
static __device__ __forceinline__ float cv_exp2(float x) { return exp2f(x); }
static __device__ __forceinline__ unsigned cv_pack_bf16(float lo, float hi) {  /* round to nearest even */
  unsigned a = __float_as_uint(lo), b = __float_as_uint(hi);
  a = (a + 0x7fffu + ((a >> 16) & 1u)) >> 16;
  b = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  return a | (b << 16);
}
#endif
"""


@dataclass(frozen=True)
class Variant:
    """How a tensor-core attention kernel splits its work. The values do not depend on it: each
    output row is one warp's sums, in the same order, except that the forward's ``tile`` moves
    where its running maximum rescales (float32 rounding apart). ``warps``: warps per block
    (2, 4 or 8), each taking 16 rows (``m`` times 16 in the forward), so a block shares each
    shared tile between ``16 * warps * m`` rows. ``m``: the forward's 16-row tiles per warp (1 or
    2): each B fragment read from shared memory feeds ``m`` products (FlashAttention-2's forward
    takes 128 rows per block this way), for twice the accumulator registers. ``tile``: rows of
    the other operand per shared tile (16, 32 or 64; 0: :func:`_tile`'s choice). ``lpt``: under
    the causal limit, the blocks with the most tiles start first (block index row-block major,
    heaviest first), so the last ones to finish are short; without it a head's blocks are
    neighbours, lightest first. ``stages``: tiles in shared memory at once (2 to 4): the copies
    of the next ``stages - 1`` are in flight while one is computed."""

    warps: int = WARPS
    m: int = 1
    tile: int = 0
    lpt: bool = False
    stages: int = 2

    def __str__(self) -> str:
        return (f"warps={self.warps} m={self.m} tile={self.tile or 'auto'}"
                f"{f' stages={self.stages}' if self.stages != 2 else ''}{' lpt' if self.lpt else ''}")

    def as_dict(self) -> dict:
        return {"warps": self.warps, "m": self.m, "tile": self.tile, "lpt": self.lpt, "stages": self.stages}


DEFAULT = Variant()


def variants(kind: str, d: int, dv: int) -> list[Variant]:
    """The variants worth timing for kernel ``kind`` at head sizes ``d`` and ``dv`` (the default
    first): 4 or 8 warps; the tile the default takes, or half of it in two or three stages;
    heaviest blocks first or not; in the forward also two row tiles per warp. Each fits the
    shared memory and, for the backward's kernels, leaves the registers they already need (``m``
    stays 1 there)."""
    base = _tile(max(d, dv))
    out = [DEFAULT]
    for warps in (4, 8):
        for m in ((1, 2) if kind == "fwd_tc" else (1,)):
            for tile, stages in ((base, 2), (base // 2, 2), (base // 2, 3)):
                for lpt in (False, True):
                    v = Variant(warps, m, tile if tile != base else 0, lpt, stages)
                    try:
                        _checked(v, kind, d, dv)
                    except ValueError:
                        continue
                    if v not in out:
                        out.append(v)
    return out


def parse_variant(text: object, kind: str, d: int, dv: int) -> Variant | None:
    """The variant a search cache row holds (``Variant.as_dict`` as JSON) if kernel ``kind`` takes
    it at these head sizes; None for no row, junk, or a variant it does not take."""
    import json

    if not isinstance(text, str):
        return None
    try:
        fields = json.loads(text)
        if not isinstance(fields, dict) or set(fields) != {"warps", "m", "tile", "lpt", "stages"} or \
                not all(type(fields[f]) is int for f in ("warps", "m", "tile", "stages")) or type(fields["lpt"]) is not bool:
            return None
        variant = Variant(**fields)
        _checked(variant, kind, d, dv)
    except ValueError:  # (json's errors are ValueErrors too)
        return None
    return variant


def applies(d: int, dv: int) -> bool:
    """Whether heads of these sizes run on the tensor-core kernel."""
    return d % 16 == 0 and dv % 16 == 0 and 16 <= d <= MAX_HEAD and 16 <= dv <= MAX_HEAD


def _tile(head: int) -> int:
    """Rows per shared tile for heads this wide (two stages of two tiles stay under 48 KiB)."""
    return 64 if head <= 64 else 32



ONE: tuple[int | None, ...] = (None,)


def _ix(mt: int | None) -> str:
    """The row tile ``mt``'s index into a per-tile array (none for a warp of one tile)."""
    return "" if mt is None else f"[{mt}]"


def _rows(mt: int | None) -> tuple[str, str]:
    """The names of row tile ``mt``'s two rows of a lane (``g`` and ``g + 8`` of its 16)."""
    return ("r0", "r1") if mt is None else (f"r0_{mt}", f"r1_{mt}")


def _dims(mts: tuple[int | None, ...]) -> str:
    """The leading dimension of a per-tile array (none for a warp of one tile)."""
    return "" if mts == ONE else f"[{len(mts)}]"


def _afrag(var: str, src: str, rows: int, width: int, mts: tuple[int | None, ...] = ONE) -> list[str]:
    """``var``: each row tile's 16 rows (``r0``, ``r1`` = ``r0 + 8``) of the row-major bfloat16
    matrix ``src`` (``rows`` x ``width`` per leading index ``bh``) as A fragments, one per 16
    columns (rows past the end: zeros)."""
    out = [f"  unsigned {var}{_dims(mts)}[{width // 16}][4];"]
    for mt in mts:
        a, r0, r1 = f"{var}{_ix(mt)}", *_rows(mt)
        out += ["  {",
                f"    const unsigned* x0 = (const unsigned*)({src} + (bh * {rows} + ({r0} < {rows} ? {r0} : 0)) * {width});",
                f"    const unsigned* x1 = (const unsigned*)({src} + (bh * {rows} + ({r1} < {rows} ? {r1} : 0)) * {width});",
                f"    for (int kk = 0; kk < {width // 16}; kk++) {{",
                f"      {a}[kk][0] = {r0} < {rows} ? x0[kk * 8 + c] : 0u; {a}[kk][1] = {r1} < {rows} ? x1[kk * 8 + c] : 0u;",
                f"      {a}[kk][2] = {r0} < {rows} ? x0[kk * 8 + 4 + c] : 0u; {a}[kk][3] = {r1} < {rows} ? x1[kk * 8 + 4 + c] : 0u;",
                "    }",
                "  }"]
    return out


def _async_rows(dst: str, src: str, start: str, rows: int, tile: int, width: int, threads: int) -> str:
    """``tile`` rows of ``src`` (from row ``start``) into the shared ``dst``, row-major with
    :data:`PAD` spare elements per row (so that ``ldmatrix``'s 8 rows hit distinct banks), by
    ``cp.async`` from the block's ``threads``: the copies are queued (the caller commits and
    waits), 16 bytes each, zeros past ``rows`` (a source size of 0; the address then the first row's)."""
    return (f"    for (int e = t; e < {tile * width // 8}; e += {threads}) {{\n"
            f"      const int rr = e / {width // 8}, cc = (e % {width // 8}) * 8;\n"
            f"      const bool in = {start} + rr < {rows};\n"
            f"      CV_CP_ASYNC({dst} + rr * {width + PAD} + cc, {src} + (bh * {rows} + (in ? {start} + rr : 0)) * {width} + cc,"
            f" in);\n"
            f"    }}\n")


def _staged(var: str, first: str, count: str, step: int, load: Callable[[str, str], str], body: list[str],
            stages: int = 2) -> list[str]:
    """A loop over ``count`` tiles (``var`` = ``first``, ``first + step``, ...) through ``stages``
    stages of shared memory: ``load(stage, start)`` queues a tile's copies (``cp.async``) into a
    stage; tiles ``it + 1 .. it + stages - 1`` are in flight while tile ``it`` (in stage ``st``)
    is computed by ``body``. The stage a tile is queued into was last read by the tile before,
    which every work item has finished (the barrier that ends each tile). With more than two
    stages every tile's copies are one commit group (empty past the last tile), so that
    ``cp.async.wait_group(stages - 1)`` leaves in flight only the groups after tile ``it``'s.
    (Two stages keep their own form: written in the general one, which does the same, ptxas
    gave the default ``dq`` 178 registers where it gives 168, so a block fewer per SM.)"""
    if stages != 2:
        ahead = stages - 1
        return [f"  for (int p = 0; p < {ahead}; p++) {{",
                f"    if (p < {count}) {{",
                f"      const int {var}n = {first} + p * {step};",
                load("p", f"{var}n") + "    }",
                "    CV_CP_COMMIT();",
                "  }",
                f"  for (int it = 0; it < {count}; it++) {{",
                f"    const int {var} = {first} + it * {step}, st = it % {stages};",
                f"    if (it + {ahead} < {count}) {{",
                f"      const int {var}n = {var} + {ahead * step};",
                load(f"(it + {ahead}) % {stages}", f"{var}n") + "    }",
                "    CV_CP_COMMIT();",
                f"    CV_CP_WAIT({ahead});  // (this tile's copies have landed; the next tiles' may not have)",
                "    __syncthreads();",
                *body,
                "    __syncthreads();",
                "  }"]
    return [f"  if ({count} > 0) {{",
            f"    const int {var}n = {first};",
            load("0", f"{var}n") + "    CV_CP_COMMIT();",
            "  }",
            f"  for (int it = 0; it < {count}; it++) {{",
            f"    const int {var} = {first} + it * {step}, st = it & 1;",
            f"    if (it + 1 < {count}) {{",
            f"      const int {var}n = {var} + {step};",
            load("st ^ 1", f"{var}n") + "      CV_CP_COMMIT();",
            "      CV_CP_WAIT(1);  // (this tile's copies have landed; the next tile's may not have)",
            "    } else {",
            "      CV_CP_WAIT(0);",
            "    }",
            "    __syncthreads();",
            *body,
            "    __syncthreads();",
            "  }"]


def _ldsm_product(acc: str, a: str, smem: str, n: int, k: int, ld: int, mts: tuple[int | None, ...] = ONE) -> str:
    """``acc`` (16 x ``n`` per row tile, float32, fresh) = each row tile's A fragments ``a`` (16 x
    ``k``) times B, where B[kk][j] is the shared ``smem[j][kk]`` (rows of ``ld``), the B registers
    from ``ldmatrix``: one instruction gives a lane the two registers of two k-steps (``.x4``; an
    odd last step ``.x2``), and they feed every row tile's product. Lane ``l`` points at row
    ``l % 8`` of the n-tile's 8 rows, column ``8 * (l / 8)`` of the k-steps."""
    steps = k // 16
    zero = "".join(f"      {acc}{_ix(mt)}[n][0] = 0.0f; {acc}{_ix(mt)}[n][1] = 0.0f; {acc}{_ix(mt)}[n][2] = 0.0f; "
                   f"{acc}{_ix(mt)}[n][3] = 0.0f;\n" for mt in mts)
    pair = "".join(f"        CV_MMA({acc}{_ix(mt)}[n], {a}{_ix(mt)}[kk], b[0], b[1]);\n"
                   f"        CV_MMA({acc}{_ix(mt)}[n], {a}{_ix(mt)}[kk + 1], b[2], b[3]);\n" for mt in mts)
    last = "".join(f"        CV_MMA({acc}{_ix(mt)}[n], {a}{_ix(mt)}[{steps - 1}], b[0], b[1]);\n" for mt in mts)
    tail = (f"      if ({steps % 2}) {{\n"
            f"        unsigned b[2];\n"
            f"        CV_LDSM_X2(b, {smem} + (n * 8 + (lane & 7)) * {ld} + {16 * (steps - 1)} + 8 * ((lane >> 3) & 1));\n"
            + last +
            "      }\n") if steps % 2 else ""
    return (f"    float {acc}{_dims(mts)}[{n // 8}][4];\n"
            f"    for (int n = 0; n < {n // 8}; n++) {{\n" + zero +
            f"      const unsigned short* brow = {smem} + (n * 8 + (lane & 7)) * {ld} + 8 * (lane >> 3);\n"
            f"      for (int kk = 0; kk + 1 < {steps}; kk += 2) {{\n"
            f"        unsigned b[4];\n"
            f"        CV_LDSM_X4(b, brow + kk * 16);\n" + pair +
            "      }\n" + tail +
            "    }\n")


def _ldsm_accumulate(acc: str, frm: str, smem: str, n: int, k: int, ld: int, mts: tuple[int | None, ...] = ONE) -> str:
    """``acc`` (16 x ``n`` per row tile) += the accumulator tiles ``frm`` (16 x ``k``, float32)
    rounded to bfloat16 as A fragments (tiles 2kk and 2kk+1 are k-step kk's), times B = the
    row-major shared ``smem[k][n]`` (values: keys by columns), read by ``ldmatrix.trans``: one
    instruction gives a lane the two registers of two n-tiles, for every row tile. Lane ``l``
    points at row ``l % 8 + 8 * (l / 8 % 2)`` of the k-step, column ``8 * (l / 16)`` of the pair
    of n-tiles."""
    pack = "".join(f"      pa{_ix(mt)}[0] = cv_pack_bf16({frm}{_ix(mt)}[2 * kk][0], {frm}{_ix(mt)}[2 * kk][1]);\n"
                   f"      pa{_ix(mt)}[1] = cv_pack_bf16({frm}{_ix(mt)}[2 * kk][2], {frm}{_ix(mt)}[2 * kk][3]);\n"
                   f"      pa{_ix(mt)}[2] = cv_pack_bf16({frm}{_ix(mt)}[2 * kk + 1][0], {frm}{_ix(mt)}[2 * kk + 1][1]);\n"
                   f"      pa{_ix(mt)}[3] = cv_pack_bf16({frm}{_ix(mt)}[2 * kk + 1][2], {frm}{_ix(mt)}[2 * kk + 1][3]);\n"
                   for mt in mts)
    mma = "".join(f"        CV_MMA({acc}{_ix(mt)}[n], pa{_ix(mt)}, b[0], b[1]);\n"
                  f"        CV_MMA({acc}{_ix(mt)}[n + 1], pa{_ix(mt)}, b[2], b[3]);\n" for mt in mts)
    return (f"    for (int kk = 0; kk < {k // 16}; kk++) {{\n"
            f"      unsigned pa{_dims(mts)}[4];\n" + pack +
            f"      const unsigned short* bcol = {smem} + (kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * {ld} + 8 * (lane >> 4);\n"
            f"      for (int n = 0; n < {n // 8}; n += 2) {{\n"
            f"        unsigned b[4];\n"
            f"        CV_LDSM_X4_T(b, bcol + n * 8);\n" + mma +
            "      }\n"
            "    }\n")


def _edge(q0: str, nq: int, TQ: int, k0: str, nk: int, TK: int, causal: bool, has_mask: bool) -> str:
    """``edge``: whether a tile of queries ``q0 .. q0 + nq - 1`` and keys ``k0 .. k0 + nk - 1``
    needs the per-score tests (a mask to add, a query or key past the end, a key after a query
    under the causal limit). The same for the whole block: the tiles inside skip them."""
    if has_mask:
        return "    const bool edge = true;"
    cond = [f"{q0} + {nq} > {TQ}", f"{k0} + {nk} > {TK}"] + ([f"{k0} + {nk} - 1 > {q0}"] if causal else [])
    return f"    const bool edge = {' || '.join(cond)};"


def _zero(acc: str, n: int, mts: tuple[int | None, ...] = ONE) -> str:
    return (f"  float {acc}{_dims(mts)}[{n // 8}][4];\n"
            f"  for (int n = 0; n < {n // 8}; n++) {{" +
            "".join(f" {acc}{_ix(mt)}[n][0] = 0.0f; {acc}{_ix(mt)}[n][1] = 0.0f; {acc}{_ix(mt)}[n][2] = 0.0f; "
                    f"{acc}{_ix(mt)}[n][3] = 0.0f;" for mt in mts) + " }\n")


def _store(acc: str, dst: str, rows: int, width: int, factor: str = "", mts: tuple[int | None, ...] = ONE) -> str:
    """Write the accumulator ``acc`` (each row tile's rows ``r0``, ``r1`` of the lane; ``width``
    columns) to the float32 matrix at ``dst`` (``rows`` per leading index), times ``factor``."""
    f = f" * {factor}" if factor else ""
    lines = [f"  for (int n = 0; n < {width // 8}; n++) {{\n", "    const int col = n * 8 + 2 * c;\n"]
    for mt in mts:
        a, (r0, r1) = f"{acc}{_ix(mt)}", _rows(mt)
        lines += [f"    if ({r0} < {rows}) {{ {dst}[(bh * {rows} + {r0}) * {width} + col] = {a}[n][0]{f}; "
                  f"{dst}[(bh * {rows} + {r0}) * {width} + col + 1] = {a}[n][1]{f}; }}\n",
                  f"    if ({r1} < {rows}) {{ {dst}[(bh * {rows} + {r1}) * {width} + col] = {a}[n][2]{f}; "
                  f"{dst}[(bh * {rows} + {r1}) * {width} + col + 1] = {a}[n][3]{f}; }}\n"]
    return "".join(lines) + "  }\n"


def _store_bf16(acc: str, dst: str, rows: int, width: int, factor: str = "") -> str:
    """:func:`_store` to a bfloat16 matrix: each lane's two neighbouring columns rounded (nearest
    even; a nan stays a nan, as corvid's conversions keep it) and written as one 32-bit word."""
    f = f" * {factor}" if factor else ""
    return (f"  for (int n = 0; n < {width // 8}; n++) {{\n"
            f"    const int col = n * 8 + 2 * c;\n"
            f"    if (r0 < {rows}) *(unsigned*)({dst} + (bh * {rows} + r0) * {width} + col) = "
            f"cv_pack_bf16_out({acc}[n][0]{f}, {acc}[n][1]{f});\n"
            f"    if (r1 < {rows}) *(unsigned*)({dst} + (bh * {rows} + r1) * {width} + col) = "
            f"cv_pack_bf16_out({acc}[n][2]{f}, {acc}[n][3]{f});\n"
            f"  }}\n")


def _checked(variant: Variant, kind: str, D: int, DV: int) -> tuple[int, int]:
    """(rows per block, rows per shared tile) of ``variant`` for kernel ``kind``; ValueError for
    a variant the kernels do not take (its tiles over the shared memory, a block over 8 warps)."""
    if variant.warps not in (2, 4, 8) or variant.m not in (1, 2) or variant.warps * variant.m > 8:
        raise ValueError(f"attention variant {variant}: 2, 4 or 8 warps of 1 or 2 row tiles, at most 8 tiles a block")
    if variant.m != 1 and kind != "fwd_tc":
        raise ValueError(f"attention variant {variant}: two row tiles per warp only in the forward (the "
                         "backward's kernels need their registers)")
    tile = variant.tile or _tile(max(D, DV))
    stages = variant.stages
    if tile not in (16, 32, 64) or stages not in (2, 3, 4) or \
            stages * (tile * (D + DV + 2 * PAD) * 2 + 8 * tile) > SHARED_BYTES:
        raise ValueError(f"attention variant {variant}: a tile of 16, 32 or 64 rows in 2 to 4 stages that fit "
                         f"{SHARED_BYTES} bytes of shared memory at heads of {D} and {DV}")
    return 16 * variant.warps * variant.m, tile


def render(name: str, params: dict, shapes: list[tuple[int, ...]], mask_info: dict,
           variant: Variant = DEFAULT) -> tuple[str, int, int, int]:
    """(source, blocks, threads per block, flops) of the kernel ``params["kind"]`` for inputs of
    ``shapes``: ``fwd_tc`` (q, k, v and, with ``params["has_mask"]``, the float32 additive mask;
    writes the output rows then each row's log-sum-exp, float32), ``dq_tc`` and ``dkdv_tc`` (the
    same, then the output's gradient ``do`` in bfloat16 and the float32 ``lse`` and ``delta`` =
    rowsum(do * out); write ``dq``, or ``dk`` then ``dv``, float32). ``mask_info``: the mask's
    strides (:func:`corvid.render.gpu.attention_shapes`). ``variant``: how the work is split
    (:class:`Variant`).

    ``dq_tc``: a warp per 16 query rows, tiles of keys (row-major and transposed) and values in
    shared memory; per tile ``s = q k^T``, ``dp = do v^T``, ``ds = p (dp - delta)`` with ``p =
    exp(s - lse)``, and ``dq += ds k``. ``dkdv_tc``: a warp per 16 keys, tiles of queries and
    output gradients (each row-major and transposed) with their lse and delta; ``s^T = k q^T``,
    ``dp^T = v do^T``, then ``dv += p^T do`` and ``dk += ds^T q``. No atomics: each output row
    is one warp's."""
    kind, causal, has_mask = params["kind"], params["causal"], params["has_mask"]
    q, k, v = shapes[:3]
    lead, TQ, D, TK, DV = q[:-2], q[-2], q[-1], k[-2], v[-1]
    if not applies(D, DV):
        raise NotImplementedError(f"the tensor-core attention takes head sizes that are multiples of 16 up to "
                                  f"{MAX_HEAD}, not {D} and {DV}")
    block_rows, tile = _checked(variant, kind, D, DV)
    threads, stages = 32 * variant.warps, variant.stages
    mts: tuple[int | None, ...] = ONE if variant.m == 1 else tuple(range(variant.m))
    BH = math.prod(lead)
    scale = repr(float(np.float32(params["scale"]))) + "f"
    # scores are kept in base 2 (scaled by log2(e) with the scale, one multiply): exp2f is the GPU's
    # one exponential instruction, where expf adds a range reduction around it. The log-sum-exp
    # is written and read in base e, as the float32 kernels and the CPU's.
    scale2 = repr(float(np.float32(params["scale"] * LOG2E))) + "f"
    log2e = repr(float(np.float32(LOG2E))) + "f"
    bf, f32 = "const unsigned short* __restrict__", "const float* __restrict__"
    # (the forward writes float32: its output and its log-sum-exp share one buffer; the gradients
    # are written in the operands' bfloat16, the one rounding of their float32 sums)
    out_type = "float*" if kind == "fwd_tc" else "unsigned short*"
    args = [f"{out_type} __restrict__ p0", f"{bf} p1", f"{bf} p2", f"{bf} p3"] + ([f"{f32} p4"] if has_mask else [])
    extra = 4 if has_mask else 3
    if kind != "fwd_tc":
        args += [f"{bf} p{extra + 1}", f"{f32} p{extra + 2}", f"{f32} p{extra + 3}"]
    do, lse, delta = f"p{extra + 1}", f"p{extra + 2}", f"p{extra + 3}"
    moff = []
    if has_mask:
        moff = ["  long long cv_rem = bh, moff = 0;"]
        for size, stride in reversed(list(zip(lead, mask_info["mask_lead"]))):
            if stride:
                moff.append(f"  moff += (cv_rem % {size}) * {stride}LL;")
            moff.append(f"  cv_rem /= {size};")
    mask_row = mask_info.get("mask_row", 0) if has_mask else 0
    rows = TK if kind == "dkdv_tc" else TQ  # (the rows the blocks split: keys for dk/dv, else queries)
    nb = -(-rows // block_rows)
    if variant.lpt and causal:
        # row blocks major, the ones with the most tiles first: the last blocks of the grid are short
        heavy = f"{nb - 1} - (int)((long long)blockIdx.x / {BH})" if kind != "dkdv_tc" else \
            f"(int)((long long)blockIdx.x / {BH})"
        where = [f"  const long long bh = (long long)blockIdx.x % {BH};", f"  const int b0 = ({heavy}) * {block_rows};"]
    else:
        where = [f"  const long long bh = (long long)blockIdx.x / {nb};",
                 f"  const int b0 = (int)((long long)blockIdx.x % {nb}) * {block_rows};"]
    row_vars = ["  const int r0 = b0 + warp * 16 + g, r1 = r0 + 8;"] if mts == ONE else \
        [f"  const int r0_{mt} = b0 + (warp * {variant.m} + {mt}) * 16 + g, r1_{mt} = r0_{mt} + 8;" for mt in mts]
    head = [MMA, f'extern "C" __global__ void __launch_bounds__({threads}) {name}({", ".join(args)}) {{',
            "  const int t = (int)threadIdx.x, warp = t >> 5, lane = t & 31, g = lane >> 2, c = lane & 3;",
            *where, *row_vars,
            "  const float ninf = __int_as_float(0xff800000);",
            *moff]

    def score(i: str, j: str) -> str:
        """Lines turning the scaled score ``v`` of query ``i`` and key ``j`` into -inf where masked
        (adding the mask, in base 2), for a tile at an edge (``edge``: see :func:`_edge`)."""
        add = f"        if ({i} < {TQ} && {j} < {TK}) v += p4[moff + (long long)({i}) * {mask_row} + ({j})] * {log2e};\n" \
            if has_mask else ""
        cut = f"{i} >= {TQ} || {j} >= {TK}" + (f" || {j} > {i}" if causal else "")
        return f"        if (edge) {{\n  {add}        if ({cut}) v = ninf;\n        }}\n"

    def online(mt: int | None) -> str:
        """The forward's online softmax for row tile ``mt``: its scores scaled (and tested at an
        edge), the running maximum and sum updated (the four lanes of a row combine theirs), the
        output accumulators rescaled, and the scores replaced by their probabilities."""
        x, (r0, r1) = _ix(mt), _rows(mt)
        sfx = "" if mt is None else f"_{mt}"
        m0, m1, l0, l1 = (f"{n}{sfx}" for n in ("m0", "m1", "l0", "l1"))
        return ("    {\n"
                f"    float mx0 = {m0}, mx1 = {m1};\n"
                f"    for (int n = 0; n < {tile // 8}; n++) {{\n"
                "      for (int e = 0; e < 4; e++) {\n"
                f"        const int row = e < 2 ? {r0} : {r1}, col = j0 + n * 8 + 2 * c + (e & 1);\n"
                f"        float v = s{x}[n][e] * {scale2};\n" + score("row", "col") +
                f"        s{x}[n][e] = v;\n"
                "        if (e < 2) mx0 = fmaxf(mx0, v); else mx1 = fmaxf(mx1, v);\n"
                "      }\n"
                "    }\n"
                "    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1)); mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));\n"
                "    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1)); mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));\n"
                f"    const float c0 = mx0 == ninf ? 1.0f : cv_exp2({m0} - mx0), c1 = mx1 == ninf ? 1.0f : cv_exp2({m1} - mx1);\n"
                "    const float base0 = mx0 == ninf ? 0.0f : mx0, base1 = mx1 == ninf ? 0.0f : mx1;\n"
                "    float sum0 = 0.0f, sum1 = 0.0f;\n"
                f"    for (int n = 0; n < {tile // 8}; n++) {{\n"
                f"      s{x}[n][0] = cv_exp2(s{x}[n][0] - base0); s{x}[n][1] = cv_exp2(s{x}[n][1] - base0);\n"
                f"      s{x}[n][2] = cv_exp2(s{x}[n][2] - base1); s{x}[n][3] = cv_exp2(s{x}[n][3] - base1);\n"
                f"      sum0 += s{x}[n][0] + s{x}[n][1]; sum1 += s{x}[n][2] + s{x}[n][3];\n"
                "    }\n"
                "    sum0 += __shfl_xor_sync(0xffffffffu, sum0, 1); sum0 += __shfl_xor_sync(0xffffffffu, sum0, 2);\n"
                "    sum1 += __shfl_xor_sync(0xffffffffu, sum1, 1); sum1 += __shfl_xor_sync(0xffffffffu, sum1, 2);\n"
                f"    {l0} = {l0} * c0 + sum0; {l1} = {l1} * c1 + sum1; {m0} = mx0; {m1} = mx1;\n"
                f"    for (int n = 0; n < {DV // 8}; n++) {{ o{x}[n][0] *= c0; o{x}[n][1] *= c0; o{x}[n][2] *= c1; o{x}[n][3] *= c1; }}\n"
                "    }\n")

    def finish(mt: int | None) -> list[str]:
        """The forward's end for row tile ``mt``: the output divided by the sum, then stored, and
        each row's log-sum-exp after every output."""
        x, (r0, r1) = _ix(mt), _rows(mt)
        sfx = "" if mt is None else f"_{mt}"
        m0, m1, l0, l1 = (f"{n}{sfx}" for n in ("m0", "m1", "l0", "l1"))
        return [f"  {{ const float inv0 = {l0} > 0.0f ? 1.0f / {l0} : 0.0f, inv1 = {l1} > 0.0f ? 1.0f / {l1} : 0.0f;",
                f"  for (int n = 0; n < {DV // 8}; n++) {{ o{x}[n][0] *= inv0; o{x}[n][1] *= inv0; o{x}[n][2] *= inv1; "
                f"o{x}[n][3] *= inv1; }} }}",
                f"  if (c == 0 && {r0} < {TQ}) p0[{BH * TQ * DV}LL + bh * {TQ} + {r0}] = {l0} > 0.0f ? {m0} * {LN2!r}f + logf({l0}) : ninf;",
                f"  if (c == 0 && {r1} < {TQ}) p0[{BH * TQ * DV}LL + bh * {TQ} + {r1}] = {l1} > 0.0f ? {m1} * {LN2!r}f + logf({l1}) : ninf;"]

    if kind == "fwd_tc":
        # two stages of key and value tiles, row-major: the next tile's copies (cp.async) are in
        # flight while this one is computed; B registers by ldmatrix (.trans for the values)
        BK = tile
        end = f"(b0 + {block_rows} < {TK} ? b0 + {block_rows} : {TK})" if causal else str(TK)
        stats = ["  float " + ", ".join(f"m0{s_} = ninf, m1{s_} = ninf, l0{s_} = 0.0f, l1{s_} = 0.0f"
                                        for s_ in (("",) if mts == ONE else tuple(f"_{mt}" for mt in mts))) + ";"]
        body = [f"  __shared__ __align__(16) unsigned short ks[{stages}][{BK * (D + PAD)}];",
                f"  __shared__ __align__(16) unsigned short vs[{stages}][{BK * (DV + PAD)}];",
                *_afrag("qa", "p1", TQ, D, mts), _zero("o", DV, mts), *stats,
                *_staged("j0", "0", f"(({end}) + {BK - 1}) / {BK}", BK,
                         lambda st, j: _async_rows(f"ks[{st}]", "p2", j, TK, BK, D, threads) +
                         _async_rows(f"vs[{st}]", "p3", j, TK, BK, DV, threads), [
                _edge("b0", block_rows, TQ, "j0", BK, TK, causal, has_mask),
                _ldsm_product("s", "qa", "ks[st]", BK, D, D + PAD, mts) + "".join(online(mt) for mt in mts) +
                _ldsm_accumulate("o", "s", "vs[st]", DV, BK, DV + PAD, mts)], stages),
                *[line for mt in mts for line in finish(mt)], _store("o", "p0", TQ, DV, mts=mts)]
        flops = 2 * BH * TQ * TK * (D + DV)
    elif kind == "dq_tc":
        BK = tile
        end = f"(b0 + {block_rows} < {TK} ? b0 + {block_rows} : {TK})" if causal else str(TK)
        body = [f"  __shared__ __align__(16) unsigned short ks[{stages}][{BK * (D + PAD)}];",
                f"  __shared__ __align__(16) unsigned short vs[{stages}][{BK * (DV + PAD)}];",
                *_afrag("qa", "p1", TQ, D), *_afrag("da", do, TQ, DV), _zero("dq", D),
                f"  const float ls0 = r0 < {TQ} ? {lse}[bh * {TQ} + r0] * {log2e} : 0.0f, "
                f"ls1 = r1 < {TQ} ? {lse}[bh * {TQ} + r1] * {log2e} : 0.0f;",
                f"  const float dl0 = r0 < {TQ} ? {delta}[bh * {TQ} + r0] : 0.0f, dl1 = r1 < {TQ} ? {delta}[bh * {TQ} + r1] : 0.0f;",
                *_staged("j0", "0", f"(({end}) + {BK - 1}) / {BK}", BK,
                         lambda st, j: _async_rows(f"ks[{st}]", "p2", j, TK, BK, D, threads) +
                         _async_rows(f"vs[{st}]", "p3", j, TK, BK, DV, threads), [
                _edge("b0", block_rows, TQ, "j0", BK, TK, causal, has_mask),
                _ldsm_product("s", "qa", "ks[st]", BK, D, D + PAD) + _ldsm_product("dp", "da", "vs[st]", BK, DV, DV + PAD) +
                f"    for (int n = 0; n < {BK // 8}; n++) {{\n"
                "      for (int e = 0; e < 4; e++) {\n"
                "        const int row = e < 2 ? r0 : r1, col = j0 + n * 8 + 2 * c + (e & 1);\n"
                f"        float v = s[n][e] * {scale2};\n" + score("row", "col") +
                "        const float p = v == ninf ? 0.0f : cv_exp2(v - (e < 2 ? ls0 : ls1));\n"
                "        s[n][e] = p * (dp[n][e] - (e < 2 ? dl0 : dl1));\n"
                "      }\n"
                "    }\n" + _ldsm_accumulate("dq", "s", "ks[st]", D, BK, D + PAD)], stages),
                _store_bf16("dq", "p0", TQ, D, scale)]
        flops = 2 * BH * TQ * TK * (2 * D + DV)
    elif kind == "dkdv_tc":
        BQ = tile
        start = "b0" if causal else "0"
        body = [f"  __shared__ __align__(16) unsigned short qs[{stages}][{BQ * (D + PAD)}];",
                f"  __shared__ __align__(16) unsigned short os[{stages}][{BQ * (DV + PAD)}];",
                f"  __shared__ float ls[{stages}][{BQ}], dls[{stages}][{BQ}];",
                *_afrag("ka", "p2", TK, D), *_afrag("va", "p3", TK, DV), _zero("dk", D), _zero("dv", DV),
                *_staged("i0", start, f"({TQ} - {start} + {BQ - 1}) / {BQ}", BQ,
                         lambda st, i: _async_rows(f"qs[{st}]", "p1", i, TQ, BQ, D, threads) +
                         _async_rows(f"os[{st}]", do, i, TQ, BQ, DV, threads) +
                         f"    for (int e = t; e < {BQ}; e += {threads}) {{\n"
                         f"      ls[{st}][e] = {i} + e < {TQ} ? {lse}[bh * {TQ} + {i} + e] * {log2e} : 0.0f;\n"
                         f"      dls[{st}][e] = {i} + e < {TQ} ? {delta}[bh * {TQ} + {i} + e] : 0.0f;\n"
                         "    }\n", [
                _edge("i0", BQ, TQ, "b0", block_rows, TK, causal, has_mask),
                _ldsm_product("s", "ka", "qs[st]", BQ, D, D + PAD) + _ldsm_product("dp", "va", "os[st]", BQ, DV, DV + PAD) +
                f"    for (int n = 0; n < {BQ // 8}; n++) {{\n"
                "      // (a lane's two query columns of the n-tile: their lse and delta, read once for its 4 scores)\n"
                "      const float lq[2] = {ls[st][n * 8 + 2 * c], ls[st][n * 8 + 2 * c + 1]};\n"
                "      const float dl[2] = {dls[st][n * 8 + 2 * c], dls[st][n * 8 + 2 * c + 1]};\n"
                "      for (int e = 0; e < 4; e++) {\n"
                "        const int key = e < 2 ? r0 : r1, ii = n * 8 + 2 * c + (e & 1), qi = i0 + ii;\n"
                f"        float v = s[n][e] * {scale2};\n" + score("qi", "key") +
                "        const float p = v == ninf ? 0.0f : cv_exp2(v - lq[e & 1]);\n"
                "        s[n][e] = p;\n"
                "        dp[n][e] = p * (dp[n][e] - dl[e & 1]);\n"
                "      }\n"
                "    }\n" + _ldsm_accumulate("dv", "s", "os[st]", DV, BQ, DV + PAD) +
                _ldsm_accumulate("dk", "dp", "qs[st]", D, BQ, D + PAD)], stages),
                _store_bf16("dk", "p0", TK, D, scale), _store_bf16("dv", f"(p0 + {BH * TK * D}LL)", TK, DV)]
        flops = 2 * BH * TQ * TK * (2 * D + 2 * DV)
    else:
        raise NotImplementedError(f"no tensor-core attention kernel {kind!r}")
    text = "\n".join(head + body + ["}", ""])
    return text, BH * nb, threads, flops // (2 if causal else 1)
