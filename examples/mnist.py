"""Train the MNIST CNN and report its test accuracy: corvid's main job.

The network: conv 32 5x5, relu, conv 32 5x5, relu, maxpool 2,
conv 64 3x3, relu, conv 64 3x3, relu, maxpool 2, flatten, linear 10; cross-entropy, Adam, batch
128. One training step (forward, backward and the Adam update of every parameter) is a
``cv.jit`` function over the model (a pytree) and the optimizer state: it is traced once, then
every step replays the same compiled kernels.

    python examples/mnist.py                                # full MNIST (downloaded once, verified)
    python examples/mnist.py --data ../shared/data/mnist    # offline: a folder holding the files
    python examples/mnist.py --device CUDA                  # on the GPU (pip install "corvid[cuda]")

``--device`` picks where the model, its optimizer state and the batches live (default:
``$CORVID_DEVICE``, else the fastest device that starts here, ``cv.devices()[0]``: a GPU when
there is one); the run prints which one it uses. The DataLoader copies each batch to the device
in its background thread while the previous step runs.

A folder that holds only the test split (``t10k-*``) is used the way the offline checks use it:
train on its first 9,000 images, evaluate on the last 1,000. The trained weights are saved as
safetensors (``--checkpoint``, default ``mnist_cnn.safetensors``), written to a temporary file
and renamed, so an interrupted run never leaves a broken checkpoint behind.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Iterable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import corvid as cv  # noqa: E402
from corvid import nn  # noqa: E402
from corvid.nn import functional as F  # noqa: E402

MEAN, STD = 0.1307, 0.3081  # of the MNIST training images


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(64 * 3 * 3, 10)

    def forward(self, x: cv.Tensor) -> cv.Tensor:
        return self.head(self.features(x).reshape(x.shape[0], -1))


def load_data(folder: str | None) -> tuple[Any, Any, str]:
    """(training set, evaluation set, a line describing them)."""
    try:
        return (cv.data.MNIST(folder, train=True, download=folder is None),
                cv.data.MNIST(folder, train=False, download=folder is None), "MNIST train (60,000) / test (10,000)")
    except FileNotFoundError:
        if folder is None:
            raise
    test = cv.data.MNIST(folder, train=False)
    return (cv.data.Subset(test, range(9000)), cv.data.Subset(test, range(9000, len(test))),
            f"the test split only: training on its first 9,000 images, evaluating on the last {len(test) - 9000:,}")


def progress(items: Iterable[Any], total: int, desc: str) -> Iterable[Any]:
    """A tqdm bar when tqdm is installed (``pip install tqdm``), else a line per 20%."""
    try:
        from tqdm import tqdm
    except ImportError:
        def plain() -> Iterable[Any]:
            for i, item in enumerate(items):
                if total and (i + 1) % max(total // 5, 1) == 0:
                    print(f"{desc}: {i + 1}/{total}", flush=True)
                yield item
        return plain()
    return tqdm(items, total=total, desc=desc, leave=False, mininterval=0.5)


def make_step(tx: Any) -> Any:
    @cv.jit
    def step(model: CNN, state: Any, x: cv.Tensor, y: cv.Tensor) -> tuple[CNN, Any, cv.Tensor]:
        loss, grads = cv.value_and_grad(lambda m: F.cross_entropy(m((x - MEAN) / STD), y))(model)
        model, state = tx.update(grads, state, model)
        return model, state, loss

    return step


def pick_device(name: str | None) -> str:
    """``name``, else ``$CORVID_DEVICE``, else the fastest device that starts here."""
    if name:
        return cv.runtime.device.canonical_device(name)
    return cv.get_default_device() if os.environ.get("CORVID_DEVICE") else cv.devices()[0]


def evaluate(model: CNN, dataset: Any, batch_size: int = 500) -> float:
    """The accuracy of ``model`` on ``dataset``, its batches sent to the model's device."""
    model.eval()
    correct = 0
    device = next(iter(model.parameters())).device
    with cv.no_grad():
        for x, y in cv.data.DataLoader(dataset, batch_size=batch_size, device=device):
            correct += int((model((x - MEAN) / STD).argmax(-1) == y).sum().item())
    model.train()
    return correct / len(dataset)


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=os.environ.get("CORVID_DATA_DIR"),
                   help="folder holding the MNIST IDX files (default: $CORVID_DATA_DIR, else download)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default="mnist_cnn.safetensors", help="where to save the trained weights")
    p.add_argument("--device", default=None,
                   help="CPU, CUDA, CL, WEBGPU (default: $CORVID_DEVICE, else the fastest that starts here)")
    args = p.parse_args(argv)

    device = pick_device(args.device)
    train, test, what = load_data(args.data)
    print(f"data: {what}", flush=True)
    print(f"device: {device}", flush=True)
    cv.manual_seed(args.seed)
    with cv.default_device(device):
        model = CNN()
    tx = cv.optim.Adam.functional(lr=args.lr)
    state = tx.init(model)
    step = make_step(tx)
    loader = cv.data.DataLoader(train, batch_size=args.batch_size, shuffle=True, seed=args.seed, drop_last=True,
                                device=device)
    for epoch in range(1, args.epochs + 1):
        t0, losses = time.perf_counter(), []
        for x, y in progress(loader, len(loader), f"epoch {epoch}/{args.epochs}"):
            model, state, loss = step(model, state, x, y)
            losses.append(loss)
        mean_loss = float(np.mean([v.item() for v in losses]))
        seconds = time.perf_counter() - t0
        accuracy = evaluate(model, test)
        print(f"epoch {epoch}: loss {mean_loss:.4f}, test accuracy {accuracy:.2%} "
              f"({seconds:.1f} s, {1e3 * seconds / len(loader):.0f} ms/step)", flush=True)
    cv.save(args.checkpoint, model.state_dict())
    print(f"test accuracy {accuracy:.2%}; weights saved to {args.checkpoint}")
    return accuracy


if __name__ == "__main__":
    main()
