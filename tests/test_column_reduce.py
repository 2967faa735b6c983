"""Column reduces on GPU-style devices (corvid/ops/reduce.py: _split_columns): a reduce over the
leading axes of many contiguous columns runs as partials over chunks of rows, a work item per
(chunk, column), then the partials' column reduce; the values are those of the one reduce."""

import numpy as np
import pytest

import corvid as cv
from corvid.ops import reduce as R
from tests.test_cuda_runtime import FAKE, registered

rng = np.random.default_rng(3)


@pytest.fixture(scope="module")
def fake():
    with registered(FAKE, "tests.test_cuda_runtime:FakeCUDA") as dev:
        yield dev


def test_which_reduces_split_by_columns():
    chunks = "chunks"
    assert R._column_parts((8192, 768), (0,), chunks) == 128  # (a bias gradient of GPT-2's width)
    assert R._column_parts((8192, 3072), (0,), chunks) == 32
    assert R._column_parts((8, 1024, 2304), (0, 1), chunks) == 32
    assert R._column_parts((8192, 768), (0,), None) == 0       # (a CPU: one kernel per core's share)
    assert R._column_parts((768, 8192), (1,), chunks) == 0     # a row reduce
    assert R._column_parts((8, 1024, 768), (0, 2), chunks) == 0  # not leading axes only
    assert R._column_parts((256, 8192), (0,), chunks) == 0     # few rows
    assert R._column_parts((8192, 48), (0,), chunks) == 0      # few outputs: the full-reduce split's
    assert R._column_parts((1024, 1 << 16), (0,), chunks) == 0  # outputs enough for a work item each
    assert R._column_parts((4099, 512), (0,), chunks) == 0     # no power of two divides the rows


@pytest.mark.parametrize("layout", ["chunks", "strided"])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_the_split_gives_the_reduce(layout, op):
    a = rng.standard_normal((8, 512, 300)).astype(np.float32)
    a[3, 7, 11] = np.nan if op == "max" else a[3, 7, 11]
    x = cv.Tensor(a)
    parts = R._column_parts(x.shape, (0, 1), layout)
    assert parts == 256
    got = R._split_columns(x, op, (0, 1), parts, layout)
    assert got.shape == (1, 1, 300)
    want = getattr(a.astype(np.float64), op)(axis=(0, 1), keepdims=True)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-4)


def test_column_reduces_on_a_cuda_device(fake):
    a = rng.standard_normal((4096, 320)).astype(np.float32)
    x = cv.Tensor(a, device=FAKE).realize()
    with cv.profile() as p:
        s = x.sum(0).realize()
    assert len(p.kernels) == 2  # (partials, then their sum)
    np.testing.assert_allclose(s.numpy(), a.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(x.max(0, keepdims=True).numpy(), a.max(0, keepdims=True))
    np.testing.assert_allclose(x.mean(0).numpy(), a.astype(np.float64).mean(0), rtol=1e-5, atol=1e-6)
    ints = cv.Tensor(rng.integers(-1000, 1000, (2048, 512)), device=FAKE)
    assert (ints.sum(0).numpy() == ints.numpy().sum(0)).all()
    # a bias gradient: the column sum of the output's cotangent
    w = cv.Tensor(rng.standard_normal(320).astype(np.float32), device=FAKE)
    g = cv.grad(lambda b: ((x + b) ** 2).sum())(w)
    np.testing.assert_allclose(g.numpy(), (2 * (a.astype(np.float64) + w.numpy())).sum(0), rtol=1e-4, atol=1e-2)


def test_the_partials_read_neighbouring_columns():
    """On the geometry device (CUDA's heuristics and launch, nothing run): the partials' kernel
    has a work item per (chunk, column), neighbours reading neighbouring columns of a row, where
    one work-group per column read a column's elements a row apart."""
    from benchmarks import geometry as G
    from corvid.runtime import device as registry

    registry.register_backend(G.NAME, "benchmarks.geometry:GeometryDevice")
    try:
        x = cv.zeros(8192, 768, device=G.NAME).contiguous().realize()
        G.LAUNCHED.clear()
        x.sum(0).realize()
        first, second = G.LAUNCHED
        assert first.total >= 32768 and not any("group_local" in o for o in first.opts)
        assert not first.scattered and not second.scattered
        y = cv.zeros(8192, 40, device=G.NAME).contiguous().realize()  # (40 columns: one work-group each)
        G.LAUNCHED.clear()
        y.sum(0).realize()
        assert any(k.scattered for k in G.LAUNCHED)  # (the flag can fail)
        z = cv.zeros(1 << 22, device=G.NAME).realize()  # a whole sum: each work item reads vectors of 4 floats
        G.LAUNCHED.clear()
        z.sum().realize()
        assert any("vector_reduce" in o for k in G.LAUNCHED for o in k.opts)
        assert not any(k.scattered for k in G.LAUNCHED)  # (neighbours' vectors side by side: not scattered)
    finally:
        registry.unregister_backend(G.NAME)


def test_column_reduces_on_every_device(device):
    """Each executing device (CPU: one kernel; CL, WEBGPU, CUDA: split) gives the column sums."""
    a = rng.standard_normal((4096, 264)).astype(np.float32)
    x = cv.Tensor(a, device=device)
    np.testing.assert_allclose(x.sum(0).numpy(), a.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(x.amin(0).numpy(), a.min(0))
    b = rng.standard_normal((4, 1024, 264)).astype(np.float32)
    y = cv.Tensor(b, device=device)
    np.testing.assert_allclose(y.sum((0, 1), keepdims=True).numpy(), b.astype(np.float64).sum((0, 1), keepdims=True),
                               rtol=1e-5, atol=1e-4)
