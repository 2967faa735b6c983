"""Cascaded sums: every long float sum adds its elements in short runs, whatever the device.

A reduce loop adds its elements into one accumulator, one after the other. Over ``n`` elements
the rounding error of such a sum grows like ``n`` (worst case) or ``sqrt(n)`` (typical): summing
``10**8`` float32 values of 0.1 gave 9679793 instead of 1.0000000e7, and ``ones(2**30).sum()``
stopped at 2**29, where adding 1.0 no longer changes a float32. numpy sums pairwise, PyTorch in
cascades; corvid now cascades too, at the level every backend shares, the kernel IR.

:func:`cascade_sums` rewrites each float sum reduce of at least ``2 * BLOCK`` elements as a nest
of reduces, each of which adds a bounded number of values:

* the innermost reduce adds ``BLOCK`` consecutive elements (the C renderer vectorizes it: each of
  ``W`` vector lanes adds ``BLOCK / W`` of them, then the lanes are added pairwise);
* each level above adds ``FAN`` block sums of the level below, until at most ``TOP`` remain,
  which the top reduce adds (across threads when the kernel runs its reduce in parallel);
* the ``n % BLOCK`` elements left over at a level are summed by a reduce of their own and added
  to that level's result.

So no float is ever added to a partial sum of more than ``max(BLOCK / W, FAN, TOP)`` earlier
values, and the error bound is ``(BLOCK/W + FAN * levels + TOP) * eps * sum|x|`` with
``levels = log_FAN(n / BLOCK / TOP)``: at most 4 levels below 2**40 elements. That is the
logarithmic bound of pairwise summation, with a larger constant (numpy's pairwise sum has
``128/8 + log2(n/128)``). Blocks that divide the loop keep every loop a plain counted loop:
nothing is gated, and the body's index expressions are the old ones with ``r = o*BLOCK + i``.

Which sums: float32, float64 and complex sums whose loops are all ``"reduce"`` loops (a
work-group's ``"local"`` partial loop is already a tree), except a product summed inside a
register tile (``upcast``: the matmul and convolution tiles), which stays a BLAS-style dot
product, as numpy's and PyTorch's matmuls are. float16, bfloat16 and the 8-bit floats already
accumulate in float32 and round once (``render/c.py: narrow_rounded``); cascading them would
round every block sum to the narrow type.

Reduces that share their loops (``upcast_reduce``'s chunks, a layer norm's two sums over one
row) get the same new loops, so they still share one loop nest.
"""

from __future__ import annotations

import math

from ..graph.node import Op
from ..graph.symbolic import Num, Sym, Var, loop_var, upper
from .ir import Kernel, Loop, U, post_order, substitute_arg

BLOCK = 1024  # elements added by the innermost reduce (per vector lane: 64 with 16 lanes, 128 with 8)
FAN = 16  # block sums added by each level above it
TOP = 64  # at most this many sums are left to the top reduce (the loop that threads share)
_DTYPES = ("float32", "float64", "complex64", "complex128")


def cascade_sums(k: Kernel, block: int = BLOCK) -> Kernel:
    """``k`` with every long float sum reduce cascaded (see the module docstring), its innermost
    runs ``block`` elements long; ``k`` itself when no sum is long enough. The values computed
    are those of ``k`` up to rounding."""
    tiled = any(o.op == "upcast" for o in k.opts)
    targets = [u for u in k.values() if _cascades(u, tiled, block)]
    if not targets:
        return k
    names = {lp.var.name for lp in k.loops + k.reduce_loops()}
    out = k.empty_like(k.loops)
    # a streamed sum's non-temporal loop adds into vector accumulators over the thread's whole
    # share: it has no runs, so a cascaded sum reads as usual
    out.opts = tuple(o for o in k.opts if o.op != "stream")
    nest = _Nest(out, names, block)
    memo: dict[int, U] = {}
    wanted = {id(u) for u in targets}
    for u in k.values():
        src = tuple(memo[id(s)] for s in u.src)
        if id(u) in wanted:
            memo[id(u)] = nest.sum(src[0], u.arg[1], u.dtype, first=True)
        else:
            memo[id(u)] = out.u(u.op, u.dtype, src, substitute_arg(u, {}))
    out.stores = [s.moved({}, memo[id(s.value)]) for s in k.stores]
    return out


def _cascades(u: U, tiled: bool, block: int) -> bool:
    if u.op != "reduce" or u.arg[0] != "sum" or u.dtype.name not in _DTYPES:
        return False
    loops = u.arg[1]
    if any(lp.kind != "reduce" for lp in loops) or math.prod(upper(lp.size) for lp in loops) < 2 * block:
        return False
    body = u.src[0]
    return not (tiled and body.op == "alu" and body.arg is Op.MUL)


class _Nest:
    """Builds cascades into ``out``. New loops are made once per (original loops, step), so that
    reduces over the same loops get the same nest and share its loops when linearized."""

    def __init__(self, out: Kernel, names: set[str], block: int):
        self.out, self.names, self.block = out, names, block
        self.made: dict[tuple, Loop] = {}

    def loop(self, key: tuple, base: Loop, size: int, unroll: int = 1) -> Loop:
        found = self.made.get(key)
        if found is None:
            n = 0
            while f"{base.var.name}k{n}" in self.names:
                n += 1
            name = f"{base.var.name}k{n}"
            self.names.add(name)
            found = self.made[key] = Loop(loop_var(name, size), size, "reduce", unroll)
        return found

    def subst(self, body: U, var: Var, expr: Sym, key: tuple) -> U:
        return _subst(self.out, body, var, expr, lambda lp: self.loop(key + (lp.var,), lp, lp.size, lp.unroll))

    def sum(self, body: U, loops: tuple[Loop, ...], dtype, first: bool, key: tuple = ()) -> U:
        """The sum of ``body`` over ``loops`` (outermost first) in bounded runs: ``first`` is the
        level that adds elements (runs of ``self.block``), the others add sums (runs of ``FAN``,
        the top one up to ``TOP``)."""
        key = key or tuple(lp.var for lp in loops)
        limit, block = (self.block, self.block) if first else (TOP, FAN)
        # the innermost loops whose trips together stay within a run
        # (a symbolic size counts as its largest value: short sums then just have empty loops)
        take, trips = 1, upper(loops[-1].size)
        while take < len(loops) and trips * upper(loops[-take - 1].size) <= block:
            trips *= upper(loops[-take - 1].size)
            take += 1
        inner, rest = loops[-take:], loops[:-take]
        if take > 1 or trips <= limit:
            value = self.out.u("reduce", dtype, (body,), ("sum", inner))
        else:  # one loop too long for a run: blocks of it, summed in turn, plus what is left over
            lp = inner[0]
            q, left = divmod(lp.size, block)
            o = self.loop(key + ("o",), lp, q)
            i = self.loop(key + ("i",), lp, block, lp.unroll)
            blocks = self.out.u("reduce", dtype, (self.subst(body, lp.var, o.var * block + i.var, key + ("b",)),),
                                ("sum", (i,)))
            value = self.sum(blocks, (o,), dtype, False, key + ("s",))
            if not (isinstance(left, int) and left == 0) and left != Num(0):  # (a symbolic remainder: maybe 0)
                r = self.loop(key + ("r",), lp, left, lp.unroll)
                tail = self.out.u("reduce", dtype, (self.subst(body, lp.var, r.var + q * block, key + ("t",)),),
                                  ("sum", (r,)))
                value = self.out.u("alu", dtype, (value, tail), Op.ADD)
        return self.sum(value, rest, dtype, False, key + ("u",)) if rest else value


def _subst(out: Kernel, body: U, var: Var, expr: Sym, relabel) -> U:
    """``body`` (a value of ``out``) with ``var`` replaced by ``expr`` in every index it reads.
    A reduce under ``body`` that reads ``var`` is rebuilt over new loops, ``relabel(loop)``: one
    loop variable is never shared by reduces placed in different loop nests."""
    order = post_order((body,))
    mapping: dict[Var, Sym] = {var: expr}
    for u in order:
        if u.op == "reduce" and _reads(u, order, {var}):
            for lp in u.arg[1]:
                mapping.setdefault(lp.var, relabel(lp).var)
    changed = set(mapping)
    new: dict[int, U] = {}
    for u in order:
        src = tuple(new[id(s)] for s in u.src)
        if all(a is b for a, b in zip(src, u.src)) and not any(s.vars() & changed for s in u.syms()) and \
                not (u.op == "reduce" and any(lp.var in changed for lp in u.arg[1])):
            new[id(u)] = u
            continue
        arg = substitute_arg(u, mapping)
        if u.op == "reduce":
            arg = (arg[0], tuple(relabel(lp) if lp.var in changed else lp for lp in arg[1]))
        new[id(u)] = out.u(u.op, u.dtype, src, arg)
    return new[id(body)]


def _reads(root: U, order: list[U], vs: set[Var]) -> bool:
    """Whether a value under ``root`` (``order`` holds them, sources first) reads one of ``vs``."""
    under = {id(u) for u in post_order((root,))}
    return any(id(u) in under and any(s.vars() & vs for s in u.syms()) for u in order)
