"""Symbolic integer expressions for index arithmetic.

Movement ops never copy: they become integer expressions over loop variables when a kernel is
generated. This module keeps those expressions small. Every expression knows its bounds
(``vmin``/``vmax``), and construction simplifies using them: a floor division or modulo whose
operand is provably in range disappears, ``d*(x//d) + x%d`` folds back to ``x``, and sums are kept
in a canonical linear form ``c0 + sum(ci * atom_i)``.

Expressions are immutable and keyed by value, so they can be dict keys and compared with ``==``.
Division and modulo follow Python's floor semantics; renderers translate them.

An expression is a DAG: a chain of views reuses its consumer's index several times (a reshape
flattens and splits it again), so a tree written out from 40 nodes can have 10^5 of them. Every walk
here (substitution, variables, rendering, counting) visits each shared node once and keeps its own
stack, and ``tree_size`` (the written-out size, kept like the bounds) lets the lowering refuse an
index that grows past a limit (``codegen/lower.py``). A key holds its children, not their keys, so
hashing a node costs its own fields only (nested keys made each hash a walk of the whole tree).

>>> i, j = Var("i", 0, 3), Var("j", 0, 5)
>>> flat = i * 6 + j
>>> (flat // 6, flat % 6)
(i, j)
"""

from __future__ import annotations

import functools
import math
import threading
from contextlib import contextmanager
from math import gcd
from typing import Callable, Iterator, Union

IntLike = Union["Sym", int]
# an expression of at most this many nodes written out is walked by plain recursion (its depth is
# bounded by its size); larger ones by the shared-node walks below
_SMALL = 64


class Sym:
    """Base of all symbolic integer expressions. Use the operators, not the subclasses."""

    __slots__ = ("vmin", "vmax", "tree_size", "_key", "_hash")

    def _init(self, key: tuple, vmin: int, vmax: int) -> None:
        self._key, self._hash, self.vmin, self.vmax = key, hash(key), vmin, vmax
        # nodes of the expression written out as a tree (what rendering it costs)
        self.tree_size = 1 + sum(c.tree_size for c in self._children())

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return isinstance(other, Sym) and self._hash == other._hash and _same(self, other)

    def __hash__(self) -> int:
        return self._hash

    # arithmetic -------------------------------------------------------------------------------
    def __add__(self, other: IntLike) -> Sym:
        if not _operand(other):
            return NotImplemented  # (a tensor: its own operator takes the size as a value)
        return _add(_linear(self), _linear(sym(other)))

    __radd__ = __add__

    def __neg__(self) -> Sym:
        return self * -1

    def __sub__(self, other: IntLike) -> Sym:
        if not _operand(other):
            return NotImplemented
        return self + (-sym(other))

    def __rsub__(self, other: IntLike) -> Sym:
        if not _operand(other):
            return NotImplemented
        return sym(other) + (-self)

    def __mul__(self, other: IntLike) -> Sym:
        if isinstance(other, Sym):
            if not isinstance(other, Num):
                if isinstance(self, Num):
                    return other * self.value
                return _product(self, other)
            other = other.value
        elif not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        terms, const = _linear(self)
        return _build({a: c * other for a, c in terms.items()}, const * other)

    __rmul__ = __mul__

    def __floordiv__(self, d: IntLike) -> Sym:
        return _floordiv(self, d) if _operand(d) else NotImplemented

    def __rfloordiv__(self, x: int) -> Sym:
        return _floordiv(sym(x), self) if _operand(x) else NotImplemented

    def __mod__(self, d: IntLike) -> Sym:
        return _mod(self, d) if _operand(d) else NotImplemented

    def __rmod__(self, x: int) -> Sym:
        return _mod(sym(x), self) if _operand(x) else NotImplemented

    # a size in a shape is compared as Python compares ints, when the bounds decide it ---------------
    def __lt__(self, other: IntLike) -> bool:
        if not _operand(other):
            return NotImplemented  # (a tensor compares elementwise: its own operator)
        d = self - other
        return _decided(d.vmax < 0, d.vmin >= 0, self, other, "<")

    def __le__(self, other: IntLike) -> bool:
        if not _operand(other):
            return NotImplemented
        d = self - other
        return _decided(d.vmax <= 0, d.vmin > 0, self, other, "<=")

    def __gt__(self, other: IntLike) -> bool:
        if not _operand(other):
            return NotImplemented
        d = self - other
        return _decided(d.vmin > 0, d.vmax <= 0, self, other, ">")

    def __ge__(self, other: IntLike) -> bool:
        if not _operand(other):
            return NotImplemented
        d = self - other
        return _decided(d.vmin >= 0, d.vmax < 0, self, other, ">=")

    def __bool__(self) -> bool:  # (a size is true when it is not 0: ``if n % 16:``)
        return _decided(self.vmin > 0 or self.vmax < 0, self.vmin == self.vmax == 0, self, 0, "!=")

    def __index__(self) -> int:
        if isinstance(self, Num):
            return self.value
        raise SymbolicSizeError(f"the symbolic size {self!r} has no value while a function is traced: "
                                "it is needed as a Python int here")

    __int__ = __index__

    def __truediv__(self, other: object) -> float:
        if not isinstance(other, (int, float, Sym)):
            return NotImplemented  # (a tensor divides by the size as a value: its own operator)
        raise SymbolicSizeError(f"the symbolic size {self!r} has no value while a function is traced: "
                                "dividing by it needs its value (divide a tensor by it instead)")

    __rtruediv__ = __truediv__

    def __float__(self) -> float:
        raise SymbolicSizeError(f"the symbolic size {self!r} has no value while a function is traced: "
                                "it is needed as a Python float here")

    # comparisons build boolean expressions (0/1 valued); they do not return Python bools -------
    def lt(self, c: IntLike) -> Sym:
        """``self < c`` as a 0/1 expression, decided statically when the bounds allow it."""
        if isinstance(c, Sym):
            return (self - c).lt(0) if not isinstance(c, Num) else self.lt(c.value)
        if self.vmax < c:
            return Num(1)
        if self.vmin >= c:
            return Num(0)
        if _sized(self):  # (a loop over a symbolic size: its bound can decide what the ranges do not)
            if _upper(self).vmax < c:
                return Num(1)
            if _lower(self).vmin >= c:
                return Num(0)
        return Cmp(self, "<", c)

    def ge(self, c: IntLike) -> Sym:
        """``self >= c`` as a 0/1 expression."""
        if isinstance(c, Sym):
            return (self - c).ge(0) if not isinstance(c, Num) else self.ge(c.value)
        if self.vmin >= c:
            return Num(1)
        if self.vmax < c:
            return Num(0)
        if _sized(self):
            if _lower(self).vmin >= c:
                return Num(1)
            if _upper(self).vmax < c:
                return Num(0)
        return Cmp(self, ">=", c)

    def vars(self) -> frozenset[Var]:
        """All variables this expression depends on."""
        if isinstance(self, Var):
            return frozenset((self,))
        if self.tree_size <= _SMALL:  # (recursion of bounded depth: faster for the usual index)
            return frozenset().union(*(c.vars() for c in self._children()))
        return frozenset(x for x in _post_order(self) if isinstance(x, Var))

    def _children(self) -> tuple[Sym, ...]:
        return ()

    def substitute(self, mapping: dict[Var, Sym]) -> Sym:
        """Replace variables by expressions, simplifying the result."""
        if isinstance(self, Var):
            return mapping.get(self, self)
        if isinstance(self, Num):
            return self
        if self.tree_size <= _SMALL:  # (recursion of bounded depth: faster for the usual index)
            old = self._children()
            new = tuple(c.substitute(mapping) for c in old)
            return self if all(a is b for a, b in zip(new, old)) else self._rebuild(new)
        done: dict[int, Sym] = {}
        for x in _post_order(self):
            if isinstance(x, Var):
                done[id(x)] = mapping.get(x, x)
            elif isinstance(x, Num):
                done[id(x)] = x
            else:
                old = x._children()
                new = tuple(done[id(c)] for c in old)
                # (unchanged children: the same expression, without simplifying it again)
                done[id(x)] = x if all(a is b for a, b in zip(new, old)) else x._rebuild(new)
        return done[id(self)]

    def _rebuild(self, children: tuple[Sym, ...]) -> Sym:
        """This expression's operation applied to ``children`` (in the order of ``_children``)."""
        raise NotImplementedError

    def render(self, var_name: Callable[[Var], str] = lambda v: v.name) -> str:
        """Render as C-like source with floor division helpers only where operands can be negative."""
        if self.tree_size <= _SMALL:  # (recursion of bounded depth: faster for the usual index)
            return self._render(tuple(c.render(var_name) for c in self._children()), var_name)
        done: dict[int, str] = {}
        for x in _post_order(self):
            done[id(x)] = x._render(tuple(done[id(c)] for c in x._children()), var_name)
        return done[id(self)]

    def _render(self, children: tuple[str, ...], var_name: Callable[[Var], str]) -> str:
        raise NotImplementedError

    def __str__(self) -> str:  # (as code: a size in a renderer's f-string)
        return self.render()

    def __divmod__(self, d: IntLike) -> tuple[Sym, Sym]:
        return _floordiv(self, d), _mod(self, d)

    def __repr__(self) -> str:  # (symbolic sizes by their labels; renderers call render())
        return self.render(lambda v: v.label if isinstance(v, Dim) else v.name)


def _operand(x: object) -> bool:
    return isinstance(x, Sym) or (isinstance(x, int) and not isinstance(x, bool))


class SymbolicSizeError(TypeError):
    """An operation needs the value of a size that is symbolic (a dimension that ``jit`` traces
    once for every size): the size is only known when the compiled program runs."""


class _Assumptions(threading.local):
    def __init__(self) -> None:
        self.stack: list[list[tuple[Sym, str, bool]]] = []
        self.hints: list[dict[int, int]] = []  # the sizes being traced, by Dim slot


_assumptions = _Assumptions()


@contextmanager
def assuming_hints(values: dict[int, int]) -> Iterator[list[tuple[Sym, str, bool]]]:
    """Inside the block, a comparison of symbolic sizes that their ranges do not decide is
    decided at the sizes' hints (the sizes being traced) and recorded in the list yielded, as
    ``(a - b, op, result)``: a program traced so holds only for sizes that give each recorded
    comparison the same result (``jit`` checks them before replaying it, as guards). ``values``:
    the sizes being traced, by :class:`Dim` slot (a Dim's own ``hint`` is that of the first trace
    that made it: equal Dims are one expression)."""
    found: list[tuple[Sym, str, bool]] = []
    _assumptions.stack.append(found)
    _assumptions.hints.append(values)
    try:
        yield found
    finally:
        _assumptions.stack.pop()
        _assumptions.hints.pop()


@contextmanager
def strict_sizes() -> Iterator[None]:
    """Inside the block a comparison of symbolic sizes that their ranges do not decide raises
    :class:`SymbolicSizeError` even during a ``jit`` trace (the kernel optimizer: its choices are
    cached per kernel structure, so they must not depend on the sizes being traced)."""
    _assumptions.stack.append(None)  # type: ignore[arg-type]
    try:
        yield
    finally:
        _assumptions.stack.pop()


def compare(diff: int, op: str) -> bool:
    """``diff op 0`` for one of ``<``, ``<=``, ``>``, ``>=``, ``!=``."""
    return diff < 0 if op == "<" else diff <= 0 if op == "<=" else diff > 0 if op == ">" else diff >= 0 \
        if op == ">=" else diff != 0


def _decided(yes: bool, no: bool, a: Sym, b: IntLike, op: str) -> bool:
    if yes:
        return True
    if no:
        return False
    stack = _assumptions.stack
    if stack and stack[-1] is not None:
        diff = a - b
        if all(isinstance(v, Dim) for v in diff.vars()):
            result = compare(evaluate(diff), op)
            stack[-1].append((diff, op, result))
            return result
    raise SymbolicSizeError(f"whether {a!r} {op} {b!r} depends on the value of a symbolic size (a dimension "
                            "jit traces for every size); make that dimension static")


class Num(Sym):
    """An integer constant."""

    __slots__ = ("value",)

    def __init__(self, value: int):
        self.value = int(value)
        self._init(("num", self.value), self.value, self.value)
        self._hash = hash(self.value)  # (equal to its int, so it hashes as one)

    def __eq__(self, other: object) -> bool:  # a constant equals its int: a size computed symbolically
        if isinstance(other, Num):
            return self.value == other.value
        if isinstance(other, int):
            return self.value == other
        return False

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        return self.value != 0

    def _render(self, children: tuple[str, ...], var_name: Callable[[Var], str]) -> str:
        return str(self.value)


class Var(Sym):
    """A loop variable ranging over ``[lo, hi]`` (inclusive)."""

    __slots__ = ("name",)

    def __init__(self, name: str, lo: int, hi: int):
        if lo > hi:
            raise ValueError(f"empty range for {name}: [{lo}, {hi}]")
        self.name = name
        self._init(("var", name, lo, hi), lo, hi)

    def _render(self, children: tuple[str, ...], var_name: Callable[[Var], str]) -> str:
        return var_name(self)


class Dim(Var):
    """A size known only when a kernel runs: a dimension that ``jit`` traces once for every size.
    ``slot`` is its position in the sizes a kernel is passed, ``label`` the name it was given;
    ``hint`` (not part of its identity) is the size seen when it was traced, for cost estimates.

    >>> n = Dim(0, "batch", 2, 1000, hint=32)
    >>> (n * 4 + 1) // n  # sizes divide exactly like constants: (4n + 1) // n == 4 for n >= 2
    4
    """

    __slots__ = ("slot", "label", "hint")

    def __init__(self, slot: int, label: str, lo: int, hi: int, hint: int | None = None):
        if lo > hi:
            raise ValueError(f"empty range for {label}: [{lo}, {hi}]")
        self.name, self.slot, self.label = f"cv_d{slot}", slot, label
        self.hint = lo if hint is None else hint
        self._init(("dim", slot, label, lo, hi), lo, hi)



class BVar(Var):
    """A loop variable ranging over ``[0, bound)`` where ``bound`` is symbolic (a loop over a
    symbolic size). The simplifier uses the bound to prove ``i < bound`` (``i % bound == i``)."""

    __slots__ = ("bound",)

    def __init__(self, name: str, bound: Sym):
        self.name, self.bound = name, bound
        self._init(("bvar", name, bound), 0, bound.vmax - 1)


def loop_var(name: str, size: IntLike) -> Var:
    """The variable of a loop of ``size`` iterations (a :class:`BVar` when the size is symbolic)."""
    if isinstance(size, Num):
        size = size.value
    if isinstance(size, Sym):
        return BVar(name, size)
    return Var(name, 0, size - 1)


def is_symbolic(x: object) -> bool:
    """Whether ``x`` (a size, or a shape) involves a symbolic size."""
    if isinstance(x, tuple):
        return any(isinstance(s, Sym) for s in x)
    return isinstance(x, Sym) and not isinstance(x, Num)


def dims_of(x: object) -> frozenset[Dim]:
    """The symbolic sizes in a size or a shape."""
    if isinstance(x, tuple):
        return frozenset().union(*(dims_of(s) for s in x))
    if isinstance(x, Sym):
        return frozenset(v for v in x.vars() if isinstance(v, Dim)) | frozenset(
            d for v in x.vars() if isinstance(v, BVar) for d in dims_of(v.bound))
    return frozenset()


def evaluate(x: IntLike, values: dict[Dim, int] | None = None) -> int:
    """The value of size ``x`` with each symbolic size at ``values[d]`` (default: its ``hint``)."""
    if not isinstance(x, Sym):
        return x
    now = _assumptions.hints[-1] if _assumptions.hints else {}
    mapping = {d: Num(values[d] if values is not None and d in values else now.get(d.slot, d.hint)) for d in dims_of(x)}
    out = x.substitute(mapping) if mapping else x
    if not isinstance(out, Num):
        raise SymbolicSizeError(f"{x} is not a size of symbolic sizes only")
    return out.value


def as_size(x: object) -> IntLike:
    """A size argument as shapes hold it: an int, or a symbolic size (a constant one as its int)."""
    if isinstance(x, Sym):
        return x.value if isinstance(x, Num) else x
    return int(x)  # type: ignore[call-overload]


def size_function(x: IntLike) -> int | Callable[[list[int]], int]:
    """``x`` itself when an int; for a symbolic size, a function of the sizes' values (a list in
    :class:`Dim` slot order) that computes it (compiled once: a replay evaluates it per call)."""
    if not isinstance(x, Sym):
        return x
    if isinstance(x, Num):
        return x.value
    return eval(f"lambda d: {_python(x)}", {})  # noqa: S307 -- source built by _python from the expression


def _python(x: Sym) -> str:
    """A size expression as Python source over ``d`` (the sizes' values by slot)."""
    if isinstance(x, Num):
        return str(x.value)
    if isinstance(x, Dim):
        return f"d[{x.slot}]"
    if isinstance(x, Lin):
        return "(" + " + ".join([f"{c}*{_python(a)}" for a, c in x.terms.items()] + [str(x.const)]) + ")"
    if isinstance(x, Prod):
        return "(" + "*".join(_python(f) for f in x.factors) + ")"
    if isinstance(x, (FloorDiv, Mod)):
        d = _python(x.d) if isinstance(x.d, Sym) else str(x.d)
        return f"({_python(x.x)} {'//' if isinstance(x, FloorDiv) else '%'} {d})"
    raise SymbolicSizeError(f"{x!r} is not an expression of symbolic sizes")


def hint(x: IntLike) -> int:
    """A size's value for cost estimates: an int as it is, a symbolic size at its ``hint``."""
    return x if not isinstance(x, Sym) else evaluate(x)


def upper(x: IntLike) -> int:
    """The largest value size ``x`` can take (an int: itself)."""
    return x if not isinstance(x, Sym) else x.vmax


class Prod(Sym):
    """A product of two or more non-constant factors (sizes multiplied by loop variables, or by
    each other), in a canonical order."""

    __slots__ = ("factors",)

    def __init__(self, factors: tuple[Sym, ...]):
        self.factors = factors
        lo = hi = 1
        for f in factors:
            corners = (lo * f.vmin, lo * f.vmax, hi * f.vmin, hi * f.vmax)
            lo, hi = min(corners), max(corners)
        self._init(("prod", factors), lo, hi)

    def _children(self) -> tuple[Sym, ...]:
        return self.factors

    def _rebuild(self, children: tuple[Sym, ...]) -> Sym:
        out: Sym = Num(1)
        for c in children:
            out = out * c
        return out

    def _render(self, children: tuple[str, ...], var_name: Callable[[Var], str]) -> str:
        return "(" + "*".join(children) + ")"


class Lin(Sym):
    """``const + sum(coef * atom)`` with at least one term (never a lone atom with coefficient 1)."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: dict[Sym, int], const: int):
        self.terms, self.const = terms, const
        lo = hi = const
        for a, c in terms.items():
            lo, hi = lo + min(c * a.vmin, c * a.vmax), hi + max(c * a.vmin, c * a.vmax)
        self._init(("lin", frozenset(terms.items()), const), lo, hi)

    def _children(self) -> tuple[Sym, ...]:
        return tuple(self.terms)

    def _rebuild(self, children: tuple[Sym, ...]) -> Sym:
        out: Sym = Num(self.const)
        for a, c in zip(children, self.terms.values()):
            out = out + a * c
        return out

    def _render(self, children: tuple[str, ...], var_name: Callable[[Var], str]) -> str:
        parts = []
        order = sorted(zip(self.terms.items(), children), key=lambda t: -t[0][0].vmax * abs(t[0][1]))
        for (_, c), r in order:
            parts.append(r if c == 1 else f"-{r}" if c == -1 else f"{r}*{c}")
        if self.const:
            parts.append(str(self.const))
        return "(" + "+".join(parts).replace("+-", "-") + ")"


class FloorDiv(Sym):
    """``x // d``; ``d`` a positive int, or a symbolic size (then one of the children)."""

    __slots__ = ("x", "d")

    def __init__(self, x: Sym, d: IntLike):
        self.x, self.d = x, d
        if isinstance(d, Sym):  # (d >= 1: a size)
            lo, hi = max(d.vmin, 1), max(d.vmax, 1)
            b = (x.vmin // lo, x.vmin // hi, x.vmax // lo, x.vmax // hi)
            self._init(("div", x, d), min(b), max(b))
        else:
            self._init(("div", x, d), x.vmin // d, x.vmax // d)

    def _children(self) -> tuple[Sym, ...]:
        return (self.x, self.d) if isinstance(self.d, Sym) else (self.x,)

    def _rebuild(self, children: tuple[Sym, ...]) -> Sym:
        return children[0] // (children[1] if len(children) > 1 else self.d)

    def _render(self, children: tuple[str, ...], var_name: Callable[[Var], str]) -> str:
        x, d = children[0], children[1] if len(children) > 1 else self.d
        return f"({x}/{d})" if self.x.vmin >= 0 else f"cv_floordiv({x},{d})"


class Mod(Sym):
    """``x % d``; ``d`` a positive int, or a symbolic size (then one of the children)."""

    __slots__ = ("x", "d")

    def __init__(self, x: Sym, d: IntLike):
        self.x, self.d = x, d
        self._init(("mod", x, d), 0, (d.vmax if isinstance(d, Sym) else d) - 1)

    def _children(self) -> tuple[Sym, ...]:
        return (self.x, self.d) if isinstance(self.d, Sym) else (self.x,)

    def _rebuild(self, children: tuple[Sym, ...]) -> Sym:
        return children[0] % (children[1] if len(children) > 1 else self.d)

    def _render(self, children: tuple[str, ...], var_name: Callable[[Var], str]) -> str:
        x, d = children[0], children[1] if len(children) > 1 else self.d
        return f"({x}%{d})" if self.x.vmin >= 0 else f"cv_floormod({x},{d})"


class Cmp(Sym):
    """A comparison against a constant: ``x < c`` or ``x >= c`` (0/1 valued)."""

    __slots__ = ("x", "op", "c")

    def __init__(self, x: Sym, op: str, c: int):
        self.x, self.op, self.c = x, op, c
        self._init(("cmp", x, op, c), 0, 1)

    def _children(self) -> tuple[Sym, ...]:
        return (self.x,)

    def _rebuild(self, children: tuple[Sym, ...]) -> Sym:
        (x,) = children
        return x.lt(self.c) if self.op == "<" else x.ge(self.c)

    def _render(self, children: tuple[str, ...], var_name: Callable[[Var], str]) -> str:
        return f"({children[0]}{self.op}{self.c})"


class And(Sym):
    """Conjunction of 0/1 expressions (validity conditions of padded reads)."""

    __slots__ = ("items",)

    def __init__(self, items: tuple[Sym, ...]):
        self.items = items
        self._init(("and", frozenset(items)), 0, 1)

    def _children(self) -> tuple[Sym, ...]:
        return self.items

    def _rebuild(self, children: tuple[Sym, ...]) -> Sym:
        return sym_and(*children)

    def _render(self, children: tuple[str, ...], var_name: Callable[[Var], str]) -> str:
        # '&' on 0/1 comparisons, not '&&': no branch, so loops need no if-conversion to vectorize
        return "(" + "&".join(children) + ")"


def sym(x: IntLike) -> Sym:
    """Coerce an int to a constant expression."""
    if isinstance(x, Sym):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"expected an int or symbolic expression, got {type(x).__name__}")
    return Num(x)


def sym_and(*items: Sym) -> Sym:
    """Conjunction of conditions; constant-folds and flattens."""
    flat: dict[Sym, None] = {}  # (a dict: ordered, and a repeat found in O(1), not by a scan)
    for it in items:
        if isinstance(it, Num):
            if it.value == 0:
                return Num(0)
            continue
        for sub in it.items if isinstance(it, And) else (it,):
            flat[sub] = None
    if not flat:
        return Num(1)
    return next(iter(flat)) if len(flat) == 1 else And(tuple(flat))


def count_divmod(x: Sym) -> int:
    """How many floor divisions and modulos an expression contains written out as a tree (a cost
    measure: what the rendered source computes)."""
    count: dict[int, int] = {}
    for e in _post_order(x):
        own = 1 if isinstance(e, (FloorDiv, Mod)) else 0
        count[id(e)] = own + sum(count[id(c)] for c in e._children())
    return count[id(x)]


def _same(a: Sym, b: Sym) -> bool:
    """Structural equality of two expressions, pair by pair with its own stack (comparing keys
    directly recursed once per level: two equal 1000-deep expressions overflowed the stack)."""
    stack, seen = [(a, b)], set()
    while stack:
        x, y = stack.pop()
        if x is y or (id(x), id(y)) in seen:
            continue
        seen.add((id(x), id(y)))
        if type(x) is not type(y) or x._hash != y._hash:
            return False
        if isinstance(x, (Lin, And)):  # unordered children: pair them by hash
            xs = x.terms if isinstance(x, Lin) else dict.fromkeys(x.items)
            ys = y.terms if isinstance(y, Lin) else dict.fromkeys(y.items)
            by_hash = {t._hash: (t, c) for t, c in ys.items()}
            if len(xs) != len(ys) or getattr(x, "const", 0) != getattr(y, "const", 0):
                return False
            if len(by_hash) != len(ys):  # two children with one hash: too rare to do better
                if x._key != y._key:
                    return False
                continue
            for t, c in xs.items():
                found = by_hash.get(t._hash)
                if found is None or found[1] != c:
                    return False
                stack.append((t, found[0]))
            continue
        if len(x._key) != len(y._key):
            return False
        for u, v in zip(x._key, y._key):
            if isinstance(u, Sym) and isinstance(v, Sym):
                stack.append((u, v))
            elif isinstance(u, Sym) or isinstance(v, Sym) or u != v:
                return False
    return True


def _post_order(root: Sym) -> list[Sym]:
    """The distinct nodes under ``root`` (by identity), each after its children; no recursion."""
    seen: set[int] = set()
    out: list[Sym] = []
    stack: list[tuple[Sym, bool]] = [(root, False)]
    while stack:
        x, expanded = stack.pop()
        if expanded:
            out.append(x)
        elif id(x) not in seen:
            seen.add(id(x))
            stack.append((x, True))
            stack.extend((c, False) for c in reversed(x._children()))
    return out


# --- canonical linear form ----------------------------------------------------------------------


def _linear(x: Sym) -> tuple[dict[Sym, int], int]:
    if isinstance(x, Num):
        return {}, x.value
    if isinstance(x, Lin):
        return dict(x.terms), x.const
    return {x: 1}, 0


def _add(a: tuple[dict[Sym, int], int], b: tuple[dict[Sym, int], int]) -> Sym:
    terms = dict(a[0])
    for k, c in b[0].items():
        terms[k] = terms.get(k, 0) + c
    return _build(terms, a[1] + b[1])


def _build(terms: dict[Sym, int], const: int) -> Sym:
    terms = {a: c for a, c in terms.items() if c != 0}
    const += _fold_divmod_pairs(terms)
    const += _fold_remainders(terms)
    if not terms:
        return Num(const)
    if len(terms) == 1 and const == 0:
        ((a, c),) = terms.items()
        if c == 1:
            return a
    return Lin(terms, const)


def _fold_divmod_pairs(terms: dict[Sym, int]) -> int:
    """Rewrite ``k*d*(x//d) + k*(x%d)`` as ``k*x`` in place (undoes a split of one axis in two).

    Returns the constant that the rewrite adds to the sum."""
    extra = 0
    for a in [t for t in terms if isinstance(t, Mod)]:
        if a not in terms:
            continue
        k, div = terms[a], FloorDiv(a.x, a.d)
        if terms.get(div) == k * a.d:
            del terms[a], terms[div]
            x_terms, x_const = _linear(a.x)
            for t, c in x_terms.items():
                terms[t] = terms.get(t, 0) + c * k
                if terms[t] == 0:
                    del terms[t]
            extra += x_const * k
    return extra


def _fold_remainders(terms: dict[Sym, int]) -> int:
    """Rewrite ``k*d*(x//d) - k*x`` as ``-k*(x % d)`` in place, for ``x`` an expression of
    symbolic sizes (``8*(n//8) - n``: the rows a tile of 8 leaves over, whose bounds the interval
    arithmetic of the two terms apart cannot tell). Returns the constant the rewrite adds."""
    extra = 0
    for a in [t for t in terms if isinstance(t, FloorDiv) and not isinstance(t.d, Sym)]:
        if a not in terms or terms[a] % a.d or not a.x.vars() or \
                not all(isinstance(v, Dim) for v in a.x.vars()):
            continue
        k = terms[a] // a.d
        x_terms, x_const = _linear(a.x)
        # (x without a constant: a rounding up, d*((x + d-1)//d) - x, stays as it is, so that a
        # size padded to whole tiles and then offset back is still seen to be a multiple of d)
        if not x_terms or x_const or any(terms.get(t) != -k * c for t, c in x_terms.items()):
            continue
        for t in x_terms:
            del terms[t]
        del terms[a]
        r = Mod(a.x, a.d) if not (0 <= a.x.vmin and a.x.vmax < a.d) else a.x
        terms[r] = terms.get(r, 0) - k
    return extra


def _split_by(x: Sym, d: int) -> tuple[Sym, Sym]:
    """Write x = d*q + r where q collects terms divisible by d and r the rest (0 <= coef(r) < d)."""
    terms, const = _linear(x)
    q_terms, r_terms = {}, {}
    for a, c in terms.items():
        q, r = divmod(c, d)
        if q:
            q_terms[a] = q
        if r:
            r_terms[a] = r
    q_const, r_const = divmod(const, d)
    return _build(q_terms, q_const), _build(r_terms, r_const)


def _drop_multiples(x: Sym, d: int) -> tuple[Sym, Sym]:
    """Write x = d*q + rest where q collects the terms whose coefficient is a multiple of d; ``rest``
    keeps every other term and the constant unchanged (so its bounds stay as tight as x's were)."""
    terms, const = _linear(x)
    q_terms = {a: c // d for a, c in terms.items() if c % d == 0}
    return _build(q_terms, 0), _build({a: c for a, c in terms.items() if c % d}, const)


@functools.lru_cache(maxsize=4096)
def _proper_divisors(d: int) -> tuple[int, ...]:
    """The divisors f of d with 1 < f < d, largest first (O(sqrt d), not O(d): d can be 2^21)."""
    low = [f for f in range(2, math.isqrt(d) + 1) if d % f == 0]
    return tuple(sorted({*low, *(d // f for f in low)} - {d}, reverse=True))


def _factor_out(x: Sym, d: int) -> tuple[int, Sym, Sym]:
    """Find the largest proper divisor f > 1 of d with x == f*big + small, 0 <= small < f, where
    ``big`` collects the terms whose coefficients f divides. Then x//d == big//(d/f) and
    x%d == f*(big%(d/f)) + small (a split of one axis in two, seen from the other side)."""
    terms, const = _linear(x)
    for f in _proper_divisors(d):
        big = {a: c // f for a, c in terms.items() if c % f == 0}
        if not big:
            continue
        small = _build({a: c for a, c in terms.items() if c % f}, const)
        if 0 <= small.vmin and small.vmax < f:
            return f, _build(big, 0), small
    return 1, x, Num(0)


def _common_factor(x: Sym, d: int) -> int:
    terms, const = _linear(x)
    g = d
    for c in terms.values():
        g = gcd(g, c)
    return gcd(g, const)


def _floordiv(x: Sym, d: IntLike) -> Sym:
    if isinstance(d, Num):
        d = d.value
    if isinstance(d, Sym):
        return _sym_floordiv(x, d)
    if not isinstance(d, int) or d <= 0:
        raise ValueError(f"symbolic floor division needs a positive int divisor, got {d!r}")
    if d == 1:
        return x
    if x.vmin // d == x.vmax // d:
        return Num(x.vmin // d)
    if isinstance(x, FloorDiv):
        return _floordiv(x.x, x.d * d)
    q, rest = _drop_multiples(x, d)  # floor((d*q + rest)/d) == q + floor(rest/d)
    if rest.vmin // d == rest.vmax // d:
        return q + rest.vmin // d
    q, r = _split_by(x, d)  # floor((d*q + r)/d) == q + floor(r/d) for integer q
    if not (isinstance(q, Num) and q.value == 0):
        return q + _floordiv(r, d)
    f, big, small = _factor_out(x, d)  # x == f*big + small with 0 <= small < f and f | d
    if f > 1:
        return _floordiv(big, d // f)
    g = _common_factor(x, d)
    if g > 1:
        return _floordiv(_divide_exact(x, g), d // g)
    return FloorDiv(x, d)


def _mod(x: Sym, d: IntLike) -> Sym:
    if isinstance(d, Num):
        d = d.value
    if isinstance(d, Sym):
        return _sym_mod(x, d)
    if not isinstance(d, int) or d <= 0:
        raise ValueError(f"symbolic modulo needs a positive int divisor, got {d!r}")
    if d == 1:
        return Num(0)
    if 0 <= x.vmin and x.vmax < d:
        return x
    if x.vmin // d == x.vmax // d:
        return x - (x.vmin // d) * d
    if isinstance(x, Mod) and x.d % d == 0:
        return _mod(x.x, d)
    _, rest = _drop_multiples(x, d)  # (d*q + rest) % d == rest % d
    if rest.vmin // d == rest.vmax // d:
        return rest - (rest.vmin // d) * d
    _, r = _split_by(x, d)
    if r != x:
        return _mod(r, d)
    f, big, small = _factor_out(x, d)
    if f > 1:
        return _mod(big, d // f) * f + small
    g = _common_factor(x, d)
    if g > 1:
        return _mod(_divide_exact(x, g), d // g) * g
    return Mod(x, d)


def _divide_exact(x: Sym, g: int) -> Sym:
    terms, const = _linear(x)
    return _build({a: c // g for a, c in terms.items()}, const // g)


# --- symbolic sizes: products, and division by a size --------------------------------------------


def _factors(x: Sym) -> tuple[Sym, ...]:
    return x.factors if isinstance(x, Prod) else (x,)


def _order(fs: list[Sym]) -> tuple[Sym, ...]:
    return tuple(sorted(fs, key=lambda f: (type(f).__name__, f._hash)))


def _monomial(fs: tuple[Sym, ...]) -> Sym:
    return fs[0] if len(fs) == 1 else Prod(_order(list(fs)))


def _product(a: Sym, b: Sym) -> Sym:
    """``a * b`` of two non-constant expressions, distributed over their linear forms."""
    ta, ca = _linear(a)
    tb, cb = _linear(b)
    terms: dict[Sym, int] = {}

    def put(t: Sym, c: int) -> None:
        terms[t] = terms.get(t, 0) + c

    for x, cx in ta.items():
        for y, cy in tb.items():
            put(_monomial(_factors(x) + _factors(y)), cx * cy)
        if cb:
            put(x, cx * cb)
    if ca:
        for y, cy in tb.items():
            put(y, ca * cy)
    return _build(terms, ca * cb)


def _monomial_divisor(d: Sym) -> tuple[int, tuple[Sym, ...]] | None:
    """``d`` as ``c * m`` (an int and a product of factors), or None for a sum."""
    terms, const = _linear(d)
    if const or len(terms) != 1:
        return None
    ((a, c),) = terms.items()
    return (c, _factors(a)) if c > 0 else None


def _divide_term(t: Sym, m: tuple[Sym, ...]) -> Sym | None:
    """``t / m`` when the factors ``m`` are among ``t``'s (a multiset), else None."""
    rest = list(_factors(t))
    for f in m:
        for i, g in enumerate(rest):
            if g == f:
                del rest[i]
                break
        else:
            return None
    return Num(1) if not rest else _monomial(tuple(rest))


def _upper(x: Sym) -> Sym:
    """A symbolic upper bound of ``x`` (a loop over a symbolic size is below that size)."""
    if isinstance(x, (Num, Dim)):
        return x
    if isinstance(x, BVar):
        return x.bound - 1
    if all(isinstance(v, Dim) for v in x.vars()):  # a size expression: exactly itself
        return x
    if isinstance(x, FloorDiv) and not isinstance(x.d, Sym) and x.x.vmin >= 0:
        return _upper(x.x) // x.d
    if isinstance(x, Mod) and isinstance(x.d, Sym):
        return x.d - 1
    if isinstance(x, Prod) and all(f.vmin >= 0 for f in x.factors):
        out: Sym = Num(1)
        for f in x.factors:
            out = out * _upper(f)
        return out
    if isinstance(x, Lin):
        out = Num(x.const)
        for a, c in x.terms.items():
            exact = a.vars() and all(isinstance(v, Dim) for v in a.vars())  # (a size: itself, either sign)
            out = out + (a * c if exact else _upper(a) * c if c > 0 else _lower(a) * c)
        return out
    return Num(x.vmax)


def _sized(x: Sym) -> bool:
    """Whether ``x`` involves a symbolic size or a loop over one."""
    return any(isinstance(v, (Dim, BVar)) for v in x.vars())


def _lower(x: Sym) -> Sym:
    """A symbolic lower bound of ``x`` (the counterpart of :func:`_upper`)."""
    if isinstance(x, (Num, Dim)):
        return x
    if isinstance(x, BVar):
        return Num(0)
    if all(isinstance(v, Dim) for v in x.vars()):
        return x
    if isinstance(x, Lin):
        out: Sym = Num(x.const)
        for a, c in x.terms.items():
            exact = a.vars() and all(isinstance(v, Dim) for v in a.vars())
            out = out + (a * c if exact else _lower(a) * c if c > 0 else _upper(a) * c)
        return out
    return Num(x.vmin)


def _below(x: Sym, m: Sym) -> bool:
    """Whether ``0 <= x < m`` provably (``m`` a symbolic size)."""
    if x.vmin < 0:
        return False
    if x.vmax < m.vmin:
        return True
    if isinstance(x, FloorDiv):  # y // d < m  <=>  y < m * d
        return _below(x.x, m * x.d)
    return (m - 1 - _upper(x)).vmin >= 0


def _split_divisible(x: Sym, m: tuple[Sym, ...]) -> tuple[Sym, Sym]:
    """``x == M*q + r`` with ``q`` the terms ``M`` (the product of ``m``) divides, ``r`` the rest."""
    terms, const = _linear(x)
    q: dict[Sym, int] = {}
    r: dict[Sym, int] = {}
    q_const = 0
    for t, c in terms.items():
        t_q = _divide_term(t, m)
        if t_q is None:
            r[t] = c
        elif isinstance(t_q, Num):
            q_const += c * t_q.value
        else:
            q[t_q] = q.get(t_q, 0) + c
    return _build(q, q_const), _build(r, const)


def _sym_floordiv(x: Sym, d: Sym) -> Sym:
    # (a size: positive, though bounds of a difference of products can say less, as S - (15*S)//16)
    if d.vmax < 1:
        raise ValueError(f"symbolic floor division needs a positive divisor, got {d!r}")
    mono = _monomial_divisor(d)
    if mono is None:
        return Num(0) if _below(x, d) else FloorDiv(x, d)
    c, m = mono
    if c > 1:  # x // (c*M) == (x // c) // M
        return _floordiv(_floordiv(x, c), _monomial(m))
    M = _monomial(m)
    if _below(x, M):
        return Num(0)
    q, r = _split_divisible(x, m)
    if isinstance(q, Num) and q.value == 0:
        return FloorDiv(x, M)
    if _below(r, M):
        return q
    return q + FloorDiv(r, M)


def _sym_mod(x: Sym, d: Sym) -> Sym:
    if d.vmax < 1:
        raise ValueError(f"symbolic modulo needs a positive divisor, got {d!r}")
    mono = _monomial_divisor(d)
    if mono is None:
        return x if _below(x, d) else Mod(x, d)
    c, m = mono
    if c > 1:  # x % (c*M) == c * ((x // c) % M) + x % c
        return _mod(_floordiv(x, c), _monomial(m)) * c + _mod(x, c)
    M = _monomial(m)
    if _below(x, M):
        return x
    q, r = _split_divisible(x, m)
    if isinstance(q, Num) and q.value == 0:
        return Mod(x, M)
    return r if _below(r, M) else Mod(r, M)
