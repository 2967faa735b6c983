"""Compile generated C kernels into shared libraries and load them with ctypes.

Entry point: :func:`compile_kernel`. Built libraries are cached in memory (per
process) and on disk under ``cache_dir()/kernels``; a disk entry is only used
after its sha256 sidecar, ownership and permissions check out, otherwise it is
rebuilt. Writes are atomic (temp file in the same folder + ``os.replace``), so
concurrent processes building the same kernel cannot corrupt the cache.

Environment:
    CC                    preferred compiler (path or name on PATH)
    CORVID_CC_FLAGS       extra flags appended to the kernel flags (shell syntax)
    CORVID_CACHE_DIR      cache root (default $XDG_CACHE_HOME/corvid or ~/.cache/corvid)
    CORVID_NO_DISK_CACHE  "1" builds every kernel in a private temp dir instead
    OMP_WAIT_POLICY, GOMP_SPINCOUNT, KMP_BLOCKTIME
                          how idle OpenMP threads wait; when none is set, corvid's own OpenMP
                          runtime spins briefly then sleeps (see :func:`load_library`)
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import os
import pathlib
import platform
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass

_TIMEOUT_S = 120

# How long corvid's idle OpenMP threads spin before they sleep, in iterations of libgomp's spin
# loop: about 200-400 us on the 2-core EPYC of the benchmarks. A parallel kernel that finds its
# threads asleep pays 20-70 us to wake them (futex + IPI, slower in a VM), which is most of a small
# kernel's time: a training step runs dozens of kernels with Python in between (MLP step 1.28 ->
# 0.85 ms). A spin that never ends (OMP_WAIT_POLICY=active, or libgomp's default of several ms) takes
# a core from whatever runs next: another process, the C compiler, another library's thread pool.
_OMP_SPIN_ENV = {"GOMP_SPINCOUNT": "10000", "KMP_BLOCKTIME": "1"}  # libgomp (gcc), libomp (clang, ms)
_OMP_USER_ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
_load_lock = threading.Lock()
_STDERR_LINES = 40

_PROBE_BASIC = "int corvid_probe(int x) { return x + 1; }\n"
_PROBE_OPENMP = "#include <omp.h>\nint corvid_probe(void) { return omp_get_max_threads(); }\n"
_PROBE_MVEC = (
    '__attribute__((simd("notinbranch"))) float expf(float);\n'
    "void corvid_probe(float *x, int n) {\n"
    "#pragma omp simd\n"
    "    for (int i = 0; i < n; ++i) x[i] = expf(x[i]);\n"
    "}\n"
)


class CompilerNotFoundError(RuntimeError):
    """No working C compiler could be found."""


class CompileError(RuntimeError):
    """The C compiler rejected a generated kernel (a corvid bug)."""


@dataclass(frozen=True)
class Toolchain:
    """A probed C compiler and the flags used to build kernels with it.

    ``openmp``/``libmvec`` tell code generators whether ``#pragma omp parallel``
    and ``__attribute__((simd))`` libm declarations can be used.
    """

    cc: str
    version: str
    openmp: bool
    libmvec: bool
    flags: tuple[str, ...]

    @property
    def libs(self) -> tuple[str, ...]:
        """Libraries linked after the source file."""
        return ("-lmvec", "-lm") if self.libmvec else ("-lm",)

    def key(self) -> str:
        """Stable hash of everything that determines the generated machine code."""
        parts = [self.cc, self.version, *self.flags, *self.libs, _cpu_identity()]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class CompiledLib:
    """A loaded kernel library; ``path`` is the .so it was loaded from."""

    def __init__(self, handle: ctypes.CDLL, path: pathlib.Path) -> None:
        self.handle = handle
        self.path = path

    def function(self, fname: str, argtypes: Sequence[type]) -> ctypes._CFuncPtr:
        """Return a fresh ctypes function ``fname`` with ``argtypes`` and void result.

        Raises AttributeError if the library does not export ``fname``.
        """
        fn = self.handle[fname]  # indexing (unlike getattr) never shares the object
        fn.argtypes = list(argtypes)
        fn.restype = None
        return fn


@functools.cache
def _cpu_identity() -> str:
    """CPU model and feature flags: ``-march=native`` output depends on them."""
    try:
        lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    found: dict[str, str] = {}
    for line in lines:
        field, _, value = line.partition(":")
        field = field.strip().lower()
        if field in ("model name", "flags", "features"):
            found.setdefault(field, value.strip())
    if not found:
        return f"{platform.processor()}|{platform.machine()}"
    return "|".join([platform.machine(), *(found[k] for k in sorted(found))])


def load_library(path: str | os.PathLike) -> ctypes.CDLL:
    """``ctypes.CDLL(path)``, with corvid's OpenMP wait policy in the environment for the duration.

    An OpenMP runtime reads its environment once, when it loads, which is with the first library
    that links it. Setting the policy only around corvid's own loads (and only when the user has set
    none) gives corvid's thread pool its policy and leaves every other library's defaults alone:
    torch and OpenBLAS bring their own OpenMP runtimes, loaded before or after this one."""
    with _load_lock:  # (kernels load from several compile threads; the environment is process-wide)
        if any(k in os.environ for k in _OMP_USER_ENV):
            return ctypes.CDLL(str(path))
        os.environ.update(_OMP_SPIN_ENV)
        try:
            return ctypes.CDLL(str(path))
        finally:
            for k in _OMP_SPIN_ENV:
                os.environ.pop(k, None)


def _probe(cc: str, flags: Sequence[str], libs: Sequence[str], source: str,
           folder: pathlib.Path, stem: str) -> bool:
    """True if ``source`` compiles, links into a shared library and loads."""
    src, out = folder / f"{stem}.c", folder / f"{stem}.so"
    src.write_text(source)
    try:
        proc = subprocess.run([cc, *flags, "-o", str(out), str(src), *libs],
                              capture_output=True, timeout=_TIMEOUT_S)
        if proc.returncode != 0:
            return False
        load_library(out)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return True


def _probe_toolchain(cc: str, extra: tuple[str, ...]) -> Toolchain | None:
    """Probe one compiler; None if it cannot build a trivial shared library."""
    try:
        proc = subprocess.run([cc, "--version"], capture_output=True, text=True,
                              timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    version = (proc.stdout.splitlines() or [""])[0].strip()
    # -O2 with the full vectorizer rather than -O3: gcc 12.2's -O3 miscompiles some gated
    # broadcast copies (a pad read under a condition, stored twice per element: a test in
    # tests/test_compiler.py keeps the case), and measured no faster on corvid's kernels.
    # ... and without loop if-conversion: gcc 12.2 -O2 also miscompiled a vmapped masked write
    # with it. The C renderer writes selects as bit masks, so loops vectorize without it.
    # ... and without contracting a*b + c on its own (-ffp-contract=off): where it contracts
    # depends on the code around an expression, so the same value computed in two kernels (a
    # max and its equality test) could differ in the last bit; the IR fuses explicitly
    # (codegen/passes.py, and sums of products in the C renderer).
    head = ("-O2", "-ftree-vectorize", "-fvect-cost-model=dynamic", "-fno-tree-loop-if-convert", "-ffp-contract=off",
            "-march=native", "-fPIC", "-shared")
    tail = ("-fno-math-errno",)
    with tempfile.TemporaryDirectory(prefix="corvid-probe-") as tmp:
        folder = pathlib.Path(tmp)
        if not _probe(cc, head + tail, ["-lm"], _PROBE_BASIC, folder, "basic"):
            return None
        omp_flags: tuple[str, ...] = ()
        for flag, source in (("-fopenmp", _PROBE_OPENMP), ("-fopenmp-simd", _PROBE_BASIC)):
            if _probe(cc, head + (flag,) + tail, ["-lm"], source, folder, flag[2:]):
                omp_flags = (flag,)
                break
        flags = head + omp_flags + tail
        libmvec = _probe(cc, flags, ["-lmvec", "-lm"], _PROBE_MVEC, folder, "mvec")
    openmp = omp_flags == ("-fopenmp",)
    return Toolchain(cc=cc, version=version, openmp=openmp, libmvec=libmvec,
                     flags=flags + extra)


@functools.cache
def find_toolchain() -> Toolchain:
    """Return the first working compiler among $CC, cc, gcc, clang (cached).

    Raises CompilerNotFoundError if none of them can build a shared library.
    """
    extra = tuple(shlex.split(os.environ.get("CORVID_CC_FLAGS", "")))
    names = [os.environ.get("CC", "").strip(), "cc", "gcc", "clang"]
    seen: set[str] = set()
    for name in filter(None, names):
        found = shutil.which(name)
        if found is None or os.path.realpath(found) in seen:
            continue
        seen.add(os.path.realpath(found))
        toolchain = _probe_toolchain(os.path.abspath(found), extra)
        if toolchain is not None:
            return toolchain
    raise CompilerNotFoundError(
        "no C compiler found; corvid compiles its kernels at run time. Install gcc "
        "or clang (e.g. `apt-get install gcc`), or set CC=/path/to/cc")


def _private_dir(path: pathlib.Path) -> pathlib.Path:
    """Create ``path`` (and parents) if needed and make it mode 0o700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def cache_dir() -> pathlib.Path:
    """The private (0o700) corvid cache root; kernels live in its ``kernels`` folder."""
    if os.environ.get("CORVID_CACHE_DIR"):
        root = pathlib.Path(os.environ["CORVID_CACHE_DIR"])
    elif os.environ.get("XDG_CACHE_HOME"):
        root = pathlib.Path(os.environ["XDG_CACHE_HOME"]) / "corvid"
    else:
        root = pathlib.Path.home() / ".cache" / "corvid"
    return _private_dir(root.expanduser().absolute())


def _write_private(path: pathlib.Path, data: bytes) -> None:
    """Atomically replace ``path`` with ``data``, mode 0o600."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def _is_private_file(path: pathlib.Path) -> bool:
    """A regular file owned by us that neither group nor others can write."""
    st = os.lstat(path)
    owned = not hasattr(os, "geteuid") or st.st_uid == os.geteuid()
    return stat.S_ISREG(st.st_mode) and owned and not st.st_mode & 0o022


def _compile_error(name: str, src: pathlib.Path, detail: str) -> CompileError:
    lines = detail.strip().splitlines()
    if len(lines) > _STDERR_LINES:
        lines = lines[:_STDERR_LINES] + [f"... ({len(lines) - _STDERR_LINES} more lines)"]
    return CompileError(
        f"failed to compile corvid kernel {name!r}; its source is saved at {src}\n"
        + "\n".join(lines)
        + "\nThis is a bug in corvid: please report this at the corvid issue tracker "
        "with that source file.")


def _build(toolchain: Toolchain, source: str, name: str, folder: pathlib.Path,
           key: str) -> CompiledLib:
    """Compile ``source`` into ``folder/<key>.so`` (+ .c and .sha256) and load it.

    The library is loaded from its temp name before being moved into place, so
    a concurrent process replacing or discarding the entry cannot affect us.
    Raises CompileError if the compiler fails or the result does not load.
    """
    src = folder / f"{key}.c"
    _write_private(src, source.encode())
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{key}.", suffix=".so")
    os.close(fd)
    try:
        cmd = [toolchain.cc, *toolchain.flags, "-o", tmp, str(src), *toolchain.libs]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise _compile_error(name, src, f"compiler timed out after {_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            raise _compile_error(name, src, proc.stderr or proc.stdout)
        os.chmod(tmp, 0o600)  # the linker recreates the output with default permissions
        digest = hashlib.sha256(pathlib.Path(tmp).read_bytes()).hexdigest()
        try:
            handle = load_library(tmp)
        except OSError as exc:
            raise _compile_error(name, src, f"compiled library failed to load: {exc}") from None
        _write_private(folder / f"{key}.sha256", digest.encode())
        os.replace(tmp, folder / f"{key}.so")
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return CompiledLib(handle, folder / f"{key}.so")


def _load_cached(folder: pathlib.Path, key: str) -> CompiledLib | None:
    """Load a disk entry if intact and private; otherwise delete it and return None."""
    so, sidecar = folder / f"{key}.so", folder / f"{key}.sha256"
    try:
        if _is_private_file(so) and _is_private_file(sidecar):
            expected = sidecar.read_text().strip()
            if hashlib.sha256(so.read_bytes()).hexdigest() == expected:
                return CompiledLib(load_library(so), so)
    except OSError:
        pass  # missing file, unreadable, or dlopen failure: all mean "corrupt"
    so.unlink(missing_ok=True)
    sidecar.unlink(missing_ok=True)
    return None


_loaded: dict[str, CompiledLib] = {}


def _clear_memory_cache() -> None:
    """Forget loaded libraries (for tests); the disk cache is untouched."""
    _loaded.clear()


def compile_kernel(source: str, name: str) -> CompiledLib:
    """Compile C ``source`` (kernel ``name``, used in errors) and return it loaded.

    The same source always yields the same CompiledLib object within a process.
    Raises CompilerNotFoundError (no compiler) or CompileError (compiler failed).
    """
    toolchain = find_toolchain()
    key = hashlib.sha256((source + toolchain.key()).encode()).hexdigest()
    lib = _loaded.get(key)
    if lib is not None:
        return lib
    if os.environ.get("CORVID_NO_DISK_CACHE", "") not in ("", "0"):
        folder = pathlib.Path(tempfile.mkdtemp(prefix="corvid-kernel-"))
        lib = _build(toolchain, source, name, folder, key)  # failures keep the source
        atexit.register(shutil.rmtree, folder, True)
    else:
        folder = _private_dir(_private_dir(cache_dir() / "kernels") / key[:2])
        lib = _load_cached(folder, key) or _build(toolchain, source, name, folder, key)
    return _loaded.setdefault(key, lib)
