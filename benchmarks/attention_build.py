"""The tensor-core attention kernels as ptxas builds them, without a GPU: ``python -m benchmarks.attention_build``.

For each variant of the three kernels (``corvid/render/cuda_attention.py``: ``variants``) at
GPT-2's shape (batch 8, 12 heads, 1024 tokens of 64, causal), as the CUDA device renders it: the
registers, spilled bytes and shared memory ptxas reports for sm_90 (``nvcc -Xptxas -v``, the
device's ``--fmad=false``), the PTX instruction count, and the warps an SM of a Hopper GPU holds
by registers, threads and shared memory. These say what a variant costs in occupancy; which one is
fastest only a GPU says (the GPU report's table of variants, or ``CORVID_BEAM`` on the device).
Needs ``nvcc`` (a CUDA toolkit); runs from the repository root.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile

REGISTERS = 65536  # per SM (sm_80 to sm_90)
THREADS = 2048  # resident threads per SM
SHARED = 233472  # bytes of shared memory per SM that blocks may use (228 KiB), 1 KiB reserved per block
ARCH = "sm_90"


def resident_warps(registers: int, threads: int, shared: int) -> int:
    """Warps an SM holds of a kernel of ``threads`` per block using ``registers`` per thread
    (allocated 8 at a time) and ``shared`` bytes per block."""
    by_registers = REGISTERS // (-(-registers // 8) * 8 * threads)
    by_shared = SHARED // (shared + 1024)
    return min(by_registers, THREADS // threads, by_shared, 32) * threads // 32


def _prelude() -> str:
    """The CUDA renderer's prelude with the host's <cstdint> instead of its own integer typedefs
    (NVRTC has no headers; nvcc's own header defines them)."""
    from corvid.render.cuda import CUDARenderer

    lines = CUDARenderer()._prelude().splitlines()
    return "#include <cstdint>\n" + "\n".join(x for x in lines if not x.startswith("typedef") and "uint64_t;" not in x)


def build(source: str, nvcc: str) -> dict:
    """ptxas's figures and the PTX instruction count of one kernel source."""
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/k.cu"
        with open(path, "w") as f:
            f.write(_prelude() + "\n" + source)
        out = subprocess.run([nvcc, "-cubin", f"-arch={ARCH}", "-fmad=false", "-w", "-Xptxas", "-v", "-o",
                              f"{tmp}/k.cubin", path], capture_output=True, text=True, check=True).stderr
        subprocess.run([nvcc, "-ptx", f"-arch={ARCH}", "-fmad=false", "-w", "-o", f"{tmp}/k.ptx", path],
                       capture_output=True, check=True)
        with open(f"{tmp}/k.ptx") as f:
            ptx = sum(1 for line in f if line.startswith("\t") and line.rstrip().endswith(";"))

    def number(pattern: str) -> int:
        found = re.search(pattern, out)
        return int(found.group(1)) if found else 0

    return {"registers": number(r"Used (\d+) registers"), "spilled": number(r"(\d+) bytes spill stores"),
            "shared": number(r"(\d+) bytes smem"), "ptx": ptx}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.attention_build", description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--head", type=int, default=64)
    args = p.parse_args(argv)
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("nvcc is not installed: these figures come from a CUDA toolkit's ptxas", file=sys.stderr)
        return 2
    from corvid.render import cuda_attention as CA

    b, h, t, d = 8, 12, args.tokens, args.head
    print(f"tensor-core attention at {b}x{h}x{t}x{d}, causal, {ARCH}: registers, spills and shared memory by ptxas")
    print(f"{'kernel':<8} {'variant':<34} {'blocks':>6} x {'thr':>3} {'regs':>5} {'spill':>5} {'smem':>6} {'ptx':>5}"
          f" {'warps/SM':>8}")
    for kind in ("fwd_tc", "dq_tc", "dkdv_tc"):
        shapes = [(b, h, t, d)] * 3 if kind == "fwd_tc" else [(b, h, t, d)] * 4 + [(b, h, t)] * 2
        params = {"kind": kind, "causal": True, "scale": d ** -0.5, "has_mask": False}
        for variant in CA.variants(kind, d, d):
            src, blocks, threads, _ = CA.render(f"attention_{kind}", params, shapes, {}, variant=variant)
            f = build(src, nvcc)
            print(f"{kind:<8} {str(variant):<34} {blocks:6d} x {threads:3d} {f['registers']:5d} {f['spilled']:5d} "
                  f"{f['shared']:6d} {f['ptx']:5d} {resident_warps(f['registers'], threads, f['shared']):8d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
