"""corvid.distributed (issue 8): data-parallel training over MPI processes.

The sampler and the error paths run here, without MPI. Everything that starts MPI runs in a
child process with a time limit (a stuck MPI job must not hang the test run): the training of
tests/_distributed_run.py alone (world size 1) and under ``mpirun -n 2``, compared with the same
training in this process without corvid.distributed. Those are skipped, with the reason, when
mpi4py, an MPI library or ``mpirun`` is missing (``pip install "corvid[distributed]"``,
``apt-get install openmpi-bin libopenmpi-dev``).
"""

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import corvid as cv
import corvid.distributed as dist
from corvid.distributed import DistributedSampler

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "_distributed_run.py"
TIMEOUT_S = 180  # a first run compiles the model's kernels; the runs take about 2 s once they are cached
LAUNCHER = shutil.which("mpirun") or shutil.which("mpiexec")
# Open MPI's settings for a test machine (other MPIs ignore them): run as root in a CI container,
# start 2 processes even on 1 core, and copy between processes through shared memory where the
# container forbids the cross-memory system calls
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


def _load_run_module():
    spec = importlib.util.spec_from_file_location("_distributed_run", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run = _load_run_module()


# --- the sampler (no MPI) ------------------------------------------------------------------------------


@pytest.mark.parametrize("n, replicas, drop_last", [(10, 2, False), (11, 3, False), (11, 3, True), (2, 4, False)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_sampler_shards_are_equal_disjoint_and_cover_the_epoch(n, replicas, drop_last, shuffle):
    shards = [DistributedSampler(range(n), replicas, r, shuffle=shuffle, seed=3, drop_last=drop_last).indices()
              for r in range(replicas)]
    size = n // replicas if drop_last else -(-n // replicas)
    assert all(len(s) == size for s in shards)
    taken = np.concatenate(shards)
    if drop_last:  # disjoint, and only the remainder left out
        assert len(set(taken.tolist())) == len(taken) == n - n % replicas
    else:  # everything, with the fewest repeats that make the shards equal
        assert set(taken.tolist()) == set(range(n))
        assert len(taken) - n == (-n) % replicas


def test_sampler_pads_by_repeating_the_start_of_the_order():
    shards = [list(DistributedSampler(range(5), 2, r, shuffle=False)) for r in (0, 1)]
    assert shards == [[0, 2, 4], [1, 3, 0]]
    assert [list(DistributedSampler(range(5), 2, r, shuffle=False, drop_last=True)) for r in (0, 1)] == [[0, 2], [1, 3]]


def test_sampler_is_deterministic_per_epoch_and_reshuffles_between_epochs():
    def epoch_order(epoch, seed=7):
        s = DistributedSampler(range(100), num_replicas=2, rank=1, seed=seed)
        s.set_epoch(epoch)
        return list(s)

    assert epoch_order(0) == epoch_order(0) and epoch_order(1) == epoch_order(1)
    assert epoch_order(0) != epoch_order(1)
    assert epoch_order(0) != epoch_order(0, seed=8)


def test_shards_batched_together_are_the_single_process_batches():
    """With b per process, the processes' k-th batches together are one process's k-th batch of
    2b in the order of a shuffled DataLoader with the same seed (what makes the data-parallel
    steps equal the single-process steps)."""
    data = cv.data.TensorDataset(np.arange(24))
    single = [x.tolist() for (x,) in cv.data.DataLoader(data, batch_size=8, shuffle=True, seed=5)]
    per_rank = [[x.tolist() for (x,) in cv.data.DataLoader(data, batch_size=4, sampler=DistributedSampler(
        data, num_replicas=2, rank=r, seed=5))] for r in (0, 1)]
    assert [sorted(a + b) for a, b in zip(*per_rank)] == [sorted(batch) for batch in single]
    assert list(DistributedSampler(data, num_replicas=1, rank=0, seed=5)) == [v for batch in single for v in batch]


def test_dataloader_drives_the_sampler_epochs():
    data = cv.data.TensorDataset(np.arange(12))
    sampler = DistributedSampler(data, num_replicas=3, rank=2, seed=1)
    loader = cv.data.DataLoader(data, batch_size=3, sampler=sampler, prefetch=0)
    assert len(loader) == 2
    epochs = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        expected = sampler.indices().tolist()
        epochs.append([v for (x,) in loader for v in x.tolist()])
        assert epochs[-1] == expected
    assert epochs[0] != epochs[1]
    loader.set_epoch(0)
    assert [v for (x,) in loader for v in x.tolist()] == epochs[0]


def test_sampler_and_loader_reject_bad_arguments():
    with pytest.raises(ValueError, match="rank 2"):
        DistributedSampler(range(4), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="num_replicas"):
        DistributedSampler(range(4), num_replicas=0, rank=0)
    with pytest.raises(ValueError, match="shuffle"):
        cv.data.DataLoader(range(4), shuffle=True, sampler=DistributedSampler(range(4), 1, 0))


# --- errors before MPI ---------------------------------------------------------------------------------


def test_init_without_mpi4py_says_what_to_install(monkeypatch):
    monkeypatch.setattr(dist.collectives, "_comm", None)
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # makes `import mpi4py` fail as if it were not installed
    with pytest.raises(ImportError, match=r'pip install "corvid\[distributed\]".*openmpi-bin'):
        dist.init()
    assert not dist.is_initialized()


def test_the_group_needs_init(monkeypatch):
    monkeypatch.setattr(dist.collectives, "_comm", None)
    for call in (dist.rank, dist.world_size, dist.barrier, lambda: dist.all_reduce(cv.ones(2))):
        with pytest.raises(RuntimeError, match="init"):
            call()
    with pytest.raises(RuntimeError, match="init"):
        DistributedSampler(range(4))  # its defaults come from the group


# --- runs with MPI (child processes) -------------------------------------------------------------------


@pytest.fixture(scope="module")
def mpi():
    """Skips unless mpi4py can load an MPI library and a launcher is on PATH."""
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip('mpi4py is not installed: pip install "corvid[distributed]"')
    if LAUNCHER is None:
        pytest.skip("no mpirun/mpiexec on PATH: install an MPI, e.g. apt-get install openmpi-bin libopenmpi-dev")
    probe = subprocess.run([sys.executable, "-c", "from mpi4py import MPI"], check=False, capture_output=True,
                           text=True, timeout=TIMEOUT_S, env={**os.environ, **MPI_ENV})
    if probe.returncode != 0:
        pytest.skip(f"mpi4py cannot load an MPI library: {probe.stderr.strip().splitlines()[-1]}")


def _launch(command, what):
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT,
                              env={**os.environ, **MPI_ENV})
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{what} did not finish in {TIMEOUT_S} s:\n{e.stdout}\n{e.stderr}")
    assert done.returncode == 0, f"{what} failed:\n{done.stdout}\n{done.stderr}"


def _mpirun(mode, out):
    _launch([LAUNCHER, "-n", "2", sys.executable, "-m", "mpi4py", str(RUN), mode, str(out)], f"mpirun -n 2 ({mode})")


@pytest.fixture(scope="module")
def reference():
    """The training done by one process over the whole global batch, without corvid.distributed."""
    return run.train_one_process()


def test_one_process_without_mpirun_is_plain_training(mpi, reference, tmp_path):
    _launch([sys.executable, str(RUN), "train", str(tmp_path)], "the training as one process")
    got = np.load(tmp_path / "rank0.npz")
    assert int(got["world_size"]) == 1
    # world size 1: the all-reduce is a no-op and the sampler visits the DataLoader's order, so the
    # same kernels see the same values: equal bit for bit
    for name, value in reference.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    assert set(cv.load(tmp_path / "model.safetensors")) == set(reference)


def test_two_processes_train_like_one_process_on_the_full_batch(mpi, reference, tmp_path):
    _mpirun("train", tmp_path)
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in (0, 1)]
    assert [int(r["world_size"]) for r in ranks] == [2, 2], "mpirun and mpi4py use different MPI libraries?"
    for name, value in reference.items():
        # the same steps: the mean of 2 equal shards' mean gradients is the full batch's mean gradient,
        # summed in another order (6 float32 SGD steps: measured differences of 6e-8)
        np.testing.assert_allclose(ranks[0][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
        # the parameters began different on each rank and were broadcast; every all-reduce gives
        # every rank the same bits, so they stay equal exactly
        np.testing.assert_array_equal(ranks[1][name], ranks[0][name], err_msg=name)
    checkpoint = cv.load(tmp_path / "model.safetensors")  # written by rank 0 alone
    assert set(checkpoint) == set(reference)
    for name, value in checkpoint.items():
        np.testing.assert_array_equal(value.numpy(), ranks[0][name], err_msg=name)


def test_collectives_across_two_processes(mpi, tmp_path):
    _mpirun("collectives", tmp_path)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for got in results:  # rank r passed [r + 1, -2r]
        assert got["world_size"] == 2
        assert (got["sum"], got["mean"], got["max"], got["min"]) == ([3, -2], [1.5, -1], [2, 0], [1, -2])
        assert got["mixed"] == {"f32": ["float32", [3, -2]], "i64": ["int64", [11]],
                                "bf16": ["bfloat16", [3, -2]], "bool": ["bool", [True, False]]}
        assert got["broadcast"] == [20, -20]  # rank 1's x * 10
        assert "rank 1 passed [((3,), 'float32')] but the root (rank 0) passed [((2,), 'float32')]" \
            in got["broadcast_mismatch"]
    # rank 0 could not write the checkpoint: it raises the error, the other rank a RuntimeError naming it
    assert [got["checkpoint_error"] for got in results] == ["FileNotFoundError", "RuntimeError"]
