"""The C source of the bfloat16 dot-product products (:mod:`corvid.nn.cpu_matmul`).

One function per weight kind, output dtype and activation, ``void name(OUT* C, const uint16_t* A,
const void* W, const float* S, const void* W2, const float* S2, long long M, long long N, long long
K, long long B, long long g)``: ``C (M, N) = A (M, K) @ W.T``, ``A`` bfloat16 row-major, and ``W``

* ``"bf16"``: bfloat16 ``(N, K)`` row-major (``S``, ``B``, ``g`` unused);
* ``"int8"``: corvid's blocked quantized layout (:mod:`corvid.quant`), int8 ``(N / B, K, B)`` with
  float32 scales ``S (N / B, K / g, B)``;
* ``"int4"``: the same with bytes ``(N / B, K / 2, B)``, byte ``c`` of a group holding inputs ``c``
  (low nibble) and ``c + g / 2`` (high nibble), stored plus 8.

A gated function (an activation given) takes a second weight ``W2``/``S2`` of the same kind and
writes ``act(A @ W.T) * (A @ W2.T)``: a SwiGLU or GeGLU block's gate and up projections in one
pass, their products never stored.

Each thread takes blocks of :data:`BLOCK` outputs. It packs the block's weights into a panel,
pairs of input channels of the 48 outputs side by side (what one ``vdpbf16ps`` reads), quantized
integers converted to bfloat16 exactly, then runs every 8 rows of ``A`` against the panel in 24
vector registers. A quantized weight's groups are summed apart and each sum multiplied by its
scale, ``s * (x . q)``: every product is exact, as in the float32 product of the dequantized
weight. For ``"int4"`` the rows of ``A`` are first rearranged to pair input ``c`` with ``c + g /
2``, the two halves of a byte.
"""

from __future__ import annotations

BLOCK = 48  # outputs per panel (three 16-lane vectors)
ROWS = 8  # rows of a register tile


def _tile(r: int) -> str:
    """``tile_r``: ``r`` rows of ``A`` against a panel, group by group, into the float32 tile ``T``
    (``r`` rows of :data:`BLOCK`)."""
    h = BLOCK // 16
    lines = [f"static inline void tile_{r}(float* restrict T, const uint16_t* restrict A, long long lda,",
             "    const uint32_t* restrict panel, const float* restrict sp, long long G, long long GP) {",
             "  for (long long grp = 0; grp < G; grp++) {"]
    lines += [f"    __m512 c{i}_{j} = _mm512_setzero_ps();" for i in range(r) for j in range(h)]
    lines.append("    for (long long p = grp * GP; p < (grp + 1) * GP; p++) {")
    lines += [f"      const __m512bh b{j} = (__m512bh)_mm512_load_si512(panel + p * {BLOCK} + {16 * j});"
              for j in range(h)]
    for i in range(r):
        pair = f"*(const int32_t*)(A + {i} * lda + 2 * p)"  # (two inputs, broadcast to every lane)
        lines.append(f"      const __m512bh a{i} = (__m512bh)_mm512_set1_epi32({pair});")
        lines += [f"      c{i}_{j} = _mm512_dpbf16_ps(c{i}_{j}, a{i}, b{j});" for j in range(h)]
    lines.append("    }")
    lines.append("    if (sp) {")
    lines += [f"      const __m512 s{j} = _mm512_load_ps(sp + grp * {BLOCK} + {16 * j});" for j in range(h)]
    lines += [f"      c{i}_{j} = _mm512_mul_ps(c{i}_{j}, s{j});" for i in range(r) for j in range(h)]
    lines.append("    }")
    lines.append("    if (grp == 0) {")
    lines += [f"      _mm512_store_ps(T + {i * BLOCK + 16 * j}, c{i}_{j});" for i in range(r) for j in range(h)]
    lines.append("    } else {")
    lines += [f"      _mm512_store_ps(T + {o}, _mm512_add_ps(_mm512_load_ps(T + {o}), c{i}_{j}));"
              for i in range(r) for j in range(h) for o in [i * BLOCK + 16 * j]]
    lines += ["    }", "  }", "}"]
    return "\n".join(lines)


_HEADER = r"""#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef __AVX512BF16__
#error no AVX512-BF16 in this target
#endif
static inline float bf16_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
/* exp on 16 lanes: Cody-Waite reduction by ln 2, Cephes' polynomial (about 1 ulp), 2^n by scalef
   (overflow to inf, gradual underflow to 0); nan stays nan */
static inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}
static inline __m512 act_silu(__m512 g) {  /* g / (1 + exp(-g)) */
  return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
}
static inline __m512 act_gelu_tanh(__m512 g) {  /* g / 2 * (1 + tanh(y)) = g - g / (1 + exp(2y)) */
  const __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
  const __m512 y2 = _mm512_mul_ps(_mm512_fmadd_ps(g3, _mm512_set1_ps(0.044715f), g),
                                  _mm512_set1_ps(1.5957691216057308f));  /* 2 sqrt(2 / pi) */
  return _mm512_sub_ps(g, _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(y2))));
}
static inline __m512 round_bf16(__m512 x) {  /* to the nearest bfloat16 (even on ties), as float32 */
  return _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(x));
}
static inline uint16_t f32_bf16(float f) {  /* round to nearest even; a nan stays a (quiet) nan */
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""

# fills panel[p * BLOCK + c] (p < K2, c < BLOCK) and, quantized, sp[grp * BLOCK + c] for block j
_PACK = {
    "bf16": r"""
/* 16 x 16 32-bit elements transposed in registers: dst row i (stride ld) = column i of the 16
   source rows (stride ls) */
static inline void transpose16(uint32_t* restrict dst, long long ld, const uint32_t* restrict src, long long ls) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(src + i * ls);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; i++) {  /* 128-bit lanes: rows i, i+4, i+8, i+12 */
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
  }
  for (int i = 0; i < 16; i++) _mm512_storeu_si512(dst + i * ld, r[i]);  /* (r[i]: column i) */
}
static void pack(uint32_t* restrict panel, float* restrict sp, const void* Wv, const float* S, long long j,
                 long long N, long long K, long long B, long long g) {
  const uint16_t* W = (const uint16_t*)Wv; (void)sp; (void)S; (void)B; (void)g;
  const long long K2 = K / 2;
  for (long long c0 = 0; c0 < BLOCK; c0 += 16) {
    const long long n0 = j * BLOCK + c0;
    if (n0 + 16 <= N) {  /* 16 whole rows: 16 x 16 blocks of pairs transposed */
      const uint32_t* rows = (const uint32_t*)(W + n0 * K);
      long long p = 0;
      for (; p + 16 <= K2; p += 16) transpose16(panel + p * BLOCK + c0, BLOCK, rows + p, K2);
      for (; p < K2; p++) for (long long c = 0; c < 16; c++) panel[p * BLOCK + c0 + c] = rows[c * K2 + p];
    } else {
      for (long long c = c0; c < c0 + 16; c++) {
        const long long n = j * BLOCK + c;
        if (n < N) {
          const uint32_t* row = (const uint32_t*)(W + n * K);
          for (long long p = 0; p < K2; p++) panel[p * BLOCK + c] = row[p];
        } else for (long long p = 0; p < K2; p++) panel[p * BLOCK + c] = 0;
      }
    }
  }
}
""",
}

# a quantized weight's block j: the outputs of one stored block of B at a time (their bytes are
# contiguous), each input pair converted exactly (ROW: the pair's bytes, PAIR(c): output c's pair)
_PACK_QUANTIZED = r"""
static inline uint32_t bf16_bits(int v) { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); return u >> 16; }
static void pack(uint32_t* restrict panel, float* restrict sp, const void* Wv, const float* S, long long j,
                 long long N, long long K, long long B, long long g) {
  const WTYPE* W = (const WTYPE*)Wv;
  const long long K2 = K / 2, G = K / g;
  for (long long c0 = 0; c0 < BLOCK;) {
    const long long n = j * BLOCK + c0;
    if (n >= N) {
      for (long long p = 0; p < K2; p++) for (long long c = c0; c < BLOCK; c++) panel[p * BLOCK + c] = 0;
      for (long long q = 0; q < G; q++) for (long long c = c0; c < BLOCK; c++) sp[q * BLOCK + c] = 0.0f;
      break;
    }
    const long long l = n % B, blk = n / B;
    long long len = BLOCK - c0 < B - l ? BLOCK - c0 : B - l;
    if (len > N - n) len = N - n;
    for (long long p = 0; p < K2; p++) {
      ROW
      uint32_t* o = panel + p * BLOCK + c0;
      for (long long c = 0; c < len; c++) o[c] = PAIR(c);
    }
    for (long long q = 0; q < G; q++) {
      const float* s = S + (blk * G + q) * B + l;
      for (long long c = 0; c < len; c++) sp[q * BLOCK + c0 + c] = s[c];
    }
    c0 += len;
  }
}
"""
_PACK["int8"] = (_PACK_QUANTIZED.replace("WTYPE", "int8_t")  # (inputs 2p and 2p + 1: two rows of B bytes)
                 .replace("ROW", "const int8_t* x0 = W + (blk * K + 2 * p) * B + l; const int8_t* x1 = x0 + B;")
                 .replace("PAIR(c)", "bf16_bits(x0[c]) | (bf16_bits(x1[c]) << 16)"))
_PACK["int4"] = (_PACK_QUANTIZED.replace("WTYPE", "uint8_t")  # (both nibbles of byte p, stored plus 8)
                 .replace("ROW", "const uint8_t* x = W + (blk * K2 + p) * B + l;")
                 .replace("PAIR(c)", "bf16_bits((x[c] & 15) - 8) | (bf16_bits((x[c] >> 4) - 8) << 16)"))

_MAIN = r"""
int NAME(OUT* restrict C, const uint16_t* restrict A, const void* W, const float* S, const void* W2, const float* S2,
         long long M, long long N, long long K, long long B, long long g) {
  const long long K2 = K / 2, nb = (N + BLOCK - 1) / BLOCK;
  int failed = 0;
  const long long G = QUANTIZED ? K / g : 1, GP = K2 / G;
  const uint16_t* a = A;
  uint16_t* paired = 0;
  (void)W2; (void)S2;
  if (PAIRED) {  /* int4: the rows of A with input c beside input c + g / 2 of its group */
    paired = (uint16_t*)aligned_alloc(64, (size_t)(M * K * 2 + 64));
    if (!paired) return 1;
    #pragma omp parallel for schedule(static)
    for (long long m = 0; m < M; m++)
      for (long long q = 0; q < G; q++)
        for (long long c = 0; c < g / 2; c++) {
          paired[m * K + q * g + 2 * c] = A[m * K + q * g + c];
          paired[m * K + q * g + 2 * c + 1] = A[m * K + q * g + c + g / 2];
        }
    a = paired;
  }
  #pragma omp parallel
  {
    uint32_t* panel = (uint32_t*)aligned_alloc(64, (size_t)K2 * BLOCK * 4 + 64);
    float* sp = QUANTIZED ? (float*)aligned_alloc(64, (size_t)G * BLOCK * 4 + 64) : 0;
    uint32_t* panel2 = GATED ? (uint32_t*)aligned_alloc(64, (size_t)K2 * BLOCK * 4 + 64) : 0;
    float* sp2 = GATED && QUANTIZED ? (float*)aligned_alloc(64, (size_t)G * BLOCK * 4 + 64) : 0;
    float T[ROWS * BLOCK] __attribute__((aligned(64))), U[ROWS * BLOCK] __attribute__((aligned(64)));
    (void)U;
    const int mine = !panel || (QUANTIZED && !sp) || (GATED && !panel2) || (GATED && QUANTIZED && !sp2);
    if (mine) {
      #pragma omp atomic write
      failed = 1;
    }
    #pragma omp for schedule(static)
    for (long long j = 0; j < nb; j++) {
      if (mine) continue;
      pack(panel, sp, W, S, j, N, K, B, g);
      if (GATED) pack(panel2, sp2, W2, S2, j, N, K, B, g);
      const int nc = N - j * BLOCK < BLOCK ? (int)(N - j * BLOCK) : BLOCK;
      for (long long i = 0; i < M; i += ROWS) {
        const int r = M - i < ROWS ? (int)(M - i) : ROWS;
        OUT* c = C + i * N + j * BLOCK;
        const uint16_t* ar = a + i * K;
        switch (r) { CASES default: tile_1(T, ar, K, panel, sp, G, GP); }
        if (GATED) {  /* act(gate) * up, each product rounded to bfloat16 first, as the layers give them */
          switch (r) { CASES2 default: tile_1(U, ar, K, panel2, sp2, G, GP); }
          for (int x = 0; x < r * BLOCK; x += 16) {
            const __m512 gv = round_bf16(_mm512_load_ps(T + x)), uv = round_bf16(_mm512_load_ps(U + x));
            _mm512_store_ps(T + x, _mm512_mul_ps(ACT(gv), uv));
          }
        }
        for (int x = 0; x < r; x++) for (int y = 0; y < nc; y++) c[x * N + y] = STORE(T[x * BLOCK + y]);
      }
    }
    free(panel);
    if (sp) free(sp);
    if (panel2) free(panel2);
    if (sp2) free(sp2);
  }
  if (paired) free(paired);
  return failed;
}
"""


def _gemv_block(r: int) -> str:
    """``gemv_r``: ``r`` rows against the 64 outputs of int4 block ``blk``, into ``T`` (float32,
    ``r`` rows of 64)."""
    lines = [f"static inline void gemv_{r}(float* restrict T, const uint8_t* restrict W,",
             "    const uint32_t* restrict pairs, long long K2, const float* restrict S, long long G, long long GP,",
             "    long long blk, __m512i table) {",
             "  for (long long q = 0; q < G; q++) {"]
    lines += [f"    __m512 c{i}_{v} = _mm512_setzero_ps();" for i in range(r) for v in range(4)]
    lines += ["    for (long long p = q * GP; p < (q + 1) * GP; p++) {",
              "      const uint8_t* bytes = W + (blk * K2 + p) * 64;"]
    lines += [f"      const __m512bh a{i} = (__m512bh)_mm512_set1_epi32((int)pairs[{i} * K2 + p]);" for i in range(r)]
    for v in range(4):
        lines += [f"      {{ const __m128i raw = _mm_loadu_si128((const __m128i*)(bytes + {16 * v}));",
                  "        const __m512i d = _mm512_cvtepu8_epi32(raw);",
                  "        const __m512i w = _mm512_ternarylogic_epi32(_mm512_and_si512(d, _mm512_set1_epi32(15)),",
                  "            _mm512_slli_epi32(d, 12), _mm512_set1_epi32(0xF0000), 0xF8);  /* a | (b & c) */",
                  "        const __m512bh b = (__m512bh)_mm512_permutexvar_epi16(w, table);"]
        lines += [f"        c{i}_{v} = _mm512_dpbf16_ps(c{i}_{v}, a{i}, b);" for i in range(r)]
        lines.append("      }")
    lines.append("    }")
    for v in range(4):
        lines.append(f"    {{ const __m512 sv = _mm512_loadu_ps(S + (blk * G + q) * 64 + {16 * v});")
        lines += [f"      _mm512_store_ps(T + {i * 64 + 16 * v}, q ? _mm512_fmadd_ps(c{i}_{v}, sv, _mm512_load_ps(T + "
                  f"{i * 64 + 16 * v})) : _mm512_mul_ps(c{i}_{v}, sv));" for i in range(r)]
        lines.append("    }")
    lines += ["  }", "}"]
    return "\n".join(lines)


_GEMV_INT4 = r"""
/* a few rows (M < ROWS) against int4 weights in blocks of 64 outputs, read as stored: each byte
   of the 64 of an input pair becomes the bfloat16 pair (low nibble - 8, high nibble - 8) through
   one word permute of a 32-entry table, with no packing pass */
int NAME(OUT* restrict C, const uint16_t* restrict A, const void* Wv, const float* S, const void* W2, const float* S2,
         long long M, long long N, long long K, long long B, long long g) {
  const uint8_t* W = (const uint8_t*)Wv;
  const long long K2 = K / 2, G = K / g, GP = g / 2, nb = N / 64;
  (void)W2; (void)S2; (void)B;
  uint32_t* pairs = (uint32_t*)aligned_alloc(64, (size_t)(M * K2 * 4 + 64));
  if (!pairs) return 1;
  for (long long m = 0; m < M; m++)  /* row m's input c of each group beside input c + g / 2 */
    for (long long q = 0; q < G; q++)
      for (long long c = 0; c < GP; c++)
        pairs[m * K2 + q * GP + c] = (uint32_t)A[m * K + q * g + c] | ((uint32_t)A[m * K + q * g + c + GP] << 16);
  uint16_t lut[32];
  for (int i = 0; i < 32; i++) lut[i] = f32_bf16((float)((i & 15) - 8));
  const __m512i table = _mm512_loadu_si512(lut);
  #pragma omp parallel for schedule(static)
  for (long long blk = 0; blk < nb; blk++) {
    float T[GEMV_ROWS * 64] __attribute__((aligned(64)));
    switch (M) { CASES default: gemv_1(T, W, pairs, K2, S, G, GP, blk, table); }
    for (long long r = 0; r < M; r++) for (int y = 0; y < 64; y++) C[r * N + blk * 64 + y] = STORE(T[r * 64 + y]);
  }
  free(pairs);
  return 0;
}
"""


def gemv_source(name: str, out: str = "float32") -> str:
    """The C source of the few-row int4 product (fewer than :data:`ROWS` rows, blocks of 64
    outputs): the same function signature as :func:`source`'s."""
    if out not in ("float32", "bfloat16"):
        raise ValueError(f"bfloat16 product: unknown output {out!r}")
    store = ("typedef float OUT;\n#define STORE(x) (x)" if out == "float32" else
             "typedef uint16_t OUT;\n#define STORE(x) f32_bf16(x)")
    cases = " ".join(f"case {r}: gemv_{r}(T, W, pairs, K2, S, G, GP, blk, table); break;"
                     for r in range(ROWS - 1, 1, -1))
    blocks = [_gemv_block(r) for r in range(1, ROWS)]
    return "\n".join([_HEADER, f"#define GEMV_ROWS {ROWS - 1}", store, *blocks,
                      _GEMV_INT4.replace("NAME", name).replace("CASES", cases)])


def source(name: str, kind: str, out: str = "float32", act: str | None = None) -> str:
    """The C source of the product for weights of ``kind`` (``"bf16"``, ``"int8"``, ``"int4"``),
    writing ``out`` (``"float32"``, or ``"bfloat16"``: each float32 sum rounded once). With
    ``act`` (``"silu"`` or ``"gelu_tanh"``) it is a gated product: ``W2``/``S2`` hold a second
    weight of the same kind and shape, and the result is ``act(A @ W.T) * (A @ W2.T)``, both
    products rounded to bfloat16 before (a SwiGLU or GeGLU block's gate and up projections)."""
    if kind not in _PACK or out not in ("float32", "bfloat16") or act not in (None, "silu", "gelu_tanh"):
        raise ValueError(f"bfloat16 product: unknown weight kind {kind!r}, output {out!r} or activation {act!r}")
    quantized = kind != "bf16"
    cases = " ".join(f"case {r}: tile_{r}(T, ar, K, panel, sp, G, GP); break;" for r in range(ROWS, 1, -1))
    cases2 = " ".join(f"case {r}: tile_{r}(U, ar, K, panel2, sp2, G, GP); break;" for r in range(ROWS, 1, -1))
    main = (_MAIN.replace("NAME", name).replace("CASES2", cases2).replace("CASES", cases)
            .replace("QUANTIZED", str(int(quantized))).replace("PAIRED", str(int(kind == "int4")))
            .replace("GATED", str(int(act is not None))).replace("ACT", f"act_{act or 'silu'}"))
    store = ("typedef float OUT;\n#define STORE(x) (x)" if out == "float32" else
             "typedef uint16_t OUT;\n#define STORE(x) f32_bf16(x)")
    tiles = [_tile(r) for r in range(1, ROWS + 1)]
    return "\n".join([_HEADER, f"#define BLOCK {BLOCK}\n#define ROWS {ROWS}", store, *tiles, _PACK[kind], main])
