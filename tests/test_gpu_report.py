"""The GPU report (benchmarks/gpu.py, ``python -m benchmarks --gpu``) runs end to end without a GPU:
``--device CPU --quick`` goes through every part (environment, the CUDA test selection, the table of
corvid vs PyTorch, the examples) with corvid on the CPU, and a device that does not start ends the
report at once with its start error. What only a GPU can check (the figures, the CUDA rows' kernels,
torch.compile on CUDA, GPT-2-small) is not checked here."""

import os
import pathlib
import subprocess
import sys

import pytest

from benchmarks.gpu import ROWS, RowResult, _compare, _peaks, format_rows
from tests.test_cuda_runtime import fake  # noqa: F401  (the FakeCUDA fixture)

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, "-m", "benchmarks", "--gpu", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_quick_report_on_the_cpu_has_every_part_and_passes(tmp_path):
    out = tmp_path / "report.txt"
    proc = _run("--device", "CPU", "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    text = out.read_text()
    assert text == proc.stdout.replace("\r", "")  # the file holds what was printed
    for title in ("== 1. environment ==", "== 2. CUDA test selection ==", "== 3. corvid vs PyTorch ==",
                  "== 4. examples ==", "== done in ", "everything ran and passed"):
        assert title in text, title
    env, tests, table, examples = (text.split("== ")[i] for i in (1, 2, 3, 4))
    assert "corvid device: CPU" in env and "first kernel on CPU: ok" in env and "torch:" in env
    assert " passed" in tests and "failed" not in tests
    table_lines = [line for line in table.splitlines() if line.startswith("| ")]
    for row in ROWS:  # each row in the table, checked
        line = next((x for x in table_lines if x.startswith(f"| {row.name} ")), None)
        assert line is not None and line.rstrip(" |").endswith("ok"), (row.name, table)
    assert "% limit of the bandwidth rows: of the copy bandwidth measured in this run" in table
    for row in (r for r in ROWS if r.profile):  # each step's costliest kernels, from cv.profile
        head = f"  {row.name}: corvid's kernels, one call under cv.profile (device time)\n"
        assert head in table, row.name
        listed = table.split(head, 1)[1].splitlines()
        assert listed[0].split()[:2] == ["kernel", "device"] and any(x.strip().startswith("total") for x in listed[:16])
    assert "MNIST, one epoch of examples/mnist.py" in examples
    assert "test accuracy" in examples or "skipped: no MNIST files" in examples
    assert "falling, ok" in examples and "GPT-2-small: skipped (--quick)" in examples


def test_a_device_that_does_not_start_ends_the_report_with_its_error(tmp_path):
    from corvid.runtime.device import get_device

    try:
        get_device("CUDA")
    except (ImportError, RuntimeError, OSError) as e:
        why = str(e)
    else:
        pytest.skip("CUDA starts here")
    out = tmp_path / "report.txt"
    proc = _run("--quick", "--out", str(out), timeout=120)  # (CUDA, the default device)
    assert proc.returncode == 2, proc.stdout
    text = out.read_text()
    assert "corvid's device CUDA did not start" in text and why.split(":")[0] in text
    assert "== 2. CUDA test selection ==" not in text


def test_the_compute_rows_are_judged_against_the_datasheet_of_the_gpu_they_ran_on():
    row = RowResult("matmul_4096_bf16", kind="compute", dtype="bfloat16", work=2.0 * 4096 ** 3,
                    times={"corvid": 2.0 * 4096 ** 3 / 494.5e12, "torch": 2.0 * 4096 ** 3 / 700e12})
    sxm = _peaks({"family": "CUDA", "gpu_name": "NVIDIA H100 80GB HBM3"}, [row])
    assert sxm["bfloat16"][0] == 989e3 and "H100 SXM" in sxm["bfloat16"][1]
    assert _peaks({"family": "CUDA", "gpu_name": "NVIDIA H100 PCIe"}, [row])["bfloat16"][0] == 756e3
    assert _peaks({"family": "CUDA", "gpu_name": "NVIDIA H200"}, [row])["float32"][0] == 67e3
    unknown = _peaks({"family": "CUDA", "gpu_name": "NVIDIA A100-SXM4-80GB"}, [row])  # no table entry
    assert unknown["bfloat16"][0] == pytest.approx(700e3) and "PyTorch's best" in unknown["bfloat16"][1]
    table = format_rows([row], True, False, 3000.0, sxm)
    assert "| 50% " in table and "| 71% " in table  # 494.5 and 700 of 989 TFLOP/s
    assert "| 0.71x " in table  # torch's time / corvid's


def test_results_are_compared_elementwise_or_relative_to_the_largest_value():
    want = np.array([1.0, 1000.0], np.float32)
    assert _compare(want + np.float32(1e-3), want, 1e-5, 0.0, scaled=False) is not None
    assert _compare(want + np.float32(1e-3), want, 1e-5, 0.0, scaled=True) is None
    assert "shape" in _compare(want[:1], want, 1e-5, 0.0, scaled=False)


def _messages(out: str) -> list[dict]:
    import json

    from benchmarks.gpu import PREFIX

    return [json.loads(line[len(PREFIX):]) for line in out.splitlines() if line.startswith(PREFIX)]


def test_the_workers_go_through_the_cuda_device_with_a_stand_in_driver(fake, capsys):
    """The header's CUDA line and the table's rows on tests/test_cuda_runtime.py's FakeCUDA: the
    real CUDADevice (its launches, copies, stream synchronize and, for the jitted block, CUDA
    graphs) on a driver that runs the kernels' C builds on the host."""
    import argparse

    from benchmarks import gpu

    args = argparse.Namespace(device=fake.name, quick=True, rows="add_1024,sum,matmul_4096_bf16,transformer_block,transformer_block_composite", copy_gbps=0.0,
                              copy_how="", cpu_peak=0.0)
    assert gpu.worker_env(args) == 0
    env, = _messages(capsys.readouterr().out)
    assert env["started"] and env["gpu_name"] == "Fake GPU" and not env.get("smoke_error")
    assert "Fake GPU, sm_90, 1 GiB; driver API 13.0" in env["device_line"]
    assert gpu.worker_rows(args) == 0
    msgs = _messages(capsys.readouterr().out)
    rows = {m["row"]: m for m in msgs if m["kind"] == "row"}
    assert set(rows) == set(args.rows.split(","))
    for name, m in rows.items():
        assert m["check"] is None and not m["peer_errors"] and m["times"]["corvid"] > 0, (name, m)


def test_a_part_is_stopped_at_its_deadline_and_what_it_started_goes_with_it():
    from benchmarks.gpu import _child_env, run_child

    env = _child_env(None)
    messages = []
    hangs = "import time; print('@@gpu-report {\"kind\": \"start\"}'); print('partial', end='', flush=True); time.sleep(60)"
    res = run_child([sys.executable, "-c", hangs], 2, env, on_message=messages.append)
    assert res.timed_out and res.rc is None and res.seconds < 10
    assert messages == [{"kind": "start"}] and res.log == ["partial"]  # (read after the kill)
    lingers = "import subprocess; subprocess.Popen(['sleep', '60']); print('done')"
    res = run_child([sys.executable, "-c", lingers], 30, env)
    assert not res.timed_out and res.rc == 0 and res.log == ["done"] and res.seconds < 10


def test_the_report_names_the_given_commit_when_git_disagrees(monkeypatch):
    """A lent GPU machine got the working tree with a stale .git: ``$CORVID_COMMIT`` names the
    commit, and git's answer is shown beside it rather than instead of it."""
    import subprocess

    from benchmarks import gpu

    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=gpu.ROOT, capture_output=True,
                          text=True).stdout.strip()
    if not head:
        pytest.skip("not a git checkout")
    monkeypatch.setenv("CORVID_COMMIT", head[:7])
    assert gpu._git_commit().startswith(head)
    monkeypatch.setenv("CORVID_COMMIT", "0123456")
    assert gpu._git_commit().startswith("0123456 ($CORVID_COMMIT; git in this copy says " + head)
