"""The attention forward on tensor cores: CUDA C with ``mma.sync`` (sm_80 and later), for
bfloat16 queries, keys and values (corvid/nn/flash.py routes ``scaled_dot_product_attention``
here; the fused float32 template of :mod:`corvid.render.gpu` serves every other case and the
backward pass).

The kernel is flash attention's forward in the form FlashAttention-2 gave it. A block of 4 warps
takes 64 query rows of one (batch, head); each warp owns 16 of them. For each tile of
:data:`TILE_KEYS` keys the block stores the keys (row-major) and the values (transposed) in
shared memory as bfloat16; each warp then computes its 16 x 64 scores with ``mma.sync.m16n8k16``
(its query rows stay in registers as the instruction's A fragments for the whole kernel), applies
the scale, the mask and the causal limit to the scores in the accumulator registers, updates its
rows' running maximum and sum (the four lanes that hold a row's columns combine theirs with
``__shfl_xor_sync``), rescales its output accumulators, and multiplies the probabilities (the
score accumulators rounded to bfloat16, which are laid out as the next product's A fragments)
by the values. Sums are float32 throughout; the output and the log-sum-exp are written in
float32, as the float32 template writes them, so the backward pass is the template's.

Fragment layouts (PTX ISA, ``mma.m16n8k16`` with 16-bit A/B and float32 C/D): lane ``l`` has
``g = l / 4`` and ``c = l % 4``. A (16x16, row-major), four 32-bit registers of two elements:
(g, 2c..2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..). B (16x8, k x n): (2c..2c+1, g) and
(2c+8..2c+9, g). C and D (16x8): (g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1). The element of
lower index is the lower half of a register.

Tested without a GPU (tests/test_attention_tc.py): the same source, compiled by the host's C++
compiler with an emulation of the CUDA built-ins it uses (threads, barriers, shuffles, and the
``mma`` instruction with the layouts above), against numpy; and compiled for sm_90 with ``nvcc``
where it is installed.
"""

from __future__ import annotations

import math

import numpy as np

TILE_ROWS = 64  # query rows per block: 4 warps of 16
TILE_KEYS = 64  # keys per tile in shared memory
THREADS = 128
MAX_HEAD = 128  # head sizes (multiples of 16) the kernel takes; the shared tiles stay under 48 KiB
PAD = 8  # bfloat16 elements after each shared row: the fragments' 32-bit reads then hit distinct banks

# the instruction, as inline PTX; the host emulation defines CV_MMA as a function instead
MMA = """#ifndef CV_MMA
#define CV_MMA(d, a, b0, b1) asm volatile( \\
  "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" \\
  : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]) \\
  : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"(b0), "r"(b1))
#endif
static __device__ __forceinline__ unsigned cv_pack_bf16(float lo, float hi) {  /* round to nearest even */
  unsigned a = __float_as_uint(lo), b = __float_as_uint(hi);
  a = (a + 0x7fffu + ((a >> 16) & 1u)) >> 16;
  b = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  return a | (b << 16);
}
"""


def applies(d: int, dv: int) -> bool:
    """Whether heads of these sizes run on the tensor-core kernel."""
    return d % 16 == 0 and dv % 16 == 0 and 16 <= d <= MAX_HEAD and 16 <= dv <= MAX_HEAD


def render(name: str, params: dict, shapes: list[tuple[int, ...]], mask_info: dict) -> tuple[str, int, int, int]:
    """(source, blocks, threads per block, flops) of the forward kernel for inputs of ``shapes``
    (q, k, v and, with ``params["has_mask"]``, the float32 additive mask; ``mask_info``: its
    strides, :func:`corvid.render.gpu.attention_shapes`). Signature: ``(float* out, bf16 q, k, v
    [, float mask])``; ``out`` holds the output rows then the log-sum-exp of each row."""
    causal, has_mask = params["causal"], params["has_mask"]
    q, k, v = shapes[:3]
    lead, TQ, D, TK, DV = q[:-2], q[-2], q[-1], k[-2], v[-1]
    if not applies(D, DV):
        raise NotImplementedError(f"the tensor-core attention takes head sizes that are multiples of 16 up to "
                                  f"{MAX_HEAD}, not {D} and {DV}")
    BH = math.prod(lead)
    NB = -(-TQ // TILE_ROWS)
    BK, DP, BKP = TILE_KEYS, D + PAD, TILE_KEYS + PAD
    scale = repr(float(np.float32(params["scale"]))) + "f"
    args = ["float* __restrict__ p0", "const unsigned short* __restrict__ p1", "const unsigned short* __restrict__ p2",
            "const unsigned short* __restrict__ p3"] + (["const float* __restrict__ p4"] if has_mask else [])
    moff = []
    if has_mask:
        moff = ["  long long cv_rem = bh, moff = 0;"]
        for size, stride in reversed(list(zip(lead, mask_info["mask_lead"]))):
            if stride:
                moff.append(f"  moff += (cv_rem % {size}) * {stride}LL;")
            moff.append(f"  cv_rem /= {size};")
    mask_row = mask_info.get("mask_row", 0) if has_mask else 0
    end = f"(q0 + {TILE_ROWS} < {TK} ? q0 + {TILE_ROWS} : {TK})" if causal else str(TK)
    masked = "col >= " + str(TK) + (" || col > row" if causal else "")
    add_mask = (f"        if (row < {TQ} && col < {TK}) v += p4[moff + (long long)row * {mask_row} + col];\n"
                if has_mask else "")
    src = f"""{MMA}
extern "C" __global__ void __launch_bounds__({THREADS}) {name}({", ".join(args)}) {{
  const int t = (int)threadIdx.x, warp = t >> 5, lane = t & 31, g = lane >> 2, c = lane & 3;
  const long long bh = (long long)blockIdx.x / {NB};
  const int q0 = (int)((long long)blockIdx.x % {NB}) * {TILE_ROWS};
  __shared__ __align__(16) unsigned short ks[{BK * DP}];
  __shared__ __align__(16) unsigned short vt[{DV * BKP}];
{chr(10).join(moff)}
  const int r0 = q0 + warp * 16 + g, r1 = r0 + 8;
  const unsigned* qrow0 = (const unsigned*)(p1 + (bh * {TQ} + (r0 < {TQ} ? r0 : 0)) * {D});
  const unsigned* qrow1 = (const unsigned*)(p1 + (bh * {TQ} + (r1 < {TQ} ? r1 : 0)) * {D});
  unsigned qa[{D // 16}][4];
  for (int kk = 0; kk < {D // 16}; kk++) {{
    qa[kk][0] = r0 < {TQ} ? qrow0[kk * 8 + c] : 0u;
    qa[kk][1] = r1 < {TQ} ? qrow1[kk * 8 + c] : 0u;
    qa[kk][2] = r0 < {TQ} ? qrow0[kk * 8 + 4 + c] : 0u;
    qa[kk][3] = r1 < {TQ} ? qrow1[kk * 8 + 4 + c] : 0u;
  }}
  float o[{DV // 8}][4];
  for (int n = 0; n < {DV // 8}; n++) {{ o[n][0] = 0.0f; o[n][1] = 0.0f; o[n][2] = 0.0f; o[n][3] = 0.0f; }}
  const float ninf = __int_as_float(0xff800000);
  float m0 = ninf, m1 = ninf, l0 = 0.0f, l1 = 0.0f;
  const int end = {end};
  for (int j0 = 0; j0 < end; j0 += {BK}) {{
    for (int e = t; e < {BK * D // 2}; e += {THREADS}) {{  /* the keys, two elements at a time */
      const int jj = e / {D // 2}, dd = (e % {D // 2}) * 2;
      const unsigned kv = j0 + jj < {TK} ? *(const unsigned*)(p2 + (bh * {TK} + j0 + jj) * {D} + dd) : 0u;
      *(unsigned*)(ks + jj * {DP} + dd) = kv;
    }}
    for (int e = t; e < {BK * DV}; e += {THREADS}) {{  /* the values, transposed */
      const int jj = e / {DV}, dd = e % {DV};
      vt[dd * {BKP} + jj] = j0 + jj < {TK} ? p3[(bh * {TK} + j0 + jj) * {DV} + dd] : (unsigned short)0;
    }}
    __syncthreads();
    float s[{BK // 8}][4];
    for (int n = 0; n < {BK // 8}; n++) {{
      s[n][0] = 0.0f; s[n][1] = 0.0f; s[n][2] = 0.0f; s[n][3] = 0.0f;
      const unsigned* krow = (const unsigned*)(ks + (n * 8 + g) * {DP});
      for (int kk = 0; kk < {D // 16}; kk++) {{
        const unsigned b0 = krow[kk * 8 + c], b1 = krow[kk * 8 + 4 + c];
        CV_MMA(s[n], qa[kk], b0, b1);
      }}
    }}
    float mx0 = m0, mx1 = m1;
    for (int n = 0; n < {BK // 8}; n++) {{
      for (int e = 0; e < 4; e++) {{
        const int row = e < 2 ? r0 : r1, col = j0 + n * 8 + 2 * c + (e & 1);
        float v = s[n][e] * {scale};
{add_mask}        if ({masked}) v = ninf;
        s[n][e] = v;
        if (e < 2) mx0 = fmaxf(mx0, v); else mx1 = fmaxf(mx1, v);
      }}
    }}
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1)); mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1)); mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float c0 = mx0 == ninf ? 1.0f : expf(m0 - mx0), c1 = mx1 == ninf ? 1.0f : expf(m1 - mx1);
    const float base0 = mx0 == ninf ? 0.0f : mx0, base1 = mx1 == ninf ? 0.0f : mx1;
    float sum0 = 0.0f, sum1 = 0.0f;
    for (int n = 0; n < {BK // 8}; n++) {{
      s[n][0] = expf(s[n][0] - base0); s[n][1] = expf(s[n][1] - base0);
      s[n][2] = expf(s[n][2] - base1); s[n][3] = expf(s[n][3] - base1);
      sum0 += s[n][0] + s[n][1]; sum1 += s[n][2] + s[n][3];
    }}
    sum0 += __shfl_xor_sync(0xffffffffu, sum0, 1); sum0 += __shfl_xor_sync(0xffffffffu, sum0, 2);
    sum1 += __shfl_xor_sync(0xffffffffu, sum1, 1); sum1 += __shfl_xor_sync(0xffffffffu, sum1, 2);
    l0 = l0 * c0 + sum0; l1 = l1 * c1 + sum1; m0 = mx0; m1 = mx1;
    for (int n = 0; n < {DV // 8}; n++) {{ o[n][0] *= c0; o[n][1] *= c0; o[n][2] *= c1; o[n][3] *= c1; }}
    for (int kk = 0; kk < {BK // 16}; kk++) {{  /* the probabilities, as A fragments, times the values */
      unsigned pa[4];
      pa[0] = cv_pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = cv_pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = cv_pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = cv_pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      for (int n = 0; n < {DV // 8}; n++) {{
        const unsigned* vrow = (const unsigned*)(vt + (n * 8 + g) * {BKP});
        const unsigned b0 = vrow[kk * 8 + c], b1 = vrow[kk * 8 + 4 + c];
        CV_MMA(o[n], pa, b0, b1);
      }}
    }}
    __syncthreads();
  }}
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  for (int n = 0; n < {DV // 8}; n++) {{
    const int col = n * 8 + 2 * c;
    if (r0 < {TQ}) {{ p0[(bh * {TQ} + r0) * {DV} + col] = o[n][0] * inv0; p0[(bh * {TQ} + r0) * {DV} + col + 1] = o[n][1] * inv0; }}
    if (r1 < {TQ}) {{ p0[(bh * {TQ} + r1) * {DV} + col] = o[n][2] * inv1; p0[(bh * {TQ} + r1) * {DV} + col + 1] = o[n][3] * inv1; }}
  }}
  if (c == 0 && r0 < {TQ}) p0[{BH * TQ * DV}LL + bh * {TQ} + r0] = l0 > 0.0f ? m0 + logf(l0) : ninf;
  if (c == 0 && r1 < {TQ}) p0[{BH * TQ * DV}LL + bh * {TQ} + r1] = l1 > 0.0f ? m1 + logf(l1) : ninf;
}}
"""
    flops = 2 * BH * TQ * TK * (D + DV) // (2 if causal else 1)
    return src, BH * NB, THREADS, flops
