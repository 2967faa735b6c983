"""The programs tests/test_distributed.py runs under ``mpirun`` (and alone, as one process).

``python -m mpi4py tests/_distributed_run.py train OUT``: trains a small MLP with SGD on a fixed
dataset, sharded by :class:`corvid.distributed.DistributedSampler`, with gradients averaged by
``all_reduce_gradients``; saves a checkpoint from rank 0 (``OUT/model.safetensors``); each rank
writes its final parameters to ``OUT/rank{r}.npz``. :func:`train_one_process` is the same training
without corvid.distributed: one process, the whole global batch per step (the reference).

``python -m mpi4py tests/_distributed_run.py collectives OUT``: each rank runs the collectives on
rank-dependent values and writes what it got to ``OUT/rank{r}.json``.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import corvid as cv  # noqa: E402
from corvid import nn  # noqa: E402

SAMPLES, FEATURES, CLASSES = 48, 4, 3
GLOBAL_BATCH, EPOCHS, SEED = 16, 2, 0  # 3 steps per epoch; every rank's shard is a whole number of batches


def dataset() -> cv.data.TensorDataset:
    """A fixed classification problem: points labelled by which of 3 directions they lie closest to."""
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((SAMPLES, FEATURES)).astype(np.float32)
    y = (x @ rng.standard_normal((FEATURES, CLASSES))).argmax(axis=1)
    return cv.data.TensorDataset(x, y)


def make_model(seed: int) -> nn.Module:
    cv.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, CLASSES))


def _sgd_step(model: nn.Module, opt: cv.optim.Optimizer, x: cv.Tensor, y: cv.Tensor, reduce: bool) -> None:
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    if reduce:
        cv.distributed.all_reduce_gradients(model)
    opt.step()


def parameters(model: nn.Module) -> dict[str, np.ndarray]:
    return {name: t.numpy() for name, t in model.state_dict().items()}


def train_one_process() -> dict[str, np.ndarray]:
    """The reference: one process, no corvid.distributed, batches of GLOBAL_BATCH in the order a
    shuffled DataLoader with the same seed visits them."""
    model = make_model(SEED)
    opt = cv.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = cv.data.DataLoader(dataset(), batch_size=GLOBAL_BATCH, shuffle=True, seed=SEED, prefetch=0)
    for _ in range(EPOCHS):
        for x, y in loader:
            _sgd_step(model, opt, x, y, reduce=False)
    return parameters(model)


def train(out: pathlib.Path) -> None:
    dist = cv.distributed
    dist.init()
    rank, world = dist.rank(), dist.world_size()
    model = make_model(SEED + rank)  # different on every rank until the broadcast
    dist.broadcast_parameters(model)
    opt = cv.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = dataset()
    sampler = dist.DistributedSampler(data, shuffle=True, seed=SEED)
    loader = cv.data.DataLoader(data, batch_size=GLOBAL_BATCH // world, sampler=sampler, prefetch=0)
    for _ in range(EPOCHS):
        for x, y in loader:
            _sgd_step(model, opt, x, y, reduce=True)
    dist.save_checkpoint(out / "model.safetensors", model)
    np.savez(out / f"rank{rank}.npz", world_size=world, **parameters(model))


def collectives(out: pathlib.Path) -> None:
    dist = cv.distributed
    dist.init()
    rank = dist.rank()
    x = cv.Tensor([rank + 1.0, -2.0 * rank])
    mixed = {"f32": x, "i64": cv.Tensor([rank + 5], dtype=cv.int64), "bf16": x.astype(cv.bfloat16),
             "bool": cv.Tensor([rank == 0, False])}
    got = {op: dist.all_reduce(x, op=op).tolist() for op in dist.collectives.REDUCE_OPS}
    got["mixed"] = {k: [v.dtype.name, v.tolist()] for k, v in dist.all_reduce(mixed, op="sum").items()}
    got["broadcast"] = dist.broadcast([x * 10, cv.Tensor([rank], dtype=cv.int32)], root=1)[0].tolist()
    try:
        dist.broadcast(cv.zeros(2 + rank))
    except ValueError as e:
        got["broadcast_mismatch"] = str(e)
    try:
        dist.save_checkpoint(out / "missing-folder" / "model.safetensors", {"x": x})
    except Exception as e:
        got["checkpoint_error"] = type(e).__name__
    got["world_size"] = dist.world_size()
    (out / f"rank{rank}.json").write_text(json.dumps(got))


if __name__ == "__main__":
    mode, folder = sys.argv[1], pathlib.Path(sys.argv[2])
    os.makedirs(folder, exist_ok=True)
    {"train": train, "collectives": collectives}[mode](folder)
