"""Einstein summation (numpy's ``einsum``) from views, broadcast multiplies and sums.

Each operand is first reduced on its own: a label repeated in one operand takes the diagonal
(a strided view), and a label found nowhere else is summed out. Then operands are contracted
two at a time, always the pair whose result is smallest (so no outer product is formed while a
contraction is available). A pair becomes one broadcast multiply followed by one sum over the
labels no other operand or the output needs, with the axes ordered ``(shared kept, left only,
right only, contracted)``: the layout of ``matmul``, so a contraction compiles to the same fused
and vectorized reduce kernel. The last operand is permuted into the output order (a view).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..errors import ShapeError
from .manipulation import diagonal

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = ["einsum"]

Label = str | int  # letters, and ints for the axes covered by an ellipsis (right-aligned)


def _letter(i: Any) -> str:
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < 52:
        raise ValueError(f"einsum: sublist entries must be ints in [0, 52) or Ellipsis, got {i!r}")
    return chr(ord("a") + i) if i < 26 else chr(ord("A") + i - 26)


def _from_sublists(args: tuple[Any, ...]) -> tuple[str, list[Any]]:
    """numpy's interleaved form ``einsum(op0, sublist0, op1, sublist1, ..., [sublist_out])``."""
    term = lambda sub: "".join("..." if s is Ellipsis else _letter(s) for s in sub)  # noqa: E731
    operands, terms = list(args[0::2]), [term(s) for s in args[1::2]]
    if len(args) % 2:
        return ",".join(terms) + "->" + term(args[-1]), operands[:-1]
    return ",".join(terms), operands


def _parse_term(term: str, ndim: int | None, where: str) -> tuple[list[str], int]:
    """Letters of ``term`` with ``"..."`` as one ``"."`` entry, and the number of ellipsis axes."""
    if term.count("...") > 1 or term.replace("...", "").count("."):
        raise ValueError(f"einsum: {where} {term!r} has an invalid ellipsis (use '...' at most once)")
    items = list(term.replace("...", "."))
    bad = [c for c in items if c != "." and not ("a" <= c <= "z" or "A" <= c <= "Z")]
    if bad:
        raise ValueError(f"einsum: invalid subscript {bad[0]!r} in {where} {term!r} (letters only)")
    letters = len(items) - items.count(".")
    if ndim is None:
        return items, 0
    if ("." in items and letters > ndim) or ("." not in items and letters != ndim):
        raise ValueError(f"einsum: {where} {term!r} has {letters} subscripts for an operand with {ndim} dimensions")
    return items, ndim - letters


def _expand_labels(items: list[str], n_ell: int, width: int) -> list[Label]:
    out: list[Label] = []
    for c in items:
        out.extend(range(width - n_ell, width) if c == "." else [c])
    return out


def einsum(subscripts: Any, *operands: Any) -> Tensor:
    """Einstein summation with numpy's syntax: ``"ij,jk->ik"``, implicit output (``"ij,jk"``:
    the labels that appear once, sorted, after the ellipsis axes), ``...`` for broadcast axes,
    repeated labels for diagonals (``"ii->i"``, ``"ii"``), and the interleaved form
    ``einsum(a, [0, 1], b, [1, 2], [0, 2])``. Size-1 axes broadcast against their label's size.

    The result dtype is the promotion of the operands' dtypes (as numpy). ValueError naming the
    subscripts and shapes for a wrong number of operands or subscripts, an invalid character,
    labels with different sizes, or output labels that are repeated or missing from the inputs.

    >>> einsum("ij,jk->ik", cv.ones(2, 3), cv.ones(3, 4)).shape
    (2, 4)
    """
    from ..tensor import Tensor, result_type

    if not isinstance(subscripts, str):
        subscripts, ops = _from_sublists((subscripts,) + operands)
    else:
        ops = list(operands)
    tensors = [t if isinstance(t, Tensor) else Tensor(t) for t in ops]
    spec = subscripts.replace(" ", "")
    if spec.count("->") > 1 or ("-" in spec.replace("->", "")) or (">" in spec.replace("->", "")):
        raise ValueError(f"einsum: invalid subscripts {subscripts!r}")
    lhs, arrow, rhs = spec.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(tensors) or not tensors:
        raise ValueError(f"einsum: subscripts {subscripts!r} name {len(terms)} operands, got {len(tensors)}")
    parsed = [_parse_term(term, t.ndim, f"operand {i}") for i, (term, t) in enumerate(zip(terms, tensors))]
    width = max(n for _, n in parsed)
    labels = [_expand_labels(items, n, width) for items, n in parsed]

    sizes: dict[Label, int] = {}
    for i, (ls, t) in enumerate(zip(labels, tensors)):
        for label, size in zip(ls, t.shape):
            known = sizes.get(label, 1)
            if size != known and 1 not in (size, known):
                shapes = ", ".join(str(x.shape) for x in tensors)
                name = "an ellipsis axis" if isinstance(label, int) else f"label {label!r}"
                raise ShapeError(f"einsum: {name} has sizes {known} and {size} in {subscripts!r} for shapes {shapes}")
            sizes[label] = max(size, known) if label in sizes else size

    if arrow:
        items, _ = _parse_term(rhs, None, "output")
        out = _expand_labels(items, width if "." in items else 0, width)
        if width and "." not in items:
            raise ShapeError(f"einsum: the output {rhs!r} needs '...' for the broadcast axes of {subscripts!r}")
        letters = [c for c in out if isinstance(c, str)]
        if len(set(letters)) != len(letters):
            raise ValueError(f"einsum: output {rhs!r} repeats a label")
        missing = [c for c in letters if c not in sizes]
        if missing:
            raise ValueError(f"einsum: output label {missing[0]!r} of {subscripts!r} is in no operand")
    else:
        counts: dict[Label, int] = {}
        for ls in labels:
            for label in ls:
                counts[label] = counts.get(label, 0) + 1
        out = list(range(width)) + sorted(c for c, k in counts.items() if isinstance(c, str) and k == 1)

    common = result_type(*tensors)
    terms_now = [_reduce_alone(t.astype(common), ls, labels[:i] + labels[i + 1:], out)
                 for i, (t, ls) in enumerate(zip(tensors, labels))]
    while len(terms_now) > 1:
        i, j = _cheapest_pair(terms_now, out, sizes)
        rest = [ls for k, (_, ls) in enumerate(terms_now) if k not in (i, j)]
        merged = _contract(terms_now[i], terms_now[j], rest, out)
        terms_now = [merged] + [tm for k, tm in enumerate(terms_now) if k not in (i, j)]
    t, ls = _reduce_alone(*terms_now[0], [], out)
    t = t.expand(tuple(sizes[label] for label in ls))  # size-1 axes broadcast against other operands
    result = t.permute([ls.index(label) for label in out]) if ls else t
    return result.astype(common)


def _reduce_alone(t: Tensor, ls: list[Label], others: list[list[Label]],
                  out: list[Label]) -> tuple[Tensor, list[Label]]:
    """Diagonals for repeated labels, then a sum over the labels no other operand or the output has."""
    ls = list(ls)
    while len(set(ls)) != len(ls):
        label = next(lb for lb in ls if ls.count(lb) > 1)
        a = ls.index(label)
        b = ls.index(label, a + 1)
        if t.shape[a] != t.shape[b]:  # a size-1 axis broadcasts against the other
            shape = list(t.shape)
            shape[a] = shape[b] = max(t.shape[a], t.shape[b])
            t = t.expand(tuple(shape))
        t = diagonal(t, 0, a, b)                      # the diagonal becomes the last axis
        ls = [lb for k, lb in enumerate(ls) if k not in (a, b)] + [label]
    needed = set(out).union(*others)
    drop = [k for k, lb in enumerate(ls) if lb not in needed]
    if drop:
        t = t.sum(tuple(drop))
        ls = [lb for k, lb in enumerate(ls) if k not in drop]
    return t, ls


def _cheapest_pair(terms: list[tuple[Tensor, list[Label]]], out: list[Label],
                   sizes: dict[Label, int]) -> tuple[int, int]:
    best, pick = None, (0, 1)
    for i in range(len(terms)):
        for j in range(i + 1, len(terms)):
            rest = set(out).union(*(ls for k, (_, ls) in enumerate(terms) if k not in (i, j)))
            kept = (set(terms[i][1]) | set(terms[j][1])) & rest
            cost = math.prod(sizes[label] for label in kept)
            if best is None or cost < best:
                best, pick = cost, (i, j)
    return pick


def _contract(a: tuple[Tensor, list[Label]], b: tuple[Tensor, list[Label]], rest: list[list[Label]],
              out: list[Label]) -> tuple[Tensor, list[Label]]:
    """One broadcast multiply and sum, axes ordered (shared kept, a only, b only, contracted)."""
    (ta, la), (tb, lb) = a, b
    keep = set(out).union(*rest)
    shared = [lab for lab in la if lab in lb]
    order = ([lab for lab in shared if lab in keep] + [lab for lab in la if lab not in lb]
             + [lab for lab in lb if lab not in la])
    summed = [lab for lab in shared if lab not in keep]

    def aligned(t: Tensor, ls: list[Label]) -> Tensor:
        present = [lab for lab in order + summed if lab in ls]
        t = t.permute([ls.index(lab) for lab in present]) if ls else t
        return t.reshape(tuple(t.shape[present.index(lab)] if lab in ls else 1 for lab in order + summed))

    prod = aligned(ta, la) * aligned(tb, lb)
    if summed:
        prod = prod.sum(tuple(range(len(order), len(order) + len(summed))))
    return prod, order
