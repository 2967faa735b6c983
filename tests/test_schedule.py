"""Scheduling contract: how many kernels a graph becomes, what they read, and how clean their index
code is. Kernel counts here are API contract. Values are checked on the CPU for each case."""

import math
import numpy as np
import pytest

import corvid as cv
from corvid.engine.schedule import create_schedule
from corvid.graph.node import Op
from corvid.graph.symbolic import count_divmod

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def divmods(sk) -> int:
    """Floor divisions and modulos in a scheduled kernel's index expressions."""
    k = sk.kernel
    return sum(count_divmod(s) for u in k.values() for s in u.syms()) + sum(count_divmod(s.index) for s in k.stores)


def body(sk) -> str:
    """The generated source after the helper prelude (only lines with loads/stores/loops)."""
    return "\n".join(l for l in sk.source.splitlines() if "for (" in l or "p0[" in l or "p1[" in l or "p2[" in l)


def n_reduces(sk) -> int:
    """Reduce loop nests in the kernel (register-tile copies of one reduce share their loops)."""
    return len({tuple(lp.var for lp in u.arg[1]) for u in sk.kernel.values() if u.op == "reduce"})


def check(t, ref, n_kernels, rtol=1e-5, atol=1e-6):
    """Assert the kernel count (on the CPU and on the NULL device path) and the value."""
    sched = t.schedule()
    assert len(sched) == n_kernels, sched
    got = t.numpy()
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)
    return sched


# --- fusion -------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (2, 1, 3, 2, 2)])
def test_elementwise_chain_is_one_kernel(shape):
    a, b = rand(*shape), rand(*shape)
    x, y = cv.Tensor(a), cv.Tensor(b)
    t = ((x * 2 + y).exp() - y.abs().sqrt() / (1 + x * x)).maximum(y).tanh()
    ref = np.tanh(np.maximum(np.exp(a * 2 + b) - np.sqrt(np.abs(b)) / (1 + a * a), b))
    (sk,) = check(t, ref, 1)
    # contiguous elementwise work of any rank is one flat loop with no index arithmetic
    assert len(sk.kernel.loops) == 1 and sk.kernel.loops[0].size == int(np.prod(shape))
    assert divmods(sk) == 0


def test_elementwise_with_broadcasting_is_one_kernel():
    a, b, c = rand(3, 1, 5), rand(4, 1), rand(5)
    t = (cv.Tensor(a) * cv.Tensor(b) + cv.Tensor(c)).relu()
    check(t, np.maximum(a * b + c, 0), 1)


def test_matmul_bias_relu_is_one_kernel():
    a, b, bias = rand(5, 7), rand(7, 3), rand(3)
    t = (cv.Tensor(a) @ cv.Tensor(b) + cv.Tensor(bias)).relu()
    (sk,) = check(t, np.maximum(a @ b + bias, 0), 1, rtol=1e-4, atol=1e-5)
    assert n_reduces(sk) == 1


def test_batched_matmul_is_one_kernel():
    a, b = rand(2, 3, 4), rand(2, 4, 5)
    check(cv.Tensor(a) @ cv.Tensor(b), a @ b, 1, rtol=1e-4, atol=1e-5)


def test_permute_pad_sum_reads_input_directly():
    a = rand(2, 3, 4)
    x = cv.Tensor(a)
    t = x.permute(2, 0, 1).pad(((1, 1), (0, 2), (1, 0))).sum()
    ref = np.pad(a.transpose(2, 0, 1), ((1, 1), (0, 2), (1, 0))).sum()
    (sk,) = check(t, ref, 1, rtol=1e-5, atol=1e-5)
    assert not sk.name.startswith("copy")
    assert len(sk.inputs) == 1 and sk.inputs[0] is x.node and sk.inputs[0].op is Op.BUFFER
    assert len(sk.kernel.params) == 2
    assert "p1[" in sk.source


def test_softmax_is_one_kernel():
    a = rand(4, 6)
    x = cv.Tensor(a)
    e = np.exp(a - a.max(-1, keepdims=True))
    check(x.softmax(axis=-1), e / e.sum(-1, keepdims=True), 1)


def test_reduce_broadcast_along_outer_axis_is_two_kernels():
    a = rand(4, 6)
    x = cv.Tensor(a)
    sched = check(x - x.mean(axis=0), a - a.mean(axis=0), 2)
    assert n_reduces(sched[0]) == 1 and n_reduces(sched[1]) == 0


def test_reduce_used_by_two_outputs_is_computed_once():
    a = rand(3, 5)
    x = cv.Tensor(a)
    s = (x * 2).sum(axis=1)
    u, v = s + 1, s.exp()
    sched = create_schedule([u.node, v.node], "CPU")
    assert sum(n_reduces(sk) for sk in sched) == 1
    assert len(sched) == 2  # the sum, then one kernel storing both outputs (it reads the sum once)
    red = s.node.src[0]  # sum(axis=1) is REDUCE (keeps the axis) then a reshape
    assert red.op is Op.REDUCE and sched[0].output is red
    assert sched[1].outputs == (u.node, v.node) and sched[1].inputs == [red]
    np.testing.assert_allclose(u.numpy(), (a * 2).sum(1) + 1, rtol=1e-5)
    np.testing.assert_allclose(v.numpy(), np.exp((a * 2).sum(1)), rtol=1e-5)


def test_reduce_used_twice_in_one_kernel_is_computed_once():
    a = rand(3, 5)
    x = cv.Tensor(a)
    m = x.max(axis=1, keepdims=True)
    t = (x - m) * (x - m) + m
    (sk,) = check(t, (a - a.max(1, keepdims=True)) ** 2 + a.max(1, keepdims=True), 1)
    assert n_reduces(sk) == 1


# --- hash-consing / CSE -------------------------------------------------------------------------

def test_common_subexpressions_share_a_node():
    x = cv.Tensor(rand(3, 4))
    p, q = x + 1, x + 1
    assert p.node is q.node
    assert (p * 2).exp().node is (q * 2).exp().node
    assert x.sum(axis=0).node is x.sum(axis=0).node
    assert x.T.node is x.T.node and x[1:, ::2].node is x[1:, ::2].node
    assert (x + 1).node is not (x + 2).node
    # -0.0 and 0.0 are different constants
    assert (x + 0.0).node is not (x + -0.0).node


def test_common_subexpression_computes_once():
    a = rand(3, 4)
    x = cv.Tensor(a)
    t = (x + 1).exp() * (x + 1).exp()
    (sk,) = check(t, np.exp(a + 1) * np.exp(a + 1), 1, rtol=1e-5)
    alus = [u.arg for u in sk.kernel.values() if u.op == "alu"]
    assert alus.count(Op.ADD) == 1 and alus.count(Op.EXP) == 1
    assert sum(1 for u in sk.kernel.values() if u.op == "load") == 1


# --- movement ops are index rewrites --------------------------------------------------------------

MOVES = {
    "reshape_round_trip": (lambda t: t.reshape(24).reshape(4, 6), lambda a: a.reshape(24).reshape(4, 6)),
    "transpose": (lambda t: t.T, lambda a: a.T),
    "flip": (lambda t: t.flip(0), lambda a: a[::-1]),
    "flip_both": (lambda t: t.flip(), lambda a: a[::-1, ::-1]),
    "slice": (lambda t: t[1:3, 2:], lambda a: a[1:3, 2:]),
    "step_slice": (lambda t: t[::2, ::3], lambda a: a[::2, ::3]),
    "neg_step_slice": (lambda t: t[::2, ::-1], lambda a: a[::2, ::-1]),
    "pad": (lambda t: t.pad(((1, 0), (2, 1))), lambda a: np.pad(a, ((1, 0), (2, 1)))),
    "int_index": (lambda t: t[2], lambda a: a[2]),
    "unsqueeze_expand": (lambda t: t[:, None, :].expand(4, 3, 6), lambda a: np.broadcast_to(a[:, None, :], (4, 3, 6))),
    "split_merge": (lambda t: t.reshape(4, 2, 3).permute(0, 1, 2).reshape(8, 3).reshape(4, 6),
                    lambda a: a.reshape(4, 2, 3).reshape(8, 3).reshape(4, 6)),
    "chain": (lambda t: t.T.flip(1)[1:, ::2], lambda a: a.T[:, ::-1][1:, ::2]),
    "pad_of_slice": (lambda t: t[1:3, 1:].pad(((2, 0), (0, 3))), lambda a: np.pad(a[1:3, 1:], ((2, 0), (0, 3)))),
}


@pytest.mark.parametrize("name", sorted(MOVES))
def test_movement_has_no_copy_kernel_and_no_divmod(name):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = cv.Tensor(a)
    f, ref = MOVES[name]
    t = f(x) * 2 + 1
    (sk,) = check(t, ref(a) * 2 + 1, 1)
    assert not sk.name.startswith("copy")
    assert sk.inputs == [x.node]
    assert divmods(sk) == 0, body(sk)
    # realized on its own, a view of a computed value (here the input) needs no kernel: a
    # reshape shares the buffer, a small view is copied by numpy (engine/schedule.py: host_view)
    check(f(x), ref(a), 0)


def test_a_large_view_realized_alone_is_one_copy_kernel():
    """Past HOST_VIEW_MAX elements, numpy's single-threaded copy gives way to a kernel."""
    a = np.arange(64 * 96, dtype=np.float32).reshape(64, 96)
    x = cv.Tensor(a)
    check(x.T, a.T, 1)
    check(x[:, ::-1].flip(0), a[::-1, ::-1], 1)
    check(x[:32, :64], a[:32, :64], 0)  # 2048 elements: numpy
    check(x.reshape(96, 64), a.reshape(96, 64), 0)  # the same buffer


def test_permuting_a_split_axis_splits_its_loop_instead_of_dividing():
    """(4,6) -> (2,2,6) -> swap the first two -> (4,6): row r reads row 2*(r%2) + r//2. The kernel
    splits the row loop in two (split_divided_loops), so no index divides at all."""
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = cv.Tensor(a)
    t = x.reshape(2, 2, 6).permute(1, 0, 2).reshape(4, 6) + 1
    (sk,) = check(t, a.reshape(2, 2, 6).transpose(1, 0, 2).reshape(4, 6) + 1, 1)
    assert divmods(sk) == 0 and len(sk.kernel.loops) == 3, body(sk)


def test_pad_of_step_slice_needs_no_divmod():
    """A pad over a reshape-built view (step slice): the source is indexed by a stand-in variable
    with the gated (valid) range, so the reshape's divmods simplify away (codegen/lower.py)."""
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = cv.Tensor(a)
    t = x[::2].pad(((1, 1), (0, 0))) + 1
    (sk,) = check(t, np.pad(a[::2], ((1, 1), (0, 0))) + 1, 1)
    assert divmods(sk) == 0, body(sk)


def test_reshape_round_trip_index_is_flat():
    x = cv.Tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
    (sk,) = (x.reshape(24).reshape(4, 6) + 1).schedule()
    assert len(sk.kernel.loops) == 1 and divmods(sk) == 0
    assert "/" not in body(sk) and "%" not in body(sk)


def test_movement_then_reduce_is_one_kernel():
    a = rand(4, 6)
    x = cv.Tensor(a)
    t = x.pad(((1, 1), (0, 0))).T.flip(0)[::2].sum(axis=1)
    ref = np.pad(a, ((1, 1), (0, 0))).T[::-1][::2].sum(1)
    (sk,) = check(t, ref, 1, atol=1e-5)
    assert sk.inputs == [x.node] and divmods(sk) == 0


def test_contiguous_forces_a_kernel():
    a = rand(3, 4)
    x = cv.Tensor(a)
    c = (x + 1).contiguous()
    check(c * 2, (a + 1) * 2, 2)


# --- nothing to do ----------------------------------------------------------------------------------

def test_realized_tensor_schedules_nothing():
    x = cv.Tensor(rand(3, 4))
    assert x.schedule() == []
    y = (x + 1).realize()
    assert y.schedule() == [] and y.node.op is Op.BUFFER
    assert y.realize() is y and y.schedule() == []
    z = y * 2
    (sk,) = z.schedule()
    assert sk.inputs == [y.node]


def test_realized_subgraph_is_loaded_not_recomputed():
    a = rand(3, 4)
    x = cv.Tensor(a)
    s = x.exp().sum(axis=1)
    s.realize()
    t = s + 1
    (sk,) = check(t, np.exp(a).sum(1) + 1, 1, rtol=1e-5)
    assert n_reduces(sk) == 0


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0, 4)])
def test_empty_tensors_schedule_nothing(shape):
    a = np.zeros(shape, np.float32)
    x = cv.Tensor(a)
    for t in (x + 1, (x * 2).exp(), x.reshape(shape[::-1]), x.flip(), x.T):
        assert t.schedule() == []
        assert t.numpy().shape == t.shape and t.numpy().size == 0
    y = cv.Tensor(rand(3, 4))[:, 2:2] * 2
    assert y.schedule() == [] and y.numpy().shape == (3, 0)


def test_null_device_runs_the_pipeline():
    x = cv.Tensor(rand(4, 6), device="NULL")
    assert len(x.softmax(-1).schedule()) == 1
    assert len((x - x.mean(axis=0)).schedule()) == 2
    t = (x * 2).sum(axis=1).realize()
    assert t.schedule() == [] and t.numpy().shape == (4,)


def test_costly_matmul_operand_is_stored_not_recomputed_per_column():
    a, b = rand(64, 128), rand(128, 512)
    ta, tb = cv.Tensor(a), cv.Tensor(b)
    t = (ta.exp() * 2 + ta.sin()) @ tb  # would be evaluated 512 times per element inside the matmul
    ks = check(t, (np.exp(a) * 2 + np.sin(a)) @ b, 2, rtol=1e-4, atol=1e-4)
    assert ks[0].output.shape == (64, 128) and "expf" not in ks[1].source


def test_cheap_matmul_operand_stays_fused():
    a, b = rand(64, 128), rand(128, 512)
    check((cv.Tensor(a) * 2) @ cv.Tensor(b), (a * 2) @ b, 1, rtol=1e-4, atol=1e-4)


def test_narrow_matmul_output_is_unrolled_whole():
    a, b = rand(64, 32), rand(32, 10)
    (sk,) = check(cv.Tensor(a) @ cv.Tensor(b), a @ b, 1, rtol=1e-4, atol=1e-5)
    assert [lp.size for lp in sk.kernel.loops] == [64]  # 10 accumulators share one pass over the reduce
    assert n_reduces(sk) == 1


def test_matmul_with_a_transposed_right_operand_copies_it_once():
    a, b = rand(64, 256), rand(128, 256)
    ks = check(cv.Tensor(a) @ cv.Tensor(b).T, a @ b.T, 2, rtol=1e-4, atol=1e-4)
    assert ks[0].name.startswith("copy") and ks[1].kernel.vector_width > 1  # the matmul vectorizes
    small_a, small_b = rand(4, 8), rand(5, 8)
    check(cv.Tensor(small_a) @ cv.Tensor(small_b).T, small_a @ small_b.T, 1, rtol=1e-5)


@pytest.mark.parametrize("rows", [2, 4, 8])
def test_matmul_whose_rows_fit_one_tile_keeps_one_column_loop(rows):
    # all rows in one register tile and a long column loop: the row loop disappears, and the
    # loops left must each appear once (the column loop was once emitted twice: 8192x the work)
    a, b = rand(rows, 4), rand(4, 4096)
    (sk,) = check(cv.Tensor(a) @ cv.Tensor(b), a @ b, 1, rtol=1e-5, atol=1e-5)
    names = [lp.var.name for lp in sk.kernel.loops]
    assert len(names) == len(set(names))
    iters = math.prod(lp.size for lp in sk.kernel.loops) * sk.kernel.vector_width
    assert iters * rows * 2 == rows * 4096  # one pass: each loop iteration computes rows x 2 vectors


def test_row_tile_goes_on_the_loop_the_vector_loads_do_not_depend_on():
    # y[k1, k2, q] = sum_j f[k1, j] e[k2, j, q] (an FFT stage written in natural order): the
    # vector loads of e do not depend on k1, so the register tile takes k1 rows and each loaded
    # vector serves all of them; tiling k2 (the loop right above q) re-read e for every k1
    f, e = rand(16, 16), rand(16, 16, 256)
    y = (cv.Tensor(f)[:, None, :, None] * cv.Tensor(e)[None]).sum(2)
    (sk,) = check(y, np.einsum("aj,bjq->abq", f, e), 1, rtol=1e-4, atol=1e-4)
    assert sk.kernel.loops[0].size == 2 and sk.kernel.loops[1].size == 16  # k1 tiled by 8, k2 whole


def test_gated_recurrence_through_a_matmul_schedules_in_linear_time():
    """An LSTM-style cell applied 10 times: fused naively, step t's kernel would re-evaluate the
    previous matmuls 4^t times (the probe once took 4.6 s at 6 steps and grew 5x a step); the
    probe now gives up at PROBE_LIMIT values and stores the nested matmuls."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 16)).astype(np.float32) * 0.5
    W = cv.Tensor(w)
    h = c = cv.ones(2, 4)
    hn = cn = np.ones((2, 4), np.float32)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for _ in range(10):
        i, f, g, o = (h @ W).split(4, axis=-1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = o.sigmoid() * c.tanh()
        zi, zf, zg, zo = np.split(hn @ w, 4, axis=-1)
        cn = sig(zf) * cn + sig(zi) * np.tanh(zg)
        hn = sig(zo) * np.tanh(cn)
    assert len(h.schedule()) >= 10  # at least one stored matmul per step
    np.testing.assert_allclose(h.numpy(), hn, rtol=1e-5, atol=1e-6)


# --- a model without layout hints (issue 24, item 5) -----------------------------------------------


def _is_matmul(sk) -> bool:
    """A kernel with a long sum over products of two inputs and at least two output loops' worth
    of outputs (what the register tile is for)."""
    k = sk.kernel
    return hasattr(k, "values") and any(u.op == "reduce" and math.prod(lp.size for lp in u.arg[1]) >= 64 for u in k.values()) and \
        len(sk.inputs) >= 2 and sk.output.numel >= 64 * 64


def test_linear_layer_gradients_are_register_tiled_matmuls():
    """The gradients of ``x @ w.T + b`` are matrix products again (ops/reduce.py: _matmul_bwd): the
    primitives' own rule read the transposed copy of w along its rows for dx (a dot product per
    output, never vectorized: a GPT step's backward ran 60% of its time in such kernels)."""
    x, w, b = rand(4, 64, 128), rand(512, 128), rand(512)

    def loss(x, w, b):
        return ((x @ w.T + b) ** 2).sum()

    gx, gw, gb = cv.grad(loss, argnums=(0, 1, 2))(cv.Tensor(x), cv.Tensor(w), cv.Tensor(b))
    sched = create_schedule([gx.node, gw.node, gb.node], "CPU")
    mm = [sk for sk in sched if _is_matmul(sk)]
    assert len(mm) >= 3, sched  # forward, dx, dw
    assert all(sk.kernel.vector_width > 1 for sk in mm), [(sk.name, sk.kernel.opts) for sk in mm]
    y = x @ w.T + b
    np.testing.assert_allclose(gx.numpy(), 2 * y @ w, rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(gw.numpy(), 2 * y.reshape(-1, 512).T @ x.reshape(-1, 128), rtol=1e-4, atol=1e-1)
    np.testing.assert_allclose(gb.numpy(), 2 * y.sum((0, 1)), rtol=1e-4, atol=1e-1)


def test_attention_scores_read_small_transposed_keys_through_one_copy():
    """``q @ k.mT`` over (batch, heads) of 64x32 keys: each matrix is small, all of them are not,
    so the keys are copied once and the product is register-tiled."""
    q, k = rand(4, 4, 64, 32), rand(4, 4, 64, 32)
    ks = check(cv.Tensor(q) @ cv.Tensor(k).mT, q @ k.transpose(0, 1, 3, 2), 2, rtol=1e-4, atol=1e-4)
    assert ks[0].name.startswith("copy") and ks[1].kernel.vector_width > 1


def test_product_with_an_odd_column_count_is_computed_over_whole_vectors():
    """A language model's head over 65 characters: the columns are padded to 80 (b copied once),
    so the product is register-tiled along them instead of running as a scalar kernel; its
    gradient with respect to the table likewise."""
    x, w = rand(1024, 128), rand(65, 128)
    t = cv.Tensor(x) @ cv.Tensor(w).T
    mm = [sk for sk in t.schedule() if _is_matmul(sk)]
    assert len(mm) == 1 and mm[0].kernel.vector_width > 1, t.schedule()
    np.testing.assert_allclose(t.numpy(), x @ w.T, rtol=1e-4, atol=1e-4)
    gw = cv.grad(lambda w: (cv.Tensor(x) @ w.T).sin().sum())(cv.Tensor(w))
    assert all(sk.kernel.vector_width > 1 for sk in gw.schedule() if _is_matmul(sk))
    np.testing.assert_allclose(gw.numpy(), np.cos(x @ w.T).T @ x, rtol=1e-3, atol=1e-2)


def _gpt_grad_schedule(layers: int) -> list:
    from corvid import nn
    from corvid.nn import functional as F

    class Block(nn.Module):  # GPT-2's block, written as a user would: no contiguous(), plain nn.Linear
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.c_fc, self.c_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.h = nn.Embedding(64, 128), nn.ModuleList([Block(128, 4) for _ in range(layers)])

        def forward(self, idx):
            x = self.wte(idx)
            for block in self.h:
                x = block(x)
            return (x @ self.wte.weight.T).logsumexp(-1).mean()

    cv.manual_seed(0)
    net = Net()
    idx = cv.Tensor(np.random.default_rng(0).integers(0, 64, (4, 64)))
    grads = cv.grad(lambda p: nn.functional_call(net, p, idx))(dict(net.named_parameters()))
    return create_schedule([g.node for g in grads.values()], "CPU")


def test_gpt_training_graph_without_hints_stores_the_residual_stream_and_gelu():
    """A GPT stack written without hints: each residual sum and each GELU output is stored once
    (SHARED_COST in engine/schedule.py), so every layer has the same kernels (the deeper model
    compiles nothing new) and no kernel recomputes the residual stream from the embeddings (before,
    each LayerNorm kernel of layer l read 2l + 3 inputs and recomputed the sum), and every matrix
    product of the forward and backward passes is register-tiled."""
    two, four = _gpt_grad_schedule(2), _gpt_grad_schedule(4)
    assert {sk.source for sk in four} == {sk.source for sk in two}
    per_layer = (len(four) - len(two)) / 2
    assert len(two) - 2 * per_layer <= per_layer, (len(two), len(four))  # the rest is the head and loss
    widest = max(len(sk.inputs) for sk in four)  # (the layer norms' backward kernels)
    assert widest == max(len(sk.inputs) for sk in two) and widest <= 10, sorted((len(sk.inputs), sk.name) for sk in four)[-3:]
    for sk in four:
        if _is_matmul(sk):
            assert sk.kernel.vector_width > 1 and "tanhf" not in sk.source, sk.name


def test_a_product_with_a_residual_epilogue_is_tiled_along_its_rows():
    """``r + h @ w.T + b`` (a transformer's MLP projection with its residual): the residual's loads
    run once per output and depend on the rows, but the register tile still takes rows of the
    product (its right operand read once per tile of rows); counting the epilogue's loads left it
    no row loop, and every row streamed the whole weight (3.6x slower)."""
    # (a weight of 6 MiB: read through packed column panels, a loop of their own)
    h, w, b, r = rand(2, 64, 2048), rand(768, 2048), rand(768), rand(2, 64, 768)
    y = cv.Tensor(r) + cv.Tensor(h) @ cv.Tensor(w).T + cv.Tensor(b)
    sched = create_schedule([y.node], "CPU")
    mm = [sk for sk in sched if _is_matmul(sk)]
    assert len(mm) == 1, sched
    opts = mm[0].kernel.opts
    # the row tile (an upcast by 4 or more) is on the loop of the product's 128 rows, the outermost
    # output loop here, not on the loop of column panels
    assert [o.axis for o in opts if o.op == "upcast" and o.arg >= 4] == [0], opts
    np.testing.assert_allclose(y.numpy(), r + h @ w.T + b, rtol=1e-4, atol=1e-3)



def test_an_mlps_backward_stores_its_bfloat16_gradient_once_and_not_in_float32():
    """jit(grad) of a bfloat16 MLP block (linear, tanh GELU, linear), scheduled on the NULL device
    (its products are kernels, as on a GPU without a library; the CPU routes bfloat16 products its
    own way): the hidden-size values its kernels store are the products, the forward's activation
    and the gradient through the GELU, each once and in bfloat16. Differentiated through its
    formula, GELU's pieces shared by the forward and the backward were stored (five more kernels
    of that size), and the float32 gradient was stored before its rounding, which every consumer
    read through. The values are the CPU's."""
    rng = np.random.default_rng(0)
    n, d, hidden = 64, 32, 128

    def run(device):
        x, gy = (cv.Tensor(rng.standard_normal((n, d)).astype(np.float32), device=device).astype(cv.bfloat16).realize()
                 for _ in range(2))
        w1, w2 = (cv.Tensor(rng.standard_normal(s).astype(np.float32) * 0.1, device=device).realize()
                  for s in ((hidden, d), (d, hidden)))
        b1 = cv.Tensor(np.zeros(hidden, np.float32), device=device).realize()

        def loss(p):
            w1, b1, w2 = p
            with cv.autocast(cv.bfloat16):
                h = cv.nn.functional.gelu(cv.nn.functional.linear(x, w1, b1), approximate="tanh")
                y = cv.nn.functional.linear(h, w2)
            return (y * gy).astype(cv.float32).sum()

        step = cv.jit(cv.grad(loss))
        return step, step((w1, b1, w2)), cv.grad(loss)((w1, b1, w2))

    step, _, _ = run("NULL")
    launches = next(iter(step._cache.values()))[0].launches
    hidden_out = [(ln.sk.name, o.dtype.name) for ln in launches for o in ln.sk.outputs if o.numel == n * hidden]
    products = [name for name, _ in hidden_out if name.startswith("r_")]
    elementwise = [(name, t) for name, t in hidden_out if not name.startswith("r_")]
    assert len(products) <= 2 and len(elementwise) == 2 and all(t == "bfloat16" for _, t in elementwise), hidden_out
    _, grads, want = run("CPU")
    for got, ref in zip(grads, want):
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=2e-2, atol=2e-2)


def test_a_product_reduced_again_gets_a_kernel_of_its_own():
    """``(a @ b).sum()`` and ``(a @ b).relu().sum(1)``: the product, nested in the loops of the
    reduce after it, is stored first once its work reaches NESTED_WORK (fused, it ran as the body
    of the sum's loops: no tiling, one thread; 512 x 512 took 80 ms against 0.8 ms); a small one
    stays fused. Values against float64."""
    from corvid.engine.schedule import NESTED_WORK

    rng = np.random.default_rng(0)
    assert 64 ** 3 >= NESTED_WORK
    for f, ref in ((lambda p: p.sum(), lambda p: p.sum()), (lambda p: p.relu().sum(1), lambda p: np.maximum(p, 0).sum(1))):
        # (new operands each time: a product computed before would be read, not recomputed)
        a, b = (cv.Tensor(rng.standard_normal((64, 64)).astype(np.float32)).realize() for _ in range(2))
        t = f(a @ b)
        names = [sk.name for sk in t.schedule()]
        assert len(names) == 2 and names[0] == "r_64_64", names
        np.testing.assert_allclose(t.numpy(), ref(a.numpy().astype(np.float64) @ b.numpy()), rtol=1e-4, atol=1e-3)
    small_a, small_b = a[:8, :16], b[:16, :8]  # (8 x 8 x 16 multiply-adds: one kernel)
    assert len((small_a @ small_b).sum().schedule()) == 1


def test_the_planning_walk_is_the_toposort_and_its_key():
    """plan_for walks a graph once (``_walk``): the same nodes in the same order as the toposort
    that stops at stored values, each node's position, and a key that names each node's structure
    and its sources by position, for graphs with shared nodes, a value read twice, a root that is
    another root's source, and stored roots."""
    from corvid.engine.schedule import _stored_already, _walk
    from corvid.graph.node import toposort
    from corvid.graph.node import _arg_key
    from corvid.codegen.lower import runtime_const

    def reference_key(order):
        at = {id(n): i for i, n in enumerate(order)}
        return tuple((n.dtype, n.shape) if n.buffer is not None else
                     (n.op, ("rt",) if n.op is Op.CONST and runtime_const(n) else _arg_key(n.op, n.arg),
                      n.dtype, n.shape, tuple(at[id(s)] for s in n.src)) for n in order)

    x, y = cv.Tensor(rand(4, 5)).realize(), cv.Tensor(rand(4, 5)).realize()
    a = (x * 1.5 + y).exp()
    shared = a * a + a.sum(1, keepdims=True)
    cases = [[shared], [a, shared], [shared, a], [x + x], [x], [x, a, y], [(a + 1) * (a + 2), a + 1],
             [cv.Tensor(rand(3)).reshape(3, 1).expand(3, 4) - 1.0]]
    for roots in cases:
        nodes = [t.node for t in roots]
        every, key, pos, stored = _walk(nodes)
        want = toposort(nodes, stop=_stored_already)
        assert every == want
        assert pos == {id(n): i for i, n in enumerate(want)}
        assert key == reference_key(want)
        assert stored == sum(n.buffer is not None for n in want)


def test_scalar_operands_are_reused_and_keep_their_sign_and_kind():
    """``x + c`` keeps the broadcast literal of recent scalars (one node to build, not four), and
    a cached one is the literal asked for: -0.0 is not 0.0, True is not 1, 1 is not 1.0, nan works."""
    import corvid.tensor as T

    x = cv.Tensor(np.array([-0.0, 1.0, np.inf], np.float32))
    assert (x + 1.0).node.src[1] is (x + 1.0).node.src[1]
    for _ in range(2):  # (the second time from the cache)
        np.testing.assert_array_equal(np.signbit((x + -0.0).numpy()), [True, False, False])
        np.testing.assert_array_equal(np.signbit((x + 0.0).numpy()), [False, False, False])
        assert np.isnan((x * float("nan")).numpy()).all()
    i = cv.Tensor(np.array([1, 2], np.int8))
    assert (i + True).dtype == cv.int8 and (i + 1).dtype == cv.int8 and (i + 1.0).dtype == cv.float32
    assert (i + True).tolist() == [2, 3] and (i * 1.0).tolist() == [1.0, 2.0]
    for v in range(3 * T.SCALARS_KEPT):  # bounded
        x + float(v)
    assert len(T._SCALARS) <= T.SCALARS_KEPT
