"""The README's main job: examples/mnist.py trains the CNN on the offline MNIST files (the first
9,000 test-split images) and reaches at least 97% on the last 1,000 (issue 6)."""

import importlib.util
import pathlib

import pytest

import corvid as cv

ROOT = pathlib.Path(__file__).resolve().parents[1]
CANDIDATES = [ROOT.parent / "shared" / "data" / "mnist", pathlib.Path("/work/shared/data/mnist")]
MNIST_DIR = next((p for p in CANDIDATES if (p / "t10k-images-idx3-ubyte.gz").is_file()), None)


def _example():
    spec = importlib.util.spec_from_file_location("mnist_example", ROOT / "examples" / "mnist.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(MNIST_DIR is None, reason=f"the offline MNIST files are not in any of {CANDIDATES}")
def test_mnist_example_reaches_97_percent_offline_and_saves_a_checkpoint(tmp_path, capsys):
    example = _example()
    ckpt = tmp_path / "cnn.safetensors"
    accuracy = example.main(["--data", str(MNIST_DIR), "--epochs", "4", "--checkpoint", str(ckpt)])
    out = capsys.readouterr().out
    assert "first 9,000" in out and "test accuracy" in out
    assert accuracy >= 0.97, out
    # the checkpoint holds every parameter and reproduces the accuracy in a fresh model
    model = example.CNN()
    state = cv.load(str(ckpt))
    assert set(state) == {name for name, _ in model.named_parameters()}
    model.load_state_dict(state)
    _, held_out, _ = example.load_data(str(MNIST_DIR))
    assert example.evaluate(model, held_out) == pytest.approx(accuracy)
