"""The engine: realize, CORVID_DEBUG output, memory (freeing and pooling), the NULL device, caches."""

import gc
import weakref

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import corvid as cv
from corvid.engine import schedule as sched_mod
from corvid.runtime.device import get_device


def test_debug_levels_print_what_they_promise(monkeypatch, capsys):
    x = cv.Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    monkeypatch.setenv("CORVID_DEBUG", "1")
    (x * 3 + 1).realize()
    err = capsys.readouterr().err
    assert "realize: 1 kernel in" in err and "ms" in err
    monkeypatch.setenv("CORVID_DEBUG", "2")
    (x * 5 + 2).sum(axis=1).realize()
    err = capsys.readouterr().err
    assert "GFLOP/s" in err and "GB/s" in err and "r_3" in err
    monkeypatch.setenv("CORVID_DEBUG", "3")
    (x * 7 - 2).realize()
    assert "void E_12(" in capsys.readouterr().err
    monkeypatch.setenv("CORVID_DEBUG", "4")
    (x * 9 - 2).realize()
    assert "digraph corvid" in capsys.readouterr().err


def test_intermediate_buffers_are_freed_and_reused():
    alloc = get_device("CPU").allocator
    alloc.clear_pool()
    x = cv.Tensor(np.ones((256, 256), np.float32))
    y = (x * 2).contiguous()
    z = (y + 1).sum()
    assert z.item() == 3 * 256 * 256
    y_node = weakref.ref(y.node)
    del y
    gc.collect()
    assert y_node() is None  # nothing keeps the intermediate alive once z is realized
    pooled = alloc._pool.get(256 * 256 * 4, [])
    assert len(pooled) >= 1  # its memory went back to the pool
    handle = pooled[-1]
    w = (x * 4).realize()  # same size: takes the pooled block instead of fresh memory
    assert w.node.buffer.handle is handle
    np.testing.assert_array_equal(w.numpy(), np.full((256, 256), 4, np.float32))


def test_buffer_lives_while_a_graph_needs_it():
    x = cv.Tensor(np.arange(4, dtype=np.float32))
    y = x.exp().realize()
    lazy = y * 2  # refers to y's buffer
    del y
    gc.collect()
    np.testing.assert_allclose(lazy.numpy(), np.exp(np.arange(4)) * 2, rtol=1e-6)


def test_realized_subexpression_is_not_recomputed():
    x = cv.Tensor(np.random.rand(64, 64).astype(np.float32))
    m = x.max(axis=1, keepdims=True)
    m.realize()
    out = x - m
    ks = out.schedule()
    assert len(ks) == 1 and all(inp.buffer is not None for inp in ks[0].inputs)


def test_null_device_runs_the_pipeline_without_executing():
    x = cv.Tensor(np.random.rand(32, 32).astype(np.float32), device="NULL")
    y = (x @ x).softmax(-1)
    ks = y.schedule()
    assert ks and all("void" in k.source for k in ks)
    assert y.numpy().shape == (32, 32)  # runs everything; values are zeros on NULL
    assert not y.numpy().any()


def test_lowering_is_cached_by_graph_structure():
    a = cv.Tensor(np.random.rand(17, 3).astype(np.float32))
    b = cv.Tensor(np.random.rand(17, 3).astype(np.float32))
    k1 = ((a * 3).exp() + 1).schedule()[0]
    k2 = ((b * 3).exp() + 1).schedule()[0]
    assert k1.compiled is k2.compiled  # same structure, different buffers: lowered once
    k3 = ((b * 4).exp() + 1).schedule()[0]
    assert k3.compiled is k1.compiled  # 3 and 4 are runtime constants: the same kernel reads either
    assert k3.inputs[-1].buffer.numpy().tolist() == [4.0] and k1.inputs[-1].buffer.numpy().tolist() == [3.0]
    k4 = ((b * 4).exp() - 1).schedule()[0]
    assert k4.compiled is not k1.compiled  # another op: another kernel
    np.testing.assert_allclose(((b * 4).exp() + 1).numpy(), np.exp(b.numpy() * 4) + 1, rtol=1e-6)
    np.testing.assert_allclose(((b * 3).exp() + 1).numpy(), np.exp(b.numpy() * 3) + 1, rtol=1e-6)


def test_runtime_constants_keep_values_exact_and_literals_stay_literals():
    # a float16 constant is rounded to float16 before it reaches the kernel, as a literal would be
    x = np.linspace(-3, 3, 50).astype(np.float16)
    np.testing.assert_array_equal((cv.Tensor(x) * 0.1).numpy(), x * np.float16(0.1))
    y = np.linspace(-3, 3, 50)
    np.testing.assert_array_equal((cv.Tensor(y) * 0.1).numpy(), y * 0.1)
    np.testing.assert_array_equal((cv.Tensor(y) - 1e-300).numpy(), y - 1e-300)
    src = (cv.Tensor(y) * 0.5 + 1.0).schedule()[0]
    assert len(src.inputs) == 1 and "0.5" in src.source  # baked: no constants buffer
    lr_kernels = set()
    w = cv.Tensor(y)
    for lr in (0.1, 0.01, 0.003):  # a changing learning rate compiles one kernel
        step = w - lr * w
        lr_kernels.add(id(step.schedule()[0].compiled))
        np.testing.assert_allclose(step.numpy(), y - lr * y, rtol=1e-15)
    assert len(lr_kernels) == 1
    f = cv.jit(lambda t, s: t * s)  # under jit a Python scalar argument is static, as before
    assert f(cv.Tensor(y), 0.3).tolist() == (y * 0.3).tolist() and f(cv.Tensor(y), 0.7).tolist() == (y * 0.7).tolist()


def test_schedule_runs_nothing_and_realize_runs_it_once():
    x = cv.Tensor(np.arange(6, dtype=np.float32))
    y = x * 2
    assert len(y.schedule()) == 1 and y.node.buffer is None
    y.realize()
    assert y.schedule() == []
    np.testing.assert_array_equal(y.numpy(), np.arange(6) * 2)


def test_bad_device_name():
    with pytest.raises(ValueError, match="unknown device 'TPU'"):
        cv.Tensor([1.0], device="TPU")


def test_an_empty_stored_input_needs_no_kernel():
    y = cv.Tensor(np.ones((2, 3))) * 2
    np.testing.assert_array_equal((cv.cat([y, y[:0].contiguous()], 0) + 1).numpy(), np.full((2, 3), 3.0))
    g = cv.grad(lambda t: (cv.cat([t, t[:0].contiguous()], 0) ** 2).sum())(cv.Tensor(np.ones((2, 3))))
    np.testing.assert_array_equal(g.numpy(), np.full((2, 3), 2.0))


def test_openmp_policy_is_set_only_around_corvids_own_library_loads(monkeypatch):
    """corvid's OpenMP runtime reads a short spin from the environment when it loads; the variable
    is gone afterwards, so a library loaded later (torch's own libgomp) keeps its defaults, and a
    policy the user set is used as it is."""
    import ctypes
    import os
    import subprocess
    import sys

    import corvid as cv
    from corvid.runtime import compiler

    (cv.arange(7) * 3).numpy()  # (a kernel library to load again)
    path = str(next(iter(compiler._loaded.values())).path)
    seen = []
    real_cdll = ctypes.CDLL

    def spy(path):
        seen.append({k: os.environ.get(k) for k in ("GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_WAIT_POLICY")})
        return real_cdll(path)

    for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(compiler.ctypes, "CDLL", spy)
    lib = compiler.load_library(path)
    assert lib is not None
    assert seen[-1] == {"GOMP_SPINCOUNT": compiler._OMP_SPIN_ENV["GOMP_SPINCOUNT"],
                        "KMP_BLOCKTIME": compiler._OMP_SPIN_ENV["KMP_BLOCKTIME"], "OMP_WAIT_POLICY": None}
    assert "GOMP_SPINCOUNT" not in os.environ and "KMP_BLOCKTIME" not in os.environ
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")  # the user's choice wins, and is left alone
    compiler.load_library(path)
    assert seen[-1] == {"GOMP_SPINCOUNT": None, "KMP_BLOCKTIME": None, "OMP_WAIT_POLICY": "passive"}
    assert os.environ["OMP_WAIT_POLICY"] == "passive"

    code = ("import corvid, os; corvid.ones(2).numpy(); (corvid.arange(100000) * 2).sum().numpy(); "
            "print([k for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT', 'KMP_BLOCKTIME') if k in os.environ])")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_computing_a_literal_leaves_the_shared_literal_a_literal():
    """Nodes are hash-consed: a buffer on the literal 1.0 (computed by ones(()).realize(), or as the
    gradient seed of a 0-d backward) made every later kernel using 1.0 read it from memory."""
    one = cv.ones(()).realize()
    w = cv.Tensor(np.float32(3.0), requires_grad=True)
    w.backward()  # d w / d w: the literal 1.0 itself
    half = cv.full((), 0.25, dtype=cv.float32)
    cv.realize(half)
    x = cv.Tensor(np.arange(4, dtype=np.float32))
    (sk,) = (x * 1.0 + 0.25).schedule()
    assert sk.inputs[0] is x.node and not any(n.op.name == "CONST" and n.buffer is not None for n in sk.inputs)
    assert one.item() == 1.0 and w.grad.item() == 1.0 and half.item() == 0.25


# --- toposort (runs on every realize; written as explicit stacks) -----------------------------------

def _reference_toposort(roots, stop, children):
    order, seen = [], set()

    def visit(n):
        if id(n) in seen:
            return
        seen.add(id(n))
        if not stop(n):
            for s in children(n):
                visit(s)
        order.append(n)

    for r in roots:
        visit(r)
    return order


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_toposort_is_the_depth_first_post_order(data):
    """Same order as a recursive depth-first post-order that visits sources in order, for random
    DAGs (shared sources, several roots, repeated roots), ``stop`` sets and ``children``."""
    from corvid.graph.node import Node, Op, toposort

    size = data.draw(st.integers(1, 30))
    nodes = []
    for i in range(size):
        src = tuple(nodes[j] for j in data.draw(st.lists(st.integers(0, i - 1), max_size=3))) if i else ()
        nodes.append(Node(Op.ADD, src, i, cv.float32, ()))
    roots = [nodes[j] for j in data.draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=4))]
    stopped = {id(nodes[j]) for j in data.draw(st.lists(st.integers(0, size - 1), max_size=5))}
    stop = lambda n: id(n) in stopped  # noqa: E731
    reverse = data.draw(st.booleans())
    children = (lambda n: tuple(reversed(n.src))) if reverse else None  # noqa: E731
    got = toposort(roots, stop=stop, children=children)
    assert got == _reference_toposort(roots, stop, children or (lambda n: n.src))
    assert toposort(roots) == _reference_toposort(roots, lambda n: False, lambda n: n.src)


def test_toposort_handles_a_deep_chain():
    from corvid.graph.node import Node, Op, toposort

    n = Node(Op.ADD, (), 0, cv.float32, ())
    chain = [n]
    for i in range(20000):  # far deeper than Python's recursion limit
        n = Node(Op.ADD, (n,), i, cv.float32, ())
        chain.append(n)
    assert toposort([n]) == chain


def test_kernels_of_many_shapes_stay_bounded_in_memory():
    """Each distinct shape compiles its own kernel; the engine's caches keep the most recent
    CORVID_MAX_LOADED_KERNELS of them (and so their libraries), not every one for the life of the
    process (about 30 MB per 1000 shapes before)."""
    import os
    import subprocess
    import sys

    code = (
        "import corvid as cv\n"
        "from corvid.engine import schedule\n"
        "from corvid.runtime import compiler\n"
        "for n in range(1, 301):\n"
        "    assert float((cv.ones(n) + 1).sum().numpy()) == 2.0 * n\n"
        "print(len(schedule._cache), len(schedule._plans), len(compiler._loaded))\n"
        "assert float((cv.ones(7) + 1).sum().numpy()) == 14.0  # (an evicted kernel comes back right)\n")
    env = dict(os.environ, CORVID_MAX_LOADED_KERNELS="40")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    cache, plans, loaded = map(int, done.stdout.split())
    assert cache <= 40 and plans <= 40 and loaded <= 40


def test_realizing_a_reshape_of_a_computed_value_shares_its_buffer():
    """Movement never copies: a reshape of a realized tensor realizes to the same buffer (it was a
    copy kernel). A view that reorders elements still needs its kernel."""
    x = cv.randn(64, 64).realize()
    y = x.reshape(2, 2048).reshape(4096).realize()
    assert y.node.buffer is x.node.buffer
    np.testing.assert_array_equal(y.numpy(), x.numpy().reshape(-1))
    t = x.T.reshape(4096).realize()
    assert t.node.buffer is not x.node.buffer
    np.testing.assert_array_equal(t.numpy(), x.numpy().T.reshape(-1))
    x.assign(x + 1)  # rebinding x leaves the shared buffer (and y's value) as they were
    np.testing.assert_array_equal(y.numpy() + 1, x.numpy().reshape(-1))


def test_detach_of_a_computed_value_shares_its_buffer():
    """``detach()`` (and any mark over a value) needs no copy kernel: its docstring's promise."""
    x = cv.Tensor([1.0, 2.0], requires_grad=True)
    d = x.detach()
    assert d.schedule() == []
    assert d.numpy().tolist() == [1.0, 2.0]
    y = (x * 3).realize()
    assert y.detach().reshape(2, 1).schedule() == []


def test_reading_elements_of_a_small_lazy_value_computes_it_once():
    """``out[i]`` for each ``i`` of a lazy ``out`` computes ``out`` once and reads every element
    from its buffer (it compiled one kernel per offset: 30 ms each); a large lazy value still
    computes only the elements a view needs."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = cv.Tensor(a)
    out = cv.concat([x, x * 2 + 1])
    assert out.node.buffer is None
    first = out[4, 1]
    assert float(first) == 2 * a[1, 1] + 1
    assert out.node.buffer is not None  # computed whole, once
    ref = np.concatenate([a, 2 * a + 1])
    for i in range(6):
        assert out[i].schedule() == []  # every other view: read from the buffer, no kernel
        np.testing.assert_array_equal(out[i].numpy(), ref[i])
    big = cv.Tensor(np.arange(1 << 21, dtype=np.float32)) * 2
    assert float(big[5]) == 10.0
    assert big.node.buffer is None  # (2M elements: only the one needed was computed)


def test_a_function_of_x_i_for_each_i_is_one_kernel(monkeypatch):
    """``cv.isnan(x[i])`` for each ``i`` of a small stored ``x``: the slice is stored (numpy) before
    the graph is planned, so every ``i`` is the same kernel structure (one compile); reading
    at the offset, each ``i`` was a new kernel. ``schedule()`` still shows the fused form."""
    from corvid.runtime import cpu

    sources = []
    compile_kernel = cpu.compile_kernel
    monkeypatch.setattr(cpu, "compile_kernel", lambda src, name: sources.append(src) or compile_kernel(src, name))
    a = np.array([[0.5, np.nan, -1.0], [np.inf, 2.0, np.nan], [3.0, 4.0, 5.0]], dtype=np.float32)
    x = cv.Tensor(a)
    assert x[1].isnan().schedule()[0].inputs == [x.node]  # (the fused form, nothing stored)
    got = [[bool(cv.isnan(x[i, j])) for j in range(3)] for i in range(3)]
    assert got == np.isnan(a).tolist()
    rows = [cv.exp(x[i] * 2).numpy() for i in range(3)]
    np.testing.assert_allclose(np.stack(rows), np.exp(a * 2), rtol=1e-6)
    assert len(set(sources)) <= 2, len(set(sources))  # (isnan of one element; exp(2 x) of a row)


def test_comparing_elements_of_two_lazy_values_computes_each_once(monkeypatch):
    """``out[i] == ref[i]`` for each ``i`` of two small lazy values: both are computed whole on the
    first comparison, then every comparison reads stored elements (one kernel structure)."""
    from corvid.runtime import cpu

    sources = []
    compile_kernel = cpu.compile_kernel
    monkeypatch.setattr(cpu, "compile_kernel", lambda src, name: sources.append(src) or compile_kernel(src, name))
    a = np.linspace(-2, 2, 24).reshape(4, 6)
    x = cv.Tensor(a)
    out, ref = cv.diff(x, axis=1, n=2), cv.diff(cv.diff(x, axis=1), axis=1)
    same = [bool(out[i, j] == ref[i, j]) for i in range(4) for j in range(4)]
    assert all(same) and out.node.buffer is not None and ref.node.buffer is not None
    assert len(set(sources)) <= 4, len(set(sources))  # (out, ref, and the comparison of two elements)
    assert [bool(out[i, 0] > 100) for i in range(4)] == [False] * 4


def test_complex_constants_are_kernel_arguments_not_literals(monkeypatch):
    """``x * c`` for a complex ``c``: one kernel for every ``c`` (its parts read from the
    constants buffer, rounded as the dtype rounds them), as for a float; 0, 1 and -1 stay literals."""
    from corvid.runtime import cpu

    sources = []
    compile_kernel = cpu.compile_kernel
    monkeypatch.setattr(cpu, "compile_kernel", lambda src, name: sources.append(src) or compile_kernel(src, name))
    a = np.array([1 + 2j, 3 - 1j, 0.5 + 0.25j, -7e10 + 1e-30j], np.complex64)
    x = cv.Tensor(a)
    for c in (2.5 - 1j, 0.1 + 0.7j, 1j, -3e-20 + 4e20j):
        np.testing.assert_array_equal((x * c + 1).numpy(), a * np.complex64(c) + np.complex64(1))
    assert len(set(sources)) <= 1, len(set(sources))
    b = np.array([1 + 2j], np.complex128)
    np.testing.assert_array_equal((cv.Tensor(b) - (1e-300 + 3.3j)).numpy(), b - (1e-300 + 3.3j))


def test_a_small_literal_realized_alone_compiles_nothing(monkeypatch):
    """``cv.zeros(shape).numpy()``: numpy fills a small literal on the CPU (it was a fill kernel
    per shape and dtype); half-precision literals keep the kernel, whose rounding goes through
    float32."""
    from corvid.runtime import cpu

    sources = []
    compile_kernel = cpu.compile_kernel
    monkeypatch.setattr(cpu, "compile_kernel", lambda src, name: sources.append(src) or compile_kernel(src, name))
    for shape in ((3,), (2, 5), (4, 1, 3)):
        assert cv.zeros(shape).numpy().tolist() == np.zeros(shape).tolist()
        assert cv.full(shape, -3, dtype=cv.int8).numpy().tolist() == np.full(shape, -3).tolist()
        assert cv.full(shape, 2.5 - 1j).numpy().tolist() == np.full(shape, 2.5 - 1j).tolist()
        assert cv.ones(shape, dtype=cv.bool).numpy().all()
    assert sources == []
    assert cv.full(3, 0.1, dtype=cv.bfloat16).tolist() == [float(ml_dtypes.bfloat16(np.float32(0.1)))] * 3


def test_integer_constants_are_kernel_arguments_on_the_cpu(monkeypatch):
    """``labels == k`` for each class ``k`` (above 16): one kernel for every ``k`` on the CPU, the
    value read from the constants buffer (exact up to 2**53; larger ones, small ones, powers of
    two and constants of integer arithmetic stay literals)."""
    from corvid.engine import schedule as sched
    from corvid.runtime import cpu

    sources = []
    compile_kernel = cpu.compile_kernel
    monkeypatch.setattr(cpu, "compile_kernel", lambda src, name: sources.append(src) or compile_kernel(src, name))
    sched._cache.clear()  # (a kernel an earlier test of this process made would not be compiled again)
    sched._plans.clear()
    a = np.array([3, 17, 541, 17, -100, 2**40 + 3, 2**53 - 1])
    y = cv.Tensor(a)
    for k in (17, 541, -100, 2**40 + 3, 2**53 - 1, 99991):
        np.testing.assert_array_equal((y == k).numpy(), a == k)
        np.testing.assert_array_equal((y < k).numpy(), a < k)
    assert len(set(sources)) == 2, len(set(sources))  # (== and <: one kernel each for every k)
    for k in (17, 541, -100, 2**40 + 3, 99991):  # arithmetic: literals, exact
        np.testing.assert_array_equal((y // k).numpy(), a // k)
    for k in (2**60 + 1, 64, 5):  # literals: each its own kernel, values as exact
        np.testing.assert_array_equal((y * 3 + k).numpy(), a * 3 + k)
    u = np.array([2**63 + 5, 300], np.uint64)
    np.testing.assert_array_equal((cv.Tensor(u) + 1000).numpy(), u + np.uint64(1000))
