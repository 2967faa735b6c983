"""Train examples/mnist.py's CNN data-parallel: several processes, gradients averaged through MPI.

    mpirun -n 2 python -m mpi4py examples/mnist_distributed.py --data ../shared/data/mnist
    python examples/mnist_distributed.py --data ../shared/data/mnist    # one process: the same training

Needs ``pip install "corvid[distributed]"`` and an MPI (``apt-get install openmpi-bin``); as
root, Open MPI's mpirun also wants ``--allow-run-as-root``. Every process holds the whole model
and reads its shard of each global batch (:class:`corvid.distributed.DistributedSampler`):
``--batch-size`` is the global batch, split evenly, so the hyperparameters mean the same for any
number of processes. A step is two ``cv.jit`` functions with one all-reduce between them (MPI
calls cannot be part of a compiled program): the loss and gradients of the process's shard, the
mean of those gradients across processes (one MPI call for all parameters), then the Adam
update, which every process computes identically. Rank 0 evaluates, prints and saves the
weights (``--checkpoint``); ``python -m mpi4py`` makes an error in one process end them all.
See docs/distributed.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mnist import CNN, MEAN, STD, evaluate, load_data, progress  # noqa: E402

import corvid as cv  # noqa: E402
import corvid.distributed as dist  # noqa: E402
from corvid.nn import functional as F  # noqa: E402


def make_steps(tx: Any) -> tuple[Any, Any]:
    """(loss and gradients of one shard, the optimizer update): the two compiled halves of a step."""

    @cv.jit
    def gradients(model: CNN, x: cv.Tensor, y: cv.Tensor) -> tuple[cv.Tensor, CNN]:
        return cv.value_and_grad(lambda m: F.cross_entropy(m((x - MEAN) / STD), y))(model)

    @cv.jit
    def update(grads: CNN, state: Any, model: CNN) -> tuple[CNN, Any]:
        return tx.update(grads, state, model)

    return gradients, update


def main(argv: list[str] | None = None) -> float | None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=os.environ.get("CORVID_DATA_DIR"),
                   help="folder holding the MNIST IDX files (default: $CORVID_DATA_DIR, else download)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128, help="the global batch, split evenly across processes")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default="mnist_cnn.safetensors", help="where rank 0 saves the trained weights")
    args = p.parse_args(argv)

    dist.init()
    rank, world = dist.rank(), dist.world_size()
    if args.batch_size % world:
        p.error(f"--batch-size {args.batch_size} does not split evenly across {world} processes")
    say = print if rank == 0 else (lambda *a, **k: None)
    if rank == 0 and args.data is None:  # one process downloads; the others then find the files
        load_data(None)
    dist.barrier()
    train, test, what = load_data(args.data)
    say(f"data: {what}; {world} process(es), {args.batch_size // world} images each per step", flush=True)
    cv.manual_seed(args.seed)
    model = CNN()
    dist.broadcast_parameters(model)  # equal already (same seed); this makes it so whatever the seeding
    tx = cv.optim.Adam.functional(lr=args.lr)
    state = tx.init(model)
    gradients, update = make_steps(tx)
    sampler = dist.DistributedSampler(train, seed=args.seed, drop_last=True)
    loader = cv.data.DataLoader(train, batch_size=args.batch_size // world, sampler=sampler, drop_last=True)
    accuracy = None
    for epoch in range(1, args.epochs + 1):
        t0, losses = time.perf_counter(), []
        batches = progress(loader, len(loader), f"epoch {epoch}/{args.epochs}") if rank == 0 else loader
        for x, y in batches:
            loss, grads = gradients(model, x, y)
            model, state = update(dist.all_reduce(grads, op="mean"), state, model)
            losses.append(loss)
        mean_loss = dist.all_reduce(cv.Tensor(float(np.mean([v.item() for v in losses]))), op="mean").item()
        seconds = time.perf_counter() - t0
        if rank == 0:
            accuracy = evaluate(model, test)
            print(f"epoch {epoch}: loss {mean_loss:.4f}, test accuracy {accuracy:.2%} "
                f"({seconds:.1f} s, {1e3 * seconds / len(loader):.0f} ms/step)", flush=True)
    dist.save_checkpoint(args.checkpoint, model)
    if rank == 0:
        print(f"test accuracy {accuracy:.2%}; weights saved to {args.checkpoint}")
    return accuracy


if __name__ == "__main__":
    main()
