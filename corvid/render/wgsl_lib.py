"""The WGSL helper functions the WebGPU renderer (:mod:`corvid.render.wgsl`) emits on demand.

WGSL leaves much of what numpy defines open, and a WebGPU driver may fold float code as if no nan
or inf existed (Mesa's lavapipe folds ``x != x`` to false). These helpers pin the results down:

* float classification works on the bits (``cv_isnan``), so no compiler can fold it away;
* ``fmod`` is exact (integer long division of the mantissas: WGSL's float ``%`` is
  ``a - b * trunc(a / b)``, which rounds), and floor division/modulo follow numpy;
* ``log`` and the functions built on it (``log2``, ``log1p``, ``expm1``, ``tanh``, the inverse
  hyperbolics) and ``atan`` with ``atan2``/``asin``/``acos`` are computed here from series with
  a few ulp of error: WGSL only bounds ``log`` by an absolute 2^-21 near 1, and lavapipe's
  ``log``, ``tanh`` and ``atan`` are off by thousands of ulp there;
* float16 and bfloat16 are converted to and from float32 on the bits (round to nearest even,
  overflow to inf, nan kept): WGSL's ``pack2x16float`` leaves rounding and overflow undefined;
  so are float8_e4m3fn and float8_e5m2, with ml_dtypes' rules (the C renderer's helpers);
* 64-bit integers are ``vec2<u32>`` (low word, high word): WGSL has no 64-bit types, so
  ``int64``/``uint64`` arithmetic, comparisons, division, shifts and conversions are done on
  word pairs, wrapping as numpy does; a float64 read as two words converts to float32 exactly;
* integer division, modulo, shifts and powers follow the C renderer's (numpy's) rules where
  WGSL differs (WGSL's ``x / 0`` is ``x``, its shifts take the amount modulo 32).

Mesa also rewrites float expressions algebraically (``(1 + x) - 1`` becomes ``x``, which breaks
``log1p``'s correction; two multiplications by ``k`` merge). Where that matters a helper goes
through ``cv_one``, a module-scope ``var<private>`` the renderer sets to an opaque 1.0 (read from
the dispatch size) in every shader.

``HELPERS`` maps each name to ``(source, names it calls)``; :func:`with_deps` closes a set of
names over those calls. WGSL needs no declaration order, so the sources can be emitted in any.
"""

from __future__ import annotations

_F = {
    "cv_isnan": ("fn cv_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }", ()),
    "cv_isinf": ("fn cv_isinf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }", ()),
    "cv_copysign": ("""fn cv_copysign(m: f32, s: f32) -> f32 {
  return bitcast<f32>((bitcast<u32>(m) & 0x7fffffffu) | (bitcast<u32>(s) & 0x80000000u));
}""", ()),
    "cv_max_f32": ("""fn cv_max_f32(a: f32, b: f32) -> f32 {
  if (cv_isnan(a) || cv_isnan(b)) { return select(b, a, cv_isnan(a)); }
  return select(b, a, a >= b);
}""", ("cv_isnan",)),
    "cv_min_f32": ("""fn cv_min_f32(a: f32, b: f32) -> f32 {
  if (cv_isnan(a) || cv_isnan(b)) { return select(b, a, cv_isnan(a)); }
  return select(b, a, a <= b);
}""", ("cv_isnan",)),
    "cv_sqrt": ("""fn cv_sqrt(x: f32) -> f32 {
  if (x < 0.0) { return bitcast<f32>(0x7fc00000u); }
  return sqrt(x);
}""", ()),
    # exact fmod: |a| and |b| as integer mantissas with exponents, |a| reduced modulo |b| bit by bit
    "cv_fmod": ("""fn cv_fmod(a: f32, b: f32) -> f32 {
  let ua = bitcast<u32>(a) & 0x7fffffffu;
  let ub = bitcast<u32>(b) & 0x7fffffffu;
  let sign = bitcast<u32>(a) & 0x80000000u;
  if (ub == 0u || ua >= 0x7f800000u || ub > 0x7f800000u) { return bitcast<f32>(0x7fc00000u); }
  if (ua < ub) { return a; }
  var ea = i32(ua >> 23u);
  var ma = (ua & 0x7fffffu) | 0x800000u;
  if (ea == 0) { let z = countLeadingZeros(ua) - 8u; ma = ua << z; ea = 1 - i32(z); }
  var eb = i32(ub >> 23u);
  var mb = (ub & 0x7fffffu) | 0x800000u;
  if (eb == 0) { let z = countLeadingZeros(ub) - 8u; mb = ub << z; eb = 1 - i32(z); }
  for (; ea > eb; ea--) {
    if (ma >= mb) { ma -= mb; }
    ma = ma << 1u;
  }
  if (ma >= mb) { ma -= mb; }
  if (ma == 0u) { return bitcast<f32>(sign); }
  let z = countLeadingZeros(ma) - 8u;
  ma = ma << z;
  ea -= i32(z);
  if (ea > 0) { return bitcast<f32>(sign | (u32(ea) << 23u) | (ma & 0x7fffffu)); }
  return bitcast<f32>(sign | (ma >> u32(1 - ea)));
}""", ()),
    # numpy's remainder and floor_divide for floats (the sign of a remainder follows the divisor),
    # floor_divide with the Array API standard's special cases: a zero divisor or an infinite
    # operand gives the IEEE quotient (inf // 2 = inf, -3 // inf = -0; numpy: nan and -1)
    "cv_fmod_floor": ("""fn cv_fmod_floor(a: f32, b: f32) -> f32 {
  var m = cv_fmod(a, b);
  if (cv_isnan(m)) { return m; }
  if (m != 0.0) {
    if ((b < 0.0) != (m < 0.0)) { m += b; }
  } else {
    m = cv_copysign(0.0, b);
  }
  return m;
}""", ("cv_fmod", "cv_copysign", "cv_isnan")),
    "cv_fdiv_floor": ("""fn cv_fdiv_floor(a: f32, b: f32) -> f32 {
  if (b == 0.0 || cv_isinf(a) || cv_isinf(b)) { return a / b; }
  let m = cv_fmod(a, b);
  var d = (a - m) / b;
  if (m != 0.0 && ((b < 0.0) != (m < 0.0))) { d -= 1.0; }
  if (d == 0.0) { return cv_copysign(0.0, a / b); }
  let f = floor(d);
  return select(f, f + 1.0, d - f > 0.5);
}""", ("cv_fmod", "cv_copysign", "cv_isinf")),
    # log: x = 2^e * m with m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(s), s = (m - 1) / (m + 1),
    # |s| < 0.172, by its series to s^11 (the next term is below float32's rounding). Returns
    # (e, log(m)) so log2 of a power of two is exact.
    "cv_log_parts": ("""fn cv_log_parts(x: f32) -> vec2<f32> {
  var u = bitcast<u32>(x);
  var e = i32(u >> 23u) - 127;
  if ((u >> 23u) == 0u) { let z = countLeadingZeros(u) - 8u; u = u << z; e = -126 - i32(z); }
  var m = bitcast<f32>((u & 0x7fffffu) | 0x3f800000u);
  if (m > 1.41421356) { m = m * 0.5; e += 1; }
  let f = m - 1.0;
  let s = f / (2.0 + f);
  let z = s * s;
  let p = z * (0.33333333333 + z * (0.2 + z * (0.14285714286 + z * (0.11111111111 + z * 0.09090909091))));
  return vec2<f32>(f32(e), 2.0 * s + 2.0 * s * p);
}""", ()),
    "cv_log_special": ("""fn cv_log_special(x: f32) -> f32 {
  if (cv_isnan(x) || x < 0.0) { return bitcast<f32>(0x7fc00000u); }
  if (x == 0.0) { return bitcast<f32>(0xff800000u); }
  return x;
}""", ("cv_isnan",)),
    "cv_log": ("""fn cv_log(x: f32) -> f32 {
  if (!(x > 0.0) || cv_isinf(x) || cv_isnan(x)) { return cv_log_special(x); }
  let p = cv_log_parts(x);
  return p.x * 0.693145751953125 + (p.x * 1.4286068203e-06 + p.y);
}""", ("cv_log_parts", "cv_log_special", "cv_isinf", "cv_isnan")),
    "cv_log2": ("""fn cv_log2(x: f32) -> f32 {
  if (!(x > 0.0) || cv_isinf(x) || cv_isnan(x)) { return cv_log_special(x); }
  let p = cv_log_parts(x);
  return p.x + p.y * 1.44269504089;
}""", ("cv_log_parts", "cv_log_special", "cv_isinf", "cv_isnan")),
    # log1p and expm1 by Kahan's corrections: accurate near 0 where log(1 + x) and exp(x) - 1 cancel
    "cv_log1p": ("""fn cv_log1p(x: f32) -> f32 {
  if (cv_isnan(x) || cv_isinf(x)) { return cv_log(1.0 + x); }
  let u = (1.0 + x) * cv_one;
  if (u == 1.0) { return x; }
  return cv_log(u) * (x / (u - 1.0));
}""", ("cv_log", "cv_isnan", "cv_isinf")),
    "cv_expm1": ("""fn cv_expm1(x: f32) -> f32 {
  if (cv_isnan(x)) { return x; }
  if (x < -17.4) { return -1.0; }
  let u = cv_exp(x);
  if (u == 1.0) { return x; }
  if (cv_isinf(u)) { return u; }
  let um1 = u - 1.0;
  if (um1 == -1.0) { return -1.0; }
  return um1 * (x / cv_log(u));
}""", ("cv_isnan", "cv_isinf", "cv_exp", "cv_log")),
    # exp: x = k ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so k ln2 is exact), exp(r) by its
    # series to r^7, scaled by 2^k on the exponent bits (WGSL's exp may lose |x| ulps)
    "cv_exp": ("""fn cv_exp(x: f32) -> f32 {
  if (cv_isnan(x)) { return x; }
  if (x > 89.0) { return bitcast<f32>(0x7f800000u); }
  if (x < -104.0) { return 0.0; }
  let k = round(x * 1.44269504089);
  let r = (x - k * 0.693145751953125) - (k * cv_one) * 1.4286068203e-06;
  let p = 1.0 + r * (1.0 + r * (0.5 + r * (0.16666666667 + r * (0.04166666667 + r * (0.00833333333
          + r * (0.00138888889 + r * 0.00019841270))))));
  let n = i32(k);
  if (n > 127) { return p * 1.7014118346046923e+38 * bitcast<f32>(u32(n) << 23u); }
  if (n < -126) { return p * bitcast<f32>(u32(n + 227) << 23u) * 7.888609052210118e-31; }
  return p * bitcast<f32>(u32(n + 127) << 23u);
}""", ("cv_isnan",)),
    # sin, cos, tan: x = k pi/2 + r, |r| <= pi/4, with pi/2 in parts of 8 bits (each k * part is
    # exact for |k| < 2^16, |x| < 102900; past that WGSL's own, which lose ulp(x) absolutely),
    # then the series of sin and cos to r^9 and r^10
    "cv_trig_reduce": ("""fn cv_trig_reduce(x: f32) -> vec2<f32> {
  let k = round(x * 0.63661977236);
  let k1 = k * cv_one;
  let r = ((((x - k * 1.5703125) - k1 * 0.000484466552734375) + k * 6.407499313354492e-07)
           - k1 * 9.89530235528946e-10) - k * 2.5633440682570896e-12;
  return vec2<f32>(r, k);
}""", ()),
    "cv_sin_poly": ("""fn cv_sin_poly(r: f32) -> f32 {
  let z = r * r;
  return r + r * z * (-0.16666666667 + z * (0.00833333333 + z * (-0.00019841270 + z * 2.7557319224e-06)));
}""", ()),
    "cv_cos_poly": ("""fn cv_cos_poly(r: f32) -> f32 {
  let z = r * r;
  return 1.0 + z * (-0.5 + z * (0.04166666667 + z * (-0.00138888889 + z * (2.4801587302e-05 - z * 2.7557319224e-07))));
}""", ()),
    "cv_sin": ("""fn cv_sin(x: f32) -> f32 {
  if (cv_isnan(x) || cv_isinf(x)) { return bitcast<f32>(0x7fc00000u); }
  if (abs(x) < 0.000244140625) { return x; }
  if (abs(x) > 102900.0) { return sin(x); }
  let t = cv_trig_reduce(x);
  let q = i32(t.y) & 3;
  let s = cv_sin_poly(t.x);
  let c = cv_cos_poly(t.x);
  return select(select(-s, -c, q == 3), select(s, c, q == 1), q < 2);
}""", ("cv_isnan", "cv_isinf", "cv_trig_reduce", "cv_sin_poly", "cv_cos_poly")),
    "cv_cos": ("""fn cv_cos(x: f32) -> f32 {
  if (cv_isnan(x) || cv_isinf(x)) { return bitcast<f32>(0x7fc00000u); }
  if (abs(x) > 102900.0) { return cos(x); }
  let t = cv_trig_reduce(x);
  let q = i32(t.y) & 3;
  let s = cv_sin_poly(t.x);
  let c = cv_cos_poly(t.x);
  return select(select(-c, s, q == 3), select(c, -s, q == 1), q < 2);
}""", ("cv_isnan", "cv_isinf", "cv_trig_reduce", "cv_sin_poly", "cv_cos_poly")),
    "cv_tan": ("""fn cv_tan(x: f32) -> f32 {
  if (cv_isnan(x) || cv_isinf(x)) { return bitcast<f32>(0x7fc00000u); }
  if (abs(x) < 0.000244140625) { return x; }
  if (abs(x) > 102900.0) { return tan(x); }
  let t = cv_trig_reduce(x);
  let s = cv_sin_poly(t.x);
  let c = cv_cos_poly(t.x);
  return select(-c / s, s / c, (i32(t.y) & 1) == 0);
}""", ("cv_isnan", "cv_isinf", "cv_trig_reduce", "cv_sin_poly", "cv_cos_poly")),
    "cv_tanh": ("""fn cv_tanh(x: f32) -> f32 {
  if (cv_isnan(x)) { return x; }
  let a = abs(x);
  if (a < 0.0002) { return x; }
  if (a > 9.1) { return cv_copysign(1.0, x); }
  let t = cv_expm1(2.0 * a);
  return cv_copysign(t / (t + 2.0), x);
}""", ("cv_isnan", "cv_copysign", "cv_expm1")),
    "cv_sinh": ("""fn cv_sinh(x: f32) -> f32 {
  if (cv_isnan(x)) { return x; }
  let a = abs(x);
  var r: f32;
  if (a > 88.0) {
    let h = cv_exp(0.5 * a);
    r = (0.5 * h) * h;
  } else if (a < 1.0) {
    let t = cv_expm1(a);
    r = 0.5 * (t + t / (t + 1.0));
  } else {
    let e = cv_exp(a);
    r = 0.5 * (e - 1.0 / e);
  }
  return cv_copysign(r, x);
}""", ("cv_isnan", "cv_copysign", "cv_expm1", "cv_exp")),
    "cv_cosh": ("""fn cv_cosh(x: f32) -> f32 {
  let a = abs(x);
  if (a > 88.0) { let h = cv_exp(0.5 * a); return (0.5 * h) * h; }
  let e = cv_exp(a);
  return 0.5 * (e + 1.0 / e);
}""", ("cv_exp",)),
    "cv_asinh": ("""fn cv_asinh(x: f32) -> f32 {
  if (cv_isnan(x) || cv_isinf(x)) { return x; }
  let a = abs(x);
  var r: f32;
  if (a < 0.0002) {
    r = a;
  } else if (a > 4096.0) {
    r = cv_log(a) + 0.69314718056;
  } else if (a > 2.0) {
    r = cv_log(2.0 * a + 1.0 / (sqrt(a * a + 1.0) + a));
  } else {
    r = cv_log1p(a + a * a / (1.0 + sqrt(1.0 + a * a)));
  }
  return cv_copysign(r, x);
}""", ("cv_isnan", "cv_isinf", "cv_log", "cv_log1p", "cv_copysign")),
    "cv_acosh": ("""fn cv_acosh(x: f32) -> f32 {
  if (cv_isnan(x) || x < 1.0) { return bitcast<f32>(0x7fc00000u); }
  if (cv_isinf(x)) { return x; }
  if (x > 4096.0) { return cv_log(x) + 0.69314718056; }
  if (x > 2.0) { return cv_log(2.0 * x - 1.0 / (x + sqrt(x * x - 1.0))); }
  let t = x - 1.0;
  return cv_log1p(t + sqrt(2.0 * t + t * t));
}""", ("cv_isnan", "cv_isinf", "cv_log", "cv_log1p")),
    "cv_atanh": ("""fn cv_atanh(x: f32) -> f32 {
  let a = abs(x);
  if (cv_isnan(x) || a > 1.0) { return bitcast<f32>(0x7fc00000u); }
  if (a == 1.0) { return cv_copysign(bitcast<f32>(0x7f800000u), x); }
  if (a < 0.0002) { return x; }
  var r: f32;
  if (a < 0.5) { r = 0.5 * cv_log1p(2.0 * a + 2.0 * a * a / (1.0 - a)); } else { r = 0.5 * cv_log1p(2.0 * a / (1.0 - a)); }
  return cv_copysign(r, x);
}""", ("cv_isnan", "cv_log1p", "cv_copysign")),
    # atan: |x| > 1 by pi/2 - atan(1/|x|), then |t| > tan(pi/8) by pi/4 + atan((t - 1) / (t + 1)),
    # leaving |t| <= 0.4143, where the series to t^23 is below float32's rounding
    "cv_atan": ("""fn cv_atan(x: f32) -> f32 {
  if (cv_isnan(x)) { return x; }
  var t = abs(x);
  var base = 0.0;
  var flip = false;
  if (t > 1.0) { t = 1.0 / t; flip = true; }
  if (t > 0.41421356) { t = (t - 1.0) / (t + 1.0); base = 0.78539816340; }
  let z = t * t;
  var p = 1.0 / 23.0;
  for (var k = 21; k >= 3; k -= 2) { p = select(-1.0, 1.0, (k & 3) == 3) / f32(k) + z * p; }
  var r = base + (t - t * z * p);
  if (flip) { r = 1.57079632679 - r; }
  return cv_copysign(r, x);
}""", ("cv_isnan", "cv_copysign")),
    "cv_atan2": ("""fn cv_atan2(y: f32, x: f32) -> f32 {
  if (cv_isnan(x) || cv_isnan(y)) { return bitcast<f32>(0x7fc00000u); }
  let ax = abs(x);
  let ay = abs(y);
  let x_neg = (bitcast<u32>(x) & 0x80000000u) != 0u;
  var r: f32;
  if (ay == 0.0) {
    r = select(0.0, 3.14159265359, x_neg);
  } else if (ax == 0.0) {
    r = 1.57079632679;
  } else if (cv_isinf(ax) && cv_isinf(ay)) {
    r = select(0.78539816340, 2.35619449019, x_neg);
  } else if (cv_isinf(ax)) {
    r = select(0.0, 3.14159265359, x_neg);
  } else if (cv_isinf(ay)) {
    r = 1.57079632679;
  } else {
    r = cv_atan(ay / ax);
    if (x_neg) { r = 3.14159265359 - r; }
  }
  return cv_copysign(r, y);
}""", ("cv_isnan", "cv_isinf", "cv_atan", "cv_copysign")),
    "cv_asin": ("""fn cv_asin(x: f32) -> f32 {
  if (cv_isnan(x) || abs(x) > 1.0) { return bitcast<f32>(0x7fc00000u); }
  return cv_atan2(x, sqrt((1.0 - x) * (1.0 + x)));
}""", ("cv_isnan", "cv_atan2")),
    "cv_acos": ("""fn cv_acos(x: f32) -> f32 {
  if (cv_isnan(x) || abs(x) > 1.0) { return bitcast<f32>(0x7fc00000u); }
  return cv_atan2(sqrt((1.0 - x) * (1.0 + x)), x);
}""", ("cv_isnan", "cv_atan2")),
    # pow as C's: exact small integer powers by squaring, the sign of odd powers of negatives,
    # the IEEE special cases; WGSL's pow is exp2(y * log2(x)) and undefined for x <= 0
    "cv_pow": ("""fn cv_pow(x: f32, y: f32) -> f32 {
  if (y == 0.0 || x == 1.0) { return 1.0; }
  if (cv_isnan(x) || cv_isnan(y)) { return bitcast<f32>(0x7fc00000u); }
  let ay = abs(y);
  let y_int = floor(y) == y;
  let y_odd = y_int && ay < 16777216.0 && (u32(ay) & 1u) == 1u;
  let inf = bitcast<f32>(0x7f800000u);
  if (cv_isinf(y)) {
    if (abs(x) == 1.0) { return 1.0; }
    return select(0.0, inf, (abs(x) > 1.0) == (y > 0.0));
  }
  if (x == 0.0 || cv_isinf(x)) {
    let big = (x == 0.0) == (y < 0.0);
    let r = select(0.0, inf, big);
    return select(r, cv_copysign(r, x), y_odd);
  }
  if (x < 0.0 && !y_int) { return bitcast<f32>(0x7fc00000u); }
  var r: f32;
  if (y_int && ay <= 64.0) {
    var n = u32(ay);
    var b = abs(x);
    r = 1.0;
    while (n != 0u) { if ((n & 1u) != 0u) { r *= b; } b *= b; n = n >> 1u; }
    if (y < 0.0) { r = 1.0 / r; }
  } else {
    let l = cv_log_parts(abs(x));
    r = exp2(y * (l.x + l.y * 1.44269504089));
  }
  return select(r, -r, x < 0.0 && y_odd);
}""", ("cv_isnan", "cv_isinf", "cv_copysign", "cv_log_parts")),
}

# 16-bit floats held in the low bits of a u32 (storage is packed words, arithmetic in f32)
_HALF = {
    "cv_f16_f32": ("""fn cv_f16_f32(h: u32) -> f32 {
  let s = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * 5.9604644775390625e-08)); }
  if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}""", ()),
    "cv_f32_f16": ("""fn cv_f32_f16(f: f32) -> u32 {
  let x = bitcast<u32>(f);
  let s = (x >> 16u) & 0x8000u;
  let a = x & 0x7fffffffu;
  if (a > 0x7f800000u) { return s | 0x7e00u | ((a >> 13u) & 0x3ffu); }
  if (a >= 0x477ff000u) { return s | 0x7c00u; }
  if (a < 0x38800000u) {
    let e = a >> 23u;
    if (e < 102u) { return s; }
    let m = (a & 0x7fffffu) | 0x800000u;
    let shift = 126u - e;
    let q = m >> shift;
    let r = m & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    return s | (q + select(0u, 1u, r > half || (r == half && (q & 1u) == 1u)));
  }
  let b = a - 0x38000000u;
  return s | ((b + 0xfffu + ((b >> 13u) & 1u)) >> 13u);
}""", ()),
    "cv_f32_bf16": ("""fn cv_f32_bf16(f: f32) -> u32 {
  let u = bitcast<u32>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; }
  return ((u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u) & 0xffffu;
}""", ()),
    # the 8-bit floats: the same arithmetic on the bits as corvid.render.c's float8 helpers
    "cv_e4m3_f32": ("""fn cv_e4m3_f32(x: u32) -> f32 {
  let s = (x & 0x80u) << 24u;
  let e = (x >> 3u) & 0xfu;
  let m = x & 7u;
  if ((x & 0x7fu) == 0x7fu) { return bitcast<f32>(s | 0x7fc00000u); }
  if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * 0.001953125)); }
  return bitcast<f32>(s | ((e + 120u) << 23u) | (m << 20u));
}""", ()),
    "cv_f32_e4m3": ("""fn cv_f32_e4m3(f: f32) -> u32 {
  let u = bitcast<u32>(f);
  let a = u & 0x7fffffffu;
  let s = (u >> 24u) & 0x80u;
  if (a >= 0x7f800000u) { return s | 0x7fu; }
  if (a >= 0x3c800000u) {
    let r = (a - 0x3c000000u + 0x7ffffu + ((a >> 20u) & 1u)) >> 20u;
    return s | select(r, 0x7fu, r > 0x7eu);
  }
  return s | cv_f8_subnormal(a, 141u);
}""", ("cv_f8_subnormal",)),
    "cv_e5m2_f32": ("""fn cv_e5m2_f32(x: u32) -> f32 {
  let s = (x & 0x80u) << 24u;
  let e = (x >> 2u) & 0x1fu;
  let m = x & 3u;
  if (e == 31u) { return bitcast<f32>(s | select(0x7f800000u, 0x7fc00000u, m != 0u)); }
  if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * 1.52587890625e-05)); }
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 21u));
}""", ()),
    "cv_f32_e5m2": ("""fn cv_f32_e5m2(f: f32) -> u32 {
  let u = bitcast<u32>(f);
  let a = u & 0x7fffffffu;
  let s = (u >> 24u) & 0x80u;
  if (a > 0x7f800000u) { return s | 0x7eu; }
  if (a >= 0x38800000u) {
    let r = (a - 0x38000000u + 0xfffffu + ((a >> 21u) & 1u)) >> 21u;
    return s | select(r, 0x7cu, r > 0x7bu);
  }
  return s | cv_f8_subnormal(a, 134u);
}""", ("cv_f8_subnormal",)),
    "cv_round_e4m3": ("fn cv_round_e4m3(f: f32) -> f32 { return cv_e4m3_f32(cv_f32_e4m3(f)); }",
                      ("cv_e4m3_f32", "cv_f32_e4m3")),
    "cv_round_e5m2": ("fn cv_round_e5m2(f: f32) -> f32 { return cv_e5m2_f32(cv_f32_e5m2(f)); }",
                      ("cv_e5m2_f32", "cv_f32_e5m2")),
    # |f| (bits a, below the format's smallest normal) in quanta of the format's smallest
    # subnormal, 2^(top - 150), rounded to nearest even
    "cv_f8_subnormal": ("""fn cv_f8_subnormal(a: u32, top: u32) -> u32 {
  let shift = top - (a >> 23u);
  if (shift > 24u) { return 0u; }
  let m = (a & 0x7fffffu) | 0x800000u;
  let q = m >> shift;
  let rem = m & ((1u << shift) - 1u);
  let tie = 1u << (shift - 1u);
  return q + select(0u, 1u, rem > tie || (rem == tie && (q & 1u) == 1u));
}""", ()),
    # a float64 (two words) rounded to float32, nearest even, as numpy's astype
    "cv_f64_f32": ("""fn cv_f64_f32(d: vec2<u32>) -> f32 {
  let s = d.y & 0x80000000u;
  let e = i32((d.y >> 20u) & 0x7ffu);
  let m = ((d.y & 0xfffffu) << 3u) | (d.x >> 29u);
  let rest = d.x & 0x1fffffffu;
  if (e == 0x7ff) { return bitcast<f32>(s | 0x7f800000u | select(0u, 0x400000u | m, m != 0u || rest != 0u)); }
  let te = e - 1023 + 127;
  if (te >= 255) { return bitcast<f32>(s | 0x7f800000u); }
  if (te >= 1) {
    let up = rest > 0x10000000u || (rest == 0x10000000u && (m & 1u) == 1u);
    return bitcast<f32>(s | (((u32(te) << 23u) | m) + select(0u, 1u, up)));
  }
  let shift = u32(1 - te);
  if (shift >= 25u || e == 0) { return bitcast<f32>(s); }
  let sig = m | 0x800000u;
  let q = sig >> shift;
  let r = sig & ((1u << shift) - 1u);
  let half = 1u << (shift - 1u);
  let up = r > half || (r == half && (rest != 0u || (q & 1u) == 1u));
  return bitcast<f32>(s | (q + select(0u, 1u, up)));
}""", ()),
}

# 32-bit (and narrower, computed in 32 bits) integers: numpy's rules where WGSL differs
_INT = {
    # (the remainder as a - q*b, not WGSL's %: naga writes % on an OpenGL adapter as GLSL's %,
    # which is undefined for negative operands: llvmpipe gave -10 % 3 = 0)
    "cv_idiv_i32": ("""fn cv_idiv_i32(a: i32, b: i32) -> i32 {
  if (b == 0) { return 0; }
  if (b == -1) { return 0 - a; }
  var q = a / b;
  if ((a - q * b != 0) && ((a < 0) != (b < 0))) { q -= 1; }
  return q;
}""", ()),
    "cv_imod_i32": ("""fn cv_imod_i32(a: i32, b: i32) -> i32 {
  if (b == 0 || b == -1) { return 0; }
  var r = a - (a / b) * b;
  if (r != 0 && ((r < 0) != (b < 0))) { r += b; }
  return r;
}""", ()),
    "cv_idiv_u32": ("fn cv_idiv_u32(a: u32, b: u32) -> u32 { return select(a / max(b, 1u), 0u, b == 0u); }", ()),
    "cv_imod_u32": ("fn cv_imod_u32(a: u32, b: u32) -> u32 { return select(a % max(b, 1u), 0u, b == 0u); }", ()),
    "cv_shl_i32": ("fn cv_shl_i32(a: i32, b: i32) -> i32 { return select(a << u32(b), 0, b < 0 || b >= 32); }", ()),
    "cv_shr_i32": ("""fn cv_shr_i32(a: i32, b: i32) -> i32 {
  return select(a >> u32(b), select(0, -1, a < 0), b < 0 || b >= 32);
}""", ()),
    "cv_shl_u32": ("fn cv_shl_u32(a: u32, b: u32) -> u32 { return select(a << b, 0u, b >= 32u); }", ()),
    "cv_shr_u32": ("fn cv_shr_u32(a: u32, b: u32) -> u32 { return select(a >> b, 0u, b >= 32u); }", ()),
    "cv_ipow_i32": ("""fn cv_ipow_i32(a: i32, b: i32) -> i32 {
  if (b < 0) { return select(select(0, select(1, -1, (b & 1) != 0), a == -1), 1, a == 1); }
  var r = 1;
  var x = a;
  var e = b;
  while (e != 0) { if ((e & 1) != 0) { r *= x; } x *= x; e = e >> 1u; }
  return r;
}""", ()),
    "cv_ipow_u32": ("""fn cv_ipow_u32(a: u32, b: u32) -> u32 {
  var r = 1u;
  var x = a;
  var e = b;
  while (e != 0u) { if ((e & 1u) != 0u) { r *= x; } x *= x; e = e >> 1u; }
  return r;
}""", ()),
    # float to integer as x86 converts (what numpy gives there): truncation; nan and values out
    # of range give the most negative integer
    "cv_f32_i32": ("""fn cv_f32_i32(x: f32) -> i32 {
  if ((bitcast<u32>(x) & 0x7fffffffu) >= 0x4f000000u) { return i32(-2147483648); }
  return i32(x);
}""", ()),
}

# 64-bit integers as vec2<u32>(low word, high word)
_I64 = {
    "cv_add64": ("""fn cv_add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}""", ()),
    "cv_sub64": ("""fn cv_sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}""", ()),
    "cv_neg64": ("fn cv_neg64(a: vec2<u32>) -> vec2<u32> { return cv_sub64(vec2<u32>(0u, 0u), a); }", ("cv_sub64",)),
    "cv_mulhi32": ("""fn cv_mulhi32(a: u32, b: u32) -> u32 {
  let al = a & 0xffffu;
  let ah = a >> 16u;
  let bl = b & 0xffffu;
  let bh = b >> 16u;
  let lh = al * bh;
  let hl = ah * bl;
  let mid = ((al * bl) >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
  return ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
}""", ()),
    "cv_mul64": ("""fn cv_mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  return vec2<u32>(a.x * b.x, cv_mulhi32(a.x, b.x) + a.x * b.y + a.y * b.x);
}""", ("cv_mulhi32",)),
    "cv_lt_i64": ("""fn cv_lt_i64(a: vec2<u32>, b: vec2<u32>) -> bool {
  return bitcast<i32>(a.y) < bitcast<i32>(b.y) || (a.y == b.y && a.x < b.x);
}""", ()),
    "cv_lt_u64": ("fn cv_lt_u64(a: vec2<u32>, b: vec2<u32>) -> bool { return a.y < b.y || (a.y == b.y && a.x < b.x); }", ()),
    "cv_neg_i64": ("fn cv_neg_i64(a: vec2<u32>) -> bool { return (a.y & 0x80000000u) != 0u; }", ()),
    "cv_abs_i64": ("fn cv_abs_i64(a: vec2<u32>) -> vec2<u32> { return select(a, cv_neg64(a), cv_neg_i64(a)); }",
                   ("cv_neg64", "cv_neg_i64")),
    "cv_sext": ("fn cv_sext(x: i32) -> vec2<u32> { return vec2<u32>(bitcast<u32>(x), select(0u, 0xffffffffu, x < 0)); }", ()),
    "cv_shl64": ("""fn cv_shl64(a: vec2<u32>, n: u32) -> vec2<u32> {
  if (n >= 64u) { return vec2<u32>(0u, 0u); }
  if (n >= 32u) { return vec2<u32>(0u, a.x << (n - 32u)); }
  if (n == 0u) { return a; }
  return vec2<u32>(a.x << n, (a.y << n) | (a.x >> (32u - n)));
}""", ()),
    "cv_lshr64": ("""fn cv_lshr64(a: vec2<u32>, n: u32) -> vec2<u32> {
  if (n >= 64u) { return vec2<u32>(0u, 0u); }
  if (n >= 32u) { return vec2<u32>(a.y >> (n - 32u), 0u); }
  if (n == 0u) { return a; }
  return vec2<u32>((a.x >> n) | (a.y << (32u - n)), a.y >> n);
}""", ()),
    "cv_ashr64": ("""fn cv_ashr64(a: vec2<u32>, n: u32) -> vec2<u32> {
  let hi = bitcast<i32>(a.y);
  let fill = select(0u, 0xffffffffu, hi < 0);
  if (n >= 64u) { return vec2<u32>(fill, fill); }
  if (n >= 32u) { return vec2<u32>(bitcast<u32>(hi >> (n - 32u)), fill); }
  if (n == 0u) { return a; }
  return vec2<u32>((a.x >> n) | (a.y << (32u - n)), bitcast<u32>(hi >> n));
}""", ()),
    # a shift amount: the count, or 64 for any count at or past 64 (negative counts included)
    "cv_shift_count": ("fn cv_shift_count(b: vec2<u32>) -> u32 { return select(b.x, 64u, b.y != 0u || b.x >= 64u); }", ()),
    "cv_divmod_u64": ("""struct CvQR { q: vec2<u32>, r: vec2<u32> }
fn cv_divmod_u64(a: vec2<u32>, b: vec2<u32>) -> CvQR {
  var q = vec2<u32>(0u, 0u);
  var r = vec2<u32>(0u, 0u);
  for (var i = 63u; i < 64u; i--) {
    r = cv_shl64(r, 1u);
    r.x |= select(a.x >> i, a.y >> (i - 32u), i >= 32u) & 1u;
    if (!cv_lt_u64(r, b)) {
      r = cv_sub64(r, b);
      if (i >= 32u) { q.y |= 1u << (i - 32u); } else { q.x |= 1u << i; }
    }
  }
  return CvQR(q, r);
}""", ("cv_shl64", "cv_lt_u64", "cv_sub64")),
    # numpy's floor division and modulo for int64 (0 for a zero divisor, as the C backend)
    "cv_idiv_i64": ("""fn cv_idiv_i64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  if (all(b == vec2<u32>(0u, 0u))) { return b; }
  let na = cv_neg_i64(a);
  let nb = cv_neg_i64(b);
  let qr = cv_divmod_u64(cv_abs_i64(a), cv_abs_i64(b));
  if (na == nb) { return qr.q; }
  var q = cv_neg64(qr.q);
  if (any(qr.r != vec2<u32>(0u, 0u))) { q = cv_sub64(q, vec2<u32>(1u, 0u)); }
  return q;
}""", ("cv_neg_i64", "cv_divmod_u64", "cv_abs_i64", "cv_neg64", "cv_sub64")),
    "cv_imod_i64": ("""fn cv_imod_i64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  if (all(b == vec2<u32>(0u, 0u))) { return b; }
  let qr = cv_divmod_u64(cv_abs_i64(a), cv_abs_i64(b));
  var r = select(qr.r, cv_neg64(qr.r), cv_neg_i64(a));
  if (any(r != vec2<u32>(0u, 0u)) && cv_neg_i64(r) != cv_neg_i64(b)) { r = cv_add64(r, b); }
  return r;
}""", ("cv_divmod_u64", "cv_abs_i64", "cv_neg64", "cv_neg_i64", "cv_add64")),
    "cv_idiv_u64": ("""fn cv_idiv_u64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  if (all(b == vec2<u32>(0u, 0u))) { return b; }
  return cv_divmod_u64(a, b).q;
}""", ("cv_divmod_u64",)),
    "cv_imod_u64": ("""fn cv_imod_u64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  if (all(b == vec2<u32>(0u, 0u))) { return b; }
  return cv_divmod_u64(a, b).r;
}""", ("cv_divmod_u64",)),
    "cv_ipow_64": ("""fn cv_ipow_64(a: vec2<u32>, b: vec2<u32>, signed_exp: bool) -> vec2<u32> {
  if (signed_exp && cv_neg_i64(b)) {
    let one = vec2<u32>(1u, 0u);
    if (all(a == one)) { return one; }
    if (all(a == vec2<u32>(0xffffffffu, 0xffffffffu))) { return select(one, a, (b.x & 1u) != 0u); }
    return vec2<u32>(0u, 0u);
  }
  var r = vec2<u32>(1u, 0u);
  var x = a;
  var e = b;
  while (any(e != vec2<u32>(0u, 0u))) {
    if ((e.x & 1u) != 0u) { r = cv_mul64(r, x); }
    x = cv_mul64(x, x);
    e = cv_lshr64(e, 1u);
  }
  return r;
}""", ("cv_neg_i64", "cv_mul64", "cv_lshr64")),
    # conversions: float32 -> int64 truncates (nan and out of range: the most negative int64, as
    # x86); float32 -> uint64 as gcc on x86 (values from 2^63 through the high bit); int64 and
    # uint64 -> float32 rounded to nearest even
    "cv_f32_i64": ("""fn cv_f32_i64(x: f32) -> vec2<u32> {
  let a = bitcast<u32>(x) & 0x7fffffffu;
  if (a >= 0x5f000000u) { return vec2<u32>(0u, 0x80000000u); }
  if (a < 0x4f000000u) { return cv_sext(i32(x)); }
  let mag = cv_shl64(vec2<u32>((a & 0x7fffffu) | 0x800000u, 0u), (a >> 23u) - 150u);
  return select(mag, cv_neg64(mag), x < 0.0);
}""", ("cv_sext", "cv_shl64", "cv_neg64")),
    "cv_f32_u64": ("""fn cv_f32_u64(x: f32) -> vec2<u32> {
  if (x >= 9223372036854775808.0 && !cv_isinf(x)) {
    return cv_f32_i64(x - 9223372036854775808.0) ^ vec2<u32>(0u, 0x80000000u);
  }
  if (x >= 9223372036854775808.0) { return vec2<u32>(0u, 0u); }
  return cv_f32_i64(x);
}""", ("cv_f32_i64", "cv_isinf")),
    "cv_u64_f32": ("""fn cv_u64_f32(a: vec2<u32>) -> f32 {
  if (a.y == 0u && a.x < 0x1000000u) { return f32(a.x); }
  let z = select(countLeadingZeros(a.y), 32u + countLeadingZeros(a.x), a.y == 0u);
  let n = cv_shl64(a, z);
  let m = n.y >> 8u;
  let rb = n.y & 0xffu;
  let up = rb > 0x80u || (rb == 0x80u && (n.x != 0u || (m & 1u) == 1u));
  return bitcast<f32>((((190u - z) << 23u) | (m & 0x7fffffu)) + select(0u, 1u, up));
}""", ("cv_shl64",)),
    "cv_i64_f32": ("""fn cv_i64_f32(a: vec2<u32>) -> f32 {
  let f = cv_u64_f32(cv_abs_i64(a));
  return select(f, -f, cv_neg_i64(a));
}""", ("cv_u64_f32", "cv_abs_i64", "cv_neg_i64")),
}

# complex64 as vec2<f32>(real, imaginary): numpy's product (fused, as its SIMD loop) and Smith's
# quotient, as the C renderers (corvid/render/gpu.py: _COMPLEX_LIB); the functions by the same
# formulas, on this module's float32 functions
_NAN = "bitcast<f32>(0x7fc00000u)"
_C64 = {
    "cv_cmul": ("""fn cv_cmul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  return vec2<f32>(fma(a.x, b.x, -(a.y * b.y)), fma(a.x, b.y, a.y * b.x));
}""", ()),
    "cv_cmul_plain": ("""fn cv_cmul_plain(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  return vec2<f32>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}""", ()),
    "cv_cdiv": ("""fn cv_cdiv(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  let abr = abs(b.x);
  let abi = abs(b.y);
  if (abr >= abi) {
    if (abr == 0.0 && abi == 0.0) { return vec2<f32>(a.x / abr, a.y / abr); }
    let rat = b.y / b.x;
    let scl = cv_one / (b.x + b.y * rat);
    return vec2<f32>((a.x + a.y * rat) * scl, (a.y - a.x * rat) * scl);
  }
  let rat = b.x / b.y;
  let scl = cv_one / (b.y + b.x * rat);
  return vec2<f32>((a.x * rat + a.y) * scl, (a.y * rat - a.x) * scl);
}""", ()),
    "cv_hypot": ("""fn cv_hypot(x: f32, y: f32) -> f32 {
  let ax = abs(x);
  let ay = abs(y);
  if (cv_isinf(ax) || cv_isinf(ay)) { return bitcast<f32>(0x7f800000u); }
  if (cv_isnan(ax) || cv_isnan(ay)) { return ax + ay; }
  let m = max(ax, ay);
  if (m == 0.0) { return m; }
  let p = ax / m;
  let q = ay / m;
  return m * cv_sqrt(p * p + q * q);
}""", ("cv_isinf", "cv_isnan", "cv_sqrt")),
    "cv_cabs": ("fn cv_cabs(a: vec2<f32>) -> f32 { return cv_hypot(a.x, a.y); }", ("cv_hypot",)),
    "cv_cexp": ("""fn cv_cexp(a: vec2<f32>) -> vec2<f32> {
  if (a.y == 0.0) { return vec2<f32>(cv_exp(a.x), a.y); }
  let e = cv_exp(a.x);
  return vec2<f32>(e * cv_cos(a.y), e * cv_sin(a.y));
}""", ("cv_exp", "cv_cos", "cv_sin")),
    "cv_clog": ("""fn cv_clog(a: vec2<f32>) -> vec2<f32> {
  return vec2<f32>(cv_log(cv_hypot(a.x, a.y)), cv_atan2(a.y, a.x));
}""", ("cv_log", "cv_hypot", "cv_atan2")),
    "cv_csqrt": (f"""fn cv_csqrt(a: vec2<f32>) -> vec2<f32> {{
  if (a.x == 0.0 && a.y == 0.0) {{ return vec2<f32>(0.0, a.y); }}
  if (cv_isinf(a.y)) {{ return vec2<f32>(abs(a.y), a.y); }}
  if (cv_isnan(a.x)) {{ return vec2<f32>(a.x, {_NAN}); }}
  if (cv_isinf(a.x)) {{
    if (a.x > 0.0) {{ return vec2<f32>(a.x, select(cv_copysign(0.0, a.y), a.y, cv_isnan(a.y))); }}
    return vec2<f32>(select(0.0, a.y, cv_isnan(a.y)), cv_copysign(-a.x, a.y));
  }}
  let h = cv_hypot(a.x, a.y);
  if (a.x >= 0.0) {{
    let t = cv_sqrt((a.x + h) * 0.5);
    return vec2<f32>(t, a.y / (2.0 * t));
  }}
  let t = cv_sqrt((h - a.x) * 0.5);
  return vec2<f32>(abs(a.y) / (2.0 * t), cv_copysign(t, a.y));
}}""", ("cv_isinf", "cv_isnan", "cv_copysign", "cv_hypot", "cv_sqrt")),
    "cv_csin": ("""fn cv_csin(a: vec2<f32>) -> vec2<f32> {
  return vec2<f32>(cv_sin(a.x) * cv_cosh(a.y), cv_cos(a.x) * cv_sinh(a.y));
}""", ("cv_sin", "cv_cos", "cv_sinh", "cv_cosh")),
    "cv_ccos": ("""fn cv_ccos(a: vec2<f32>) -> vec2<f32> {
  return vec2<f32>(cv_cos(a.x) * cv_cosh(a.y), -(cv_sin(a.x) * cv_sinh(a.y)));
}""", ("cv_sin", "cv_cos", "cv_sinh", "cv_cosh")),
    "cv_csinh": ("""fn cv_csinh(a: vec2<f32>) -> vec2<f32> {
  return vec2<f32>(cv_sinh(a.x) * cv_cos(a.y), cv_cosh(a.x) * cv_sin(a.y));
}""", ("cv_sin", "cv_cos", "cv_sinh", "cv_cosh")),
    "cv_ccosh": ("""fn cv_ccosh(a: vec2<f32>) -> vec2<f32> {
  return vec2<f32>(cv_cosh(a.x) * cv_cos(a.y), cv_sinh(a.x) * cv_sin(a.y));
}""", ("cv_sin", "cv_cos", "cv_sinh", "cv_cosh")),
    "cv_ctanh": ("""fn cv_ctanh(a: vec2<f32>) -> vec2<f32> {
  if (cv_isinf(a.x)) { return vec2<f32>(cv_copysign(1.0, a.x), cv_copysign(0.0, a.y)); }
  if (a.y == 0.0) { return vec2<f32>(cv_tanh(a.x), a.y); }
  if (cv_isinf(a.y) || cv_isnan(a.y)) {
    let nan = bitcast<f32>(0x7fc00000u);
    return vec2<f32>(select(nan, a.x, a.x == 0.0), nan);
  }
  if (abs(a.x) > 9.0) {
    let e = cv_exp(-2.0 * abs(a.x));
    return vec2<f32>(cv_copysign(1.0, a.x), 4.0 * cv_sin(a.y) * cv_cos(a.y) * e);
  }
  let t = cv_tan(a.y);
  let beta = 1.0 + t * t;
  let s = cv_sinh(a.x);
  let rho = cv_sqrt(1.0 + s * s);
  let den = 1.0 + beta * s * s;
  return vec2<f32>(beta * rho * s / den, t / den);
}""", ("cv_exp", "cv_copysign", "cv_sin", "cv_cos", "cv_tan", "cv_sinh", "cv_sqrt", "cv_tanh", "cv_isinf",
       "cv_isnan")),
    "cv_ctan": ("""fn cv_ctan(a: vec2<f32>) -> vec2<f32> {
  let w = cv_ctanh(vec2<f32>(-a.y, a.x));
  return vec2<f32>(w.y, -w.x);
}""", ("cv_ctanh",)),
    "cv_casinh": ("""fn cv_casinh(a: vec2<f32>) -> vec2<f32> {
  let s = cv_copysign(1.0, a.x);
  let z = vec2<f32>(s * a.x, s * a.y);
  var w: vec2<f32>;
  if (abs(z.x) > 4096.0 || abs(z.y) > 4096.0) {
    w = cv_clog(z);
    w.x = w.x + 0.6931471805599453;
  } else {
    let zz = cv_cmul_plain(z, z);
    w = cv_clog(z + cv_csqrt(vec2<f32>(zz.x + 1.0, zz.y)));
  }
  return vec2<f32>(s * w.x, s * w.y);
}""", ("cv_copysign", "cv_clog", "cv_cmul_plain", "cv_csqrt")),
    "cv_casin": ("""fn cv_casin(a: vec2<f32>) -> vec2<f32> {
  let w = cv_casinh(vec2<f32>(-a.y, a.x));
  return vec2<f32>(w.y, -w.x);
}""", ("cv_casinh",)),
    "cv_cacos": ("""fn cv_cacos(a: vec2<f32>) -> vec2<f32> {
  let w = cv_casin(a);
  return vec2<f32>(1.5707963267948966 - w.x, -w.y);
}""", ("cv_casin",)),
    "cv_catanh": ("""fn cv_catanh(a: vec2<f32>) -> vec2<f32> {
  if (abs(a.x) > 4096.0 || abs(a.y) > 4096.0) {
    let w = cv_cdiv(vec2<f32>(1.0, 0.0), a);
    return vec2<f32>(w.x, cv_copysign(1.5707963267948966, a.y) + w.y);
  }
  let p = cv_clog(vec2<f32>(1.0 + a.x, a.y));
  let m = cv_clog(vec2<f32>(1.0 - a.x, -a.y));
  return vec2<f32>((p.x - m.x) * 0.5, (p.y - m.y) * 0.5);
}""", ("cv_cdiv", "cv_copysign", "cv_clog")),
    "cv_catan": ("""fn cv_catan(a: vec2<f32>) -> vec2<f32> {
  let w = cv_catanh(vec2<f32>(-a.y, a.x));
  return vec2<f32>(w.y, -w.x);
}""", ("cv_catanh",)),
    "cv_cacosh": ("""fn cv_cacosh(a: vec2<f32>) -> vec2<f32> {
  let q = cv_cmul_plain(cv_csqrt(vec2<f32>(a.x + 1.0, a.y)), cv_csqrt(vec2<f32>(a.x - 1.0, a.y)));
  return cv_clog(a + q);
}""", ("cv_cmul_plain", "cv_csqrt", "cv_clog")),
    "cv_cpow": (f"""fn cv_cpow(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {{
  if (b.x == 0.0 && b.y == 0.0) {{ return vec2<f32>(1.0, 0.0); }}
  if (b.y == 0.0 && b.x == 2.0) {{ return cv_cmul(a, a); }}
  if (b.y == 0.0 && b.x == 0.5) {{ return cv_csqrt(a); }}
  if (a.x == 0.0 && a.y == 0.0) {{
    if (b.x > 0.0 && b.y == 0.0) {{ return vec2<f32>(0.0, 0.0); }}
    return vec2<f32>({_NAN}, {_NAN});
  }}
  if (b.y == 0.0 && b.x > -100.0 && b.x < 100.0 && b.x == trunc(b.x)) {{
    let n = i32(b.x);
    if (n == 1) {{ return a; }}
    if (n == 3) {{ return cv_cmul_plain(a, cv_cmul_plain(a, a)); }}
    var acc = vec2<f32>(1.0, 0.0);
    var p = a;
    let m = abs(n);
    for (var mask = 1; mask <= m; mask = mask << 1u) {{
      if ((m & mask) != 0) {{ acc = cv_cmul_plain(acc, p); }}
      if (m < (mask << 1u)) {{ break; }}
      p = cv_cmul_plain(p, p);
    }}
    if (n < 0) {{ return cv_cdiv(vec2<f32>(1.0, 0.0), acc); }}
    return acc;
  }}
  return cv_cexp(cv_cmul(b, cv_clog(a)));
}}""", ("cv_cmul", "cv_cmul_plain", "cv_csqrt", "cv_cdiv", "cv_cexp", "cv_clog")),
}

HELPERS: dict[str, tuple[str, tuple[str, ...]]] = {**_F, **_HALF, **_INT, **_I64, **_C64}


def with_deps(names: set[str]) -> list[str]:
    """``names`` and every helper they call, each once, in a stable order."""
    out: list[str] = []
    stack = sorted(names)
    while stack:
        n = stack.pop()
        if n not in out:
            out.append(n)
            stack.extend(HELPERS[n][1])
    return sorted(out)
