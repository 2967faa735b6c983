"""What corvid sees on this machine, for users and bug reports: ``python -m corvid.info`` or
``cv.show_config()`` (in the spirit of ``np.show_config()`` and ``jax.print_environment_info()``).

It lists the versions (corvid, Python, numpy, ml_dtypes), the C compiler with its version and the
flags corvid builds kernels with, the vector width kernels are written with and where it comes
from (the compiler's target's widest, narrowed to what its tuning prefers), the cache sizes and
thread count the heuristics use, the measured roofline, the cache directory, and every device:
whether it starts here and, if not, why and what to install.

>>> info = environment(peak=False)
>>> info["corvid"] == cv.__version__ and "CPU" in info["devices"]
True
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any, TextIO

__all__ = ["environment", "show_config"]


def environment(peak: bool = True) -> dict[str, Any]:
    """What :func:`show_config` prints, as a dict. ``peak``: include the roofline, measuring it
    (a few seconds, once per machine: it is cached) when the cache does not hold it."""
    import ml_dtypes
    import numpy as np

    from . import __version__
    from .codegen.opt import cache_bytes, vector_bytes, vector_registers
    from .runtime.compiler import CompilerNotFoundError, cache_dir, find_toolchain
    from .runtime.device import _BACKENDS, get_device

    info: dict[str, Any] = {
        "corvid": __version__, "python": sys.version.split()[0], "platform": platform.platform(),
        "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__,
        "cpu": _cpu_model(),
        "cores": os.cpu_count(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }
    try:
        tc = find_toolchain()
        info["compiler"] = {"path": tc.cc, "version": tc.version, "flags": " ".join(tc.flags),
                            "openmp": tc.openmp, "libmvec": tc.libmvec,
                            "target_vector_bits": tc.target_vector_bits,
                            "preferred_vector_bits": tc.preferred_vector_bits}
    except CompilerNotFoundError as e:
        info["compiler"] = {"error": str(e)}
    info["vector"] = {"bytes": vector_bytes(), "registers": vector_registers()}
    info["caches"] = {f"L{n}": cache_bytes(n) for n in (1, 2, 3)}
    info["cache_dir"] = str(cache_dir())
    if peak:
        from .runtime.peak import cpu_peak

        p = cpu_peak()
        info["peak"] = {"gflops": p.gflops, "gbps": p.gbps, "widths": dict(p.widths)}
    devices: dict[str, str] = {}
    for name in _BACKENDS:
        if name == "NULL":
            continue
        try:
            dev = get_device(name)
            devices[name] = "starts"
            if hasattr(dev, "blas"):  # (CUDA: where its matrix products run)
                blas = dev.blas()
                devices[name] += (f"; matrix products: cuBLASLt {blas.lt.version}" if blas is not None else
                                  f"; matrix products: corvid's own kernels ({dev.blas_error})")
                devices[name] += ("; bfloat16 attention: tensor cores" if dev.attention_tensor_cores else
                                  f"; bfloat16 attention: float32 kernels ({dev.attention_tc_error})")
        except (ImportError, RuntimeError, OSError) as e:  # (each names what to install)
            devices[name] = f"does not start: {e}"
    info["devices"] = devices
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                field, _, value = line.partition(":")
                if field.strip().lower() in ("model name", "hardware"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# the chosen vector width's measured rate below this share of the fastest width's is a mismatch
# (a wrong width measured 17x slower; noise on a busy machine stays within 1.5x)
WIDTH_MARGIN = 0.6


def show_config(file: TextIO | None = None, peak: bool = True) -> None:
    """Print :func:`environment` as text (to ``file``, standard output by default)."""
    out = file or sys.stdout
    info = environment(peak)
    w = out.write
    w(f"corvid {info['corvid']}, Python {info['python']}, numpy {info['numpy']}, ml_dtypes {info['ml_dtypes']}\n")
    w(f"platform: {info['platform']}\n")
    w(f"CPU: {info['cpu']}, {info['cores']} cores (OMP_NUM_THREADS={info['OMP_NUM_THREADS'] or 'unset'})\n")
    cc = info["compiler"]
    if "error" in cc:
        w(f"C compiler: none ({cc['error']})\n")
    else:
        w(f"C compiler: {cc['path']} ({cc['version']}); OpenMP {'yes' if cc['openmp'] else 'no'}, "
          f"libmvec {'yes' if cc['libmvec'] else 'no'}\n  flags: {cc['flags']}\n")
        pref, target = cc["preferred_vector_bits"], cc["target_vector_bits"]
        w(f"  target's widest vectors: {f'{target} bits' if target else 'unknown'}; "
          f"tuning prefers vectors of: {f'{pref} bits' if pref else 'any width (not limited)'}\n")
    v = info["vector"]
    w(f"vectors kernels use: {v['bytes'] * 8} bits, {v['registers']} registers\n")
    w("caches: " + ", ".join(f"{k} {b >> 10} KiB" for k, b in info["caches"].items()) + "\n")
    if "peak" in info:
        w(f"roofline: {info['peak']['gflops']:.1f} GFLOP/s float32, {info['peak']['gbps']:.1f} GB/s read\n")
        widths = info["peak"]["widths"]
        if widths:
            w("  one core's multiply-adds by vector width: " + ", ".join(
                f"{b * 8} bits {g:.1f} GFLOP/s" for b, g in sorted(widths.items())) + "\n")
            best = max(widths, key=widths.get)
            chosen = widths.get(v["bytes"])
            if chosen is not None and chosen < WIDTH_MARGIN * widths[best]:
                w(f"  WARNING: kernels use {v['bytes'] * 8}-bit vectors, which run at {chosen / widths[best]:.0%} of "
                  f"{best * 8}-bit ones here: the compiler's flags and this CPU disagree; please report this "
                  "output (CORVID_CC_FLAGS adds flags)\n")
    w(f"cache directory: {info['cache_dir']}\n")
    w("devices:\n")
    for name, state in info["devices"].items():
        w(f"  {name}: {state}\n")


if __name__ == "__main__":
    show_config()
