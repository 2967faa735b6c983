"""GPU-style kernels: work-group ("local") loops, work-group reduces through local memory, the
NDRange they launch with, the GPU heuristics, and long reduces split into two kernels
(corvid/codegen/opt.py group_local / gpu_heuristics, corvid/render/opencl.py, corvid/ops/reduce.py).

The kernels run on the CL device (PoCL in CI) and are compared with the unoptimized kernel on
the CPU; without an OpenCL driver those tests are skipped with the reason."""

import numpy as np
import pytest

import corvid as cv
from corvid.codegen import search
from corvid.codegen.ir import Opt
from corvid.codegen.opt import (GPU_MANY_OUTPUTS, WIDE_ITEMS_MIN_OUTPUTS, OptError, apply_opt, apply_opts,
                                can_vectorize, gpu_heuristics, reduce_loops)
from corvid.render.opencl import launch
from corvid.runtime.device import get_device
from tests.test_opt import _base, _kernels, _real


@pytest.fixture(scope="module")
def cl():
    try:
        return get_device("CL")
    except (ImportError, RuntimeError, OSError) as e:
        pytest.skip(f"CL not available: {e}")


def _run(device: str, k, arrays):
    dev = get_device(device)
    prog = dev.compile(k, dev.renderer.render(k))
    runner = search._Runner.make(k, device)
    for buf, a in zip(runner.inputs, arrays):
        buf.copyin(a)
    return runner.run(prog, None)[0]


def _check(got, want, exact: bool, opts) -> None:
    assert got.dtype == want.dtype
    if exact:
        np.testing.assert_array_equal(got, want, err_msg=str(opts))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(opts))


@pytest.mark.parametrize("name", ["sum_inner", "sum_outer", "sum_two_axes", "max", "softmax", "int", "matmul_tanh",
                                  "gated_columns", "where_colsum"])
def test_work_group_reduces_keep_results(cl, name):
    """Each reduce loop shared by 2..16 work items (a power of two or not), alone and with a
    work-group output loop beside it, gives what the unoptimized kernel gives on the CPU."""
    k0 = _base(_kernels()[name])
    arrays = search.random_inputs(k0, seed=5)
    want = _run("CPU", k0, arrays)
    tried = 0
    for axis, lp in enumerate(reduce_loops(k0)):
        for width in (2, 3, 4, 16):
            if lp.size % width or width >= lp.size:
                continue
            extra = [Opt("local", len(k0.loops) - 1, 2)] if k0.loops and k0.loops[-1].size % 2 == 0 else []
            for opts in ([Opt("group_local", axis, width)], [Opt("group_local", axis, width)] + extra):
                k = apply_opts(k0, opts)
                src = cl.renderer.render(k)
                assert "barrier(CLK_LOCAL_MEM_FENCE)" in src and "__local" in src
                _check(_run("CL", k, arrays), want, want.dtype.kind != "f" or name == "max", opts)
                _check(_run("CPU", k, arrays), want, want.dtype.kind != "f" or name == "max", opts)  # a plain loop there
                tried += 1
    assert tried >= 2


def test_work_group_reduces_keep_nan_and_integer_wraparound(cl):
    a = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
    a[1, 77] = np.nan
    a[2, :] = -np.inf
    ints = np.full((3, 64), np.iinfo(np.int64).max // 16, dtype=np.int64)  # the sum wraps around
    for op, x in (("max", a), ("min", a), ("sum", a), ("sum", ints), ("prod", ints[:, :8] % 7 + 1)):
        t = getattr(cv.Tensor(x), op)(axis=1)
        k0 = _base(t)
        k = apply_opt(k0, Opt("group_local", 0, 8 if x.shape[1] > 8 else 4))
        arrays = [x]
        with np.errstate(all="ignore"):
            want = getattr(np, op)(x, axis=1) if op in ("max", "min") else getattr(np, op)(x, axis=1, dtype=t.dtype.np)
        got = _run("CL", k, arrays)
        if x.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True)
        else:
            np.testing.assert_array_equal(got, want)


def test_launch_geometry():
    """Grid loops are work-group ids (innermost on dimension 0), "local" loops work items; a loop
    that a reduce is hoisted out of stays inside the work item."""
    k = _base(_real(64, 32) @ _real(32, 48, seed=1))
    plain = launch(k)
    assert plain.global_size == (48, 64) and plain.local_size is None
    tiled = launch(apply_opts(k, [Opt("local", 1, 16), Opt("group_local", 0, 8)]))
    assert tiled.local_size == (16, 8) and tiled.global_size == (3 * 16, 64 * 8)
    soft = _base(_real(8, 32).softmax(-1))  # the row's max and sum are computed once per row
    assert [lp.size for lp in launch(soft).grid] == [8]
    with pytest.raises(OptError, match="must divide"):
        apply_opt(k, Opt("group_local", 0, 5))


def test_gpu_heuristics_share_long_reduces_with_few_outputs():
    full = _base(_real(1 << 14).sum())
    assert [str(o) for o in gpu_heuristics(full).opts] == ["group_local(0, 256)"]
    assert [str(o) for o in gpu_heuristics(full, max_group=64).opts] == ["group_local(0, 64)"]
    # many outputs, each a contiguous row: a work-group per row still, from rows of 256 (one work
    # item per row left 8192 rows of 768 to 8192 threads, neighbours reading 768 elements apart)
    many = _base(_real(GPU_MANY_OUTPUTS, 1024).sum(axis=1))
    assert [str(o) for o in gpu_heuristics(many).opts] == ["group_local(0, 256)"]
    assert [str(o) for o in gpu_heuristics(_base(_real(GPU_MANY_OUTPUTS, 384).sum(axis=1))).opts] == \
        ["group_local(0, 128)"]  # (the widest group that divides the row)
    assert gpu_heuristics(_base(_real(GPU_MANY_OUTPUTS, 128).sum(axis=1))).opts == ()  # (short rows: an item each)
    emb = cv.Tensor(np.random.default_rng(0).standard_normal((100, 768)).astype(np.float32))
    rows = emb[cv.Tensor(np.arange(GPU_MANY_OUTPUTS) % 100)].sum(-1)  # (an embedding's rows, gathered by token)
    assert [str(o) for o in gpu_heuristics(_base(rows)).opts] == ["group_local(0, 256)"]
    soft = _base(_real(4, 8192).softmax(-1))  # hoisted reduces: a work-group per row (rows_local)
    assert [str(o) for o in gpu_heuristics(soft).opts] == ["rows_local(1, 256)"]
    assert gpu_heuristics(soft, shared_reduce=False).opts == ()
    assert [str(o) for o in gpu_heuristics(_base(_real(4, 96 * 2).softmax(-1))).opts] == ["rows_local(1, 64)"]
    assert gpu_heuristics(_base(_real(64, 100).softmax(-1))).opts == ()  # (a short row: one work item)


def test_gpu_heuristics_share_a_reduce_spread_over_short_loops():
    # a convolution's bias gradient: 32 channels, each a sum over (N, H, W) = 128 x 20 x 20, no loop
    # of which is long; one work item per channel summed 51200 elements alone
    g = _real(128, 32, 20, 20)
    k = _base(g.sum((0, 2, 3)))
    assert sorted(lp.size for lp in reduce_loops(k)) == [128, 400]
    opts = [str(o) for o in gpu_heuristics(k).opts]
    assert len(opts) == 1 and opts[0].startswith("group_local") and opts[0].endswith(", 64)")
    assert gpu_heuristics(_base(_real(16, 8, 8).sum((0, 2)))).opts == ()  # (128 elements: not worth a group)


def _rows():
    rng = np.random.default_rng(3)
    x = cv.Tensor(rng.standard_normal((6, 256)).astype(np.float32)).realize()
    w = cv.Tensor(rng.standard_normal(256).astype(np.float32)).realize()
    ints = cv.Tensor(rng.integers(-1000, 1000, (5, 128)).astype(np.int32)).realize()
    nan = rng.standard_normal((4, 128)).astype(np.float32)
    nan[1, 77], nan[2, :] = np.nan, -np.inf
    return {"softmax": x.softmax(-1), "log_softmax": x.log_softmax(-1),
            "layer_norm": cv.nn.functional.layer_norm(x, (256,), w, w * 0.5),
            "rms_norm": x * (x * x).mean(-1, keepdims=True).rsqrt() * w,
            "int": ints * 3 - ints.sum(axis=1, keepdims=True) + ints.max(axis=1, keepdims=True),
            "nan": ((lambda n: n.softmax(-1) + n.max(-1, keepdims=True))(cv.Tensor(nan).realize()), nan)}


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rms_norm", "int", "nan"])
def test_a_work_group_per_row_keeps_results(cl, name):
    """rows_local: the items of a work-group reduce a row together (its max, sum, mean), then
    each stores its own columns; the same values as the unoptimized kernel on the CPU (within
    float rounding of the sums' order; integers and maxima exactly), for work-groups of 2..64."""
    t = _rows()[name]
    t, given = t if isinstance(t, tuple) else (t, None)
    k0 = _base(t)
    arrays = search.random_inputs(k0, seed=4) if given is None else [given]
    want = _run("CPU", k0, arrays)
    if given is not None:  # (nan in a row, a row of -inf: the softmax's nan rows, as numpy's)
        rows = want.reshape(given.shape)
        assert len(k0.params) == 2 and np.isnan(rows[1]).all() and np.isnan(rows[2]).all() and not np.isnan(rows[0]).any()
    for width in (2, 4, 32, 64):
        k = apply_opt(k0, Opt("rows_local", len(k0.loops) - 1, width))
        src = cl.renderer.render(k)
        assert src.count("barrier(CLK_LOCAL_MEM_FENCE)") >= 3 and "(the same work items)" in src
        assert [lp.size for lp in launch(k).grid] == [k0.loops[0].size] and launch(k).local_size == (width,)
        got = _run("CL", k, arrays)
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6, equal_nan=True, err_msg=str(width))
        else:
            np.testing.assert_array_equal(got, want, err_msg=str(width))


def test_a_work_group_per_row_is_refused_where_it_does_not_apply():
    with pytest.raises(OptError, match="hoisted"):  # (a plain row sum: its reduce is per output)
        apply_opt(_base(_real(8, 256).sum(axis=1)), Opt("rows_local", 0, 8))
    soft = _base(_real(8, 256).softmax(-1))
    with pytest.raises(OptError, match="innermost"):
        apply_opt(soft, Opt("rows_local", 0, 8))
    with pytest.raises(OptError, match="multiple"):
        apply_opt(soft, Opt("rows_local", 1, 256))


def test_cpu_like_devices_get_vector_columns_for_column_reduces():
    """A sum over a leading axis gets vectors across its outputs on a device that runs a work
    item's loops in sequence (PoCL); a row reduce or an elementwise kernel gets none."""
    col = _base(_real(64, 256).sum(axis=0))
    assert [str(o) for o in gpu_heuristics(col, vector_lanes=8).opts] == ["vectorize(0, 8)"]
    assert gpu_heuristics(col).opts == ()  # (a GPU: neighbouring work items already read neighbours)
    assert gpu_heuristics(_base(_real(64, 256).sum(axis=1)), vector_lanes=8).opts == ()
    assert gpu_heuristics(_base((_real(64, 256) * 2).exp()), vector_lanes=8).opts == ()


def test_wide_items_give_each_work_item_16_bytes_of_its_narrowest_operand():
    """``vector_bytes`` (CUDA's 16): an elementwise kernel's innermost loop upcast by the elements
    of 16 bytes of its narrowest contiguous operand (4 floats, 8 bfloat16, at most 8); 4 rows per
    work item where the row is odd; nothing where the rows are odd too, where no operand is contiguous along the loop, where the size is
    symbolic or the kernel small, or for reduces (their own actions)."""
    n = WIDE_ITEMS_MIN_OUTPUTS

    def opts(t, **kw):
        return [str(o) for o in gpu_heuristics(_base(t), vector_bytes=16, **kw).opts]

    assert opts((_real(n) * 2).exp()) == ["upcast(0, 4)"]
    assert opts((_real(n, dtype=cv.bfloat16) * 2).exp()) == ["upcast(0, 8)"]
    assert opts(_real(n).astype(cv.bfloat16)) == ["upcast(0, 8)"]  # (the narrow output sets it)
    assert opts(_real(n).astype(cv.float64) + 1) == ["upcast(0, 4)"]
    assert opts(_real(n, 2).astype(cv.int8) + 1) == ["upcast(0, 8)"]  # (at most 8 per item)
    assert opts(_real(64, 768) + _real(768, seed=1)) == ["upcast(1, 4)"]  # (a broadcast row: contiguous too)
    assert opts(_real(n + 2) + 1) == []  # (a length 4 does not divide)
    assert opts(_real(256, 258)[:, :257] + 1) == ["upcast(0, 4)"]  # (odd rows: 4 rows per item)
    assert opts(_real(255, 258)[:, :257] + 1) == []  # (and an odd number of them)
    assert opts(_real(n // 8) * 2) == []  # (small: an element per work item)
    assert opts(_real(n).sum()) == [o for o in opts(_real(n).sum()) if not o.startswith("upcast")]
    assert opts((_real(n) * 2).exp(), shared_reduce=False) == ["upcast(0, 4)"]
    assert [str(o) for o in gpu_heuristics(_base((_real(n) * 2).exp())).opts] == []  # (not asked for: OpenCL)


def test_wide_items_keep_their_values_on_cl_and_the_cpu(cl):
    """The wide items' kernels (several outputs per work item, their loads first) give what the
    unoptimized kernel gives, float, bfloat16 and integer, with nan and inf among the inputs."""
    n = WIDE_ITEMS_MIN_OUTPUTS
    x = _real(n)
    x = cv.Tensor(np.where(np.arange(n) % 97 == 0, np.nan, np.where(np.arange(n) % 89 == 0, -np.inf, x.numpy()))
                  .astype(np.float32)).realize()
    cases = [(x * 1.5 + 0.5).relu().exp(), (x.astype(cv.bfloat16) * 3).astype(cv.float32), x.astype(cv.bfloat16),
             _real(64, 768) * _real(768, seed=1) - 1, (x * 100).astype(cv.int8) + 1,
             _real(64, 258)[:, :257] * 2]
    for i, t in enumerate(cases):
        k0 = _base(t)
        k = gpu_heuristics(k0, vector_bytes=16)
        assert any(o.op == "upcast" for o in k.opts)
        arrays = search.random_inputs(k0, seed=3)
        arrays = [x.numpy() if a.shape == x.shape and a.dtype == np.float32 else a for a in arrays]  # (nan, -inf)
        want = _run("CPU", k0, arrays)
        for device in ("CL", "CPU"):
            got = _run(device, k, arrays)
            if want.dtype.itemsize == 2:  # (bfloat16: the bits, nan included)
                got, want16 = got.view(np.uint16), want.view(np.uint16)
                _check(got, want16, True, k.opts)
            else:  # (exp: the devices' own, within an ulp)
                _check(got, want, i > 0 or device == "CPU", k.opts)


def test_gpu_heuristics_give_matmul_work_items_register_tiles(cl):
    """A matmul-like kernel's work item computes an 8 x 8 tile (each loaded value serves a row or
    a column of it); an elementwise kernel gets none; results are unchanged on the device."""
    a, b = _real(256, 64), _real(64, 128, seed=1)
    k = _base(a @ b)
    tiled = gpu_heuristics(k)
    assert [str(o) for o in tiled.opts] == ["upcast(1, 8)", "upcast(0, 8)"]
    assert gpu_heuristics(_base((a * 2).exp())).opts == ()
    assert gpu_heuristics(_base(_real(16, 64) @ _real(64, 16, seed=1))).opts == ()  # too few work items left
    arrays = search.random_inputs(k, seed=2)
    np.testing.assert_allclose(_run("CL", tiled, arrays), _run("CPU", k, arrays), rtol=1e-5, atol=1e-5)
    x = cv.Tensor(a.numpy(), device="CL")  # what the CL device chooses for itself
    np.testing.assert_allclose((x @ cv.Tensor(b.numpy(), device="CL")).numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)


def test_long_reduces_split_into_two_kernels_on_cl(cl):
    """A long reduce with few outputs runs as partials then their reduce (two kernels), so that
    several work-groups share it; values and gradients are a plain reduce's."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 1 << 16)).astype(np.float32)
    x = cv.Tensor(a, device="CL")
    assert len(x.sum().schedule()) == 2 and len(cv.Tensor(a).sum().schedule()) == 1
    np.testing.assert_allclose(x.sum().numpy(), a.astype(np.float64).sum(), rtol=1e-5)
    np.testing.assert_allclose(x.max(axis=1).numpy(), a.max(axis=1))
    np.testing.assert_allclose(x.T.mean(axis=0).numpy(), a.astype(np.float64).mean(axis=1), rtol=1e-5, atol=1e-7)
    odd = rng.standard_normal(65537).astype(np.float32)  # no split divides it: one kernel
    np.testing.assert_allclose(cv.Tensor(odd, device="CL").sum().numpy(), odd.astype(np.float64).sum(), rtol=1e-4)
    w = cv.Tensor(a, device="CL", requires_grad=True)
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * a, rtol=1e-6)
    # shorter reduces are split too when there are a million elements in all: a convolution's bias
    # gradient, 32 channels each summed over (N, H, W) = 128 x 20 x 20, ran on 2048 threads
    g = rng.standard_normal((128, 32, 20, 20)).astype(np.float32)
    bias = cv.Tensor(g, device="CL").sum((0, 2, 3))
    assert len(bias.schedule()) == 2 and len(cv.Tensor(g[:16]).sum((0, 2, 3)).schedule()) == 1
    np.testing.assert_allclose(bias.numpy(), g.astype(np.float64).sum((0, 2, 3)), rtol=1e-5, atol=1e-4)
    assert len(cv.Tensor(g[:16], device="CL").sum((0, 2, 3)).schedule()) == 1  # (half a million in all: one)


@pytest.mark.parametrize("name", ["matmul", "softmax", "sum_outer", "where_colsum", "matmul_tanh", "gated_columns",
                                  "elementwise"])
def test_random_action_sequences_keep_results_on_cl(cl, name):
    """The fuzz test of the actions, on the CL device: vectors (OpenCL's floatN, vload/vstore,
    lane loops for values without a vector form), register tiles, work-group loops and reduces,
    in random combinations, against the unoptimized kernel on the CPU."""
    k0 = _base(_kernels()[name])
    arrays = search.random_inputs(k0, seed=7)
    want = _run("CPU", k0, arrays)
    rng = np.random.default_rng(sum(map(ord, name)) + 1)
    vectorized = 0
    vectorizable = [a for a in range(len(k0.loops)) if can_vectorize(k0, a, 4)]
    for trial in range(5):
        k = k0 if trial or not vectorizable else apply_opt(k0, Opt("vectorize", vectorizable[-1], 4))
        for _ in range(rng.integers(1, 4)):
            cands = [o for o in search.candidate_opts(k) if o.op != "vectorize" or o.arg in (2, 4, 8, 16)]
            cands += [Opt("vectorize", a, 4) for a in range(len(k.loops))]
            cands += [Opt("local", a, 2) for a in range(len(k.loops))]
            cands += [Opt("group_local", r, 4) for r in range(len(reduce_loops(k)))]
            try:
                k = apply_opt(k, cands[rng.integers(len(cands))])
            except OptError:
                continue
        vectorized += k.vector_width > 1
        _check(_run("CL", k, arrays), want, want.dtype.kind != "f", [str(o) for o in k.opts])
    assert vectorized or not vectorizable


def test_rows_no_work_group_divides_are_padded_up_to_one(cl):
    # a language model's vocabulary (50257 = 29 x 1733) left one work item per row of a softmax
    # and of a row sum; padded (gated loads, the reduce's identity in the extra iterations), a
    # work-group takes each row. Values as the unoptimized kernel's, on PoCL
    soft = _base(_real(4, 1100).softmax(-1))
    opts = [str(o) for o in gpu_heuristics(soft).opts]
    assert opts[0] == "pad(1, 256)" and opts[-1] == "rows_local(1, 256)" and \
        sum(o.startswith("pad_reduce") for o in opts) == len(reduce_loops(soft))
    big = _base(_real(GPU_MANY_OUTPUTS, 2053).sum(axis=1))  # many rows, each long and contiguous
    assert [str(o) for o in gpu_heuristics(big).opts] == ["pad_reduce(0, 256)", "group_local(0, 256)"]
    assert gpu_heuristics(_base(_real(2053, GPU_MANY_OUTPUTS).sum(axis=0))).opts == ()  # (columns: coalesced already)
    explicit = [Opt("pad_reduce", 0, 64), Opt("group_local", 0, 64)]  # (a narrower group than the heuristics' 256)
    for t, opts in ((_real(4, 1100).softmax(-1), None), (_real(6, 2053).max(axis=1), explicit),
                    (_real(6, 1100).logsumexp(-1), None)):
        k0 = _base(t)
        k = gpu_heuristics(k0) if opts is None else apply_opts(k0, opts)
        assert any(o.op == "pad_reduce" for o in k.opts)
        arrays = search.random_inputs(k0, seed=5)
        np.testing.assert_allclose(_run("CL", k, arrays), _run("CPU", k0, arrays), rtol=2e-6, atol=2e-6)


def test_a_loss_over_a_vocabulary_is_not_one_work_group():
    # cross entropy's mean over rows fused each row's reduce over the classes into one kernel of a
    # single output; on a GPU-style device the rows' losses are stored first
    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((64, 1000)).astype(np.float32), rng.integers(0, 1000, 64)
    want = cv.nn.functional.cross_entropy(cv.Tensor(x), cv.Tensor(t)).item()
    try:
        loss = cv.nn.functional.cross_entropy(cv.Tensor(x, device="CL"), cv.Tensor(t, device="CL"))
    except (ImportError, RuntimeError, OSError) as e:
        pytest.skip(f"CL not available: {e}")
    singles = [sk for sk in loss.schedule() if not sk.kernel.loops and sk.kernel.reduce_loops()]
    assert singles and all(max(lp.size for lp in reduce_loops(sk.kernel)) <= 64 for sk in singles)  # (sums of 64 rows)
    np.testing.assert_allclose(loss.item(), want, rtol=1e-5)


def _input_loads(source: str, param: int = 1) -> int:
    """How many times a kernel's source reads its input ``p<param>``."""
    import re

    return len(re.findall(rf"\bp{param}\[", source))


@pytest.mark.parametrize("case", ["softmax", "layer_norm", "logsumexp", "padded_softmax", "bf16_softmax", "nan_rows"])
def test_rows_read_by_several_loops_are_read_from_memory_once(cl, case):
    # a softmax reads its row for the max, for the sum and for the output; a layer norm for the
    # mean, the variance and the output: the first loop keeps the work item's elements in an
    # array of registers (the row cache) and the later loops read them from there
    from corvid.nn.functional import layer_norm
    from corvid.render.cuda import CUDARenderer

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 2048 if case != "padded_softmax" else 1100)).astype(np.float32)
    if case == "nan_rows":
        x[1, 7], x[2, 100], x[3, 5] = np.nan, np.inf, -np.inf
    t = cv.Tensor(x)
    build = {"softmax": lambda t: t.softmax(-1), "nan_rows": lambda t: t.softmax(-1),
             "layer_norm": lambda t: layer_norm(t, (t.shape[-1],)), "logsumexp": lambda t: t.logsumexp(-1),
             "padded_softmax": lambda t: t.softmax(-1),
             "bf16_softmax": lambda t: t.astype(cv.bfloat16).softmax(-1)}[case]
    k0 = _base(build(t)) if case != "bf16_softmax" else _base(build(cv.Tensor(x).astype(cv.bfloat16).realize()))
    k = gpu_heuristics(k0)
    src = cl.renderer.render(k)
    assert "cv_row0" in src and _input_loads(src) == 1, src
    assert "cv_row0" in CUDARenderer().render(k)
    arrays = search.random_inputs(k0, seed=5) if case != "nan_rows" else [x]
    got, want = _run("CL", k, arrays), _run("CPU", k0, arrays)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-6, atol=2e-6)


def test_rows_too_long_for_registers_are_read_again():
    # 256 work items over a row of 51200: 200 elements each, more than the cache holds
    from corvid.render.gpu import ROW_CACHE_MAX
    from corvid.render.opencl import OpenCLRenderer

    k = gpu_heuristics(_base(_real(4, 256 * (ROW_CACHE_MAX + 8)).softmax(-1)))
    src = OpenCLRenderer().render(k)
    assert "cv_row" not in src and _input_loads(src) == 3


def test_several_reduces_over_a_row_are_all_shared_by_the_work_group(cl):
    # a log-sum-exp reduces its row twice (the maximum, then the sum of exponentials) and a loss
    # per row adds the target's logit: group_local shared one of the reduces, and every work item
    # walked the others whole (GPT-2's 50257 logits: one work item per row); reduces_local shares
    # them all, one work-item id for every reduce
    from corvid.render.opencl import OpenCLRenderer

    rng = np.random.default_rng(0)
    t = cv.Tensor(rng.integers(0, 1100, GPU_MANY_OUTPUTS))
    cases = [(_real(8, 2048).logsumexp(-1), ["reduces_local(0, 256)"]),
             (_real(6, 1100).logsumexp(-1), ["pad_reduce(0, 256)", "pad_reduce(1, 256)", "reduces_local(0, 256)"]),
             (cv.nn.functional.cross_entropy(_real(GPU_MANY_OUTPUTS, 2100), t[:GPU_MANY_OUTPUTS] % 2100,
                                             reduction="none"), None)]
    for t_, want_opts in cases:
        k0 = _base(t_)
        k = gpu_heuristics(k0)
        opts = [str(o) for o in k.opts]
        if want_opts is not None:
            assert opts == want_opts
        assert opts[-1] == "reduces_local(0, 256)", opts
        lau = launch(k)
        assert len(lau.local) == 1 and lau.aliases  # (one work-item id for every reduce)
        src = OpenCLRenderer().render(k)
        assert src.count("barrier(CLK_LOCAL_MEM_FENCE);") >= 2 * len(reduce_loops(k0))
        arrays = search.random_inputs(k0, seed=5)
        np.testing.assert_allclose(_run("CL", k, arrays), _run("CPU", k0, arrays), rtol=2e-6, atol=2e-6)


def test_reduces_local_refuses_what_it_cannot_share():
    one = _base(_real(8, 2048).sum(-1))
    with pytest.raises(OptError, match="several reduces"):
        apply_opt(one, Opt("reduces_local", 0, 256))
    odd = _base(_real(8, 100).logsumexp(-1))
    with pytest.raises(OptError, match="no loop that 64 divides"):
        apply_opt(odd, Opt("reduces_local", 0, 64))


def test_many_rows_of_a_gathered_embedding_shared_by_work_groups_keep_their_values(cl):
    rng = np.random.default_rng(0)
    emb = cv.Tensor(rng.standard_normal((100, 768)).astype(np.float32))
    tokens = cv.Tensor(rng.integers(0, 100, GPU_MANY_OUTPUTS))
    for t in (emb[tokens].sum(-1), (emb[tokens] * 2.0).amax(-1), _real(GPU_MANY_OUTPUTS, 384).sum(axis=1)):
        k0 = _base(t)
        k = gpu_heuristics(k0)
        assert any(o.op == "group_local" for o in k.opts)
        arrays = search.random_inputs(k0, seed=5)
        np.testing.assert_allclose(_run("CL", k, arrays), _run("CPU", k0, arrays), rtol=2e-5, atol=2e-5)


def test_the_row_cache_can_be_turned_off(monkeypatch):
    from corvid.render.opencl import OpenCLRenderer

    k = gpu_heuristics(_base(_real(8, 2048).softmax(-1)))
    assert "cv_row0" in OpenCLRenderer().render(k)
    monkeypatch.setenv("CORVID_ROW_CACHE", "0")
    src = OpenCLRenderer().render(k)
    assert "cv_row" not in src and _input_loads(src) == 3
