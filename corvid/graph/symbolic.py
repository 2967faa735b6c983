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
from math import gcd
from typing import Callable, Union

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
        return _add(_linear(self), _linear(sym(other)))

    __radd__ = __add__

    def __neg__(self) -> Sym:
        return self * -1

    def __sub__(self, other: IntLike) -> Sym:
        return self + (-sym(other))

    def __rsub__(self, other: IntLike) -> Sym:
        return sym(other) + (-self)

    def __mul__(self, other: IntLike) -> Sym:
        if isinstance(other, Sym):
            if not isinstance(other, Num):
                if isinstance(self, Num):
                    return other * self.value
                raise TypeError("symbolic index expressions only multiply by constants")
            other = other.value
        terms, const = _linear(self)
        return _build({a: c * other for a, c in terms.items()}, const * other)

    __rmul__ = __mul__

    def __floordiv__(self, d: int) -> Sym:
        return _floordiv(self, d)

    def __mod__(self, d: int) -> Sym:
        return _mod(self, d)

    # comparisons build boolean expressions (0/1 valued); they do not return Python bools -------
    def lt(self, c: int) -> Sym:
        """``self < c`` as a 0/1 expression, decided statically when the bounds allow it."""
        if self.vmax < c:
            return Num(1)
        if self.vmin >= c:
            return Num(0)
        return Cmp(self, "<", c)

    def ge(self, c: int) -> Sym:
        """``self >= c`` as a 0/1 expression."""
        if self.vmin >= c:
            return Num(1)
        if self.vmax < c:
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

    def __repr__(self) -> str:
        return self.render()


class Num(Sym):
    """An integer constant."""

    __slots__ = ("value",)

    def __init__(self, value: int):
        self.value = int(value)
        self._init(("num", self.value), self.value, self.value)

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
    __slots__ = ("x", "d")

    def __init__(self, x: Sym, d: int):
        self.x, self.d = x, d
        self._init(("div", x, d), x.vmin // d, x.vmax // d)

    def _children(self) -> tuple[Sym, ...]:
        return (self.x,)

    def _rebuild(self, children: tuple[Sym, ...]) -> Sym:
        return children[0] // self.d

    def _render(self, children: tuple[str, ...], var_name: Callable[[Var], str]) -> str:
        (x,) = children
        return f"({x}/{self.d})" if self.x.vmin >= 0 else f"cv_floordiv({x},{self.d})"


class Mod(Sym):
    __slots__ = ("x", "d")

    def __init__(self, x: Sym, d: int):
        self.x, self.d = x, d
        self._init(("mod", x, d), 0, d - 1)

    def _children(self) -> tuple[Sym, ...]:
        return (self.x,)

    def _rebuild(self, children: tuple[Sym, ...]) -> Sym:
        return children[0] % self.d

    def _render(self, children: tuple[str, ...], var_name: Callable[[Var], str]) -> str:
        (x,) = children
        return f"({x}%{self.d})" if self.x.vmin >= 0 else f"cv_floormod({x},{self.d})"


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


def _floordiv(x: Sym, d: int) -> Sym:
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


def _mod(x: Sym, d: int) -> Sym:
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
