"""Rebuilding part of a graph with some nodes substituted (graph-to-graph transforms use it).

Only marked nodes contain a VAR (``Node.marked``: traced ones, and those over a DETACH of a
traced one; no gradient passes a DETACH, but the VARs under it are there), so only they are
visited: everything else is shared with the original graph. Rebuilt nodes go through :func:`corvid.graph.node.node`,
so a rebuilt node that already exists (say ``f(x)`` computed earlier on the unmarked ``x``) is
that node, buffer included; a DETACH whose source is left with no VAR is that source.

(Until DETACH nodes were visited, a transform's VARs stayed under them: ``x.max().detach()``
inside ``jit(value_and_grad(f))`` then read a second copy of everything below, a language
model's whole forward pass computed twice, the copy under the DETACH still over the marks.)
"""

from __future__ import annotations

from typing import Callable

from ..graph.node import Node, Op, node, toposort


Replace = Callable[[Node, tuple[Node, ...]], "Node | None"]


def rewrite(roots: list[Node], replace: Replace, stop: Callable[[Node], bool] = lambda n: False,
            memo: dict[int, tuple[Node, Node]] | None = None) -> list[Node]:
    """``roots`` rebuilt bottom-up: ``replace(n, srcs)`` gets each traced node with its rewritten
    sources and returns its substitute, or None to rebuild it over those sources.

    The walk does not descend below nodes where ``stop(n)`` is true: they are passed to
    ``replace`` with their original sources. ``memo`` (id of original -> (original, new)) can be
    shared between calls that rewrite parts of one graph the same way."""
    memo = {} if memo is None else memo
    order = toposort(roots, stop=lambda n: not n.marked or id(n) in memo or stop(n))
    for n in order:
        if id(n) in memo:
            continue
        if not n.marked:
            new = n
        else:
            expanded = not stop(n)
            srcs = tuple(memo[id(s)][1] for s in n.src) if expanded else n.src
            new = replace(n, srcs)
            if new is None:
                same = all(a is b for a, b in zip(srcs, n.src))
                if same:
                    new = n
                elif n.op is Op.DETACH and not srcs[0].marked:
                    new = srcs[0]  # (nothing left to stop: the plain value itself)
                else:
                    new = node(n.op, srcs, n.arg, n.dtype, n.shape)
        memo[id(n)] = (n, new)
    return [memo[id(r)][1] for r in roots]
