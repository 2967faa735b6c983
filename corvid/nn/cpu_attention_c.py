"""The C source of the CPU's fused attention kernels (:mod:`corvid.nn.cpu_attention`).

Three kernels, one C function each, over runtime sizes (one build serves every shape, symbolic
ones included): ``fwd`` (the output and each row's log-sum-exp), ``dq`` and ``dkdv`` (the
backward pass, recomputing the probabilities from the log-sum-exp). Every kernel works in blocks:
a block of query rows against blocks of :data:`KEY_BLOCK` keys, each block product a register-tiled
``C += A @ B`` on GNU vectors of 8 floats (:func:`_matmul_source`; of 16 floats in tiles of 8 x 32
where kernels are built for 64-byte vectors and the width is a multiple of 32, ``_MM16``: the same
sums in the same order, so the same bits), so the scores of a block live in
a scratch tile of the thread (at most 64 × 64 floats) and are never stored whole.

A work unit is one (batch, key/value head, block of queries) for ``fwd`` and ``dq``: the rows of
the tile are the queries of the block for every query head sharing that key/value head
(grouped-query attention reads each key once for the group). ``dkdv``'s unit is one (batch,
key/value head, block of keys), running through every query of the group's heads. Units are
spread over threads by OpenMP (dynamic: a causal mask makes them uneven); each thread allocates
its tiles once.

Inputs are read through a loader (float32, or bfloat16 widened as it is loaded), so a bfloat16
cache is read as stored. The mask is boolean (True: the key takes part) or additive float32, with
its key axis whole and its other axes broadcast (stride 0); a row whose keys are all masked out
gets zeros (output and gradients) and a log-sum-exp of ``-inf``.
"""

from __future__ import annotations

KEY_BLOCK = 64  # keys per block (the width of a score tile)
ROWS = 64  # the rows of a tile a unit aims at: queries per block times the heads of a group

_HEADER = r"""#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
typedef float v8 __attribute__((vector_size(32)));
static inline float cv_bf16_f32(uint16_t x) { uint32_t u = (uint32_t)x << 16; float f; memcpy(&f, &u, 4); return f; }
#define KB 64
#define NEG_INF (-__builtin_inff())
static inline long long up16(long long x) { return (x + 15) & ~15LL; }
static inline long long up4(long long x) { return (x + 3) & ~3LL; }
typedef int32_t vi8 __attribute__((vector_size(32)));
typedef uint8_t vu8 __attribute__((vector_size(8)));
static inline v8 splat(float x) { return (v8){x, x, x, x, x, x, x, x}; }
static inline v8 sel8(vi8 m, v8 a, v8 b) { return (v8)(((vi8)a & m) | ((vi8)b & ~m)); }
/* (nan wins, as the composite's max: a row with a nan score gets a nan output) */
static inline float hmax8(v8 a) {
  float m = a[0];
  for (int l = 1; l < 8; l++) m = a[l] > m || a[l] != a[l] ? a[l] : m;
  return m;
}
static inline float hsum8(v8 a) { return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])); }
static float* tile(long long n) {  /* 64-byte aligned, zeroed */
  size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
  float* p = (float*)aligned_alloc(64, bytes);
  if (p) memset(p, 0, bytes);
  return p;
}
"""


def _matmul_source(fma: str) -> str:
    """``mm``: ``C[m x w] (+)= A[m x n] @ B[n x w]``, ``m`` a multiple of 4 and ``w`` of 16,
    every row of ``B`` and ``C`` 32-byte aligned; a 4 x 16 register tile (8 vectors)."""
    rows = []
    for r in range(4):
        rows.append(f"        const v8 a{r} = splat(a[{r} * lda + j]);")
    fmas = [f"        c{r}{h} = {fma}(a{r}, b{h}, c{r}{h});" for r in range(4) for h in range(2)]
    loads = [f"      v8 c{r}{h} = acc ? *(const v8*)(C + (i + {r}) * ldc + x + {8 * h}) : (v8){{}};"
             for r in range(4) for h in range(2)]
    stores = [f"      *(v8*)(C + (i + {r}) * ldc + x + {8 * h}) = c{r}{h};" for r in range(4) for h in range(2)]
    return "\n".join([
        "static void mm(float* restrict C, long long ldc, const float* restrict A, long long lda,",
        "               const float* restrict B, long long ldb, long long m, long long n, long long w, int acc) {",
        "#if WIDE",
        "  if (w % 32 == 0) { mm16(C, ldc, A, lda, B, ldb, m, n, w, acc); return; }",
        "#endif",
        "  for (long long i = 0; i < m; i += 4)",
        "    for (long long x = 0; x < w; x += 16) {",
        *loads,
        "      const float* a = A + i * lda;",
        "      for (long long j = 0; j < n; j++) {",
        "        const v8 b0 = *(const v8*)(B + j * ldb + x), b1 = *(const v8*)(B + j * ldb + x + 8);",
        *rows, *fmas,
        "      }",
        *stores,
        "    }",
        "}", ""])


# the same product on 16-float vectors (64 bytes: AVX-512 kernels), for widths a multiple of 32:
# each multiply-add does twice the work of the 8-float tile's, for the same instructions. Rows of B
# and C are only 32-byte aligned, so the vector type says so.
_MM16 = r"""
typedef float v16 __attribute__((vector_size(64), aligned(32)));
static inline v16 splat16(float x) { return (v16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
static inline v16 fma16(v16 a, v16 b, v16 c) {
#ifdef __clang__
#pragma clang fp contract(on)
  return a * b + c;
#else
  v16 r; for (int l = 0; l < 16; l++) r[l] = FMA16_LANE(a[l], b[l], c[l]); return r;
#endif
}
"""


def _mm16_tile(rows: int) -> str:
    """``mm16_<rows>``: rows ``i .. i + rows`` of ``_MM16``'s product, in tiles of ``rows`` x 32
    (two 16-float vector accumulators a row), each element summed over ``j`` in order as ``mm``'s."""
    loads = [f"    v16 c{r}{h} = acc ? *(const v16*)(C + (i + {r}) * ldc + x + {16 * h}) : (v16){{}};"
             for r in range(rows) for h in range(2)]
    fmas = [f"      {{ const v16 a{r} = splat16(a[{r} * lda + j]); c{r}0 = fma16(a{r}, b0, c{r}0); "
            f"c{r}1 = fma16(a{r}, b1, c{r}1); }}" for r in range(rows)]
    stores = [f"    *(v16*)(C + (i + {r}) * ldc + x + {16 * h}) = c{r}{h};" for r in range(rows) for h in range(2)]
    return "\n".join([
        f"static void mm16_{rows}(float* restrict C, long long ldc, const float* restrict A, long long lda,",
        "                 const float* restrict B, long long ldb, long long i, long long n, long long w, int acc) {",
        "  for (long long x = 0; x < w; x += 32) {",
        *loads,
        "    const float* a = A + i * lda;",
        "    for (long long j = 0; j < n; j++) {",
        "      const v16 b0 = *(const v16*)(B + j * ldb + x), b1 = *(const v16*)(B + j * ldb + x + 16);",
        *fmas,
        "    }",
        *stores,
        "  }",
        "}", ""])


_MM16 += _mm16_tile(8) + _mm16_tile(4) + r"""static void mm16(float* restrict C, long long ldc, const float* restrict A, long long lda,
                 const float* restrict B, long long ldb, long long m, long long n, long long w, int acc) {
  long long i = 0;
  for (; i + 8 <= m; i += 8) mm16_8(C, ldc, A, lda, B, ldb, i, n, w, acc);
  for (; i < m; i += 4) mm16_4(C, ldc, A, lda, B, ldb, i, n, w, acc);
}
"""


def _fma_source(fma: bool) -> str:
    if not fma:
        return "static inline v8 fma8(v8 a, v8 b, v8 c) { return a * b + c; }\n" + _EXP
    return ("static inline v8 fma8(v8 a, v8 b, v8 c) {\n#ifdef __clang__\n#pragma clang fp contract(on)\n"
            "  return a * b + c;\n#else\n  v8 r; for (int l = 0; l < 8; l++) r[l] = __builtin_fmaf(a[l], b[l], c[l]);"
            " return r;\n#endif\n}\n") + _EXP


# exp on 8 lanes for the softmax's arguments (x <= 0 up to rounding): Cody-Waite reduction by ln 2
# and Cephes' degree-5 polynomial (about 1 ulp); below ln(FLT_MIN), -inf included, 0 (a subnormal
# result is flushed: it is under 1e-38 of the row's largest term); nan stays nan
_EXP = r"""
static inline v8 exp8(v8 x) {
  const vi8 under = x < splat(-87.33654475f);
  x = sel8(x > splat(88.0f), splat(88.0f), x);
  x = sel8(under, splat(-87.0f), x);
  const v8 t = fma8(x, splat(1.44269504088896341f), splat(12582912.0f));  /* 1.5 * 2^23: rounds to an integer */
  const v8 n = t - splat(12582912.0f);
  v8 r = fma8(n, splat(-0.693359375f), x);
  r = fma8(n, splat(2.12194440e-4f), r);
  v8 p = splat(1.9875691500e-4f);
  p = fma8(p, r, splat(1.3981999507e-3f));
  p = fma8(p, r, splat(8.3334519073e-3f));
  p = fma8(p, r, splat(4.1665795894e-2f));
  p = fma8(p, r, splat(1.6666665459e-1f));
  p = fma8(p, r, splat(5.0000001201e-1f));
  const v8 y = fma8(p * r, r, r) + splat(1.0f);
  const vi8 e = ((vi8)t - (vi8){} - 0x4B400000 + 127) << 23;  /* 2^n */
  return sel8(under, splat(0.0f), y * (v8)e);
}
"""


# (the body shared by the three kernels: sizes, the unit's rows, loading tiles, masking a score tile)
_COMMON = r"""
  const long long B = dims[0], H = dims[1], HK = dims[2], TQ = dims[3], TK = dims[4], D = dims[5], DV = dims[6];
  const int causal = (int)dims[7];
  const long long msh = dims[8], msi = dims[9];
  const long long G = H / HK, Dp = up16(D), DVp = up16(DV);
  const long long QB = G >= ROWS ? 1 : ROWS / G;  /* queries per block */
  const long long RM = up4(QB * G);  /* the rows of a tile */
  const T* restrict q = (const T*)p[1];
  const T* restrict k = (const T*)p[2];
  const T* restrict v = (const T*)p[3];
  const MASK_T* restrict mask = (const MASK_T*)p[4];
  const long long* restrict moff = (const long long*)p[5];
  (void)B; (void)mask; (void)moff; (void)msh; (void)msi; (void)causal;
"""

# masks row r (query i of head h, batch b) of a score tile S for keys j0 .. j0 + KB: -inf where a
# key is past the end, after the query (causal) or masked out; a float mask is added
_MASK_ROW = r"""
static inline void mask_row(float* restrict s, long long j0, long long nk, long long i, int causal,
                            const MASK_T* restrict mrow) {
  if (!HAS_MASK && nk == KB && (!causal || j0 + KB <= i + 1)) return;  /* (every key of the block seen) */
  const long long last = causal && i - j0 < nk - 1 ? i - j0 : nk - 1;  /* the last key seen, from j0 */
  for (int c = 0; c < KB; c += 8) {
    const vi8 jj = (vi8){0, 1, 2, 3, 4, 5, 6, 7} + c;
    vi8 off = jj > ((vi8){} + (int)(last < -1 ? -1 : last));
    v8 x = *(const v8*)(s + c);
    MASK_APPLY
    *(v8*)(s + c) = sel8(off, splat(NEG_INF), x);
  }
}
"""

# whether any of the R rows of a unit (query i0 + r / G of head hk * G + r % G) sees a key of the
# block j0 .. j0 + nk through the mask: a block masked out whole (a cache's empty slots, the future
# of a causal mask given as a mask) is skipped, its scores never computed
_SOFTCAP = r"""
/* soft-capping of a row of scores, cap * tanh(s / cap) (Gemma 2; cap 0: none), before the mask;
   t, when given, gets each tanh (the gradient's factor is 1 - t^2) */
static inline void softcap_row(float* restrict s, float cap, float* restrict t) {
  if (cap == 0.0f) return;
  for (int c = 0; c < KB; c += 8) {
    const v8 e = exp8(*(const v8*)(s + c) * splat(2.0f / cap));
    const v8 th = splat(1.0f) - splat(2.0f) / (e + splat(1.0f));
    if (t) *(v8*)(t + c) = th;
    *(v8*)(s + c) = th * splat(cap);
  }
}
"""

_BLOCK_SEEN = r"""
static inline int block_seen(const MASK_T* restrict mask, const long long* restrict moff, long long b, long long hk,
                             long long G, long long i0, long long R, long long msh, long long msi, long long j0,
                             long long nk) {
  if (!HAS_MASK || !mask) return 1;
  for (long long r = 0; r < R; r++) {
    if (msh == 0 && r % G) continue;  /* (the heads of a group share the mask row) */
    const MASK_T* mr = mask + moff[b] + (hk * G + r % G) * msh + (i0 + r / G) * msi + j0;
    for (long long jj = 0; jj < nk; jj++) if (SEES(mr[jj])) return 1;
  }
  return 0;
}
"""

_MASKS = {
    "none": ("uint8_t", "(void)mrow;"),
    "bool": ("uint8_t", "vi8 mv;\n"
                        "    if (c + 8 <= nk) {\n"
                        "      vu8 raw; memcpy(&raw, mrow + j0 + c, 8); mv = __builtin_convertvector(raw, vi8);\n"
                        "    }\n"
                        "    else for (int l = 0; l < 8; l++) mv[l] = c + l < nk ? mrow[j0 + c + l] : 1;\n"
                        "    off |= mv == (vi8){};"),
    "float": ("float", "v8 mv;\n"
                       "    if (c + 8 <= nk) memcpy(&mv, mrow + j0 + c, 32);\n"
                       "    else for (int l = 0; l < 8; l++) mv[l] = c + l < nk ? mrow[j0 + c + l] : 0.0f;\n"
                       "    x += mv;"),
}

# the forward's per-row steps: a row of a score tile made its probabilities against the row's
# running maximum m and sum l (its output accumulator rescaled to a new maximum; a row whose keys
# are all masked so far left as it is), and a finished row's output and log-sum-exp written
_ROW_STEPS = r"""
static inline void online_softmax(float* restrict s, float* restrict m, float* restrict l, float* restrict acc,
                                  long long DVp) {
  v8 m8 = splat(NEG_INF);
  for (int c = 0; c < KB; c += 8) { const v8 x = *(const v8*)(s + c); m8 = sel8((x > m8) | (x != x), x, m8); }
  const float mx = hmax8(m8);
  const float mn = mx > *m || mx != mx ? mx : *m;
  if (mn == NEG_INF) { memset(s, 0, sizeof(float) * KB); return; }
  const float c = *m == NEG_INF ? 0.0f : expf(*m - mn);
  v8 sum8 = splat(0.0f);
  for (int cc = 0; cc < KB; cc += 8) {
    const v8 e = exp8(*(const v8*)(s + cc) - splat(mn));
    *(v8*)(s + cc) = e;
    sum8 += e;
  }
  *l = *l * c + hsum8(sum8);
  *m = mn;
  if (c != 1.0f)
    for (long long d = 0; d < DVp; d++) acc[d] *= c;
}
static inline void finish_row(float* restrict out, float* restrict lse, long long row, const float* restrict acc,
                              float m, float l, long long DV) {
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (long long d = 0; d < DV; d++) out[row * DV + d] = acc[d] * inv;
  lse[row] = l > 0.0f ? m + logf(l) : NEG_INF;
}
"""

# the forward for a few query rows per key/value head (a decode step: one query per head): each
# key's scores as dot products of its row (no transposed copy of the keys), each value row added
# into the rows' outputs as it is read; one unit per (batch, key/value head)
_FWD_FEW = r"""
static int fwd_few(void* const* p, const long long* dims, float scale, float cap) {
COMMON
  float* restrict out = (float*)p[0];
  float* restrict lse = out + B * H * TQ * DV;
  const long long R = TQ * G;
  int failed = 0;
  #pragma omp parallel
  {
    float *Qs = tile(R * Dp), *kf = tile(Dp), *vf = tile(DVp), *S = tile(R * KB), *Acc = tile(R * DVp),
          *M = tile(R), *L = tile(R);
    const int mine = !Qs || !kf || !vf || !S || !Acc || !M || !L;
    if (mine) {
      #pragma omp atomic write
      failed = 1;
    }
    #pragma omp for schedule(static)
    for (long long u = 0; u < B * HK; u++) {
      if (mine) continue;
      const long long b = u / HK, hk = u % HK;
      for (long long r = 0; r < R; r++) {  /* row r: query r / G of head hk * G + r % G */
        const T* src = q + ((b * H + hk * G + r % G) * TQ + r / G) * D;
        for (long long d = 0; d < D; d++) Qs[r * Dp + d] = LOAD(src, d) * scale;
        M[r] = NEG_INF; L[r] = 0.0f;
      }
      memset(Acc, 0, sizeof(float) * R * DVp);
      const long long kend = causal ? (TQ < TK ? TQ : TK) : TK;
      for (long long j0 = 0; j0 < kend; j0 += KB) {
        const long long nk = TK - j0 < KB ? TK - j0 : KB;
        if (!block_seen(mask, moff, b, hk, G, 0, R, msh, msi, j0, nk)) continue;
        for (long long jj = 0; jj < nk; jj++) {
          const T* ks = k + ((b * HK + hk) * TK + j0 + jj) * D;
          for (long long d = 0; d < D; d++) kf[d] = LOAD(ks, d);
          for (long long r = 0; r < R; r++) {
            v8 acc = splat(0.0f);
            for (long long d = 0; d < Dp; d += 8) acc = fma8(*(const v8*)(Qs + r * Dp + d), *(const v8*)(kf + d), acc);
            S[r * KB + jj] = hsum8(acc);
          }
        }
        for (long long r = 0; r < R; r++) {
          float* restrict s = S + r * KB;
          for (long long jj = nk; jj < KB; jj++) s[jj] = NEG_INF;
          const long long h = hk * G + r % G, i = r / G;
          softcap_row(s, cap, 0);
          mask_row(s, j0, nk, i, causal, mask ? mask + moff[b] + h * msh + i * msi : 0);
          online_softmax(s, M + r, L + r, Acc + r * DVp, DVp);
        }
        for (long long jj = 0; jj < nk; jj++) {
          const T* vs = v + ((b * HK + hk) * TK + j0 + jj) * DV;
          for (long long d = 0; d < DV; d++) vf[d] = LOAD(vs, d);
          for (long long r = 0; r < R; r++) {
            const v8 pr = splat(S[r * KB + jj]);
            for (long long d = 0; d < DVp; d += 8)
              *(v8*)(Acc + r * DVp + d) = fma8(pr, *(const v8*)(vf + d), *(const v8*)(Acc + r * DVp + d));
          }
        }
      }
      for (long long r = 0; r < R; r++)
        finish_row(out, lse, (b * H + hk * G + r % G) * TQ + r / G, Acc + r * DVp, M[r], L[r], DV);
    }
    free(Qs); free(kf); free(vf); free(S); free(Acc); free(M); free(L);
  }
  return failed;
}
"""

_FWD = r"""
int NAME(void* const* p, const long long* dims, float scale, float cap) {
COMMON
  float* restrict out = (float*)p[0];
  float* restrict lse = out + B * H * TQ * DV;
  if (TQ * G <= FEW_ROWS) return fwd_few(p, dims, scale, cap);
  const long long nqb = (TQ + QB - 1) / QB, units = B * HK * nqb, TKp = (TK + KB - 1) / KB * KB;
  float* KTall = (float*)aligned_alloc(64, sizeof(float) * (size_t)(B * HK * D * TKp + 16));
  if (!KTall) return 1;
  TRANSPOSE_ALL(KTall, k, B * HK, TK, D);
  int failed = 0;
  #pragma omp parallel
  {
    float *Qs = tile(RM * Dp), *Vs = tile(KB * DVp), *S = tile(RM * KB),
          *Acc = tile(RM * DVp), *M = tile(RM), *L = tile(RM);
    const int mine = !Qs || !Vs || !S || !Acc || !M || !L;
    if (mine) {
      #pragma omp atomic write
      failed = 1;
    }
    #pragma omp for schedule(dynamic)
    for (long long u = 0; u < units; u++) {
      if (mine) continue;
      const long long b = u / (HK * nqb), hk = u / nqb % HK, i0 = u % nqb * QB;
      const long long nq = TQ - i0 < QB ? TQ - i0 : QB, R = nq * G;
      memset(Qs, 0, sizeof(float) * RM * Dp);
      for (long long r = 0; r < R; r++) {  /* row r: query i0 + r / G of head hk * G + r % G */
        const T* src = q + (((b * H + hk * G + r % G) * TQ) + i0 + r / G) * D;
        for (long long d = 0; d < D; d++) Qs[r * Dp + d] = LOAD(src, d) * scale;
        M[r] = NEG_INF; L[r] = 0.0f;
      }
      memset(Acc, 0, sizeof(float) * RM * DVp);
      const long long kend = causal ? (i0 + nq < TK ? i0 + nq : TK) : TK;
      for (long long j0 = 0; j0 < kend; j0 += KB) {
        const long long nk = TK - j0 < KB ? TK - j0 : KB;
        if (!block_seen(mask, moff, b, hk, G, i0, R, msh, msi, j0, nk)) continue;
        copy_rows(Vs, DVp, v + ((b * HK + hk) * TK + j0) * DV, DV, nk);
        mm(S, KB, Qs, Dp, KTall + (b * HK + hk) * D * TKp + j0 * D, KB, RM, D, KB, 0);
        for (long long r = 0; r < RM; r++) {
          float* restrict s = S + r * KB;
          if (r >= R) { memset(s, 0, sizeof(float) * KB); continue; }
          const long long h = hk * G + r % G, i = i0 + r / G;
          softcap_row(s, cap, 0);
          mask_row(s, j0, nk, i, causal, mask ? mask + moff[b] + h * msh + i * msi : 0);
          online_softmax(s, M + r, L + r, Acc + r * DVp, DVp);
        }
        mm(Acc, DVp, S, KB, Vs, DVp, RM, KB, DVp, 1);
      }
      for (long long r = 0; r < R; r++)
        finish_row(out, lse, (b * H + hk * G + r % G) * TQ + i0 + r / G, Acc + r * DVp, M[r], L[r], DV);
    }
    free(Qs); free(Vs); free(S); free(Acc); free(M); free(L);
  }
  free(KTall);
  return failed;
}
"""

# p: out (dq), q, k, v, mask, moff, do, lse, delta
_DQ = r"""
int NAME(void* const* p, const long long* dims, float scale, float cap) {
COMMON
  float* restrict dq = (float*)p[0];
  const float* restrict dout = (const float*)p[6];
  const float* restrict lse = (const float*)p[7];
  const float* restrict delta = (const float*)p[8];
  const long long nqb = (TQ + QB - 1) / QB, units = B * HK * nqb, TKp = (TK + KB - 1) / KB * KB;
  float* KTall = (float*)aligned_alloc(64, sizeof(float) * (size_t)(B * HK * D * TKp + 16));
  float* VTall = (float*)aligned_alloc(64, sizeof(float) * (size_t)(B * HK * DV * TKp + 16));
  if (!KTall || !VTall) { free(KTall); free(VTall); return 1; }
  TRANSPOSE_ALL(KTall, k, B * HK, TK, D);
  TRANSPOSE_ALL(VTall, v, B * HK, TK, DV);
  int failed = 0;
  #pragma omp parallel
  {
    float *Qs = tile(RM * Dp), *Os = tile(RM * DVp), *Ks = tile(KB * Dp),
          *S = tile(RM * KB), *P = tile(RM * KB), *dQ = tile(RM * Dp), *LS = tile(RM), *DL = tile(RM);
    const int mine = !Qs || !Os || !Ks || !S || !P || !dQ || !LS || !DL;
    if (mine) {
      #pragma omp atomic write
      failed = 1;
    }
    #pragma omp for schedule(dynamic)
    for (long long u = 0; u < units; u++) {
      if (mine) continue;
      const long long b = u / (HK * nqb), hk = u / nqb % HK, i0 = u % nqb * QB;
      const long long nq = TQ - i0 < QB ? TQ - i0 : QB, R = nq * G;
      memset(Qs, 0, sizeof(float) * RM * Dp); memset(Os, 0, sizeof(float) * RM * DVp);
      memset(dQ, 0, sizeof(float) * RM * Dp);
      for (long long r = 0; r < R; r++) {
        const long long row = (b * H + hk * G + r % G) * TQ + i0 + r / G;
        for (long long d = 0; d < D; d++) Qs[r * Dp + d] = LOAD((q + row * D), d) * scale;
        for (long long d = 0; d < DV; d++) Os[r * DVp + d] = dout[row * DV + d];
        LS[r] = lse[row]; DL[r] = delta[row];
      }
      const long long kend = causal ? (i0 + nq < TK ? i0 + nq : TK) : TK;
      for (long long j0 = 0; j0 < kend; j0 += KB) {
        const long long nk = TK - j0 < KB ? TK - j0 : KB;
        if (!block_seen(mask, moff, b, hk, G, i0, R, msh, msi, j0, nk)) continue;
        copy_rows(Ks, Dp, k + ((b * HK + hk) * TK + j0) * D, D, nk);
        mm(S, KB, Qs, Dp, KTall + (b * HK + hk) * D * TKp + j0 * D, KB, RM, D, KB, 0);
        mm(P, KB, Os, DVp, VTall + (b * HK + hk) * DV * TKp + j0 * DV, KB, RM, DV, KB, 0);  /* dp = do . v */
        for (long long r = 0; r < RM; r++) {
          float* restrict s = S + r * KB;
          const float* restrict dp = P + r * KB;
          if (r >= R || LS[r] == NEG_INF) { memset(s, 0, sizeof(float) * KB); continue; }
          const long long h = hk * G + r % G, i = i0 + r / G;
          float tn[KB] __attribute__((aligned(64)));
          softcap_row(s, cap, tn);
          mask_row(s, j0, nk, i, causal, mask ? mask + moff[b] + h * msh + i * msi : 0);
          const v8 l = splat(LS[r]), dl = splat(DL[r]);
          for (int c = 0; c < KB; c += 8)  /* ds = p * (dp - delta) */
            *(v8*)(s + c) = exp8(*(const v8*)(s + c) - l) * (*(const v8*)(dp + c) - dl);
          if (cap != 0.0f)  /* (through the cap: times 1 - tanh^2) */
            for (int c = 0; c < KB; c += 8)
              *(v8*)(s + c) = *(const v8*)(s + c) * (splat(1.0f) - *(const v8*)(tn + c) * *(const v8*)(tn + c));
        }
        mm(dQ, Dp, S, KB, Ks, Dp, RM, KB, Dp, 1);
      }
      for (long long r = 0; r < R; r++) {
        const long long row = (b * H + hk * G + r % G) * TQ + i0 + r / G;
        for (long long d = 0; d < D; d++) dq[row * D + d] = dQ[r * Dp + d] * scale;
      }
    }
    free(Qs); free(Os); free(Ks); free(S); free(P); free(dQ); free(LS); free(DL);
  }
  free(KTall); free(VTall);
  return failed;
}
"""

# p: out (dk then dv), q, k, v, mask, moff, do, lse, delta
_DKDV = r"""
int NAME(void* const* p, const long long* dims, float scale, float cap) {
COMMON
  float* restrict dk = (float*)p[0];
  float* restrict dv = dk + B * HK * TK * D;
  const float* restrict dout = (const float*)p[6];
  const float* restrict lse = (const float*)p[7];
  const float* restrict delta = (const float*)p[8];
  const long long nkb = (TK + KB - 1) / KB, units = B * HK * nkb;
  int failed = 0;
  #pragma omp parallel
  {
    float *Qs = tile(RM * Dp), *Os = tile(RM * DVp), *KT = tile(D * KB), *VT = tile(DV * KB), *S = tile(RM * KB),
          *P = tile(RM * KB), *PT = tile(KB * RM), *ST = tile(KB * RM), *dK = tile(KB * Dp), *dV = tile(KB * DVp),
          *LS = tile(RM), *DL = tile(RM);
    const int mine = !Qs || !Os || !KT || !VT || !S || !P || !PT || !ST || !dK || !dV || !LS || !DL;
    if (mine) {
      #pragma omp atomic write
      failed = 1;
    }
    #pragma omp for schedule(dynamic)
    for (long long u = 0; u < units; u++) {
      if (mine) continue;
      const long long b = u / (HK * nkb), hk = u / nkb % HK, j0 = u % nkb * KB;
      const long long nk = TK - j0 < KB ? TK - j0 : KB;
      for (long long jj = 0; jj < KB; jj++) {
        const T* ks = k + ((b * HK + hk) * TK + j0 + jj) * D;
        const T* vs = v + ((b * HK + hk) * TK + j0 + jj) * DV;
        for (long long d = 0; d < D; d++) KT[d * KB + jj] = jj < nk ? LOAD(ks, d) : 0.0f;
        for (long long d = 0; d < DV; d++) VT[d * KB + jj] = jj < nk ? LOAD(vs, d) : 0.0f;
      }
      memset(dK, 0, sizeof(float) * KB * Dp); memset(dV, 0, sizeof(float) * KB * DVp);
      for (long long i0 = causal ? j0 / QB * QB : 0; i0 < TQ; i0 += QB) {
        const long long nq = TQ - i0 < QB ? TQ - i0 : QB, R = nq * G;
        if (!block_seen(mask, moff, b, hk, G, i0, R, msh, msi, j0, nk)) continue;
        memset(Qs, 0, sizeof(float) * RM * Dp); memset(Os, 0, sizeof(float) * RM * DVp);
        for (long long r = 0; r < R; r++) {
          const long long row = (b * H + hk * G + r % G) * TQ + i0 + r / G;
          for (long long d = 0; d < D; d++) Qs[r * Dp + d] = LOAD((q + row * D), d) * scale;
          for (long long d = 0; d < DV; d++) Os[r * DVp + d] = dout[row * DV + d];
          LS[r] = lse[row]; DL[r] = delta[row];
        }
        mm(S, KB, Qs, Dp, KT, KB, RM, D, KB, 0);
        mm(P, KB, Os, DVp, VT, KB, RM, DV, KB, 0);  /* dp = do . v */
        for (long long r = 0; r < RM; r++) {
          float* restrict s = S + r * KB;
          float* restrict dp = P + r * KB;
          if (r >= R || LS[r] == NEG_INF) {
            for (long long jj = 0; jj < KB; jj++) { PT[jj * RM + r] = 0.0f; ST[jj * RM + r] = 0.0f; }
            continue;
          }
          const long long h = hk * G + r % G, i = i0 + r / G;
          float tn[KB] __attribute__((aligned(64)));
          softcap_row(s, cap, tn);
          mask_row(s, j0, nk, i, causal, mask ? mask + moff[b] + h * msh + i * msi : 0);
          const v8 l = splat(LS[r]), dl = splat(DL[r]);
          for (int c = 0; c < KB; c += 8) {
            const v8 pr = exp8(*(const v8*)(s + c) - l);
            *(v8*)(s + c) = pr;
            *(v8*)(dp + c) = pr * (*(const v8*)(dp + c) - dl);  /* ds */
          }
          if (cap != 0.0f)  /* (through the cap: times 1 - tanh^2) */
            for (int c = 0; c < KB; c += 8)
              *(v8*)(dp + c) = *(const v8*)(dp + c) * (splat(1.0f) - *(const v8*)(tn + c) * *(const v8*)(tn + c));
          for (long long jj = 0; jj < KB; jj++) { PT[jj * RM + r] = s[jj]; ST[jj * RM + r] = dp[jj]; }
        }
        mm(dV, DVp, PT, RM, Os, DVp, KB, RM, DVp, 1);
        mm(dK, Dp, ST, RM, Qs, Dp, KB, RM, Dp, 1);
      }
      for (long long jj = 0; jj < nk; jj++) {
        const long long row = (b * HK + hk) * TK + j0 + jj;
        for (long long d = 0; d < D; d++) dk[row * D + d] = dK[jj * Dp + d];
        for (long long d = 0; d < DV; d++) dv[row * DV + d] = dV[jj * DVp + d];
      }
    }
    free(Qs); free(Os); free(KT); free(VT); free(S); free(P); free(PT); free(ST);
    free(dK); free(dV); free(LS); free(DL);
  }
  return failed;
}
"""

_COPIES = r"""
/* the keys (or values) of every head transposed once per call, a block of KB at a time: block jb of
   head bh is the D x KB tile at dst + (bh * nkb + jb) * D * KB, column jj holding row jb * KB + jj
   (zero past TK); a unit's product then reads it as rows of KB contiguous columns */
#define TRANSPOSE_ALL(dst, src, BH, TK, D) do { \
    const long long nkb_ = ((TK) + KB - 1) / KB; \
    _Pragma("omp parallel for schedule(static)") \
    for (long long u_ = 0; u_ < (BH) * nkb_; u_++) { \
      const long long bh_ = u_ / nkb_, j0_ = u_ % nkb_ * KB; \
      float* blk = (dst) + u_ * (D) * KB; \
      for (long long jj = 0; jj < KB; jj++) { \
        if (j0_ + jj < (TK)) { \
          const T* row = (src) + (bh_ * (TK) + j0_ + jj) * (D); \
          for (long long d = 0; d < (D); d++) blk[d * KB + jj] = LOAD(row, d); \
        } else for (long long d = 0; d < (D); d++) blk[d * KB + jj] = 0.0f; \
      } \
    } \
  } while (0)
/* dst[jj * ld + d] = row j0 + jj of src (zero rows past nk) */
static inline void copy_rows(float* restrict dst, long long ld, const T* restrict src, long long width, long long nk) {
  for (long long jj = 0; jj < KB; jj++) {
    float* restrict o = dst + jj * ld;
    if (jj < nk) { const T* restrict s = src + jj * width; for (long long d = 0; d < width; d++) o[d] = LOAD(s, d); }
    else memset(o, 0, sizeof(float) * width);
  }
}
"""

_KINDS = {"fwd": _ROW_STEPS + _FWD_FEW + _FWD, "dq": _DQ, "dkdv": _DKDV}
FEW_ROWS = 16  # query rows per key/value head up to which the forward takes its few-rows path


def source(name: str, kind: str, dtype: str, mask: str, fma: bool, wide: bool = False) -> str:
    """The C source of kernel ``kind`` (``"fwd"``, ``"dq"``, ``"dkdv"``) as function ``name``:
    inputs of ``dtype`` (``"float32"`` or ``"bfloat16"``), a ``mask`` of kind ``"none"``,
    ``"bool"`` or ``"float"``. ``fma``: multiply-adds as fused instructions (the CPU has them).
    ``wide``: the block products on 16-float vectors where their width allows (kernels are built
    for 64-byte vectors: ``corvid.codegen.opt.vector_bytes``)."""
    if kind not in _KINDS or dtype not in ("float32", "bfloat16") or mask not in _MASKS:
        raise ValueError(f"attention kernel: unknown kind {kind!r}, dtype {dtype!r} or mask {mask!r}")
    mask_t, apply = _MASKS[mask]
    sees = {"none": "1", "bool": "(x) != 0", "float": "(x) != NEG_INF"}[mask]
    t, load = ("float", "(s)[d]") if dtype == "float32" else ("uint16_t", "cv_bf16_f32((s)[d])")
    parts = [_HEADER, f"#define ROWS {ROWS}\n#define FEW_ROWS {FEW_ROWS}\n#define HAS_MASK {int(mask != 'none')}\n"
             f"typedef {t} T;\ntypedef {mask_t} MASK_T;\n",
             f"#define LOAD(s, d) {load}\n", _COPIES, _fma_source(fma),
             f"#define WIDE {int(wide)}\n#define FMA16_LANE(a, b, c) {'__builtin_fmaf(a, b, c)' if fma else '((a) * (b) + (c))'}\n",
             _MM16 if wide else "", _matmul_source("fma8"),
             _MASK_ROW.replace("MASK_APPLY", apply), f"#define SEES(x) ({sees})\n", _BLOCK_SEEN, _SOFTCAP,
             _KINDS[kind].replace("NAME", name).replace("COMMON", _COMMON)]
    return "".join(parts)
