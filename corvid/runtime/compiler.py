"""Compile generated C kernels into shared libraries and load them with ctypes.

Entry point: :func:`compile_kernel`. Built libraries are cached in memory (per process) and on
disk under ``cache_dir()/kernels/<key[:2]>/<key>.so``, with a ``<key>.sha256`` sidecar holding
sha256 over the key and the library's bytes (so an entry copied under another key does not
verify). Writes are atomic (temp file in the same folder + ``os.replace``), so concurrent
processes building the same kernel cannot corrupt the cache.

What is trusted: the cache root and its folders must be directories of this user's that group
and others cannot write (never chmod-ed: one its owner made read-only stays read-only); when one
is not, one warning says why and the process uses a private temporary cache (mkdtemp, 0o700)
instead. An entry is opened without following links, checked on its descriptor (a regular file
of this user's, writable by no one else), hashed from the bytes read through that descriptor,
and loaded through it (``/proc/self/fd``): the verified file is the loaded one even if the path
is swapped in between. An entry that fails any check is deleted and rebuilt.

How many libraries stay loaded: the in-memory cache keeps the ``CORVID_MAX_LOADED_KERNELS``
(default 1024) most recently used; one dropped from it is unloaded (dlclose) once no program
holds a function of it. Each loaded kernel library costs about 30 KiB of resident memory and 5
memory mappings (measured: +29.7 MiB and +5006 lines of /proc/self/maps for 1000 elementwise
kernels of distinct shapes), and Linux refuses new mappings past ``vm.max_map_count`` (65530 by
default): a process keeping every library would fail near 13000 of them. 1024 bounds the unused
ones to about 30 MiB and 5000 mappings; one dropped and needed again loads from the disk cache in
about 0.3 ms (a compile takes 50-80 ms).

Environment:
    CC                    preferred compiler (path or name on PATH)
    CORVID_CC_FLAGS       extra flags appended to the kernel flags (shell syntax)
    CORVID_CACHE_DIR      cache root (default $XDG_CACHE_HOME/corvid or ~/.cache/corvid)
    CORVID_NO_DISK_CACHE  "1" builds kernels in this process's private temporary cache instead
    CORVID_MAX_LOADED_KERNELS
                          libraries kept loaded while no program uses them (default 1024)
    OMP_WAIT_POLICY, GOMP_SPINCOUNT, KMP_BLOCKTIME
                          how idle OpenMP threads wait; when none is set, corvid's own OpenMP
                          runtime spins briefly then sleeps (see :func:`load_library`)
"""

from __future__ import annotations

import _ctypes
import atexit
import collections
import concurrent.futures
import ctypes
import functools
import hashlib
import itertools
import os
import pathlib
import platform
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

_TIMEOUT_S = 120
_MAX_LOADED_DEFAULT = 1024

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


# an OpenMP reduction of complex numbers: clang implements it with a generic __atomic_compare_exchange,
# which lives in libatomic (a kernel built without -latomic failed to load)
_PROBE_ATOMIC = (
    "float _Complex corvid_probe(const float _Complex* x, int n) {\n"
    "  float _Complex acc = 1;\n"
    "#pragma omp parallel for reduction(*:acc)\n"
    "  for (int i = 0; i < n; i++) acc *= x[i];\n"
    "  return acc;\n"
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
    # the widest vector (bits) the compiler's tuning for these flags prefers (gcc's
    # -mprefer-vector-width: 256 for -march=rocketlake and skylake-avx512); None when it does not say
    preferred_vector_bits: int | None = None
    # the widest vectors the target the flags select has (bits: 512 with AVX-512F, 256 with AVX,
    # 128 with SSE2 or NEON), read from the compiler's predefined macros; None when unknown
    target_vector_bits: int | None = None

    atomic: bool = False  # kernels link libatomic (clang's OpenMP reductions of complex numbers)

    @property
    def libs(self) -> tuple[str, ...]:
        """Libraries linked after the source file."""
        return (("-lmvec", "-lm") if self.libmvec else ("-lm",)) + (("-latomic",) if self.atomic else ())

    def key(self) -> str:
        """Stable hash of everything that determines the generated machine code."""
        parts = [self.cc, self.version, *self.flags, *self.libs, _cpu_identity()]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class CompiledLib:
    """A loaded kernel library; ``path`` is the cache entry (.so) it was verified and loaded from.

    The library stays loaded while this object or any function taken from it is alive."""

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


_GCC_ONLY = frozenset({"-fvect-cost-model=dynamic", "-fno-tree-loop-if-convert"})


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
    if "clang" in version.lower():  # (clang rejects gcc's vectorizer options; it has neither problem)
        head = tuple(f for f in head if f not in _GCC_ONLY)
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
        atomic = "clang" in version.lower() and omp_flags == ("-fopenmp",) and \
            not _probe(cc, flags, ["-lm"], _PROBE_ATOMIC, folder, "omp-complex") and \
            _probe(cc, flags, ["-lm", "-latomic"], _PROBE_ATOMIC, folder, "atomic")
    openmp = omp_flags == ("-fopenmp",)
    preferred, target = _preferred_vector_bits(cc, flags + extra), _target_vector_bits(cc, flags + extra)
    if target is not None and preferred is not None and preferred < target and \
            not any(f.startswith("-mprefer-vector-width") for f in extra) and \
            _wider_vectors_pay(cc, version, flags + extra, preferred, target):
        flags += (f"-mprefer-vector-width={target}",)
        preferred = _preferred_vector_bits(cc, flags + extra)
    return Toolchain(cc=cc, version=version, openmp=openmp, libmvec=libmvec, atomic=atomic,
                     flags=flags + extra, preferred_vector_bits=preferred, target_vector_bits=target)


# how much faster (one core's multiply-adds) the target's widest vectors must be than those the
# tuning prefers for corvid to ask for them
WIDER_VECTORS_GAIN = 1.3


def _wider_vectors_pay(cc: str, version: str, flags: tuple[str, ...], preferred: int, target: int) -> bool:
    """Whether kernels run faster with the target's widest vectors than with the narrower ones the
    compiler's tuning prefers, measured: one core's rate of vector multiply-adds, ``preferred``
    bits wide as the flags build them, against ``target`` bits wide with
    ``-mprefer-vector-width=<target>`` (:data:`WIDER_VECTORS_GAIN` or more: yes).

    gcc 12 tunes an Intel AVX-512 core (-march=native: rocketlake, sapphirerapids...) for 256-bit
    vectors, which kept corvid's kernels to 256 bits: on one such 2-core Xeon 64-byte vectors did
    248 GFLOP/s per core against 134, and a 1024^2 float32 matmul took 7.1 ms instead of 15.1
    (numpy: 6.1). Cores that split 512-bit work in two (AMD's Zen 4), or that slow their clock
    under it, gain little here and keep the tuning's width. The answer is kept in the cache
    folder (``vector_width.json``, keyed by compiler, flags and CPU) and measured once per machine
    (about 0.3 s); it is read as the peak figures are (:mod:`corvid.runtime.peak`)."""
    import json

    from .peak import _read_table, _source

    key = hashlib.sha256("\0".join([cc, version, *flags, str(preferred), str(target), _cpu_identity()]).encode()).hexdigest()
    try:
        path: pathlib.Path | None = cache_dir() / "vector_width.json"
    except Exception:  # noqa: BLE001 -- no usable cache folder: measure every time
        path = None
    table = _read_table(path) if path is not None else {}
    if isinstance(table.get(key), bool):
        return table[key]
    wide = f"-mprefer-vector-width={target}"
    with tempfile.TemporaryDirectory(prefix="corvid-probe-") as tmp:
        rates = []
        for bits, extra in ((preferred, ()), (target, (wide,))):
            stem = f"width{bits}"
            if not _probe(cc, flags + extra, ["-lm"], _source(bits // 8, True), pathlib.Path(tmp), stem):
                return False
            fn = load_library(pathlib.Path(tmp) / f"{stem}.so").corvid_peak_flops
            fn.argtypes, fn.restype = [ctypes.c_longlong, ctypes.c_int, ctypes.c_void_p], None
            out = (ctypes.c_float * 1)()
            fn(1 << 12, 1, out)
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                fn(1 << 18, 1, out)
                best = min(best, time.perf_counter() - t0)
            rates.append(bits / best)
    pays = rates[1] >= WIDER_VECTORS_GAIN * rates[0]
    if path is not None:
        table[key] = pays
        try:
            _write_private(path, json.dumps(table).encode())
        except OSError:  # (a full disk: measured again next time)
            pass
    return pays


def _ask(cc: str, flags: tuple[str, ...], *query: str) -> list[str]:
    """The lines the compiler prints for ``query`` with the kernels' ``flags`` (no input); [] if it
    cannot answer."""
    try:
        proc = subprocess.run([cc, *[f for f in flags if f != "-shared"], *query], input="",
                              capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return proc.stdout.splitlines()


def _target_vector_bits(cc: str, flags: tuple[str, ...]) -> int | None:
    """The widest vector registers of the target ``flags`` select, from the macros the compiler
    predefines (``-dM -E``): what the kernels are compiled for, which is not always the CPU's
    (``CORVID_CC_FLAGS="-march=x86-64-v3"`` on an AVX-512 CPU builds AVX2 code). gcc and clang."""
    macros = {line.split()[1] for line in _ask(cc, flags, "-dM", "-E", "-x", "c", "-") if line.startswith("#define ")}
    for macro, bits in (("__AVX512F__", 512), ("__AVX__", 256), ("__SSE2__", 128), ("__ARM_NEON", 128)):
        if macro in macros:
            return bits
    return None


def _preferred_vector_bits(cc: str, flags: tuple[str, ...]) -> int | None:
    """The vector width gcc's tuning prefers for ``flags`` (``-Q --help=target`` reports its
    ``-mprefer-vector-width``), or None where the compiler does not say (clang) or prefers none.

    On an Intel Xeon with AVX-512 ``-march=native`` is rocketlake, whose tuning prefers 256-bit
    vectors: gcc then splits every 64-byte vector operation the renderer writes, and a 1024^2
    matmul ran at 15 GFLOP/s (reproduced on a Zen 4 with ``-mprefer-vector-width=256``: 435 ->
    15.4 GFLOP/s). The renderer's vectors follow this width instead (:func:`corvid.codegen.opt.vector_bytes`)."""
    for line in _ask(cc, flags, "-Q", "--help=target"):
        parts = line.split()
        if len(parts) == 2 and parts[0] == "-mprefer-vector-width=":
            return int(parts[1]) if parts[1].isdigit() else None
    return None


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


# --- the cache folders ---------------------------------------------------------------------------------
def _euid() -> int | None:
    """This process's effective uid; None where files have no POSIX owners (Windows)."""
    return os.geteuid() if hasattr(os, "geteuid") else None


def _dir_problem(path: pathlib.Path, *, parents: bool = False) -> str | None:
    """Why ``path`` cannot hold cache files, or None: it is created (mode 0o700, with its parents
    when ``parents``) if missing, and must then be a directory owned by this user that group and
    others cannot write and that the user has not made read-only. Never changes its mode: a
    directory the user made read-only stays so. The root (``parents``) may be a symbolic link to
    such a directory; folders below it may not."""
    try:
        path.mkdir(mode=0o700, parents=parents)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"it cannot be created ({exc.strerror or exc})"
    try:
        st = os.stat(path) if parents else os.lstat(path)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    mode, euid = stat.S_IMODE(st.st_mode), _euid()
    if euid is not None and st.st_uid != euid:
        return f"it is owned by uid {st.st_uid}, not by this user (uid {euid})"
    if euid is not None and mode & 0o022:
        return f"group or others may write to it (mode {mode:o})"
    # the mode bit as well as access(): root may write anywhere, but a folder its owner made
    # read-only is a request to leave it alone
    if not mode & stat.S_IWUSR or not os.access(path, os.W_OK | os.X_OK):
        return f"it is read-only (mode {mode:o})"
    return None


def _private_dir(path: pathlib.Path) -> pathlib.Path:
    """``path``, created (mode 0o700, with its parents) if missing.

    Raises PermissionError if it is not a directory of this user's that only the user can write
    (see :func:`_dir_problem`); its mode is never changed."""
    problem = _dir_problem(path, parents=True)
    if problem is not None:
        raise PermissionError(f"{path}: {problem}")
    return path


def _configured_root() -> pathlib.Path:
    """The cache root the environment asks for (see the module docstring)."""
    if os.environ.get("CORVID_CACHE_DIR"):
        root = pathlib.Path(os.environ["CORVID_CACHE_DIR"])
    elif os.environ.get("XDG_CACHE_HOME"):
        root = pathlib.Path(os.environ["XDG_CACHE_HOME"]) / "corvid"
    else:
        root = pathlib.Path.home() / ".cache" / "corvid"
    return root.expanduser().absolute()


_dirs_lock = threading.Lock()
_unusable_roots: set[pathlib.Path] = set()  # configured roots found unusable (warned once each)
_temporary: pathlib.Path | None = None      # this process's temporary cache, once made
_keep_temporary = False                     # a failed compile's source is in it: kept at exit


def _temporary_cache() -> pathlib.Path:
    """This process's private temporary cache root (mkdtemp, mode 0o700), removed at exit unless
    a kernel failed to compile in it (its error message names the source file)."""
    global _temporary
    with _dirs_lock:
        if _temporary is None:
            _temporary = pathlib.Path(tempfile.mkdtemp(prefix="corvid-cache-"))
            atexit.register(_remove_temporary_cache, _temporary, os.getpid())
        return _temporary


def _remove_temporary_cache(path: pathlib.Path, owner_pid: int) -> None:
    # (a forked child that exits normally runs its parent's atexit handlers: not its folder)
    if os.getpid() == owner_pid and not _keep_temporary:
        shutil.rmtree(path, ignore_errors=True)


def _cache_folder(*parts: str) -> pathlib.Path:
    """``cache_dir() / parts...``, each folder checked (created if missing) by :func:`_dir_problem`.

    The first time a configured root or a folder below it is unusable, this process warns once
    (saying why and how to fix it) and uses its private temporary cache from then on."""
    root = _configured_root()
    if root not in _unusable_roots:
        path, problem = root, _dir_problem(root, parents=True)
        for part in parts:
            if problem is not None:
                break
            path = path / part
            problem = _dir_problem(path)
        if problem is None:
            return path
        with _dirs_lock:
            first = root not in _unusable_roots
            _unusable_roots.add(root)
        if first:
            where = "" if path == root else f"its folder {path.relative_to(root)}: "
            warnings.warn(
                f"corvid: not using the cache directory {root}: {where}{problem}. Kernels compiled "
                f"by this process go to a private temporary cache ({_temporary_cache()}) and are not "
                "reused by later runs. To fix it, set CORVID_CACHE_DIR to a directory that you own "
                "and that only you can write, or make this one so (chown; chmod 700).", stacklevel=3)
    path = _temporary_cache()
    for part in parts:
        path = _private_dir(path / part)
    return path


def cache_dir() -> pathlib.Path:
    """The corvid cache root (kernels live in its ``kernels`` folder, the beam search's results
    in ``search.sqlite``): ``CORVID_CACHE_DIR``, else ``$XDG_CACHE_HOME/corvid``, else
    ``~/.cache/corvid``, created with mode 0o700 if missing.

    If that directory is not this user's, group or others can write to it, or it is read-only,
    it is left untouched: a warning says why, and this process uses a private temporary cache
    instead (see :func:`_cache_folder`)."""
    return _cache_folder()


# --- cache files --------------------------------------------------------------------------------------
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


def _file_problem(st: os.stat_result) -> str | None:
    """Why a file with status ``st`` is not to be trusted, or None: it must be a regular file
    owned by this user that group and others cannot write."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    euid = _euid()
    if euid is not None and st.st_uid != euid:
        return f"owned by uid {st.st_uid}, not by this user (uid {euid})"
    if euid is not None and st.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _is_private_file(path: pathlib.Path) -> bool:
    """A regular file (not a link) owned by us that neither group nor others can write."""
    return _file_problem(os.lstat(path)) is None


# O_NOFOLLOW: a link planted in place of an entry is refused; O_NONBLOCK: so is a FIFO (opening
# one for reading would wait for a writer)
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))


def _open_private(path: pathlib.Path) -> int:
    """A read-only descriptor of ``path``, checked after opening (so the checked file is the open
    one) by :func:`_file_problem`. Raises OSError (PermissionError when the check fails)."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        problem = _file_problem(os.fstat(fd))
        if problem is not None:
            raise PermissionError(f"{path}: {problem}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_fd(fd: int) -> bytes:
    with open(fd, "rb", closefd=False) as f:
        return f.read()


def _entry_digest(key: str, data: bytes) -> str:
    """The sidecar of the entry ``key`` with library bytes ``data``: sha256 over both, so that an
    entry's .so and sidecar copied under another key do not verify there."""
    return hashlib.sha256(key.encode() + b"\0" + data).hexdigest()


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

    The library is loaded from its temp name (through the descriptor whose bytes the sidecar
    covers) before being moved into place, so a concurrent process replacing or discarding the
    entry cannot affect us. Raises CompileError if the compiler fails or the result does not load.
    """
    global _keep_temporary
    src = folder / f"{key}.c"
    _write_private(src, source.encode())
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{key}.", suffix=".so")
    os.close(fd)
    try:
        cmd = [toolchain.cc, *toolchain.flags, "-o", tmp, str(src), *toolchain.libs]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc = None
        if proc is None or proc.returncode != 0:
            if _temporary is not None and folder.is_relative_to(_temporary):
                _keep_temporary = True
            detail = f"compiler timed out after {_TIMEOUT_S} s" if proc is None else proc.stderr or proc.stdout
            raise _compile_error(name, src, detail)
        os.chmod(tmp, 0o600)  # the linker recreates the output with default permissions
        fd = _open_private(pathlib.Path(tmp))
        try:
            data = _read_fd(fd)
            try:
                handle = _dlopen_fd(fd, data, folder)
            except OSError as exc:
                raise _compile_error(name, src, f"compiled library failed to load: {exc}") from None
        finally:
            os.close(fd)
        _write_private(folder / f"{key}.sha256", _entry_digest(key, data).encode())
        os.replace(tmp, folder / f"{key}.so")
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return CompiledLib(handle, folder / f"{key}.so")


def load_cached(path: str | os.PathLike) -> CompiledLib:
    """Load the cache entry ``path`` (``<folder>/<key>.so``, with its ``<key>.sha256``) if it
    verifies: both files are regular, this user's and writable by no one else, and the sidecar
    holds :func:`_entry_digest` of the key and the library's bytes. The library is read once,
    through one descriptor, and loaded through that same descriptor: a file swapped in after the
    check is not the one loaded.

    Raises OSError (FileNotFoundError for a missing file, PermissionError for a foreign or
    writable one, plain OSError for a checksum mismatch or a library that does not load)."""
    so = pathlib.Path(path)
    key, folder = so.stem, so.parent
    fd = _open_private(folder / f"{key}.sha256")
    try:
        expected = os.read(fd, 256).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    fd = _open_private(so)
    try:
        data = _read_fd(fd)
        if _entry_digest(key, data) != expected:
            raise OSError(f"{so}: the checksum in its sidecar does not match (corrupt, or another entry's)")
        return CompiledLib(_dlopen_fd(fd, data, folder), so)
    finally:
        os.close(fd)


def _load_cached(folder: pathlib.Path, key: str) -> CompiledLib | None:
    """The disk entry ``key`` if it verifies (:func:`load_cached`); a missing one is None, and
    one that does not verify is deleted (it is rebuilt) and None."""
    try:
        return load_cached(folder / f"{key}.so")
    except FileNotFoundError:
        return None  # not cached yet, or another process is writing it: rebuilt either way
    except OSError:
        (folder / f"{key}.so").unlink(missing_ok=True)
        (folder / f"{key}.sha256").unlink(missing_ok=True)
        return None


# --- loading and unloading ----------------------------------------------------------------------------
_PROC_FD = os.path.isdir("/proc/self/fd")
_load_names = itertools.count(1)
_dlclose = getattr(_ctypes, "dlclose", None) or getattr(_ctypes, "FreeLibrary", None)


def _dlopen_fd(fd: int, data: bytes, folder: pathlib.Path) -> ctypes.CDLL:
    """Load the library open as ``fd`` (whose bytes are ``data``), unloaded when unused.

    Where the system has ``/proc/self/fd`` (Linux), the loader opens the very file of ``fd``;
    elsewhere it loads a private copy of ``data``, made in ``folder`` (the cache's own: a
    ``noexec`` /tmp is no obstacle) and removed once loaded. Either way under a name never used
    before in this process: glibc's dlopen returns an already loaded library whose name matches
    without opening the file, so loading ``/proc/self/fd/5`` for a second library while the first
    one loaded through fd 5 is still in memory would hand back the first. The ``/proc`` path is
    spelled uniquely by a counter written in binary as ``/`` (1) and ``./`` (0) segments, which the
    kernel's path lookup skips (``/proc/self/fd//./5``): a symbolic link per load would do the same
    at 100 us more (two metadata writes on ext4, measured here).

    The library is closed (dlclose) when the ctypes object, and with it every function pointer
    taken from it (each holds its library), is garbage: never while a caller can still call in."""
    count = next(_load_names)
    if _PROC_FD:
        lib = load_library("/proc/self/fd/" + format(count, "b").replace("0", "./").replace("1", "/") + str(fd))
    else:
        name = folder / f".load-{os.getpid()}-{count}.so"
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
        try:
            with open(out, "wb") as f:
                f.write(data)
            lib = load_library(name)
        finally:
            name.unlink(missing_ok=True)
    if _dlclose is not None:
        # not at exit: a daemon thread may still be running a kernel while the interpreter stops
        weakref.finalize(lib, _dlclose, lib._handle).atexit = False
    return lib


def max_loaded_kernels() -> int:
    """How many compiled libraries the in-memory cache keeps loaded (``CORVID_MAX_LOADED_KERNELS``,
    default 1024; see the module docstring). Raises ValueError for a value that is not an
    integer of at least 1."""
    raw = os.environ.get("CORVID_MAX_LOADED_KERNELS", "").strip()
    if not raw:
        return _MAX_LOADED_DEFAULT
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ValueError(f"CORVID_MAX_LOADED_KERNELS must be an integer of at least 1, got {raw!r}")
    return limit


# key -> library, least recently used first; at most max_loaded_kernels() entries. A library
# dropped from here stays loaded while a program still holds a function of it.
_loaded: collections.OrderedDict[str, CompiledLib] = collections.OrderedDict()
_pending: dict[str, concurrent.futures.Future] = {}  # key -> the build under way (its waiters)
_lock = threading.Lock()  # guards _loaded and _pending


def _clear_memory_cache() -> None:
    """Forget loaded libraries (for tests); the disk cache is untouched. A library no program
    holds is unloaded."""
    with _lock:
        _loaded.clear()


def _obtain(toolchain: Toolchain, source: str, name: str, key: str) -> CompiledLib:
    """The library ``key`` from the disk cache if it verifies there, else built into it."""
    if os.environ.get("CORVID_NO_DISK_CACHE", "") not in ("", "0"):
        folder = _private_dir(_temporary_cache() / "kernels" / key[:2])
    else:
        folder = _cache_folder("kernels", key[:2])
    return _load_cached(folder, key) or _build(toolchain, source, name, folder, key)


def compile_kernel(source: str, name: str) -> CompiledLib:
    """Compile C ``source`` (kernel ``name``, used in errors) and return it loaded.

    The same source yields the same CompiledLib object while it is among the
    :func:`max_loaded_kernels` most recently used. Safe from several threads: one of them loads
    or builds a given source, the others wait for it and share its result (or its error).
    Raises CompilerNotFoundError (no compiler) or CompileError (compiler failed).
    """
    toolchain = find_toolchain()
    key = hashlib.sha256((source + toolchain.key()).encode()).hexdigest()
    limit = max_loaded_kernels()
    with _lock:
        lib = _loaded.get(key)
        if lib is not None:
            _loaded.move_to_end(key)
            return lib
        pending = _pending.get(key)
        if pending is None:
            pending = _pending[key] = concurrent.futures.Future()
            ours = True
        else:
            ours = False
    if not ours:
        return pending.result()
    try:
        lib = _obtain(toolchain, source, name, key)
    except BaseException as exc:
        with _lock:
            del _pending[key]
        pending.set_exception(exc)
        raise
    with _lock:
        del _pending[key]
        _loaded[key] = lib
        while len(_loaded) > limit:
            _loaded.popitem(last=False)
    pending.set_result(lib)
    return lib
