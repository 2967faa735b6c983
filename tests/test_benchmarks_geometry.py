"""benchmarks/geometry.py: the CUDA launch geometry of a workload's kernels, without a GPU.

A GPT-2 small training step (one of its blocks, batch 8 x 1024 tokens, bfloat16) is scheduled on
the GEOMETRY device (the NULL device with the CUDA device's heuristics and renderer): no kernel
other than a matrix product (the library's on a GPU) may move megabytes with a few thousand
threads, which the loss per row over the vocabulary and the norms' sums over 8192 rows of 768 did
(one thread per row) until corvid/codegen/opt.py's reduces_local and GPU_LONG_ROW, and the
embeddings' gradient scatters did until CUDARenderer.scatter_items."""

import argparse
import io

from benchmarks import geometry


def test_a_gpt2_step_starves_no_kernel_of_threads():
    args = argparse.Namespace(batch=8, tokens=1024, layers=1)
    kernels = geometry.geometry("gpt2", args)
    assert len(kernels) > 50 and any(k.product for k in kernels) and any(k.kind == "template" for k in kernels)
    starved = [k for k in kernels if geometry.starved(k) and not k.product]
    assert not starved, [(k.name, k.nbytes, k.total, k.opts) for k in starved]
    # (the embedding tables' gradients were, until CUDA's scatters aimed at 65536 threads: 4608
    # threads for GPT-2's 50257 x 768 table, each copying 8376 rows of its column)
    scatters = [k for k in kernels if k.kind == "scatter" and k.nbytes > 100e6]
    assert scatters and all(k.total >= 65536 for k in scatters)
    vocab = [k for k in kernels if k.kind == "kernel" and not k.product and k.nbytes > 800e6 and k.name.startswith("r_")]
    assert vocab and all(k.total >= 8192 * 256 for k in vocab)  # (the reduces over the logits: a work-group per row)
    norms = [k for k in kernels if k.name == "r_8192" and 20e6 < k.nbytes < 100e6]  # (rows of 768)
    assert norms and all(k.total >= 8192 * 128 for k in norms)
    import corvid as cv

    assert geometry.NAME not in cv.devices()  # (registered for the run only)
    out = io.StringIO()
    geometry.report(kernels, out)
    text = out.getvalue()
    assert f"{len(starved)} starved" in text and "matrix products, the library's on a GPU: not listed" in text


def test_the_command_line_lists_a_workload():
    import contextlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert geometry.main(["block", "--products"]) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("first") and "blocks" in lines[1] and len(lines) > 5


def test_the_built_in_backends_cannot_be_unregistered():
    import pytest

    from corvid.runtime import device as registry

    for name in ("CPU", "null"):
        with pytest.raises(ValueError, match="built in"):
            registry.unregister_backend(name)
