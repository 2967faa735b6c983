"""Host kernels (engine/host.py): a numpy function as one node of the lazy graph."""

import numpy as np
import pytest

import corvid as cv
from corvid.engine.host import HostOp, host_call

INV = HostOp("test.inv", np.linalg.inv, batched=True)
QR = HostOp("test.qr", lambda a: tuple(np.linalg.qr(a)), batched=True)
SCALE = HostOp("test.scale", lambda a, k: a * k, params=(("k", 3.0),))


def well_conditioned(n, batch=()):
    rng = np.random.default_rng(n)
    return (rng.normal(size=batch + (n, n)) + 4 * np.eye(n)).astype(np.float64)


def inv(a):
    return host_call(INV, a, outputs=[(a.shape, a.dtype)])[0]


def test_single_and_multi_output_values():
    a = well_conditioned(5)
    np.testing.assert_allclose(inv(cv.Tensor(a)).numpy(), np.linalg.inv(a), rtol=1e-10)
    q, r = host_call(QR, cv.Tensor(a), outputs=[((5, 5), cv.float64), ((5, 5), cv.float64)])
    np.testing.assert_allclose((q @ r).numpy(), a, atol=1e-10)
    np.testing.assert_allclose(np.triu(r.numpy()), r.numpy())
    assert host_call(SCALE, cv.Tensor([1.0, 2.0]), outputs=[((2,), cv.float32)])[0].tolist() == [3.0, 6.0]


def test_host_kernel_is_its_own_kernel_and_reads_stored_inputs():
    a = cv.Tensor(well_conditioned(4))
    y = inv(a.T * 2) + 1  # the input is a lazy view: stored first; the +1 is a separate kernel
    names = [k.name for k in y.schedule()]
    assert names[-2] == "host_test.inv" and len(names) == 3, names
    np.testing.assert_allclose(y.numpy(), np.linalg.inv(a.numpy().T * 2) + 1, rtol=1e-10)


def test_a_reshaped_input_reads_the_stored_value_under_it():
    """A host op's input that is a reshape of a value (stored already, computed in the same
    schedule, or a jit placeholder) is that value's buffer read in the input's shape: no copy
    kernel stores the reshape (a convolution's reshaped weights and its windows were copied at
    every step)."""
    a = well_conditioned(4, (2,))
    t = cv.Tensor(a)
    for x, want in ((t.reshape(8, 4).reshape(2, 4, 4), a), ((t * 2).contiguous().reshape(8, 4).reshape(2, 4, 4), a * 2)):
        y = inv(x)
        names = [k.name for k in y.schedule()]
        before = names[:names.index("host_test.inv")]  # (what computes the input; after it, the result's reshape)
        assert not [n for n in before if n.startswith("copy")] and len(before) <= 1, names
        np.testing.assert_allclose(y.numpy(), np.linalg.inv(want), rtol=1e-10)
    f = cv.jit(lambda x: inv((x * 1.0).reshape(8, 4).reshape(2, 4, 4)))
    for scale in (1.0, 3.0):
        np.testing.assert_allclose(f(cv.Tensor(a * scale)).numpy(), np.linalg.inv(a * scale), rtol=1e-10)
    g = cv.jit(lambda x: inv(x.reshape(8, 4).reshape(2, 4, 4)))  # (a placeholder under the reshapes)
    for _ in range(2):
        np.testing.assert_allclose(g(cv.Tensor(a)).numpy(), np.linalg.inv(a), rtol=1e-10)
    (program,) = [c for caps in g._cache.values() for c in caps]
    assert [ln.sk.name for ln in program.launches][0] == "host_test.inv"  # (nothing stores its input first)


def test_vmap_batches_the_host_call():
    a = well_conditioned(3, (4,))
    got = cv.vmap(inv)(cv.Tensor(a)).numpy()
    np.testing.assert_allclose(got, np.stack([np.linalg.inv(m) for m in a]), rtol=1e-10)
    q, r = cv.vmap(lambda m: tuple(host_call(QR, m, outputs=[((3, 3), cv.float64)] * 2)))(cv.Tensor(a))
    np.testing.assert_allclose((q @ r).numpy(), a, atol=1e-10)


def test_jit_replays_the_host_kernel_on_new_inputs():
    jf = cv.jit(lambda m: inv(m) * 2)
    for seed in (3, 4):
        a = well_conditioned(seed)
        np.testing.assert_allclose(jf(cv.Tensor(a)).numpy(), 2 * np.linalg.inv(a), rtol=1e-10)
    assert jf.traces == 2  # two sizes


def test_gradient_through_custom_vjp():
    @cv.custom_vjp
    def inv_d(a):
        return inv(a)

    def fwd(a):
        y = inv(a)
        return y, y

    def bwd(y, g):
        return (-(y.mT @ g @ y.mT),)

    inv_d.defvjp(fwd, bwd)
    a = well_conditioned(3)
    g = cv.grad(lambda m: (inv_d(m) ** 2).sum())(cv.Tensor(a)).numpy()
    eps, num = 1e-6, np.zeros_like(a)
    for i in range(3):
        for j in range(3):
            d = np.zeros_like(a)
            d[i, j] = eps
            num[i, j] = ((np.linalg.inv(a + d) ** 2).sum() - (np.linalg.inv(a - d) ** 2).sum()) / (2 * eps)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-8)


def test_errors_are_clear():
    a = cv.Tensor(well_conditioned(3))
    with pytest.raises(NotImplementedError, match="custom_vjp"):
        cv.grad(lambda m: inv(m).sum())(a)
    with pytest.raises(NotImplementedError, match="custom_jvp"):
        cv.jvp(lambda m: inv(m), (a,), (a,))
    bad = host_call(INV, a, outputs=[((2, 2), cv.float64)])[0]
    with pytest.raises(RuntimeError, match="declared"):
        bad.numpy()
    with pytest.raises(ValueError, match="share one dtype"):
        host_call(QR, a, outputs=[((3, 3), cv.float64), ((3, 3), cv.float32)])
    with pytest.raises(NotImplementedError, match="batch"):
        cv.vmap(lambda m: host_call(SCALE, m, outputs=[((2,), cv.float32)])[0])(cv.ones(3, 2))


def test_null_device_runs_nothing():
    a = cv.Tensor(well_conditioned(3), device="NULL")
    assert inv(a).numpy().shape == (3, 3)


def test_a_literal_view_input_is_stored_apart_from_the_shared_literal():
    import numpy as np

    import corvid as cv
    from corvid.engine.host import HostOp, host_call

    lit = cv.full((), 1.0).reshape(1, 1).expand(3, 4)  # (a sum's cotangent looks like this)
    op = HostOp("test.double", lambda a: a * 2)
    (out,) = host_call(op, lit, outputs=[((3, 4), cv.float32)])
    np.testing.assert_array_equal(out.numpy(), np.full((3, 4), 2.0))
    assert lit.node.buffer is None and lit.node.src[0].buffer is None  # (later kernels still inline 1.0)
