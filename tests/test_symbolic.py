"""The index simplifier (corvid.graph.symbolic): simplified expressions must evaluate exactly like
Python ints for every assignment of their variables, with sound bounds, and must be small."""

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from corvid.graph.symbolic import And, Cmp, FloorDiv, Lin, Mod, Num, Sym, Var, count_divmod, sym, sym_and

A, B, C = Var("a", 0, 3), Var("b", 0, 4), Var("c", -2, 2)
VARS = (A, B, C)


def ev(e: Sym, env: dict) -> int:
    """Evaluate a simplified expression with Python int semantics."""
    if isinstance(e, Num):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Lin):
        return e.const + sum(c * ev(a, env) for a, c in e.terms.items())
    if isinstance(e, FloorDiv):
        return ev(e.x, env) // e.d
    if isinstance(e, Mod):
        return ev(e.x, env) % e.d
    if isinstance(e, Cmp):
        x = ev(e.x, env)
        return int(x < e.c) if e.op == "<" else int(x >= e.c)
    if isinstance(e, And):
        return int(all(ev(i, env) for i in e.items))
    raise AssertionError(f"unknown node {type(e).__name__}")


def ev_rendered(e: Sym, env: dict) -> int:
    """Evaluate the C-like rendering (C division truncates; helpers floor)."""
    src = e.render(lambda v: f"env_{v.name}").replace("&&", " and ").replace("/", "//")
    ns = {f"env_{v.name}": val for v, val in env.items()}

    def trunc_div(a, b):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b > 0) else -q

    # C '/' and '%' on the rendered operands: only sound if those operands are non-negative
    ns["cv_floordiv"] = lambda a, b: a // b
    ns["cv_floormod"] = lambda a, b: a % b
    return int(eval(src, ns))


def assignments(vs):
    vs = sorted(vs, key=lambda v: v.name)
    for vals in itertools.product(*(range(v.vmin, v.vmax + 1) for v in vs)):
        yield dict(zip(vs, vals))


def subexprs(e: Sym):
    yield e
    for c in e._children():
        yield from subexprs(c)


def check_sound(e: Sym, ref, vs=VARS) -> None:
    """e evaluates like ref (a function of the env) everywhere, every subexpression stays in its bounds,
    and every '/' or '%' the renderer emits has a non-negative operand."""
    subs = list(subexprs(e))
    for s in subs:
        assert s.vmin <= s.vmax, s
        if isinstance(s, (FloorDiv, Mod)) and s.x.vmin >= 0:
            pass  # rendered with C / or %: checked through the bounds below
    for env in assignments(vs):
        want = ref(env)
        assert ev(e, env) == want, (e, env, want)
        assert ev_rendered(e, env) == want, (e.render(), env, want)
        for s in subs:
            v = ev(s, env)
            assert s.vmin <= v <= s.vmax, (s, env, v, s.vmin, s.vmax)


# --- hypothesis: random expression trees ------------------------------------------------------------

def _leaf():
    return st.one_of(st.sampled_from([("var", v) for v in VARS]), st.integers(-7, 7).map(lambda c: ("num", c)))


def _node(children):
    return st.one_of(
        st.tuples(st.just("add"), children, children),
        st.tuples(st.just("sub"), children, children),
        st.tuples(st.just("mul"), children, st.integers(-4, 6)),
        st.tuples(st.just("div"), children, st.integers(1, 7)),
        st.tuples(st.just("mod"), children, st.integers(1, 7)),
    )


exprs = st.recursive(_leaf(), _node, max_leaves=8)


def build(t) -> Sym:
    op = t[0]
    if op == "var":
        return t[1]
    if op == "num":
        return sym(t[1])
    if op == "add":
        return build(t[1]) + build(t[2])
    if op == "sub":
        return build(t[1]) - build(t[2])
    if op == "mul":
        return build(t[1]) * t[2]
    if op == "div":
        return build(t[1]) // t[2]
    if op == "mod":
        return build(t[1]) % t[2]
    raise AssertionError(op)


def ref(t, env) -> int:
    op = t[0]
    if op == "var":
        return env[t[1]]
    if op == "num":
        return t[1]
    if op == "add":
        return ref(t[1], env) + ref(t[2], env)
    if op == "sub":
        return ref(t[1], env) - ref(t[2], env)
    if op == "mul":
        return ref(t[1], env) * t[2]
    if op == "div":
        return ref(t[1], env) // t[2]
    return ref(t[1], env) % t[2]


@settings(max_examples=400, deadline=None)
@given(exprs)
def test_random_expressions_evaluate_like_python(t):
    check_sound(build(t), lambda env: ref(t, env))


@settings(max_examples=200, deadline=None)
@given(exprs, st.integers(-8, 8), st.sampled_from(["lt", "ge"]))
def test_random_comparisons(t, c, op):
    e = build(t)
    cmp = e.lt(c) if op == "lt" else e.ge(c)
    check_sound(cmp, lambda env: int(ref(t, env) < c) if op == "lt" else int(ref(t, env) >= c))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(exprs, st.integers(-6, 6), st.booleans()), min_size=0, max_size=4))
def test_random_conjunctions(items):
    conds = [build(t).lt(c) if lt else build(t).ge(c) for t, c, lt in items]
    e = sym_and(*conds)

    def want(env):
        return int(all((ref(t, env) < c) if lt else (ref(t, env) >= c) for t, c, lt in items))

    check_sound(e, want)
    assert sym_and(e, e) == e  # idempotent
    assert sym_and(e, Num(1)) == e and sym_and(e, Num(0)) == Num(0)


@settings(max_examples=200, deadline=None)
@given(exprs, exprs, st.integers(0, 2))
def test_random_substitution(t, s, which):
    """Substituting a variable by an expression with values in its range evaluates like Python."""
    v = VARS[which]
    size = v.vmax - v.vmin + 1
    repl = (build(s) % size) + v.vmin  # always inside v's range
    e = build(t).substitute({v: repl})

    def want(env):
        env2 = dict(env)
        env2[v] = ref(s, env) % size + v.vmin
        return ref(t, env2)

    check_sound(e, want)


@settings(max_examples=150, deadline=None)
@given(exprs)
def test_loop_merge_substitution(t):
    """What merge_loops does: a, b -> f // 5, f % 5 over one merged variable f."""
    f = Var("f", 0, 4 * 5 - 1)
    e = build(t).substitute({A: f // 5, B: f % 5})

    def want(env):
        fv = env[f]
        return ref(t, {A: fv // 5, B: fv % 5, C: env[C]})

    check_sound(e, want, vs=(f, C))


# --- exhaustive small-range checks ------------------------------------------------------------------

@pytest.mark.parametrize("d", range(1, 9))
def test_floordiv_mod_of_linear_forms(d):
    for ca, cb, k in itertools.product(range(-5, 7), range(-3, 4), range(-9, 10)):
        e = A * ca + B * cb + k
        check_sound(e // d, lambda env: (env[A] * ca + env[B] * cb + k) // d, vs=(A, B))
        check_sound(e % d, lambda env: (env[A] * ca + env[B] * cb + k) % d, vs=(A, B))


@pytest.mark.parametrize("d1,d2", [(2, 3), (3, 2), (4, 4), (6, 2), (2, 6), (5, 7)])
def test_nested_division_and_modulo(d1, d2):
    x = A * 5 + B * 3 + C - 4
    val = lambda env: env[A] * 5 + env[B] * 3 + env[C] - 4  # noqa: E731
    check_sound(x // d1 // d2, lambda env: val(env) // d1 // d2)
    check_sound(x % d1 % d2, lambda env: val(env) % d1 % d2)
    check_sound((x % (d1 * d2)) % d2, lambda env: val(env) % (d1 * d2) % d2)
    check_sound((x // d1) % d2, lambda env: val(env) // d1 % d2)
    check_sound((x % d1) // d2, lambda env: val(env) % d1 // d2)
    check_sound(x // d1 * d1 + x % d1, val)


def test_comparisons_exhaustive():
    x = A * 2 - B + C
    for c in range(-10, 12):
        check_sound(x.lt(c), lambda env: int(env[A] * 2 - env[B] + env[C] < c))
        check_sound(x.ge(c), lambda env: int(env[A] * 2 - env[B] + env[C] >= c))
    # decided statically from the bounds
    assert x.lt(x.vmax + 1) == Num(1) and x.lt(x.vmin) == Num(0)
    assert x.ge(x.vmin) == Num(1) and x.ge(x.vmax + 1) == Num(0)


def test_sym_and_folding():
    p, q = A.lt(2), B.ge(3)
    assert sym_and() == Num(1)
    assert sym_and(p) == p
    assert sym_and(p, Num(1)) == p
    assert sym_and(p, Num(0), q) == Num(0)
    assert sym_and(p, q) == sym_and(q, p)
    assert sym_and(sym_and(p, q), p) == sym_and(p, q)
    check_sound(sym_and(p, q, C.ge(0)), lambda env: int(env[A] < 2 and env[B] >= 3 and env[C] >= 0))


# --- strength -----------------------------------------------------------------------------------

def test_reshape_round_trip():
    i, j = Var("i", 0, 3), Var("j", 0, 5)
    flat = i * 6 + j
    assert (flat // 6, flat % 6) == (i, j)
    assert flat // 6 * 6 + flat % 6 == flat
    # (4,6) -> (24,) -> (2,12) -> (24,) -> (4,6)
    f2 = (flat // 12) * 12 + flat % 12
    assert f2 == flat
    assert (f2 // 6) % 4 == i and f2 % 6 == j
    # 3-d: (2,3,4) flattened and unflattened
    a, b, c = Var("x", 0, 1), Var("y", 0, 2), Var("z", 0, 3)
    f = a * 12 + b * 4 + c
    assert ((f // 12) % 2, (f // 4) % 3, f % 4) == (a, b, c)
    assert count_divmod(f // 12) == 0 and count_divmod((f // 4) % 3) == 0


@pytest.mark.parametrize("d", [2, 3, 4, 7])
def test_divmod_recombination(d):
    x = Var("x", 0, 50)
    assert d * (x // d) + x % d == x
    assert (x // d) * d + x % d == x
    assert x % d + (x // d) * d - x == Num(0)
    y = Var("y", -20, 20)
    assert d * (y // d) + y % d == y
    # scaled by a common factor k
    assert 3 * d * (x // d) + 3 * (x % d) == 3 * x
    # of a linear expression
    e = x * 2 + y + 1
    assert d * (e // d) + e % d == e


def test_redundant_divmod_disappears():
    i = Var("i", 0, 5)
    assert i // 6 == Num(0) and i % 6 == i and i // 1 == i and i % 1 == Num(0)
    assert (i + 6) // 6 == Num(1) and (i + 6) % 6 == i
    assert (i * 4) % 2 == Num(0) and (i * 4) // 2 == i * 2
    assert (i * 4 + 2) // 2 == i * 2 + 1


def test_flip_inside_reshape_simplifies():
    """Reversed index 5 - j (a flip) combined with a row offset: no division or modulo needed."""
    i, j = Var("i", 0, 3), Var("j", 0, 5)
    flat = i * 6 + (5 - j)
    assert flat // 6 == i
    assert flat % 6 == 5 - j
    assert count_divmod((flat // 6) % 4) == 0


def test_step_slice_simplifies():
    """x[::2] on a length-8 axis: pad/reshape (4,2)/take column 0 gives index 2*i."""
    i = Var("i", 0, 3)
    flat = i * 2  # index into the (4, 2) view, column 0
    assert (flat // 2) % 4 == i and flat % 2 == Num(0)


def test_bounds_are_tight_for_simple_forms():
    i, j = Var("i", 0, 3), Var("j", 0, 5)
    e = i * 6 + j
    assert (e.vmin, e.vmax) == (0, 23)
    e = 5 - j
    assert (e.vmin, e.vmax) == (0, 5)
    assert ((i * 6 + j) // 4).vmax == 5


def test_hash_consing_by_value():
    i = Var("i", 0, 3)
    assert (i * 2 + 1) == (1 + 2 * i) and hash(i * 2 + 1) == hash(1 + 2 * i)
    assert len({i * 2 + 1, 1 + i * 2, (i + 1) * 2 - 1}) == 1
    assert Var("i", 0, 3) == i and Var("i", 0, 4) != i


def test_invalid_operands():
    i = Var("i", 0, 3)
    with pytest.raises(ValueError, match="positive"):
        i // 0
    with pytest.raises(ValueError, match="positive"):
        i % -2
    with pytest.raises(TypeError):
        i * 1.5
    with pytest.raises(ValueError, match="empty range"):
        Var("k", 3, 2)
    with pytest.raises(TypeError):
        sym(1.5)


def test_split_axis_seen_from_the_other_side():
    """(6*i + j) // 12 with 0 <= j < 6 is i // 2 (reshape (4,6)->(2,2,6) then permute)."""
    i, j = Var("i", 0, 3), Var("j", 0, 5)
    flat = i * 6 + j
    assert flat // 12 == i // 2
    assert flat % 12 == (i % 2) * 6 + j
    assert count_divmod(flat // 12) == 1 and count_divmod(flat % 12) == 1
    check_sound(flat // 12, lambda env: (env[i] * 6 + env[j]) // 12, vs=(i, j))
    check_sound(flat % 12, lambda env: (env[i] * 6 + env[j]) % 12, vs=(i, j))


def _permuting_rounds(n: int) -> Sym:
    """``n`` rounds of a flip-and-transpose of a 4x3 grid: each reads the last index twice, so the
    expression shares nodes (about 10 per round) while written out it doubles per round."""
    x: Sym = Var("i", 0, 11)
    for _ in range(n):
        y = 11 - x
        x = y // 3 + (y % 3) * 4
    return x


def test_walks_visit_shared_nodes_once():
    x, i = _permuting_rounds(60), Var("i", 0, 11)
    assert x.tree_size > 2 ** 60  # (walked as a tree, nothing below would finish)
    assert count_divmod(x) > 2 ** 60
    assert x.vars() == {i}
    for k in range(12):
        want = k
        for _ in range(60):
            want = (11 - want) // 3 + ((11 - want) % 3) * 4
        assert x.substitute({i: Num(k)}) == Num(want)


def test_deep_expressions_need_no_recursion():
    def deep() -> Sym:
        x: Sym = Var("i", 0, 6)
        for _ in range(5000):
            x = (x % 7) * 2 + 1
        return x

    a, b = deep(), deep()
    assert a is not b and a == b and hash(a) == hash(b)
    assert a != deep() + 1
    j = Var("j", 0, 6)
    moved = a.substitute({Var("i", 0, 6): j})
    # (the first i % 7 is i: i is already in [0, 6])
    assert moved.vars() == {j} and count_divmod(moved) == 4999
    assert moved.render().count("%7") == 4999


def test_tree_size_counts_the_written_out_expression():
    i, j = Var("i", 0, 3), Var("j", 0, 5)
    assert i.tree_size == 1 and Num(3).tree_size == 1
    assert (i * 6 + j).tree_size == 3  # Lin over i and j
    assert FloorDiv(i * 6 + j, 5).tree_size == 4 and sym_and(i.lt(2), j.ge(1)).tree_size == 5
