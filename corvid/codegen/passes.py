"""IR passes that run on every kernel after its optimization actions (:func:`finalize`).

* **Common-subexpression elimination** is built into :meth:`Kernel.u` (every value is interned),
  and **loop-invariant code motion** into placement (:mod:`corvid.codegen.linearize`): both hold
  for every kernel by construction, including the ones these passes rebuild.
* **Constant folding** (:func:`simplify`): an exact op (add, subtract, multiply, negate,
  comparisons, bitwise ops, select, cast) whose operands are all literals becomes a literal,
  computed by numpy in the value's dtype, which rounds and wraps as the generated code does.
* **Algebraic simplification** (:func:`simplify`): identities that hold bit for bit, -0.0, nan
  and integer wrap-around included: ``x*1``, ``x-0``, ``x+(-0.0)`` (floats), ``x+0``, ``x*0``
  (integers), ``--x``, ``select(c, a, a)``, a select on a literal condition, a cast to the same
  dtype, ``x & True``, ``x | False``. Index arithmetic is simplified separately, symbolically, as
  it is built (:mod:`corvid.graph.symbolic`).
* **Multiply-add fusion** (:func:`fuse_multiply_add`): ``a*b + c`` in float32/float64, where the
  product has no other use, becomes one ``mulacc`` value (one rounding), which the C renderer
  writes as ``fmaf``/``fma`` (vectors: a lane loop of them, one instruction), when the target has
  FMA (:func:`has_fma`); the renderer also accumulates a sum of products with them. Kernels are
  compiled with ``-ffp-contract=off``, so these are the only fused operations: the same value
  comes out bit for bit the same in every kernel that computes it. Not for the narrow floats
  (float16, bfloat16, the 8-bit floats): they are computed in float and rounded after every op
  (:func:`corvid.render.c.narrow_rounded`), so a multiply-add of them rounds twice, as numpy's
  ufuncs do.
* **Dead-code elimination**: a kernel's values are those its stores reach (:meth:`Kernel.values`);
  the rebuilt kernel's value table holds only those.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from typing import Any

import numpy as np

from ..dtype import DType
from ..graph.node import Op
from .cascade import cascade_sums
from .ir import Kernel, U, substitute_arg

_FOLDABLE = {Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.CMPLT: np.less, Op.CMPEQ: np.equal,
             Op.CMPNE: np.not_equal, Op.AND: np.bitwise_and, Op.OR: np.bitwise_or, Op.XOR: np.bitwise_xor}


@functools.cache
def has_fma() -> bool:
    """Whether this CPU has fused multiply-add (the C renderer then writes fma/fmaf)."""
    try:
        with open("/proc/cpuinfo") as f:
            return " fma" in f.read()
    except OSError:
        return False


def _literal(value: Any, dtype: DType) -> Any:
    """The Python value of ``value`` stored in ``dtype`` (as a literal holds it)."""
    return np.array(value, dtype.np).item() if not dtype.is_bool else bool(value)


def _is(u: U, value: float) -> bool:
    """Whether ``u`` is the literal ``value`` (the sign of a zero counts)."""
    return (u.op == "const" and not isinstance(u.arg, complex) and not isinstance(u.arg, bool)
            and u.arg == value and (value != 0 or math.copysign(1.0, u.arg) == math.copysign(1.0, value)))


def _fold(op: Op, dtype: DType, src: tuple[U, ...]) -> Any:
    """The literal result of an exact op on literals, or None."""
    if op is Op.NEG and src[0].dtype == dtype and not dtype.is_bool:
        return _literal(np.negative(np.array(src[0].arg, dtype.np)), dtype)
    fn = _FOLDABLE.get(op)
    if fn is None or len(src) != 2 or src[0].dtype != src[1].dtype or src[0].dtype.is_complex:
        return None
    if op in (Op.AND, Op.OR, Op.XOR) and src[0].dtype.kind not in "biu":
        return None
    with np.errstate(all="ignore"):
        return _literal(fn(np.array(src[0].arg, src[0].dtype.np), np.array(src[1].arg, src[1].dtype.np)), dtype)


def _rewrite(op: str, dtype: DType, src: tuple[U, ...], arg: Any) -> U | Any | None:
    """An existing value equal to ``op(src)``, or a literal Python value, or None (keep it)."""
    if op == "cast" and src[0].dtype == dtype:
        return src[0]
    if op == "cast" and src[0].op == "const" and not dtype.is_complex and not src[0].dtype.is_complex:
        value = src[0].arg
        if dtype.is_bool:
            return bool(value)
        if dtype.is_float or (isinstance(value, (int, bool)) and dtype.kind in "iu" and
                              np.iinfo(dtype.np).min <= value <= np.iinfo(dtype.np).max):
            return _literal(value, dtype)
        return None
    if op != "alu":
        return None
    if all(s.op == "const" for s in src) and arg is not Op.WHERE:
        return _fold(arg, dtype, src)
    integer = dtype.kind in "iu"
    if arg is Op.WHERE:
        if src[1] is src[2]:
            return src[1]
        if src[0].op == "const":
            return src[1] if src[0].arg else src[2]
        return None
    if arg is Op.NEG and src[0].op == "alu" and src[0].arg is Op.NEG:
        return src[0].src[0]
    if len(src) != 2 or src[0].dtype != dtype or src[1].dtype != dtype or dtype.is_complex or dtype.is_bool:
        if dtype.is_bool and arg in (Op.AND, Op.OR) and len(src) == 2:
            keep = True if arg is Op.AND else False
            for a, b in ((src[0], src[1]), (src[1], src[0])):
                if b.op == "const" and bool(b.arg) == keep:
                    return a
        return None
    a, b = src
    if arg is Op.MUL:
        for x, c in ((a, b), (b, a)):
            if _is(c, 1):
                return x
            if integer and _is(c, 0):
                return 0
    if arg is Op.ADD:
        for x, c in ((a, b), (b, a)):
            if (integer and _is(c, 0)) or (not integer and _is(c, -0.0)):
                return x
    if arg is Op.SUB and (_is(b, 0) if integer else _is(b, 0.0)):
        return a
    return None


def simplify(k: Kernel) -> Kernel:
    """Constant folding and algebraic simplification (see the module docstring)."""
    out = k.empty_like(k.loops)
    memo: dict[int, U] = {}
    for u in k.values():
        src = tuple(memo[id(s)] for s in u.src)
        arg = substitute_arg(u, {})
        found = _rewrite(u.op, u.dtype, src, arg)
        if isinstance(found, U):
            memo[id(u)] = found
        elif found is not None:
            memo[id(u)] = out.u("const", u.dtype, (), found)
        else:
            memo[id(u)] = out.u(u.op, u.dtype, src, arg)
    out.stores = [s.moved({}, memo[id(s.value)]) for s in k.stores]
    return out


def fuse_multiply_add(k: Kernel) -> Kernel:
    """``a*b + c`` (float32/float64, the product used once) as one ``mulacc`` value."""
    uses = Counter(id(s) for u in k.values() for s in u.src)
    uses.update(id(s.value) for s in k.stores)
    out = k.empty_like(k.loops)
    memo: dict[int, U] = {}
    for u in k.values():
        src = tuple(memo[id(s)] for s in u.src)
        if u.op == "alu" and u.arg is Op.ADD and u.dtype.name in ("float32", "float64"):
            for i in (0, 1):
                m = u.src[i]
                if m.op == "alu" and m.arg is Op.MUL and m.dtype == u.dtype and uses[id(m)] == 1:
                    p = memo[id(m)]
                    if p.op == "alu" and p.arg is Op.MUL:  # (not folded away meanwhile)
                        memo[id(u)] = out.u("mulacc", u.dtype, (p.src[0], p.src[1], src[1 - i]), None)
                        break
            else:
                memo[id(u)] = out.u(u.op, u.dtype, src, u.arg)
            continue
        memo[id(u)] = out.u(u.op, u.dtype, src, substitute_arg(u, {}))
    out.stores = [s.moved({}, memo[id(s.value)]) for s in k.stores]
    return out


def cpu_sum_block() -> int:
    """The C renderer's innermost run of a cascaded sum: 64 float32 values per vector lane, at
    most :data:`~corvid.codegen.cascade.BLOCK` (1024 with 16 lanes, 512 with 8). A fixed 1024 gave
    the 8 lanes of an AVX2-width target (an Intel AVX-512 core, whose gcc tuning prefers 256-bit
    vectors) runs of 128, and 10**7 float32 0.1s summed 1.36 from their exact sum (numpy's
    pairwise sum: 0.1); the same time (64M float32: 7.4 ms either way, 2 cores)."""
    from .cascade import BLOCK
    from .opt import vector_bytes

    return min(BLOCK, 16 * vector_bytes())


def finalize(k: Kernel, fma: bool | None = None, block: int | None = None) -> Kernel:
    """The passes every kernel gets after its actions: long float sums cascaded
    (:mod:`corvid.codegen.cascade`), simplification (which also leaves only the live values:
    dead-code elimination), then multiply-add fusion where the target has it. ``block``: the
    device's innermost run of a cascaded sum (its ``sum_block``; None: the C renderer's,
    :func:`cpu_sum_block`)."""
    k = simplify(cascade_sums(k, cpu_sum_block() if block is None else block))
    return fuse_multiply_add(k) if (has_fma() if fma is None else fma) else k
